//! Host state for `pool export` / `pool import` (engine host_state.rs, the uberblock's
//! `host_id` and `pool_state`, feature COMPAT_HOST_STATE): a pool says which host has it
//! open and whether it was exported, on the device, readable without opening the pool.
//!
//! Checked here: create/export/reopen transitions as `read_pool_identity` sees them; a
//! read-write open records its host before `open` returns and a read-only open writes
//! nothing; pools written without host ids (as builds before the feature wrote them) read
//! `Unknown` and take a host when opened with one; old-format root bytes decode; a crash at
//! any device operation of an export leaves the previous root or the exported one, both
//! consistent; `read_pool_identity` answers non-pools and damaged pools with typed errors.
//! Seeds print on failure; replay with STRATA_SEED=<seed>.

use std::sync::Arc;
use strata_engine::format::codec::{self_checksum, Writer};
use strata_engine::format::features::COMPAT_HOST_STATE;
use strata_engine::format::logdev::MIN_LOG_DEVICE_SIZE;
use strata_engine::format::uberblock::{UberblockPhys, UBER_MAGIC, UBER_SLOT_SIZE};
use strata_engine::format::{LABEL_SIZE, RING_SLOTS};
use strata_engine::txg::ring_slot_addr;
use strata_engine::{
    read_pool_identity, BlockDevice, CheckOptions, ErrorKind, HostState, LogDeviceSpec, ObjectId, Pool, PoolIdentity,
    PoolOptions, VolumeId, VolumeOptions,
};
use strata_testkit::{
    iters_from_env, seed_from_env, test_create_options, test_pool_options, CrashMode, SimDisk, SimRng,
};

const SECTOR: usize = 512;
const DISK_BYTES: u64 = 16 << 20;
const HOST_A: u64 = 0xA1A1_0000_0000_0001;
const HOST_B: u64 = 0xB2B2_0000_0000_0002;

fn opts(host_id: u64) -> PoolOptions {
    PoolOptions { host_id, ..test_pool_options() }
}

fn read_only(host_id: u64) -> PoolOptions {
    PoolOptions { read_only: true, host_id, ..test_pool_options() }
}

fn dev(d: &Arc<SimDisk>) -> Arc<dyn BlockDevice> {
    d.clone() as Arc<dyn BlockDevice>
}

fn identity(d: &SimDisk) -> PoolIdentity {
    read_pool_identity(d).expect("read the pool identity")
}

fn assert_clean(pool: &Pool) {
    let r = pool.check(CheckOptions::default()).expect("check runs");
    assert!(r.is_clean(), "checker found: {:#?}", r.errors);
}

/// The compat mask of both labels.
fn label_compat(d: &SimDisk) -> [u64; 2] {
    let img = d.current_image();
    [0, LABEL_SIZE as usize].map(|base| u64::from_le_bytes(img[base + 88..base + 96].try_into().unwrap()))
}

/// A pool made by `host` (0: none), with volume "v" and one committed object.
fn make_pool(disk: &Arc<SimDisk>, host: u64, seed: u64) -> (Pool, VolumeId, ObjectId) {
    let pool = Pool::create(dev(disk), test_create_options(seed), opts(host)).expect("create pool");
    let vol = pool.create_volume("v", &VolumeOptions { record_size: 4096, ..Default::default() }).unwrap();
    let obj = pool.create_object(vol, b"attr").unwrap();
    pool.write(vol, obj, 0, b"committed").unwrap();
    pool.commit().unwrap();
    (pool, vol, obj)
}

