//! Prewrite: the open txg's data records written before its commit, outside the pool's lock.
//!
//! A commit holds the pool's lock from start to end, and most of its time is the data:
//! compressing, checksumming and writing every dirty record. `Pool::commit` first runs a
//! prewrite so that this work happens while readers and writers go on:
//!
//! 1. under the lock: list the dirty records (their contents are `Arc`s: no copy);
//! 2. without it: compress (all cores) and checksum them;
//! 3. under the lock: allocate each a block of the open txg, note it in the volume's
//!    `prewritten` map together with the content it holds (and in the data cache);
//! 4. without it: write the blocks (contiguous runs as one write) and flush.
//!
//! The commit then points each record whose content is still the very `Arc` that was
//! written at its prewritten block instead of writing it (`Placement::Prewritten`). A record
//! changed meanwhile was copied on its first edit (`Arc::make_mut`: the prewrite holds a
//! reference), so its pointer differs and it is written as usual; its prewritten block,
//! never referenced by anything, is freed in that commit. A block counts as usable only for
//! the txg it was allocated in (its birth).
//!
//! Safety across crashes: a prewritten block is allocated only in memory until the commit
//! that references (or frees) it lands, so after a crash it is free space whose contents
//! nobody points at. A commit that runs while step 4 is still going (another caller commits
//! under the lock) first completes the batch's writes itself or waits for them
//! (`PrewriteBatch::complete`): no root ever references a block whose write has not been
//! issued before that root's flush. Step 4 never takes the pool's lock, so this cannot
//! deadlock.
//!
//! Space: the blocks an early pass allocates are extra to the dirty records' reservations
//! (the commit still needs those for records changed after their prewrite), so it takes at
//! most half the space available and leaves the rest to writers. The frozen pass may also
//! take what the allocator holds reserved for the frozen records, and hands it back as it
//! allocates their blocks (`hand_reservation`): a frozen record cannot change, so its block
//! is the one the commit would have allocated with that reservation. (Before, every pass
//! wanted twice its size free; a 1 GiB LUN rewritten at full speed on an 8 GiB pool had the
//! next txg's reservations take that space while the frozen pass hashed, and every commit
//! wrote its whole txg under the lock: 1.2–1.8 s of stalled writers.) Where the records found
//! hold more than the budget, the first ones that fit are written and the rest left to the
//! commit. What fits is chosen after the compression and before the checksums, so nothing is
//! hashed in vain (`PrewriteStats::checksummed`), and checked again under the lock in step 3.

use crate::catalog::volume::{ObjectId, Prewritten};
use crate::device::{AlignedBuf, BlockDevice};
use crate::error::{Error, Result};
use crate::format::{round_up_unit, BlockKind, BlockPtr, Compression, UNIT_SIZE};
use crate::pipeline::{packable, plan_packs, trimmed, PackItem};
use crate::pool::{Pool, PoolInner, VolumeId};
use crate::sync::atomic::Ordering;
use crate::sync::Mutex;
use std::sync::Arc;

/// Largest single device write of a batch (as the pipeline's combined writes).
const RUN_MAX: usize = 1 << 20;

/// Checksumming a gigabyte is 0.3 s of one CPU: the pass gives the CPU to whoever waits
/// for it (an NFS worker, the client) after each megabyte (~0.3 ms) instead of keeping it
/// for the scheduler's whole slice, which requests in flight would wait out — unless a
/// thread waits for this commit to sync (`Pool::waiting_on_commit`: a sync's log write
/// during the frozen pass), whom a slower commit would keep waiting.
const YIELD_EVERY_BYTES: usize = 1 << 20;
/// Records checksummed in one call (a multiple of the lanes: format/lanes.rs).
const HASH_BATCH: usize = 64;

/// The device writes of one prewrite; done by whoever gets to them first.
pub(crate) struct PrewriteBatch {
    state: Mutex<BatchState>,
}

struct BatchState {
    done: bool,
    /// How its writes failed (kind and message), for every later caller of `complete`:
    /// the cause travels with the error (a power failure stays recognisable as one).
    failed: Option<(std::io::ErrorKind, String)>,
    /// (address, stored bytes), sorted by address.
    blocks: Vec<(u64, Stored)>,
}

/// A block's bytes as stored: a record's own content (no copy) or its compressed form.
pub(crate) enum Stored {
    Raw(Arc<Vec<u8>>, usize),
    Compressed(Vec<u8>),
}

