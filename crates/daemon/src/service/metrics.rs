//! `GET /metrics`: the volumes' I/O counters and the pools' figures in the OpenMetrics 1.0
//! text format (what Prometheus scrapes), written with `prometheus-client`.
//!
//! Nothing here is kept between scrapes: each one reads the counters (stats.rs) and
//! encodes them through a collector, so the I/O path never touches `prometheus-client`'s
//! own metric types (whose histograms take a lock per observation). Latency histograms are
//! re-bucketed from strata-stats' fine ones to the fixed bounds below, bucket-exact: a
//! bound that falls inside a fine bucket (width ≤ 1.6 % of its values) counts that bucket
//! as above it.
//!
//! Names (docs/observability.md): `strata_volume_io_{ops,bytes,errors}_total` and
//! `strata_volume_io_latency_seconds` with labels pool, volume, protocol, op;
//! `strata_pool_*` with label pool (and device, kind for device errors).

use super::stats::{PoolSample, VolumeSample};
use super::Daemon;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use strata_engine::pool::counters::{DurationCounts, COMMIT_BOUNDS_US};

/// Bounds (seconds) of the exported latency histograms: 10 µs (a cached read over FUSE) to
/// 10 s (an I/O stuck behind a failing device), about three per decade — what
/// `histogram_quantile` interpolates between.
const LATENCY_BOUNDS_US: [u64; 19] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];

/// The text of one scrape.
pub(crate) fn render(d: &Daemon) -> String {
    let mut registry = Registry::default();
    registry
        .register_collector(Box::new(Scrape { volumes: d.volume_samples(None, None), pools: d.pool_samples(None) }));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry).expect("writing to a String does not fail");
    out
}

struct Scrape {
    volumes: Vec<VolumeSample>,
    pools: Vec<PoolSample>,
}

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrape").field("volumes", &self.volumes.len()).field("pools", &self.pools.len()).finish()
    }
}

type Labels = Vec<(&'static str, String)>;

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, unit: Option<&Unit>, series: &[(Labels, u64)]) -> Res {
    let mut m = e.encode_descriptor(name, help, unit, MetricType::Counter)?;
    for (labels, v) in series {
        m.encode_family(labels)?.encode_counter::<NoLabelSet, u64, u64>(v, None)?;
    }
    Ok(())
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, unit: Option<&Unit>, series: &[(Labels, u64)]) -> Res {
    let mut m = e.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    for (labels, v) in series {
        m.encode_family(labels)?.encode_gauge(v)?;
    }
    Ok(())
}

/// A histogram series: sum (seconds), count, and counts per bucket (not cumulative) with
/// their upper bounds in seconds, the last +Inf.
struct HistogramSeries {
    labels: Labels,
    sum_seconds: f64,
    count: u64,
    buckets: Vec<(f64, u64)>,
}

fn histogram(e: &mut DescriptorEncoder, name: &str, help: &str, series: &[HistogramSeries]) -> Res {
    let mut m = e.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
    for s in series {
        m.encode_family(&s.labels)?.encode_histogram::<NoLabelSet>(s.sum_seconds, s.count, &s.buckets, None)?;
    }
    Ok(())
}

type Res = Result<(), std::fmt::Error>;

fn latency_series(labels: Labels, c: &strata_stats::ClassSnapshot) -> HistogramSeries {
    let mut buckets = Vec::with_capacity(LATENCY_BOUNDS_US.len() + 1);
    let mut below = 0;
    for &b in &LATENCY_BOUNDS_US {
        let at_most = c.latency.count_at_most(b);
        buckets.push((b as f64 / 1e6, at_most - below));
        below = at_most;
    }
    // The histogram's own count (not `ops`): a record racing with this scrape may be in one
    // and not yet the other, and a histogram's count must be its +Inf bucket.
    let count = c.latency.count();
    buckets.push((f64::INFINITY, count - below));
    HistogramSeries { labels, sum_seconds: c.latency_ns as f64 / 1e9, count, buckets }
}

