//! The admin thread: its own volumes (volume "a" and the clones it makes) and their
//! snapshots — object writes and keys, snapshots, restores, clones, snapshot and volume
//! deletes, commits — as one line whose states are the whole of that partition.

use crate::history::{hash_volume, Digest, Line};
use crate::ops::{read_and_verify, ObjOp, VolOp};
use crate::threads::Ctx;
use std::collections::BTreeMap;
use std::sync::Arc;
use strata_engine::{Pool, Result};
use strata_testkit::model::{capture_volume, VolumeModel};
use strata_testkit::SimRng;

type SnapKey = (String, String);

/// The admin's volumes and snapshots, with the lineage that decides which deletes the
/// pool must refuse (tests/snapshots.rs has the same rules).
#[derive(Clone, Default, PartialEq)]
pub struct AdminModel {
    pub vols: BTreeMap<String, VolumeModel>,
    pub vol_parent: BTreeMap<String, Option<SnapKey>>,
    pub snaps: BTreeMap<SnapKey, (VolumeModel, Option<SnapKey>)>,
}

impl AdminModel {
    fn children(&self, s: &SnapKey) -> Vec<String> {
        let mut out: Vec<String> =
            self.vol_parent.iter().filter(|(_, p)| p.as_ref() == Some(s)).map(|(v, _)| v.clone()).collect();
        out.extend(self.snaps.iter().filter(|(_, (_, p))| p.as_ref() == Some(s)).map(|(k, _)| k.0.clone()));
        out
    }
    fn snapshot_pinned(&self, s: &SnapKey) -> bool {
        let c = self.children(s);
        c.len() > 1 || c.iter().any(|v| *v != s.0)
    }
    fn volume_pinned(&self, v: &str) -> bool {
        self.snaps.keys().filter(|k| k.0 == v).any(|k| self.children(k).iter().any(|cv| cv != v))
    }

    /// Each volume's and snapshot's digest, for traces.
    pub fn describe(&self) -> String {
        let one = |v: &VolumeModel| {
            let mut h = blake3::Hasher::new();
            hash_volume(&mut h, v);
            h.finalize().to_hex()[..8].to_string()
        };
        let vols = self.vols.iter().map(|(n, v)| format!("{n}={}", one(v)));
        let snaps = self.snaps.iter().map(|((v, n), (m, _))| format!("{v}@{n}={}", one(m)));
        vols.chain(snaps).collect::<Vec<_>>().join(" ")
    }

    /// Digest of what the pool shows of this partition: volumes and snapshot contents.
    pub fn digest(&self) -> Digest {
        let snaps = self.snaps.iter().map(|(k, (v, _))| (k.clone(), v));
        digest_partition(self.vols.iter().map(|(n, v)| (n.clone(), v)), snaps)
    }
}

