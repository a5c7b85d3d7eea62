//! Random workloads shared by the property, crash and fault tests: each operation is
//! applied to the pool and, only if the pool accepted it, to the model.

use crate::model::{ObjectModel, PoolModel, VolumeModel};
use crate::SimRng;
use strata_engine::{CompressionPolicy, ObjectId, Pool, Result, VolumeId, VolumeOptions};

/// Bytes that compress (to roughly a third with lz4): a short random phrase repeated, with
/// a random byte here and there, so compressed records of every size occur.
pub fn compressible(rng: &mut SimRng, len: usize) -> Vec<u8> {
    let phrase_len = rng.range(4, 40) as usize;
    let phrase = rng.bytes(phrase_len);
    let mut v: Vec<u8> = phrase.iter().copied().cycle().take(len).collect();
    for _ in 0..len / 64 {
        let at = rng.below(len as u64) as usize;
        v[at] = rng.next_u64() as u8;
    }
    v
}

/// The crash tests' start: volumes "a" and "b" with a record size picked from
/// `record_sizes` and a random compression policy each, committed; their model.
pub fn two_volumes(rng: &mut SimRng, pool: &Pool, record_sizes: &[u32]) -> (PoolModel, Vec<(String, VolumeId)>) {
    let mut model = PoolModel::default();
    let mut vols = Vec::new();
    for name in ["a", "b"] {
        let rs = *rng.pick(record_sizes);
        let opts = VolumeOptions { record_size: rs, compression: random_policy(rng), ..Default::default() };
        vols.push((name.to_string(), pool.create_volume(name, &opts).expect("create a volume")));
        model.volumes.insert(name.into(), VolumeModel { record_size: rs, ..Default::default() });
    }
    pool.commit().expect("commit the volumes");
    (model, vols)
}

/// A random compression policy (off included), for tests that mix them.
pub fn random_policy(rng: &mut SimRng) -> CompressionPolicy {
    match rng.below(5) {
        0 => CompressionPolicy::Off,
        1 | 2 => CompressionPolicy::Lz4,
        _ => CompressionPolicy::Zstd { level: *rng.pick(&[1u8, 3, 9, 19]) },
    }
}

/// One random operation on objects, applied to both the pool and the model.
pub fn object_op(rng: &mut SimRng, pool: &Pool, vol: VolumeId, m: &mut VolumeModel) -> Result<()> {
    let max_size = 3 * m.record_size as u64 * 8;
    let pick = |rng: &mut SimRng, m: &VolumeModel| -> Option<u64> {
        (!m.objects.is_empty()).then(|| *m.objects.keys().nth(rng.below(m.objects.len() as u64) as usize).unwrap())
    };
    match rng.below(100) {
        0..=7 => {
            let attr = rng.blob(40);
            let id = pool.create_object(vol, &attr)?;
            m.objects.insert(id.0, ObjectModel { data: Vec::new(), attr });
        }
        8..=54 => {
            let Some(id) = pick(rng, m) else {
                return Ok(());
            };
            let rs = m.record_size as u64;
            let (offset, len) = if rng.chance(15) {
                // Whole records, several at once: the large writes a sync logs by
                // reference (when at least 32 KiB).
                (rng.below(8) * rs, rs * rng.range(2, 5))
            } else {
                let offset = match rng.below(4) {
                    0 => rng.below(max_size),
                    1 => rng.below(8) * rs,
                    2 => m.objects[&id].data.len() as u64,
                    _ => rng.below(8) * rs + rng.below(rs),
                };
                let len = match rng.below(4) {
                    0 => rs,
                    1 => rng.range(1, 100),
                    2 => rng.range(1, 3 * rs),
                    _ => 8192,
                };
                (offset, len)
            };
            let data = match rng.below(10) {
                0 => vec![0; len as usize],
                1..=3 => compressible(rng, len as usize),
                _ => rng.bytes(len as usize),
            };
            pool.write(vol, ObjectId(id), offset, &data)?;
            m.objects.get_mut(&id).unwrap().write(offset, &data);
        }
        55..=64 => {
            let Some(id) = pick(rng, m) else {
                return Ok(());
            };
            let size = if rng.chance(50) { rng.below(max_size) } else { m.objects[&id].data.len() as u64 / 2 };
            pool.truncate(vol, ObjectId(id), size)?;
            m.objects.get_mut(&id).unwrap().truncate(size);
        }
        65..=72 => {
            let Some(id) = pick(rng, m) else {
                return Ok(());
            };
            let (off, len) = (rng.below(max_size), rng.below(max_size / 2));
            pool.punch_hole(vol, ObjectId(id), off, len)?;
            m.objects.get_mut(&id).unwrap().punch(off, len);
        }
        73..=76 => {
            let Some(id) = pick(rng, m) else {
                return Ok(());
            };
            pool.delete_object(vol, ObjectId(id))?;
            m.objects.remove(&id);
        }
        77..=80 => {
            let Some(id) = pick(rng, m) else {
                return Ok(());
            };
            let attr = rng.blob(100);
            pool.set_attr(vol, ObjectId(id), &attr)?;
            m.objects.get_mut(&id).unwrap().attr = attr;
        }
        81..=89 => {
            let Some(id) = pick(rng, m) else {
                return Ok(());
            };
            let want = &m.objects[&id].data;
            let off = rng.below(want.len() as u64 + 10);
            let len = rng.below(3 * m.record_size as u64) as usize;
            let got = pool.read(vol, ObjectId(id), off, len)?;
            let lo = (off as usize).min(want.len());
            let hi = (off as usize + len).min(want.len());
            assert_eq!(got, want[lo..hi], "read of {len} at {off} of object {id}");
        }
        _ => {
            let (k, v) = (vec![b'k', rng.below(20) as u8], rng.blob(50));
            pool.kv_put(vol, &k, &v)?;
            m.kv.insert(k, v);
        }
    }
    Ok(())
}
