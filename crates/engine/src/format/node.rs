//! Tree node encodings: B+tree nodes (`BtreeNodePhys`) and indirect blocks
//! (`IndirectPhys`). Both are the logical payload of a block; the block pointer that
//! reaches them carries their checksum.
//!
//! `BtreeNodePhys`:
//! ```text
//!   0  magic    [u8; 4] "STBN"
//!   4  level    u8      0 = leaf
//!   5  reserved u8
//!   6  count    u16
//!   8  entries:
//!        leaf:     key_len u16, value_len u16, key, value
//!        internal: key_len u16, child BlockPtrPhys (64), key
//! ```
//! In an internal node, entry i's key is the lower bound of child i's keys (entry 0's
//! bound is inherited from the parent). Keys are strictly increasing.
//!
//! `IndirectPhys`: `INDIRECT_FANOUT` block pointers (64 bytes each, 16 KiB). Trailing hole
//! pointers are all-zero, and the pipeline never stores a zero tail, so a sparse indirect
//! block is small on disk.

use super::blkptr::BLKPTR_SIZE;
use super::codec::{Reader, Writer};
use super::BlockPtr;
use crate::error::Corruption;

pub const NODE_MAGIC: [u8; 4] = *b"STBN";
pub const NODE_HEADER: usize = 8;
/// Encoded size at which a node splits. 16 KiB keeps the fan-out above 200 for typical
/// keys while a rewrite of one leaf costs at most four units.
pub const NODE_MAX_BYTES: usize = 16 * 1024;
/// Limits that guarantee at least four entries fit in a node.
pub const KEY_MAX: usize = 512;
pub const VALUE_MAX: usize = 3 * 1024;
/// Deepest B+tree accepted when reading (a 16 KiB-node tree of depth 16 holds more keys
/// than any device has bytes); bounds recursion on corrupt input.
pub const MAX_BTREE_LEVEL: u8 = 16;

pub const INDIRECT_FANOUT: usize = 256;
pub const INDIRECT_SHIFT: u32 = 8;
pub const INDIRECT_BYTES: usize = INDIRECT_FANOUT * BLKPTR_SIZE;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BtreeNodePhys {
    Leaf { entries: Vec<(Vec<u8>, Vec<u8>)> },
    Internal { level: u8, entries: Vec<(Vec<u8>, BlockPtr)> },
}

pub fn leaf_entry_bytes(key: &[u8], value: &[u8]) -> usize {
    4 + key.len() + value.len()
}

pub fn internal_entry_bytes(key: &[u8]) -> usize {
    2 + BLKPTR_SIZE + key.len()
}

/// A node's entry count as stored. A node splits past NODE_MAX_BYTES, and every entry
/// takes at least 4 bytes, so the count always fits.
fn entry_count(count: usize) -> u16 {
    const _: () = assert!(NODE_MAX_BYTES * 2 / 4 < u16::MAX as usize);
    assert!(count <= u16::MAX as usize, "a node of {count} entries should have split");
    count as u16
}

/// Encode a leaf from borrowed entries (the in-memory tree encodes without copying).
pub fn encode_leaf<'a>(count: usize, entries: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Vec<u8> {
    let mut w = Writer::with_capacity(NODE_MAX_BYTES);
    w.bytes(&NODE_MAGIC).u8(0).u8(0).u16(entry_count(count));
    for (k, v) in entries {
        assert!(k.len() <= KEY_MAX && v.len() <= VALUE_MAX, "entry limits checked on insert");
        w.u16(k.len() as u16).u16(v.len() as u16).bytes(k).bytes(v);
    }
    w.into_inner()
}

/// Encode an internal node from borrowed entries.
pub fn encode_internal<'a>(level: u8, count: usize, entries: impl Iterator<Item = (&'a [u8], BlockPtr)>) -> Vec<u8> {
    assert!(level > 0 && count > 0);
    let mut w = Writer::with_capacity(NODE_MAX_BYTES);
    w.bytes(&NODE_MAGIC).u8(level).u8(0).u16(entry_count(count));
    for (k, bp) in entries {
        assert!(!bp.is_hole(), "internal nodes point at written children");
        w.u16(k.len() as u16);
        bp.encode_into(&mut w);
        w.bytes(k);
    }
    w.into_inner()
}

