//! The block pipeline: how a logical block becomes stored bytes and back.
//!
//! Write: trim the zero tail → compress data records when the volume's policy says so and
//! it saves a unit (compress.rs) → checksum the stored bytes → allocate → write. Read: read →
//! verify → decompress / expand. A read that
//! fails verification returns a typed [`Corruption`] and bumps a counter; it never returns
//! the unverified bytes.
//!
//! Writes of a txg are combined: the allocator hands out addresses next-fit, so the blocks
//! of one commit mostly follow each other on the device, and consecutive blocks go out as
//! one large write (up to WRITE_BATCH_MAX bytes) instead of one small synchronous write
//! each. `finish_writes` issues what is pending; the commit calls it before flushing, and
//! a read that overlaps a pending block issues it first.
//!
//! Decoded metadata blocks (B+tree nodes, indirect blocks) and data records are kept in
//! bounded caches keyed by (address, birth txg) (cache.rs): a reused address always carries
//! a newer birth txg, so an entry can never be confused with the block that replaced it, and
//! nothing needs invalidating. Data records enter when read, and when a prewrite writes them
//! (the record's own buffer, shared: no copy). See docs/commits-and-caching.md.

pub mod cache;
pub mod compress;
pub mod dedup;

/// Run every decoder a read may meet over `bytes`: the on-disk structures
/// (`format::decode_all`) and the payload decoders of compressed data records (bounded
/// output, errors not panics). The fuzz targets' entry point; returns how many accepted it.
pub fn decode_all(bytes: &[u8]) -> usize {
    let mut ok = crate::format::decode_all(bytes);
    for algo in [crate::format::Compression::Lz4, crate::format::Compression::Zstd] {
        for lsize in [4096u32, 65536] {
            ok += compress::decompress(algo, bytes, lsize).is_ok() as usize;
        }
    }
    ok
}

use crate::alloc::{Allocator, Geometry};
use crate::device::{AlignedBuf, BlockDevice};
use crate::error::{Corruption, Error, Result};
use crate::format::node::{BtreeNodePhys, IndirectPhys};
use crate::format::space::PACK_UNITS_MAX;
use crate::format::{
    round_up_sector, round_up_unit, BlockKind, BlockPtr, ChecksumAlgo, Compression, MAX_BLOCK_SIZE, UNIT_SIZE,
};
use crate::pipeline::cache::BlockCache;
use crate::pipeline::compress::CompressionPolicy;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::Mutex;
use std::sync::Arc;

#[derive(Debug, Default)]
pub struct IoStats {
    pub blocks_written: AtomicU64,
    pub bytes_written: AtomicU64,
    pub blocks_read: AtomicU64,
    pub bytes_read: AtomicU64,
    pub corruptions_detected: AtomicU64,
    /// Metadata blocks (btree nodes, indirect blocks) served from the metadata cache, and
    /// read from the devices because it did not hold them.
    pub cache_hits: AtomicU64,
    pub cache_misses: AtomicU64,
    /// Data records stored compressed.
    pub compressed_blocks_written: AtomicU64,
    /// Data records of compressing volumes stored raw (compression would not save a unit).
    pub compression_skipped: AtomicU64,
    /// All-zero data records written by applications and stored as holes (zero detection).
    pub zero_records_elided: AtomicU64,
    /// Data records stored packed (compaction), and the packs written for them.
    pub packed_records_written: AtomicU64,
    pub packs_written: AtomicU64,
    /// Data records served from the data cache, and read from the devices (then kept).
    pub data_cache_hits: AtomicU64,
    pub data_cache_misses: AtomicU64,
}

#[derive(Clone)]
enum Cached {
    Node(Arc<BtreeNodePhys>),
    Indirect(Arc<IndirectPhys>),
}

/// Largest combined write. 1 MiB is past the point where larger writes stop getting
/// cheaper per byte on SSDs and virtual disks, and bounds the batch buffer.
const WRITE_BATCH_MAX: usize = 1 << 20;

struct WriteBatch {
    addr: u64,
    buf: AlignedBuf,
    len: usize,
}

