//! Snapshots, clones and restores against a model: random interleavings of object writes,
//! snapshots (single and group), snapshot deletes, restores (to the latest or an older
//! snapshot), clones (of clones too) and volume deletes. After every step the pool must
//! show exactly the model — live volumes and every snapshot, read through read-only views —
//! and at checkpoints the checker must find the pool consistent with the space adding up
//! (tree sizes, deadlists, volume totals, space map). Crash images taken in the middle of
//! these operations must open at the state before or after the operation, and check clean;
//! once the operation has returned Ok (it commits), only the state after it. The power
//! failure is the only error the crashing step may meet.
//!
//! Replay a failure with STRATA_SEED=<seed>; scale with STRATA_ITERS=<n>.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use strata_engine::{BlockDevice, CheckOptions, ErrorKind, ObjectId, Pool, VolumeId, VolumeOptions};
use strata_testkit::model::{capture, capture_volume, ObjectModel, PoolModel, VolumeModel};
use strata_testkit::workload::object_op;
use strata_testkit::{
    assert_power_failure, replaying_seed, run_seeds, test_create_options, test_pool_options, CrashMode, SimDisk, SimRng,
};

/// The seeds of every randomized test here start at this one (or STRATA_SEED).
const SEED_BASE: u64 = 0x5A95_0000;

type SnapKey = (String, String);

#[derive(Clone, Default, PartialEq)]
struct Model {
    vols: BTreeMap<String, VolumeModel>,
    /// The snapshot each live volume descends from.
    vol_parent: BTreeMap<String, Option<SnapKey>>,
    snaps: BTreeMap<SnapKey, (VolumeModel, Option<SnapKey>)>,
}

impl Model {
    fn children(&self, s: &SnapKey) -> Vec<(String, bool)> {
        let mut out: Vec<(String, bool)> =
            self.vol_parent.iter().filter(|(_, p)| p.as_ref() == Some(s)).map(|(v, _)| (v.clone(), true)).collect();
        out.extend(self.snaps.iter().filter(|(_, (_, p))| p.as_ref() == Some(s)).map(|(k, _)| (k.0.clone(), false)));
        out
    }

    /// Whether deleting snapshot `s` must be refused (clones, or two lines of history).
    fn snapshot_pinned(&self, s: &SnapKey) -> bool {
        let c = self.children(s);
        c.len() > 1 || c.iter().any(|(v, _)| *v != s.0)
    }

    fn volume_pinned(&self, v: &str) -> bool {
        self.snaps.keys().filter(|k| k.0 == v).any(|k| self.children(k).iter().any(|(cv, _)| cv != v))
    }

    /// The snapshot of another volume that `v` was cloned from (directly or through its
    /// own snapshots), if any.
    fn origin(&self, v: &str) -> Option<SnapKey> {
        let mut at = self.vol_parent.get(v)?.clone();
        while let Some(s) = at {
            if s.0 != v {
                return Some(s);
            }
            at = self.snaps.get(&s)?.1.clone();
        }
        None
    }

    fn pool_model(&self) -> PoolModel {
        PoolModel { volumes: self.vols.clone() }
    }
}

struct World {
    disk: Arc<SimDisk>,
    pool: Pool,
    m: Model,
    /// Set just before the call that acknowledges the step in progress (the call that commits
    /// it), cleared when that call returns Ok: while set, a crash may land before or after.
    pending: Option<Pending>,
    /// What the step in progress is doing, for failure messages.
    doing: String,
    next: u32,
}

/// The states a crash inside a step's acknowledging call may leave, besides the state before
/// the step.
struct Pending {
    /// The state once the operation is done.
    after: Model,
    /// A state between the two that a commit inside the operation makes durable.
    between: Option<Model>,
}

/// Stops a walk at its `left`-th block.
struct StopAfter {
    left: AtomicU64,
    total: AtomicU64,
}

impl strata_engine::WalkControl for StopAfter {
    fn begin(&self, total_bytes: u64) {
        self.total.store(total_bytes, Ordering::Relaxed);
    }
    fn block_done(&self, _bytes: u64) -> bool {
        self.left.fetch_sub(1, Ordering::Relaxed) > 1
    }
}

fn pick<T: Clone>(rng: &mut SimRng, items: impl Iterator<Item = T>) -> Option<T> {
    let v: Vec<T> = items.collect();
    (!v.is_empty()).then(|| v[rng.below(v.len() as u64) as usize].clone())
}