impl BtreeNodePhys {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            BtreeNodePhys::Leaf { entries } => {
                encode_leaf(entries.len(), entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice())))
            }
            BtreeNodePhys::Internal { level, entries } => {
                encode_internal(*level, entries.len(), entries.iter().map(|(k, bp)| (k.as_slice(), *bp)))
            }
        }
    }

    pub fn level(&self) -> u8 {
        match self {
            BtreeNodePhys::Leaf { .. } => 0,
            BtreeNodePhys::Internal { level, .. } => *level,
        }
    }

    /// Encoded size in bytes.
    pub fn encoded_bytes(&self) -> usize {
        NODE_HEADER
            + match self {
                BtreeNodePhys::Leaf { entries } => entries.iter().map(|(k, v)| leaf_entry_bytes(k, v)).sum::<usize>(),
                BtreeNodePhys::Internal { entries, .. } => entries.iter().map(|(k, _)| internal_entry_bytes(k)).sum(),
            }
    }

    pub fn decode(buf: &[u8], addr: Option<u64>) -> Result<BtreeNodePhys, Corruption> {
        let mut r = Reader::new(buf, "btree node", addr);
        if r.take(4)? != NODE_MAGIC {
            return Err(r.corrupt("bad magic"));
        }
        let level = r.u8()?;
        r.u8()?;
        let count = r.u16()? as usize;
        if level > MAX_BTREE_LEVEL {
            return Err(r.corrupt(format!("level {level} is deeper than any real tree")));
        }
        let mut prev: Option<&[u8]> = None;
        let node = if level == 0 {
            let mut entries = Vec::with_capacity(count.min(buf.len() / 4));
            for i in 0..count {
                let klen = r.u16()? as usize;
                let vlen = r.u16()? as usize;
                if klen > KEY_MAX || vlen > VALUE_MAX {
                    return Err(r.corrupt(format!("entry {i}: key {klen} / value {vlen} bytes over limits")));
                }
                let k = r.take(klen)?;
                let v = r.take(vlen)?;
                if prev.is_some_and(|p| p >= k) {
                    return Err(r.corrupt(format!("entry {i}: keys out of order")));
                }
                prev = Some(k);
                entries.push((k.to_vec(), v.to_vec()));
            }
            BtreeNodePhys::Leaf { entries }
        } else {
            if count == 0 {
                return Err(r.corrupt("internal node without children"));
            }
            let mut entries = Vec::with_capacity(count.min(buf.len() / 66));
            for i in 0..count {
                let klen = r.u16()? as usize;
                if klen > KEY_MAX {
                    return Err(r.corrupt(format!("entry {i}: key of {klen} bytes over limit")));
                }
                let bp = BlockPtr::decode_from(&mut r)?;
                let k = r.take(klen)?;
                if bp.is_hole() {
                    return Err(r.corrupt(format!("entry {i}: child is a hole")));
                }
                if i > 0 && prev.is_some_and(|p| p >= k) {
                    return Err(r.corrupt(format!("entry {i}: keys out of order")));
                }
                prev = Some(k);
                entries.push((k.to_vec(), bp));
            }
            BtreeNodePhys::Internal { level, entries }
        };
        if r.remaining() != 0 {
            return Err(r.corrupt(format!("{} trailing bytes", r.remaining())));
        }
        Ok(node)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndirectPhys {
    pub bps: Vec<BlockPtr>,
}

impl IndirectPhys {
    pub fn empty() -> IndirectPhys {
        IndirectPhys { bps: vec![BlockPtr::HOLE; INDIRECT_FANOUT] }
    }

    pub fn is_empty(&self) -> bool {
        self.bps.iter().all(|bp| bp.is_hole())
    }

    pub fn encode(&self) -> Vec<u8> {
        assert_eq!(self.bps.len(), INDIRECT_FANOUT);
        // Always the full 16 KiB logically; the pipeline does not store the hole tail.
        let mut w = Writer::with_capacity(INDIRECT_BYTES);
        for bp in &self.bps {
            bp.encode_into(&mut w);
        }
        w.into_inner()
    }

    /// Decode a block's logical bytes (zero-padded to INDIRECT_BYTES by the pipeline).
    pub fn decode(buf: &[u8], addr: Option<u64>) -> Result<IndirectPhys, Corruption> {
        let mut r = Reader::new(buf, "indirect block", addr);
        if buf.len() != INDIRECT_BYTES {
            return Err(r.corrupt(format!("{} bytes, expected {}", buf.len(), INDIRECT_BYTES)));
        }
        let mut bps = Vec::with_capacity(INDIRECT_FANOUT);
        for _ in 0..INDIRECT_FANOUT {
            bps.push(BlockPtr::decode_from(&mut r)?);
        }
        Ok(IndirectPhys { bps })
    }
}