pub struct BlockIo {
    dev: Arc<dyn BlockDevice>,
    batch: Mutex<Option<WriteBatch>>,
    /// Where blocks may be: grows when the pool adds a device group (`set_geometry`).
    geo: Mutex<Geometry>,
    checksum_algo: ChecksumAlgo,
    cache: Mutex<BlockCache<Cached>>,
    data_cache: Mutex<BlockCache<Arc<Vec<u8>>>>,
    /// Small compressed records are packed (the pool carries INCOMPAT_PACKS).
    packing: AtomicBool,
    pub stats: IoStats,
}

/// Should a data record stored in `psize` bytes be packed? When rounding it up to whole
/// units wastes at least 1 KiB: a record that fills its units gains nothing, and each
/// packed record may cost its reader one more unit (its span can straddle a boundary).
pub fn packable(psize: usize) -> bool {
    let p = psize as u64;
    p < UNIT_SIZE * PACK_UNITS_MAX as u64 && round_up_unit(p) - round_up_sector(p) >= 1024
}

/// Lay out records of the given stored sizes into packs: `(first, count, units)` per pack,
/// over consecutive records, each record at a sector offset, a pack at most
/// PACK_UNITS_MAX units. Every size must be `packable`.
pub fn plan_packs(sizes: &[usize]) -> Vec<(usize, usize, u64)> {
    let cap = UNIT_SIZE * PACK_UNITS_MAX as u64;
    let mut out = Vec::new();
    let (mut first, mut used) = (0usize, 0u64);
    for (i, &s) in sizes.iter().enumerate() {
        let need = round_up_sector(s as u64);
        if used + need > cap {
            out.push((first, i - first, round_up_unit(used) / UNIT_SIZE));
            (first, used) = (i, 0);
        }
        used += need;
    }
    if used > 0 {
        out.push((first, sizes.len() - first, round_up_unit(used) / UNIT_SIZE));
    }
    out
}

/// A data record on its way into a pack: its bytes as stored and how they expand.
pub struct PackItem<'a> {
    pub stored: &'a [u8],
    pub compression: Compression,
    pub lsize: usize,
    pub checksum: [u8; 32],
}

impl BlockIo {
    /// `cache_blocks`: decoded metadata blocks kept (each ≤ 16 KiB of payload);
    /// `data_cache_bytes`: bytes of data records kept (0: none).
    pub fn new(
        dev: Arc<dyn BlockDevice>,
        geo: Geometry,
        checksum_algo: ChecksumAlgo,
        cache_blocks: usize,
        data_cache_bytes: u64,
    ) -> BlockIo {
        BlockIo {
            dev,
            batch: Mutex::new(None),
            geo: Mutex::new(geo),
            checksum_algo,
            cache: Mutex::new(BlockCache::new(cache_blocks as u64)),
            data_cache: Mutex::new(BlockCache::new(data_cache_bytes)),
            packing: AtomicBool::new(false),
            stats: IoStats::default(),
        }
    }

    /// The pool grew by a device group: blocks may be in its units from now on.
    pub fn set_geometry(&self, geo: Geometry) {
        *self.geo.lock().unwrap_or_else(crate::sync::PoisonError::into_inner) = geo;
    }

    /// Whether the `units` units at `addr` lie in the data area of one device group.
    fn in_area(&self, addr: u64, units: u64) -> bool {
        self.geo.lock().unwrap_or_else(crate::sync::PoisonError::into_inner).run_of(addr, units).is_some()
    }

    /// A data record's logical bytes, from the data cache or read and verified (then kept).
    /// The checker and anything that must see the device's bytes use `read_block`.
    pub fn read_data(&self, bp: &BlockPtr) -> Result<Arc<Vec<u8>>> {
        let key = (bp.addr, bp.birth_txg);
        if let Some(d) = self.data_cache.lock().expect("data cache lock").get(key) {
            self.stats.data_cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(d);
        }
        self.read_missed_data(bp)
    }

    /// A data record the cache did not hold: read, counted as a miss, cached.
    fn read_missed_data(&self, bp: &BlockPtr) -> Result<Arc<Vec<u8>>> {
        self.stats.data_cache_misses.fetch_add(1, Ordering::Relaxed);
        let data = Arc::new(self.read_block(bp)?);
        self.data_cache.lock().expect("data cache lock").put((bp.addr, bp.birth_txg), data.clone(), data.len() as u64);
        Ok(data)
    }