/// The pool must refuse the request with `kind`: it is a test failure if it succeeds; any
/// other error is returned (to be judged by the caller: a power failure, or a failure).
fn refused<T: std::fmt::Debug>(r: strata_engine::Result<T>, kind: ErrorKind, what: &str) -> strata_engine::Result<()> {
    match r {
        Ok(v) => panic!("{what} succeeded ({v:?}), but must be refused ({kind:?})"),
        Err(e) if e.kind() == kind => Ok(()),
        Err(e) => Err(e),
    }
}

impl World {
    fn new(seed: u64) -> World {
        let disk = Arc::new(SimDisk::new(64 << 20, 4096));
        let pool = Pool::create(disk.clone(), test_create_options(seed), test_pool_options()).unwrap();
        let mut w = World { disk, pool, m: Model::default(), pending: None, doing: String::new(), next: 0 };
        for name in ["a", "b"] {
            let rs = if name == "a" { 4096 } else { 16384 };
            // One volume compressed: shared, restored and split blocks may be compressed too.
            let compression =
                if name == "b" { strata_engine::CompressionPolicy::Lz4 } else { strata_engine::CompressionPolicy::Off };
            w.pool.create_volume(name, &VolumeOptions { record_size: rs, compression, ..Default::default() }).unwrap();
            w.m.vols.insert(name.into(), VolumeModel { record_size: rs, ..Default::default() });
            w.m.vol_parent.insert(name.into(), None);
        }
        w.pool.commit().unwrap();
        w
    }

    /// A world on a reopened pool, showing `m`.
    fn reopened(disk: Arc<SimDisk>, pool: Pool, m: Model, next: u32) -> World {
        World { disk, pool, m, pending: None, doing: String::new(), next }
    }

    fn vid(&self, name: &str) -> VolumeId {
        self.pool.volume_id(name).unwrap()
    }

    fn doing(&mut self, what: String) {
        self.doing = what;
    }

    /// The call that acknowledges the step (commits it) comes next.
    fn begin(&mut self, after: &Model, between: Option<Model>) {
        self.pending = Some(Pending { after: after.clone(), between });
    }

    /// That call returned Ok: the step is acknowledged, and the model is `after`.
    fn acked(&mut self, after: Model) {
        self.m = after;
        self.pending = None;
    }

    /// [`World::step`], where every error fails the test.
    fn step_ok(&mut self, rng: &mut SimRng, commit_objects: bool) -> String {
        self.step(rng, commit_objects).unwrap_or_else(|e| panic!("{}: {e}", self.doing))
    }

