//! After the crash: every crash image reopens (replaying the intent log), the checker is
//! clean, and every line shows a state the acknowledged-state rule allows
//! (history.rs). An image with a rotted bit must give a typed error, or a reported
//! fall-back, or the right data: never silently wrong data.

use crate::admin::capture_partition;
use crate::history::{digest_object, digest_value, Line};
use crate::rig::Rig;
use std::collections::BTreeMap;
use std::sync::Arc;
use strata_engine::{BlockDevice, CheckOptions, ErrorKind, MirrorDevice, Pool, Result};
use strata_testkit::devset::scrub_damage;
use strata_testkit::model::capture_volume;
use strata_testkit::{test_pool_options, CrashMode, SimDisk, SimRng};

pub const SECTOR: usize = 512;

/// What a recovered pool may show.
pub struct Expect {
    /// The writers' volume, its objects' lines by id, and its keys' lines.
    pub w_name: String,
    pub objects: BTreeMap<u64, Line>,
    pub keys: BTreeMap<Vec<u8>, Line>,
    /// The admin's partition: every other volume, and every snapshot.
    pub admin: Line,
    /// The durable points (`Clock::durable_points`).
    pub points: (u64, u64),
}

/// Which rule `pool` breaks, if any (Ok(Err(why))); Err: the pool failed to answer.
pub fn verify_pool(pool: &Pool, exp: &Expect) -> Result<std::result::Result<(), String>> {
    let mut broken = Vec::new();
    let vid = pool.volume_id(&exp.w_name)?;
    let rs = pool.volume_info(vid)?.record_size;
    let w = capture_volume(pool, vid, rs)?;
    for id in w.objects.keys().filter(|id| !exp.objects.contains_key(id)) {
        broken.push(format!("object {id} of volume {} belongs to no line: it was never created", exp.w_name));
    }
    for (id, line) in &exp.objects {
        if let Err(why) = line.check(&digest_object(w.objects.get(id)), exp.points) {
            if crate::tracing() {
                eprintln!("recovered object {id}: {}", crate::history::sketch(w.objects.get(id)));
            }
            broken.push(why);
        }
    }
    for k in w.kv.keys().filter(|k| !exp.keys.contains_key(*k)) {
        broken.push(format!("key {k:?} of volume {} was never written", exp.w_name));
    }
    for (k, line) in &exp.keys {
        if let Err(why) = line.check(&digest_value(w.kv.get(k).map(|v| v.as_slice())), exp.points) {
            broken.push(why);
        }
    }
    if let Err(why) = exp.admin.check(&capture_partition(pool, &exp.w_name)?, exp.points) {
        broken.push(why);
    }
    Ok(if broken.is_empty() { Ok(()) } else { Err(broken.join("; ")) })
}

fn open(image: Vec<u8>) -> Result<Pool> {
    Pool::open(Arc::new(SimDisk::from_image(image, SECTOR)) as Arc<dyn BlockDevice>, test_pool_options())
}

/// Every crash image of `disk`: only the flushed writes, all of them, and torn and
/// reordered ones (two draws); with `rot`, one more with a bit flipped in the data area.
/// Returns the number of images checked.
pub fn verify_images(disk: &SimDisk, exp: &Expect, seed: u64, rng: &mut SimRng, rot: bool) -> usize {
    let modes = [CrashMode::DropUnflushed, CrashMode::KeepAll, CrashMode::Random, CrashMode::Random];
    for (i, mode) in modes.into_iter().enumerate() {
        let pool = open(disk.crash_image(mode, rng))
            .unwrap_or_else(|e| panic!("seed {seed}: the {mode:?} crash image does not open: {e}"));
        let report = pool.check(CheckOptions::default()).expect("the checker runs");
        assert!(report.is_clean(), "seed {seed}: checker on the {mode:?} image: {:#?}", report.errors);
        match verify_pool(&pool, exp) {
            Ok(Ok(())) => {}
            Ok(Err(why)) => panic!("seed {seed}: the {mode:?} image breaks the acknowledged-state rule: {why}"),
            Err(e) => panic!("seed {seed}: reading the {mode:?} image failed: {e}"),
        }
        if i == 0 {
            life_goes_on(&pool, exp, rng, seed);
        }
    }
    if rot {
        verify_rotted(disk, exp, seed, rng);
    }
    modes.len() + usize::from(rot)
}

/// After recovery the pool takes a write and a commit, and the checker stays clean.
fn life_goes_on(pool: &Pool, exp: &Expect, rng: &mut SimRng, seed: u64) {
    let v = pool.volume_id(&exp.w_name).expect("verified above");
    let obj = pool.create_object(v, b"after").expect("a write after recovery");
    pool.write(v, obj, 0, &rng.bytes(20_000)).expect("a write after recovery");
    pool.commit().expect("a commit after recovery");
    let report = pool.check(CheckOptions::default()).expect("the checker runs");
    assert!(report.is_clean(), "seed {seed}: checker after recovery and a commit: {:#?}", report.errors);
}

