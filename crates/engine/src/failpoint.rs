//! Named failpoints: places in the engine's concurrent paths where a test can stop a
//! thread, make it fail, or (under the simulator) switch threads.
//!
//! | name | where | what waits or fails there |
//! |---|---|---|
//! | `commit.freeze_to_sync` | `QuiescingTxg::finish`, after the freeze under the lock and before the unlocked write of the frozen data | a commit that has frozen its txg: writers go on, every other change waits (quiesce.rs) |
//! | `log.write_unlocked` | `Pool::sync_object`/`sync_log`, the intent-log block write outside the lock | a sync whose block is taken (`in_flight`) but not yet written |
//! | `mirror.rebuild_copy` | `MirrorDevice::copy_range` (device/mirror/rebuild.rs), after a range was read from the members in sync and before it is written to the member being rebuilt | a rebuild copy: writes to its range wait |
//! | `mirror.write_targets` | `MirrorDevice::on_all` (device/mirror/mod.rs), after a mirrored write chose its target members and before it writes to them | a write that may reach a member taken offline meanwhile (missed.rs) |
//! | `prewrite.handoff` | `Pool::prewrite`, after the batch's blocks are allocated and handed to the commit (`PoolInner::prewrites`), before the prewriter writes them | a batch a commit may have to write itself (`PrewriteBatch::complete`) |
//!
//! Each pool has its own set ([`crate::Pool::failpoints`]; a mirror's is
//! `MirrorDevice::failpoints`), so tests running side by side in
//! one process never meet each other's. A failpoint nobody armed costs one relaxed atomic
//! load (and, under the simulator, is a scheduling point). Armed, it either
//! - *pauses*: every thread that passes waits until the test opens the [`Gate`]; the test
//!   can wait until a given number of threads have arrived, so it proves that one thread is
//!   held at a known place while others go on, without sleeping; or
//! - *fails*: after letting `skip` passes through, the next pass returns an injected I/O
//!   error ([`FailpointError`] as its source), which the engine handles as the failure of
//!   the I/O at that place would be (it latches the pool: DESIGN.md §3.8).
//!
//! Failpoints are for tests and the simulator; nothing in production arms them.

use crate::error::{Error, Result};
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::{Condvar, Mutex, MutexGuard};

pub const COMMIT_FREEZE_TO_SYNC: &str = "commit.freeze_to_sync";
pub const LOG_WRITE_UNLOCKED: &str = "log.write_unlocked";
pub const PREWRITE_HANDOFF: &str = "prewrite.handoff";
pub const MIRROR_REBUILD_COPY: &str = "mirror.rebuild_copy";
pub const MIRROR_WRITE_TARGETS: &str = "mirror.write_targets";
/// Every failpoint the engine has; arming another name is a programmer error.
pub const ALL: [&str; 5] =
    [COMMIT_FREEZE_TO_SYNC, LOG_WRITE_UNLOCKED, PREWRITE_HANDOFF, MIRROR_REBUILD_COPY, MIRROR_WRITE_TARGETS];

/// The source of the error an armed failpoint injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailpointError(pub &'static str);

impl std::fmt::Display for FailpointError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "error injected at failpoint {}", self.0)
    }
}

impl std::error::Error for FailpointError {}

/// Whether `e` is an error injected by a failpoint.
pub fn is_injected(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.get_ref().is_some_and(|s| s.is::<FailpointError>()))
}

enum Action {
    Pause { open: bool },
    Fail { skip: u32, times: u32 },
}

struct Armed {
    name: &'static str,
    action: Action,
    /// Passes since armed (for a pause: threads that arrived, held or let through).
    arrivals: u64,
}

/// The failpoints of one pool.
pub struct Failpoints {
    /// Entries in `armed`: zero is the fast path.
    count: AtomicUsize,
    armed: Mutex<Vec<Armed>>,
    changed: Condvar,
}

impl Default for Failpoints {
    fn default() -> Self {
        Failpoints { count: AtomicUsize::new(0), armed: Mutex::new(Vec::new()), changed: Condvar::new() }
    }
}

impl Failpoints {
    fn table(&self) -> MutexGuard<'_, Vec<Armed>> {
        // Nothing in the table is left half updated by a panic: take it as it is.
        self.armed.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn arm(&self, name: &'static str, action: Action) {
        assert!(ALL.contains(&name), "no failpoint is named {name:?} (see failpoint::ALL)");
        let mut t = self.table();
        t.retain(|a| a.name != name);
        t.push(Armed { name, action, arrivals: 0 });
        self.count.store(t.len(), Ordering::Release);
        self.changed.notify_all();
    }

    /// Hold every thread that passes `name` until the returned gate opens (or is dropped).
    pub fn pause(&self, name: &'static str) -> Gate<'_> {
        self.arm(name, Action::Pause { open: false });
        Gate { fps: self, name }
    }

    /// Let `skip` passes of `name` through, then fail the next `times` with an injected
    /// I/O error.
    pub fn fail(&self, name: &'static str, skip: u32, times: u32) {
        self.arm(name, Action::Fail { skip, times });
    }

    /// Disarm `name` (a paused one opens).
    pub fn clear(&self, name: &'static str) {
        let mut t = self.table();
        t.retain(|a| a.name != name);
        self.count.store(t.len(), Ordering::Release);
        self.changed.notify_all();
    }

    /// The engine passes failpoint `name`. Holds no lock of the pool's when it pauses.
    pub(crate) fn hit(&self, name: &'static str) -> Result<()> {
        if crate::sync::thread::SIMULATED {
            crate::sync::thread::yield_now();
        }
        if self.count.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        self.hit_armed(name)
    }

    #[cold]
    fn hit_armed(&self, name: &'static str) -> Result<()> {
        let mut t = self.table();
        let Some(i) = t.iter().position(|a| a.name == name) else { return Ok(()) };
        t[i].arrivals += 1;
        self.changed.notify_all();
        if let Action::Fail { skip, times } = &mut t[i].action {
            if *skip > 0 {
                *skip -= 1;
                return Ok(());
            }
            if *times > 0 {
                *times -= 1;
                let injected = std::io::Error::other(FailpointError(name));
                return Err(Error::io("pass a failpoint", injected));
            }
            return Ok(());
        }
        // Paused: wait until the gate opens or the failpoint is disarmed.
        loop {
            match t.iter().find(|a| a.name == name) {
                Some(Armed { action: Action::Pause { open: false }, .. }) => {}
                _ => return Ok(()),
            }
            t = self.changed.wait(t).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// A paused failpoint, in the test's hands. Dropping it opens it.
pub struct Gate<'a> {
    fps: &'a Failpoints,
    name: &'static str,
}

impl Gate<'_> {
    /// Threads that reached the failpoint since it was armed (held or let through).
    pub fn arrivals(&self) -> u64 {
        self.fps.table().iter().find(|a| a.name == self.name).map_or(0, |a| a.arrivals)
    }

    /// Wait until `n` threads have reached the failpoint (they are held there while the
    /// gate is closed).
    pub fn wait_arrivals(&self, n: u64) {
        let mut t = self.fps.table();
        while t.iter().find(|a| a.name == self.name).map_or(0, |a| a.arrivals) < n {
            t = self.fps.changed.wait(t).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Let the held threads go, and every later one: the failpoint is disarmed.
    pub fn open(self) {}
}

impl Drop for Gate<'_> {
    fn drop(&mut self) {
        self.fps.clear(self.name);
    }
}
