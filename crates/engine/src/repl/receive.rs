//! The receiving side: frames of a send stream applied to a volume, which becomes equal to
//! the sent snapshot and gets a snapshot of the same name when the end frame arrives.
//!
//! A receive starts from the base snapshot: unless it resumes, the volume is first restored
//! to it (a full stream: the volume must be empty), so whatever an interrupted transfer left
//! behind is discarded — the volume between two snapshots is the hidden, half-applied state;
//! only the snapshot taken at the end is a transferred state.
//!
//! Durability and resume: the receiver commits every `checkpoint_for(estimate)` bytes of data
//! (1/128 of the stream, 4 to 64 MiB) and reports
//! the last frame index the commit covers; whoever drives the transfer records it and, after
//! a crash or a cut connection, asks the sender to resume after it. Frames past that point
//! may have been applied already; applying them again is harmless, because each frame sets
//! state (an object's shape, a record's bytes, a key's value) rather than changing it, and
//! each object, record and key appears once per stream, in order.

use super::stream::{SendRecord, StreamHeader};
use crate::catalog::volume::ObjectId;
use crate::error::{Error, Result};
use crate::pool::snapshot::SnapshotInfo;
use crate::pool::{Pool, VolumeId};

/// Data applied between checkpoint commits at most. 64 MiB: a few seconds of a fast
/// transfer, and far below the pool's dirty limit on the machines we run on.
pub const CHECKPOINT_BYTES: u64 = 64 << 20;
/// ... and at least: a commit (and a state-file fsync by the driver) per 4 MiB costs a few
/// percent of a transfer's time at most.
pub const CHECKPOINT_MIN_BYTES: u64 = 4 << 20;

/// The checkpoint interval for a stream of `estimate` data bytes: 1/128 of it, within
/// [`CHECKPOINT_MIN_BYTES`, `CHECKPOINT_BYTES`]. A cut transfer resends at most one
/// interval, so a resume wastes under 1 % of a transfer of 512 MiB or more, and at most
/// 4 MiB of a smaller one.
pub fn checkpoint_for(estimate: u64) -> u64 {
    (estimate / 128).clamp(CHECKPOINT_MIN_BYTES, CHECKPOINT_BYTES)
}

/// A receive in progress (`Pool::receive_begin`).
pub struct Receiver<'a> {
    pool: &'a Pool,
    vol: VolumeId,
    volume: String,
    header: StreamHeader,
    /// Index of the last frame applied.
    applied: u64,
    /// Index of the last frame a commit covers.
    committed: u64,
    since_checkpoint: u64,
    /// Record bytes applied by this receiver.
    pub data_bytes: u64,
    /// Records of consecutive data frames not written yet: object, offset, bytes. Written
    /// as one write (one lock, one pass) before any other frame and any checkpoint.
    run: Option<(ObjectId, u64, Vec<u8>)>,
    /// Data applied between checkpoints (`checkpoint_for` the estimate unless set).
    checkpoint_bytes: u64,
    /// The object of the last data frame: id, size, record size (saves a lookup per record).
    shape: Option<(u64, u64, u64)>,
}

/// Largest write of consecutive records the receiver gathers.
const RUN_BYTES: usize = 1 << 20;

impl Pool {
    /// Begin receiving the stream that `header` opens into `volume`. `resume_after`: the
    /// frames a previous receive of the same stream applied and committed (0 to start over).
    pub fn receive_begin(&self, volume: &str, header: &StreamHeader, resume_after: u64) -> Result<Receiver<'_>> {
        let vol = self.volume_id(volume)?;
        let snaps = self.snapshots(Some(volume))?;
        if snaps.iter().any(|s| s.name == header.snapshot.name) {
            return Err(Error::AlreadyExists(format!(
                "{volume}@{} exists: this snapshot was received already",
                header.snapshot.name
            )));
        }
        match &header.base {
            Some(b) => {
                if !snaps.iter().any(|s| s.name == b.name) {
                    return Err(Error::NotFound(format!(
                        "{volume}@{}, the base of this incremental stream: send a full stream, or from a snapshot \
                         {volume} holds",
                        b.name
                    )));
                }
                if resume_after == 0 {
                    self.restore_volume(volume, &b.name)?;
                }
            }
            None => {
                if let Some(s) = snaps.first() {
                    return Err(Error::invalid(format!(
                        "a full stream cannot be received into {volume}, which has snapshots ({volume}@{}): receive \
                         into a new volume",
                        s.name
                    )));
                }
                if resume_after == 0
                    && (!self.list_objects(vol, None, 1)?.is_empty() || !self.kv_range(vol, &[], None, 1)?.is_empty())
                {
                    return Err(Error::invalid(format!(
                        "{volume} is not empty: a full stream is received into a new, empty volume"
                    )));
                }
            }
        }
        Ok(Receiver {
            pool: self,
            vol,
            volume: volume.to_string(),
            header: header.clone(),
            applied: resume_after,
            committed: resume_after,
            since_checkpoint: 0,
            data_bytes: 0,
            run: None,
            checkpoint_bytes: checkpoint_for(header.estimate_bytes),
            shape: None,
        })
    }
}

