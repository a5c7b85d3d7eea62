//! Reference models: the obviously-right state a pool must show, and a reader that
//! captures what a pool actually shows, so tests compare the two with `==`.

use std::collections::BTreeMap;
use strata_engine::{ObjectId, Pool, Result, VolumeId};

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObjectModel {
    pub data: Vec<u8>,
    pub attr: Vec<u8>,
}

impl ObjectModel {
    pub fn write(&mut self, offset: u64, bytes: &[u8]) {
        let end = offset as usize + bytes.len();
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        self.data[offset as usize..end].copy_from_slice(bytes);
    }
    pub fn truncate(&mut self, size: u64) {
        self.data.resize(size as usize, 0);
    }
    pub fn punch(&mut self, offset: u64, len: u64) {
        let end = (offset.saturating_add(len) as usize).min(self.data.len());
        if (offset as usize) < end {
            self.data[offset as usize..end].fill(0);
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VolumeModel {
    pub record_size: u32,
    pub objects: BTreeMap<u64, ObjectModel>,
    pub kv: BTreeMap<Vec<u8>, Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PoolModel {
    pub volumes: BTreeMap<String, VolumeModel>,
}

impl PoolModel {
    /// A short description of the first difference from `other`, for failure messages.
    pub fn diff(&self, other: &PoolModel) -> Option<String> {
        if self == other {
            return None;
        }
        let names: std::collections::BTreeSet<_> = self.volumes.keys().chain(other.volumes.keys()).collect();
        for n in names {
            match (self.volumes.get(n), other.volumes.get(n)) {
                (Some(a), Some(b)) if a != b => {
                    if a.kv != b.kv {
                        return Some(format!(
                            "volume {n}: key-value spaces differ ({} vs {} entries)",
                            a.kv.len(),
                            b.kv.len()
                        ));
                    }
                    let ids: std::collections::BTreeSet<_> = a.objects.keys().chain(b.objects.keys()).collect();
                    for id in ids {
                        match (a.objects.get(id), b.objects.get(id)) {
                            (Some(x), Some(y)) if x != y => {
                                let at = x.data.iter().zip(&y.data).position(|(p, q)| p != q);
                                return Some(format!(
                                    "volume {n} object {id}: sizes {} vs {}, attr equal {}, first differing byte {at:?}",
                                    x.data.len(),
                                    y.data.len(),
                                    x.attr == y.attr
                                ));
                            }
                            (x, y) if x.is_some() != y.is_some() => {
                                return Some(format!(
                                    "volume {n} object {id}: present {} vs {}",
                                    x.is_some(),
                                    y.is_some()
                                ))
                            }
                            _ => {}
                        }
                    }
                    return Some(format!("volume {n}: record size {} vs {}", a.record_size, b.record_size));
                }
                (a, b) if a.is_some() != b.is_some() => {
                    return Some(format!("volume {n}: present {} vs {}", a.is_some(), b.is_some()))
                }
                _ => {}
            }
        }
        Some("differs".into())
    }
}

/// Read everything a pool shows: every volume, object (data and attribute) and entry.
pub fn capture(pool: &Pool) -> Result<PoolModel> {
    let mut m = PoolModel::default();
    for info in pool.volumes() {
        m.volumes.insert(info.name, capture_volume(pool, info.id, info.record_size)?);
    }
    Ok(m)
}

/// Read every object and entry of one volume (or of a read-only snapshot view).
pub fn capture_volume(pool: &Pool, vol: VolumeId, record_size: u32) -> Result<VolumeModel> {
    let mut v = VolumeModel { record_size, ..Default::default() };
    let mut after = None;
    loop {
        let ids = pool.list_objects(vol, after, 1000)?;
        let Some(&last) = ids.last() else { break };
        for id in ids {
            let size = pool.object_size(vol, id)?;
            let data = pool.read(vol, id, 0, size as usize)?;
            assert_eq!(data.len() as u64, size, "a read of the whole object returns all of it");
            v.objects.insert(id.0, ObjectModel { data, attr: pool.get_attr(vol, id)? });
        }
        after = Some(last);
    }
    let mut start = Vec::new();
    loop {
        let batch = pool.kv_range(vol, &start, None, 1000)?;
        let Some((last, _)) = batch.last() else { break };
        start = last.clone();
        start.push(0);
        v.kv.extend(batch);
    }
    Ok(v)
}

pub fn oid(id: u64) -> ObjectId {
    ObjectId(id)
}

/// After a crash during a sync workload: the reopened pool passes the checker and shows
/// exactly the state of the last acknowledged sync (`synced[acked]`) or of the one in flight
/// (`synced[acked + 1]`). Returns whether opening replayed the intent log.
pub fn assert_last_acknowledged_sync(pool: &Pool, synced: &[PoolModel], acked: usize, seed: u64) -> bool {
    let replayed = pool.status().open_notes.iter().any(|n| n.contains("replayed"));
    let report = pool.check(strata_engine::CheckOptions::default()).unwrap();
    assert!(report.is_clean(), "seed {seed}: {:#?}", report.errors);
    let seen = capture(pool).unwrap();
    let ok = seen == synced[acked] || synced.get(acked + 1).is_some_and(|m| *m == seen);
    assert!(
        ok,
        "seed {seed}: state is not the last acknowledged sync ({acked}): {}",
        synced[acked].diff(&seen).unwrap_or_default()
    );
    replayed
}
