//! By-reference intent-log records for large writes (ZFS's WR_INDIRECT).
//!
//! A logged write carries its bytes, so a synced write is written twice: into the log, then
//! by the commit. For a large write of whole records (at least `BY_REF_MIN` bytes, aligned
//! to the object's record size) a sync instead writes each record's bytes to a freshly
//! allocated block of the pool's device, uncompressed and checksummed, and logs a `WriteRef`
//! with the block pointers. On a volume without compression, if the record still holds
//! exactly those bytes when the txg commits, the block *is* the record's new block (it is
//! registered as a prewrite, prewrite.rs): the data is written once. Otherwise — overwritten
//! since, or a compressing volume — the block is only the log's and is freed at once, in the
//! open txg: frees are held until the next txg is durable, so it outlives the log, which that
//! commit retires; the commit then writes the record compressed (and packed, deduplicated)
//! like any other.
//!
//! Why compressing volumes do not reuse the block: compressing on the sync path made every
//! large fsync wait for the CPU work (measured: sysbench on an lz4 volume at 0.77 of
//! compression off with it, 0.91 without, docs/benchmarks/efficiency.md), while the commit
//! compresses in the prewrite, off the sync path; the price is the data written twice, the
//! second time compressed.
//!
//! Order on the device: the blocks are written before the log block, and the log block's
//! flush covers them when the log is in the pool; with a separate log device the pool's
//! device is flushed first. A crash before the flush may leave a log block whose references
//! do not verify: it was never acknowledged, and replay stops before it, as at a torn block.
//!
//! Replay reads and verifies every referenced block before applying anything of its log
//! block, and *holds* the blocks' units (`Allocator::hold`) so that the commit after replay
//! cannot reuse them: if that commit is lost, the next open replays the same log again.

use crate::catalog::volume::ObjectId;
use crate::error::Result;
use crate::format::{round_up_unit, BlockPtr, ChecksumAlgo, Compression, UNIT_SIZE};
use crate::pipeline::compress::CompressionPolicy;
use crate::pipeline::trimmed;
use crate::pool::prewrite::{register, NewBlock, PrewriteBatch, Stored};
use crate::pool::{PoolInner, VolumeId};
use crate::txg::intent_log::{RefCandidate, SyncTarget};
use std::collections::HashMap;
use std::sync::Arc;

/// (group lsn, index among its large writes) → the blocks holding its records.
pub(crate) type Refs = HashMap<(u64, usize), Vec<BlockPtr>>;

/// A large write ready to be placed: its records compressed and checksummed.
pub(crate) struct PreparedRef {
    cand: RefCandidate,
    record_size: u64,
    records: Vec<(Stored, Compression, [u8; 32])>,
}

/// The large writes of what a sync of `target` would write that can go by reference: whole
/// records of their object, none all zero (a hole is cheaper carried).
pub(crate) fn candidates(p: &mut PoolInner, target: SyncTarget) -> Vec<(RefCandidate, u64, CompressionPolicy)> {
    let mut out = Vec::new();
    for mut c in p.ilog.ref_candidates(target) {
        let PoolInner { io, catalog: crate::catalog::Catalog { volumes, .. }, .. } = &mut *p;
        let Some(v) = volumes.get_mut(&VolumeId(c.vol)) else { continue };
        let Ok(dn) = v.dnode_phys(io, ObjectId(c.obj)) else { continue };
        let rs = dn.record_size as u64;
        let whole = rs > 0 && c.offset.is_multiple_of(rs) && (c.len as u64).is_multiple_of(rs);
        if !whole {
            continue;
        }
        // The range as it is now (intent_log.rs: deferred writes are read when synced).
        c.data = vec![0; c.len];
        if v.read_into(io, ObjectId(c.obj), c.offset, &mut c.data).is_err() {
            continue;
        }
        if c.data.chunks(rs as usize).all(|r| !trimmed(r).is_empty()) {
            out.push((c, rs, v.record.phys.compression));
        }
    }
    out
}

/// Checksum the candidates' records (without the pool's lock). They stay uncompressed: see
/// the module comment.
pub(crate) fn prepare(cands: Vec<(RefCandidate, u64, CompressionPolicy)>, algo: ChecksumAlgo) -> Vec<PreparedRef> {
    cands
        .into_iter()
        .map(|(cand, record_size, _policy)| {
            let stored: Vec<Stored> =
                cand.data.chunks(record_size as usize).map(|raw| Stored::Compressed(trimmed(raw).to_vec())).collect();
            let inputs: Vec<&[u8]> = stored.iter().map(Stored::bytes).collect();
            let checksums = algo.compute_many(&inputs);
            let records = stored.into_iter().zip(checksums).map(|(s, c)| (s, Compression::None, c)).collect();
            PreparedRef { cand, record_size, records }
        })
        .collect()
}

