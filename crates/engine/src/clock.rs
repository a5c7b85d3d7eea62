//! Time, injected. The engine never reads the wall clock itself (DESIGN.md §2) so that a
//! seeded simulation replays exactly; the daemon passes a system clock, tests a manual one.

use crate::sync::atomic::{AtomicU64, Ordering};

pub trait Clock: Send + Sync {
    /// Nanoseconds since the Unix epoch.
    fn now_ns(&self) -> u64;
}

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn new(start_ns: u64) -> ManualClock {
        ManualClock(AtomicU64::new(start_ns))
    }
    pub fn advance(&self, ns: u64) {
        self.0.fetch_add(ns, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
