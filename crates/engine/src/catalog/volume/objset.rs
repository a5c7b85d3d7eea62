//! A volume's object set: its B+tree (each object's dnode, and the caller's key-value
//! entries) and the dnodes in memory — the OpenZFS objset of a dataset.
//!
//! Everything a volume holds hangs off this tree: each object's dnode under key
//! `[KEY_DNODE] ++ id (big-endian)`, and the caller's key-value entries under
//! `[KEY_USER] ++ key`. The volume record points at the tree's root, so a snapshot of a
//! volume is one saved root pointer. The tree is copy-on-write in memory: key-value changes
//! and deleted objects edit its nodes at once, and `VolumeState::sync` writes it (with the
//! txg's dnodes) as a new root. The dnode map caches the committed dnodes read from the
//! tree and holds the ones the open txg changed (`ObjState::dirty`) until the sync stores
//! them in the tree.
//!
//! Mutated under the pool's lock (`Pool::inner`, the lock table in pool/mod.rs). While a
//! commit quiesces, the writes it lets run (data writes, attribute changes) touch only the
//! dnodes, never the tree, which the commit's sync writes; everything else that changes
//! the tree (key-value entries, creating and deleting objects, restores, clones) waits
//! until the pool is settled.

use crate::error::{Corruption, Error, Result};
use crate::format::node::KEY_MAX;
use crate::format::records::DnodePhys;
use crate::pipeline::BlockIo;
use crate::tree::btree::BTree;
use std::collections::HashMap;

use super::ObjectId;

pub(crate) const KEY_DNODE: u8 = 0x01;
const KEY_USER: u8 = 0x80;
/// Longest key the caller may use in a volume's key-value space.
pub const USER_KEY_MAX: usize = KEY_MAX - 1;
/// Clean dnodes kept in memory per volume. Each is ~100 bytes; 64k covers the hot set of a
/// database (a few thousand files) many times over.
const DNODE_CACHE_MAX: usize = 65536;

pub(super) fn dnode_key(obj: ObjectId) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = KEY_DNODE;
    k[1..].copy_from_slice(&obj.0.to_be_bytes());
    k
}

/// The object a dnode key of the volume's tree names. The key comes from disk: one that is
/// not `KEY_DNODE` and 8 bytes of id is damage.
fn object_of_key(k: &[u8]) -> Result<ObjectId> {
    match k.split_first() {
        Some((&KEY_DNODE, id)) => <[u8; 8]>::try_from(id).map(|id| ObjectId(u64::from_be_bytes(id))).ok(),
        _ => None,
    }
    .ok_or_else(|| Corruption::new("volume tree", None, format!("dnode key {k:02x?} is not 9 bytes")).into())
}

pub(super) fn user_key(key: &[u8]) -> Result<Vec<u8>> {
    if key.len() > USER_KEY_MAX {
        return Err(Error::invalid(format!("key of {} bytes (limit {USER_KEY_MAX})", key.len())));
    }
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(KEY_USER);
    k.extend_from_slice(key);
    Ok(k)
}

pub(super) struct ObjState {
    pub(super) dnode: DnodePhys,
    /// Changed in the open txg: the next freeze takes it (freeze.rs).
    pub(super) dirty: bool,
}

pub struct ObjectSet {
    pub tree: BTree,
    /// Dnodes in memory: committed ones read from the tree (a cache, trimmed after a sync)
    /// and the open txg's, dirty or new.
    pub(super) objects: HashMap<ObjectId, ObjState>,
}

impl ObjectSet {
    /// The object set whose tree has its root at `root`.
    pub fn open(root: crate::format::BlockPtr) -> ObjectSet {
        ObjectSet { tree: BTree::open(root), objects: HashMap::new() }
    }

    /// `obj`'s dnode as it stands in the open txg, read from the tree into memory if need
    /// be; `None`: the object does not exist.
    pub(super) fn dnode(&mut self, io: &BlockIo, obj: ObjectId) -> Result<Option<&mut ObjState>> {
        if !self.objects.contains_key(&obj) {
            let Some(raw) = self.tree.get(io, &dnode_key(obj))? else { return Ok(None) };
            let dnode = DnodePhys::decode(&raw)?;
            self.objects.insert(obj, ObjState { dnode, dirty: false });
        }
        Ok(self.objects.get_mut(&obj))
    }

    /// Forget `obj`: its dnode in memory and in the tree.
    pub(super) fn remove(&mut self, io: &BlockIo, obj: ObjectId) -> Result<()> {
        self.objects.remove(&obj);
        self.tree.remove(io, &dnode_key(obj))?;
        Ok(())
    }

    /// Object ids from `after` (exclusive), up to `limit`.
    pub fn list_objects(&mut self, io: &BlockIo, after: Option<ObjectId>, limit: usize) -> Result<Vec<ObjectId>> {
        // Dirty dnodes not yet in the tree must be listed too: merge both.
        let start = after.map_or(dnode_key(ObjectId(0)), |a| dnode_key(ObjectId(a.0.saturating_add(1))));
        let mut ids: Vec<ObjectId> = self
            .tree
            .range(io, &start, Some(&[KEY_DNODE + 1]), limit)?
            .into_iter()
            .map(|(k, _)| object_of_key(&k))
            .collect::<Result<_>>()?;
        let from = after.map_or(0, |a| a.0.saturating_add(1));
        ids.extend(self.objects.keys().filter(|o| o.0 >= from));
        ids.sort();
        ids.dedup();
        ids.truncate(limit);
        Ok(ids)
    }

    pub fn kv_get(&self, io: &BlockIo, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.tree.get(io, &user_key(key)?)
    }

    pub fn kv_range(
        &self,
        io: &BlockIo,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let s = user_key(start)?;
        let e = match end {
            Some(e) => user_key(e)?,
            None => vec![KEY_USER + 1],
        };
        Ok(self.tree.range(io, &s, Some(&e), limit)?.into_iter().map(|(mut k, v)| (k.split_off(1), v)).collect())
    }

    /// Store `dn`, as a sync wrote it, in the tree, and hand its new block-tree root to the
    /// live dnode (whose size and attribute may have moved on since the freeze).
    pub(super) fn store_dnode(&mut self, io: &BlockIo, obj: ObjectId, dn: &DnodePhys) -> Result<()> {
        self.tree.insert(io, &dnode_key(obj), &dn.encode())?;
        if let Some(st) = self.objects.get_mut(&obj) {
            st.dnode.root = dn.root;
            st.dnode.levels = dn.levels;
            st.dnode.data_sectors = dn.data_sectors;
        }
        Ok(())
    }

    /// After a sync: past `DNODE_CACHE_MAX` dnodes, keep only the dirty ones.
    pub(super) fn trim_cache(&mut self) {
        if self.objects.len() > DNODE_CACHE_MAX {
            self.objects.retain(|_, st| st.dirty);
        }
    }
}
