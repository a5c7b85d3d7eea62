//! Device groups (`strata pool add`): a pool that grows by another device set, and the
//! assembly of a grown pool's groups when it is opened.
//!
//! Adding a group, in an order a crash at any point survives:
//! 1. every space map chunk of the new group gets an empty version stamped txg 0 in its
//!    slot 0 (slot 1 zeroed) on the new set, flushed — a root older than the group finds a
//!    valid, empty version of each of its chunks;
//! 2. the group joins the pool's device (in memory) and both pool labels are rewritten
//!    with the group in their table and `INCOMPAT_DEVICE_GROUPS` set, each flushed;
//! 3. the allocator and the block I/O learn the new geometry, and a commit writes the new
//!    group's chunks (to slot 1) with the root.
//!
//! A crash before 2 leaves a set no label names (opening says so and goes on without it;
//! adding it again formats it again). After 2 the group is part of the pool, free.

use crate::alloc::Allocator;
use crate::device::{BlockDevice, GroupedDevice};
use crate::error::{Error, Result};
use crate::format::features::INCOMPAT_DEVICE_GROUPS;
use crate::format::label::{GroupPhys, GROUPS_MAX};
use crate::format::spacemap::CHUNK_SLOT_SIZE;
use crate::format::UNIT_SIZE;
use crate::pool::Pool;
use std::sync::Arc;

/// Where an added group starts: past the pool's logical space, rounded.
const GROUP_BASE_ALIGN: u64 = 1 << 20;

/// The device of a pool whose first group is `first`, with the groups its label names taken
/// from `sets` by their set guid. Returns notes on sets given that the label does not name
/// (an interrupted `pool add`). A group that is missing is an error that names it.
pub fn assemble(
    first: Arc<dyn BlockDevice>,
    sets: Vec<Arc<dyn BlockDevice>>,
) -> Result<(Arc<GroupedDevice>, Vec<String>)> {
    let (label, _) = crate::pool::open::read_label(first.as_ref())?;
    let grouped = GroupedDevice::new(first);
    let mut sets: Vec<Option<Arc<dyn BlockDevice>>> = sets.into_iter().map(Some).collect();
    for (i, g) in label.groups.iter().enumerate() {
        let found = sets
            .iter_mut()
            .find(|s| s.as_ref().and_then(|s| s.set_status()).is_some_and(|st| st.set_guid == g.set_guid))
            .and_then(Option::take)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "pool {}: device group {} (set guid {:#x}) is missing; give the devices of every group",
                    label.pool_name,
                    i + 1,
                    g.set_guid
                ))
            })?;
        if found.size_bytes() < g.bytes {
            return Err(Error::invalid(format!(
                "pool {}: device group {} ({}) has {} bytes, the pool uses {}",
                label.pool_name,
                i + 1,
                found.describe(),
                found.size_bytes(),
                g.bytes
            )));
        }
        grouped.push(g.base, found).map_err(|e| Error::io("assemble device groups", e))?;
    }
    let notes = sets
        .into_iter()
        .flatten()
        .map(|s| {
            format!(
                "{} is not a device group of pool {} (a `pool add` that did not finish?): not used",
                s.describe(),
                label.pool_name
            )
        })
        .collect();
    Ok((Arc::new(grouped), notes))
}

/// The set guids of the device groups the pool label on `first` (a pool's first group)
/// names, in order (empty: the pool has one group). Reads the label only.
pub fn group_set_guids(first: &dyn BlockDevice) -> Result<Vec<u64>> {
    let (label, _) = crate::pool::open::read_label(first)?;
    Ok(label.groups.iter().map(|g| g.set_guid).collect())
}

impl Pool {
    /// The parity2 device groups whose rows the allocator keeps to (tests: every parity2
    /// group's, after `add_group` and after reopening).
    pub fn parity_row_sets(&self) -> usize {
        self.lock_raw().alloc.row_sets()
    }