/// A bit flipped in a written sector of the data area of the flushed image, once it has
/// been recovered and closed (so no intent log is left to replay: a rotted block a log
/// record references ends the replay there, as a torn one must — see docs/simulator.md).
fn verify_rotted(disk: &SimDisk, exp: &Expect, seed: u64, rng: &mut SimRng) {
    let recovered = Arc::new(SimDisk::from_image(disk.crash_image(CrashMode::DropUnflushed, rng), SECTOR));
    let pool = Pool::open(recovered.clone() as Arc<dyn BlockDevice>, test_pool_options()).expect("verified above");
    pool.close().expect("close the recovered pool");
    let mut image = recovered.crash_image(CrashMode::DropUnflushed, rng);
    let geo = strata_engine::alloc::Geometry::for_device(image.len() as u64).expect("the pool's geometry");
    let sectors = (image.len() as u64 - geo.data_offset) / SECTOR as u64;
    let Some(at) = (0..500)
        .map(|_| geo.data_offset + rng.below(sectors) * SECTOR as u64)
        .find(|&at| image[at as usize..at as usize + SECTOR].iter().any(|b| *b != 0))
    else {
        return; // nothing written to rot
    };
    let byte = at as usize + rng.below(SECTOR as u64) as usize;
    image[byte] ^= 1 << rng.below(8);
    let typed = |e: &strata_engine::Error| e.kind() == ErrorKind::Corruption;
    let pool = match open(image) {
        Ok(p) => p,
        Err(e) => return assert!(typed(&e), "seed {seed}: a rotted bit at {byte} fails the open untyped: {e}"),
    };
    if pool.status().open_notes.iter().any(|n| n.starts_with("fell back")) {
        return; // the loss is reported
    }
    match verify_pool(&pool, exp) {
        Ok(Ok(())) => {}
        Ok(Err(why)) => panic!("seed {seed}: a rotted bit at {byte} gave silently wrong data: {why}"),
        Err(e) => assert!(typed(&e), "seed {seed}: a rotted bit at {byte} gave an untyped error: {e}"),
    }
}

/// A device set's crash images (every member tears its unflushed writes its own way, one
/// mode for all), reopened — in a third of them with a member left out where the layout
/// tolerates it on top of the run's faulted members: every image set must open, pass the
/// checker, follow the acknowledged-state rule, and a scrub must repair whatever the faults
/// left so that a second one finds nothing. Returns the number of image sets checked.
pub fn verify_set_images(rig: &Rig, exp: &Expect, seed: u64, rng: &mut SimRng) -> usize {
    let modes = [CrashMode::DropUnflushed, CrashMode::KeepAll, CrashMode::Random, CrashMode::Random];
    for (i, mode) in modes.into_iter().enumerate() {
        let mut images: Vec<Option<Arc<SimDisk>>> = rig
            .members
            .iter()
            .map(|m| Some(Arc::new(SimDisk::from_image(m.disk.crash_image(mode, rng), SECTOR))))
            .collect();
        let out = left_out(rig, rng);
        if let Some(o) = out {
            images[o] = None;
        }
        let what = format!(
            "the {mode:?} images of {}{}",
            rig.describe(),
            out.map(|o| format!(" without member {o}")).unwrap_or_default()
        );
        let found = images
            .iter()
            .enumerate()
            .map(|(k, d)| d.clone().map(|d| d as Arc<dyn BlockDevice>).ok_or_else(|| format!("member {k}: missing")))
            .collect();
        let (set, _notes) = MirrorDevice::open(found, true)
            .unwrap_or_else(|e| panic!("seed {seed}: the device set of {what} does not open: {e}"));
        let pool = Pool::open(Arc::new(set) as Arc<dyn BlockDevice>, test_pool_options())
            .unwrap_or_else(|e| panic!("seed {seed}: the pool on {what} does not open: {e}"));
        let members = || {
            let set = pool.status().devices.expect("a device set");
            let states: Vec<String> = set
                .members
                .iter()
                .map(|m| format!("{}: {:?} {}", m.index, m.state, m.note.as_deref().unwrap_or("")))
                .collect();
            let st = pool.status();
            format!("{}; opened at txg {}, {:?}", states.join("; "), st.txg, st.open_notes)
        };
        let report = pool.check(CheckOptions::default()).expect("the checker runs");
        assert!(report.is_clean(), "seed {seed}: checker on {what} (members {}): {:#?}", members(), report.errors);
        match verify_pool(&pool, exp) {
            Ok(Ok(())) => {}
            Ok(Err(why)) => {
                panic!("seed {seed}: {what} (members {}) break the acknowledged-state rule: {why}", members())
            }
            Err(e) => panic!("seed {seed}: reading {what} failed: {e}"),
        }
        if i == 0 {
            life_goes_on(&pool, exp, rng, seed);
        }
        let scrub = pool.check(CheckOptions { all_copies: true, ..Default::default() }).expect("the scrub runs");
        assert!(scrub.is_clean(), "seed {seed}: scrub of {what}: {:#?}", scrub.errors);
        let again = scrub_damage(&pool);
        assert_eq!(again, 0, "seed {seed}: a second scrub of {what} found damage the first left");
    }
    modes.len()
}

/// A member to leave out of a reopened set, if any: one of the faulted members, or any
/// member when none was and the layout tolerates one missing (a third of the time).
fn left_out(rig: &Rig, rng: &mut SimRng) -> Option<usize> {
    if !rng.chance(33) {
        return None;
    }
    // A member the device admin had out of sync when the power went: it, or nothing (the
    // faults leave room for it alone).
    let out = rig.out_of_sync.load(strata_engine::sync::atomic::Ordering::SeqCst);
    if out != usize::MAX {
        return Some(out);
    }
    if !rig.victims.is_empty() {
        return Some(*rng.pick(&rig.victims));
    }
    (rig.tolerance() > 0).then(|| rng.below(rig.members.len() as u64) as usize)
}
