//! How fast background work — a rebuild's copy, a scrub's reads — goes while the pool
//! serves clients: additive increase, multiplicative decrease (TCP's congestion control) on
//! the clients' mean operation latency, between a floor and a ceiling an administrator sets
//! per pool and per kind of work (md's `speed_limit_min` / `speed_limit_max`;
//! `strata pool set --rebuild-rate-min/-max`, `--scrub-rate-min/-max`).
//!
//! The reference is the clients' latency without background work: measured while the pool
//! serves them and neither a rebuild nor a scrub runs, and re-taken at the floor when the
//! load itself changed (the latency there stays above the reference for several periods:
//! the work at its slowest is not what slows the clients). Every period (half a second
//! with at least `MIN_OPS` client operations) while the work runs: latency within
//! `TOLERANCE` of the reference (plus `SLACK_US`) → the rate grows by an eighth of the span
//! between floor and ceiling; above → it halves, never below the floor. Closed-loop clients
//! (a database's sessions) keep about 1 / TOLERANCE of their throughput while the work runs
//! at the rate found. A rebuild and a scrub that run together each follow the same latency
//! with a pace of their own.
//!
//! An idle pool is not paced at all (devices.rs, scrub/mod.rs): this only decides the rate
//! beside clients.

use super::state::RateBounds;
use std::time::{Duration, Instant};

/// Default floor of a rebuild: what it copies per second however busy the pool is (a
/// 30 %-full 1 TB member in under 3 h).
pub(crate) const DEFAULT_REBUILD_MIN_BYTES_PER_SECOND: u64 = 32 << 20;
/// Default ceiling of a rebuild while clients are served (an idle pool is rebuilt at full
/// speed).
pub(crate) const DEFAULT_REBUILD_MAX_BYTES_PER_SECOND: u64 = 512 << 20;
/// Default floor of a scrub: it restores no redundancy, so it yields more than a rebuild
/// (a 30 %-full 1 TB pool verified in under 6 h however busy).
pub(crate) const DEFAULT_SCRUB_MIN_BYTES_PER_SECOND: u64 = 16 << 20;
/// Default ceiling of a scrub while clients are served (the fixed rate before the pace).
pub(crate) const DEFAULT_SCRUB_MAX_BYTES_PER_SECOND: u64 = 256 << 20;
/// The least floor an administrator may set: slower leaves a pool unprotected (or
/// unverified) for days.
pub(crate) const LEAST_MIN_BYTES_PER_SECOND: u64 = 1 << 20;

/// The (floor, ceiling) of a pool's rebuild setting, or the defaults.
pub(crate) fn rebuild_rate_of(r: Option<RateBounds>) -> (u64, u64) {
    r.map_or((DEFAULT_REBUILD_MIN_BYTES_PER_SECOND, DEFAULT_REBUILD_MAX_BYTES_PER_SECOND), |r| {
        (r.min_bytes_per_second, r.max_bytes_per_second)
    })
}

/// The (floor, ceiling) of a pool's scrub setting, or the defaults.
pub(crate) fn scrub_rate_of(r: Option<RateBounds>) -> (u64, u64) {
    r.map_or((DEFAULT_SCRUB_MIN_BYTES_PER_SECOND, DEFAULT_SCRUB_MAX_BYTES_PER_SECOND), |r| {
        (r.min_bytes_per_second, r.max_bytes_per_second)
    })
}

/// What runs on the pool beside its clients, as one pace sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Work {
    /// No background work: the clients' latency is the reference.
    Idle,
    /// This pace's work runs (with or without the other kind).
    Mine,
    /// Only another kind runs: neither a reference nor a step for this one.
    Other,
}

/// One control period.
const PERIOD: Duration = Duration::from_millis(500);
/// Fewest client operations in a period for its mean latency to decide anything.
const MIN_OPS: u64 = 20;
/// A period with fewer operations than that is dropped after this long.
const STALE: Duration = Duration::from_secs(4);
/// Latency allowed over the reference before the rate is cut.
const TOLERANCE: f64 = 1.25;
/// Plus this (µs): the jitter of sub-millisecond latencies does not cut the rate.
const SLACK_US: f64 = 50.0;
/// Periods above the threshold at the floor after which their latency is the reference.
const REBASE_PERIODS: u32 = 4;
/// Weight of a new period in the reference while no rebuild runs.
const REFERENCE_WEIGHT: f64 = 0.2;
/// Weight of a period below the reference during a rebuild.
const LOWER_WEIGHT: f64 = 0.5;

