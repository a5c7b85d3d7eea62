//! The destroy queue (async destroy, OpenZFS `bptree`): a deleted volume leaves the
//! namespace at once and its blocks are freed over the following commits
//! (pool/destroy.rs). In the catalog, under key space `KEY_DESTROY`:
//!
//! ```text
//!   [KEY_DESTROY][id: u64 BE][slot: u32 BE = 0]      → DestroyPhys (header, 40 bytes)
//!   [KEY_DESTROY][id: u64 BE][slot: u32 BE = 1..=n]  → DestroyTreePhys (72 bytes)
//! ```
//!
//! Header: offset 0 `after_txg` u64 (the volume's origin txg: only blocks born after it
//! are the volume's), 8 `trees` u32 (n), 12 reserved u32 = 0, 16 `freed_data` u64 (data
//! blocks already freed, counted in the walk order of the trees), 24 `sectors_left` u64
//! (what is still to be freed, for `PoolSpace::destroying_bytes`), 32 reserved u64 = 0.
//! Tree: offset 0 the tree's root block pointer (64 bytes), 64 its deadlist id u64.
//!
//! Guarded by `RO_COMPAT_ASYNC_DESTROY`: an older build would see the queue's blocks as
//! leaked and never free them.

use super::codec::{Reader, Writer};
use super::BlockPtr;
use crate::error::Corruption;

pub const KEY_DESTROY: u8 = 0x04;
pub const DESTROY_SIZE: usize = 40;
pub const DESTROY_TREE_SIZE: usize = super::blkptr::BLKPTR_SIZE + 8;

/// The key of slot `slot` of destroy `id`.
pub fn destroy_key(id: u64, slot: u32) -> [u8; 13] {
    let mut k = [0u8; 13];
    let (tag, rest) = k.split_at_mut(1);
    tag.copy_from_slice(&[KEY_DESTROY]);
    let (idb, slotb) = rest.split_at_mut(8);
    idb.copy_from_slice(&id.to_be_bytes());
    slotb.copy_from_slice(&slot.to_be_bytes());
    k
}

/// (id, slot) of a key made by `destroy_key`.
pub fn parse_destroy_key(key: &[u8]) -> Option<(u64, u32)> {
    let (&tag, rest) = key.split_first()?;
    if tag != KEY_DESTROY || rest.len() != 12 {
        return None;
    }
    let (id, slot) = rest.split_at(8);
    Some((u64::from_be_bytes(id.try_into().ok()?), u32::from_be_bytes(slot.try_into().ok()?)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DestroyPhys {
    pub after_txg: u64,
    pub trees: u32,
    pub freed_data: u64,
    pub sectors_left: u64,
}

impl DestroyPhys {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(DESTROY_SIZE);
        w.u64(self.after_txg).u32(self.trees).u32(0).u64(self.freed_data).u64(self.sectors_left).u64(0);
        w.into_inner()
    }

    pub fn decode(buf: &[u8]) -> Result<DestroyPhys, Corruption> {
        let mut r = Reader::new(buf, "destroy queue entry", None);
        if buf.len() != DESTROY_SIZE {
            return Err(r.corrupt(format!("{} bytes, expected {DESTROY_SIZE}", buf.len())));
        }
        let after_txg = r.u64()?;
        let trees = r.u32()?;
        let reserved = r.u32()?;
        let freed_data = r.u64()?;
        let sectors_left = r.u64()?;
        let reserved2 = r.u64()?;
        if reserved != 0 || reserved2 != 0 || trees == 0 {
            return Err(r.corrupt(format!("{trees} trees, reserved bytes {reserved:#x}/{reserved2:#x}")));
        }
        Ok(DestroyPhys { after_txg, trees, freed_data, sectors_left })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DestroyTreePhys {
    pub root: BlockPtr,
    pub deadlist: u64,
}

impl DestroyTreePhys {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(DESTROY_TREE_SIZE);
        self.root.encode_into(&mut w);
        w.u64(self.deadlist);
        w.into_inner()
    }

    pub fn decode(buf: &[u8]) -> Result<DestroyTreePhys, Corruption> {
        let mut r = Reader::new(buf, "destroy queue tree", None);
        if buf.len() != DESTROY_TREE_SIZE {
            return Err(r.corrupt(format!("{} bytes, expected {DESTROY_TREE_SIZE}", buf.len())));
        }
        let root = BlockPtr::decode_from(&mut r)?;
        let deadlist = r.u64()?;
        Ok(DestroyTreePhys { root, deadlist })
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_damage_is_refused() {
        let h = DestroyPhys { after_txg: 7, trees: 3, freed_data: 1000, sectors_left: 123_456 };
        assert_eq!(DestroyPhys::decode(&h.encode()), Ok(h));
        let mut bad = h.encode();
        bad[12] = 1;
        assert!(DestroyPhys::decode(&bad).is_err());
        assert!(DestroyPhys::decode(&bad[..39]).is_err());
        let zero_trees = DestroyPhys { trees: 0, ..h }.encode();
        assert!(DestroyPhys::decode(&zero_trees).is_err());
        let t = DestroyTreePhys { root: BlockPtr::HOLE, deadlist: 9 };
        assert_eq!(DestroyTreePhys::decode(&t.encode()), Ok(t));
        assert!(DestroyTreePhys::decode(&t.encode()[..70]).is_err());
        assert_eq!(parse_destroy_key(&destroy_key(5, 2)), Some((5, 2)));
        assert_eq!(parse_destroy_key(&destroy_key(5, 2)[..12]), None);
    }
}
