//! Power loss during a rebuild, on every redundant layout: a random workload with syncs and
//! commits on a mirror (2- or 3-way) or a parity2 set (4 to 6 members); at a random point a
//! member is taken offline and brought back, or replaced by a new disk, and rebuilt in
//! small steps between the workload's operations; the power goes at a random instant —
//! before, during or after the rebuild, often inside one of its copies. Every image set
//! must reopen, show exactly the last acknowledged sync (or the one in flight), pass a
//! scrub, resume an unfinished rebuild where its labels say and finish it; then the rebuilt
//! member must stand in for the others: the set reopened with as many of the *other*
//! members left out as the layout tolerates holds the same contents. The power failure is
//! the only error the workload or the rebuild may meet, and every run lost power.
//! Seeds print on failure; replay with STRATA_SEED=<seed>.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use strata_engine::format::member::Layout;
use strata_engine::{BlockDevice, MemberState, Pool};
use strata_testkit::devset::{check_reopened_set, scrub_damage, sync_or_work, SimMirror};
use strata_testkit::model::capture;
use strata_testkit::workload::two_volumes;
use strata_testkit::{is_power_failure, run_seeds, test_create_options, test_pool_options, SimDisk, SimRng};

const SECTOR: usize = 512;
const SIZE: u64 = 24 << 20;

/// Cases met, per test: [power lost during the rebuild, the rebuild ended before it,
/// resumed after the reopen, log replayed at the reopen].
type Seen = [AtomicU64; 4];

#[test]
fn mirrors_survive_power_loss_during_a_rebuild() {
    static SEEN: Seen = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
    rebuild_crashes("mirrors_survive_power_loss_during_a_rebuild", Layout::Mirror, &[2, 3], 0x7eb1_0000, &SEEN);
}

#[test]
fn parity2_survives_power_loss_during_a_rebuild() {
    static SEEN: Seen = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
    rebuild_crashes("parity2_survives_power_loss_during_a_rebuild", Layout::Parity2, &[4, 5, 6], 0x7eb2_0000, &SEEN);
}

/// Members of the set that may be missing at once.
fn tolerance(layout: Layout, ways: usize) -> usize {
    match layout {
        Layout::Parity2 => 2,
        _ => ways - 1,
    }
}

/// Copies of `images` with as many members other than `keep` left out as the layout
/// tolerates.
fn without_others(images: &[Option<Arc<SimDisk>>], layout: Layout, keep: usize) -> Vec<Option<Arc<SimDisk>>> {
    let mut out = 0;
    let tolerated = tolerance(layout, images.len());
    images
        .iter()
        .enumerate()
        .map(|(j, d)| {
            if j != keep && out < tolerated {
                out += 1;
                return None;
            }
            d.as_ref().map(|d| Arc::new(SimDisk::from_image(d.current_image(), SECTOR)))
        })
        .collect()
}