#[test]
fn create_export_and_read_only_reopen() {
    let disk = Arc::new(SimDisk::new(DISK_BYTES, SECTOR));
    let (pool, vol, obj) = make_pool(&disk, HOST_A, 1);
    let guid = test_create_options(1).pool_guid;
    let id = identity(&disk);
    assert_eq!(
        id,
        PoolIdentity {
            name: "test".into(),
            pool_guid: guid,
            log_device_guid: 0,
            txg: pool.status().txg,
            host_id: HOST_A,
            state: HostState::Active,
        }
    );
    let st = pool.status();
    assert_eq!((st.host_id, st.pool_state), (HOST_A, HostState::Active));
    assert_eq!(label_compat(&disk), [COMPAT_HOST_STATE; 2], "the creator's labels name the feature");

    // Export commits what is dirty, in a root that says exported.
    pool.write(vol, obj, 100, b"dirty at export").unwrap();
    let before = id.txg;
    pool.export().expect("export");
    let id = identity(&disk);
    assert_eq!((id.host_id, id.state), (HOST_A, HostState::Exported));
    assert!(id.txg > before, "export wrote a new root (txg {} after {before})", id.txg);

    // Read-only reopens, with another host's id or none: nothing written, still exported.
    for host in [HOST_B, 0] {
        let writes = disk.write_count();
        let pool = Pool::open(dev(&disk), read_only(host)).expect("reopen read-only");
        assert_eq!(pool.read(vol, obj, 100, 15).unwrap(), b"dirty at export");
        let st = pool.status();
        assert_eq!((st.host_id, st.pool_state), (HOST_A, HostState::Exported));
        assert_clean(&pool);
        // Exporting a read-only pool cannot write its root: refused, device unchanged.
        assert_eq!(pool.export().unwrap_err().kind(), ErrorKind::ReadOnly);
        assert_eq!(disk.write_count(), writes, "a read-only open and close wrote to the device");
        assert_eq!(identity(&disk), id);
    }

    // And read-write, by the same host: active again, data intact.
    let pool = Pool::open(dev(&disk), opts(HOST_A)).expect("reopen read-write");
    assert_eq!(pool.read(vol, obj, 0, 9).unwrap(), b"committed");
    assert_eq!((identity(&disk).host_id, identity(&disk).state), (HOST_A, HostState::Active));
    assert_clean(&pool);
}

#[test]
fn a_read_write_open_records_its_host_before_returning() {
    let disk = Arc::new(SimDisk::new(DISK_BYTES, SECTOR));
    let (pool, vol, obj) = make_pool(&disk, HOST_A, 2);
    pool.export().unwrap();
    let exported = identity(&disk);

    // Host B imports the exported pool: active on B at once, no other write needed.
    let pool = Pool::open(dev(&disk), opts(HOST_B)).unwrap();
    let id = identity(&disk);
    assert_eq!((id.host_id, id.state), (HOST_B, HostState::Active));
    assert_eq!(id.txg, exported.txg + 1, "one empty txg records the host");
    assert_eq!(pool.status().pool_state, HostState::Active);
    assert!(pool.status().open_notes.is_empty(), "{:?}", pool.status().open_notes);
    assert_clean(&pool);

    // B stops without exporting (a crash: only flushed writes survive), A opens it anyway
    // (a forced import): A records itself, and the open notes say B never let go.
    pool.write(vol, obj, 0, b"B's write").unwrap();
    pool.commit().unwrap();
    let img = disk.crash_image(CrashMode::DropUnflushed, &mut SimRng::new(2));
    drop(pool);
    let disk = Arc::new(SimDisk::from_image(img, SECTOR));
    assert_eq!((identity(&disk).host_id, identity(&disk).state), (HOST_B, HostState::Active));
    let pool = Pool::open(dev(&disk), opts(HOST_A)).unwrap();
    assert_eq!((identity(&disk).host_id, identity(&disk).state), (HOST_A, HostState::Active));
    let notes = pool.status().open_notes.join("; ");
    assert!(notes.contains(&format!("{HOST_B:#x}")), "open notes do not name host B: {notes}");
    assert_eq!(pool.read(vol, obj, 0, 9).unwrap(), b"B's write");
    assert_clean(&pool);
    drop(pool);

    // Reopening by the host the pool already names writes nothing at open.
    let writes = disk.write_count();
    let pool = Pool::open(dev(&disk), opts(HOST_A)).unwrap();
    assert_eq!(disk.write_count(), writes, "an open that changes no host state wrote");
    drop(pool);
}

