//! Replication streams against a model: random object and key-value changes on a source
//! volume, snapshots now and then, restores to older snapshots and snapshot deletes in
//! between, and after each new snapshot an incremental send (from the newest snapshot the
//! target has) through the byte stream into a volume of a second pool. After every transfer
//! the target's new snapshot must read exactly as the source's (every object, attribute and
//! key), both pools must pass the checker, and an incremental must send only what changed.
//! Transfers are cut at random frames and resumed from the receiver's last checkpoint; the
//! resumed send must not resend frames the receiver reported durable.
//!
//! Replay a failure with STRATA_SEED=<seed>; scale with STRATA_ITERS=<n>.

use std::sync::Arc;
use strata_engine::repl::{Applied, SendOptions, SendRecord, StreamHeader, StreamReader, StreamWriter};
use strata_engine::{CheckOptions, ErrorKind, Pool, VolumeId, VolumeOptions};
use strata_testkit::model::{capture_volume, VolumeModel};
use strata_testkit::workload::{object_op, random_policy};
use strata_testkit::{run_seeds, test_create_options, test_pool_options, SimDisk, SimRng};

const SEED_BASE: u64 = 0x5E2D_0000;

fn new_pool(seed: u64) -> Pool {
    let disk = Arc::new(SimDisk::new(96 << 20, 4096));
    Pool::create(disk, test_create_options(seed), test_pool_options()).unwrap()
}

fn snapshot_model(pool: &Pool, vol: &str, snap: &str) -> VolumeModel {
    let view = pool.open_snapshot_view(vol, snap).unwrap();
    let rs = pool.volume_info(view).unwrap().record_size;
    let m = capture_volume(pool, view, rs).unwrap();
    pool.close_snapshot_view(view);
    m
}

/// Models compare object data, attributes and keys; record sizes are per object.
fn same(a: &VolumeModel, b: &VolumeModel) -> bool {
    a.objects == b.objects && a.kv == b.kv
}

/// The stream of a send as bytes.
fn send_bytes(src: &Pool, opts: &SendOptions) -> (Vec<u8>, strata_engine::repl::SendSummary) {
    let mut w = StreamWriter::new(Vec::new());
    let sum = src.send(opts, &mut |i, r| w.write(i, r)).unwrap();
    (w.into_inner(), sum)
}

/// Receive `bytes` into `dst`/`vol`, stopping after `cut_after` frames if given. Returns the
/// receiver's durable resume point and whether the end was reached.
fn receive(dst: &Pool, vol: &str, bytes: &[u8], resume_after: u64, cut_after: Option<u64>) -> (u64, bool) {
    let mut r = StreamReader::new(bytes);
    let (i, first) = r.next_frame().unwrap().expect("a begin frame");
    assert_eq!(i, 0);
    let SendRecord::Begin(h) = first else { panic!("first frame is {first:?}") };
    let mut rx = dst.receive_begin(vol, &h, resume_after).unwrap();
    let mut n = 0;
    while let Some((i, rec)) = r.next_frame().unwrap() {
        if cut_after.is_some_and(|c| n >= c) {
            return (rx.committed(), false);
        }
        n += 1;
        if let Applied::Finished(_) = rx.apply(i, &rec).unwrap() {
            return (rx.committed(), true);
        }
    }
    panic!("the stream ended without an end frame");
}

fn header_of(bytes: &[u8]) -> StreamHeader {
    match StreamReader::new(bytes).next_frame().unwrap() {
        Some((0, SendRecord::Begin(h))) => h,
        other => panic!("{other:?}"),
    }
}

fn check(pool: &Pool, what: &str, seed: u64) {
    let report = pool.check(CheckOptions::default()).unwrap();
    assert!(report.is_clean(), "seed {seed}: {what} pool fails the checker: {report:?}");
}

fn kv_op(rng: &mut SimRng, pool: &Pool, vol: VolumeId, m: &mut VolumeModel) {
    let k = vec![b'k', rng.below(40) as u8];
    if rng.chance(30) {
        pool.kv_delete(vol, &k).unwrap();
        m.kv.remove(&k);
    } else {
        let v = rng.blob(200);
        pool.kv_put(vol, &k, &v).unwrap();
        m.kv.insert(k, v);
    }
}

