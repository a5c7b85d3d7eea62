//! The catalog layer: volumes (their records, object sets and dirty state), snapshots,
//! clones, deadlists and space accounting.
//!
//! [`Catalog`] is what the pool's catalog tree holds, in memory: the live volumes, the
//! snapshots, the open snapshot views, the id counter, and what the next commit must write
//! of it. The pool (pool/) owns one and orchestrates its changes and commits.

pub mod snapshots;
pub mod volume;

use crate::format::records::SnapshotRecordPhys;
use crate::format::BlockPtr;
use crate::tree::btree::BTree;
use std::collections::BTreeMap;
use volume::VolumeState;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeId(pub u64);

pub struct SnapshotState {
    pub name: String,
    pub rec: SnapshotRecordPhys,
}

pub struct Catalog {
    /// The catalog tree: volume, snapshot, deadlist, space, pack, dedup and destroy entries.
    pub tree: BTree,
    /// The live volumes, by id, and their ids by name.
    pub volumes: BTreeMap<VolumeId, VolumeState>,
    pub by_name: BTreeMap<String, VolumeId>,
    /// Every snapshot of every volume, by id.
    pub snapshots: BTreeMap<u64, SnapshotState>,
    /// Open read-only views of snapshots (`Pool::open_snapshot_view`), by snapshot id: not
    /// volumes, never dirty, never committed.
    pub views: BTreeMap<VolumeId, VolumeState>,
    /// Snapshots a transfer is reading (repl/send.rs), by snapshot id: deleting one (or its
    /// volume) is refused until the transfer lets go. In memory only: a transfer that
    /// outlives a restart takes its holds again.
    pub holds: BTreeMap<u64, u32>,
    /// The next volume, snapshot or deadlist id (ids are never reused).
    pub next_id: u64,
    /// The tree or a volume record changed: the next commit writes the catalog.
    pub dirty: bool,
    /// Blocks the catalog's changes released in the open txg, freed by its commit.
    pub released: Vec<BlockPtr>,
}

impl Catalog {
    pub fn new(tree: BTree, next_id: u64) -> Catalog {
        Catalog {
            tree,
            volumes: BTreeMap::new(),
            by_name: BTreeMap::new(),
            snapshots: BTreeMap::new(),
            views: BTreeMap::new(),
            holds: BTreeMap::new(),
            next_id,
            dirty: false,
            released: Vec::new(),
        }
    }
}
