//! Space policy of the pool: thin volumes with optional reservations, logical versus
//! physical accounting, capacity alerts, and the per-volume compression setting.
//!
//! Thin by default: a volume's size (`quota_bytes`) is a limit, never set aside. A volume
//! may also have a *reservation* (thick): the pool keeps that much space for it, so other
//! volumes cannot take it. The part of a reservation a volume does not use yet,
//! `reservation − (used + dirty)`, is subtracted from what every *other* volume may reserve
//! for its writes (`held_for_others`); the volume itself writes into it freely. This is the
//! ZFS `reservation` model. Reservations persist in the catalog beside the volume records
//! (format/space.rs); the checker validates them.
//!
//! Accounting: each volume record carries `saved_bytes` (format/records.rs), kept exact by
//! `VolumeState::sync` and verified by the checker. Logical bytes = used + saved: what the
//! volume would occupy if every data record were stored whole and uncompressed. Zero
//! records are holes and count in neither (they cost nothing; the pipeline counts them in
//! `IoStats::zero_records_elided`).
//!
//! Trade-off: `held_for_others` is a linear pass over the volumes on each writing
//! operation, but only when some volume has a reservation; fine for the dozens of volumes
//! a pool holds; cache the sum if pools reach thousands of thick volumes.

use crate::alloc::Allocator;
use crate::catalog::volume::VolumeState;
use crate::error::Corruption;
use crate::error::{Error, Result, SpaceReason};
use crate::format::features::{INCOMPAT_COMPRESSION, INCOMPAT_DEDUP, INCOMPAT_PACKS};
use crate::format::space::{
    DedupPhys, PackPhys, PoolSpacePhys, VolumeSpacePhys, KEY_DEDUP, KEY_PACK, KEY_POOL_SPACE, KEY_VOLUME_SPACE,
};
use crate::format::{SECTORS_PER_UNIT, SECTOR_SIZE, UNIT_SIZE};
use crate::pipeline::compress::CompressionPolicy;
use crate::pipeline::dedup::DedupTable;
use crate::pipeline::BlockIo;
use crate::pool::{Pool, PoolInner, VolumeId};
use crate::sync::atomic::Ordering;
use crate::tree::btree::BTree;
use std::collections::BTreeMap;

/// Warn when less than this share of the pool is available: NetApp's guidance for flash
/// aggregates (keep 10% free so that copy-on-write always finds room and stays fast).
pub const CAPACITY_ALERT_DEFAULT_PERCENT: u8 = 10;

/// A volume's space figures and policies, as `Pool::volume_info` reports them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VolumeSpace {
    pub compression: CompressionPolicy,
    /// Space the pool keeps for this volume; 0 = thin.
    pub reservation_bytes: u64,
    /// What the volume's blocks would occupy stored whole and uncompressed (used + saved);
    /// `None` when the volume was last written by a build that did not track savings.
    pub logical_bytes: Option<u64>,
    /// Bytes saved by compression and zero-tail trimming.
    pub saved_bytes: Option<u64>,
    /// New data records are deduplicated.
    pub dedup: bool,
}

/// The pool's space beyond size/allocated/free, as `Pool::status` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PoolSpace {
    /// Allocated plus the savings of every volume that tracks them.
    pub logical_bytes: u64,
    pub saved_bytes: u64,
    /// Volumes whose savings are not tracked (written by an older build): not in the totals.
    pub untracked_volumes: usize,
    /// Unused parts of reservations: free, but kept for their volumes.
    pub reserved_bytes: u64,
    /// Free for any volume: size − allocated − held frees − dirty data − unused reservations.
    pub available_bytes: u64,
    /// Still to be freed of deleted volumes (pool/destroy.rs): allocated, in no volume;
    /// goes to `PoolStatus::held_bytes`, then `available_bytes`, over the next commits.
    pub destroying_bytes: u64,
    pub capacity_alert_percent: u8,
    /// Conditions an operator should act on (capacity below the alert threshold).
    pub warnings: Vec<String>,
    pub compressed_blocks_written: u64,
    pub compression_skipped: u64,
    pub zero_records_elided: u64,
    /// Packs in the pool now (compaction: units shared by small compressed records).
    pub packs: u64,
    /// Blocks in the dedup table, the bytes its further references save, and the table's
    /// bound (entries).
    pub dedup_blocks: u64,
    pub dedup_saved_bytes: u64,
    pub dedup_table_max: u64,
    /// Data records written into packs since the pool was opened.
    pub packed_records_written: u64,
}

fn reservation_units(bytes: u64) -> u64 {
    bytes.div_ceil(UNIT_SIZE)
}

