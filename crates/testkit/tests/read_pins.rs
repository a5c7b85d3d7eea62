//! Read pins (pool/read_pin.rs): a read planned under the pool's lock and finished outside
//! it finds the blocks it planned even when commits free them and the allocator wraps
//! around over their units meanwhile — without a checksum mismatch and without counting a
//! corruption, on a pool whose checksum (CRC-32C) is not trusted to notice reuse.
//! (Mutation check: with `Allocator::set_oldest_read_pin` ignored, the first test reads
//! other data and fails.)

use std::sync::Arc;
use strata_engine::{ChecksumAlgo, ErrorKind, Pool, VolumeOptions};
use strata_testkit::{test_create_options, test_pool_options, SimDisk};

const RECORD: usize = 16 << 10;

fn pattern(tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ tag).collect()
}

fn crc_pool() -> Pool {
    let disk = Arc::new(SimDisk::new(24 << 20, 4096));
    let mut create = test_create_options(3);
    create.checksum = ChecksumAlgo::Crc32c;
    Pool::create(disk, create, test_pool_options()).unwrap()
}

/// Layout: object A at the start of the data area, ballast after it, a small free tail.
/// With a read of A pinned, A is rewritten (its old blocks freed) and B is appended and
/// committed until the pool is full: the allocator wraps round to the start, where only
/// the pin keeps B's records off A's old blocks. The read then returns A's bytes.
#[test]
fn a_pinned_read_finds_its_blocks_after_they_are_freed_and_the_pool_wraps() {
    let pool = crc_pool();
    let vol = pool.create_volume("db", &VolumeOptions::default()).unwrap();
    let a = pool.create_object(vol, b"").unwrap();
    let original = pattern(0xa5, 64 * RECORD);
    pool.write(vol, a, 0, &original).unwrap();
    pool.commit().unwrap();
    let ballast = pool.create_object(vol, b"").unwrap();
    let mut off = 0u64;
    while pool.status().space.available_bytes > 3 << 20 {
        pool.write(vol, ballast, off, &pattern(0x11, 16 * RECORD)).unwrap();
        pool.commit().unwrap();
        off += 16 * RECORD as u64;
    }

    let read = pool.plan_read(vol, a, 0, original.len()).unwrap();
    assert_eq!(pool.reads_in_flight(), 1);
    pool.write(vol, a, 0, &pattern(0x5a, original.len())).unwrap();
    pool.commit().unwrap();
    let b = pool.create_object(vol, b"").unwrap();
    let (mut off, mut full) = (0u64, false);
    for _ in 0..200 {
        let r = pool.write(vol, b, off, &pattern(0x77, 8 * RECORD)).and_then(|_| pool.commit().map(|_| ()));
        match r {
            Ok(()) => off += 8 * RECORD as u64,
            Err(e) if e.kind() == ErrorKind::NoSpace => {
                full = true;
                break;
            }
            Err(e) => panic!("writing B: {e}"),
        }
    }
    assert!(full, "B filled the pool (the allocator went round over A's freed blocks)");
    let got: Vec<u8> = read.finish().unwrap().iter().flat_map(|p| p.as_slice().to_vec()).collect();
    assert!(got == original, "the pinned read returned other bytes than those it planned");
    assert_eq!(pool.status().corruptions_detected, 0);
    assert!(pool.status().held_bytes >= original.len() as u64, "the pinned blocks stay held");

    // Once the pin is dropped, commits release what it held and B can grow again.
    let held_pinned = pool.status().held_bytes;
    drop(read);
    assert_eq!(pool.reads_in_flight(), 0);
    pool.commit_for_space().unwrap();
    pool.commit_for_space().unwrap();
    let held_after = pool.status().held_bytes;
    assert!(held_after < held_pinned, "held space returns once the read is done: {held_pinned} → {held_after}");
    pool.write(vol, b, off, &pattern(0x78, RECORD)).unwrap();
    pool.commit().unwrap();
}

/// A read whose plan fails (no such object) leaves no pin behind.
#[test]
fn a_failed_plan_leaves_no_pin() {
    let pool = crc_pool();
    let vol = pool.create_volume("db", &VolumeOptions::default()).unwrap();
    assert!(pool.plan_read(vol, strata_engine::ObjectId(999), 0, 10).is_err());
    assert_eq!(pool.reads_in_flight(), 0);
}
