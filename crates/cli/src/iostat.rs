//! `strata iostat [POOL|POOL/VOLUME] [INTERVAL] [COUNT]`: I/O per volume in `zpool iostat`'s
//! shape. Each report is the difference of two samples of `GET /v1/stats` over the time
//! between them; the first report is since the daemon started (as iostat's first line is
//! since boot). One row per pool (its volumes added up, with its space), one per volume,
//! and with `-v` one per protocol under each volume. Latency percentiles of an interval
//! come from the difference of the two samples' histograms, not from the daemon's
//! since-start percentiles. `--json` prints each sample as it is taken, one per line.

use crate::client::{seg, Client, Failure};
use crate::units::human;
use crate::Out;
use std::collections::BTreeMap;
use std::time::Duration;
use strata_api::{IoClassStats, IoStats, PoolIoStats, VolumeIoStats};
use strata_stats::{HistogramSnapshot, P99};

pub struct Args {
    pub target: Option<String>,
    pub interval: Option<f64>,
    pub count: Option<u64>,
    pub verbose: bool,
}

fn sample(c: &Client, target: &Option<String>) -> Result<IoStats, Failure> {
    let query = match target.as_deref() {
        None => String::new(),
        Some(t) => match t.split_once('/') {
            Some((p, v)) if !p.is_empty() && !v.is_empty() => format!("?pool={}&volume={}", seg(p), seg(v)),
            Some(_) => return Err(Failure::usage(format!("{t:?} is not POOL or POOL/VOLUME"))),
            None => format!("?pool={}", seg(t)),
        },
    };
    c.get(&format!("/v1/stats{query}"))
}

/// `strata iostat 5` and `strata iostat 5 3` mean an interval (and a count), as for
/// `zpool iostat`: a first argument that is a number is not a pool's name.
fn shift_numbers(mut a: Args) -> Result<Args, Failure> {
    let Some(first) = a.target.as_deref().and_then(|t| t.parse::<f64>().ok()) else { return Ok(a) };
    if a.count.is_some() {
        return Ok(a); // three arguments: the first is a target after all
    }
    a.count = match a.interval {
        Some(n) if n >= 1.0 && n.fract() == 0.0 => Some(n as u64),
        Some(n) => return Err(Failure::usage(format!("count {n}: give a whole number of reports"))),
        None => None,
    };
    a.interval = Some(first);
    a.target = None;
    Ok(a)
}

pub fn run(c: &Client, out: &Out, a: Args) -> Result<(), Failure> {
    let a = shift_numbers(a)?;
    if let Some(i) = a.interval {
        if !(i.is_finite() && i > 0.0) {
            return Err(Failure::usage(format!("interval {i}: give seconds above 0 (e.g. 1, 0.5)")));
        }
    }
    if a.count == Some(0) {
        return Err(Failure::usage("count 0: give at least 1 report"));
    }
    let reports = match (a.interval, a.count) {
        (None, _) => 1,
        (Some(_), Some(n)) => n,
        (Some(_), None) => u64::MAX,
    };
    let mut before: Option<IoStats> = None;
    for n in 0..reports {
        if n > 0 {
            std::thread::sleep(Duration::from_secs_f64(a.interval.expect("several reports need an interval")));
        }
        let now = sample(c, &a.target)?;
        if out.json {
            println!("{}", serde_json::to_string(&now).expect("API values serialise"));
        } else {
            print_report(&report(before.as_ref(), &now), a.verbose, n == 0);
        }
        before = Some(now);
    }
    Ok(())
}

/// What one row shows: rates over the interval and p99 latencies (µs).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Row {
    pub name: String,
    pub depth: usize,
    pub alloc: Option<u64>,
    pub free: Option<u64>,
    pub read_ops: f64,
    pub write_ops: f64,
    pub sync_ops: f64,
    pub read_bytes: f64,
    pub write_bytes: f64,
    pub read_p99_us: u64,
    pub write_p99_us: u64,
    /// Protocol rows, shown with -v.
    pub detail: bool,
}

/// The counters of one class over the interval: ops, bytes and the histogram.
#[derive(Default, Clone)]
struct Delta {
    ops: u64,
    bytes: u64,
    latency: Option<HistogramSnapshot>,
}

impl Delta {
    fn of(now: &IoClassStats, before: Option<&IoClassStats>) -> Delta {
        let hist = |c: &IoClassStats| {
            let pairs: Vec<(u64, u64)> = c.latency_us_buckets.iter().map(|b| (b[0], b[1])).collect();
            HistogramSnapshot::from_sparse(&pairs)
        };
        let h = hist(now);
        let (ops, bytes, latency) = match before {
            Some(b) => (now.ops.saturating_sub(b.ops), now.bytes.saturating_sub(b.bytes), h.since(&hist(b))),
            None => (now.ops, now.bytes, h),
        };
        Delta { ops, bytes, latency: Some(latency) }
    }