#[test]
fn pools_without_host_ids_read_unknown_and_take_one_when_opened_with_it() {
    // host_id 0 is how every pool was written before host states: no feature bit, and
    // every root's bytes 120..160 zero — byte for byte what the previous build wrote.
    let disk = Arc::new(SimDisk::new(DISK_BYTES, SECTOR));
    let (pool, vol, obj) = make_pool(&disk, 0, 3);
    pool.write(vol, obj, 0, b"more").unwrap();
    pool.close().unwrap();
    let id = identity(&disk);
    assert_eq!((id.host_id, id.state), (0, HostState::Unknown));
    assert_eq!(label_compat(&disk), [0, 0]);
    let img = disk.current_image();
    let mut roots = 0;
    for label in 0..2 {
        for slot in 0..RING_SLOTS {
            let at = ring_slot_addr(label, slot) as usize;
            if img[at..at + 8] == UBER_MAGIC {
                roots += 1;
                assert_eq!(img[at + 120..at + 160], [0u8; 40], "root at byte {at} is not in the old format");
            }
        }
    }
    assert!(roots >= 4, "only {roots} roots written");

    // Opened by host A: active on A at once, and the labels now name the feature.
    let pool = Pool::open(dev(&disk), opts(HOST_A)).unwrap();
    assert_eq!((identity(&disk).host_id, identity(&disk).state), (HOST_A, HostState::Active));
    assert_eq!(label_compat(&disk), [COMPAT_HOST_STATE; 2]);
    assert_eq!(pool.read(vol, obj, 0, 9).unwrap(), b"moreitted");
    pool.export().unwrap();

    // An opener without a host id never leaves a pool it has open saying "exported".
    let pool = Pool::open(dev(&disk), opts(0)).unwrap();
    let id = identity(&disk);
    assert_eq!((id.host_id, id.state), (0, HostState::Unknown));
    assert_clean(&pool);
    // Its export says exported, by no host.
    pool.export().unwrap();
    assert_eq!((identity(&disk).host_id, identity(&disk).state), (0, HostState::Exported));
    assert_eq!(label_compat(&disk), [COMPAT_HOST_STATE; 2], "the feature bit stays");
}

/// The uberblock as the build before host states encoded it: reserved zeros at 120..160.
fn old_format_root(ub: &UberblockPhys) -> Vec<u8> {
    let mut w = Writer::with_capacity(UBER_SLOT_SIZE);
    w.bytes(&UBER_MAGIC).u64(ub.txg).u64(ub.pool_guid).u64(ub.timestamp_ns);
    ub.catalog_root.encode_into(&mut w);
    w.u64(ub.allocated_units).u64(ub.next_volume_id).u64(ub.features_incompat).zeros(40);
    assert_eq!(w.len(), 160);
    w.zeros(UBER_SLOT_SIZE - 160);
    let mut buf = w.into_inner();
    let sum = self_checksum(&buf, 160);
    buf[160..192].copy_from_slice(&sum);
    buf
}