fn run(seed: u64) {
    let mut rng = SimRng::new(seed);
    let src = new_pool(seed);
    let dst = new_pool(seed ^ 0xFFFF);
    let rs = *rng.pick(&[4096u32, 8192, 16384, 65536]);
    let opts = VolumeOptions { record_size: rs, compression: random_policy(&mut rng), ..Default::default() };
    let vol = src.create_volume("db", &opts).unwrap();
    let topts = VolumeOptions { record_size: 16384, compression: random_policy(&mut rng), ..Default::default() };
    dst.create_volume("db-mirror", &topts).unwrap();
    let mut m = VolumeModel { record_size: rs, ..Default::default() };
    // Source snapshots (name, model) still present; the target's newest snapshot.
    let mut snaps: Vec<(String, VolumeModel)> = Vec::new();
    let mut target_has: Option<String> = None;
    let mut transfers = 0;
    for step in 0..60 {
        for _ in 0..rng.range(1, 25) {
            match object_op(&mut rng, &src, vol, &mut m) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NoSpace => {}
                Err(e) => panic!("seed {seed}: {e}"),
            }
            if rng.chance(10) {
                kv_op(&mut rng, &src, vol, &mut m);
            }
        }
        if rng.chance(8) && snaps.len() > 1 {
            // Back to an older snapshot: the next incremental must still be exact.
            let (name, model) = snaps[rng.below(snaps.len() as u64) as usize].clone();
            src.restore_volume("db", &name).unwrap();
            m = model;
        }
        if rng.chance(8) && snaps.len() > 2 {
            // Delete a snapshot the target does not need as a base.
            let i = rng.below(snaps.len() as u64 - 1) as usize;
            if Some(&snaps[i].0) != target_has.as_ref() {
                // Refused (Busy) when two lines of history follow it (a restore kept both).
                match src.delete_snapshot("db", &snaps[i].0) {
                    Ok(()) => drop(snaps.remove(i)),
                    Err(e) if e.kind() == ErrorKind::Busy => {}
                    Err(e) => panic!("seed {seed}: {e}"),
                }
            }
        }
        if !rng.chance(40) {
            continue;
        }
        let name = format!("s{step}");
        src.create_snapshots(&["db"], &name).unwrap();
        snaps.push((name.clone(), m.clone()));
        let opts =
            SendOptions { volume: "db".into(), base: target_has.clone(), snapshot: name.clone(), resume_after: 0 };
        let (bytes, full) = send_bytes(&src, &opts);
        let h = header_of(&bytes);
        assert_eq!(h.snapshot.name, name);
        // Cut the transfer once in a while, then resume from the receiver's checkpoint.
        let cut = rng.chance(30).then(|| rng.below(full.frames));
        if let Some(c) = cut {
            let (committed, done) = receive(&dst, "db-mirror", &bytes, 0, Some(c));
            assert!(!done || c + 2 >= full.frames, "seed {seed}: cut after {c} of {} frames finished", full.frames);
            if !done {
                // The receiver commits at its checkpoints; after a cut, make what it applied
                // durable the way a daemon's txg timer would, or start over from 0.
                let mut resume = committed;
                if rng.chance(50) {
                    let mut r = StreamReader::new(&bytes[..]);
                    let Some((_, SendRecord::Begin(h))) = r.next_frame().unwrap() else { unreachable!() };
                    if h.base.is_none() {
                        // Starting a full transfer over: into a new volume (the engine
                        // never empties a volume by itself).
                        dst.delete_volume("db-mirror").unwrap();
                        dst.create_volume("db-mirror", &topts).unwrap();
                    }
                    let mut rx = dst.receive_begin("db-mirror", &h, 0).unwrap();
                    let mut k = 0;
                    while let Some((i, rec)) = r.next_frame().unwrap() {
                        if k == c {
                            break;
                        }
                        k += 1;
                        rx.apply(i, &rec).unwrap();
                    }
                    resume = rx.checkpoint().unwrap();
                }
                if resume == 0 && h.base.is_none() {
                    dst.delete_volume("db-mirror").unwrap();
                    dst.create_volume("db-mirror", &topts).unwrap();
                }
                let opts = SendOptions { resume_after: resume, ..opts.clone() };
                let (rest, sum) = send_bytes(&src, &opts);
                assert_eq!(sum.frames, full.frames, "seed {seed}: a resumed send has the same frames");
                assert_eq!(sum.frames_sent, full.frames - resume, "seed {seed}: resumed after {resume}");
                let (_, done) = receive(&dst, "db-mirror", &rest, resume, None);
                assert!(done, "seed {seed}: resumed transfer did not finish");
            }
        } else {
            let (_, done) = receive(&dst, "db-mirror", &bytes, 0, None);
            assert!(done);
        }
        let want = snapshot_model(&src, "db", &name);
        assert!(same(&want, &snaps.last().unwrap().1), "seed {seed}: source snapshot {name} differs from the model");
        let got = snapshot_model(&dst, "db-mirror", &name);
        if !same(&want, &got) {
            let a = strata_testkit::model::PoolModel { volumes: [("v".to_string(), want)].into() };
            let b = strata_testkit::model::PoolModel { volumes: [("v".to_string(), got)].into() };
            panic!("seed {seed}: target snapshot {name} differs from the source: {:?}", a.diff(&b));
        }
        target_has = Some(name);
        transfers += 1;
        if transfers % 4 == 0 {
            check(&src, "source", seed);
            check(&dst, "target", seed);
        }
    }
    check(&src, "source", seed);
    check(&dst, "target", seed);
}

