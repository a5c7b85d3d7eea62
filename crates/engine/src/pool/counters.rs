//! Counters of the pool's commits for monitoring (`Pool::counters`): how long each commit
//! took in all and how long it held the pool's lock, as histograms with fixed bounds.
//! `CommitStats` (status.rs) keeps totals and the maximum; these keep the distribution,
//! which a Prometheus histogram (and a percentile) needs.
//!
//! Plain `std` atomics, not the sync shim (sync.rs): no decision of the engine reads them,
//! so they need not be scheduling points of the simulator — and adding some would change
//! the interleavings its seeds replay. Recorded once per commit, outside nothing (the
//! atomics take no lock), read by whoever asks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (µs) of the commit-duration buckets; one more bucket counts the rest.
/// From 1 ms (an idle txg with a little metadata) to 30 s (a commit of gigabytes on a slow
/// disk): commits run every few seconds, so a handful of buckets per decade is plenty.
pub const COMMIT_BOUNDS_US: [u64; 14] = [
    1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000,
    10_000_000, 30_000_000,
];
const BUCKETS: usize = COMMIT_BOUNDS_US.len() + 1;

#[derive(Default)]
struct DurationHistogram {
    buckets: [AtomicU64; BUCKETS],
    sum_us: AtomicU64,
}

impl DurationHistogram {
    fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let i = COMMIT_BOUNDS_US.iter().position(|&b| us <= b).unwrap_or(COMMIT_BOUNDS_US.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    fn read(&self) -> DurationCounts {
        DurationCounts {
            buckets: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            sum_us: self.sum_us.load(Ordering::Relaxed),
        }
    }
}

/// A histogram as read: counts per bucket of [`COMMIT_BOUNDS_US`] (not cumulative; the
/// last counts what is above the last bound) and the sum of the values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DurationCounts {
    pub buckets: [u64; BUCKETS],
    pub sum_us: u64,
}

impl DurationCounts {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// The live counters, one set per open pool.
#[derive(Default)]
pub(crate) struct PoolCounters {
    commit: DurationHistogram,
    locked: DurationHistogram,
    /// Bytes of new blocks written for the txgs committed (their prewrite passes and the
    /// commit itself), and the pipeline's byte count at the last commit.
    commit_bytes: AtomicU64,
    written_at_last: AtomicU64,
    last_commit_bytes: AtomicU64,
}

impl PoolCounters {
    /// A commit that synced a txg: `total` from its start to its root being durable,
    /// `locked` the part under the pool's lock; `written` the pipeline's bytes written
    /// so far (`IoStats::bytes_written`): what grew since the last commit is this txg's.
    pub(crate) fn record_commit(&self, total: Duration, locked: Duration, written: u64) {
        self.commit.record(total);
        self.locked.record(locked);
        let before = self.written_at_last.swap(written, Ordering::Relaxed);
        let bytes = written.saturating_sub(before);
        self.commit_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.last_commit_bytes.store(bytes, Ordering::Relaxed);
    }
}

/// What [`crate::Pool::counters`] returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CounterValues {
    /// Whole commits (prewrite passes, freeze, sync), from start to durable root.
    pub commit: DurationCounts,
    /// The part of each commit that held the pool's lock (readers and writers waited).
    pub commit_locked: DurationCounts,
    /// Bytes of new blocks (data and metadata) the commits wrote, in all and the last one.
    pub commit_bytes: u64,
    pub last_commit_bytes: u64,
}

impl PoolCounters {
    pub(crate) fn read(&self) -> CounterValues {
        CounterValues {
            commit: self.commit.read(),
            commit_locked: self.locked.read(),
            commit_bytes: self.commit_bytes.load(Ordering::Relaxed),
            last_commit_bytes: self.last_commit_bytes.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_land_in_their_buckets() {
        let c = PoolCounters::default();
        c.record_commit(Duration::from_micros(900), Duration::from_micros(100), 4096);
        c.record_commit(Duration::from_millis(1), Duration::from_micros(1001), 4096);
        c.record_commit(Duration::from_millis(40), Duration::from_millis(3), 1 << 20);
        c.record_commit(Duration::from_secs(60), Duration::from_secs(31), (1 << 20) + 8192);
        let v = c.read();
        assert_eq!(v.commit.count(), 4);
        assert_eq!(v.commit.buckets[0], 2, "up to and including 1 ms");
        assert_eq!(v.commit.buckets[5], 1, "25..=50 ms");
        assert_eq!(v.commit.buckets[BUCKETS - 1], 1, "past 30 s");
        assert_eq!(v.commit.sum_us, 900 + 1000 + 40_000 + 60_000_000);
        assert_eq!((v.commit_locked.buckets[0], v.commit_locked.buckets[1], v.commit_locked.buckets[2]), (1, 1, 1));
        assert_eq!(v.commit_locked.buckets[BUCKETS - 1], 1);
        // Each commit's bytes: what the pipeline's count grew by since the one before.
        assert_eq!((v.commit_bytes, v.last_commit_bytes), ((1 << 20) + 8192, 8192));
    }
}
