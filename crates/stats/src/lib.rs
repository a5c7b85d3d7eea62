//! I/O statistics of the front ends: per volume, per protocol (FUSE, NFS, NBD, iSCSI) and
//! per class of operation, the operations, bytes and errors counted and the latency
//! recorded in a histogram (histogram.rs). The daemon reads them for `GET /metrics`,
//! `GET /v1/stats` and `strata iostat`.
//!
//! Cost on the I/O path: a front end is handed its volume's [`ProtocolStats`] once, when
//! the volume is mounted or exported (no look-up per I/O, no lock at all), and each
//! operation costs one `Instant::now()` pair and four relaxed atomic adds: three on a
//! counter shard of the calling thread (one of [`SHARDS`] cache-line-aligned shards, picked
//! per thread, so threads serving one volume do not bounce one line between cores) and one
//! on the histogram bucket of its latency. The unit test `record_costs_tens_of_ns` prints
//! what one record costs.
//!
//! Counters only grow (Prometheus counters) and live as long as the daemon: a snapshot is
//! a consistent-enough read of each atomic, not of all of them at once — an operation
//! racing with a snapshot can be in its count and not yet in its histogram. Readers that
//! need `count == sum(buckets)` (a Prometheus histogram) take the histogram's own count.
//!
//! Classes: `read`, `write`, `sync` (fsync/fdatasync, NFS COMMIT, NBD FLUSH, SCSI
//! SYNCHRONIZE CACHE), `trim` (NBD TRIM and WRITE_ZEROES, SCSI UNMAP and WRITE SAME, FUSE
//! fallocate punching a hole: space released or zeroed, no data carried — counted apart so
//! that a 1 GiB discard does not show as 1 GiB of writes) and `other` (metadata: lookups,
//! attributes, directories, NBD BLOCK_STATUS). Bytes are data carried: 0 for sync, trim
//! and other.

pub mod histogram;

pub use histogram::{Histogram, HistogramSnapshot, P50, P99, P999};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The front ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Fuse,
    Nfs,
    Nbd,
    Iscsi,
}

impl Protocol {
    pub const ALL: [Protocol; 4] = [Protocol::Fuse, Protocol::Nfs, Protocol::Nbd, Protocol::Iscsi];

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Fuse => "fuse",
            Protocol::Nfs => "nfs",
            Protocol::Nbd => "nbd",
            Protocol::Iscsi => "iscsi",
        }
    }

    pub fn parse(s: &str) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// Classes of operations (see the module comment for what each front end counts where).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpClass {
    Read,
    Write,
    Sync,
    Trim,
    Other,
}

impl OpClass {
    pub const ALL: [OpClass; 5] = [OpClass::Read, OpClass::Write, OpClass::Sync, OpClass::Trim, OpClass::Other];

    pub fn name(self) -> &'static str {
        match self {
            OpClass::Read => "read",
            OpClass::Write => "write",
            OpClass::Sync => "sync",
            OpClass::Trim => "trim",
            OpClass::Other => "other",
        }
    }
}

/// Counter shards per class. 8 covers the threads that serve one volume at once on the
/// machines we target (4 FUSE threads per mount by default, up to 16 NFS workers, which
/// then share shards two by two); each costs 128 bytes.
pub const SHARDS: usize = 8;

/// One thread's share of a class's counters, alone on its cache lines (128: two lines,
/// as adjacent-line prefetchers pair them).
#[derive(Default)]
#[repr(align(128))]
struct Shard {
    ops: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    latency_ns: AtomicU64,
}

fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    MINE.with(|m| *m)
}

#[derive(Default)]
struct ClassStats {
    shards: [Shard; SHARDS],
    latency: Histogram,
}

/// What a class counted, at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassSnapshot {
    pub ops: u64,
    pub bytes: u64,
    pub errors: u64,
    /// Sum of the latencies, for a Prometheus histogram's `_sum`.
    pub latency_ns: u64,
    pub latency: HistogramSnapshot,
}

/// The counters of one protocol on one volume: what a front end records into.
#[derive(Default)]
pub struct ProtocolStats {
    classes: [ClassStats; 5],
}

impl std::fmt::Debug for ProtocolStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProtocolStats { .. }")
    }
}

impl ProtocolStats {
    /// One operation of `class` that carried `bytes` of data, took `latency` and succeeded
    /// (`ok`) or failed.
    #[inline]
    pub fn record(&self, class: OpClass, bytes: u64, latency: Duration, ok: bool) {
        let c = &self.classes[class as usize];
        let s = &c.shards[shard_index()];
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        s.ops.fetch_add(1, Ordering::Relaxed);
        s.bytes.fetch_add(bytes, Ordering::Relaxed);
        s.latency_ns.fetch_add(ns, Ordering::Relaxed);
        if !ok {
            s.errors.fetch_add(1, Ordering::Relaxed);
        }
        // Rounded up: a sub-microsecond operation is 1 µs, never 0.
        c.latency.record(ns.div_ceil(1000));
    }

    /// Operations of every class so far (cheap: no histogram is read).
    pub fn ops_total(&self) -> u64 {
        self.classes.iter().flat_map(|c| c.shards.iter()).map(|s| s.ops.load(Ordering::Relaxed)).sum()
    }