impl Stored {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Stored::Raw(content, psize) => &content[..*psize],
            Stored::Compressed(c) => c,
        }
    }
}

impl PrewriteBatch {
    /// A batch of `blocks` (address, bytes) to write, in any order.
    pub(crate) fn new(mut blocks: Vec<(u64, Stored)>) -> PrewriteBatch {
        blocks.sort_by_key(|(a, _)| *a);
        PrewriteBatch { state: Mutex::new(BatchState { done: false, failed: None, blocks }) }
    }

    /// Issue the batch's writes if nobody has (or wait until whoever is has finished).
    /// An error means a write failed: like a failed commit write, the pool must latch.
    pub(crate) fn complete(&self, dev: &dyn BlockDevice) -> Result<()> {
        // A panic while it was being written (`done` set, the writes not all issued) leaves
        // nothing to trust: fail, and the commit or prewrite that asked latches the pool.
        let Ok(mut st) = self.state.lock() else {
            let panicked = std::io::Error::other("a thread panicked while writing them");
            return Err(Error::io("write prewritten blocks", panicked));
        };
        if !st.done {
            st.done = true;
            let blocks = std::mem::take(&mut st.blocks);
            if let Err(e) = write_runs(dev, &blocks) {
                st.failed = Some((e.kind(), e.to_string()));
                return Err(Error::io("write prewritten blocks", e));
            }
        }
        match &st.failed {
            Some((kind, why)) => {
                let e = std::io::Error::new(*kind, format!("an earlier attempt failed: {why}"));
                Err(Error::io("write prewritten blocks", e))
            }
            None => Ok(()),
        }
    }
}

/// What one prewrite did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PrewriteStats {
    pub records: u64,
    /// Bytes written (units, after compression).
    pub bytes: u64,
    /// Bytes of the records it found to write (logical, before zero detection and
    /// compression).
    pub found_bytes: u64,
    /// Records written again because an earlier prewrite of them in this txg had gone
    /// stale (the record changed after it): work that earlier pass did in vain.
    pub rewritten: u64,
    /// Records compressed and checksummed, then dropped: changed before they could be
    /// placed (step 3). Also work in vain.
    pub stale: u64,
    /// Records checksummed (most of a prewrite's CPU): none when it finds, before its
    /// checksums, that the pool has no room for it.
    pub checksummed: u64,
}

struct Job {
    vol: VolumeId,
    key: (ObjectId, u64),
    content: Arc<Vec<u8>>,
    policy: crate::pipeline::compress::CompressionPolicy,
}

struct Prepared {
    job: Job,
    stored: Stored,
    compression: Compression,
    checksum: [u8; 32],
}

impl PoolInner {
    /// Units a prewrite of `txg` may allocate, while the txg is still open and the pool not
    /// latched (see the module comment): half of those available, and what the allocator
    /// still holds reserved for frozen records — their blocks are the ones the commit would
    /// allocate with those reservations (a frozen record cannot change any more).
    fn prewrite_budget(&self, txg: u64) -> Option<u64> {
        if self.txg.next != txg || self.health.latched.is_some() {
            return None;
        }
        let frozen: u64 = self.catalog.volumes.values().map(|v| v.dirty.frozen_reservation_held()).sum();
        Some(self.alloc.available_units() / 2 + frozen)
    }
}

/// A frozen record's block was allocated: the allocator gives back up to `units` of the
/// volume's frozen reservation (the volume keeps counting it for its quota until the txg is
/// durable). Records of the open txg keep theirs: they may still change.
fn hand_reservation(
    v: &mut crate::catalog::volume::VolumeState,
    alloc: &mut crate::alloc::Allocator,
    units: u64,
) -> u64 {
    if !v.dirty.is_frozen() {
        return 0;
    }
    let n = v.dirty.hand_frozen_reservation(units);
    alloc.release_reserved(n);
    n
}

impl Pool {
    /// Write the open txg's dirty data ahead of its commit (see the module comment). Does
    /// nothing on a read-only or latched pool. Whatever it chose not to do, the commit does;
    /// a device error latches the pool (as a failed commit would: a failed flush may have
    /// dropped written data) and is returned.
    pub fn prewrite(&self) -> Result<PrewriteStats> {
        Ok(self.prewrite_within(u64::MAX)?.unwrap_or_default())
    }

