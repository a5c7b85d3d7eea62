//! The mixed run: writers, a committer and the admin on one pool, power lost at a random
//! device operation (or an injected fault instead), then every crash image checked.

use crate::admin::{admin, AdminModel};
use crate::check::{verify_images, verify_set_images, Expect};
use crate::disk::Fault;
use crate::history::{digest_object, Clock, Line};
use crate::resync::device_admin;
use crate::rig::Rig;
use crate::threads::{committer, writer, Ctx};
use crate::Outcome;
use std::collections::BTreeMap;
use std::sync::Arc;
use strata_engine::failpoint;
use strata_engine::sync::atomic::{AtomicBool, Ordering};
use strata_engine::sync::thread;
use strata_engine::{ObjectId, Pool, VolumeOptions};
use strata_testkit::model::{ObjectModel, VolumeModel};
use strata_testkit::workload::random_policy;
use strata_testkit::{test_create_options, test_pool_options, SimRng};

/// Device operations (writes and flushes) within which the power fails: about what a run's
/// threads issue, so that about half the runs lose it in the middle (a run issues 100–600).
const CRASH_WITHIN_OPS: u64 = 350;

/// Salt of the rng that draws a device set's layout and faults (the single-device runs'
/// draws stay as they were).
const SET_SALT: u64 = 0xDE5E_7000;

/// What goes wrong in a run besides the power failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trouble {
    PowerOnly,
    Device(Fault),
    Failpoint(&'static str, u32),
    /// Faults on members of a device set (none beyond what its layout tolerates).
    Members,
}

/// Whether seed `seed`'s mixed run is on a device set (a mirror or parity2) rather than
/// one disk: 2 seeds in 8 (the mixed run has 7 in 8).
pub fn on_a_set(seed: u64) -> bool {
    matches!(seed % 8, 3 | 5)
}

