//! Crashes and device faults on parity2 sets: random workloads with syncs and commits on
//! four to six simulated disks on one power supply. At random points up to two members fail
//! (disappear, return write errors, or rot), then the power goes at a random instant (often
//! inside a commit or a log write); each member loses its unflushed writes its own way.
//! The images reopen with up to two members left out in all — failed ones, or healthy ones
//! when none failed: a crash followed by the loss of two devices, the case the RAID write
//! hole loses data in. Each must pass the checker and show exactly the last acknowledged
//! sync or the one in flight; a scrub repairs every rotted unit and a second finds none.
//! The power failure is the only error a workload may meet, and every run lost power.
//! Seeds print on failure; replay with STRATA_SEED=<seed>.

use std::sync::atomic::{AtomicU64, Ordering};
use strata_engine::format::member::{Layout, MEMBER_AREA_BYTES};
use strata_engine::{BlockDevice, Pool};
use strata_testkit::devset::{check_reopened_set, sync_or_work, SimMirror};
use strata_testkit::workload::two_volumes;
use strata_testkit::{is_power_failure, run_seeds, test_create_options, test_pool_options, SimDisk, SimRng};

const SECTOR: usize = 512;
const SIZE: u64 = 24 << 20;

/// [log replayed at reopen, a member had failed, two members out at reopen, units repaired]
static SEEN: [AtomicU64; 4] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    Gone,
    WriteErrors,
    Rot,
}

#[test]
fn parity2_survives_two_member_faults_and_power_loss() {
    run_seeds("parity2_survives_two_member_faults_and_power_loss", 0x9a41_0000, 100, |seed| {
        let mut rng = SimRng::new(seed);
        let members = *rng.pick(&[4usize, 5, 6]);
        let m = SimMirror::create_set(Layout::Parity2, members, SIZE, SECTOR, seed);
        let pool = Pool::create(m.device(), test_create_options(seed), test_pool_options()).unwrap();
        let (mut model, vols) = two_volumes(&mut rng, &pool, &[4096u32, 8192, 16384]);
        let mut synced = vec![model.clone()];
        let mut acked = 0usize;
        let ops = rng.range(20, 120);
        let crash_op = rng.below(ops);
        // Up to two faults on distinct members, each at its own step.
        let victims: Vec<usize> = {
            let a = rng.below(members as u64) as usize;
            let b = (a + 1 + rng.below(members as u64 - 1) as usize) % members;
            if rng.chance(50) {
                vec![a, b]
            } else {
                vec![a]
            }
        };
        let faults: Vec<(u64, Fault)> = victims
            .iter()
            .map(|_| (rng.below(ops), *rng.pick(&[Fault::Gone, Fault::WriteErrors, Fault::Rot])))
            .collect();
        for i in 0..ops {
            for (v, &(at, fault)) in victims.iter().zip(&faults) {
                if at == i {
                    match fault {
                        Fault::Gone => m.disks[*v].set_gone(true),
                        Fault::WriteErrors => m.disks[*v].fail_writes(u32::MAX),
                        Fault::Rot => rot_some(&mut rng, &m.disks[*v], 20),
                    }
                }
            }
            if i == crash_op {
                m.power.set_crash_after(rng.below(60));
            }
            let r = sync_or_work(&mut rng, &pool, &vols, &mut model, &mut synced, &mut acked);
            if let Err(e) = r {
                assert!(
                    is_power_failure(&e),
                    "seed {seed}: step {i} failed, and not because the power went: {e}; {faults:?} on {victims:?}: {:#?}",
                    m.dev.set_status()
                );
                break;
            }
        }
        // The power is cut (if the workload did not) before the pool is dropped.
        let mut images = m.crash_images(&mut rng, SECTOR);
        drop(pool);
        // Members that failed stay failed (a gone one may stay away); then healthy members
        // are left out while fewer than two are out of the set — a rotted member counts
        // as out, as its rotted units are.
        let failed: Vec<usize> =
            victims.iter().zip(&faults).filter(|(_, (at, f))| *at < ops && *f != Fault::Rot).map(|(v, _)| *v).collect();
        if !failed.is_empty() {
            SEEN[1].fetch_add(1, Ordering::Relaxed);
        }
        for (v, (_, f)) in victims.iter().zip(&faults) {
            if *f == Fault::Gone && rng.chance(50) {
                images[*v] = None;
            }
        }
        let mut out = victims.len();
        while out < 2 {
            let c = rng.below(members as u64) as usize;
            if !victims.contains(&c) && images[c].is_some() {
                images[c] = None;
                out += 1;
            }
        }
        if victims.len() < 2 {
            SEEN[2].fetch_add(1, Ordering::Relaxed);
        }
        let (m2, _notes) = SimMirror::open(images, true)
            .unwrap_or_else(|e| panic!("seed {seed}: the members do not open after the crash: {e}"));
        let pool = Pool::open(m2.device(), test_pool_options())
            .unwrap_or_else(|e| panic!("seed {seed}: the pool does not open after the crash: {e}"));
        let (replayed, repaired) = check_reopened_set(&pool, &synced, acked, &mut rng, seed);
        SEEN[0].fetch_add(u64::from(replayed), Ordering::Relaxed);
        SEEN[3].fetch_add(u64::from(repaired), Ordering::Relaxed);
    });
    if !strata_testkit::replaying_seed() {
        let seen: Vec<u64> = SEEN.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert!(seen.iter().all(|&n| n > 0), "cases not met [replayed, failed, two out, repaired]: {seen:?}");
    }
}

/// Flip a bit in `n` random places of the member's rows, durably.
fn rot_some(rng: &mut SimRng, disk: &SimDisk, n: usize) {
    let from = MEMBER_AREA_BYTES + (8 << 20);
    for _ in 0..n {
        let at = from + rng.below(SIZE - from - 4096);
        disk.rot(at, rng.below(8) as u8);
    }
}