    /// [`PoolInner::prewrite_budget`], under the lock.
    fn prewrite_budget(&self, txg: u64) -> Option<u64> {
        self.lock_raw().prewrite_budget(txg)
    }

    /// [`Pool::prewrite`], unless the records to write hold more than `max_bytes`: then
    /// nothing is written and `None` is returned (a commit's passes stop chasing a writer
    /// that rewrites its data as fast as a pass writes it: quiesce.rs).
    pub(crate) fn prewrite_within(&self, max_bytes: u64) -> Result<Option<PrewriteStats>> {
        let (txg, jobs, checksum_algo, dev) = {
            let p = self.lock_raw();
            if p.health.read_only || p.health.latched.is_some() {
                return Ok(Some(PrewriteStats::default()));
            }
            let mut jobs = Vec::new();
            // While a commit quiesces, only what it froze: the rest is the next txg's.
            let frozen_only = p.txg.frozen_lsn.is_some();
            for (vid, v) in p.catalog.volumes.iter().filter(|(_, v)| !frozen_only || v.dirty.is_frozen()) {
                for (key, content) in v.dirty.prewrite_candidates() {
                    jobs.push(Job { vol: *vid, key, content, policy: v.record.phys.compression });
                }
            }
            (p.txg.next, jobs, p.io.checksum_algo(), p.dev.clone())
        };
        let found_bytes: u64 = jobs.iter().map(|j| j.content.len() as u64).sum();
        if found_bytes > max_bytes {
            return Ok(None);
        }
        if jobs.is_empty() {
            return Ok(Some(PrewriteStats::default()));
        }
        // Step 2: zero detection, compression and checksums, without the lock.
        let jobs: Vec<Job> = jobs.into_iter().filter(|j| !trimmed(&j.content).is_empty()).collect();
        let mut by_policy: Vec<(crate::pipeline::compress::CompressionPolicy, Vec<Job>)> = Vec::new();
        for j in jobs {
            match by_policy.iter_mut().find(|(p, _)| *p == j.policy) {
                Some((_, v)) => v.push(j),
                None => by_policy.push((j.policy, vec![j])),
            }
        }
        let mut compressed = Vec::new();
        for (policy, group) in by_policy {
            let inputs: Vec<&[u8]> = group.iter().map(|j| trimmed(&j.content)).collect();
            let outputs = crate::pipeline::compress::compress_batch(policy, &inputs);
            for (job, c) in group.into_iter().zip(outputs) {
                compressed.push(match c {
                    Some((algo, bytes)) => (job, algo, Stored::Compressed(bytes)),
                    None => {
                        let psize = trimmed(&job.content).len();
                        let raw = Stored::Raw(job.content.clone(), psize);
                        (job, Compression::None, raw)
                    }
                });
            }
        }
        // What fits in the space it may take, chosen before the checksums (a pool with too
        // little room for all of it hashed every dirty byte here, and again in the frozen
        // pass, for nothing, and then once more in the commit).
        let Some(budget) = self.prewrite_budget(txg) else {
            return Ok(Some(PrewriteStats { found_bytes, ..Default::default() }));
        };
        let mut needed = 0;
        let fits = compressed
            .iter()
            .map(|(_, _, st)| round_up_unit(st.bytes().len() as u64) / UNIT_SIZE)
            .take_while(|&units| {
                let fit = needed + units <= budget;
                needed += if fit { units } else { 0 };
                fit
            })
            .count();
        compressed.truncate(fits);
        if compressed.is_empty() {
            return Ok(Some(PrewriteStats { found_bytes, ..Default::default() }));
        }
        // Checksums a batch at a time (records of one size share the SIMD lanes: lanes.rs).
        let mut since_yield = 0;
        let mut prepared = Vec::with_capacity(compressed.len());
        let mut compressed = compressed.into_iter().peekable();
        while compressed.peek().is_some() {
            let batch: Vec<_> = compressed.by_ref().take(HASH_BATCH).collect();
            let inputs: Vec<&[u8]> = batch.iter().map(|(_, _, stored)| stored.bytes()).collect();
            let checksums = checksum_algo.compute_many(&inputs);
            since_yield += inputs.iter().map(|b| b.len()).sum::<usize>();
            for ((job, compression, stored), checksum) in batch.into_iter().zip(checksums) {
                prepared.push(Prepared { job, stored, compression, checksum });
            }
            if since_yield >= YIELD_EVERY_BYTES {
                since_yield = 0;
                if self.waiting_on_commit.load(Ordering::Relaxed) == 0 {
                    crate::sync::thread::yield_now();
                }
            }
        }
        let checksummed = prepared.len() as u64;
        // Step 3: allocate and register, under the lock.
        let (batch, stats) = {
            let mut p = self.lock_raw();
            if p.prewrite_budget(txg).is_none_or(|budget| needed > budget) {
                return Ok(Some(PrewriteStats { found_bytes, checksummed, ..Default::default() }));
            }
            let mut blocks: Vec<(u64, Stored)> = Vec::with_capacity(prepared.len());
            let mut stats = PrewriteStats { found_bytes, checksummed, ..Default::default() };
            let crate::pool::PoolInner { alloc, ddt, io, catalog: crate::catalog::Catalog { volumes, .. }, .. } =
                &mut *p;
            // Records changed since step 1 are left to the commit (it writes the new content).
            // Records of dedup volumes whose bytes the dedup table holds become references
            // (nothing to write; the pool's checksums are BLAKE3, so a checksum is the key).
            let mut fresh = Vec::with_capacity(prepared.len());
            for pr in prepared {
                let Some(v) = volumes.get_mut(&pr.job.vol) else { continue };
                if !v.dirty.still_holds(pr.job.key, &pr.job.content) {
                    stats.stale += 1;
                    continue;
                }
                let lsize = pr.job.content.len();
                match v.record.phys.dedup.then(|| ddt.reference(&pr.checksum, lsize, pr.compression, txg)).flatten() {
                    Some(bp) => {
                        stats.records += 1;
                        stats.rewritten += u64::from(register(v, alloc, ddt, io, pr.job.key, pr.job.content, bp, txg));
                    }
                    None => fresh.push(pr),
                }
            }
            let (mut small, large): (Vec<Prepared>, Vec<Prepared>) = fresh.into_iter().partition(|pr| {
                io.packing() && pr.compression != Compression::None && packable(pr.stored.bytes().len())
            });
            for pr in large {
                let v = volumes.get_mut(&pr.job.vol).expect("filtered above");
                let lsize = pr.job.content.len();
                let new = NewBlock { stored: &pr.stored, lsize, compression: pr.compression, checksum: pr.checksum };
                let Some(mut bp) = new.allocate(alloc, io, txg, checksum_algo, pr.job.policy) else { break };
                stats.records += 1;
                stats.bytes += bp.units() * UNIT_SIZE;
                bp.dedup = v.record.phys.dedup && ddt.add(&bp, txg);
                stats.rewritten += u64::from(register(v, alloc, ddt, io, pr.job.key, pr.job.content, bp, txg));
                hand_reservation(v, alloc, bp.units());
                blocks.push((bp.addr, pr.stored));
            }
            // Small compressed records go into packs (compaction), each pack one block.
            let sizes: Vec<usize> = small.iter().map(|pr| pr.stored.bytes().len()).collect();
            for (_, count, units) in plan_packs(&sizes) {
                let members: Vec<Prepared> = small.drain(..count).collect();
                let items: Vec<PackItem<'_>> = members
                    .iter()
                    .map(|pr| PackItem {
                        stored: pr.stored.bytes(),
                        compression: pr.compression,
                        lsize: pr.job.content.len(),
                        checksum: pr.checksum,
                    })
                    .collect();
                let mut buf = Vec::new();
                let Ok((addr, bps)) = io.place_pack(alloc, &items, units, txg, &mut buf) else { break };
                drop(items);
                // The pack's units, handed from its members' reservations in turn.
                let mut to_hand = units;
                for (pr, mut bp) in members.into_iter().zip(bps) {
                    let v = volumes.get_mut(&pr.job.vol).expect("filtered above");
                    to_hand -= hand_reservation(v, alloc, to_hand);
                    stats.records += 1;
                    bp.dedup = v.record.phys.dedup && ddt.add(&bp, txg);
                    stats.rewritten += u64::from(register(v, alloc, ddt, io, pr.job.key, pr.job.content, bp, txg));
                }
                stats.bytes += units * UNIT_SIZE;
                blocks.push((addr, Stored::Compressed(buf)));
            }
            let batch = Arc::new(PrewriteBatch::new(blocks));
            p.prewrites.push(batch.clone());
            (batch, stats)
        };
        // Step 4: the writes and a flush, without the lock (the commit's flush is then short).
        // The batch is the commit's now: a commit that comes first writes it itself.
        let done = self
            .failpoints
            .hit(crate::failpoint::PREWRITE_HANDOFF)
            .and_then(|()| batch.complete(dev.as_ref()))
            .and_then(|()| dev.flush().map_err(|e| Error::io("flush prewritten blocks", e)));
        if let Err(e) = done {
            let mut p = self.lock_raw();
            p.io.discard_writes();
            if p.health.latched.is_none() {
                p.health.latched = Some(format!("prewrite of txg {txg} failed: {e}"));
            }
            return Err(e);
        }
        Ok(Some(stats))
    }
}