/// Allocate blocks for the prepared writes whose groups are still waiting (under the lock),
/// register those that are their record's current content as prewrites, free the others
/// at once (held past the log's retirement), and return the references with the batch that
/// writes the blocks (already listed for the commit to complete). Near a full pool, none.
pub(crate) fn place(p: &mut PoolInner, prepared: Vec<PreparedRef>) -> (Refs, Option<Arc<PrewriteBatch>>) {
    let mut refs = Refs::new();
    let needed: u64 = prepared
        .iter()
        .flat_map(|pr| pr.records.iter())
        .map(|(s, _, _)| round_up_unit(s.bytes().len() as u64) / UNIT_SIZE)
        .sum();
    if prepared.is_empty() || p.alloc.available_units() < needed * 2 || p.health.latched.is_some() {
        return (refs, None);
    }
    let txg = p.txg.next;
    let algo = p.io.checksum_algo();
    let mut blocks = Vec::new();
    // These blocks are acknowledged before their txg commits: on a parity2 set they get
    // rows of their own, which no later write of the txg touches (alloc/rows.rs).
    p.alloc.close_row();
    for pr in prepared {
        if !p.ilog.is_pending(pr.cand.lsn) {
            continue; // written meanwhile by another sync, with its bytes
        }
        let PoolInner { alloc, ddt, io, catalog: crate::catalog::Catalog { volumes, .. }, .. } = &mut *p;
        let Some(v) = volumes.get_mut(&VolumeId(pr.cand.vol)) else { continue };
        let mut bps = Vec::with_capacity(pr.records.len());
        let first = pr.cand.offset / pr.record_size;
        // A compressing volume's commit writes the record compressed: the block is the log's.
        let reuse = v.record.phys.compression == CompressionPolicy::Off;
        for (i, (stored, compression, checksum)) in pr.records.into_iter().enumerate() {
            let new = NewBlock { stored: &stored, lsize: pr.record_size as usize, compression, checksum };
            let Some(bp) = new.allocate(alloc, io, txg, algo, CompressionPolicy::Off) else { break };
            let key = (ObjectId(pr.cand.obj), first + i as u64);
            let chunk = &pr.cand.data[i * pr.record_size as usize..(i + 1) * pr.record_size as usize];
            match v.dirty.dirty_content_equal(key, chunk).filter(|_| reuse) {
                // The record holds exactly these bytes: the commit reuses the block.
                Some(content) => {
                    register(v, alloc, ddt, io, key, content, bp, txg);
                }
                None => alloc.free_block(&bp, txg).expect("a block just allocated is ours to free"),
            }
            blocks.push((bp.addr, stored));
            bps.push(bp);
        }
        if bps.len() * pr.record_size as usize == pr.cand.data.len() {
            p.ilog.ref_bytes += pr.cand.data.len() as u64;
            refs.insert((pr.cand.lsn, pr.cand.index), bps);
        }
        // else: out of space midway; the blocks placed are prewrites or freed, and the
        // write goes with its bytes.
    }
    p.alloc.close_row();
    if blocks.is_empty() {
        return (refs, None);
    }
    let batch = Arc::new(PrewriteBatch::new(blocks));
    p.prewrites.push(batch.clone());
    (refs, Some(batch))
}

/// Replay's side: read and verify every block a log record references, keeping the bytes
/// for `apply`. A block that does not verify ends the log there (never acknowledged); a
/// device error is returned.
pub(crate) struct RefReader<'a> {
    pub io: &'a crate::pipeline::BlockIo,
    pub fetched: HashMap<(u64, u64), Arc<Vec<u8>>>,
    pub error: Option<crate::error::Error>,
}

impl RefReader<'_> {
    pub(crate) fn verify(&mut self, r: &crate::format::intent::LogRecord) -> bool {
        let crate::format::intent::LogRecord::WriteRef { bps, .. } = r else { return true };
        for bp in bps {
            match self.io.read_data(bp) {
                Ok(d) => {
                    self.fetched.insert((bp.addr, bp.birth_txg), d);
                }
                Err(e) if e.kind() == crate::error::ErrorKind::Corruption => return false,
                Err(e) => {
                    self.error.get_or_insert(e);
                    return false;
                }
            }
        }
        true
    }

    /// The bytes of a verified WriteRef's blocks, in order.
    pub(crate) fn data(&self, bps: &[BlockPtr]) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for bp in bps {
            let d = self.fetched.get(&(bp.addr, bp.birth_txg)).ok_or_else(|| {
                crate::error::Corruption::new("intent log", Some(bp.addr), "write reference was not verified")
            })?;
            out.extend_from_slice(d);
        }
        Ok(out)
    }
}
