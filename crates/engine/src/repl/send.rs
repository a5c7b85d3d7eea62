//! The sending side: a snapshot of a volume (and optionally the base snapshot the receiver
//! already holds) as a sequence of frames (stream.rs).
//!
//! Order: the begin frame; then every B+tree entry that differs, in key order — for a dnode,
//! an object frame (or a free-object frame) followed by the object's differing records as
//! data and hole frames; for a key-value pair, a put or a delete; then the end frame. The
//! frames depend only on the two snapshots, so frame N is the same in every send of the
//! pair: a resumed send skips the frames the receiver has (without reading their data).
//!
//! Data is read outside the pool's lock: both snapshots are held (pool/transfer.rs), so
//! their blocks stay where they are for the whole send. Records travel as their logical
//! bytes (trailing zeros trimmed); the receiver compresses them with its own policy.

use super::diff::{dnode_key_object, record_diff, tree_diff, RecordChange};
use super::stream::{SendRecord, SnapRef, StreamHeader};
use crate::catalog::volume::KEY_DNODE;
use crate::error::{Corruption, Error, Result};
use crate::format::records::DnodePhys;
use crate::format::{BlockKind, BlockPtr};
use crate::pipeline::BlockIo;
use crate::pool::snapshot::collect_born_after;
use crate::pool::Pool;
use std::collections::HashSet;

/// Where the user keys of a volume's B+tree start (objset.rs `KEY_USER`).
const KEY_USER: u8 = 0x80;

/// What to send.
#[derive(Debug, Clone)]
pub struct SendOptions {
    pub volume: String,
    /// The snapshot the receiver already holds (of the same volume); `None`: everything.
    pub base: Option<String>,
    pub snapshot: String,
    /// Frames the receiver has already applied (its resume point): these are not sent.
    pub resume_after: u64,
}

/// What a send did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendSummary {
    /// Frames in the whole stream, begin and end included.
    pub frames: u64,
    /// Frames handed to the sink (the begin frame and those after the resume point).
    pub frames_sent: u64,
    /// Record bytes handed to the sink.
    pub data_bytes: u64,
}

/// One snapshot's side of the diff.
struct Side {
    root: BlockPtr,
    txg: u64,
}

impl Pool {
    /// The stream header `opts` would send (identities, estimate), without sending.
    pub fn send_header(&self, opts: &SendOptions) -> Result<StreamHeader> {
        Ok(self.prepare_send(opts)?.0)
    }

    fn prepare_send(&self, opts: &SendOptions) -> Result<(StreamHeader, Option<Side>, Side)> {
        let p = self.lock_raw();
        let vid = p.volume_id(&opts.volume)?;
        let sid = p.catalog.snapshot_id(vid, &opts.snapshot)?;
        let s = p.catalog.snapshots[&sid].rec.clone();
        let base = match &opts.base {
            None => None,
            Some(b) => {
                let bid = p.catalog.snapshot_id(vid, b)?;
                let r = p.catalog.snapshots[&bid].rec.clone();
                if r.txg >= s.txg {
                    return Err(Error::invalid(format!(
                        "base snapshot {}@{b} (txg {}) is not older than {}@{} (txg {}): send from the older one",
                        opts.volume, r.txg, opts.volume, opts.snapshot, s.txg
                    )));
                }
                Some((b.clone(), r))
            }
        };
        // The estimate: data blocks born after the base (exact for a plain descendant,
        // an estimate after a restore in between). Metadata only; it warms the cache.
        let after = base.as_ref().map_or(0, |(_, r)| r.txg);
        let mut born = Vec::new();
        collect_born_after(&p.io, &s.tree_root, after, &mut HashSet::new(), &mut born)?;
        let estimate_bytes = born.iter().filter(|bp| bp.kind == BlockKind::Data).map(|bp| bp.lsize as u64).sum();
        let header = StreamHeader {
            source_pool: p.label.pool_guid,
            volume: opts.volume.clone(),
            base: base.as_ref().map(|(name, r)| SnapRef { name: name.clone(), txg: r.txg, created_ns: r.created_ns }),
            snapshot: SnapRef { name: opts.snapshot.clone(), txg: s.txg, created_ns: s.created_ns },
            record_size: s.record_size,
            next_object_id: s.next_object_id,
            estimate_bytes,
        };
        let base = base.map(|(_, r)| Side { root: r.tree_root, txg: r.txg });
        Ok((header, base, Side { root: s.tree_root, txg: s.txg }))
    }