#[test]
fn roots_in_the_old_format_decode_and_open_as_unknown() {
    let disk = Arc::new(SimDisk::new(DISK_BYTES, SECTOR));
    let (pool, vol, obj) = make_pool(&disk, HOST_A, 4);
    let root = pool.committed_root();
    assert_eq!((root.host_id, root.pool_state), (HOST_A, HostState::Active));
    drop(pool);

    // The old encoding of that root decodes to it with no host.
    let old = old_format_root(&root);
    let decoded = UberblockPhys::decode(&old, 0).unwrap().expect("a root");
    assert_eq!(decoded, UberblockPhys { host_id: 0, pool_state: HostState::Unknown, ..root });
    // The new encoding puts the host at 120 and the state at 128, nothing else changes.
    let new = root.encode();
    assert_eq!(new[120..128], HOST_A.to_le_bytes());
    assert_eq!(new[128], 1);
    assert_eq!(new[129..160], [0u8; 31]);
    assert_eq!(new[..120], old[..120]);
    assert_eq!(UberblockPhys::decode(&new, 0).unwrap(), Some(root));
    for (state, byte) in [(HostState::Unknown, 0u8), (HostState::Active, 1), (HostState::Exported, 2)] {
        let ub = UberblockPhys { pool_state: state, ..root };
        assert_eq!(ub.encode()[128], byte);
        assert_eq!(UberblockPhys::decode(&ub.encode(), 0).unwrap(), Some(ub));
    }
    // A state a later build might write is not corruption (the ring scan would skip the
    // newest roots): it reads as unknown.
    let mut future = new.clone();
    future[128] = 7;
    future[140] = 0x55; // and a later build's field in the reserved bytes
    let sum = self_checksum(&future, 160);
    future[160..192].copy_from_slice(&sum);
    let ub = UberblockPhys::decode(&future, 0).unwrap().expect("a root");
    assert_eq!((ub.host_id, ub.pool_state), (HOST_A, HostState::Unknown));

    // The newest root rewritten in both rings as the old build would have written it: the
    // pool opens at it, reads unknown, and a host-aware open records its host again.
    let slot = root.txg % RING_SLOTS;
    let mut img = disk.current_image();
    for label in 0..2 {
        let at = ring_slot_addr(label, slot) as usize;
        img[at..at + UBER_SLOT_SIZE].copy_from_slice(&old);
    }
    let disk = Arc::new(SimDisk::from_image(img, SECTOR));
    let id = identity(&disk);
    assert_eq!((id.txg, id.host_id, id.state), (root.txg, 0, HostState::Unknown));
    let pool = Pool::open(dev(&disk), read_only(0)).unwrap();
    assert_eq!(pool.status().txg, root.txg);
    assert_eq!(pool.read(vol, obj, 0, 9).unwrap(), b"committed");
    assert_clean(&pool);
    drop(pool);
    let pool = Pool::open(dev(&disk), opts(HOST_B)).unwrap();
    assert_eq!((identity(&disk).host_id, identity(&disk).state), (HOST_B, HostState::Active));
    assert_clean(&pool);
}

/// Power lost at every device operation of an export (and at random ones, with crash
/// images that drop, keep or tear unflushed writes): the device holds the root before the
/// export (active) or the exported one, the pool opens, the checker passes, and the data
/// is that of the root it opened at — with the write acknowledged by the intent log either
/// way.
#[test]
fn a_crash_during_export_leaves_the_previous_root_or_the_exported_one() {
    let seed = seed_from_env(0x405_7000);
    let disk = Arc::new(SimDisk::new(DISK_BYTES, SECTOR));
    let (pool, vol, obj) = make_pool(&disk, HOST_A, seed);
    drop(pool);
    let base = disk.current_image();
    let pre = identity(&disk);
    assert_eq!(pre.state, HostState::Active);

    // The export's device operations, counted on a run without a crash.
    let run = |crash_after: Option<u64>| -> (Arc<SimDisk>, u64) {
        let d = Arc::new(SimDisk::from_image(base.clone(), SECTOR));
        let pool = Pool::open(dev(&d), opts(HOST_A)).expect("open before export");
        pool.write(vol, obj, 4096, b"acknowledged").unwrap();
        pool.sync_log().unwrap();
        pool.write(vol, obj, 8192, b"unsynced").unwrap();
        let ops0 = d.op_count();
        if let Some(n) = crash_after {
            d.set_crash_after(n);
        }
        let r = pool.export();
        assert!(r.is_ok() || d.has_crashed(), "export failed without a crash: {r:?}");
        (d.clone(), d.op_count() - ops0)
    };
    let (_, export_ops) = run(None);
    assert!(export_ops >= 4, "export took {export_ops} device operations");

    let mut rng = SimRng::new(seed);
    let mut outcomes = [0u32; 2];
    let extra = iters_from_env(3);
    let points: Vec<u64> = (0..=export_ops).chain((0..extra).map(|_| rng.below(export_ops + 1))).collect();
    for n in points {
        let (d, _) = run(Some(n));
        for mode in [CrashMode::DropUnflushed, CrashMode::KeepAll, CrashMode::Random] {
            let img = d.crash_image(mode, &mut rng);
            let ctx = format!("seed {seed}, crash after {n} of {export_ops} operations, {mode:?}");
            let disk = Arc::new(SimDisk::from_image(img, SECTOR));
            let id = read_pool_identity(disk.as_ref()).unwrap_or_else(|e| panic!("{ctx}: identity: {e}"));
            let exported = match (id.state, id.txg) {
                (HostState::Active, t) if t == pre.txg => false,
                (HostState::Exported, t) if t == pre.txg + 1 => true,
                other => panic!(
                    "{ctx}: device says {other:?}, expected active at {} or exported at {}",
                    pre.txg,
                    pre.txg + 1
                ),
            };
            assert_eq!(id.host_id, HOST_A, "{ctx}");
            outcomes[exported as usize] += 1;
            let pool = Pool::open(dev(&disk), read_only(0)).unwrap_or_else(|e| panic!("{ctx}: open read-only: {e}"));
            assert_clean(&pool);
            let unsynced = pool.read(vol, obj, 8192, 8).unwrap();
            // Past the object's end at the previous root (the intent log is not replayed
            // read-only): nothing.
            assert_eq!(unsynced, if exported { b"unsynced".to_vec() } else { Vec::new() }, "{ctx}");
            drop(pool);
            // Read-write (replays the intent log if the export's root did not land).
            let pool = Pool::open(dev(&disk), opts(HOST_A)).unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
            assert_eq!(pool.read(vol, obj, 4096, 12).unwrap(), b"acknowledged", "{ctx}");
            assert_eq!(pool.read(vol, obj, 0, 9).unwrap(), b"committed", "{ctx}");
            assert_clean(&pool);
            assert_eq!(identity(&disk).state, HostState::Active, "{ctx}");
        }
    }
    assert!(outcomes[0] > 0 && outcomes[1] > 0, "crashes landed on one side of the export only: {outcomes:?}");
}