#[test]
fn incremental_transfers_make_the_target_equal_the_source() {
    run_seeds("repl", SEED_BASE, 12, run);
}

/// An incremental after a small change sends that change, not the volume.
#[test]
fn an_incremental_sends_what_changed() {
    let src = new_pool(1);
    let vol = src.create_volume("lun", &VolumeOptions { record_size: 8192, ..Default::default() }).unwrap();
    let obj = src.create_object(vol, b"lun").unwrap();
    let mut rng = SimRng::new(5);
    let data = rng.bytes(16 << 20);
    src.write(vol, obj, 0, &data).unwrap();
    src.create_snapshots(&["lun"], "a").unwrap();
    for i in 0..10u64 {
        src.write(vol, obj, i * 1_000_003 / 8192 * 8192, &rng.bytes(8192)).unwrap();
    }
    src.create_snapshots(&["lun"], "b").unwrap();
    let full = src
        .send(&SendOptions { volume: "lun".into(), base: None, snapshot: "a".into(), resume_after: 0 }, &mut |_, _| {
            Ok(())
        })
        .unwrap();
    // Random records rarely end in zero bytes; those are trimmed.
    assert!(full.data_bytes <= 16 << 20 && full.data_bytes > (16 << 20) - 4096, "{full:?}");
    let inc = src
        .send(
            &SendOptions { volume: "lun".into(), base: Some("a".into()), snapshot: "b".into(), resume_after: 0 },
            &mut |_, _| Ok(()),
        )
        .unwrap();
    assert!(inc.data_bytes <= 10 * 8192 && inc.data_bytes > 10 * 8192 - 64, "only the 10 rewritten records: {inc:?}");
    assert_eq!(inc.frames, 1 + 1 + 10 + 1, "begin, the object, 10 records, end");
}