    /// One random step; returns a description for failure messages. An engine error is
    /// returned (the caller decides whether it may happen: only a power failure, in a crash
    /// test); a wrong answer of the pool panics. With `commit_objects`, every step ends
    /// committed: Ok means the step is durable.
    fn step(&mut self, rng: &mut SimRng, commit_objects: bool) -> strata_engine::Result<String> {
        let vol = pick(rng, self.m.vols.keys().cloned()).expect("a volume always exists");
        self.doing(format!("a step on {vol}"));
        match rng.below(100) {
            0..=54 => {
                self.doing(format!("object op on {vol}"));
                let id = self.vid(&vol);
                let mut vm = self.m.vols.remove(&vol).unwrap();
                let r = object_op(rng, &self.pool, id, &mut vm);
                self.m.vols.insert(vol.clone(), vm);
                r?;
                if commit_objects {
                    // The model holds the change already (the pool shows it); the commit
                    // acknowledges it.
                    let after = self.m.clone();
                    self.begin(&after, None);
                    self.pool.commit()?;
                    self.acked(after);
                }
                Ok(format!("object op on {vol}"))
            }
            55..=59 => {
                self.doing("commit".into());
                self.pool.commit()?;
                Ok("commit".into())
            }
            60..=71 => {
                self.next += 1;
                let name = format!("s{}", self.next);
                let mut vols = vec![vol.clone()];
                if rng.chance(25) {
                    if let Some(other) = pick(rng, self.m.vols.keys().filter(|v| **v != vol).cloned()) {
                        vols.push(other);
                    }
                }
                let refs: Vec<&str> = vols.iter().map(|s| s.as_str()).collect();
                self.doing(format!("snapshot {refs:?}@{name}"));
                let mut next = self.m.clone();
                for v in &vols {
                    let key = (v.clone(), name.clone());
                    let parent = next.vol_parent.insert(v.clone(), Some(key.clone())).unwrap();
                    next.snaps.insert(key, (next.vols[v].clone(), parent));
                }
                self.begin(&next, None);
                let infos = self.pool.create_snapshots(&refs, &name)?;
                self.acked(next);
                assert_eq!(infos.len(), vols.len());
                assert!(infos.iter().all(|i| i.txg == infos[0].txg), "a group snapshot is one txg");
                Ok(format!("snapshot {refs:?}@{name}"))
            }
            72..=79 => {
                let Some(s) = pick(rng, self.m.snaps.keys().cloned()) else { return Ok("nothing".into()) };
                self.doing(format!("delete {s:?}"));
                self.pool.commit()?; // so that the totals compared below move only by the delete
                let before = self.pool.snapshot(&s.0, &s.1)?;
                let total_before = self.pool.volume_info(self.vid(&s.0))?.total_bytes;
                let pinned = self.m.snapshot_pinned(&s);
                let mut next = self.m.clone();
                let (_, parent) = next.snaps.remove(&s).unwrap();
                for p in next.vol_parent.values_mut().filter(|p| p.as_ref() == Some(&s)) {
                    *p = parent.clone();
                }
                for (_, p) in next.snaps.values_mut().filter(|(_, p)| p.as_ref() == Some(&s)) {
                    *p = parent.clone();
                }
                if pinned {
                    refused(
                        self.pool.delete_snapshot(&s.0, &s.1),
                        ErrorKind::Busy,
                        &format!("delete of pinned {s:?}"),
                    )?;
                    return Ok(format!("refused delete {s:?}"));
                }
                self.begin(&next, None);
                self.pool.delete_snapshot(&s.0, &s.1)?;
                self.acked(next);
                let total_after = self.pool.volume_info(self.vid(&s.0))?.total_bytes;
                assert_eq!(total_before - total_after, before.unique_bytes, "deleting {s:?} frees its unique bytes");
                Ok(format!("delete {s:?}"))
            }
            80..=86 => {
                let Some(s) = pick(rng, self.m.snaps.keys().filter(|k| k.0 == vol).cloned()) else {
                    return Ok("nothing".into());
                };
                self.doing(format!("restore {vol} to {s:?}"));
                let mut next = self.m.clone();
                let mut data = next.snaps[&s].0.clone();
                data.record_size = next.vols[&vol].record_size;
                next.vols.insert(vol.clone(), data);
                next.vol_parent.insert(vol.clone(), Some(s.clone()));
                self.begin(&next, None);
                self.pool.restore_volume(&vol, &s.1)?;
                self.acked(next);
                Ok(format!("restore {vol} to {s:?}"))
            }
            87..=91 => {
                let Some(s) = pick(rng, self.m.snaps.keys().cloned()) else { return Ok("nothing".into()) };
                if self.m.vols.len() >= 6 {
                    return Ok("nothing".into());
                }
                self.next += 1;
                let name = format!("c{}", self.next);
                self.doing(format!("clone {s:?} as {name}"));
                let mut next = self.m.clone();
                let mut data = next.snaps[&s].0.clone();
                data.record_size = next.vols[&s.0].record_size;
                next.vols.insert(name.clone(), data);
                next.vol_parent.insert(name.clone(), Some(s.clone()));
                self.begin(&next, None);
                self.pool.clone_volume(&s.0, &s.1, &name)?;
                self.acked(next);
                Ok(format!("clone {s:?} as {name}"))
            }
            92 | 94 => {
                if self.m.vols.len() <= 1 {
                    return Ok("nothing".into());
                }
                self.doing(format!("delete volume {vol}"));
                let pinned = self.m.volume_pinned(&vol);
                if pinned {
                    refused(
                        self.pool.delete_volume(&vol),
                        ErrorKind::Busy,
                        &format!("delete of volume {vol} with clones"),
                    )?;
                    return Ok(format!("refused delete of volume {vol}"));
                }
                let mut next = self.m.clone();
                next.vols.remove(&vol);
                next.vol_parent.remove(&vol);
                next.snaps.retain(|k, _| k.0 != vol);
                // The delete is acknowledged by the commit after it.
                self.begin(&next, None);
                self.pool.delete_volume(&vol)?;
                self.pool.commit()?;
                self.acked(next);
                Ok(format!("delete volume {vol}"))
            }
            93 => {
                self.doing(format!("split {vol}"));
                let clone = self.m.origin(&vol).is_some();
                let has_snaps = self.m.snaps.keys().any(|k| k.0 == vol);
                match (clone, has_snaps) {
                    (false, _) => {
                        refused(self.pool.split_clone(&vol), ErrorKind::InvalidArgument, &format!("split of {vol}"))?
                    }
                    (true, true) => refused(
                        self.pool.split_clone(&vol),
                        ErrorKind::Busy,
                        &format!("split of {vol} with snapshots"),
                    )?,
                    (true, false) => {
                        let mut next = self.m.clone();
                        next.vol_parent.insert(vol.clone(), None);
                        self.begin(&next, None);
                        let st = if rng.chance(33) {
                            // A split cancelled part way (a job's cancel): still a clone, the
                            // same contents; a new split goes on from what it copied. (With
                            // fewer shared blocks than the stop, the first split is the whole.)
                            let stop = StopAfter { left: AtomicU64::new(1 + rng.below(4)), total: AtomicU64::new(0) };
                            let st = self.pool.split_clone_observed(&vol, Some(&stop))?;
                            if st.stopped {
                                let info = self.pool.volume_info(self.vid(&vol))?;
                                assert!(info.origin.is_some(), "a stopped split left {vol} a clone: {info:?}");
                                assert!(stop.total.load(Ordering::Relaxed) > 0, "told what is shared");
                                if let Some(d) = self.compare()? {
                                    panic!("after a stopped split of {vol}: {d}");
                                }
                                self.pool.split_clone(&vol)?
                            } else {
                                st
                            }
                        } else {
                            self.pool.split_clone(&vol)?
                        };
                        self.acked(next);
                        let info = self.pool.volume_info(self.vid(&vol))?;
                        assert!(info.origin.is_none() && info.parent_snapshot.is_none(), "{info:?}");
                        if let Some(d) = self.compare()? {
                            panic!("after the split of {vol}: {d}");
                        }
                        return Ok(format!("split {vol} ({st:?})"));
                    }
                }
                Ok(format!("refused split of {vol}"))
            }
            95..=97 => {
                // Single-file restore: one object back to what a snapshot of its volume holds.
                let Some(s) = pick(rng, self.m.snaps.keys().filter(|k| k.0 == vol).cloned()) else {
                    return Ok("nothing".into());
                };
                let Some(src) = pick(rng, self.m.snaps[&s].0.objects.keys().copied()) else {
                    return Ok("nothing".into());
                };
                self.doing(format!("restore object {src} of {s:?}"));
                let vid = self.vid(&vol);
                let live = self.m.vols[&vol].objects.contains_key(&src) && rng.chance(80);
                let dst = if live { src } else { self.pool.create_object(vid, b"new")?.0 };
                let mut next = self.m.clone();
                // A new object is created empty in memory; the restore's first commit makes it
                // durable before its data is.
                let mut between = None;
                if !live {
                    let empty = ObjectModel { data: Vec::new(), attr: b"new".to_vec() };
                    next.vols.get_mut(&vol).unwrap().objects.insert(dst, empty.clone());
                    let mut created = self.m.clone();
                    created.vols.get_mut(&vol).unwrap().objects.insert(dst, empty);
                    between = Some(created);
                }
                next.vols.get_mut(&vol).unwrap().objects.get_mut(&dst).unwrap().data =
                    next.snaps[&s].0.objects[&src].data.clone();
                let view = self.pool.open_snapshot_view(&s.0, &s.1)?;
                self.begin(&next, between);
                let st = self.pool.restore_object(vid, ObjectId(dst), view, ObjectId(src));
                self.pool.close_snapshot_view(view);
                let st = st?;
                self.acked(next);
                Ok(format!("restore object {src} of {s:?} into {dst} ({st:?})"))
            }
            _ => {
                let Some(s) = pick(rng, self.m.snaps.keys().cloned()) else { return Ok("nothing".into()) };
                self.doing(format!("verify {s:?}"));
                if let Some(d) = self.compare_snapshot(&s)? {
                    panic!("{d}");
                }
                Ok(format!("verify {s:?}"))
            }
        }
    }

