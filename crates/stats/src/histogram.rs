//! A latency histogram in the manner of HdrHistogram: log-linear buckets of microseconds
//! with about two significant digits, counted with relaxed atomics.
//!
//! Layout: values 0..64 µs have a bucket each (exact); every octave [2^k, 2^(k+1)) above
//! is cut into 64 equal buckets, so a bucket is at most 1/64 (1.6 %) of the values it
//! holds wide — two significant digits. Octaves stop at 2^32 µs (71 minutes); longer
//! values are counted in the last bucket. 1,728 buckets of 8 bytes: 13.5 KiB per histogram.
//!
//! A percentile is answered with the *highest* value of the bucket the rank falls in (as
//! HdrHistogram's `value_at_percentile`): never below the true value, at most 1.6 % above.
//! Ranks are integers — `ceil(n * ppm / 1e6)` — so a model over a sorted `Vec` computes
//! the same rank exactly (the tests compare against one).
//!
//! Trade-off: recording is one relaxed `fetch_add` on a bucket shared by every thread that
//! sees a similar latency. Sharding the buckets per thread would multiply 13.5 KiB by the
//! shard count for every (volume, protocol, class); the counters beside it (lib.rs) are
//! sharded instead, being small.

use std::sync::atomic::{AtomicU64, Ordering};

/// log2 of the sub-buckets per octave.
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;
/// Octaves above the linear part: 2^6 .. 2^32 µs.
const OCTAVES: u64 = 32 - SUB_BITS as u64;
/// Buckets of a histogram.
pub const BUCKETS: usize = (SUB + OCTAVES * SUB) as usize;
/// The largest value told apart from larger ones (µs).
pub const MAX_VALUE_US: u64 = (1 << 32) - 1;

/// The bucket of `us` (values past [`MAX_VALUE_US`] share the last).
pub fn bucket_of(us: u64) -> usize {
    let v = us.min(MAX_VALUE_US);
    if v < SUB {
        return v as usize;
    }
    let k = 63 - v.leading_zeros(); // the octave: 2^k <= v < 2^(k+1), k >= SUB_BITS
    let shift = k - SUB_BITS;
    let sub = (v >> shift) - SUB; // 0..SUB
    (SUB + u64::from(shift) * SUB + sub) as usize
}

/// The smallest value of bucket `i`.
pub fn lowest_of(i: usize) -> u64 {
    assert!(i < BUCKETS, "bucket {i} of {BUCKETS}");
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let shift = (i - SUB) / SUB;
    let sub = (i - SUB) % SUB;
    (SUB + sub) << shift
}

/// The largest value of bucket `i` (what a percentile in it reports).
pub fn highest_of(i: usize) -> u64 {
    if i + 1 == BUCKETS {
        return MAX_VALUE_US;
    }
    lowest_of(i + 1) - 1
}

/// Parts per million of the percentiles the API reports.
pub const P50: u32 = 500_000;
pub const P99: u32 = 990_000;
pub const P999: u32 = 999_000;

/// The 1-based rank of the `ppm` quantile among `n` values: ceil(n * ppm / 1e6), at least 1.
pub fn rank(n: u64, ppm: u32) -> u64 {
    assert!(ppm <= 1_000_000, "a quantile of at most 1e6 ppm");
    let r = (u128::from(n) * u128::from(ppm)).div_ceil(1_000_000) as u64;
    r.max(1)
}

/// The live histogram.
pub struct Histogram {
    buckets: Box<[AtomicU64]>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect() }
    }
}

impl Histogram {
    pub fn record(&self, us: u64) {
        self.buckets[bucket_of(us)].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts as they are now (each bucket read once; a record racing with the
    /// snapshot is in it or in the next).
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot { counts: self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect() }
    }
}

/// Counts per bucket at one moment.
#[derive(Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    counts: Vec<u64>,
}

impl std::fmt::Debug for HistogramSnapshot {
    /// The buckets that hold anything, as `highest µs: count`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.sparse()).finish()
    }
}

impl Default for HistogramSnapshot {
    fn default() -> Self {
        HistogramSnapshot { counts: vec![0; BUCKETS] }
    }
}

impl HistogramSnapshot {
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Count `us` once more (for snapshots built from samples, and tests).
    pub fn add(&mut self, us: u64, n: u64) {
        self.counts[bucket_of(us)] += n;
    }