/// Units of `v`'s reservation it does not use yet (committed or dirty).
pub(crate) fn unused_reservation_units(v: &VolumeState) -> u64 {
    reservation_units(v.record.reservation_bytes).saturating_sub(used_units(v) + v.dirty.reserved_units())
}

/// The units `v`'s committed blocks are charged (sectors, rounded up to units).
fn used_units(v: &VolumeState) -> u64 {
    v.record.phys.used_sectors.div_ceil(SECTORS_PER_UNIT)
}

/// Units the other volumes' reservations keep from `except`.
pub(crate) fn held_for_others(volumes: &BTreeMap<VolumeId, VolumeState>, except: VolumeId) -> u64 {
    volumes.iter().filter(|(id, _)| **id != except).map(|(_, v)| unused_reservation_units(v)).sum()
}

pub(crate) fn volume_space_key(name: &str) -> Vec<u8> {
    let mut k = vec![KEY_VOLUME_SPACE];
    k.extend_from_slice(name.as_bytes());
    k
}

pub(crate) fn volume_space(v: &VolumeState) -> VolumeSpace {
    VolumeSpace {
        compression: v.record.phys.compression,
        reservation_bytes: v.record.reservation_bytes,
        logical_bytes: v.record.phys.saved_bytes.map(|s| v.record.phys.used_sectors * SECTOR_SIZE + s),
        saved_bytes: v.record.phys.saved_bytes,
        dedup: v.record.phys.dedup,
    }
}

/// Every entry of the catalog's key space `kind` (keys starting with that byte), in order.
fn scan(io: &BlockIo, catalog: &BTree, kind: u8, mut f: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
    let mut start = vec![kind];
    loop {
        let batch = catalog.range(io, &start, Some(&[kind + 1]), 1024)?;
        let Some((last, _)) = batch.last() else { return Ok(()) };
        start = last.clone();
        start.push(0);
        for (k, v) in &batch {
            f(k, v)?;
        }
    }
}

/// Read the reservations in `catalog` into the volumes (opening a pool). Entries naming no
/// volume are left for the checker to report.
pub(crate) fn load(io: &BlockIo, catalog: &BTree, volumes: &mut BTreeMap<VolumeId, VolumeState>) -> Result<()> {
    let by_name: BTreeMap<String, VolumeId> = volumes.iter().map(|(id, v)| (v.record.name.clone(), *id)).collect();
    scan(io, catalog, KEY_VOLUME_SPACE, |k, v| {
        let rec = VolumeSpacePhys::decode(v)?;
        let name = String::from_utf8_lossy(&k[1..]);
        if let Some(vol) = by_name.get(name.as_ref()).and_then(|id| volumes.get_mut(id)) {
            vol.record.reservation_bytes = rec.reservation_bytes;
        }
        Ok(())
    })
}

/// Read the pack table and the dedup table in `catalog` into the allocator (opening a pool).
pub(crate) fn load_packs(io: &BlockIo, catalog: &BTree, alloc: &mut Allocator, ddt: &mut DedupTable) -> Result<()> {
    let mut packs = Vec::new();
    scan(io, catalog, KEY_PACK, |k, v| {
        let addr = PackPhys::addr_of_key(k)
            .ok_or_else(|| Corruption::new("pack table", None, format!("malformed key {k:02x?}")))?;
        packs.push((addr, PackPhys::decode(v)?));
        Ok(())
    })?;
    alloc.load_packs(packs)?;
    let mut entries = Vec::new();
    scan(io, catalog, KEY_DEDUP, |k, v| {
        let hash = DedupPhys::hash_of_key(k)
            .ok_or_else(|| Corruption::new("dedup table", None, format!("malformed key {k:02x?}")))?;
        entries.push((hash, DedupPhys::decode(v)?));
        Ok(())
    })?;
    ddt.load(entries);
    Ok(())
}

impl PoolInner {
    /// Mark the pool as using compressed blocks and packs (incompatible features) before
    /// the first one can be written: both labels are rewritten, one at a time, each flushed,
    /// so a crash leaves at least one valid label. A failure latches the pool (DESIGN.md
    /// §3.8). Packing starts once the labels carry the packs feature.
    pub(crate) fn enable_compression_feature(&mut self) -> Result<()> {
        let want = INCOMPAT_COMPRESSION | INCOMPAT_PACKS;
        if self.label.features.incompat & want != want {
            let mut label = self.label.clone();
            label.features.incompat |= want;
            self.rewrite_labels(label, "write pool label (enable compression and packs)")?;
        }
        self.io.set_packing(true);
        Ok(())
    }

