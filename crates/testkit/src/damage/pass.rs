//! The pristine pool the damage is applied to, and the pass that meets a damaged image:
//! the offline checker, then a read-write pass (see the parent module).

use crate::{test_create_options, test_pool_options, SimDisk, SimRng};
use std::sync::Arc;
use strata_engine::{
    BlockDevice, CheckOptions, CheckReport, CompressionPolicy, Error, ObjectId, Pool, VolumeId, VolumeOptions,
};

/// Size of the pristine pool's device.
pub const IMAGE_BYTES: u64 = 24 << 20;
const SECTOR: usize = 4096;

// ---------------------------------------------------------------------------------------
// The pristine pool.

fn opts(record_size: u32) -> VolumeOptions {
    VolumeOptions { record_size, ..Default::default() }
}

/// A small pool holding most of what the format can express (see the module comment), as
/// its device image. Deterministic: the same bytes every call.
pub fn pristine_image() -> Vec<u8> {
    let disk = Arc::new(SimDisk::new(IMAGE_BYTES, SECTOR));
    let pool = Pool::create(disk.clone(), test_create_options(24), test_pool_options()).expect("create the pool");
    let mut rng = SimRng::new(24);
    let a = pool
        .create_volume("a", &VolumeOptions { compression: CompressionPolicy::Lz4, ..opts(4096) })
        .expect("volume a");
    let b = pool
        .create_volume("b", &VolumeOptions { dedup: true, reservation_bytes: 1 << 20, ..opts(16384) })
        .expect("volume b");
    let c = pool.create_volume("c", &opts(8192)).expect("volume c");
    let mut objects: Vec<(VolumeId, ObjectId, u32)> = Vec::new();
    for (vol, rs) in [(a, 4096u32), (b, 16384), (c, 8192)] {
        for i in 0..4u8 {
            let o = pool.create_object(vol, &rng.blob(40)).expect("object");
            let len = rs as usize * (1 + i as usize) + 300 * i as usize;
            let data = if i % 2 == 0 { crate::workload::compressible(&mut rng, len) } else { rng.bytes(len) };
            pool.write(vol, o, rng.below(3) * rs as u64, &data).expect("write");
            pool.kv_put(vol, &[b'k', i], &rng.blob(60)).expect("kv");
            objects.push((vol, o, rs));
        }
    }
    // Two levels of indirect blocks: records 0 and 300 of a 4 KiB-record object.
    let sparse = pool.create_object(a, b"sparse").expect("object");
    pool.write(a, sparse, 0, &rng.bytes(4096)).expect("write");
    pool.write(a, sparse, 300 * 4096, &rng.bytes(5000)).expect("write");
    // Dedup: the same records in two objects of b.
    let same = rng.bytes(2 * 16384);
    for _ in 0..2 {
        let o = pool.create_object(b, b"dup").expect("object");
        pool.write(b, o, 0, &same).expect("write");
    }
    // Trees of more than one node: many key-value entries in c (its volume tree), and many
    // small objects in a, deleted after the snapshot (deadlist entries in the catalog).
    for i in 0..240u32 {
        pool.kv_put(c, &[&b"entry-"[..], &i.to_be_bytes()].concat(), &rng.bytes(100)).expect("kv");
    }
    let mut small = Vec::new();
    for i in 0..160u32 {
        let o = pool.create_object(a, &i.to_le_bytes()).expect("object");
        pool.write(a, o, 0, &rng.bytes(700)).expect("write");
        small.push(o);
    }
    pool.commit().expect("commit");
    pool.create_snapshots(&["a"], "s1").expect("snapshot a@s1");
    for o in small {
        pool.delete_object(a, o).expect("delete");
    }
    pool.create_snapshots(&["b", "c"], "g1").expect("group snapshot");
    // Diverge from the snapshots: overwrite, delete (deadlists), truncate.
    for &(vol, o, rs) in objects.iter().step_by(2) {
        pool.write(vol, o, 0, &rng.bytes(rs as usize)).expect("overwrite");
    }
    pool.delete_object(objects[1].0, objects[1].1).expect("delete");
    pool.truncate(objects[9].0, objects[9].1, 100).expect("truncate");
    pool.commit().expect("commit");
    pool.create_snapshots(&["a"], "s2").expect("snapshot a@s2");
    pool.write(a, sparse, 4096, &rng.bytes(4096)).expect("write");
    pool.commit().expect("commit");
    let clone = pool.clone_volume("a", "s1", "a-clone").expect("clone");
    let co = pool.create_object(clone, b"in the clone").expect("object");
    pool.write(clone, co, 0, &rng.bytes(6000)).expect("write");
    pool.set_capacity_alert(20).expect("capacity alert");
    pool.commit().expect("commit");
    // Operations only the intent log holds: a 64 KiB write (by reference), small writes,
    // a create, a delete and key-value changes.
    let lo = pool.create_object(c, b"logged").expect("object");
    pool.write(c, lo, 0, &rng.bytes(65536)).expect("write");
    pool.write(a, objects[0].1, 10, &rng.bytes(100)).expect("write");
    pool.kv_put(b, b"logged", b"value").expect("kv");
    pool.kv_delete(c, &[b'k', 0]).expect("kv");
    pool.delete_object(c, objects[8].1).expect("delete");
    pool.sync_log().expect("sync the intent log");
    let image = disk.current_image();
    drop(pool);
    image
}

