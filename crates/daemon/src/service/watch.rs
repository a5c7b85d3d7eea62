//! The watch thread: once a second, every open pool's fullness and commit times, turned into
//! events (events.rs) an operator should see before the database does.
//!
//! - **Capacity**: a pool whose allocated space (of its size; deferred frees count as free)
//!   crosses 80 %, the pool's own alert level (`pool set --capacity-alert P`: 100 − P %, 90 %
//!   by default) or 95 % records `pool.capacity` (a warning; an error at 95 %: writes are
//!   about to fail with ENOSPC). Back under a level by 5 points (hysteresis, so a pool
//!   hovering at 80 % does not flood the history) records it as `info`. A pool already past
//!   a level when the daemon starts records it once.
//! - **Slow commits**: commits that took longer than `serve --slow-commit-ms` (default
//!   5,000 ms; rounded up to a bound of the commit histogram, pool/counters.rs) since the
//!   last look record one `pool.slow_commit` warning with how many.
//! - **Device errors**: a member of a device set whose read, write or checksum error counts
//!   grew (checksum errors healed from a good copy: self-healing reads and scrubs) records
//!   `device.errors`; a pool that detected corrupt blocks it could not repair (one device)
//!   records `pool.corruption` (an error: run `strata check`).

use super::Daemon;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;
use strata_engine::pool::counters::{DurationCounts, COMMIT_BOUNDS_US};

/// The levels of fullness announced whatever the pool's alert setting, in percent.
const FIXED_LEVELS: [u8; 2] = [80, 95];

/// The levels announced for a pool whose alert is at `alert_percent` available: 80, 95 and
/// 100 − `alert_percent`, in order.
fn levels(alert_percent: u8) -> Vec<u8> {
    let mut l: Vec<u8> = FIXED_LEVELS.to_vec();
    l.push(100u8.saturating_sub(alert_percent).clamp(1, 99));
    l.sort_unstable();
    l.dedup();
    l
}
/// Points under a level before it is announced as passed back.
const HYSTERESIS: f64 = 5.0;

#[derive(Default)]
pub(crate) struct Watch {
    /// The level each pool was last announced at (0: under every level).
    level: BTreeMap<String, u8>,
    /// Slow commits counted so far, per pool.
    slow: BTreeMap<String, u64>,
    /// Per pool and member index: read, write, checksum errors and bytes repaired seen.
    errors: BTreeMap<(String, usize), [u64; 4]>,
    /// Per pool: corruptions detected seen.
    corrupt: BTreeMap<String, u64>,
}

/// The level `used_pct` is at, given the one announced before (hysteresis on the way down).
fn level_of(levels: &[u8], used_pct: f64, before: u8) -> u8 {
    let mut level = 0;
    for &l in levels {
        let passed = if l <= before { used_pct >= l as f64 - HYSTERESIS } else { used_pct >= l as f64 };
        if passed {
            level = l;
        }
    }
    level
}

/// Commits of histogram `h` slower than `threshold`: the buckets whose lower bound is at or
/// above it (the threshold is rounded up to a bound).
fn slower_than(h: &DurationCounts, threshold: Duration) -> u64 {
    let us = threshold.as_micros() as u64;
    // Bucket i holds (COMMIT_BOUNDS_US[i-1], COMMIT_BOUNDS_US[i]]; the last, what is above
    // the last bound (counted for any threshold beyond it).
    let last = COMMIT_BOUNDS_US.len();
    let lower = |i: usize| if i == 0 { 0 } else { COMMIT_BOUNDS_US[i - 1] };
    let first = (0..last).find(|&i| lower(i) >= us).unwrap_or(last);
    h.buckets[first..].iter().sum()
}