/// The rate of one pool's rebuild (or scrub) beside its clients, fed every round of the
/// devices thread with the clients' cumulative operation count and latency sum.
#[derive(Debug)]
pub(crate) struct ClientPace {
    min: u64,
    max: u64,
    rate: u64,
    /// The clients' mean latency (µs) without background work, once measured.
    reference_us: Option<f64>,
    /// (operations, latency ns, when) at the start of the current period.
    period: Option<(u64, u64, Instant)>,
    /// Consecutive periods at the floor with the latency above the threshold.
    over_at_floor: u32,
}

/// What a period decided (for the log and tests).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Step {
    /// Not a full period yet, or too few operations in it.
    Wait,
    /// No rebuild: the reference moved to this (µs).
    Reference(f64),
    /// The rate grew to this (latency within the threshold).
    Up(u64),
    /// The rate was cut to this.
    Down(u64),
    /// At the floor, above the threshold: the latency there (µs) is the new reference.
    Rebase(f64),
}

impl ClientPace {
    pub(crate) fn new(min: u64, max: u64) -> ClientPace {
        let (min, max) = (min.max(1), max.max(min.max(1)));
        ClientPace { min, max, rate: min, reference_us: None, period: None, over_at_floor: 0 }
    }

    /// New bounds (`pool set`): the rate is kept inside them.
    pub(crate) fn set_limits(&mut self, min: u64, max: u64) {
        self.min = min.max(1);
        self.max = max.max(self.min);
        self.rate = self.rate.clamp(self.min, self.max);
    }

    /// Bytes per second the work may go at now while the pool serves clients.
    pub(crate) fn rate(&self) -> u64 {
        self.rate
    }

    #[cfg(test)]
    pub(crate) fn reference_us(&self) -> Option<f64> {
        self.reference_us
    }

