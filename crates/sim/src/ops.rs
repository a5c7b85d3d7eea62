//! The operations simulated threads make, each applied to the pool and, computed
//! beforehand, to the model: a failed operation's would-be state is known (it may or may
//! not have happened).

use strata_engine::{ObjectId, Pool, Result, VolumeId};
use strata_testkit::model::{ObjectModel, VolumeModel};
use strata_testkit::workload::compressible;
use strata_testkit::SimRng;

/// A change to one object.
#[derive(Clone, Debug)]
pub enum ObjOp {
    Write(u64, Vec<u8>),
    Truncate(u64),
    Punch(u64, u64),
    SetAttr(Vec<u8>),
}

impl ObjOp {
    /// A one-line description (for traces): offsets and lengths, not the bytes.
    pub fn describe(&self) -> String {
        match self {
            ObjOp::Write(off, data) => {
                format!("write {off}+{} (digest {:02x?})", data.len(), &blake3::hash(data).as_bytes()[..4])
            }
            ObjOp::Truncate(size) => format!("truncate {size}"),
            ObjOp::Punch(off, len) => format!("punch {off}+{len}"),
            ObjOp::SetAttr(a) => format!("setattr {} bytes", a.len()),
        }
    }

    /// A random change to `o`, in a volume of `record_size`: writes of every shape (whole
    /// records several at once, which a sync logs by reference; partial; appends; zeros;
    /// compressible), truncates, punches, attributes. Objects stay under 8 records.
    pub fn random(rng: &mut SimRng, o: &ObjectModel, record_size: u32) -> ObjOp {
        let rs = record_size as u64;
        let max_size = 8 * rs;
        match rng.below(100) {
            0..=69 => {
                let (offset, len) = if rng.chance(15) {
                    (rng.below(5) * rs, rs * rng.range(2, 4))
                } else {
                    let offset = match rng.below(3) {
                        0 => rng.below(max_size - rs),
                        1 => (o.data.len() as u64).min(max_size - rs),
                        _ => rng.below(6) * rs + rng.below(rs),
                    };
                    (offset, rng.range(1, rs + 1).min(max_size - offset))
                };
                let data = match rng.below(10) {
                    0 => vec![0; len as usize],
                    1..=3 => compressible(rng, len as usize),
                    _ => rng.bytes(len as usize),
                };
                ObjOp::Write(offset, data)
            }
            70..=79 => ObjOp::Truncate(if rng.chance(50) { rng.below(max_size) } else { o.data.len() as u64 / 2 }),
            80..=89 => ObjOp::Punch(rng.below(max_size), rng.below(max_size / 2)),
            _ => ObjOp::SetAttr(rng.blob(40)),
        }
    }

    pub fn apply(&self, o: &mut ObjectModel) {
        match self {
            ObjOp::Write(off, data) => o.write(*off, data),
            ObjOp::Truncate(size) => o.truncate(*size),
            ObjOp::Punch(off, len) => o.punch(*off, *len),
            ObjOp::SetAttr(a) => o.attr = a.clone(),
        }
    }

    pub fn run(&self, pool: &Pool, vol: VolumeId, obj: ObjectId) -> Result<()> {
        match self {
            ObjOp::Write(off, data) => pool.write(vol, obj, *off, data),
            ObjOp::Truncate(size) => pool.truncate(vol, obj, *size),
            ObjOp::Punch(off, len) => pool.punch_hole(vol, obj, *off, *len),
            ObjOp::SetAttr(a) => pool.set_attr(vol, obj, a),
        }
    }
}

/// A change to a volume: one of its objects, or a key.
#[derive(Clone, Debug)]
pub enum VolOp {
    Obj(u64, ObjOp),
    KvPut(Vec<u8>, Vec<u8>),
    KvDelete(Vec<u8>),
}

impl VolOp {
    /// A random key change (one of six keys).
    pub fn random_key(rng: &mut SimRng) -> VolOp {
        let key = vec![b'k', rng.below(6) as u8];
        if rng.chance(70) {
            VolOp::KvPut(key, rng.blob(60))
        } else {
            VolOp::KvDelete(key)
        }
    }

    pub fn apply(&self, v: &mut VolumeModel) {
        match self {
            VolOp::Obj(id, op) => op.apply(v.objects.get_mut(id).expect("the model's object")),
            VolOp::KvPut(k, val) => {
                v.kv.insert(k.clone(), val.clone());
            }
            VolOp::KvDelete(k) => {
                v.kv.remove(k);
            }
        }
    }

    pub fn run(&self, pool: &Pool, vol: VolumeId) -> Result<()> {
        match self {
            VolOp::Obj(id, op) => op.run(pool, vol, ObjectId(*id)),
            VolOp::KvPut(k, val) => pool.kv_put(vol, k, val).map(|_| ()),
            VolOp::KvDelete(k) => pool.kv_delete(vol, k).map(|_| ()),
        }
    }
}

/// Read a random range of `o` and compare with the model; Err only from the pool.
pub fn read_and_verify(
    rng: &mut SimRng,
    pool: &Pool,
    vol: VolumeId,
    id: u64,
    o: &ObjectModel,
    seed: u64,
) -> Result<()> {
    let off = rng.below(o.data.len() as u64 + 10);
    let len = rng.below(3 * 16384) as usize;
    let got = pool.read(vol, ObjectId(id), off, len)?;
    let lo = (off as usize).min(o.data.len());
    let hi = (off as usize + len).min(o.data.len());
    assert!(got == o.data[lo..hi], "seed {seed}: a read of {len} bytes at {off} of object {id} differs from the model");
    Ok(())
}
