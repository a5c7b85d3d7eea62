//! Replay of the intent log on pool open (intent_log.rs): read the blocks that verify and
//! carry the current base, then apply their complete groups, in order, to the opened root
//! and commit. The records come from disk: indexing, slicing, `unwrap` and `expect` are
//! denied here as in `format` (docs/failure-policy.md).

#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]

use crate::error::{Corruption, Error, Result};
use crate::format::intent::{LogBlockPhys, LogRecord, LOG_HEADER};
use crate::format::UNIT_SIZE;
use crate::txg::intent_log::{IntentLog, LogPlace};

impl IntentLog {
    /// The complete groups logged on top of root `root_txg`, in order.
    /// `verify` sees every record of a block before any of its groups is taken: a false
    /// ends the log before that block (its referenced data did not land: never
    /// acknowledged).
    pub fn read(
        place: &LogPlace,
        pool_guid: u64,
        root_txg: u64,
        verify: &mut dyn FnMut(&LogRecord) -> bool,
    ) -> Result<Vec<Vec<LogRecord>>> {
        let (dev, log_offset, log_bytes) = (place.dev.as_ref(), place.offset, place.bytes);
        let mut groups = Vec::new();
        let mut current = Vec::new();
        let mut at = 0u64;
        let mut seq = 0u64;
        let mut first = vec![0u8; UNIT_SIZE as usize];
        while at + UNIT_SIZE <= log_bytes {
            // A device set tries its other copies of a block that does not continue the
            // log (device/mirror.rs): one damaged copy must not end the log early.
            let header_ok = |b: &[u8]| {
                LogBlockPhys::header(b).is_some_and(|(guid, base, s, _, units)| {
                    guid == pool_guid && base == root_txg && s == seq && units != 0
                })
            };
            // No copy that continues the log: it ends here (a set returns some copy then).
            if !dev
                .read_verified(&mut first, log_offset + at, 0..UNIT_SIZE as usize, &header_ok)
                .map_err(|e| Error::io("read intent log", e))?
            {
                break;
            }
            let Some((guid, base, s, _len, units)) = LogBlockPhys::header(&first) else { break };
            let size = units as u64 * UNIT_SIZE;
            if guid != pool_guid || base != root_txg || s != seq || units == 0 || at + size > log_bytes {
                break;
            }
            let mut buf = vec![0u8; size as usize];
            let block_ok = |b: &[u8]| header_ok(b) && LogBlockPhys::decode(b).is_some();
            // The whole block is verified again, header included: a device set may take it
            // from another member than the header, and a member's copy that is a whole,
            // valid block of an older base (the new one's write never reached it) must not
            // pass for the continuation — seed 200001139 of the simulator replayed an old
            // truncate that way, under a header read from the other member.
            if !dev
                .read_verified(&mut buf, log_offset + at, 0..size as usize, &block_ok)
                .map_err(|e| Error::io("read intent log", e))?
            {
                break;
            }
            let Some(block) = LogBlockPhys::decode(&buf) else { break };
            debug_assert!(block.payload.len() + LOG_HEADER <= buf.len());
            let records = LogRecord::decode_all(&block.payload)?;
            if !records.iter().all(&mut *verify) {
                break;
            }
            for r in records {
                match r {
                    LogRecord::GroupEnd => groups.push(std::mem::take(&mut current)),
                    other => current.push(other),
                }
            }
            if !current.is_empty() {
                // Blocks hold whole groups; a verified block that ends mid-group is damage.
                return Err(Corruption::new("intent log", Some(log_offset + at), "block ends inside a group").into());
            }
            at += size;
            seq += 1;
        }
        Ok(groups)
    }
}

impl crate::pool::Pool {
    /// Apply what the intent log holds on top of the opened root, then commit (which
    /// retires the log). Read-only opens leave the log alone and say so.
    pub(crate) fn replay_intent_log(&self) -> Result<()> {
        let mut p = self.lock();
        let io = p.io.clone();
        let mut refs = crate::pool::log_ref::RefReader { io: &io, fetched: Default::default(), error: None };
        let groups = IntentLog::read(p.ilog.place(), p.label.pool_guid, p.txg.root.txg, &mut |r| refs.verify(r))?;
        if let Some(e) = refs.error.take() {
            return Err(e);
        }
        if groups.is_empty() {
            return Ok(());
        }
        let ops: usize = groups.iter().map(|g| g.len()).sum();
        if p.health.read_only {
            p.health.open_notes.push(format!(
                "{ops} operations in the intent log were not replayed (opened read-only): the state shown is the last commit"
            ));
            return Ok(());
        }
        // The blocks the log references stay untouched until the commit below lands.
        let txg = p.txg.next;
        for r in groups.iter().flatten() {
            if let LogRecord::WriteRef { bps, .. } = r {
                for bp in bps {
                    p.alloc.hold(bp.addr, bp.units(), txg);
                }
            }
        }
        for g in &groups {
            for r in g {
                apply(&mut p, r, &refs)?;
            }
        }
        p.commit()?;
        p.health.open_notes.push(format!("replayed {ops} operations ({} groups) from the intent log", groups.len()));
        Ok(())
    }
}

fn apply(p: &mut crate::pool::PoolInner, r: &LogRecord, refs: &crate::pool::log_ref::RefReader<'_>) -> Result<()> {
    use crate::catalog::volume::ObjectId;
    use crate::pool::{PoolInner, VolumeId};
    let PoolInner { io, alloc, catalog: crate::catalog::Catalog { volumes, .. }, .. } = p;
    let vol = r.volume().unwrap_or(0);
    let v = volumes
        .get_mut(&VolumeId(vol))
        .ok_or_else(|| Corruption::new("intent log", None, format!("record for unknown volume {vol}")))?;
    match r {
        LogRecord::Write { obj, offset, data, .. } => v.write(io, alloc, ObjectId(*obj), *offset, data),
        LogRecord::Truncate { obj, size, .. } => v.truncate(io, alloc, ObjectId(*obj), *size),
        LogRecord::Punch { obj, offset, len, .. } => v.punch_hole(io, alloc, ObjectId(*obj), *offset, *len),
        LogRecord::SetAttr { obj, attr, .. } => v.set_attr(io, ObjectId(*obj), attr),
        LogRecord::CreateObject { obj, attr, .. } => v.create_object_at(io, ObjectId(*obj), attr),
        LogRecord::DeleteObject { obj, .. } => v.delete_object(io, ObjectId(*obj)),
        LogRecord::KvPut { key, value, .. } => v.kv_put(io, key, value).map(|_| ()),
        LogRecord::KvDelete { key, .. } => v.kv_delete(io, key).map(|_| ()),
        LogRecord::WriteRef { obj, offset, bps, .. } => v.write(io, alloc, ObjectId(*obj), *offset, &refs.data(bps)?),
        LogRecord::GroupEnd => Ok(()),
    }
}
