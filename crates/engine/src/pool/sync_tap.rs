//! The sync tap: every operation on chosen volumes, handed in recording order to whoever
//! keeps a synchronous mirror of them (docs/mirrors.md, "Synchronous mode"), and syncs that
//! wait until the mirror holds what they make durable.
//!
//! What the tap sees is the exact sequence of operations applied to the tapped volumes —
//! not only what the intent log writes: a commit makes operations durable that no log
//! block carried, and an fsync after it finds nothing to write, so a mirror fed only from
//! log blocks would miss acknowledged data. Each [`TapFrame`] is one `PoolGuard`'s
//! operations on tapped volumes (writes with their bytes), encoded as intent-log records
//! (format/intent.rs) and ended by a `GroupEnd`, stamped with the txg those operations
//! belong to. A commit that freezes while a group is open (a guard that commits inside)
//! ends its frame there, so every frame's operations lie in one txg: a mirror at snapshot
//! S, taken at txg T, replays exactly the frames with txg > T (repl/journal.rs).
//!
//! [`SyncTap::push`] runs under the pool's lock, in recording order, and must not block;
//! [`SyncTap::wait`] runs in a sync (`Pool::sync_log`, `Pool::sync_object`) after the local
//! intent-log write, outside the lock.

use crate::error::Result;
use crate::format::codec::Writer;
use crate::format::intent::{LogRecord, WRITE_DATA_MAX};
use crate::pool::{Pool, PoolInner};
use std::sync::Arc;

/// One group of operations on tapped volumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapFrame {
    /// 1, 2, 3, ... since the tap was installed.
    pub seq: u64,
    /// The txg the operations belong to (a snapshot taken at txg T contains them iff
    /// `txg <= T`).
    pub txg: u64,
    /// Encoded `LogRecord`s, the last a `GroupEnd`.
    pub records: Vec<u8>,
}

/// Whoever keeps the tapped volumes' mirror (the daemon's sync mirror; a test's journal).
pub trait SyncTap: Send + Sync {
    /// Whether operations on volume `vol` (its id in this pool) are tapped.
    fn wants(&self, vol: u64) -> bool;
    /// A frame, in recording order. Called under the pool's lock: queue it, never block.
    fn push(&self, frame: TapFrame);
    /// A sync will wait for frames up to `seq` once its local log write is done: start
    /// shipping them now, so that the two writes overlap. Must not block.
    fn prepare(&self, _seq: u64) {}
    /// Return once every frame up to `seq` is durable on the mirror — or fail the sync
    /// (a strict mirror that cannot reach its target), or return Ok having given up on
    /// the mirror (it falls back to asynchronous and says so itself).
    fn wait(&self, seq: u64) -> Result<()>;
}

/// The tap installed on a pool, and the frame being recorded.
pub(crate) struct TapState {
    tap: Arc<dyn SyncTap>,
    open: Writer,
    open_txg: Option<u64>,
    pushed: u64,
}

impl TapState {
    /// The txg that operations recorded now belong to: the open one, or after a freeze
    /// (a commit writing its data) the one after it.
    fn recording_txg(p_next: u64, frozen: bool) -> u64 {
        p_next + u64::from(frozen)
    }
}

impl PoolInner {
    /// The open frame's records, if the tap wants volume `vol` (the frame takes the txg
    /// of its first record).
    fn tap_frame_for(&mut self, vol: u64) -> Option<&mut Writer> {
        let txg = TapState::recording_txg(self.txg.next, self.txg.frozen_lsn.is_some());
        let t = self.tap.as_mut()?;
        if !t.tap.wants(vol) {
            return None;
        }
        t.open_txg.get_or_insert(txg);
        Some(&mut t.open)
    }

    /// Record `r` for the tap if it wants its volume.
    pub(crate) fn tap_record(&mut self, r: &LogRecord) {
        let Some(vol) = r.volume() else { return };
        if let Some(w) = self.tap_frame_for(vol) {
            r.encode_into(w);
        }
    }

    /// Record a write with its bytes for the tap (records of at most `WRITE_DATA_MAX`).
    pub(crate) fn tap_write(&mut self, vol: u64, obj: u64, offset: u64, data: &[u8]) {
        let Some(w) = self.tap_frame_for(vol) else { return };
        for (i, chunk) in data.chunks(WRITE_DATA_MAX).enumerate() {
            let at = offset + (i * WRITE_DATA_MAX) as u64;
            LogRecord::encode_write_header(w, vol, obj, at, chunk.len());
            w.bytes(chunk);
        }
    }

    /// End the frame being recorded, if any, and hand it to the tap: at the end of every
    /// `PoolGuard`, and when a commit freezes (its operations are in the frozen txg).
    pub(crate) fn tap_end_frame(&mut self) {
        let Some(t) = self.tap.as_mut() else { return };
        let Some(txg) = t.open_txg.take() else { return };
        LogRecord::GroupEnd.encode_into(&mut t.open);
        t.pushed += 1;
        let records = std::mem::replace(&mut t.open, Writer::with_capacity(0)).into_inner();
        t.tap.push(TapFrame { seq: t.pushed, txg, records });
    }

    /// The tap and the last frame pushed, if a sync of `vol` (None: of everything) must
    /// wait for it.
    pub(crate) fn tap_wait_point(&self, vol: Option<u64>) -> Option<(Arc<dyn SyncTap>, u64)> {
        let t = self.tap.as_ref()?;
        if t.pushed == 0 || vol.is_some_and(|v| !t.tap.wants(v)) {
            return None;
        }
        Some((t.tap.clone(), t.pushed))
    }
}

impl Pool {
    /// Install `tap` (or remove it with None). Returns the first txg whose operations the
    /// tap sees *all* of: a mirror needs a snapshot taken at txg `from - 1` or later as
    /// its base before the frames alone keep it current.
    pub fn set_sync_tap(&self, tap: Option<Arc<dyn SyncTap>>) -> u64 {
        let mut p = self.lock();
        // Operations recorded before now, in the txg recording now, are not tapped.
        let from = TapState::recording_txg(p.txg.next, p.txg.frozen_lsn.is_some()) + 1;
        p.tap = tap.map(|tap| TapState { tap, open: Writer::with_capacity(0), open_txg: None, pushed: 0 });
        from
    }

    /// The frames pushed to the installed tap so far (0 without one).
    pub fn sync_tap_pushed(&self) -> u64 {
        self.lock().tap.as_ref().map_or(0, |t| t.pushed)
    }

    /// After a sync made `target` durable locally: wait for the tap's mirror (outside the
    /// lock), if the tap holds the target's operations.
    pub(crate) fn prepare_tap(point: &Option<(Arc<dyn SyncTap>, u64)>) {
        if let Some((tap, seq)) = point {
            tap.prepare(*seq);
        }
    }

    pub(crate) fn wait_for_tap(&self, point: Option<(Arc<dyn SyncTap>, u64)>) -> Result<()> {
        match point {
            Some((tap, seq)) => tap.wait(seq),
            None => Ok(()),
        }
    }
}