    /// [`BlockIo::read_data`] of each of `bps`, in order: the cached ones under one hold
    /// of the cache's lock, then the others from the device.
    pub fn read_data_many(&self, bps: &[&BlockPtr]) -> Result<Vec<Arc<Vec<u8>>>> {
        let mut found: Vec<Option<Arc<Vec<u8>>>> = Vec::with_capacity(bps.len());
        {
            let mut cache = self.data_cache.lock().expect("data cache lock");
            cache.get_many(bps.iter().map(|bp| (bp.addr, bp.birth_txg)), &mut found);
        }
        let hits = found.iter().filter(|f| f.is_some()).count() as u64;
        self.stats.data_cache_hits.fetch_add(hits, Ordering::Relaxed);
        bps.iter()
            .zip(found)
            .map(|(bp, f)| match f {
                Some(d) => Ok(d),
                None => self.read_missed_data(bp),
            })
            .collect()
    }

    pub(crate) fn checksum_algo(&self) -> ChecksumAlgo {
        self.checksum_algo
    }

    /// Pack small compressed records from now on (the pool carries INCOMPAT_PACKS).
    pub(crate) fn set_packing(&self, on: bool) {
        self.packing.store(on, Ordering::Relaxed);
    }

    pub(crate) fn packing(&self) -> bool {
        self.packing.load(Ordering::Relaxed)
    }