    /// The clients' counters now (`ops` operations so far, `latency_ns` their summed
    /// latency), and what background work runs.
    pub(crate) fn observe(&mut self, ops: u64, latency_ns: u64, work: Work, now: Instant) -> Step {
        let Some((ops0, lat0, since)) = self.period else {
            self.period = Some((ops, latency_ns, now));
            return Step::Wait;
        };
        let elapsed = now.saturating_duration_since(since);
        // Counters that went back (a volume's counters forgotten): start a new period.
        if ops < ops0 || latency_ns < lat0 {
            self.period = Some((ops, latency_ns, now));
            return Step::Wait;
        }
        let n = ops - ops0;
        if elapsed < PERIOD || n < MIN_OPS {
            if elapsed >= STALE {
                self.period = Some((ops, latency_ns, now));
            }
            return Step::Wait;
        }
        self.period = Some((ops, latency_ns, now));
        let mean_us = (latency_ns - lat0) as f64 / n as f64 / 1000.0;
        if work != Work::Mine {
            // Between runs of its work the rate starts again from the floor.
            self.rate = self.min;
            self.over_at_floor = 0;
        }
        if work == Work::Other {
            // The other kind's work slows the clients: no reference from this period.
            return Step::Wait;
        }
        if work == Work::Idle {
            let r = match self.reference_us {
                Some(r) => r + REFERENCE_WEIGHT * (mean_us - r),
                None => mean_us,
            };
            self.reference_us = Some(r);
            return Step::Reference(r);
        }
        let Some(reference) = self.reference_us else {
            // Work that began before any client was measured (a rebuild or scrub resumed at
            // start): its first period, at the floor, is the reference.
            self.reference_us = Some(mean_us);
            return Step::Rebase(mean_us);
        };
        if mean_us < reference {
            // The clients do better than the reference during the work: their load is
            // lighter than when it was taken, so it comes down (halfway each period), lest
            // a reference from a heavier load let the copy triple a light load's latency.
            self.reference_us = Some(reference + LOWER_WEIGHT * (mean_us - reference));
        }
        if mean_us <= reference * TOLERANCE + SLACK_US {
            self.over_at_floor = 0;
            let step = ((self.max - self.min) / 8).max(1);
            self.rate = self.rate.saturating_add(step).min(self.max);
            return Step::Up(self.rate);
        }
        if self.rate > self.min {
            self.rate = (self.rate / 2).max(self.min);
            return Step::Down(self.rate);
        }
        self.over_at_floor += 1;
        if self.over_at_floor >= REBASE_PERIODS {
            self.over_at_floor = 0;
            self.reference_us = Some(mean_us);
            return Step::Rebase(mean_us);
        }
        Step::Down(self.rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Feeds `pace` `periods` periods of `ops` operations of `us` µs each; returns the
    /// steps and the clock after them.
    fn feed(pace: &mut ClientPace, c: &mut (u64, u64, Instant), periods: usize, us: u64, work: Work) -> Vec<Step> {
        let mut steps = Vec::new();
        for _ in 0..periods {
            c.0 += 100;
            c.1 += 100 * us * 1000;
            c.2 += PERIOD;
            steps.push(pace.observe(c.0, c.1, work, c.2));
        }
        steps
    }

    fn start(pace: &mut ClientPace) -> (u64, u64, Instant) {
        let now = Instant::now();
        assert_eq!(pace.observe(1000, 0, Work::Idle, now), Step::Wait);
        (1000, 0, now)
    }

    #[test]
    fn the_rate_climbs_to_the_ceiling_while_the_clients_keep_their_latency() {
        let mut p = ClientPace::new(32 * MIB, 512 * MIB);
        let mut c = start(&mut p);
        feed(&mut p, &mut c, 3, 400, Work::Idle);
        assert_eq!(p.reference_us(), Some(400.0));
        assert_eq!(p.rate(), 32 * MIB);
        let steps = feed(&mut p, &mut c, 8, 440, Work::Mine);
        assert!(steps.iter().all(|s| matches!(s, Step::Up(_))), "{steps:?}");
        assert_eq!(p.rate(), 512 * MIB, "eight periods from floor to ceiling");
        feed(&mut p, &mut c, 3, 400, Work::Mine);
        assert_eq!(p.rate(), 512 * MIB, "never above the ceiling");
    }

    #[test]
    fn the_rate_halves_when_the_clients_slow_down_and_never_goes_below_the_floor() {
        let mut p = ClientPace::new(32 * MIB, 512 * MIB);
        let mut c = start(&mut p);
        feed(&mut p, &mut c, 2, 400, Work::Idle);
        feed(&mut p, &mut c, 8, 400, Work::Mine);
        assert_eq!(p.rate(), 512 * MIB);
        // 400 * 1.25 + 50 = 550 µs is the threshold: 560 is over it.
        assert_eq!(feed(&mut p, &mut c, 1, 560, Work::Mine), [Step::Down(256 * MIB)]);
        assert_eq!(feed(&mut p, &mut c, 1, 550, Work::Mine), [Step::Up(256 * MIB + 60 * MIB)]);
        feed(&mut p, &mut c, 3, 2000, Work::Mine);
        assert_eq!(p.rate(), 39 * MIB + MIB / 2);
        feed(&mut p, &mut c, 1, 2000, Work::Mine);
        assert_eq!(p.rate(), 32 * MIB, "the floor holds");
    }

    #[test]
    fn a_heavier_load_at_the_floor_becomes_the_reference() {
        let mut p = ClientPace::new(32 * MIB, 512 * MIB);
        let mut c = start(&mut p);
        feed(&mut p, &mut c, 2, 400, Work::Idle);
        // The clients' own load doubled their latency: at the floor for four periods, the
        // latency there is the reference and the rate climbs again.
        let steps = feed(&mut p, &mut c, 4, 1000, Work::Mine);
        assert_eq!(steps[3], Step::Rebase(1000.0), "{steps:?}");
        assert_eq!(p.rate(), 32 * MIB);
        assert_eq!(feed(&mut p, &mut c, 1, 1100, Work::Mine), [Step::Up(92 * MIB)]);
    }

    #[test]
    fn a_lighter_load_during_the_rebuild_lowers_the_reference() {
        let mut p = ClientPace::new(32 * MIB, 512 * MIB);
        let mut c = start(&mut p);
        // Taken under a heavy load; the rebuild then runs beside a light one.
        feed(&mut p, &mut c, 1, 2000, Work::Idle);
        feed(&mut p, &mut c, 6, 500, Work::Mine);
        let r = p.reference_us().unwrap();
        assert!((500.0..530.0).contains(&r), "halfway down each period: {r}");
        // Tripling the light load's latency is over the threshold (the old reference's
        // would have allowed it).
        assert_eq!(feed(&mut p, &mut c, 1, 1500, Work::Mine), [Step::Down(196 * MIB)]);
    }

    #[test]
    fn the_other_kind_of_work_neither_moves_the_reference_nor_the_rate() {
        let mut p = ClientPace::new(16 * MIB, 256 * MIB);
        let mut c = start(&mut p);
        feed(&mut p, &mut c, 2, 400, Work::Idle);
        feed(&mut p, &mut c, 2, 400, Work::Mine);
        assert_eq!(p.rate(), 76 * MIB);
        // A rebuild alone (this is the scrub's pace): its latency is no reference, and the
        // scrub's rate is back at the floor for its next run.
        let steps = feed(&mut p, &mut c, 5, 3000, Work::Other);
        assert!(steps.iter().all(|s| *s == Step::Wait), "{steps:?}");
        assert_eq!(p.reference_us(), Some(400.0));
        assert_eq!(p.rate(), 16 * MIB);
        // The scrub runs again beside the rebuild: 3 ms is over the reference.
        assert_eq!(feed(&mut p, &mut c, 1, 3000, Work::Mine), [Step::Down(16 * MIB)]);
    }

    #[test]
    fn short_or_thin_periods_decide_nothing_and_a_rebuild_without_a_reference_takes_its_first() {
        let mut p = ClientPace::new(32 * MIB, 512 * MIB);
        let t = Instant::now();
        assert_eq!(p.observe(0, 0, Work::Mine, t), Step::Wait);
        assert_eq!(p.observe(500, 500_000_000, Work::Mine, t + PERIOD / 2), Step::Wait, "half a period");
        assert_eq!(p.observe(505, 505_000_000, Work::Mine, t + PERIOD * 5), Step::Rebase(1000.0));
        assert_eq!(p.observe(510, 510_000_000, Work::Mine, t + PERIOD * 7), Step::Wait, "5 operations");
        // After STALE with too few operations, the period starts over.
        assert_eq!(p.observe(515, 515_000_000, Work::Mine, t + PERIOD * 20), Step::Wait);
        assert_eq!(p.observe(615, 615_000_000, Work::Mine, t + PERIOD * 21), Step::Up(92 * MIB));
        // Counters that went back start a new period.
        assert_eq!(p.observe(10, 0, Work::Mine, t + PERIOD * 30), Step::Wait);
        assert_eq!(p.rate(), 92 * MIB);
    }

    #[test]
    fn new_limits_bound_the_rate_and_the_end_of_a_rebuild_resets_it() {
        let mut p = ClientPace::new(32 * MIB, 512 * MIB);
        let mut c = start(&mut p);
        feed(&mut p, &mut c, 1, 400, Work::Idle);
        feed(&mut p, &mut c, 8, 400, Work::Mine);
        p.set_limits(8 * MIB, 64 * MIB);
        assert_eq!(p.rate(), 64 * MIB);
        p.set_limits(128 * MIB, 256 * MIB);
        assert_eq!(p.rate(), 128 * MIB);
        feed(&mut p, &mut c, 1, 400, Work::Idle);
        assert_eq!(p.rate(), 128 * MIB, "no rebuild: back to the floor");
        let mut q = ClientPace::new(64 * MIB, 8 * MIB);
        assert_eq!((q.min, q.max), (64 * MIB, 64 * MIB), "a ceiling below the floor is the floor");
        q.set_limits(0, 0);
        assert_eq!(q.rate(), 1);
    }
}