/// A data block about to be written ahead of its commit: its bytes as stored, logical
/// size, compression and checksum.
pub(crate) struct NewBlock<'a> {
    pub stored: &'a Stored,
    pub lsize: usize,
    pub compression: Compression,
    pub checksum: [u8; 32],
}

impl NewBlock<'_> {
    /// Allocate it a block born in `txg` and count the write (None: no space).
    pub(crate) fn allocate(
        &self,
        alloc: &mut crate::alloc::Allocator,
        io: &crate::pipeline::BlockIo,
        txg: u64,
        checksum_algo: crate::format::ChecksumAlgo,
        policy: crate::pipeline::compress::CompressionPolicy,
    ) -> Option<BlockPtr> {
        let psize = self.stored.bytes().len();
        let units = round_up_unit(psize as u64) / UNIT_SIZE;
        let addr = alloc.allocate(units).ok()?;
        if self.compression != Compression::None {
            io.stats.compressed_blocks_written.fetch_add(1, Ordering::Relaxed);
        } else if policy != crate::pipeline::compress::CompressionPolicy::Off {
            io.stats.compression_skipped.fetch_add(1, Ordering::Relaxed);
        }
        io.stats.blocks_written.fetch_add(1, Ordering::Relaxed);
        io.stats.bytes_written.fetch_add(units * UNIT_SIZE, Ordering::Relaxed);
        Some(BlockPtr {
            addr,
            birth_txg: txg,
            psize: psize as u32,
            lsize: self.lsize as u32,
            device: 0,
            kind: BlockKind::Data,
            compression: self.compression,
            checksum_algo,
            packed: false,
            dedup: false,
            checksum: self.checksum,
        })
    }
}