    /// Allocate one pack for `items` (which `plan_packs` put together) and lay them out in
    /// `buf` (cleared and filled with the pack's bytes, zero-padded to its units). Returns
    /// the pack's address and the records' pointers, born in `txg`.
    pub(crate) fn place_pack(
        &self,
        alloc: &mut Allocator,
        items: &[PackItem<'_>],
        units: u64,
        txg: u64,
        buf: &mut Vec<u8>,
    ) -> Result<(u64, Vec<BlockPtr>)> {
        let addr = alloc.allocate_pack(units, items.len() as u32)?;
        buf.clear();
        buf.resize((units * UNIT_SIZE) as usize, 0);
        let mut off = 0usize;
        let mut bps = Vec::with_capacity(items.len());
        for it in items {
            buf[off..off + it.stored.len()].copy_from_slice(it.stored);
            bps.push(BlockPtr {
                addr: addr + off as u64,
                birth_txg: txg,
                psize: it.stored.len() as u32,
                lsize: it.lsize as u32,
                device: 0,
                kind: BlockKind::Data,
                compression: it.compression,
                checksum_algo: self.checksum_algo,
                packed: true,
                dedup: false,
                checksum: it.checksum,
            });
            off += round_up_sector(it.stored.len() as u64) as usize;
        }
        assert!(off as u64 <= units * UNIT_SIZE, "plan_packs sized the pack");
        self.stats.packs_written.fetch_add(1, Ordering::Relaxed);
        self.stats.compressed_blocks_written.fetch_add(items.len() as u64, Ordering::Relaxed);
        self.stats.packed_records_written.fetch_add(items.len() as u64, Ordering::Relaxed);
        self.stats.blocks_written.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes_written.fetch_add(units * UNIT_SIZE, Ordering::Relaxed);
        Ok((addr, bps))
    }

    /// `place_pack` and queue the pack's write with the commit's other blocks.
    pub(crate) fn write_pack(
        &self,
        alloc: &mut Allocator,
        items: &[PackItem<'_>],
        units: u64,
        txg: u64,
    ) -> Result<Vec<BlockPtr>> {
        let mut buf = Vec::new();
        let (addr, bps) = self.place_pack(alloc, items, units, txg, &mut buf)?;
        self.queue_write(addr, &buf)?;
        Ok(bps)
    }

    /// Keep `data` (the logical record, just written) as the contents of the block `bp`.
    /// What a database wrote it reads again (pages evicted from its buffer pool): without
    /// this, MariaDB on a data set larger than its buffer pool read every page back from the
    /// device. The price, while the cache fills: each kept record pins its buffer past its
    /// txg, so later writes take fresh memory the kernel must fault in and zero
    /// (docs/commits-and-caching.md).
    pub(crate) fn cache_data(&self, bp: &BlockPtr, data: Arc<Vec<u8>>) {
        let mut cache = self.data_cache.lock().expect("data cache lock");
        if cache.capacity() > 0 {
            let weight = data.len() as u64;
            cache.put((bp.addr, bp.birth_txg), data, weight);
        }
    }

    /// Drop freed blocks from the data cache. Without this the cache fills with the old
    /// versions of overwritten records (nobody reads a freed block again) and, while it
    /// grows, pins their buffers: every write then takes fresh memory for its record.
    pub(crate) fn forget(&self, keys: &[(u64, u64)]) {
        if keys.is_empty() {
            return;
        }
        let mut cache = self.data_cache.lock().expect("data cache lock");
        for k in keys {
            cache.remove(*k);
        }
    }

    /// Bytes held by the data cache and its capacity.
    pub fn data_cache_usage(&self) -> (u64, u64) {
        let c = self.data_cache.lock().expect("data cache lock");
        (c.weight(), c.capacity())
    }

    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }

    /// Store `payload` (the logical block, `payload.len()` = lsize) as a new block born in
    /// `txg`, uncompressed (metadata, and data of volumes without compression). The caller
    /// never passes an all-zero payload (that is a hole).
    pub fn write_block(&self, alloc: &mut Allocator, kind: BlockKind, payload: &[u8], txg: u64) -> Result<BlockPtr> {
        assert!(!payload.is_empty() && payload.len() as u64 <= MAX_BLOCK_SIZE);
        let psize = payload.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        assert!(psize > 0, "all-zero blocks are holes, never written");
        self.write_stored(alloc, kind, &payload[..psize], Compression::None, payload.len(), txg)
    }

    /// Store a data record under a volume's compression `policy`: compressed when that
    /// saves at least one unit (compress.rs), else as `write_block` does.
    pub fn write_data(
        &self,
        alloc: &mut Allocator,
        payload: &[u8],
        txg: u64,
        policy: CompressionPolicy,
    ) -> Result<BlockPtr> {
        let compressed = crate::pipeline::compress::compress(policy, trimmed(payload));
        self.write_data_compressed(alloc, payload, txg, policy, compressed)
    }

    /// `write_data` with the compression already done: `compressed` is what
    /// `compress::compress(policy, trimmed(payload))` returned (the commit compresses a
    /// volume's records in parallel first, `compress::compress_batch`).
    pub fn write_data_compressed(
        &self,
        alloc: &mut Allocator,
        payload: &[u8],
        txg: u64,
        policy: CompressionPolicy,
        compressed: Option<(Compression, Vec<u8>)>,
    ) -> Result<BlockPtr> {
        assert!(!payload.is_empty() && payload.len() as u64 <= MAX_BLOCK_SIZE);
        let psize = trimmed(payload).len();
        assert!(psize > 0, "all-zero records are holes, never written");
        let bp = match compressed {
            Some((algo, stored)) => {
                self.stats.compressed_blocks_written.fetch_add(1, Ordering::Relaxed);
                self.write_stored(alloc, BlockKind::Data, &stored, algo, payload.len(), txg)?
            }
            None => {
                if policy != CompressionPolicy::Off {
                    self.stats.compression_skipped.fetch_add(1, Ordering::Relaxed);
                }
                self.write_stored(alloc, BlockKind::Data, &payload[..psize], Compression::None, payload.len(), txg)?
            }
        };
        Ok(bp)
    }

    /// Checksum, allocate and queue the write of `stored` (the bytes as they go to disk).
    fn write_stored(
        &self,
        alloc: &mut Allocator,
        kind: BlockKind,
        stored: &[u8],
        compression: Compression,
        lsize: usize,
        txg: u64,
    ) -> Result<BlockPtr> {
        let psize = stored.len();
        assert!(psize > 0 && psize <= lsize && lsize as u64 <= MAX_BLOCK_SIZE);
        let checksum = self.checksum_algo.compute(stored);
        let len = round_up_unit(psize as u64);
        let mut buf = AlignedBuf::zeroed(len as usize);
        buf[..psize].copy_from_slice(stored);
        let addr = alloc.allocate(len / crate::format::UNIT_SIZE)?;
        self.queue_write(addr, &buf)?;
        self.stats.blocks_written.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes_written.fetch_add(len, Ordering::Relaxed);
        Ok(BlockPtr {
            addr,
            birth_txg: txg,
            psize: psize as u32,
            lsize: lsize as u32,
            device: 0,
            kind,
            compression,
            checksum_algo: self.checksum_algo,
            packed: false,
            dedup: false,
            checksum,
        })
    }

    /// Append to the pending combined write, or issue it and start a new one.
    fn queue_write(&self, addr: u64, data: &[u8]) -> Result<()> {
        let mut batch = self.batch.lock().expect("batch lock");
        if let Some(b) = batch.as_mut() {
            if b.addr + b.len as u64 == addr && b.len + data.len() <= WRITE_BATCH_MAX {
                b.buf[b.len..b.len + data.len()].copy_from_slice(data);
                b.len += data.len();
                return Ok(());
            }
        }
        let previous = batch.take();
        if data.len() >= WRITE_BATCH_MAX {
            drop(batch);
            self.issue(previous)?;
            return self.dev.write_at(data, addr).map_err(|e| Error::io("write block", e));
        }
        let mut buf = AlignedBuf::zeroed(WRITE_BATCH_MAX);
        buf[..data.len()].copy_from_slice(data);
        *batch = Some(WriteBatch { addr, buf, len: data.len() });
        drop(batch);
        self.issue(previous)
    }

    fn issue(&self, batch: Option<WriteBatch>) -> Result<()> {
        match batch {
            Some(b) => self.dev.write_at(&b.buf[..b.len], b.addr).map_err(|e| Error::io("write blocks", e)),
            None => Ok(()),
        }
    }

    /// Issue every pending write (before a flush, or a read of what is pending).
    pub fn finish_writes(&self) -> Result<()> {
        let pending = self.batch.lock().expect("batch lock").take();
        self.issue(pending)
    }

    /// Forget pending writes (after a failed commit: the pool latches, nothing may land).
    pub fn discard_writes(&self) {
        self.batch.lock().expect("batch lock").take();
    }

    fn corrupt(&self, c: Corruption) -> Error {
        self.stats.corruptions_detected.fetch_add(1, Ordering::Relaxed);
        Error::Corruption(c)
    }

    /// Read and verify a block; returns its `lsize` logical bytes.
    pub fn read_block(&self, bp: &BlockPtr) -> Result<Vec<u8>> {
        self.read_block_copies(bp, false)
    }

    /// Read and verify several blocks, each run of blocks adjacent on the device in one
    /// read (a transfer reading records written together): their logical bytes, in order.
    /// A block whose bytes in the run do not verify is read again alone by `read_block`,
    /// which tries the other copies and repairs (or reports the corruption). No cache.
    pub fn read_blocks(&self, bps: &[BlockPtr]) -> Result<Vec<Vec<u8>>> {
        /// Largest single read: big enough to stream, small enough to bound memory.
        const RUN_MAX: u64 = 1 << 20;
        let mut out = Vec::with_capacity(bps.len());
        let mut i = 0;
        while i < bps.len() {
            let (start, mut end) = {
                let (s, l) = bps[i].read_span();
                (s, s + l)
            };
            let mut j = i + 1;
            while j < bps.len() {
                let (s, l) = bps[j].read_span();
                if s < start || s > end || s + l - start > RUN_MAX || bps[j].device != bps[i].device {
                    break;
                }
                end = end.max(s + l);
                j += 1;
            }
            let in_area = self.in_area(start, (end - start) / UNIT_SIZE);
            let mut buf = AlignedBuf::zeroed((end - start) as usize);
            let read = j - i > 1 && bps[i].device == 0 && in_area && self.dev.read_at(&mut buf, start).is_ok();
            for bp in &bps[i..j] {
                assert!(!bp.is_hole(), "holes are not read");
                let at = (bp.addr - start) as usize;
                let stored = read.then(|| &buf[at..at + bp.psize as usize]);
                match stored.filter(|b| bp.checksum_algo.compute(b) == bp.checksum) {
                    Some(b) => {
                        self.stats.blocks_read.fetch_add(1, Ordering::Relaxed);
                        let data = crate::pipeline::compress::decompress(bp.compression, b, bp.lsize);
                        match data {
                            Ok(d) => out.push(d),
                            Err(_) => out.push(self.read_block(bp)?),
                        }
                    }
                    None => out.push(self.read_block(bp)?),
                }
            }
            if read {
                self.stats.bytes_read.fetch_add(end - start, Ordering::Relaxed);
            }
            i = j;
        }
        Ok(out)
    }

    /// Verify every copy of a block the device holds, repairing those that fail (a scrub;
    /// device/mirror.rs `scrub_read`). No cache is consulted.
    pub fn verify_copies(&self, bp: &BlockPtr) -> Result<u64> {
        self.read_block_copies(bp, true).map(|b| b.len() as u64)
    }

    /// Verify every copy of blocks that lie one after another on the device (ascending,
    /// not overlapping), each copy of the run in one read (a scrub's records: one read per
    /// record and copy held it to ~200 MB/s). Per block, as `verify_copies`. Blocks that
    /// cannot share a read are verified one by one.
    pub fn verify_copies_run(&self, bps: &[BlockPtr]) -> Vec<Result<u64>> {
        let spans: Vec<(u64, u64)> = bps.iter().map(|bp| bp.read_span()).collect();
        let (Some(first), Some(last)) = (spans.first(), spans.last()) else { return Vec::new() };
        let (start, end) = (first.0, last.0 + last.1);
        let one_read = bps.len() > 1
            && bps.iter().all(|bp| !bp.is_hole() && bp.device == 0)
            && spans.windows(2).all(|w| w[1].0 >= w[0].0 + w[0].1)
            && self.in_area(start, (end - start) / UNIT_SIZE);
        if !one_read {
            return bps.iter().map(|bp| self.verify_copies(bp)).collect();
        }
        let blocks: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)> = bps
            .iter()
            .zip(&spans)
            .map(|(bp, &(s, l))| {
                let span = (s - start) as usize..(s - start + l) as usize;
                let at = (bp.addr - start) as usize;
                (span, at..at + bp.psize as usize)
            })
            .collect();
        let mut buf = AlignedBuf::zeroed((end - start) as usize);
        let verify = |k: usize, b: &[u8]| bps[k].checksum_algo.compute(b) == bps[k].checksum;
        let results = self.dev.scrub_read_run(&mut buf, start, &blocks, &verify);
        self.stats.bytes_read.fetch_add(end - start, Ordering::Relaxed);
        bps.iter()
            .zip(&blocks)
            .zip(results)
            .map(|((bp, (_, block)), r)| {
                let verified = r.map_err(|e| Error::io("read block", e))?;
                self.stats.blocks_read.fetch_add(1, Ordering::Relaxed);
                self.decoded(bp, &buf[block.clone()], verified).map(|b| b.len() as u64)
            })
            .collect()
    }

