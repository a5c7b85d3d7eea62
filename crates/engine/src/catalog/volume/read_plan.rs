//! A read planned under the pool's lock and finished outside it: which part of each
//! record comes from memory (dirty or cached records), from zeros (holes), or from the
//! device — and the result as shared pieces of those buffers, not a copy.

use crate::error::Result;
use crate::format::BlockPtr;
use crate::pipeline::BlockIo;
use std::sync::Arc;

/// A read resolved under the pool's lock, with its device reads still to do.
pub struct ReadPlan {
    /// Bytes the read returns (the range clipped at the object's end).
    pub len: usize,
    pub(super) pieces: Vec<Piece>,
}

/// One record's share of a read.
pub(super) struct Piece {
    pub(super) in_record: usize,
    pub(super) len: usize,
    pub(super) source: Source,
}

pub(super) enum Source {
    Zeros,
    Memory(Arc<Vec<u8>>),
    Device(BlockPtr),
}

/// Part of a read's result that stays in the buffer holding it (a dirty record, a cached
/// record, or shared zeros): a server sends it from there (`Pool::read_shared`) instead
/// of copying it into its reply first.
#[derive(Clone)]
pub struct SharedBytes {
    buf: Arc<Vec<u8>>,
    range: std::ops::Range<usize>,
    what: What,
}

/// What a piece is, as far as the allocation map goes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum What {
    /// A range no record holds (zeros that take no space).
    Hole,
    /// A record's bytes (data even when they are zeros).
    Record,
    /// Bytes from elsewhere ([`SharedBytes::owned`]).
    Unknown,
}

impl SharedBytes {
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[self.range.clone()]
    }

    pub fn len(&self) -> usize {
        self.range.len()
    }

    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }

    /// Whether the piece is a hole of the object read (so, zeros); false for a record's
    /// bytes and for bytes of unknown origin.
    pub fn is_hole(&self) -> bool {
        self.what == What::Hole
    }

    /// Whether the piece is known to be a record's bytes (allocated, whatever its
    /// contents); false for holes and for bytes of unknown origin ([`SharedBytes::owned`]).
    pub fn is_record(&self) -> bool {
        self.what == What::Record
    }

    /// `pieces` in one buffer.
    pub fn concat(pieces: &[SharedBytes]) -> Vec<u8> {
        let mut out = Vec::with_capacity(pieces.iter().map(SharedBytes::len).sum());
        for p in pieces {
            out.extend_from_slice(p.as_slice());
        }
        out
    }

    /// Bytes of its own (a copy made elsewhere).
    pub fn owned(bytes: Vec<u8>) -> SharedBytes {
        let range = 0..bytes.len();
        SharedBytes { buf: Arc::new(bytes), range, what: What::Unknown }
    }

    /// `len` zero bytes (at most the largest record, which is all a piece spans).
    fn zeros(len: usize) -> SharedBytes {
        static ZEROS: std::sync::OnceLock<Arc<Vec<u8>>> = std::sync::OnceLock::new();
        let buf = ZEROS.get_or_init(|| Arc::new(vec![0; crate::format::records::MAX_RECORD_SIZE as usize])).clone();
        debug_assert!(len <= buf.len());
        SharedBytes { buf, range: 0..len, what: What::Hole }
    }
}

impl ReadPlan {
    /// The planned range as runs of `(length, hole)`, adjacent runs of the same kind merged:
    /// a hole is a range no record holds (it reads as zeros and takes no space); a record's
    /// bytes — on the device or dirty in memory — are data even when they are zeros. What a
    /// block server's allocation map reports (NBD `base:allocation`, SCSI GET LBA STATUS).
    pub fn extents(&self) -> Vec<(u64, bool)> {
        let mut out: Vec<(u64, bool)> = Vec::new();
        for p in &self.pieces {
            let hole = matches!(p.source, Source::Zeros);
            match out.last_mut() {
                Some((len, h)) if *h == hole => *len += p.len as u64,
                _ => out.push((p.len as u64, hole)),
            }
        }
        out
    }

    /// The read's bytes as pieces of the buffers that hold them — dirty records, the data
    /// cache, shared zeros; no copy — doing the device reads (no lock needed: blocks are
    /// immutable, and the caller's read pin keeps the planned blocks from being reused
    /// until it is dropped, pool/read_pin.rs).
    pub fn finish_shared(&self, io: &BlockIo) -> Result<Vec<SharedBytes>> {
        // The device's records in one pass over the data cache (one lock, not one per
        // record: a 1 MiB read of 4 KiB records is 256 of them).
        let bps: Vec<&BlockPtr> = self
            .pieces
            .iter()
            .filter_map(|p| match &p.source {
                Source::Device(bp) => Some(bp),
                _ => None,
            })
            .collect();
        let mut read = io.read_data_many(&bps)?.into_iter();
        let mut out = Vec::with_capacity(self.pieces.len());
        for p in &self.pieces {
            let range = p.in_record..p.in_record + p.len;
            out.push(match &p.source {
                Source::Zeros => SharedBytes::zeros(p.len),
                Source::Memory(rec) => SharedBytes { buf: rec.clone(), range, what: What::Record },
                Source::Device(_) => {
                    let buf = read.next().expect("read_data_many returns one record per pointer");
                    SharedBytes { buf, range, what: What::Record }
                }
            });
        }
        Ok(out)
    }
}