fn commit_series(labels: Labels, d: &DurationCounts) -> HistogramSeries {
    let mut buckets: Vec<(f64, u64)> =
        COMMIT_BOUNDS_US.iter().zip(&d.buckets).map(|(&b, &n)| (b as f64 / 1e6, n)).collect();
    buckets.push((f64::INFINITY, d.buckets[COMMIT_BOUNDS_US.len()]));
    HistogramSeries { labels, sum_seconds: d.sum_us as f64 / 1e6, count: d.count(), buckets }
}

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder) -> Res {
        let mut ops = Vec::new();
        let mut bytes = Vec::new();
        let mut errors = Vec::new();
        let mut latency = Vec::new();
        for v in &self.volumes {
            for (class, c) in &v.classes {
                let labels: Labels = vec![
                    ("pool", v.pool.clone()),
                    ("volume", v.volume.clone()),
                    ("protocol", v.protocol.name().into()),
                    ("op", class.name().into()),
                ];
                ops.push((labels.clone(), c.ops));
                bytes.push((labels.clone(), c.bytes));
                errors.push((labels.clone(), c.errors));
                latency.push(latency_series(labels, c));
            }
        }
        let e = &mut e;
        counter(
            e,
            "strata_volume_io_ops",
            "Operations served, by volume, protocol and class (read, write, sync, trim, other)",
            None,
            &ops,
        )?;
        counter(e, "strata_volume_io", "Data carried by reads and writes", Some(&Unit::Bytes), &bytes)?;
        counter(e, "strata_volume_io_errors", "Operations answered with an error", None, &errors)?;
        histogram(
            e,
            "strata_volume_io_latency",
            "Time to serve an operation, from its arrival to its reply",
            &latency,
        )?;

        let pool = |p: &PoolSample| -> Labels { vec![("pool", p.name.clone())] };
        let each = |f: &dyn Fn(&PoolSample) -> u64| -> Vec<(Labels, u64)> {
            self.pools.iter().map(|p| (pool(p), f(p))).collect()
        };
        gauge(e, "strata_pool_size", "Usable size of the pool", Some(&Unit::Bytes), &each(&|p| p.status.size_bytes))?;
        gauge(
            e,
            "strata_pool_allocated",
            "Allocated (physical)",
            Some(&Unit::Bytes),
            &each(&|p| p.status.allocated_bytes),
        )?;
        gauge(e, "strata_pool_free", "Free", Some(&Unit::Bytes), &each(&|p| p.status.free_bytes))?;
        gauge(
            e,
            "strata_pool_available",
            "Available to volumes (free less reservations)",
            Some(&Unit::Bytes),
            &each(&|p| p.status.space.available_bytes),
        )?;
        gauge(
            e,
            "strata_pool_logical",
            "Data as written (before compression, dedup, zero elision)",
            Some(&Unit::Bytes),
            &each(&|p| p.status.space.logical_bytes),
        )?;
        gauge(e, "strata_pool_txg", "Last committed txg", None, &each(&|p| p.status.txg))?;
        gauge(
            e,
            "strata_pool_read_only",
            "1 when the pool refuses writes (latched after an I/O error, or opened read-only)",
            None,
            &each(&|p| u64::from(p.status.read_only)),
        )?;
        counter(
            e,
            "strata_pool_commits",
            "Commits that synced a txg since the pool was opened",
            None,
            &each(&|p| p.status.commits.count),
        )?;
        let commits: Vec<HistogramSeries> =
            self.pools.iter().map(|p| commit_series(pool(p), &p.counters.commit)).collect();
        histogram(e, "strata_pool_commit_duration", "Whole commits, from start to durable root", &commits)?;
        counter(
            e,
            "strata_pool_commit_written",
            "Bytes of new blocks (data and metadata) the commits wrote",
            Some(&Unit::Bytes),
            &each(&|p| p.counters.commit_bytes),
        )?;
        let locked: Vec<HistogramSeries> =
            self.pools.iter().map(|p| commit_series(pool(p), &p.counters.commit_locked)).collect();
        histogram(e, "strata_pool_commit_locked", "The part of each commit that held the pool's lock", &locked)?;
        counter(
            e,
            "strata_pool_log_blocks_written",
            "Intent-log blocks written",
            None,
            &each(&|p| p.status.log_blocks_written),
        )?;
        counter(
            e,
            "strata_pool_log_written",
            "Intent-log bytes written",
            Some(&Unit::Bytes),
            &each(&|p| p.status.log_bytes_written),
        )?;
        counter(
            e,
            "strata_pool_data_cache_hits",
            "Data records served from the data cache",
            None,
            &each(&|p| p.status.data_cache_hits),
        )?;
        counter(
            e,
            "strata_pool_data_cache_misses",
            "Data records the data cache did not hold (read from the devices)",
            None,
            &each(&|p| p.status.data_cache_misses),
        )?;
        counter(
            e,
            "strata_pool_metadata_cache_hits",
            "Metadata blocks served from the metadata cache",
            None,
            &each(&|p| p.status.metadata_cache_hits),
        )?;
        counter(
            e,
            "strata_pool_metadata_cache_misses",
            "Metadata blocks the metadata cache did not hold (read from the devices)",
            None,
            &each(&|p| p.status.metadata_cache_misses),
        )?;
        counter(
            e,
            "strata_pool_blocks_read",
            "Blocks read from the pool's devices",
            None,
            &each(&|p| p.status.blocks_read),
        )?;
        counter(
            e,
            "strata_pool_blocks_written",
            "Blocks written to the pool's devices",
            None,
            &each(&|p| p.status.blocks_written),
        )?;
        counter(
            e,
            "strata_pool_corruptions_detected",
            "Blocks that failed verification",
            None,
            &each(&|p| p.status.corruptions_detected),
        )?;
        let mut dev = Vec::new();
        for p in &self.pools {
            for d in &p.devices {
                for (kind, n) in [("read", d.read_errors), ("write", d.write_errors), ("checksum", d.checksum_errors)] {
                    dev.push((
                        vec![("pool", p.name.clone()), ("device", d.device.clone()), ("kind", kind.to_string())],
                        n,
                    ));
                }
            }
        }
        counter(
            e,
            "strata_pool_device_errors",
            "Device errors, by device and kind (read, write, checksum)",
            None,
            &dev,
        )?;
        Ok(())
    }
}

impl Daemon {
    pub(crate) fn metrics_text(&self) -> String {
        render(self)
    }
}
