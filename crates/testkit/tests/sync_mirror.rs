//! Synchronous mirrors at the engine level (pool/sync_tap.rs, repl/journal.rs): a source
//! pool whose volume is tapped, every frame appended to a journal in a second pool when a
//! sync waits for it (strict: a journal that cannot be written fails the sync), snapshots
//! transferred now and then (retiring the frames they contain), and now and then a fall-back
//! to asynchronous (queued frames dropped, a gap marked in the journal, the tap put back:
//! syncs count again once a snapshot taken after that has landed). Random object and
//! key-value operations, syncs of one object or of everything, commits; then the power of
//! one pool fails at a random I/O. The other pool's state is taken as its own crash image
//! too. The target is then opened from its image and the mirror broken: the volume
//! restored to its newest transferred snapshot, the journal's frames after that snapshot's
//! txg replayed. It must equal the source exactly as it was after some frame — one at or
//! after the last frame an acknowledged sync waited for — and pass the checker.
//!
//! Replay a failure with STRATA_SEED=<seed>; scale with STRATA_ITERS=<n>.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use strata_engine::pool::sync_tap::{SyncTap, TapFrame};
use strata_engine::repl::journal::Journal;
use strata_engine::repl::{Applied, SendOptions, SendRecord, StreamReader, StreamWriter};
use strata_engine::{BlockDevice, CheckOptions, Error, ErrorKind, ObjectId, Pool, Result, VolumeId, VolumeOptions};
use strata_testkit::model::{capture_volume, VolumeModel};
use strata_testkit::workload::object_op;
use strata_testkit::{run_seeds, test_create_options, test_pool_options, CrashMode, SimDisk, SimRng};

const SECTOR: usize = 512;

/// The tap of the test: frames queue in memory; a sync's wait appends them to the
/// target's journal and syncs it. Once an append failed, every wait fails (strict).
struct JournalTap {
    vol: u64,
    dst: Arc<Pool>,
    journal: Mutex<Journal>,
    queue: Mutex<Vec<TapFrame>>,
    broken: Mutex<Option<String>>,
}

impl SyncTap for JournalTap {
    fn wants(&self, vol: u64) -> bool {
        vol == self.vol
    }

    fn push(&self, frame: TapFrame) {
        self.queue.lock().unwrap().push(frame);
    }

    fn wait(&self, seq: u64) -> Result<()> {
        let mut journal = self.journal.lock().unwrap();
        if let Some(why) = self.broken.lock().unwrap().clone() {
            return Err(Error::ReadOnly(format!("the sync mirror failed earlier: {why}")));
        }
        let frames: Vec<TapFrame> = {
            let mut q = self.queue.lock().unwrap();
            let n = q.iter().take_while(|f| f.seq <= seq).count();
            q.drain(..n).collect()
        };
        journal.append(&self.dst, &frames).inspect_err(|e| {
            *self.broken.lock().unwrap() = Some(e.to_string());
        })
    }
}

fn send_and_receive(src: &Pool, dst: &Pool, base: Option<String>, snap: &str) -> Result<()> {
    let opts = SendOptions { volume: "db".into(), base, snapshot: snap.into(), resume_after: 0 };
    let mut w = StreamWriter::new(Vec::new());
    src.send(&opts, &mut |i, r| w.write(i, r))?;
    let bytes = w.into_inner();
    let mut r = StreamReader::new(&bytes[..]);
    let Some((0, SendRecord::Begin(h))) = r.next_frame()? else { panic!("no begin frame") };
    let mut rx = dst.receive_begin("db-mirror", &h, 0)?;
    while let Some((i, rec)) = r.next_frame()? {
        if let Applied::Finished(_) = rx.apply(i, &rec)? {
            return Ok(());
        }
    }
    panic!("the stream ended without an end frame")
}

fn kv_op(rng: &mut SimRng, pool: &Pool, vol: VolumeId, m: &mut VolumeModel) -> Result<()> {
    let k = vec![b'k', rng.below(20) as u8];
    if rng.chance(30) {
        pool.kv_delete(vol, &k)?;
        m.kv.remove(&k);
    } else {
        let v = rng.blob(100);
        pool.kv_put(vol, &k, &v)?;
        m.kv.insert(k, v);
    }
    Ok(())
}

struct Outcome {
    crashed_target: bool,
    frames_replayed: u64,
    gaps: u64,
}