pub fn run(seed: u64) -> Outcome {
    let mut rng = SimRng::new(seed);
    let trouble = match rng.below(10) {
        0 => Trouble::Device(if rng.chance(50) {
            Fault::Write(rng.range(10, 500))
        } else {
            Fault::Flush(rng.range(3, 100))
        }),
        1 => Trouble::Failpoint(failpoint::ALL[rng.below(3) as usize], rng.below(6) as u32),
        _ => Trouble::PowerOnly,
    };
    let rot = rng.chance(25);
    let fault = if let Trouble::Device(f) = trouble { f } else { Fault::None };
    let (rig, trouble, rot) = if on_a_set(seed) {
        let rig = Rig::random_set(&mut SimRng::new(seed ^ SET_SALT), seed);
        (rig, if let Trouble::Failpoint(..) = trouble { trouble } else { Trouble::Members }, false)
    } else {
        (Rig::single(fault), trouble, rot)
    };
    let dev = rig.device.clone();
    let mut opts = test_pool_options();
    if rng.chance(30) {
        // Writers commit themselves when dirty data passes a small limit.
        opts.dirty_limit_bytes = 256 << 10;
    }
    let pool = Pool::create(dev.clone(), test_create_options(seed), opts).expect("create the pool");
    let record_size = *rng.pick(&[4096u32, 16384]);
    let wopts = VolumeOptions { record_size, compression: random_policy(&mut rng), ..Default::default() };
    let w = pool.create_volume("w", &wopts).expect("create the writers' volume");
    let writers = rng.range(2, 4);
    let mut owned = Vec::new();
    for t in 0..writers {
        let objs: Vec<(ObjectId, ObjectModel)> = (0..2)
            .map(|k| {
                let attr = format!("w{t}.{k}").into_bytes();
                let id = pool.create_object(w, &attr).expect("create an object");
                (id, ObjectModel { data: Vec::new(), attr })
            })
            .collect();
        owned.push(objs);
    }
    let mut am = AdminModel::default();
    let aopts = VolumeOptions { record_size: 4096, compression: random_policy(&mut rng), ..Default::default() };
    let a = pool.create_volume("a", &aopts).expect("create the admin's volume");
    let mut av = VolumeModel { record_size: 4096, ..Default::default() };
    for k in 0..2u8 {
        let id = pool.create_object(a, &[k]).expect("create an object");
        let len = rng.range(1, 20_000) as usize;
        let data = rng.bytes(len);
        pool.write(a, id, 0, &data).expect("write");
        av.objects.insert(id.0, ObjectModel { data, attr: vec![k] });
    }
    am.vols.insert("a".into(), av);
    am.vol_parent.insert("a".into(), None);
    pool.commit().expect("commit the setup");
    rig.arm();
    match trouble {
        Trouble::Failpoint(name, skip) => pool.failpoints().fail(name, skip, 1),
        // Every member's operations count: about as many per member as one disk's.
        _ => rig.set_crash_after(rng.below(CRASH_WITHIN_OPS * rig.members.len() as u64)),
    }
    let ctx = Arc::new(Ctx { seed, pool, rig, clock: Clock::default(), w, record_size, stop: AtomicBool::new(false) });

    let writer_threads: Vec<_> = owned
        .into_iter()
        .enumerate()
        .map(|(t, objs)| {
            let ctx = ctx.clone();
            thread::spawn(move || writer(ctx, t as u64, objs))
        })
        .collect();
    let admin_thread = {
        let ctx = ctx.clone();
        thread::spawn(move || admin(ctx, am))
    };
    let committer_thread = {
        let ctx = ctx.clone();
        thread::spawn(move || committer(ctx))
    };
    let device_admin_thread = ctx.rig.resync.then(|| {
        let ctx = ctx.clone();
        thread::spawn(move || device_admin(ctx))
    });
    let (mut objects, mut keys) = (BTreeMap::new(), BTreeMap::new());
    for h in writer_threads {
        for line in h.join().expect("a writer thread") {
            match line.name.rsplit_once(", key ") {
                Some((_, k)) => keys.insert(k.as_bytes().to_vec(), line),
                None => {
                    let id: u64 = line.name.rsplit_once("object ").expect("an object line").1.parse().expect("id");
                    objects.insert(id, line)
                }
            };
        }
    }
    let admin_line = admin_thread.join().expect("the admin thread");
    if let Some(h) = device_admin_thread {
        h.join().expect("the device admin thread");
    }
    ctx.stop.store(true, Ordering::SeqCst);
    committer_thread.join().expect("the committer thread");

    let rig = &ctx.rig;
    let crashed_in_workload = rig.has_crashed();
    // The workload ended with the power on: write and sync until it goes.
    let injected = rig.injected() > 0 || ctx.pool.status().latched.is_some_and(|l| l.contains("failpoint"));
    if matches!(trouble, Trouble::PowerOnly | Trouble::Members) {
        keep_going_until_the_power_fails(&ctx, &mut objects, &mut rng);
        assert!(rig.refused_ios() > 0, "seed {seed}: the power failure was scheduled but never hit an I/O");
    } else {
        rig.set_crash_after(0);
    }
    let exp = Expect { w_name: "w".into(), objects, keys, admin: admin_line, points: ctx.clock.durable_points() };
    let images = match rig.layout {
        None => verify_images(&rig.members[0].disk, &exp, seed, &mut rng, rot),
        Some(_) => verify_set_images(rig, &exp, seed, &mut rng),
    };
    let devices = rig.describe();
    Outcome {
        seed,
        scenario: if rig.layout.is_some() { "set" } else { "mixed" },
        trouble: format!(
            "{trouble:?}{}{}{devices}",
            if rot { " + bit rot" } else { "" },
            if devices.is_empty() { "" } else { " " }
        ),
        injected,
        device_ops: rig.op_count(),
        crashed_in_workload,
        fingerprint: rig.fingerprint(),
        images,
    }
}

/// The run's threads finished before the power failed: one more line, an object written
/// and fsynced over and over, until it does.
fn keep_going_until_the_power_fails(ctx: &Ctx, objects: &mut BTreeMap<u64, Line>, rng: &mut SimRng) {
    let id = match ctx.pool.create_object(ctx.w, b"last") {
        Ok(id) => id,
        Err(e) => return ctx.expect_failure(&e, "a create after the workload"),
    };
    let mut m = ObjectModel { data: Vec::new(), attr: b"last".to_vec() };
    // Absent before its create, which is durable only once synced.
    let mut line = Line::new(format!("object {}", id.0), false, crate::history::digest_absent());
    line.done(digest_object(Some(&m)), ctx.clock.tick());
    for _ in 0..5000 {
        let off = rng.below(8) * 4096;
        let data = rng.bytes(4096);
        let mut next = m.clone();
        next.write(off, &data);
        let r = ctx.pool.write(ctx.w, id, off, &data);
        let end = ctx.clock.tick();
        if let Err(e) = r {
            ctx.expect_failure(&e, "a write after the workload");
            line.uncertain(digest_object(Some(&next)));
            break;
        }
        m = next;
        line.done(digest_object(Some(&m)), end);
        let start = ctx.clock.tick();
        if let Err(e) = ctx.pool.sync_object(ctx.w, id) {
            ctx.expect_failure(&e, "an fsync after the workload");
            break;
        }
        line.synced();
        ctx.clock.shared_durable(start);
    }
    objects.insert(id.0, line);
}