fn rebuild_crashes(name: &str, layout: Layout, sizes: &[usize], first_seed: u64, seen: &'static Seen) {
    run_seeds(name, first_seed, 50, |seed| {
        let mut rng = SimRng::new(seed);
        let ways = *rng.pick(sizes);
        let mut m = SimMirror::create_set(layout, ways, SIZE, SECTOR, seed);
        let pool = Pool::create(m.device(), test_create_options(seed), test_pool_options()).unwrap();
        let (mut model, vols) = two_volumes(&mut rng, &pool, &[4096u32, 16384]);
        let mut synced = vec![model.clone()];
        let mut acked = 0usize;
        let ops = rng.range(40, 160);
        let start_op = rng.below(ops / 2);
        // Mostly after the rebuild started (it takes tens of steps), sometimes before.
        let crash_op = if rng.chance(5) { rng.below(ops) } else { rng.range(start_op, ops) };
        let victim = rng.below(ways as u64) as usize;
        let window = *rng.pick(&[64u64 << 10, 256 << 10, 1 << 20]);
        let mut rebuilding = false;
        let mut rebuilt = false;
        let mut lost_during = false;
        for i in 0..ops {
            if i == crash_op {
                m.power.set_crash_after(rng.below(60));
            }
            if i == start_op && !m.power.has_crashed() {
                if let Err(e) = m.dev.offline(victim) {
                    // Taking it offline writes the missed map and the labels.
                    assert!(m.power.has_crashed(), "seed {seed}: offline failed: {e}");
                    break;
                }
                // Work the member misses (acknowledged syncs among it, in the log only).
                for _ in 0..rng.range(1, 12) {
                    if sync_or_work(&mut rng, &pool, &vols, &mut model, &mut synced, &mut acked).is_err() {
                        break;
                    }
                }
                let r = if rng.chance(50) {
                    m.dev.online(victim)
                } else {
                    let fresh = Arc::new(SimDisk::new(SIZE, SECTOR));
                    fresh.share_power(m.power.clone());
                    m.disks[victim] = fresh.clone();
                    m.dev.replace(victim, fresh, 0x900 + victim as u64)
                };
                match r {
                    Ok(()) => rebuilding = true,
                    Err(e) => {
                        assert!(m.power.has_crashed(), "seed {seed}: starting the rebuild failed: {e}");
                        break;
                    }
                }
            }
            if rebuilding && !rebuilt {
                match pool.rebuild_step(window) {
                    Ok(Some(p)) => rebuilt = p.done,
                    Ok(None) => panic!("seed {seed}: the rebuild ended without being done"),
                    Err(e) => {
                        assert!(is_power_failure(&e), "seed {seed}: rebuild step {i} failed: {e}");
                        lost_during = true;
                        break;
                    }
                }
            }
            if let Err(e) = sync_or_work(&mut rng, &pool, &vols, &mut model, &mut synced, &mut acked) {
                assert!(
                    is_power_failure(&e),
                    "seed {seed}: step {i} failed, and not because the power went ({}): {e}; victim {victim}, rebuild from step {start_op}: {:#?}",
                    m.power.has_crashed(),
                    m.dev.set_status()
                );
                lost_during = rebuilding && !rebuilt;
                break;
            }
        }
        if !m.power.has_crashed() && rebuilding && !rebuilt {
            lost_during = true;
        }
        seen[0].fetch_add(u64::from(lost_during), Ordering::Relaxed);
        seen[1].fetch_add(u64::from(rebuilt), Ordering::Relaxed);
        let images = m.crash_images(&mut rng, SECTOR);
        drop(pool);
        if rebuilt {
            // Rebuilt before the power went: the member must stand in for the others at
            // once — every acknowledged sync there, those still in the log included.
            let alone = without_others(&images, layout, victim);
            let (m1, _) = SimMirror::open(alone, true)
                .unwrap_or_else(|e| panic!("seed {seed}: the rebuilt member does not open without the others: {e}"));
            let pool = Pool::open(m1.device(), test_pool_options())
                .unwrap_or_else(|e| panic!("seed {seed}: the pool does not open from the rebuilt member: {e}"));
            check_reopened_set(&pool, &synced, acked, &mut rng, seed);
        }
        let (m2, _notes) = SimMirror::open(images, true)
            .unwrap_or_else(|e| panic!("seed {seed}: the members do not open after the crash: {e}"));
        let pool = Pool::open(m2.device(), test_pool_options())
            .unwrap_or_else(|e| panic!("seed {seed}: the pool does not open after the crash: {e}"));
        let (replayed, _) = check_reopened_set(&pool, &synced, acked, &mut rng, seed);
        seen[3].fetch_add(u64::from(replayed), Ordering::Relaxed);
        let state = pool.status().devices.unwrap().members[victim].state;
        if state == MemberState::Rebuilding {
            seen[2].fetch_add(1, Ordering::Relaxed);
        }
        if matches!(state, MemberState::Offline | MemberState::Stale) && m2.dev.online(victim).is_err() {
            // A new disk whose own label the power cut kept out: not found at the open, so
            // it is replaced again (what an administrator would do).
            let disk = m2.disks[victim].clone();
            m2.dev
                .replace(victim, disk, 0xa00 + victim as u64)
                .unwrap_or_else(|e| panic!("seed {seed}: replace after the reopen: {e}"));
        }
        // A new disk whose labels the power cut kept out is not a member: nothing to check.
        let stands_in = state != MemberState::Unavailable && state != MemberState::Removed;
        if stands_in && state != MemberState::Online {
            let mut steps = 0;
            while let Some(p) = pool.rebuild_step(window).unwrap() {
                steps += 1;
                assert!(steps < 100_000, "seed {seed}: the rebuild does not end");
                if p.done {
                    break;
                }
            }
            let state = pool.status().devices.unwrap().members[victim].state;
            assert_eq!(state, MemberState::Online, "seed {seed}: the rebuilt member");
        }
        assert_eq!(scrub_damage(&pool), 0, "seed {seed}: damage after the rebuild");
        let want = capture(&pool).unwrap();
        if !stands_in {
            return;
        }
        // The rebuilt member (or, without a rebuild, any) stands in for the others.
        let images: Vec<_> = m2.disks.iter().map(|d| Some(d.clone())).collect();
        let alone = without_others(&images, layout, victim);
        drop(pool);
        let (m3, _) = SimMirror::open(alone, true)
            .unwrap_or_else(|e| panic!("seed {seed}: the set without the others does not open: {e}"));
        let pool = Pool::open(m3.device(), test_pool_options())
            .unwrap_or_else(|e| panic!("seed {seed}: the pool without the others does not open: {e}"));
        assert_eq!(capture(&pool).unwrap(), want, "seed {seed}: the rebuilt member does not hold the pool");
    });
    if !strata_testkit::replaying_seed() {
        let seen: Vec<u64> = seen.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert!(
            seen.iter().all(|&n| n > 0),
            "cases not met [lost during, rebuilt before, resumed, replayed]: {seen:?}"
        );
    }
}