    /// Add `set` — a mirror or parity2 set made for this pool (its members carry the pool's
    /// guid), of the same layout as the pool's first group — as a new device group: the pool's space
    /// grows by the set's, and new blocks are spread over every group (alloc `Stripe`).
    /// Returns the bytes the pool gained. The pool's device must be a [`GroupedDevice`]
    /// (how the daemon opens every pool on a device set).
    pub fn add_group(&self, set: Arc<dyn BlockDevice>) -> Result<u64> {
        self.commit_then(|p| {
            p.writable()?;
            let dev = p.dev.clone();
            let Some(grouped) = dev.as_groups() else {
                return Err(Error::invalid(format!(
                    "pool {}: its device {} was opened without device groups",
                    p.label.pool_name,
                    dev.describe()
                )));
            };
            let first = dev.set_status();
            let new = set.set_status();
            let (Some(first), Some(new)) = (first, new) else {
                return Err(Error::invalid(format!(
                    "pool {}: device groups are sets of devices (a mirror); a single-device pool cannot add one",
                    p.label.pool_name
                )));
            };
            if new.layout != first.layout {
                return Err(Error::invalid(format!(
                    "pool {} is a {} pool: a new group must be a {} too",
                    p.label.pool_name,
                    first.layout.name(),
                    first.layout.name()
                )));
            }
            if p.label.groups.len() >= GROUPS_MAX {
                return Err(Error::invalid(format!(
                    "pool {} has {} device groups: the most a pool may have",
                    p.label.pool_name,
                    GROUPS_MAX + 1
                )));
            }
            if grouped.groups().iter().any(|(_, d)| d.set_status().is_some_and(|s| s.set_guid == new.set_guid)) {
                return Err(Error::invalid(format!(
                    "set {:#x} is a group of pool {} already",
                    new.set_guid, p.label.pool_name
                )));
            }
            let geo = p.alloc.geometry();
            let base = geo.end().max(grouped.size_bytes()).next_multiple_of(GROUP_BASE_ALIGN);
            let bytes = set.size_bytes() / UNIT_SIZE * UNIT_SIZE;
            let group = GroupPhys { set_guid: new.set_guid, base, bytes };
            let grown = geo.with_group(group).ok_or_else(|| {
                Error::invalid(format!("device group of {bytes} bytes is too small to add (at least a few MiB)"))
            })?;
            let seg = *grown.groups.last().expect("with_group added one");
            // A parity2 set mirrors its start and keeps rows after it: the rows must begin in
            // the group's data units (its space map region is rewritten in place).
            if let Some((start, _)) = set.rows() {
                if grown.unit_of(base + start).is_none() {
                    return Err(Error::invalid(format!(
                        "the new set's rows start at {start}, inside its space map region: not a set made for a group"
                    )));
                }
            }
            // 1. Empty chunk versions (txg 0) on the new set, flushed.
            let pool_guid = p.label.pool_guid;
            let zero = vec![0u8; CHUNK_SLOT_SIZE];
            for c in seg.first_chunk..seg.first_chunk + seg.chunks {
                let at = grown.slot_addr(c, 0) - base;
                set.write_at(&Allocator::empty_chunk(c, pool_guid), at)
                    .and_then(|_| set.write_at(&zero, grown.slot_addr(c, 1) - base))
                    .map_err(|e| Error::io("format the new group's space map", e))?;
            }
            set.flush().map_err(|e| Error::io("flush the new group's space map", e))?;
            // 2. The group joins the device, then the labels name it.
            grouped.push(base, set.clone()).map_err(|e| Error::io("add a device group", e))?;
            let mut label = p.label.clone();
            label.groups.push(group);
            label.features.incompat |= INCOMPAT_DEVICE_GROUPS;
            p.rewrite_labels(label, "write pool label (device group added)")?;
            // 3. The allocator and block I/O see it; the commit writes its chunks.
            p.alloc.grow(grown.clone());
            p.io.set_geometry(grown);
            // A parity2 group's rows: blocks go into them as into the first group's.
            if let Some(rows) = set.rows() {
                crate::pool::open::set_rows(&mut p.alloc, base, rows, set.as_ref())?;
            }
            p.catalog.dirty = true;
            p.commit_always()?;
            Ok(seg.units * UNIT_SIZE)
        })
    }
}