    /// How snapshot `s` differs from the model, if it does (and a view of it refuses writes).
    fn compare_snapshot(&self, s: &SnapKey) -> strata_engine::Result<Option<String>> {
        let view = self.pool.open_snapshot_view(&s.0, &s.1)?;
        let mut want = self.m.snaps[s].0.clone();
        let got = capture_volume(&self.pool, view, want.record_size);
        let write = self.pool.write(view, ObjectId(1), 0, b"x");
        self.pool.close_snapshot_view(view);
        let got = got?;
        refused(write, ErrorKind::ReadOnly, &format!("a write to a view of snapshot {s:?}"))?;
        want.record_size = got.record_size;
        let a = PoolModel { volumes: [(format!("{}@{}", s.0, s.1), want)].into() };
        let b = PoolModel { volumes: [(format!("{}@{}", s.0, s.1), got)].into() };
        Ok(a.diff(&b).map(|d| format!("snapshot {s:?} differs from the model: {d}")))
    }

    /// How the pool differs from the model, if it does: live volumes, every snapshot and the
    /// snapshot count.
    fn compare(&self) -> strata_engine::Result<Option<String>> {
        let got = capture(&self.pool)?;
        if let Some(d) = self.m.pool_model().diff(&got) {
            return Ok(Some(format!("live volumes differ from the model: {d}")));
        }
        let mut have: Vec<SnapKey> = self.pool.snapshots(None)?.into_iter().map(|i| (i.volume, i.name)).collect();
        have.sort();
        let want: Vec<SnapKey> = self.m.snaps.keys().cloned().collect();
        if have != want {
            return Ok(Some(format!("snapshots {have:?}, the model has {want:?}")));
        }
        for s in self.m.snaps.keys() {
            if let Some(d) = self.compare_snapshot(s)? {
                return Ok(Some(d));
            }
        }
        Ok(None)
    }