/// Record `key`'s `content` as written at `bp` (the commit uses the block if the record
/// still holds that very content), and keep it in the data cache: what was just written is
/// likely read again (the cache shares the record's buffer). An earlier prewrite of the
/// record, since changed, is freed: nobody references it (returns true then).
pub(crate) fn register(
    v: &mut crate::catalog::volume::VolumeState,
    alloc: &mut crate::alloc::Allocator,
    ddt: &mut crate::pipeline::dedup::DedupTable,
    io: &crate::pipeline::BlockIo,
    key: (ObjectId, u64),
    content: Arc<Vec<u8>>,
    bp: BlockPtr,
    txg: u64,
) -> bool {
    io.cache_data(&bp, content.clone());
    match v.dirty.prewritten.insert(key, Prewritten { content, bp }) {
        Some(old) => {
            ddt.free(alloc, &old.bp, txg).expect("a prewritten block is ours to free");
            true
        }
        None => false,
    }
}

/// Write `blocks` (sorted by address), contiguous ones joined into writes of up to RUN_MAX
/// bytes through one reused aligned buffer (O_DIRECT needs alignment; a fresh buffer per run
/// would cost a page fault per page).
fn write_runs(dev: &dyn BlockDevice, blocks: &[(u64, Stored)]) -> std::io::Result<()> {
    let mut buf = AlignedBuf::zeroed(RUN_MAX);
    let mut start = 0u64;
    let mut len = 0usize;
    for (addr, stored) in blocks {
        let bytes = stored.bytes();
        let padded = round_up_unit(bytes.len() as u64) as usize;
        if len > 0 && (*addr != start + len as u64 || len + padded > RUN_MAX) {
            dev.write_at(&buf[..len], start)?;
            len = 0;
        }
        if len == 0 {
            start = *addr;
        }
        buf[len..len + bytes.len()].copy_from_slice(bytes);
        buf[len + bytes.len()..len + padded].fill(0);
        len += padded;
    }
    if len > 0 {
        dev.write_at(&buf[..len], start)?;
    }
    Ok(())
}