    fn add(&mut self, o: &Delta) {
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.latency = match (self.latency.take(), &o.latency) {
            (Some(a), Some(b)) => Some(a.plus(b)),
            (a, b) => a.or_else(|| b.clone()),
        };
    }

    fn p99(&self) -> u64 {
        self.latency.as_ref().map_or(0, |h| h.quantile(P99))
    }
}

#[derive(Default, Clone)]
struct Deltas {
    read: Delta,
    write: Delta,
    sync: Delta,
}

impl Deltas {
    fn of(now: &VolumeIoStats, before: Option<&VolumeIoStats>) -> Deltas {
        Deltas {
            read: Delta::of(&now.read, before.map(|b| &b.read)),
            write: Delta::of(&now.write, before.map(|b| &b.write)),
            sync: Delta::of(&now.sync, before.map(|b| &b.sync)),
        }
    }

    fn add(&mut self, o: &Deltas) {
        self.read.add(&o.read);
        self.write.add(&o.write);
        self.sync.add(&o.sync);
    }

    fn row(&self, name: String, depth: usize, seconds: f64) -> Row {
        let rate = |n: u64| n as f64 / seconds;
        Row {
            name,
            depth,
            read_ops: rate(self.read.ops),
            write_ops: rate(self.write.ops),
            sync_ops: rate(self.sync.ops),
            read_bytes: rate(self.read.bytes),
            write_bytes: rate(self.write.bytes),
            read_p99_us: self.read.p99(),
            write_p99_us: self.write.p99(),
            ..Default::default()
        }
    }
}

/// The rows of one report: `now` less `before` (or less nothing: since the daemon started).
pub fn report(before: Option<&IoStats>, now: &IoStats) -> Vec<Row> {
    let seconds = (now.uptime_seconds - before.map_or(0.0, |b| b.uptime_seconds)).max(1e-3);
    let key = |v: &VolumeIoStats| (v.pool.clone(), v.volume.clone(), v.protocol.clone());
    let earlier: BTreeMap<_, &VolumeIoStats> =
        before.into_iter().flat_map(|b| &b.volumes).map(|v| (key(v), v)).collect();
    // pool → volume → protocol → deltas
    let mut tree: BTreeMap<String, BTreeMap<String, BTreeMap<String, Deltas>>> = BTreeMap::new();
    for p in &now.pools {
        tree.entry(p.pool.clone()).or_default();
    }
    for v in &now.volumes {
        let d = Deltas::of(v, earlier.get(&key(v)).copied());
        tree.entry(v.pool.clone()).or_default().entry(v.volume.clone()).or_default().insert(v.protocol.clone(), d);
    }
    let pools: BTreeMap<&str, &PoolIoStats> = now.pools.iter().map(|p| (p.pool.as_str(), p)).collect();
    let mut rows = Vec::new();
    for (pool, volumes) in &tree {
        let mut total = Deltas::default();
        let mut below = Vec::new();
        for (volume, protocols) in volumes {
            let mut vol = Deltas::default();
            for d in protocols.values() {
                vol.add(d);
            }
            total.add(&vol);
            below.push(vol.row(format!("{pool}/{volume}"), 1, seconds));
            for (protocol, d) in protocols {
                below.push(Row { detail: true, ..d.row(protocol.clone(), 2, seconds) });
            }
        }
        let mut row = total.row(pool.clone(), 0, seconds);
        if let Some(p) = pools.get(pool.as_str()) {
            row.alloc = Some(p.allocated_bytes);
            row.free = Some(p.free_bytes);
        }
        rows.push(row);
        rows.extend(below);
    }
    rows
}