    fn verify_all(&self) {
        if let Some(d) = self.compare().unwrap() {
            panic!("{d}");
        }
    }

    fn check(&self) {
        self.pool.commit().unwrap();
        let r = self.pool.check(CheckOptions::default()).unwrap();
        assert!(r.is_clean(), "checker: {:#?}", r.errors);
        assert_eq!(r.snapshots as usize, self.m.snaps.len());
    }
}

#[test]
fn snapshots_match_model() {
    run_seeds("snapshots_match_model", SEED_BASE, 40, |seed| {
        let mut rng = SimRng::new(seed);
        let mut w = World::new(seed);
        let steps = rng.range(80, 250);
        let mut log = Vec::new();
        for i in 0..steps {
            log.push(w.step_ok(&mut rng, false));
            if std::env::var("STRATA_TRACE").is_ok() {
                eprintln!("{}", log.last().unwrap());
            }
            if i % 25 == 24 {
                w.check();
                w.verify_all();
            }
        }
        w.check();
        w.verify_all();
        // Everything survives a reopen.
        let model = w.m.clone();
        drop(w.pool);
        let pool = Pool::open(w.disk.clone() as Arc<dyn BlockDevice>, test_pool_options()).unwrap();
        let w = World::reopened(w.disk, pool, model, w.next);
        w.verify_all();
        w.check();
    });
}

#[test]
fn deleting_every_snapshot_and_clone_returns_all_space() {
    run_seeds("deleting_every_snapshot_and_clone_returns_all_space", SEED_BASE, 20, |seed| {
        let mut rng = SimRng::new(seed);
        let mut w = World::new(seed);
        for _ in 0..rng.range(60, 150) {
            w.step_ok(&mut rng, false);
        }
        // Delete clones first (newest first), then every snapshot, then every volume.
        while let Some(v) = w.m.vols.keys().rev().find(|v| !w.m.volume_pinned(v)).cloned() {
            w.pool.delete_volume(&v).unwrap();
            w.m.vols.remove(&v);
            w.m.vol_parent.remove(&v);
            w.m.snaps.retain(|k, _| k.0 != v);
            if w.m.vols.is_empty() {
                break;
            }
        }
        assert!(w.m.vols.is_empty(), "every volume can be deleted, clones first");
        for _ in 0..3 {
            w.pool.commit().unwrap();
        }
        w.check();
        let st = w.pool.status();
        // Only the (empty) catalog remains.
        assert!(st.allocated_bytes <= 4096, "{} bytes still allocated", st.allocated_bytes);
    });
}

