//! The commit with a quiescing txg (docs/txg-pipeline.md): writers go on while the commit
//! writes the txg's data.
//!
//! `Pool::commit`:
//! 1. prewrite passes while everything runs (prewrite.rs), as long as they converge;
//! 2. *freeze* under the lock (`PoolInner::freeze`, volume/freeze.rs): the open txg's
//!    dirty records and dnodes move into a frozen set, the live state starts empty, and
//!    the pool is *quiescing*;
//! 3. without the lock: prewrite what of the frozen set is not written yet — it cannot
//!    change any more, so one pass finishes it;
//! 4. under the lock: the metadata part of the commit (txg.rs) on the frozen set, then the
//!    pool is settled again.
//!
//! While the pool quiesces, only operations that change nothing but live records and
//! dnodes run: data writes and attribute changes (a file system's `write`), and reads — in
//! a `PoolGuard` from [`Pool::txn_data`]. Everything else waits in [`Pool::lock`] until the
//! commit has synced: other `PoolGuard`s, intent log writes (a log block written now would be
//! retired with the old txg's), snapshots and every administrative operation. Before, a
//! client that rewrote its data as fast as the commit wrote it kept the commit chasing it,
//! and the last chase ran under the lock: writes stalled for 1.3–1.9 s per commit.

use crate::error::{Error, Result};
use crate::pool::guard::PoolGuard;
use crate::pool::{Pool, PoolInner};
use crate::sync::atomic::Ordering;
use crate::sync::{Condvar, LockResult, Mutex, MutexGuard};
use std::time::Instant;

/// A prewrite pass that wrote at least this much may be followed by another.
const PREWRITE_AGAIN_BYTES: u64 = 8 << 20;
/// At most this many passes before the freeze.
const PREWRITE_PASSES_MAX: usize = 4;
/// Commits that skip the early passes after one whose early passes were mostly in vain.
const SKIP_EARLY_PASSES: u8 = 3;

impl Pool {
    pub(crate) fn from_inner(inner: PoolInner) -> Pool {
        Pool {
            inner: Mutex::new(inner),
            log_done: Condvar::new(),
            commit_gate: Mutex::new(()),
            settled: Condvar::new(),
            waiting_on_commit: crate::sync::atomic::AtomicUsize::new(0),
            counters: Default::default(),
            failpoints: Default::default(),
        }
    }