    /// Send `opts.snapshot` of `opts.volume` (incremental from `opts.base`) to `sink`, frame
    /// by frame with its index. A sink error stops the send and is returned.
    pub fn send(
        &self,
        opts: &SendOptions,
        sink: &mut dyn FnMut(u64, &SendRecord) -> Result<()>,
    ) -> Result<SendSummary> {
        let _hold_snap = self.hold_snapshot(&opts.volume, &opts.snapshot)?;
        let _hold_base = opts.base.as_ref().map(|b| self.hold_snapshot(&opts.volume, b)).transpose()?;
        let (header, base, snap) = self.prepare_send(opts)?;
        debug_assert!(base.as_ref().is_none_or(|b| b.txg < snap.txg));
        let io = self.lock_raw().io.clone();
        sink(0, &SendRecord::Begin(header))?;
        let mut out = Emitter {
            sink,
            io: &io,
            resume_after: opts.resume_after,
            sum: SendSummary { frames_sent: 1, ..Default::default() },
            batch: Vec::new(),
        };
        let base_root = base.as_ref().map_or(BlockPtr::HOLE, |b| b.root);
        for change in tree_diff(&io, &base_root, &snap.root)? {
            match change.key.first() {
                Some(&KEY_DNODE) => {
                    let obj = dnode_key_object(&change.key).ok_or_else(|| {
                        Error::from(Corruption::new("volume tree", None, format!("dnode key {:02x?}", change.key)))
                    })?;
                    let old = change.old.as_deref().map(DnodePhys::decode).transpose()?;
                    let Some(new) = change.new.as_deref().map(DnodePhys::decode).transpose()? else {
                        out.frame(SendRecord::FreeObject { obj })?;
                        continue;
                    };
                    // An object whose record size changed (it was recreated) starts empty.
                    let old = old.filter(|o| o.record_size == new.record_size);
                    let rs = new.record_size as u64;
                    out.frame(SendRecord::Object {
                        obj,
                        size: new.size,
                        record_size: new.record_size,
                        attr: new.attr.clone(),
                    })?;
                    let old_root = old.as_ref().map_or((BlockPtr::HOLE, 0), |o| (o.root, o.levels));
                    let limit = new.size.div_ceil(rs);
                    record_diff(&io, old_root, (new.root, new.levels), limit, &mut |c| match c {
                        RecordChange::Data { recno, bp } => out.data(obj, recno * rs, bp),
                        RecordChange::Hole { first, count } => {
                            out.frame(SendRecord::Hole { obj, offset: first * rs, len: count.saturating_mul(rs) })
                        }
                    })?;
                }
                Some(&KEY_USER) => {
                    let key = change.key[1..].to_vec();
                    out.frame(match change.new {
                        Some(value) => SendRecord::KvPut { key, value },
                        None => SendRecord::KvDelete { key },
                    })?;
                }
                _ => {
                    return Err(Corruption::new(
                        "volume tree",
                        None,
                        format!("entry with key {:02x?} of no known kind", change.key),
                    )
                    .into())
                }
            }
        }
        out.flush()?;
        let (frames, data_bytes) = (out.sum.frames, out.sum.data_bytes);
        out.frame(SendRecord::End { frames, data_bytes })?;
        let mut sum = out.sum;
        sum.frames += 1; // the begin frame
        Ok(sum)
    }
}

/// Numbers frames and hands them to the sink, skipping those the receiver has; data frames
/// wait in a batch so that records adjacent on the device are read together.
struct Emitter<'a> {
    sink: &'a mut dyn FnMut(u64, &SendRecord) -> Result<()>,
    io: &'a BlockIo,
    resume_after: u64,
    /// `frames` counts the frames numbered so far: the last one's index.
    sum: SendSummary,
    /// Data frames numbered after `sum.frames`, not read yet: (object, offset, block).
    batch: Vec<(u64, u64, BlockPtr)>,
}

/// Data frames read together: 64 records (1 MiB of 16 KiB records).
const BATCH_RECORDS: usize = 64;

impl Emitter<'_> {
    fn frame(&mut self, rec: SendRecord) -> Result<()> {
        self.flush()?;
        self.sum.frames += 1;
        if self.sum.frames > self.resume_after {
            (self.sink)(self.sum.frames, &rec)?;
            self.sum.frames_sent += 1;
        }
        Ok(())
    }

    fn data(&mut self, obj: u64, offset: u64, bp: BlockPtr) -> Result<()> {
        self.batch.push((obj, offset, bp));
        if self.batch.len() >= BATCH_RECORDS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        let first = self.sum.frames + 1;
        // Frames the receiver has are skipped unread.
        let skip = self.resume_after.saturating_sub(first - 1).min(batch.len() as u64) as usize;
        let bps: Vec<BlockPtr> = batch[skip..].iter().map(|(_, _, bp)| *bp).collect();
        let mut datas = self.io.read_blocks(&bps)?.into_iter();
        self.sum.frames += skip as u64;
        for (obj, offset, _) in &batch[skip..] {
            let mut data = datas.next().expect("one read per block");
            let keep = data.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
            data.truncate(keep);
            self.sum.frames += 1;
            self.sum.data_bytes += data.len() as u64;
            (self.sink)(self.sum.frames, &SendRecord::Data { obj: *obj, offset: *offset, data })?;
            self.sum.frames_sent += 1;
        }
        Ok(())
    }
}