/// Power lost at every device operation of the commit a read-write open makes to record
/// its host — after an export by another host, and on a pool without host state, whose
/// first such commit also rewrites both labels: the device says what it said before or
/// "active, new host", its labels verify, and the pool opens clean either way.
#[test]
fn a_crash_while_an_open_records_its_host_leaves_either_state() {
    let seed = seed_from_env(0x0DE_4000);
    let mut rng = SimRng::new(seed);
    for (before_host, export) in [(HOST_A, true), (0, false)] {
        let disk = Arc::new(SimDisk::new(DISK_BYTES, SECTOR));
        let (pool, vol, obj) = make_pool(&disk, before_host, seed);
        if export {
            pool.export().unwrap();
        } else {
            drop(pool);
        }
        let base = disk.current_image();
        let pre = identity(&disk);
        let count = Arc::new(SimDisk::from_image(base.clone(), SECTOR));
        drop(Pool::open(dev(&count), opts(HOST_B)).unwrap());
        let open_ops = count.op_count();
        assert!(open_ops >= 3 + 4 * u64::from(!export), "the open made {open_ops} device operations");
        let mut outcomes = [0u32; 2];
        for n in 0..=open_ops {
            let d = Arc::new(SimDisk::from_image(base.clone(), SECTOR));
            d.set_crash_after(n);
            let r = Pool::open(dev(&d), opts(HOST_B));
            assert!(r.is_ok() || d.has_crashed(), "open failed without a crash: {:?}", r.err());
            drop(r);
            for mode in [CrashMode::DropUnflushed, CrashMode::KeepAll, CrashMode::Random] {
                let ctx = format!("seed {seed}, before {:?}, crash after {n} of {open_ops}, {mode:?}", pre.state);
                let disk = Arc::new(SimDisk::from_image(d.crash_image(mode, &mut rng), SECTOR));
                let id = read_pool_identity(disk.as_ref()).unwrap_or_else(|e| panic!("{ctx}: identity: {e}"));
                let recorded = if (id.txg, id.host_id, id.state) == (pre.txg, pre.host_id, pre.state) {
                    false
                } else {
                    assert_eq!((id.txg, id.host_id, id.state), (pre.txg + 1, HOST_B, HostState::Active), "{ctx}");
                    true
                };
                outcomes[recorded as usize] += 1;
                let compat = label_compat(&disk);
                assert!(!recorded || compat == [COMPAT_HOST_STATE; 2], "{ctx}: a host state under labels {compat:?}");
                let pool = Pool::open(dev(&disk), read_only(0)).unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
                assert_eq!(pool.read(vol, obj, 0, 9).unwrap(), b"committed", "{ctx}");
                assert_clean(&pool);
            }
        }
        assert!(outcomes[0] > 0 && outcomes[1] > 0, "crashes landed on one side only: {outcomes:?}");
    }
}