/// Damaged, foreign and misdirected streams are refused with a clear error; the target's
/// snapshots are untouched and the next transfer starts over from the base.
#[test]
fn bad_streams_are_refused() {
    let src = new_pool(2);
    let vol = src.create_volume("db", &VolumeOptions::default()).unwrap();
    let obj = src.create_object(vol, b"x").unwrap();
    src.write(vol, obj, 0, &vec![7u8; 100_000]).unwrap();
    src.create_snapshots(&["db"], "a").unwrap();
    src.write(vol, obj, 50_000, &vec![9u8; 100_000]).unwrap();
    src.create_snapshots(&["db"], "b").unwrap();
    let dst = new_pool(3);
    dst.create_volume("m", &VolumeOptions::default()).unwrap();
    let opts = |base: Option<&str>, snap: &str| SendOptions {
        volume: "db".into(),
        base: base.map(String::from),
        snapshot: snap.into(),
        resume_after: 0,
    };
    let (full_a, _) = send_bytes(&src, &opts(None, "a"));
    let (inc_ab, _) = send_bytes(&src, &opts(Some("a"), "b"));

    // An incremental whose base the target does not have.
    let e = dst.receive_begin("m", &header_of(&inc_ab), 0).err().expect("refused");
    assert!(e.to_string().contains("the base of this incremental stream"), "{e}");

    // A flipped byte anywhere after the head of the first frame: the MAC catches it.
    for at in [40usize, full_a.len() / 2, full_a.len() - 3] {
        let mut bad = full_a.clone();
        bad[at] ^= 0x10;
        let mut r = StreamReader::new(&bad[..]);
        let err = loop {
            match r.next_frame() {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("damage at byte {at} went unnoticed"),
                Err(e) => break e,
            }
        };
        assert!(err.to_string().contains("MAC mismatch") || err.to_string().contains("frame"), "{err}");
    }
    // Frames of another stream spliced in: refused.
    let mut spliced = full_a[..full_a.len() / 2].to_vec();
    spliced.extend_from_slice(&inc_ab[inc_ab.len() / 2..]);
    let mut r = StreamReader::new(&spliced[..]);
    assert!(std::iter::from_fn(|| Some(r.next_frame())).take(10_000).any(|f| f.is_err()), "splice unnoticed");

    // A good full stream, then the same again: already received.
    assert!(receive(&dst, "m", &full_a, 0, None).1);
    let e = dst.receive_begin("m", &header_of(&full_a), 0).err().expect("refused");
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    // A frame index out of order at the receiver.
    let h = header_of(&inc_ab);
    let mut rx = dst.receive_begin("m", &h, 0).unwrap();
    let e = rx.apply(5, &SendRecord::FreeObject { obj: 1 }).unwrap_err();
    assert!(e.to_string().contains("where frame 1 was expected"), "{e}");
    // A data frame that is not a record: refused, and the transfer starts over cleanly.
    rx.apply(1, &SendRecord::Object { obj: 1, size: 150_000, record_size: 16384, attr: b"x".to_vec() }).unwrap();
    let e = rx.apply(2, &SendRecord::Data { obj: 1, offset: 100, data: vec![1; 10] }).unwrap_err();
    assert!(e.to_string().contains("not one record"), "{e}");
    drop(rx);
    assert!(receive(&dst, "m", &inc_ab, 0, None).1);
    assert!(same(&snapshot_model(&src, "db", "b"), &snapshot_model(&dst, "m", "b")));
    check(&dst, "target", 0);
}

/// A snapshot being sent cannot be deleted; after the send it can.
#[test]
fn a_snapshot_being_sent_is_held() {
    let src = new_pool(4);
    let vol = src.create_volume("db", &VolumeOptions::default()).unwrap();
    let obj = src.create_object(vol, b"x").unwrap();
    src.write(vol, obj, 0, &[1u8; 5000]).unwrap();
    src.create_snapshots(&["db"], "a").unwrap();
    let mut tried = false;
    src.send(&SendOptions { volume: "db".into(), base: None, snapshot: "a".into(), resume_after: 0 }, &mut |_, _| {
        if !tried {
            tried = true;
            let e = src.delete_snapshot("db", "a").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
            assert!(e.to_string().contains("being sent"), "{e}");
            let e = src.delete_volume("db").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
        }
        Ok(())
    })
    .unwrap();
    assert!(tried);
    src.delete_snapshot("db", "a").unwrap();
}