    /// Mark the pool as holding dedup references (an incompatible feature) before the first
    /// can be written, as `enable_compression_feature` does. Dedup keys on BLAKE3 checksums:
    /// a pool made with CRC-32C is refused.
    pub(crate) fn enable_dedup_feature(&mut self) -> Result<()> {
        if self.label.checksum_algo != crate::format::ChecksumAlgo::Blake3 {
            return Err(Error::invalid(format!(
                "pool {} uses crc32c checksums; dedup needs BLAKE3 (the content hash is the block checksum): \
                 create the pool with --checksum blake3",
                self.label.pool_name
            )));
        }
        if self.label.features.incompat & INCOMPAT_DEDUP == 0 {
            let mut label = self.label.clone();
            label.features.incompat |= INCOMPAT_DEDUP;
            self.rewrite_labels(label, "write pool label (enable dedup)")?;
        }
        Ok(())
    }

    /// Can a reservation of `bytes` be honoured for `vol` (`None`: a new, empty volume)?
    fn check_reservation(&self, vol: Option<VolumeId>, name: &str, bytes: u64, quota_bytes: u64) -> Result<()> {
        if quota_bytes > 0 && bytes > quota_bytes {
            return Err(Error::invalid(format!(
                "reservation of {bytes} bytes for volume {name} exceeds its size limit of {quota_bytes}: \
                 lower the reservation or raise the size"
            )));
        }
        let in_use =
            vol.and_then(|id| self.catalog.volumes.get(&id)).map_or(0, |v| used_units(v) + v.dirty.reserved_units());
        let need = reservation_units(bytes).saturating_sub(in_use);
        let others = match vol {
            Some(id) => held_for_others(&self.catalog.volumes, id),
            None => self.catalog.volumes.values().map(unused_reservation_units).sum(),
        };
        let available = self.alloc.available_units().saturating_sub(others);
        if need > available {
            return Err(Error::no_space(
                SpaceReason::Reservation,
                format!(
                    "cannot reserve {bytes} bytes for volume {name} in pool {}: it needs {} more bytes, only {} are \
                     available (after other reservations and the pool's slop); free space, lower the reservation \
                     or grow the pool",
                    self.label.pool_name,
                    need * UNIT_SIZE,
                    available * UNIT_SIZE
                ),
            ));
        }
        Ok(())
    }

    /// Validate a new volume's compression and reservation; turn the feature on if needed.
    /// Called before the volume exists, so a refusal changes nothing.
    pub(crate) fn prepare_volume(
        &mut self,
        name: &str,
        compression: CompressionPolicy,
        reservation: u64,
        quota: u64,
    ) -> Result<()> {
        self.check_reservation(None, name, reservation, quota)?;
        if compression != CompressionPolicy::Off {
            self.enable_compression_feature()?;
        }
        Ok(())
    }

    /// Record `vol`'s reservation in memory and in the catalog (0 removes it).
    pub(crate) fn store_reservation(&mut self, vol: VolumeId, bytes: u64) -> Result<()> {
        let PoolInner { io, catalog: crate::catalog::Catalog { volumes, tree: catalog, .. }, .. } = self;
        let v = volumes.get_mut(&vol).ok_or_else(|| Error::NotFound(format!("volume id {}", vol.0)))?;
        let key = volume_space_key(&v.record.name);
        if bytes == 0 {
            catalog.remove(io, &key)?;
        } else {
            catalog.insert(io, &key, &VolumeSpacePhys { reservation_bytes: bytes }.encode())?;
        }
        v.record.reservation_bytes = bytes;
        self.catalog.dirty = true;
        Ok(())
    }