fn run(seed: u64) -> Outcome {
    let mut rng = SimRng::new(seed);
    let src_disk = Arc::new(SimDisk::new(64 << 20, SECTOR));
    let dst_disk = Arc::new(SimDisk::new(96 << 20, SECTOR));
    let src = Pool::create(src_disk.clone(), test_create_options(seed), test_pool_options()).unwrap();
    let dst = Arc::new(Pool::create(dst_disk.clone(), test_create_options(seed ^ 0xFF), test_pool_options()).unwrap());
    let rs = *rng.pick(&[4096u32, 8192, 16384]);
    let vol = src.create_volume("db", &VolumeOptions { record_size: rs, ..Default::default() }).unwrap();
    dst.create_volume("db-mirror", &VolumeOptions { record_size: rs, ..Default::default() }).unwrap();
    let jvol = dst.create_volume("journal", &VolumeOptions::default()).unwrap();
    let journal = Journal::create(&dst, jvol).unwrap();
    let mut m = VolumeModel { record_size: rs, ..Default::default() };
    for _ in 0..rng.range(0, 10) {
        object_op(&mut rng, &src, vol, &mut m).unwrap();
    }
    let tap = Arc::new(JournalTap {
        vol: vol.0,
        dst: dst.clone(),
        journal: Mutex::new(journal),
        queue: Mutex::new(Vec::new()),
        broken: Mutex::new(None),
    });
    let mut from = src.set_sync_tap(Some(tap.clone()));
    // Journal sequence numbers of this tap's frames: its own plus `offset` (a tap put back
    // after a fall-back starts again from 1). Until a snapshot taken after it lands
    // (`catching_up`), the journal has a gap and syncs guarantee nothing.
    let mut offset = 0u64;
    let mut catching_up: Option<u64> = None;
    let mut gaps = 0u64;
    // The base: a snapshot taken after the tap went in, noted, then transferred whole.
    let base = src.create_snapshots(&["db"], "s0").unwrap().remove(0);
    assert!(base.txg + 1 >= from, "seed {seed}: the base snapshot (txg {}) predates the tap (from {from})", base.txg);
    tap.journal.lock().unwrap().note_snapshot(&dst, "s0", base.txg).unwrap();
    send_and_receive(&src, &dst, None, "s0").unwrap();
    // The source as it was after each frame, and at each snapshot (with the frames it holds).
    let mut after_frame: BTreeMap<u64, VolumeModel> = BTreeMap::new();
    let mut at_snapshot: BTreeMap<String, (VolumeModel, u64)> = BTreeMap::new();
    at_snapshot.insert("s0".into(), (m.clone(), src.sync_tap_pushed() + offset));
    let mut newest = "s0".to_string();
    let mut acked = 0u64;

    // Power fails on one side at a random I/O from here on.
    let crash_target = rng.chance(40);
    let (victim, other) = if crash_target { (&dst_disk, &src_disk) } else { (&src_disk, &dst_disk) };
    victim.set_crash_after(rng.range(1, 400));
    let power_lost = |e: &Error| {
        assert!(src_disk.has_crashed() || dst_disk.has_crashed(), "seed {seed}: an error without a power failure: {e}");
    };
    'work: for step in 0..200 {
        let before = src.sync_tap_pushed();
        if rng.chance(3) {
            // The mirror falls back to asynchronous: queued frames are dropped, the gap
            // noted, and the tap put back (a daemon does so when its target fails).
            tap.queue.lock().unwrap().clear();
            let j = tap.journal.lock().unwrap();
            if let Err(e) = j.mark_gap(&dst) {
                power_lost(&e);
                break 'work;
            }
            offset = j.last_seq();
            drop(j);
            from = src.set_sync_tap(Some(tap.clone()));
            catching_up = Some(from);
            gaps += 1;
            continue;
        }
        let r = match rng.below(100) {
            0..=59 => object_op(&mut rng, &src, vol, &mut m),
            60..=69 => kv_op(&mut rng, &src, vol, &mut m),
            70..=84 => {
                let wait_for = src.sync_tap_pushed() + offset;
                let r = match m.objects.keys().nth(rng.below(m.objects.len().max(1) as u64) as usize) {
                    Some(&obj) if rng.chance(70) => src.sync_object(vol, ObjectId(obj)),
                    _ => src.sync_log(),
                };
                if r.is_ok() && catching_up.is_none() {
                    acked = acked.max(wait_for);
                }
                r
            }
            85..=91 => src.commit().map(|_| ()),
            _ => {
                let name = format!("s{}", step + 1);
                match src.create_snapshots(&["db"], &name) {
                    Ok(info) => {
                        at_snapshot.insert(name.clone(), (m.clone(), src.sync_tap_pushed() + offset));
                        let t = info[0].txg;
                        let r = tap.journal.lock().unwrap().note_snapshot(&dst, &name, t);
                        let r = r.and_then(|()| send_and_receive(&src, &dst, Some(newest.clone()), &name));
                        let r = r.and_then(|()| tap.journal.lock().unwrap().retire(&dst, t));
                        let r = r.and_then(|()| match catching_up {
                            // Every operation after this snapshot is in the frames again.
                            Some(f) if t + 1 >= f => {
                                catching_up = None;
                                tap.journal.lock().unwrap().clear_gap(&dst)
                            }
                            _ => Ok(()),
                        });
                        if r.is_ok() {
                            newest = name;
                        }
                        r
                    }
                    Err(e) => Err(e),
                }
            }
        };
        let pushed = src.sync_tap_pushed();
        assert!(pushed <= before + 1, "seed {seed}: one operation pushed {} frames", pushed - before);
        if pushed > before {
            after_frame.insert(pushed + offset, m.clone());
        }
        match r {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NoSpace && !victim.has_crashed() => {}
            Err(e) => {
                power_lost(&e);
                break 'work;
            }
        }
        if victim.has_crashed() {
            break;
        }
    }
    // Both sides' durable states: the victim's crash image, the other's as if its power
    // failed now as well (what it acknowledged was flushed).
    victim.set_crash_after(0);
    other.set_crash_after(0);
    drop(src);
    drop(tap);
    drop(dst);
    let image = dst_disk.crash_image(CrashMode::DropUnflushed, &mut rng);
    let dst = Pool::open(Arc::new(SimDisk::from_image(image, SECTOR)) as Arc<dyn BlockDevice>, test_pool_options())
        .unwrap_or_else(|e| panic!("seed {seed}: the target does not reopen: {e}"));
    let jvol = dst.volume_id("journal").unwrap();
    let journal = Journal::open(&dst, jvol).unwrap();
    let snap = dst.snapshots(Some("db-mirror")).unwrap().pop().expect("the base snapshot");
    let t = journal
        .snapshot_txg(&dst, &snap.name)
        .unwrap()
        .unwrap_or_else(|| panic!("seed {seed}: no txg noted for snapshot {}", snap.name));
    dst.restore_volume("db-mirror", &snap.name).unwrap();
    let mirror = dst.volume_id("db-mirror").unwrap();
    let replayed = journal.replay(&dst, t, &|v| (v == vol.0).then_some(mirror)).unwrap();
    let (expect, covered) = if replayed.frames > 0 {
        (&after_frame[&replayed.last_seq], replayed.last_seq)
    } else {
        let (model, pushed) = &at_snapshot[&snap.name];
        (model, *pushed)
    };
    assert!(
        covered >= acked,
        "seed {seed}: the mirror holds the source through frame {covered}, but a sync waited for frame {acked}"
    );
    let got = capture_volume(&dst, mirror, rs).unwrap();
    if got.objects != expect.objects || got.kv != expect.kv {
        let a = strata_testkit::model::PoolModel { volumes: [("v".to_string(), expect.clone())].into() };
        let b = strata_testkit::model::PoolModel { volumes: [("v".to_string(), got)].into() };
        panic!("seed {seed}: the broken mirror differs from the source after frame {covered}: {:?}", a.diff(&b));
    }
    let report = dst.check(CheckOptions::default()).unwrap();
    assert!(report.is_clean(), "seed {seed}: the target fails the checker: {report:?}");
    Outcome { crashed_target: crash_target, frames_replayed: replayed.frames, gaps }
}

#[test]
fn a_broken_sync_mirror_holds_every_acknowledged_sync_after_either_side_crashes() {
    let stats = Mutex::new((0u64, 0u64, 0u64));
    run_seeds("sync mirror crash", 0x5C_0000, 120, |seed| {
        let o = run(seed);
        let mut s = stats.lock().unwrap();
        s.0 += u64::from(o.crashed_target);
        s.1 += u64::from(o.frames_replayed > 0);
        s.2 += u64::from(o.gaps > 0);
    });
    let (target_crashes, replays, gaps) = *stats.lock().unwrap();
    if !strata_testkit::replaying_seed() {
        assert!(gaps > 0, "no seed fell back to asynchronous");
        assert!(target_crashes > 0, "no seed crashed the target");
        assert!(replays > 0, "no seed replayed a frame");
    }
}