    fn read_block_copies(&self, bp: &BlockPtr, all_copies: bool) -> Result<Vec<u8>> {
        assert!(!bp.is_hole(), "holes are not read");
        let (start, len) = bp.read_span();
        let units = len / UNIT_SIZE;
        let in_area = self.in_area(start, units);
        if bp.device != 0 || !in_area {
            return Err(self.corrupt(Corruption::new(
                what_block(bp),
                Some(bp.addr),
                "block pointer points outside the data area",
            )));
        }
        let mut buf = AlignedBuf::zeroed(len as usize);
        let off = (bp.addr - start) as usize;
        let block = off..off + bp.psize as usize;
        // Verified here and by a device set, which tries its other copies and repairs the
        // one that failed (device/mirror.rs).
        let verify = |span: &[u8]| span.get(block.clone()).is_some_and(|b| bp.checksum_algo.compute(b) == bp.checksum);
        let verified = match all_copies {
            false => self.dev.read_verified(&mut buf, start, block.clone(), &verify),
            true => self.dev.scrub_read(&mut buf, start, block.clone(), &verify),
        }
        .map_err(|e| Error::io("read block", e))?;
        self.stats.blocks_read.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes_read.fetch_add(len, Ordering::Relaxed);
        self.decoded(bp, &buf[block], verified)
    }