impl Daemon {
    pub(crate) fn watch_loop(&self) {
        let mut w = Watch::default();
        while !self.stopping.load(Ordering::Relaxed) {
            self.watch_once(&mut w);
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    fn watch_once(&self, w: &mut Watch) {
        // How far running scrubs got, into the state file (a restart resumes them there).
        if self.scrubs.progress_due() {
            match self.save_state() {
                Ok(()) => self.scrubs.progress_saved(),
                Err(e) => tracing::warn!("saving the scrubs' progress: {}", e.message),
            }
        }
        let pools: Vec<(String, std::sync::Arc<strata_engine::Pool>)> =
            self.pools.lock().expect("pools").iter().map(|(n, e)| (n.clone(), e.pool.clone())).collect();
        w.level.retain(|n, _| pools.iter().any(|(p, _)| p == n));
        w.slow.retain(|n, _| pools.iter().any(|(p, _)| p == n));
        w.errors.retain(|(n, _), _| pools.iter().any(|(p, _)| p == n));
        w.corrupt.retain(|n, _| pools.iter().any(|(p, _)| p == n));
        for (name, pool) in pools {
            let s = pool.status();
            if s.size_bytes > 0 {
                // Held (deferred) frees are reusable shortly: not counted as used.
                let used = s.allocated_bytes;
                let pct = used as f64 * 100.0 / s.size_bytes as f64;
                let before = w.level.get(&name).copied().unwrap_or(0);
                let levels = levels(s.space.capacity_alert_percent);
                let now = level_of(&levels, pct, before);
                if now != before {
                    let (gib, size) = (used as f64 / (1u64 << 30) as f64, s.size_bytes as f64 / (1u64 << 30) as f64);
                    let (severity, text) = if now > before {
                        let what = if now >= 95 {
                            "writes will soon fail with ENOSPC: free space (delete snapshots, `pool add`) now"
                        } else {
                            "plan for space: delete old snapshots, or add devices"
                        };
                        (
                            if now >= 95 { "error" } else { "warning" },
                            format!("pool is {pct:.0}% full ({gib:.2} of {size:.2} GiB): past {now}%; {what}"),
                        )
                    } else {
                        let under = levels.iter().find(|&&l| l > now).copied().unwrap_or(levels[0]);
                        ("info", format!("pool is {pct:.0}% full ({gib:.2} of {size:.2} GiB): back under {under}%"))
                    };
                    tracing::info!(pool = %name, percent = pct, "capacity: {text}");
                    self.events.record(severity, "pool.capacity", Some(&name), None, text);
                    w.level.insert(name.clone(), now);
                }
            }
            self.watch_errors(w, &name, &s);
            self.scheduled_scrub(&name);
            let slow = slower_than(&pool.counters().commit, self.opts.slow_commit);
            let seen = *w.slow.entry(name.clone()).or_insert(0);
            if slow > seen {
                let n = slow - seen;
                let text = format!(
                    "{n} commit{} took longer than {} ms (the devices are slow or saturated; see `strata iostat`)",
                    if n == 1 { "" } else { "s" },
                    self.opts.slow_commit.as_millis()
                );
                tracing::warn!(pool = %name, "{text}");
                self.events.record("warning", "pool.slow_commit", Some(&name), None, text);
                w.slow.insert(name, slow);
            }
        }
    }
}

impl Daemon {
    /// Start pool `name`'s scrub when its schedule says so (and none is running); the next
    /// one is due a period after this one's start.
    fn scheduled_scrub(&self, name: &str) {
        let now = super::jobs::now_ns();
        let due = {
            let mut pools = self.pools.lock().expect("pools");
            let Some(e) = pools.get_mut(name) else { return };
            match e.scrub_schedule.as_mut() {
                Some(s) if now >= s.next_ns => {
                    s.next_ns = now + s.every_seconds * 1_000_000_000;
                    true
                }
                _ => false,
            }
        };
        if !due {
            return;
        }
        if let Err(e) = self.save_state() {
            tracing::warn!(pool = name, "saving the scrub schedule: {}", e.message);
        }
        match self.scrub_action(name, "start", "scrub schedule") {
            Ok(_) => tracing::info!(pool = name, "scheduled scrub started"),
            Err(e) => {
                let text = format!("scheduled scrub not started: {} ({})", e.message, e.hint);
                tracing::warn!(pool = name, "{text}");
                self.events.record("warning", "scrub.failed", Some(name), None, text);
            }
        }
    }

    fn watch_errors(&self, w: &mut Watch, name: &str, s: &strata_engine::PoolStatus) {
        for m in s.devices.iter().flat_map(|d| &d.members) {
            let now = [m.read_errors, m.write_errors, m.checksum_errors, m.repaired_bytes];
            let before = w.errors.insert((name.to_string(), m.index), now).unwrap_or_default();
            let d: Vec<u64> = now.iter().zip(before).map(|(n, b)| n.saturating_sub(b)).collect();
            if d[..3].iter().all(|&x| x == 0) {
                continue;
            }
            let mut parts = Vec::new();
            for (n, what) in [(d[0], "read errors"), (d[1], "write errors")] {
                if n > 0 {
                    parts.push(format!("{n} {what}"));
                }
            }
            if d[2] > 0 {
                parts.push(format!("{} checksum errors healed ({} bytes rewritten from a good copy)", d[2], d[3]));
            }
            let text = format!("device {}: {} (state {})", m.device, parts.join(", "), m.state);
            tracing::warn!(pool = name, "{text}");
            self.events.record("warning", "device.errors", Some(name), Some(&m.device), text);
        }
        let before = w.corrupt.insert(name.to_string(), s.corruptions_detected).unwrap_or(0);
        if s.corruptions_detected > before && s.devices.is_none() {
            let text = format!(
                "{} corrupt blocks detected that no copy could repair (the pool has one device): run `strata check {name}`",
                s.corruptions_detected - before
            );
            tracing::error!(pool = name, "{text}");
            self.events.record("error", "pool.corruption", Some(name), None, text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_rise_at_their_mark_and_fall_five_points_under_it() {
        let l = levels(10);
        assert_eq!(l, [80, 90, 95], "the default alert (10 % available) is the 90 % level");
        assert_eq!(level_of(&l, 79.9, 0), 0);
        assert_eq!(level_of(&l, 80.0, 0), 80);
        assert_eq!(level_of(&l, 93.0, 0), 90, "a start past two levels announces the higher");
        assert_eq!(level_of(&l, 77.0, 80), 80, "hovering under 80 does not announce");
        assert_eq!(level_of(&l, 74.9, 80), 0);
        assert_eq!(level_of(&l, 86.0, 90), 90);
        assert_eq!(level_of(&l, 84.0, 90), 80, "down a level");
        assert_eq!(level_of(&l, 99.0, 80), 95);
        // The pool's own alert: 30 % available is a 70 % level; 20 % is the 80 % one.
        assert_eq!(levels(30), [70, 80, 95]);
        assert_eq!(levels(20), [80, 95]);
        assert_eq!(level_of(&levels(30), 72.0, 0), 70);
    }

    #[test]
    fn slow_commits_are_the_buckets_above_the_threshold() {
        let mut h = DurationCounts::default();
        h.buckets[0] = 5; // ≤ 1 ms
        h.buckets[10] = 2; // (1 s, 2.5 s]
        h.buckets[12] = 3; // (5 s, 10 s]
        h.buckets[COMMIT_BOUNDS_US.len()] = 1; // > 30 s
        assert_eq!(slower_than(&h, Duration::from_secs(5)), 4);
        assert_eq!(slower_than(&h, Duration::from_millis(4000)), 4, "rounded up to 5 s");
        assert_eq!(slower_than(&h, Duration::from_secs(1)), 6);
        assert_eq!(slower_than(&h, Duration::from_millis(1)), 6);
        assert_eq!(slower_than(&h, Duration::from_micros(0)), 11);
        assert_eq!(slower_than(&h, Duration::from_secs(60)), 1, "past the last bound: the last bucket");
    }
}
