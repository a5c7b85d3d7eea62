//! The sync gate (engine pool/sync_gate.rs): a closed gate fails every sync of a gated
//! volume — checked before the log write and after it, so a gate that closes while a sync
//! is under way fails that sync too — and what was written stays in the pool.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use strata_engine::pool::sync_gate::SyncGate;
use strata_engine::{Pool, VolumeOptions};
use strata_testkit::{test_create_options, test_pool_options, SimDisk};

/// Open until `closes_after` more checks have passed.
struct Lease {
    open: AtomicBool,
    closes_after: AtomicU32,
}

impl SyncGate for Lease {
    fn check(&self, vol: Option<u64>) -> Result<(), String> {
        if self.open.load(Ordering::Relaxed) {
            if self.closes_after.fetch_sub(1, Ordering::Relaxed) == 1 {
                self.open.store(false, Ordering::Relaxed);
            }
            return Ok(());
        }
        Err(format!("volume {vol:?}: the lease is not held"))
    }
}

#[test]
fn a_closed_gate_fails_syncs_and_an_open_one_lets_them_through() {
    let disk = Arc::new(SimDisk::new(32 << 20, 512));
    let pool = Pool::create(disk, test_create_options(3), test_pool_options()).unwrap();
    let vol = pool.create_volume("db", &VolumeOptions::default()).unwrap();
    let obj = pool.create_object(vol, b"f").unwrap();
    let gate = Arc::new(Lease { open: AtomicBool::new(true), closes_after: AtomicU32::new(u32::MAX) });
    pool.set_sync_gate(Some(gate.clone()));
    pool.write(vol, obj, 0, b"one").unwrap();
    pool.sync_object(vol, obj).unwrap();

    gate.open.store(false, Ordering::Relaxed);
    pool.write(vol, obj, 0, b"two").unwrap();
    let e = pool.sync_object(vol, obj).expect_err("a closed gate fails the sync");
    assert!(e.to_string().contains("fenced") && e.to_string().contains("lease"), "{e}");
    assert!(pool.sync_log().is_err(), "a sync of the whole pool is refused too");

    // Closing while the sync runs (the first check passes, the one after the log write
    // does not): refused as well.
    gate.closes_after.store(1, Ordering::Relaxed);
    gate.open.store(true, Ordering::Relaxed);
    pool.write(vol, obj, 0, b"three").unwrap();
    pool.sync_object(vol, obj).expect_err("the gate closed during the sync");

    // The writes stay in the pool; with the gate open again the next sync goes through.
    gate.closes_after.store(u32::MAX, Ordering::Relaxed);
    gate.open.store(true, Ordering::Relaxed);
    pool.sync_object(vol, obj).unwrap();
    assert_eq!(pool.read(vol, obj, 0, 5).unwrap(), b"three");
    pool.set_sync_gate(None);
    pool.sync_log().unwrap();
}