    /// The pool's lock, once no commit is quiescing (see the module comment).
    pub(crate) fn lock(&self) -> MutexGuard<'_, PoolInner> {
        self.settled_lock(self.lock_raw())
    }

    /// `p` once no commit is quiescing (waiting on `settled` if one is).
    fn settled_lock<'a>(&'a self, mut p: MutexGuard<'a, PoolInner>) -> MutexGuard<'a, PoolInner> {
        if p.txg.quiescing {
            self.waiting_on_commit.fetch_add(1, Ordering::Relaxed);
            while p.txg.quiescing {
                p = self.latch_if_poisoned(self.settled.wait(p));
            }
            self.waiting_on_commit.fetch_sub(1, Ordering::Relaxed);
        }
        p
    }

    /// Wait until the intent-log write in flight has finished, and return the lock as
    /// [`Pool::lock`] does: once no commit is quiescing either. A condvar wakes its waiter
    /// with the raw lock, possibly in the middle of a quiescing commit; a log block taken
    /// then would carry groups recorded after the freeze (next txg) under the old base, and
    /// the commit would retire them with the old txg: acknowledged syncs lost (found by the
    /// simulator, seed 117679260893890).
    pub(crate) fn wait_log_done<'a>(&'a self, p: MutexGuard<'a, PoolInner>) -> MutexGuard<'a, PoolInner> {
        let p = self.latch_if_poisoned(self.log_done.wait(p));
        self.settled_lock(p)
    }

    /// The pool's lock even while a commit quiesces: for reads, data writes and the
    /// commit itself.
    pub(crate) fn lock_raw(&self) -> MutexGuard<'_, PoolInner> {
        self.latch_if_poisoned(self.inner.lock())
    }

    /// The pool's lock from a lock or a condition-variable wait. If a thread panicked while
    /// holding it, the pool latches read-only (STYLE.md "Concurrency and failure", DESIGN.md
    /// §3.8): the panic may have left the in-memory state half updated, and no commit may
    /// write that. The device still holds the last committed txg, which reopening returns
    /// to. Reads go on (as `status` must, to say why): a read of what the open txg changed
    /// may see the interrupted operation's partial effect, never anything on disk. The
    /// poison is cleared once the latch records it: every later call sees the latch.
    pub(crate) fn latch_if_poisoned<'a>(
        &'a self,
        locked: LockResult<MutexGuard<'a, PoolInner>>,
    ) -> MutexGuard<'a, PoolInner> {
        locked.unwrap_or_else(|poisoned| {
            let mut p = poisoned.into_inner();
            let why = format!(
                "a thread panicked while holding the pool lock (see the log for the panic); memory may be \
                 half updated, the device holds txg {}",
                p.txg.synced
            );
            p.health.latched = Some(match p.health.latched.take() {
                None => why,
                Some(first) => format!("{first}; then {why}"),
            });
            self.inner.clear_poison();
            p
        })
    }

    /// The pool's failpoints (failpoint.rs): tests and the simulator arm them to hold a
    /// thread at a named place or make it fail there.
    pub fn failpoints(&self) -> &crate::failpoint::Failpoints {
        &self.failpoints
    }

    /// Threads waiting in the pool's lock for the commit in flight to sync (see the module
    /// comment): a test sees that a change waits without sleeping.
    pub fn waiting_on_commit(&self) -> usize {
        self.waiting_on_commit.load(Ordering::Relaxed)
    }

    /// A [`PoolGuard`] that runs even while a commit writes its data: for reads, data writes
    /// and attribute changes. Any other change in it fails with
    /// [`Error::CommitInFlight`] (before changing anything, if it comes first); run it
    /// again in a [`Pool::txn`], which waits for the commit.
    pub fn guard_for_data(&self) -> PoolGuard<'_> {
        PoolGuard::new(self.lock_raw())
    }

    /// Commit the open txg; returns the txg now durable. Nothing dirty: no I/O. Its data
    /// is written without the lock (prewrite passes, then the frozen rest while writes go
    /// on: see the module comment), so readers and writers wait only for the metadata part.
    pub fn commit(&self) -> Result<u64> {
        self.begin_commit()?.finish()
    }

    /// Commit (the quiescing commit: the dirty data is written without the lock), then run
    /// `f` under the lock on the synced pool. Snapshots, clones, restores and deletes go
    /// through here, so they stall writers only for what was written while the commit
    /// quiesced, not for all the data dirty when they were asked for.
    pub(crate) fn commit_then<T>(&self, f: impl FnOnce(&mut PoolInner) -> Result<T>) -> Result<T> {
        self.begin_commit()?.finish_then(|p, _| f(p))
    }

    /// Steps 1 and 2 of a commit (see the module comment): prewrite passes, then the
    /// freeze. Until [`QuiescingTxg::finish`], data writes and reads go on and belong to the
    /// next txg; every other change waits. One commit at a time: a second waits here.
    pub fn begin_commit(&self) -> Result<QuiescingTxg<'_>> {
        // The gate guards no data: a panic under the pool's lock latches there
        // (`latch_if_poisoned`), one while writing a prewrite batch fails the batch.
        let gate = self.commit_gate.lock().unwrap_or_else(|p| p.into_inner());
        let t0 = Instant::now();
        // A deleted volume's blocks are walked here, without the lock (destroy.rs).
        self.prepare_destroy();
        // Another pass only while they converge: one that finds more than half of what the
        // last one wrote writes nothing and the freeze takes it all — against a client
        // rewriting its data as fast as it is written, each pass would write everything again.
        //
        // And none at all for a few commits after one whose early passes were mostly in
        // vain — the records they wrote were written again before the freeze, so the frozen
        // pass wrote them a second time (a client rewriting its file faster than a commit
        // interval: every byte hashed and written twice per commit). Then the freeze comes
        // first and each record is written once; the price is a longer quiescing phase, in
        // which log writes wait — so never while anyone syncs (log blocks were written since
        // the last commit). Every fourth commit tries the passes again. Nor when the open
        // txg already shows a writer rewriting its data (more bytes written again than are
        // dirty): the first commit of a rewriting client need not learn it by waste.
        let skip = {
            let mut p = self.lock_raw();
            let synced = p.ilog.blocks_written != p.txg.log_blocks_at_commit;
            p.txg.log_blocks_at_commit = p.ilog.blocks_written;
            let skip = (p.txg.skip_early_passes > 0 || p.rewrites_outpace_commits()) && !synced;
            p.txg.skip_early_passes = if synced { 0 } else { p.txg.skip_early_passes.saturating_sub(1) };
            p.commit_stats.early_passes_skipped += u64::from(skip);
            skip
        };
        let (mut early_records, mut early_stale) = (0, 0);
        let mut within = u64::MAX;
        for _ in 0..if skip { 0 } else { PREWRITE_PASSES_MAX } {
            match self.prewrite_within(within)? {
                Some(s) => {
                    early_records += s.records;
                    early_stale += s.stale;
                    if s.bytes < PREWRITE_AGAIN_BYTES {
                        break;
                    }
                    within = s.found_bytes / 2;
                }
                None => break,
            }
        }
        let frozen = {
            let mut p = self.lock_raw();
            // A txg frozen by a commit that never finished is written as it is; what was
            // written since stays for the next one.
            let quiesce = p.writable().is_ok() && (p.txg.frozen_lsn.is_some() || p.is_dirty());
            if quiesce {
                if p.txg.frozen_lsn.is_none() {
                    p.freeze();
                }
                p.txg.quiescing = true;
            }
            quiesce
        };
        Ok(QuiescingTxg {
            pool: self,
            _gate: gate,
            settle: Settle { pool: self, armed: frozen },
            t0,
            early_records,
            early_stale,
        })
    }

    /// Run `f` in a [`PoolGuard`]; on NoSpace while freed space is held back or dirty data could
    /// be committed, commit (at most three txgs) and run it again. Commits when dirty data
    /// passes the limit. `f` runs in a [`Pool::txn_data`] first; if it needs more than a
    /// data write while a commit is in flight, it runs again once that commit has synced.
    pub fn with_space_retry<T>(&self, mut f: impl FnMut(&mut PoolGuard<'_>) -> Result<T>) -> Result<T> {
        let mut tries = 0;
        let mut wait_for_commit = false;
        loop {
            let mut t = if wait_for_commit { self.guard() } else { self.guard_for_data() };
            match f(&mut t) {
                Err(Error::CommitInFlight) if !wait_for_commit => wait_for_commit = true,
                Err(Error::NoSpace(_)) if tries < 3 && t.inner().could_free_space() => {
                    tries += 1;
                    let pins = t.inner().read_pins.clone();
                    if pins.scrubs_running() {
                        // Asked to yield by `could_free_space`: let go of the lock while it does.
                        drop(t);
                        pins.wait_scrubs_gone();
                        continue;
                    }
                    if t.inner().txg.quiescing {
                        // The commit in flight releases space as it syncs: wait for it.
                        wait_for_commit = true;
                    } else {
                        t.inner().commit_always()?;
                    }
                }
                Err(e) => return Err(e),
                Ok(v) => {
                    let over = {
                        let p = t.inner();
                        p.dirty_bytes() > p.dirty_limit_bytes
                    };
                    drop(t);
                    if over {
                        self.commit()?;
                    }
                    return Ok(v);
                }
            }
        }
    }

    /// Commit if dirty data passed the pool's limit (callers that group work in a `PoolGuard`
    /// call this after the group). Waits for a commit in flight only when over the limit.
    pub fn commit_if_over_dirty_limit(&self) -> Result<()> {
        let over = {
            let p = self.lock_raw();
            p.dirty_bytes() > p.dirty_limit_bytes
        };
        if over {
            self.commit()?;
        }
        Ok(())
    }
}