/// How the crashing steps fell: [acknowledged (returned Ok) with the state changed, power
/// failed inside the operation and the state before it was found, inside and the state
/// after it found].
static CRASH_OUTCOMES: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

#[test]
fn crash_during_snapshot_operations_lands_before_or_after() {
    run_seeds("crash_during_snapshot_operations_lands_before_or_after", SEED_BASE, 60, |seed| {
        let mut rng = SimRng::new(seed);
        let mut w = World::new(seed);
        for _ in 0..rng.range(10, 60) {
            w.step_ok(&mut rng, true);
        }
        w.pool.commit().unwrap();
        // One more step, with the power failing somewhere inside it (or after it).
        let before = w.m.clone();
        // A step's commit takes 6 to 8 device operations (writes, flushes, the root): the
        // power fails inside it, or just after it.
        w.disk.set_crash_after(rng.below(10));
        let mut rng2 = SimRng::new(seed ^ 0xABCD);
        let r = w.step(&mut rng2, true);
        let inside = match &r {
            Ok(_) => false,
            Err(e) => {
                assert_power_failure(e, &w.disk, seed, &w.doing);
                true
            }
        };
        // Whether the step changes what the pool shows (the outcome then tells which state
        // the crash left).
        let visible = match &w.pending {
            Some(p) => p.after != before,
            None => w.m != before,
        };
        // What the pool may show after the crash, given what was acknowledged.
        let allowed: Vec<(&str, Model)> = match w.pending.take() {
            // Acknowledged (or never got to the call that commits it): the model now.
            None => vec![("the acknowledged state", w.m.clone())],
            Some(p) => {
                assert!(inside, "seed {seed}: {} returned Ok without being acknowledged", w.doing);
                let mut v = vec![("the state before", before.clone()), ("the state after", p.after)];
                v.extend(p.between.map(|b| ("the state between", b)));
                v
            }
        };
        let doing = w.doing.clone();
        let mode = *rng.pick(&[CrashMode::DropUnflushed, CrashMode::Random, CrashMode::KeepAll]);
        let image = w.disk.crash_image(mode, &mut rng);
        std::mem::forget(w.pool); // the machine died: no clean close
        let disk = Arc::new(SimDisk::from_image(image, 512));
        let pool = Pool::open(disk.clone() as Arc<dyn BlockDevice>, test_pool_options())
            .unwrap_or_else(|e| panic!("seed {seed}: after a crash in {doing}, the pool does not open: {e}"));
        let r = pool.check(CheckOptions::default()).unwrap();
        assert!(r.is_clean(), "seed {seed}: checker after a crash in {doing}: {:#?}", r.errors);
        let mut w = World::reopened(disk, pool, Model::default(), 1000);
        let mut differences = Vec::new();
        let mut found = None;
        for (what, m) in allowed {
            w.m = m;
            match w.compare().unwrap() {
                None => {
                    found = Some(what);
                    break;
                }
                Some(d) => differences.push(format!("not {what}: {d}")),
            }
        }
        let Some(found) = found else {
            panic!(
                "seed {seed}: after a crash {} {doing} ({mode:?}), the pool shows no state the model allows: {differences:?}",
                if inside { "inside" } else { "after" }
            );
        };
        // Count the crashes of steps that change what the pool shows.
        let outcome = match found {
            "the acknowledged state" => Some(0),
            "the state before" => Some(1),
            "the state after" => Some(2),
            _ => None,
        };
        if let Some(o) = outcome.filter(|_| visible) {
            CRASH_OUTCOMES[o].fetch_add(1, Ordering::Relaxed);
        }
        // And it goes on working.
        for _ in 0..20 {
            w.step_ok(&mut rng, false);
        }
        w.check();
        w.verify_all();
    });
    // The crashes must have hit inside operations, landing on both sides, and after
    // acknowledged ones; otherwise the test proves less than it claims.
    let o: Vec<u64> = CRASH_OUTCOMES.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    if !replaying_seed() {
        assert!(o.iter().all(|&n| n > 0), "crash outcomes {o:?}: [acknowledged, inside before, inside after]");
    }
    eprintln!("crash outcomes [acknowledged, inside landing before, inside landing after]: {o:?}");
}