fn rate(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v < 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

fn latency(us: u64) -> String {
    match us {
        0 => "-".into(),
        1..=9_999 => format!("{us}us"),
        10_000..=9_999_999 => format!("{:.1}ms", us as f64 / 1e3),
        _ => format!("{:.1}s", us as f64 / 1e6),
    }
}

fn print_report(rows: &[Row], verbose: bool, header: bool) {
    if header {
        println!(
            "{:<28} {:>7} {:>7}  {:>7} {:>7} {:>7}  {:>8} {:>8}  {:>8} {:>8}",
            "", "capacity", "", "", "operations", "", "", "bandwidth", "", "p99"
        );
        println!(
            "{:<28} {:>7} {:>7}  {:>7} {:>7} {:>7}  {:>8} {:>8}  {:>8} {:>8}",
            "POOL/VOLUME", "ALLOC", "FREE", "READ", "WRITE", "SYNC", "READ", "WRITE", "READ", "WRITE"
        );
    }
    println!("{}", "-".repeat(28 + 17 + 25 + 19 + 19));
    for r in rows.iter().filter(|r| verbose || !r.detail) {
        let name = format!("{}{}", "  ".repeat(r.depth), r.name);
        println!(
            "{:<28} {:>7} {:>7}  {:>7} {:>7} {:>7}  {:>8} {:>8}  {:>8} {:>8}",
            name,
            r.alloc.map_or("-".into(), human),
            r.free.map_or("-".into(), human),
            rate(r.read_ops),
            rate(r.write_ops),
            rate(r.sync_ops),
            human(r.read_bytes as u64),
            human(r.write_bytes as u64),
            latency(r.read_p99_us),
            latency(r.write_p99_us),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(ops: u64, bytes: u64, latencies: &[u64]) -> IoClassStats {
        let mut h = HistogramSnapshot::default();
        latencies.iter().for_each(|&us| h.add(us, 1));
        IoClassStats {
            ops,
            bytes,
            latency_us_buckets: h.sparse().into_iter().map(|(a, b)| [a, b]).collect(),
            ..Default::default()
        }
    }

    fn vol(volume: &str, protocol: &str, write_ops: u64, write_latencies: &[u64]) -> VolumeIoStats {
        VolumeIoStats {
            pool: "p".into(),
            volume: volume.into(),
            protocol: protocol.into(),
            read: IoClassStats::default(),
            write: class(write_ops, write_ops * 4096, write_latencies),
            sync: class(write_ops / 2, 0, &[]),
            trim: IoClassStats::default(),
            other: IoClassStats::default(),
        }
    }

    #[test]
    fn leading_numbers_are_interval_and_count() {
        let args = |t: Option<&str>, i: Option<f64>, c: Option<u64>| Args {
            target: t.map(String::from),
            interval: i,
            count: c,
            verbose: false,
        };
        let a = shift_numbers(args(Some("5"), None, None)).unwrap();
        assert_eq!((a.target, a.interval, a.count), (None, Some(5.0), None));
        let a = shift_numbers(args(Some("2"), Some(3.0), None)).unwrap();
        assert_eq!((a.target, a.interval, a.count), (None, Some(2.0), Some(3)));
        let a = shift_numbers(args(Some("default/v"), Some(1.0), Some(2))).unwrap();
        assert_eq!((a.target.as_deref(), a.interval, a.count), (Some("default/v"), Some(1.0), Some(2)));
        assert!(shift_numbers(args(Some("2"), Some(0.5), None)).is_err());
    }

    #[test]
    fn a_report_is_the_difference_of_two_samples() {
        let slow = vec![5000; 10];
        let a = IoStats { uptime_seconds: 10.0, pools: vec![], volumes: vec![vol("v", "fuse", 100, &[50; 100])] };
        let mut later = vec![50; 100];
        later.extend(&slow);
        let b = IoStats {
            uptime_seconds: 12.0,
            pools: vec![],
            volumes: vec![vol("v", "fuse", 110, &later), vol("v", "nfs", 20, &[70; 20])],
        };
        let rows = report(Some(&a), &b);
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["p", "p/v", "fuse", "nfs"]);
        // fuse: 10 writes in 2 s, all slow; nfs: 20 new (it was not in the first sample).
        assert_eq!(rows[2].write_ops, 5.0);
        assert_eq!(rows[2].write_bytes, 5.0 * 4096.0);
        let slow_p99 = strata_stats::histogram::highest_of(strata_stats::histogram::bucket_of(5000));
        assert_eq!(rows[2].write_p99_us, slow_p99, "the interval's p99: the slow ones only");
        assert_eq!(rows[3].write_ops, 10.0);
        assert_eq!(rows[1].write_ops, 15.0, "the volume adds its protocols up");
        assert_eq!(rows[1].sync_ops, (5.0 + 10.0) / 2.0, "{:?}", rows[1]);
        assert_eq!(rows[0].write_ops, 15.0, "the pool adds its volumes up");
        // 10 slow of 30 in the interval: the volume's p99 is a slow one.
        assert!(rows[1].write_p99_us >= 5000, "{:?}", rows[1]);
        // Since the start: the first report divides by the uptime.
        let first = report(None, &a);
        assert_eq!(first[1].write_ops, 10.0);
        assert_eq!(first[1].write_p99_us, 50);
    }
}