    /// A block's logical bytes from its `stored` bytes as read (`verified`: their checksum
    /// matched), or the corruption.
    fn decoded(&self, bp: &BlockPtr, stored: &[u8], verified: bool) -> Result<Vec<u8>> {
        let what = what_block(bp);
        if !verified {
            let found = bp.checksum_algo.compute(stored);
            return Err(self.corrupt(Corruption::new(
                what,
                Some(bp.addr),
                format!(
                    "checksum mismatch: expected {}, found {} (birth txg {})",
                    hex8(&bp.checksum),
                    hex8(&found),
                    bp.birth_txg
                ),
            )));
        }
        // The checksum matched, so these are the bytes that were written; a payload that
        // still does not decode (or decodes past lsize) is corruption all the same.
        crate::pipeline::compress::decompress(bp.compression, stored, bp.lsize).map_err(|detail| {
            self.corrupt(Corruption::new(
                what,
                Some(bp.addr),
                format!("{:?} payload of {} bytes (birth txg {}): {detail}", bp.compression, bp.psize, bp.birth_txg),
            ))
        })
    }

    /// Keep an indirect block this commit just wrote: the next commit that changes the same
    /// records reads it back otherwise, with the pool's lock held.
    pub(crate) fn cache_indirect(&self, bp: &BlockPtr, ind: IndirectPhys) {
        self.cache.lock().expect("cache lock").put((bp.addr, bp.birth_txg), Cached::Indirect(Arc::new(ind)), 1);
    }