    /// The value at the `ppm` quantile (parts per million: [`P99`] = 990,000): the highest
    /// value of the bucket holding the value of that rank; 0 when empty.
    pub fn quantile(&self, ppm: u32) -> u64 {
        let n = self.count();
        if n == 0 {
            return 0;
        }
        let want = rank(n, ppm);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return highest_of(i);
            }
        }
        unreachable!("rank {want} is at most the count {n}")
    }

    /// What was recorded after `earlier` (a snapshot of the same histogram taken before).
    pub fn since(&self, earlier: &HistogramSnapshot) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: self.counts.iter().zip(&earlier.counts).map(|(a, b)| a.saturating_sub(*b)).collect(),
        }
    }

    /// Both histograms' counts (of different volumes or protocols, for a total).
    pub fn plus(&self, other: &HistogramSnapshot) -> HistogramSnapshot {
        HistogramSnapshot { counts: self.counts.iter().zip(&other.counts).map(|(a, b)| a + b).collect() }
    }

    /// Observations of at most `us` (bucket-exact: a bucket counts when its highest value
    /// is at most `us`, so a bound inside a bucket counts that bucket as above it).
    pub fn count_at_most(&self, us: u64) -> u64 {
        let last = bucket_of(us);
        let upto = if highest_of(last) <= us { last + 1 } else { last };
        self.counts[..upto].iter().sum()
    }

    /// The buckets that hold anything, as (highest value µs, count): the compact form the
    /// API carries. [`HistogramSnapshot::from_sparse`] reads it back.
    pub fn sparse(&self) -> Vec<(u64, u64)> {
        self.counts.iter().enumerate().filter(|(_, &c)| c > 0).map(|(i, &c)| (highest_of(i), c)).collect()
    }

    pub fn from_sparse(pairs: &[(u64, u64)]) -> HistogramSnapshot {
        let mut h = HistogramSnapshot::default();
        for &(us, c) in pairs {
            h.add(us, c);
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_tile_the_values() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(63), 63);
        assert_eq!(bucket_of(64), 64);
        assert_eq!(bucket_of(127), 127);
        assert_eq!((lowest_of(128), highest_of(128)), (128, 129));
        for i in 0..BUCKETS {
            let (lo, hi) = (lowest_of(i), highest_of(i));
            assert!(lo <= hi, "bucket {i}: {lo}..={hi}");
            assert_eq!(bucket_of(lo), i, "lowest of {i}");
            assert_eq!(bucket_of(hi), i, "highest of {i}");
            if i + 1 < BUCKETS {
                assert_eq!(hi + 1, lowest_of(i + 1), "bucket {i} and the next leave a gap");
                // Two significant digits: a bucket is at most 1/64 of its values wide.
                assert!(i < SUB as usize || (hi - lo + 1) * SUB <= lo, "bucket {i} too wide: {lo}..={hi}");
            }
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(highest_of(BUCKETS - 1), MAX_VALUE_US);
    }

    /// The model: the value of rank ceil(n * q) in the sorted values.
    fn model_quantile(sorted: &[u64], ppm: u32) -> u64 {
        sorted[(rank(sorted.len() as u64, ppm) - 1) as usize]
    }

    fn spread() -> impl Strategy<Value = u64> {
        // Latencies of every order of magnitude, and some past the last octave.
        prop_oneof![0u64..200, 0u64..20_000, 0u64..5_000_000, 0u64..=MAX_VALUE_US, Just(u64::MAX / 3)]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn quantiles_match_a_sorted_vec(values in prop::collection::vec(spread(), 1..600),
                                        extra in prop::collection::vec(0u32..=1_000_000, 0..8)) {
            let h = Histogram::default();
            for &v in &values {
                h.record(v);
            }
            let s = h.snapshot();
            prop_assert_eq!(s.count(), values.len() as u64);
            let mut sorted = values.clone();
            sorted.sort_unstable();
            let mut ppms = vec![0, 1, P50, P99, P999, 1_000_000];
            ppms.extend(extra);
            for ppm in ppms {
                let want = model_quantile(&sorted, ppm);
                let got = s.quantile(ppm);
                // Exactly the highest value of the model value's bucket: never below it,
                // at most one bucket (1/64 of the value) above it.
                prop_assert_eq!(got, highest_of(bucket_of(want)), "ppm {} of {:?}", ppm, sorted);
                let want = want.min(MAX_VALUE_US);
                prop_assert!(got >= want && got - want <= want / SUB, "ppm {}: {} vs {}", ppm, got, want);
            }
            prop_assert!(s.quantile(P50) <= s.quantile(P99) && s.quantile(P99) <= s.quantile(P999));
            // The sparse form carries the same histogram.
            prop_assert_eq!(&HistogramSnapshot::from_sparse(&s.sparse()), &s);
        }

        #[test]
        fn since_is_what_came_after(a in prop::collection::vec(spread(), 0..200),
                                    b in prop::collection::vec(spread(), 1..200)) {
            let h = Histogram::default();
            a.iter().for_each(|&v| h.record(v));
            let first = h.snapshot();
            b.iter().for_each(|&v| h.record(v));
            let delta = h.snapshot().since(&first);
            let mut sorted = b.clone();
            sorted.sort_unstable();
            prop_assert_eq!(delta.count(), b.len() as u64);
            prop_assert_eq!(delta.quantile(P99), highest_of(bucket_of(model_quantile(&sorted, P99))));
        }

        #[test]
        fn count_at_most_counts_whole_buckets(values in prop::collection::vec(spread(), 0..300), bound in 0u64..10_000_000) {
            let h = Histogram::default();
            values.iter().for_each(|&v| h.record(v));
            let got = h.snapshot().count_at_most(bound);
            // Exact when the bound ends a bucket; otherwise that bucket counts as above.
            let ends_a_bucket = highest_of(bucket_of(bound)) == bound;
            let below = |v: u64| if ends_a_bucket { v <= bound } else { v < lowest_of(bucket_of(bound)) };
            let want = values.iter().filter(|&&v| below(v)).count() as u64;
            prop_assert_eq!(got, want);
        }
    }
}