pub fn digest_partition<'a>(
    vols: impl Iterator<Item = (String, &'a VolumeModel)>,
    snaps: impl Iterator<Item = (SnapKey, &'a VolumeModel)>,
) -> Digest {
    let mut h = blake3::Hasher::new();
    for (name, v) in vols {
        h.update(b"volume");
        h.update(name.as_bytes());
        hash_volume(&mut h, v);
    }
    for ((vol, name), v) in snaps {
        h.update(b"snapshot");
        h.update(format!("{vol}@{name}").as_bytes());
        hash_volume(&mut h, v);
    }
    *h.finalize().as_bytes()
}

/// What `pool` shows of the admin's partition: every volume but `skip` (the writers'),
/// and every snapshot.
pub fn capture_partition(pool: &Pool, skip: &str) -> Result<Digest> {
    let mut vols = BTreeMap::new();
    for info in pool.volumes().into_iter().filter(|i| i.name != skip) {
        vols.insert(info.name.clone(), capture_volume(pool, info.id, info.record_size)?);
    }
    let mut snaps = BTreeMap::new();
    for s in pool.snapshots(None)? {
        let view = pool.open_snapshot_view(&s.volume, &s.name)?;
        let got = capture_volume(pool, view, 0);
        pool.close_snapshot_view(view);
        snaps.insert((s.volume, s.name), got?);
    }
    if crate::tracing() {
        let m = AdminModel {
            vols: vols.clone(),
            snaps: snaps.iter().map(|(k, v)| (k.clone(), (v.clone(), None))).collect(),
            ..Default::default()
        };
        eprintln!("captured: {}", m.describe());
    }
    Ok(digest_partition(vols.iter().map(|(n, v)| (n.clone(), v)), snaps.iter().map(|(k, v)| (k.clone(), v))))
}

/// The admin thread; returns its line.
pub fn admin(ctx: Arc<Ctx>, mut m: AdminModel) -> Line {
    let seed = ctx.seed;
    let mut rng = SimRng::new(seed.wrapping_mul(0xA076_1D64_78BD_642F) ^ 0xAD);
    let mut line = Line::new("admin volumes and snapshots", false, m.digest());
    let pool = &ctx.pool;
    let mut next_name = 0;
    // The intent log keeps each object's operations in order, and the shared ones (keys) in
    // theirs, but not one object's against another's: a sync of one object may carry a key
    // written after another object's unsynced write. The admin's line is the whole
    // partition, so between two commits it changes one object only, and makes each key
    // change alone between two commits (the writers' lines are per object and per key).
    let mut target: Option<(String, u64)> = None;
    for step in 0..rng.range(15, 45) {
        let names: Vec<String> = m.vols.keys().cloned().collect();
        let vol = names[rng.below(names.len() as u64) as usize].clone();
        let snaps_of =
            |m: &AdminModel, v: &str| -> Vec<SnapKey> { m.snaps.keys().filter(|k| k.0 == v).cloned().collect() };
        let mut next = m.clone();
        next_name += 1;
        // What it does; whether it commits the whole pool (snapshot, restore, clone and
        // snapshot delete commit under the lock), so that Ok makes everything before it
        // durable; the call.
        type Call<'a> = Box<dyn FnOnce() -> Result<()> + 'a>;
        let (doing, commits, call): (String, bool, Call<'_>) = match rng.below(100) {
            0..=33 => {
                // One object per stretch between commits (see `admin`).
                let (tv, id) = match target
                    .clone()
                    .filter(|(v, id)| m.vols.get(v).is_some_and(|v| v.objects.contains_key(id)))
                {
                    Some(t) => t,
                    None => {
                        let Some(id) = pick(&mut rng, m.vols[&vol].objects.keys().copied().collect()) else { continue };
                        (vol.clone(), id)
                    }
                };
                target = Some((tv.clone(), id));
                let vm = &m.vols[&tv];
                let op = VolOp::Obj(id, ObjOp::random(&mut rng, &vm.objects[&id], vm.record_size));
                op.apply(next.vols.get_mut(&tv).expect("picked"));
                let vid = pool.volume_id(&tv).expect("the model's volume exists");
                let doing = format!("{op:?} on {tv}");
                (doing, false, Box::new(move || op.run(pool, vid)))
            }
            34..=41 => {
                let op = VolOp::random_key(&mut rng);
                op.apply(next.vols.get_mut(&vol).expect("picked"));
                let vid = pool.volume_id(&vol).expect("the model's volume exists");
                // Committed before and after: the object written since the last commit must
                // not lag behind the key (the sync that carries the key need not carry it).
                let doing = format!("commit, {op:?} on {vol}, commit");
                let call = move || {
                    pool.commit()?;
                    op.run(pool, vid)?;
                    pool.commit().map(|_| ())
                };
                (doing, true, Box::new(call))
            }
            42..=53 => {
                let name = format!("s{next_name}");
                let key = (vol.clone(), name.clone());
                let parent = next.vol_parent.insert(vol.clone(), Some(key.clone())).expect("known volume");
                next.snaps.insert(key, (next.vols[&vol].clone(), parent));
                let v = vol.clone();
                (
                    format!("snapshot {vol}@{name}"),
                    true,
                    Box::new(move || pool.create_snapshots(&[&v], &name).map(|_| ())),
                )
            }
            54..=61 => {
                let Some(s) = pick(&mut rng, snaps_of(&m, &vol)) else { continue };
                let mut data = next.snaps[&s].0.clone();
                data.record_size = next.vols[&vol].record_size;
                next.vols.insert(vol.clone(), data);
                next.vol_parent.insert(vol.clone(), Some(s.clone()));
                (format!("restore {vol} to {}", s.1), true, Box::new(move || pool.restore_volume(&s.0, &s.1)))
            }
            62..=69 if m.vols.len() < 4 => {
                let Some(s) = pick(&mut rng, m.snaps.keys().cloned().collect()) else { continue };
                let name = format!("c{next_name}");
                let mut data = next.snaps[&s].0.clone();
                data.record_size = next.vols[&s.0].record_size;
                next.vols.insert(name.clone(), data);
                next.vol_parent.insert(name.clone(), Some(s.clone()));
                (
                    format!("clone {}@{} as {name}", s.0, s.1),
                    true,
                    Box::new(move || pool.clone_volume(&s.0, &s.1, &name).map(|_| ())),
                )
            }
            70..=75 => {
                let free: Vec<SnapKey> = m.snaps.keys().filter(|s| !m.snapshot_pinned(s)).cloned().collect();
                let Some(s) = pick(&mut rng, free) else { continue };
                let (_, parent) = next.snaps.remove(&s).expect("picked");
                for p in next.vol_parent.values_mut().filter(|p| p.as_ref() == Some(&s)) {
                    *p = parent.clone();
                }
                for (_, p) in next.snaps.values_mut().filter(|(_, p)| p.as_ref() == Some(&s)) {
                    *p = parent.clone();
                }
                (format!("delete snapshot {}@{}", s.0, s.1), true, Box::new(move || pool.delete_snapshot(&s.0, &s.1)))
            }
            76..=80 if vol != "a" && !m.volume_pinned(&vol) => {
                next.vols.remove(&vol);
                next.vol_parent.remove(&vol);
                next.snaps.retain(|k, _| k.0 != vol);
                let v = vol.clone();
                let call = move || pool.delete_volume(&v).and_then(|()| pool.commit().map(|_| ()));
                (format!("delete volume {vol} and commit"), true, Box::new(call))
            }
            81..=90 => {
                let Some(id) = pick(&mut rng, m.vols[&vol].objects.keys().copied().collect()) else { continue };
                let vid = pool.volume_id(&vol).expect("the model's volume exists");
                if let Err(e) = read_and_verify(&mut rng, pool, vid, id, &m.vols[&vol].objects[&id], seed) {
                    ctx.expect_failure(&e, &format!("admin step {step}: read of {vol}"));
                    break;
                }
                continue;
            }
            _ => ("commit".to_string(), true, Box::new(|| pool.commit().map(|_| ()))),
        };
        let start = ctx.clock.tick();
        let r = call();
        let end = ctx.clock.tick();
        if crate::tracing() {
            eprintln!("admin step {step} [{start}..{end}]: {doing}: {:?}", r.as_ref().map_err(|e| e.to_string()));
        }
        if let Err(e) = r {
            ctx.expect_failure(&e, &format!("admin step {step}: {doing}"));
            line.uncertain(next.digest());
            break;
        }
        m = next;
        line.done(m.digest(), end);
        if crate::tracing() {
            eprintln!("admin state {}: {}", step, m.describe());
        }
        if commits {
            target = None;
            line.synced();
            ctx.clock.pool_durable(start);
        }
    }
    line
}

fn pick<T>(rng: &mut SimRng, mut items: Vec<T>) -> Option<T> {
    (!items.is_empty()).then(|| items.swap_remove(rng.below(items.len() as u64) as usize))
}