    /// Keep a btree node this commit just wrote (its encoded `payload`), as `cache_indirect`.
    pub(crate) fn cache_node(&self, bp: &BlockPtr, payload: &[u8]) {
        // What was just encoded decodes; if it did not, it would be read (and reported) later.
        if let Ok(node) = BtreeNodePhys::decode(payload, Some(bp.addr)) {
            self.cache.lock().expect("cache lock").put((bp.addr, bp.birth_txg), Cached::Node(Arc::new(node)), 1);
        }
    }

    pub fn read_node(&self, bp: &BlockPtr) -> Result<Arc<BtreeNodePhys>> {
        let key = (bp.addr, bp.birth_txg);
        if let Some(Cached::Node(n)) = self.cache.lock().expect("cache lock").get(key) {
            self.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(n);
        }
        if bp.kind != BlockKind::BtreeNode {
            return Err(self.corrupt(Corruption::new(
                "btree node",
                Some(bp.addr),
                format!("pointer says {:?}", bp.kind),
            )));
        }
        self.stats.cache_misses.fetch_add(1, Ordering::Relaxed);
        let bytes = self.read_block(bp)?;
        let node = Arc::new(BtreeNodePhys::decode(&bytes, Some(bp.addr)).map_err(|c| self.corrupt(c))?);
        self.cache.lock().expect("cache lock").put(key, Cached::Node(node.clone()), 1);
        Ok(node)
    }

    /// An indirect block if the metadata cache holds it (no I/O, nothing counted).
    pub(crate) fn cached_indirect(&self, bp: &BlockPtr) -> Option<Arc<IndirectPhys>> {
        match self.cache.lock().expect("cache lock").get((bp.addr, bp.birth_txg)) {
            Some(Cached::Indirect(n)) => Some(n),
            _ => None,
        }
    }

    pub fn read_indirect(&self, bp: &BlockPtr) -> Result<Arc<IndirectPhys>> {
        let key = (bp.addr, bp.birth_txg);
        if let Some(Cached::Indirect(n)) = self.cache.lock().expect("cache lock").get(key) {
            self.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(n);
        }
        if bp.kind != BlockKind::Indirect {
            return Err(self.corrupt(Corruption::new(
                "indirect block",
                Some(bp.addr),
                format!("pointer says {:?}", bp.kind),
            )));
        }
        self.stats.cache_misses.fetch_add(1, Ordering::Relaxed);
        let bytes = self.read_block(bp)?;
        let ind = Arc::new(IndirectPhys::decode(&bytes, Some(bp.addr)).map_err(|c| self.corrupt(c))?);
        self.cache.lock().expect("cache lock").put(key, Cached::Indirect(ind.clone()), 1);
        Ok(ind)
    }
}

/// `payload` without its zero tail: what is stored, or compressed, of a block.
pub fn trimmed(payload: &[u8]) -> &[u8] {
    &payload[..payload.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)]
}

fn hex8(b: &[u8; 32]) -> String {
    b[..8].iter().map(|x| format!("{x:02x}")).collect()
}

/// What a block is, for an error.
fn what_block(bp: &BlockPtr) -> &'static str {
    match bp.kind {
        BlockKind::BtreeNode => "btree node",
        BlockKind::Indirect => "indirect block",
        BlockKind::Data => "data block",
    }
}