    /// Operations of every class so far and their summed latency (ns), without the
    /// histograms: a rebuild's pace follows the clients' mean latency by it.
    pub fn ops_and_latency_ns(&self) -> (u64, u64) {
        let shards = self.classes.iter().flat_map(|c| c.shards.iter());
        shards.fold((0, 0), |(ops, ns), s| {
            (ops + s.ops.load(Ordering::Relaxed), ns.saturating_add(s.latency_ns.load(Ordering::Relaxed)))
        })
    }

    pub fn snapshot(&self, class: OpClass) -> ClassSnapshot {
        let c = &self.classes[class as usize];
        let mut out = ClassSnapshot { latency: c.latency.snapshot(), ..Default::default() };
        for s in &c.shards {
            out.ops += s.ops.load(Ordering::Relaxed);
            out.bytes += s.bytes.load(Ordering::Relaxed);
            out.errors += s.errors.load(Ordering::Relaxed);
            out.latency_ns = out.latency_ns.saturating_add(s.latency_ns.load(Ordering::Relaxed));
        }
        out
    }
}

/// A volume's counters, one [`ProtocolStats`] per protocol that has served it (made on
/// first use: a volume mounted over FUSE only never pays for the other three).
#[derive(Default)]
pub struct VolumeStats {
    protocols: [OnceLock<Arc<ProtocolStats>>; 4],
}

impl std::fmt::Debug for VolumeStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let used: Vec<&str> = self.in_use().map(|(p, _)| p.name()).collect();
        f.debug_struct("VolumeStats").field("protocols", &used).finish()
    }
}

impl VolumeStats {
    /// The counters of `p` on this volume, for a front end to record into.
    pub fn protocol(&self, p: Protocol) -> Arc<ProtocolStats> {
        self.protocols[p as usize].get_or_init(Default::default).clone()
    }

    /// The protocols that have served the volume, with their counters.
    pub fn in_use(&self) -> impl Iterator<Item = (Protocol, &ProtocolStats)> {
        Protocol::ALL.into_iter().filter_map(|p| self.protocols[p as usize].get().map(|s| (p, &**s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn records_add_up_per_class() {
        let v = VolumeStats::default();
        assert_eq!(v.in_use().count(), 0);
        let s = v.protocol(Protocol::Nbd);
        assert!(Arc::ptr_eq(&s, &v.protocol(Protocol::Nbd)), "one set of counters per protocol");
        s.record(OpClass::Write, 4096, Duration::from_micros(30), true);
        s.record(OpClass::Write, 8192, Duration::from_nanos(300), false);
        s.record(OpClass::Sync, 0, Duration::from_millis(2), true);
        let w = s.snapshot(OpClass::Write);
        assert_eq!((w.ops, w.bytes, w.errors, w.latency_ns), (2, 12288, 1, 30_300));
        assert_eq!(w.latency.count(), 2);
        assert_eq!(w.latency.quantile(P50), 1, "300 ns rounds up to 1 µs");
        assert_eq!(w.latency.quantile(P99), 30);
        let y = s.snapshot(OpClass::Sync);
        assert_eq!((y.ops, y.latency.quantile(P50)), (1, highest_of_2ms()));
        assert_eq!(s.snapshot(OpClass::Read), ClassSnapshot::default());
        let used: Vec<Protocol> = v.in_use().map(|(p, _)| p).collect();
        assert_eq!(used, vec![Protocol::Nbd]);
        assert_eq!(s.ops_and_latency_ns(), (3, 2_030_300), "every class, summed");
    }

    fn highest_of_2ms() -> u64 {
        histogram::highest_of(histogram::bucket_of(2000))
    }

    #[test]
    fn threads_count_into_their_shards_without_losing_any() {
        let v = Arc::new(VolumeStats::default());
        let threads: Vec<_> = (0..6)
            .map(|_| {
                let s = v.protocol(Protocol::Fuse);
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        s.record(OpClass::Read, 512, Duration::from_micros(i % 100), i % 7 != 0);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().expect("recorder"));
        let r = v.protocol(Protocol::Fuse).snapshot(OpClass::Read);
        assert_eq!((r.ops, r.bytes, r.latency.count()), (60_000, 60_000 * 512, 60_000));
        assert_eq!(r.errors, 6 * (0..10_000u64).filter(|i| i % 7 == 0).count() as u64);
    }

    /// Not an assertion on time (machines differ): prints what one record costs, alone and
    /// with four threads on one volume, so a change that makes it dear shows in the log.
    #[test]
    fn record_costs_tens_of_ns() {
        const N: u32 = 1_000_000;
        let v = Arc::new(VolumeStats::default());
        let s = v.protocol(Protocol::Fuse);
        let t = Instant::now();
        for i in 0..N {
            s.record(OpClass::Write, 4096, Duration::from_nanos(u64::from(i % 50_000) * 7), true);
        }
        let alone = t.elapsed() / N;
        let t = Instant::now();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = v.protocol(Protocol::Fuse);
                std::thread::spawn(move || {
                    for i in 0..N / 4 {
                        s.record(OpClass::Write, 4096, Duration::from_nanos(u64::from(i % 50_000) * 7), true);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().expect("recorder"));
        let shared = t.elapsed() / N;
        let t = Instant::now();
        for _ in 0..N {
            std::hint::black_box(Instant::now());
        }
        let clock = t.elapsed() / N;
        println!(
            "ProtocolStats::record: {} ns alone, {} ns per record with 4 threads on one volume; Instant::now: {} ns",
            alone.as_nanos(),
            shared.as_nanos(),
            clock.as_nanos()
        );
        assert_eq!(s.snapshot(OpClass::Write).ops, 2 * u64::from(N));
    }
}