/// A commit between its freeze and its sync (`Pool::begin_commit`).
pub struct QuiescingTxg<'a> {
    pool: &'a Pool,
    _gate: MutexGuard<'a, ()>,
    settle: Settle<'a>,
    t0: Instant,
    /// Records the early prewrite passes wrote, and those they prepared in vain (changed
    /// before they were placed).
    early_records: u64,
    early_stale: u64,
}

impl QuiescingTxg<'_> {
    /// Steps 3 and 4: write what of the frozen data is not written yet, without the lock,
    /// then sync the txg. Returns the txg now durable. Dropped instead, it syncs the txg
    /// under the lock (its data included).
    pub fn finish(self) -> Result<u64> {
        self.finish_then(|_, txg| Ok(txg))
    }

    /// `finish`, then `then` under the same hold of the lock, with the txg synced: for an
    /// administrative change (snapshot, clone, restore, delete) that must see everything
    /// committed and commits itself (`PoolInner::commit_always`) — only what was written
    /// while the commit quiesced is then synced under the lock, not all the dirty data.
    pub(crate) fn finish_then<T>(self, then: impl FnOnce(&mut PoolInner, u64) -> Result<T>) -> Result<T> {
        let pool = self.pool;
        let mut in_vain = false;
        if self.settle.armed {
            // Frozen under the lock, not yet written: writers go on, other changes wait. An
            // error here is the frozen pass's: the pool latches and the txg is not synced.
            if let Err(e) = pool.failpoints.hit(crate::failpoint::COMMIT_FREEZE_TO_SYNC) {
                let mut p = pool.lock_raw();
                if p.health.latched.is_none() {
                    p.health.latched = Some(format!("commit of txg {} failed: {e}", p.txg.next));
                }
                return Err(e);
            }
            let frozen = pool.prewrite()?;
            // In vain: what the early passes prepared was mostly changed again, before
            // they placed it or after (the frozen pass wrote it a second time).
            let (done, wasted) = (self.early_records + self.early_stale, frozen.rewritten + self.early_stale);
            in_vain = done > 0 && wasted * 2 > done;
        }
        let prewrite = self.t0.elapsed();
        let mut p = pool.lock_raw();
        if in_vain {
            p.txg.skip_early_passes = SKIP_EARLY_PASSES;
        }
        p.txg.quiescing = false;
        let (t1, read0) = (Instant::now(), p.io.stats.blocks_read.load(Ordering::Relaxed));
        let synced = p.txg.synced;
        let r = p.commit();
        if matches!(r, Ok(txg) if txg != synced) {
            let read = p.io.stats.blocks_read.load(Ordering::Relaxed) - read0;
            p.commit_stats.record(prewrite, t1.elapsed(), read);
            let written = p.io.stats.bytes_written.load(Ordering::Relaxed);
            pool.counters.record_commit(self.t0.elapsed(), t1.elapsed(), written);
        }
        let out = r.and_then(|txg| then(&mut p, txg));
        let retired = std::mem::take(&mut p.retired_log);
        drop(p);
        drop(self);
        drop(retired);
        out
    }
}

/// Ends a quiescing phase however the commit ends (a failed prewrite has latched the pool):
/// the pool is settled and everything waiting in `Pool::lock` goes on.
struct Settle<'a> {
    pool: &'a Pool,
    armed: bool,
}

impl Drop for Settle<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut p = self.pool.lock_raw();
            p.txg.quiescing = false;
            // A commit dropped before it synced: sync the frozen txg now, under the lock —
            // the live state must not take other changes while a frozen set waits. (After a
            // failed prewrite the pool is latched and nothing changes any more.)
            if p.txg.frozen_lsn.is_some() && p.writable().is_ok() {
                let _ = p.commit();
            }
            let retired = std::mem::take(&mut p.retired_log);
            drop(p);
            drop(retired);
            self.pool.settled.notify_all();
        }
    }
}