#[test]
fn more_than_a_thousand_snapshots_of_one_volume() {
    // ONTAP 9 allows 1,023 per volume; Strata must hold more, each readable, and delete
    // them all back to the space it started with.
    let w = World::new(0x1023);
    let vid = w.vid("a");
    let obj = w.pool.create_object(vid, b"").unwrap();
    let n = 1100;
    for i in 0..n {
        w.pool.write(vid, obj, (i % 64) * 4096, &(i as u32).to_le_bytes()).unwrap();
        w.pool.create_snapshots(&["a"], &format!("s{i}")).unwrap();
    }
    let list = w.pool.snapshots(Some("a")).unwrap();
    assert_eq!(list.len(), n as usize);
    assert!(list.windows(2).all(|p| p[0].txg < p[1].txg), "listed oldest first");
    for i in [0, 511, 1023, n - 1] {
        let view = w.pool.open_snapshot_view("a", &format!("s{i}")).unwrap();
        let got = w.pool.read(view, obj, (i % 64) * 4096, 4).unwrap();
        assert_eq!(got, (i as u32).to_le_bytes(), "snapshot s{i}");
        w.pool.close_snapshot_view(view);
    }
    let r = w.pool.check(CheckOptions::default()).unwrap();
    assert!(r.is_clean(), "{:#?}", r.errors);
    assert_eq!(r.snapshots, n);
    for i in (0..n).rev().step_by(2).chain((0..n).rev().skip(1).step_by(2)) {
        w.pool.delete_snapshot("a", &format!("s{i}")).unwrap();
    }
    w.pool.commit().unwrap();
    let r = w.pool.check(CheckOptions::default()).unwrap();
    assert!(r.is_clean(), "{:#?}", r.errors);
    let info = w.pool.volume_info(vid).unwrap();
    assert_eq!(info.total_bytes, info.used_bytes, "with no snapshots, the volume holds only its live data");
}

/// A split stopped part way (a job's cancel) leaves a clone with the same contents that the
/// checker passes; splitting again finishes it, copying only what the first did not.
#[test]
fn a_stopped_split_leaves_a_clone_that_a_new_split_finishes() {
    let disk = Arc::new(SimDisk::new(64 << 20, 4096));
    let pool = Pool::create(disk, test_create_options(7), test_pool_options()).unwrap();
    let v = pool.create_volume("v", &VolumeOptions::default()).unwrap();
    let obj = pool.create_object(v, b"").unwrap();
    let data: Vec<u8> = (0..2u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 7) as u8).collect();
    pool.write(v, obj, 0, &data).unwrap();
    pool.commit().unwrap();
    pool.create_snapshots(&["v"], "s").unwrap();
    let c = pool.clone_volume("v", "s", "c").unwrap();
    pool.write(c, obj, 0, b"changed in the clone").unwrap();
    pool.commit().unwrap();
    let mut want = data.clone();
    want[..20].copy_from_slice(b"changed in the clone");

    let stop = StopAfter { left: AtomicU64::new(3), total: AtomicU64::new(0) };
    let first = pool.split_clone_observed("c", Some(&stop)).unwrap();
    assert!(first.stopped, "{first:?}");
    assert!(
        stop.total.load(Ordering::Relaxed) >= 3 << 19,
        "told what is shared: {}",
        stop.total.load(Ordering::Relaxed)
    );
    assert!(pool.volume_info(c).unwrap().origin.is_some(), "still a clone");
    assert_eq!(pool.read(c, obj, 0, want.len()).unwrap(), want);
    let r = pool.check(CheckOptions::default()).unwrap();
    assert!(r.is_clean(), "{:?}", r.errors);
    // Refused while the clone still shares: the snapshot is still its origin.
    assert_eq!(pool.delete_snapshot("v", "s").unwrap_err().kind(), ErrorKind::Busy);

    let second = pool.split_clone("c").unwrap();
    assert!(!second.stopped);
    assert!(pool.volume_info(c).unwrap().origin.is_none(), "split");
    assert!(
        first.copied_bytes + second.copied_bytes <= (2 << 20) + 2 * 128 * 1024,
        "the second split went on from the first: {first:?} then {second:?}"
    );
    assert_eq!(pool.read(c, obj, 0, want.len()).unwrap(), want);
    pool.delete_snapshot("v", "s").unwrap();
    let r = pool.check(CheckOptions::default()).unwrap();
    assert!(r.is_clean(), "{:?}", r.errors);
}
