//! The catalog's snapshot relations (see pool/snapshot.rs for the model): ids, parents and
//! children, and the deadlists in the catalog tree under `[0x03] ++ deadlist ++ birth ++
//! addr`, so "entries born after txg t" is one key range.

use super::{Catalog, VolumeId};
use crate::error::{Error, Result};
use crate::format::BlockPtr;
use crate::pipeline::BlockIo;
use std::collections::HashMap;

pub(crate) const KEY_SNAPSHOT: u8 = 0x02;
pub(crate) const KEY_DEADLIST: u8 = 0x03;

/// Who descends from a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Child {
    Head(VolumeId),
    Snap(u64),
}

pub(crate) fn snapshot_key(volume: u64, name: &str) -> Vec<u8> {
    let mut k = vec![KEY_SNAPSHOT];
    k.extend_from_slice(&volume.to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}
pub(crate) fn deadlist_key(dl: u64, birth: u64, addr: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(25);
    k.push(KEY_DEADLIST);
    k.extend_from_slice(&dl.to_be_bytes());
    k.extend_from_slice(&birth.to_be_bytes());
    k.extend_from_slice(&addr.to_be_bytes());
    k
}

fn sectors(bps: &[BlockPtr]) -> u64 {
    bps.iter().map(|bp| bp.sectors()).sum()
}

impl Catalog {
    /// Hand out an id (volumes, snapshots, deadlists and groups share one counter,
    /// `UberblockPhys::next_volume_id`, which opening checks is past every id in use).
    pub(crate) fn new_id(&mut self) -> Result<u64> {
        Ok(self.new_ids(1)?.start)
    }

    /// Hand out `n` ids at once: all or none. The counter comes from disk: one that would
    /// wrap is damage, reported before anything changes.
    pub(crate) fn new_ids(&mut self, n: u64) -> Result<std::ops::Range<u64>> {
        let first = self.next_id;
        let end = first.checked_add(n).ok_or_else(|| {
            crate::error::Corruption::new(
                "uberblock",
                None,
                format!("next volume id {first} leaves no room for {n} more ids"),
            )
        })?;
        self.next_id = end;
        Ok(first..end)
    }

    /// Txg of snapshot `id` (0 for none).
    pub(crate) fn snapshot_txg(&self, id: u64) -> u64 {
        if id == 0 {
            0
        } else {
            self.snapshots.get(&id).map_or(0, |s| s.rec.txg)
        }
    }

    pub(crate) fn snapshot_id(&self, vol: VolumeId, name: &str) -> Result<u64> {
        self.snapshots.iter().find(|(_, s)| s.rec.volume == vol.0 && s.name == name).map(|(id, _)| *id).ok_or_else(
            || {
                let vname = self.volumes.get(&vol).map_or("?", |v| v.record.name.as_str());
                Error::NotFound(format!("snapshot {vname}@{name} (see `strata snapshot list {vname}`)"))
            },
        )
    }

    pub(crate) fn snapshot_display(&self, id: u64) -> String {
        match self.snapshots.get(&id) {
            Some(s) => {
                let v = self.volumes.get(&VolumeId(s.rec.volume)).map_or("?", |v| v.record.name.as_str());
                format!("{v}@{}", s.name)
            }
            None => format!("snapshot #{id}"),
        }
    }

    pub(crate) fn children(&self, id: u64) -> Vec<Child> {
        let mut out: Vec<Child> =
            self.volumes.iter().filter(|(_, v)| v.record.phys.parent == id).map(|(vid, _)| Child::Head(*vid)).collect();
        out.extend(self.snapshots.iter().filter(|(_, s)| s.rec.parent == id).map(|(sid, _)| Child::Snap(*sid)));
        out
    }

    pub(crate) fn child_volume(&self, c: Child) -> u64 {
        match c {
            Child::Head(v) => v.0,
            Child::Snap(s) => self.snapshots[&s].rec.volume,
        }
    }

    pub(crate) fn child_deadlist(&self, c: Child) -> u64 {
        match c {
            Child::Head(v) => self.volumes[&v].record.phys.deadlist,
            Child::Snap(s) => self.snapshots[&s].rec.deadlist,
        }
    }

    /// Deadlist entries of `dl` born after txg `after`, in (birth, addr) order.
    pub(crate) fn deadlist_entries(&self, io: &BlockIo, dl: u64, after: u64) -> Result<Vec<BlockPtr>> {
        let mut out = Vec::new();
        if dl == 0 {
            return Ok(out);
        }
        let Some(first_birth) = after.checked_add(1) else { return Ok(out) };
        let mut start = deadlist_key(dl, first_birth, 0);
        let end = deadlist_key(dl + 1, 0, 0);
        loop {
            let batch = self.tree.range(io, &start, Some(&end), 1024)?;
            let Some((last, _)) = batch.last() else { break };
            start = last.clone();
            start.push(0);
            for (k, v) in batch {
                let bp = BlockPtr::decode_from(&mut crate::format::codec::Reader::new(&v, "deadlist entry", None))?;
                // The key comes from disk too: the range holds keys of any length.
                let (birth, addr) = (k.get(9..17), k.get(17..));
                if bp.is_hole() || addr != Some(&bp.addr.to_be_bytes()) || birth != Some(&bp.birth_txg.to_be_bytes()) {
                    return Err(Error::Corruption(crate::error::Corruption::new(
                        "deadlist",
                        None,
                        format!("entry {k:02x?} does not match its block pointer {bp:?}"),
                    )));
                }
                out.push(bp);
            }
        }
        Ok(out)
    }

    pub(crate) fn deadlist_insert(&mut self, io: &BlockIo, dl: u64, bp: &BlockPtr) -> Result<()> {
        if dl == 0 {
            let detail = format!(
                "a block born in txg {} goes on the deadlist of a head or snapshot that has none",
                bp.birth_txg
            );
            return Err(crate::error::Corruption::new("volume record", None, detail).into());
        }
        self.tree.insert(io, &deadlist_key(dl, bp.birth_txg, bp.addr), &bp.encode())?;
        self.dirty = true;
        Ok(())
    }

    /// Remove the entries of `dl` born after `after`; returns them.
    pub(crate) fn deadlist_take(&mut self, io: &BlockIo, dl: u64, after: u64) -> Result<Vec<BlockPtr>> {
        let entries = self.deadlist_entries(io, dl, after)?;
        for bp in &entries {
            self.tree.remove(io, &deadlist_key(dl, bp.birth_txg, bp.addr))?;
        }
        if !entries.is_empty() {
            self.dirty = true;
        }
        Ok(entries)
    }

    /// Sectors only snapshot `id` holds: what deleting it would free.
    pub(crate) fn unique_sectors(&self, io: &BlockIo, id: u64) -> Result<u64> {
        let s = &self.snapshots[&id];
        let after = self.snapshot_txg(s.rec.parent);
        let children = self.children(id);
        match children.as_slice() {
            [] => Ok(s.rec.written_sectors),
            [c] => Ok(sectors(&self.deadlist_entries(io, self.child_deadlist(*c), after)?)),
            many => {
                let mut count: HashMap<(u64, u64), (u32, u64)> = HashMap::new();
                for c in many {
                    for bp in self.deadlist_entries(io, self.child_deadlist(*c), after)? {
                        count.entry((bp.addr, bp.birth_txg)).or_insert((0, bp.sectors())).0 += 1;
                    }
                }
                Ok(count.values().filter(|(n, _)| *n as usize == many.len()).map(|(_, u)| u).sum())
            }
        }
    }
}