// ---------------------------------------------------------------------------------------
// Meeting the damage.

/// What the checker and the read-write pass made of an image.
#[derive(Debug)]
pub struct Outcome {
    /// The offline check (opened read-only): the report, or why the pool did not open.
    pub offline: Result<CheckReport, Error>,
    /// Errors of the read-write pass, in order (opening, reads, writes, commits, close).
    pub errors: Vec<String>,
}

impl Outcome {
    /// The checker looked at the root of txg `txg` and reported problems.
    pub fn checker_reported(&self, txg: u64) -> bool {
        matches!(&self.offline, Ok(r) if r.txg == txg && !r.is_clean())
    }
}

const READ_MAX: u64 = 256 << 10;
/// Bounds every listing loop: a damaged tree must not keep the pass going forever.
const BATCHES_MAX: usize = 1000;

fn note<T>(errors: &mut Vec<String>, during: &str, r: strata_engine::Result<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            if errors.len() < 50 {
                errors.push(format!("{during}: {e}"));
            }
            None
        }
    }
}

/// Read what volume (or snapshot view) `vol` holds, in bounded amounts: every object's
/// head and tail, attribute and block root, and every key-value entry.
fn read_volume(pool: &Pool, vol: VolumeId, errors: &mut Vec<String>) {
    note(errors, "volume info", pool.volume_info(vol));
    let mut after = None;
    for _ in 0..BATCHES_MAX {
        let Some(ids) = note(errors, "list objects", pool.list_objects(vol, after, 64)) else { break };
        let Some(&last) = ids.last() else { break };
        for id in ids {
            let Some(size) = note(errors, "object size", pool.object_size(vol, id)) else { continue };
            note(errors, "read", pool.read(vol, id, 0, size.min(READ_MAX) as usize));
            if size > READ_MAX {
                note(errors, "read the tail", pool.read(vol, id, size - 4096, 4096));
            }
            note(errors, "attribute", pool.get_attr(vol, id));
            note(errors, "block root", pool.object_block_root(vol, id));
        }
        after = Some(last);
    }
    let mut start = Vec::new();
    for _ in 0..BATCHES_MAX {
        let Some(batch) = note(errors, "key-value range", pool.kv_range(vol, &start, None, 256)) else { break };
        let Some((last, _)) = batch.last() else { break };
        start = last.clone();
        start.push(0);
    }
}

/// Every volume, and every snapshot through a read-only view.
fn read_all(pool: &Pool, errors: &mut Vec<String>) {
    let _ = pool.status();
    for info in pool.volumes() {
        read_volume(pool, info.id, errors);
    }
    for s in note(errors, "list snapshots", pool.snapshots(None)).unwrap_or_default() {
        if let Some(view) = note(errors, "open a snapshot view", pool.open_snapshot_view(&s.volume, &s.name)) {
            read_volume(pool, view, errors);
            pool.close_snapshot_view(view);
        }
    }
}