#[test]
fn read_pool_identity_answers_non_pools_and_damage_with_errors() {
    let kind = |d: &SimDisk| read_pool_identity(d).map(|id| format!("{id:?}")).unwrap_err().kind();
    // Blank, too small, garbage: not a pool.
    assert_eq!(kind(&SimDisk::new(DISK_BYTES, SECTOR)), ErrorKind::NotFound);
    assert_eq!(kind(&SimDisk::new(4096, SECTOR)), ErrorKind::NotFound);
    assert_eq!(kind(&SimDisk::new(0, SECTOR)), ErrorKind::NotFound);
    let seed = seed_from_env(0x1D_0000);
    let mut rng = SimRng::new(seed);
    for _ in 0..iters_from_env(20) {
        let garbage = SimDisk::from_image(rng.bytes(1 << 20), SECTOR);
        assert_eq!(kind(&garbage), ErrorKind::NotFound, "seed {seed}");
    }
    // A log device is not a pool either, and the message says what it is.
    let (disk, log) = (Arc::new(SimDisk::new(DISK_BYTES, SECTOR)), Arc::new(SimDisk::new(MIN_LOG_DEVICE_SIZE, SECTOR)));
    let spec = LogDeviceSpec { dev: dev(&log), log_device_guid: 0x51 };
    drop(Pool::create_with_log(dev(&disk), test_create_options(5), Some(spec), opts(HOST_A)).unwrap());
    let e = read_pool_identity(log.as_ref()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(e.to_string().contains("intent-log device"), "{e}");
    assert_eq!(identity(&disk).log_device_guid, 0x51);

    // A pool whose labels are both damaged, or whose rings hold no root: corruption.
    let disk = Arc::new(SimDisk::new(DISK_BYTES, SECTOR));
    drop(make_pool(&disk, HOST_A, 6));
    let good = disk.current_image();
    let labels_rot = SimDisk::from_image(good.clone(), SECTOR);
    labels_rot.rot(40, 1);
    assert!(read_pool_identity(&labels_rot).is_ok(), "label 1 should still serve");
    labels_rot.rot(LABEL_SIZE + 40, 1);
    assert_eq!(kind(&labels_rot), ErrorKind::Corruption);
    let mut no_roots = good.clone();
    for label in 0..2 {
        let at = ring_slot_addr(label, 0) as usize;
        no_roots[at..at + (RING_SLOTS as usize) * UBER_SLOT_SIZE].fill(0xEE);
    }
    assert_eq!(kind(&SimDisk::from_image(no_roots, SECTOR)), ErrorKind::Corruption);

    // Random damage to the labels and rings: an answer or an error, never a panic, and an
    // answer is the pool's (its guid) at one of its txgs. (Only the labels and rings are
    // read, so only they are copied.)
    let want = identity(&disk);
    let head = &good[..2 * LABEL_SIZE as usize];
    for _ in 0..iters_from_env(200) {
        let mut img = head.to_vec();
        for _ in 0..rng.range(1, 64) {
            let at = rng.below(2 * LABEL_SIZE) as usize;
            img[at] = rng.next_u64() as u8;
        }
        match read_pool_identity(&SimDisk::from_image(img, SECTOR)) {
            Ok(id) => {
                assert_eq!(id.pool_guid, want.pool_guid, "seed {seed}");
                assert!(id.txg <= want.txg, "seed {seed}: txg {} from nowhere", id.txg);
            }
            Err(e) => assert!(matches!(e.kind(), ErrorKind::Corruption | ErrorKind::NotFound), "seed {seed}: {e}"),
        }
    }
}