    fn capacity_alert_percent(&self) -> std::result::Result<u8, String> {
        match self.catalog.tree.get(&self.io, &[KEY_POOL_SPACE]) {
            Ok(None) => Ok(CAPACITY_ALERT_DEFAULT_PERCENT),
            Ok(Some(raw)) => PoolSpacePhys::decode(&raw).map(|p| p.capacity_alert_percent).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }

    pub(crate) fn pool_space(&self) -> PoolSpace {
        let units = self.alloc.geometry().total_units();
        let size = units * UNIT_SIZE;
        let allocated = self.alloc.allocated_units() * UNIT_SIZE;
        let reserved: u64 = self.catalog.volumes.values().map(unused_reservation_units).sum();
        let busy = self.alloc.allocated_units() + self.alloc.held_units() + self.alloc.reserved_units() + reserved;
        let available = units.saturating_sub(busy) * UNIT_SIZE;
        // Figures read from disk, each bounded (`SPACE_SECTORS_MAX`); their sum is not.
        let saved: u64 = self
            .catalog
            .volumes
            .values()
            .filter_map(|v| v.record.phys.saved_bytes)
            .fold(self.ddt.saved_sectors() * SECTOR_SIZE, u64::saturating_add);
        let mut warnings = Vec::new();
        let percent = self.capacity_alert_percent().unwrap_or_else(|e| {
            warnings.push(format!("capacity alert setting unreadable ({e}); using {CAPACITY_ALERT_DEFAULT_PERCENT}%"));
            CAPACITY_ALERT_DEFAULT_PERCENT
        });
        if (available as u128) * 100 < (size as u128) * percent as u128 {
            warnings.push(format!(
                "pool {} has {} bytes available ({:.1}% of {}), below its capacity alert of {percent}%: delete data, \
                 volumes or reservations, or grow the pool (copy-on-write needs free space to stay fast)",
                self.label.pool_name,
                available,
                if size > 0 { 100.0 * available as f64 / size as f64 } else { 0.0 },
                size
            ));
        }
        warnings.extend(self.destroy_warnings());
        let stats = &self.io.stats;
        PoolSpace {
            logical_bytes: allocated.saturating_add(saved),
            saved_bytes: saved,
            untracked_volumes: self.catalog.volumes.values().filter(|v| v.record.phys.saved_bytes.is_none()).count(),
            reserved_bytes: reserved * UNIT_SIZE,
            available_bytes: available,
            destroying_bytes: self.destroying_bytes(),
            capacity_alert_percent: percent,
            warnings,
            compressed_blocks_written: stats.compressed_blocks_written.load(Ordering::Relaxed),
            compression_skipped: stats.compression_skipped.load(Ordering::Relaxed),
            zero_records_elided: stats.zero_records_elided.load(Ordering::Relaxed),
            packs: self.alloc.pack_count() as u64,
            dedup_blocks: self.ddt.len() as u64,
            dedup_saved_bytes: self.ddt.saved_sectors() * SECTOR_SIZE,
            dedup_table_max: self.ddt.max_entries() as u64,
            packed_records_written: stats.packed_records_written.load(Ordering::Relaxed),
        }
    }
}

impl Pool {
    /// Compression of the volume's new data records (records already written keep theirs).
    pub fn set_compression(&self, vol: VolumeId, policy: CompressionPolicy) -> Result<()> {
        let mut p = self.lock();
        p.writable()?;
        if !p.catalog.volumes.contains_key(&vol) {
            return Err(Error::NotFound(format!("volume id {}", vol.0)));
        }
        if policy != CompressionPolicy::Off {
            p.enable_compression_feature()?;
        }
        let v = p.catalog.volumes.get_mut(&vol).expect("checked above");
        v.record.phys.compression = policy;
        v.dirty.changed = true;
        p.catalog.dirty = true;
        Ok(())
    }

    /// Deduplicate the volume's new data records (records already written stay as they
    /// are). Turning it on needs a pool with BLAKE3 checksums.
    pub fn set_dedup(&self, vol: VolumeId, on: bool) -> Result<()> {
        let mut p = self.lock();
        p.writable()?;
        if !p.catalog.volumes.contains_key(&vol) {
            return Err(Error::NotFound(format!("volume id {}", vol.0)));
        }
        if on {
            p.enable_dedup_feature()?;
        }
        let v = p.catalog.volumes.get_mut(&vol).expect("checked above");
        v.record.phys.dedup = on;
        v.dirty.changed = true;
        p.catalog.dirty = true;
        Ok(())
    }

    /// Keep `bytes` of the pool for the volume (0 = thin). Refused with NoSpace when the
    /// pool cannot honour it.
    pub fn set_reservation(&self, vol: VolumeId, bytes: u64) -> Result<()> {
        let mut p = self.lock();
        p.writable()?;
        let v = p.catalog.volumes.get(&vol).ok_or_else(|| Error::NotFound(format!("volume id {}", vol.0)))?;
        let (name, quota) = (v.record.name.clone(), v.record.phys.quota_bytes);
        p.check_reservation(Some(vol), &name, bytes, quota)?;
        p.store_reservation(vol, bytes)
    }

    /// Warn in `status()` when available space falls below `percent` of the pool (1-99).
    pub fn set_capacity_alert(&self, percent: u8) -> Result<()> {
        if !(1..=99).contains(&percent) {
            return Err(Error::invalid(format!("capacity alert of {percent}%: use 1 to 99")));
        }
        let mut p = self.lock();
        p.writable()?;
        let PoolInner { io, catalog: crate::catalog::Catalog { tree: catalog, .. }, .. } = &mut *p;
        catalog.insert(io, &[KEY_POOL_SPACE], &PoolSpacePhys { capacity_alert_percent: percent }.encode())?;
        p.catalog.dirty = true;
        Ok(())
    }
}