/// Change every volume a little: new objects, overwrites (whole and partial records),
/// truncates, punches, a delete, key-value changes.
fn write_some(pool: &Pool, round: u8, errors: &mut Vec<String>) {
    let mut rng = SimRng::new(round as u64);
    for info in pool.volumes() {
        let vol = info.id;
        let rs = info.record_size as u64;
        if let Some(o) = note(errors, "create object", pool.create_object(vol, &[round; 8])) {
            note(errors, "write", pool.write(vol, o, 0, &rng.bytes(3 * rs as usize)));
        }
        let ids = note(errors, "list objects", pool.list_objects(vol, None, 6)).unwrap_or_default();
        for (i, &id) in ids.iter().enumerate() {
            match i % 4 {
                0 => note(errors, "overwrite", pool.write(vol, id, 0, &rng.bytes(rs as usize))),
                1 => note(errors, "partial write", pool.write(vol, id, 10, &rng.bytes(100))),
                2 => note(errors, "truncate", pool.truncate(vol, id, rs + 7)),
                _ => note(errors, "punch", pool.punch_hole(vol, id, 0, rs)),
            };
        }
        if let Some(&id) = ids.last() {
            note(errors, "delete object", pool.delete_object(vol, id));
        }
        note(errors, "kv put", pool.kv_put(vol, &[b'n', round], &[round; 20]));
        note(errors, "kv delete", pool.kv_delete(vol, &[b'k', 1]));
    }
}

/// Run the offline checker over `image` (opened read-only), then open it read-write and
/// read everything, write, snapshot, split the clone, restore, clone, delete snapshots and
/// a volume, commit and close. Errors are collected; a panic is left to unwind to the caller.
pub fn exercise(image: &[u8]) -> Outcome {
    let disk = || Arc::new(SimDisk::from_image(image.to_vec(), SECTOR)) as Arc<dyn BlockDevice>;
    let mut ro = test_pool_options();
    ro.read_only = true;
    let offline = Pool::open(disk(), ro).and_then(|pool| {
        let report = pool.check(CheckOptions::default());
        read_all(&pool, &mut Vec::new());
        report
    });
    let mut errors = Vec::new();
    let Some(pool) = note(&mut errors, "open", Pool::open(disk(), test_pool_options())) else {
        return Outcome { offline, errors };
    };
    read_all(&pool, &mut errors);
    write_some(&pool, 1, &mut errors);
    note(&mut errors, "commit", pool.commit());
    let names: Vec<String> = pool.volumes().into_iter().map(|v| v.name).collect();
    if let Some(first) = names.first() {
        note(&mut errors, "snapshot", pool.create_snapshots(&[first.as_str()], "later"));
    }
    write_some(&pool, 2, &mut errors);
    note(&mut errors, "commit", pool.commit());
    // Splitting the clone copies what it shares; deleting snapshots frees through the
    // deadlists; deleting a volume frees its trees.
    note(&mut errors, "split clone", pool.split_clone("a-clone"));
    note(&mut errors, "commit", pool.commit());
    // A restore re-acquires a snapshot's tree.
    note(&mut errors, "restore", pool.restore_volume("a", "s2"));
    note(&mut errors, "commit", pool.commit());
    for s in note(&mut errors, "list snapshots", pool.snapshots(None)).unwrap_or_default().into_iter().take(3) {
        note(&mut errors, "delete snapshot", pool.delete_snapshot(&s.volume, &s.name));
        note(&mut errors, "commit", pool.commit());
    }
    // A new clone shares the tree of a snapshot that is left.
    if let Some(s) = note(&mut errors, "list snapshots", pool.snapshots(None)).unwrap_or_default().last() {
        if let Some(clone) = note(&mut errors, "clone", pool.clone_volume(&s.volume, &s.name, "late-clone")) {
            note(&mut errors, "write the clone", pool.write(clone, ObjectId(1), 0, b"cloned"));
        }
    }
    note(&mut errors, "delete volume", pool.delete_volume("c"));
    note(&mut errors, "commit", pool.commit());
    read_all(&pool, &mut errors);
    write_some(&pool, 3, &mut errors);
    note(&mut errors, "close", pool.close());
    Outcome { offline, errors }
}