/// The target loses power at a random point of an incremental receive (often inside a
/// checkpoint commit). The crash image opens and checks clean, still holds the base snapshot,
/// and the transfer resumed from the last checkpoint the receiver reported (or from the
/// start, if none) makes the target equal to the source. A checkpoint reported before the
/// crash that was not durable would make the resume skip frames: the comparison fails.
#[test]
fn a_receive_cut_by_a_power_failure_resumes_from_its_last_checkpoint() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use strata_engine::BlockDevice;
    use strata_testkit::{assert_power_failure, CrashMode};
    // Seeds whose power failed mid-transfer, and those of them resumed from a checkpoint.
    static CRASHED: AtomicU64 = AtomicU64::new(0);
    static RESUMED: AtomicU64 = AtomicU64::new(0);
    run_seeds("repl-crash", SEED_BASE + 0x1000, 16, |seed| {
        let mut rng = SimRng::new(seed);
        let src = new_pool(seed);
        let vol = src.create_volume("db", &VolumeOptions { record_size: 8192, ..Default::default() }).unwrap();
        let mut m = VolumeModel { record_size: 8192, ..Default::default() };
        for _ in 0..60 {
            object_op(&mut rng, &src, vol, &mut m).unwrap();
        }
        src.create_snapshots(&["db"], "a").unwrap();
        for _ in 0..80 {
            object_op(&mut rng, &src, vol, &mut m).unwrap();
            if rng.chance(10) {
                kv_op(&mut rng, &src, vol, &mut m);
            }
        }
        src.create_snapshots(&["db"], "b").unwrap();
        let disk = Arc::new(SimDisk::new(96 << 20, 4096));
        let dst = Pool::create(disk.clone(), test_create_options(seed ^ 1), test_pool_options()).unwrap();
        dst.create_volume("m", &VolumeOptions::default()).unwrap();
        let full = |base: Option<&str>, snap: &str, resume: u64| {
            send_bytes(
                &src,
                &SendOptions {
                    volume: "db".into(),
                    base: base.map(String::from),
                    snapshot: snap.into(),
                    resume_after: resume,
                },
            )
            .0
        };
        assert!(receive(&dst, "m", &full(None, "a", 0), 0, None).1);
        dst.commit().unwrap();

        // The incremental, with checkpoints every 16 KiB and the power failing somewhere.
        let bytes = full(Some("a"), "b", 0);
        let before = disk.op_count();
        disk.set_crash_after(rng.range(1, 400));
        let mut acked = 0;
        let mut r = StreamReader::new(&bytes[..]);
        let Some((_, SendRecord::Begin(h))) = r.next_frame().unwrap() else { unreachable!() };
        let outcome = (|| -> strata_engine::Result<bool> {
            let mut rx = dst.receive_begin("m", &h, 0)?;
            rx.set_checkpoint_bytes(16 << 10);
            while let Some((i, rec)) = r.next_frame().unwrap() {
                match rx.apply(i, &rec)? {
                    Applied::Checkpoint(at) => acked = at,
                    Applied::Finished(_) => return Ok(true),
                    Applied::Frame => {}
                }
            }
            Ok(false)
        })();
        let finished = match outcome {
            Ok(done) => done,
            Err(e) => {
                assert_power_failure(&e, &disk, seed, "the receive");
                false
            }
        };
        if finished && !disk.has_crashed() {
            // The power outlived the transfer: nothing to resume.
            assert!(disk.op_count() > before);
            return;
        }
        assert!(disk.has_crashed(), "seed {seed}: the receive stopped without a power failure");
        drop(dst);
        let mode = *rng.pick(&[CrashMode::DropUnflushed, CrashMode::Random, CrashMode::KeepAll]);
        let disk = Arc::new(SimDisk::from_image(disk.crash_image(mode, &mut rng), 4096));
        let dst = Pool::open(disk.clone() as Arc<dyn BlockDevice>, test_pool_options()).unwrap();
        check(&dst, "crashed target", seed);
        assert!(
            same(&snapshot_model(&src, "db", "a"), &snapshot_model(&dst, "m", "a")),
            "seed {seed}: base snapshot lost"
        );
        let got_b = dst.snapshots(Some("m")).unwrap().iter().any(|s| s.name == "b");
        if !got_b {
            // Resume from the last acknowledged checkpoint (0: start over from the base).
            let rest = full(Some("a"), "b", acked);
            assert!(receive(&dst, "m", &rest, acked, None).1);
            CRASHED.fetch_add(1, Ordering::Relaxed);
            if acked > 0 {
                RESUMED.fetch_add(1, Ordering::Relaxed);
            }
        }
        let want = snapshot_model(&src, "db", "b");
        let got = snapshot_model(&dst, "m", "b");
        assert!(same(&want, &got), "seed {seed}: resumed after checkpoint {acked}, the target differs from the source");
        check(&dst, "resumed target", seed);
    });
    if !strata_testkit::replaying_seed() {
        let (c, r) = (CRASHED.load(Ordering::Relaxed), RESUMED.load(Ordering::Relaxed));
        assert!(c >= 4 && r >= 2, "too few seeds crashed mid-transfer ({c}) or resumed from a checkpoint ({r})");
    }
}

/// The receiver checkpoints every `checkpoint_for(estimate)` bytes: 1/128 of the stream,
/// 4 to 64 MiB, so a resume resends under 1 % of a large transfer.
#[test]
fn checkpoints_follow_the_stream_size() {
    use strata_engine::repl::{checkpoint_for, CHECKPOINT_BYTES, CHECKPOINT_MIN_BYTES};
    assert_eq!(checkpoint_for(0), CHECKPOINT_MIN_BYTES);
    assert_eq!(checkpoint_for(100 << 20), CHECKPOINT_MIN_BYTES, "a small stream: the floor");
    assert_eq!(checkpoint_for(1 << 30), 8 << 20);
    assert_eq!(checkpoint_for(64 << 30), CHECKPOINT_BYTES, "a huge stream: the ceiling");
    for est in [512u64 << 20, 1 << 30, 5 << 30, 8 << 30] {
        assert!(checkpoint_for(est) * 100 <= est, "{est}: a resume wastes under 1 %");
    }
}