impl Receiver<'_> {
    /// Index of the last frame applied.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// Index of the last frame a commit covers: where to resume after a crash.
    pub fn committed(&self) -> u64 {
        self.committed
    }

    /// Checkpoint every `bytes` of data instead (tests; a driver that wants finer resumes).
    pub fn set_checkpoint_bytes(&mut self, bytes: u64) {
        self.checkpoint_bytes = bytes.max(1);
    }

    pub fn header(&self) -> &StreamHeader {
        &self.header
    }

    /// Apply frame `index`. Returns `Some(index)` when a checkpoint commit made every frame
    /// up to it durable, and the snapshot once the end frame is applied.
    pub fn apply(&mut self, index: u64, rec: &SendRecord) -> Result<Applied> {
        if index != self.applied + 1 {
            return Err(Error::invalid(format!(
                "frame {index} where frame {} was expected: resume the sender after frame {}",
                self.applied + 1,
                self.committed
            )));
        }
        let (pool, vol) = (self.pool, self.vol);
        let bad = |what: String| Error::invalid(format!("send stream frame {index}: {what}"));
        if !matches!(rec, SendRecord::Data { .. }) {
            self.write_run()?;
            self.shape = None;
        }
        match rec {
            SendRecord::Begin(_) => return Err(bad("a second begin frame".into())),
            SendRecord::Object { obj, size, record_size, attr } => {
                pool.with_space_retry(|t| t.receive_object(vol, ObjectId(*obj), *record_size, *size, attr))?
            }
            SendRecord::FreeObject { obj } => pool.with_space_retry(|t| t.receive_free_object(vol, ObjectId(*obj)))?,
            SendRecord::Data { obj, offset, data } => {
                let o = ObjectId(*obj);
                let (size, rs) = match self.shape {
                    Some((id, size, rs)) if id == *obj => (size, rs),
                    _ => {
                        let mut t = pool.guard_for_data();
                        let size = t.object_size(vol, o).map_err(|e| bad(format!("data for object {obj}: {e}")))?;
                        let rs = t.object_record_size(vol, o)? as u64;
                        self.shape = Some((*obj, size, rs));
                        (size, rs)
                    }
                };
                if offset % rs != 0 || data.len() as u64 > rs || *offset >= size {
                    return Err(bad(format!(
                        "{} bytes at {offset} of object {obj} ({size} bytes, records of {rs}): not one record",
                        data.len()
                    )));
                }
                let extent = rs.min(size - offset) as usize;
                if data.len() > extent {
                    return Err(bad(format!("a record of {} bytes past the end of object {obj}", data.len())));
                }
                match &mut self.run {
                    Some((ro, start, bytes))
                        if *ro == o && *start + bytes.len() as u64 == *offset && bytes.len() + extent <= RUN_BYTES =>
                    {
                        bytes.extend_from_slice(data);
                        bytes.resize(bytes.len() + extent - data.len(), 0);
                    }
                    _ => {
                        self.write_run()?;
                        let mut record = Vec::with_capacity(RUN_BYTES.min(extent * 64));
                        record.extend_from_slice(data);
                        record.resize(extent, 0);
                        self.run = Some((o, *offset, record));
                    }
                }
                self.data_bytes += data.len() as u64;
                self.since_checkpoint += extent as u64;
            }
            SendRecord::Hole { obj, offset, len } => {
                pool.with_space_retry(|t| t.receive_punch(vol, ObjectId(*obj), *offset, *len))?
            }
            SendRecord::KvPut { key, value } => pool.with_space_retry(|t| t.receive_kv(vol, key, Some(value)))?,
            SendRecord::KvDelete { key } => pool.with_space_retry(|t| t.receive_kv(vol, key, None))?,
            SendRecord::End { frames, .. } => {
                if *frames != index - 1 {
                    return Err(bad(format!("the end frame counts {frames} frames before it, not {}", index - 1)));
                }
                pool.with_space_retry(|t| t.receive_next_object_id(vol, self.header.next_object_id))?;
                self.applied = index;
                let snap = pool.create_snapshots(&[&self.volume], &self.header.snapshot.name)?;
                self.committed = index;
                return Ok(Applied::Finished(snap.into_iter().next().expect("one volume, one snapshot")));
            }
        }
        self.applied = index;
        if self.since_checkpoint >= self.checkpoint_bytes {
            self.checkpoint()?;
            return Ok(Applied::Checkpoint(self.committed));
        }
        Ok(Applied::Frame)
    }

    /// Write the gathered records.
    fn write_run(&mut self) -> Result<()> {
        if let Some((obj, offset, bytes)) = self.run.take() {
            let vol = self.vol;
            self.pool.with_space_retry(|t| t.receive_write(vol, obj, offset, &bytes))?;
        }
        Ok(())
    }

    /// Commit what is applied; returns the frame index that is now durable.
    pub fn checkpoint(&mut self) -> Result<u64> {
        self.write_run()?;
        self.pool.commit()?;
        self.committed = self.applied;
        self.since_checkpoint = 0;
        Ok(self.committed)
    }
}

/// What applying a frame did.
#[derive(Debug)]
pub enum Applied {
    Frame,
    /// A checkpoint commit: frames up to this index are durable.
    Checkpoint(u64),
    /// The end frame: the volume equals the sent snapshot, and has a snapshot of its name.
    Finished(SnapshotInfo),
}
