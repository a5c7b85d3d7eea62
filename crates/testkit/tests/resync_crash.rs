//! Power loss while a member is offline, on every redundant layout: a random workload with
//! syncs and commits; a member is taken offline (the power sometimes goes during that), the
//! workload goes on and the power goes at a random instant, each member tearing its
//! unflushed writes its own way. Every image set must reopen showing the last acknowledged
//! sync (or the one in flight); a member the labels call OFFLINE must come back with the
//! record the missed map kept (device/mirror/missed_map.rs), take more work while still
//! offline, be resynced from that record only, and then hold the pool alone: reopened with
//! as many other members left out as the layout tolerates, the contents are the same. The
//! power failure is the only error the workload may meet, and every run lost power.
//! Seeds print on failure; replay with STRATA_SEED=<seed>.

use std::sync::atomic::{AtomicU64, Ordering};
use strata_engine::format::member::Layout;
use strata_engine::{MemberState, Pool};
use strata_testkit::devset::{check_reopened_set, scrub_damage, sync_or_work, SimMirror};
use strata_testkit::model::capture;
use strata_testkit::workload::two_volumes;
use strata_testkit::{is_power_failure, run_seeds, test_create_options, test_pool_options, SimRng};

const SECTOR: usize = 512;
const SIZE: u64 = 24 << 20;

/// Cases met, per test: [the power went inside `offline`, the member came back offline and
/// was resynced from the map, log replayed at the reopen].
type Seen = [AtomicU64; 3];

#[test]
fn mirrors_resync_from_the_missed_map_after_power_loss() {
    static SEEN: Seen = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
    offline_crashes("mirrors_resync_from_the_missed_map_after_power_loss", Layout::Mirror, &[2, 3], 0x0ff1_0000, &SEEN);
}

#[test]
fn parity2_resyncs_from_the_missed_map_after_power_loss() {
    static SEEN: Seen = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
    offline_crashes(
        "parity2_resyncs_from_the_missed_map_after_power_loss",
        Layout::Parity2,
        &[4, 5],
        0x0ff2_0000,
        &SEEN,
    );
}

fn offline_crashes(name: &str, layout: Layout, sizes: &[usize], first_seed: u64, seen: &'static Seen) {
    run_seeds(name, first_seed, 40, |seed| {
        let mut rng = SimRng::new(seed);
        let ways = *rng.pick(sizes);
        let m = SimMirror::create_set(layout, ways, SIZE, SECTOR, seed);
        let pool = Pool::create(m.device(), test_create_options(seed), test_pool_options()).unwrap();
        let (mut model, vols) = two_volumes(&mut rng, &pool, &[4096u32, 16384]);
        let mut synced = vec![model.clone()];
        let mut acked = 0usize;
        let victim = rng.below(ways as u64) as usize;
        for _ in 0..rng.range(5, 40) {
            sync_or_work(&mut rng, &pool, &vols, &mut model, &mut synced, &mut acked).unwrap();
        }
        pool.commit().unwrap();
        synced.push(capture(&pool).unwrap());
        acked = synced.len() - 1;
        // Sometimes the power goes inside `offline` (its map and label writes).
        let during = rng.chance(15);
        if during {
            m.power.set_crash_after(rng.below(12));
        }
        let offlined = match m.dev.offline(victim) {
            Ok(()) => true,
            Err(e) => {
                assert!(m.power.has_crashed(), "seed {seed}: offline failed: {e}");
                false
            }
        };
        seen[0].fetch_add(u64::from(!offlined), Ordering::Relaxed);
        if offlined {
            m.power.set_crash_after(rng.below(400));
            for i in 0..rng.range(1, 60) {
                if let Err(e) = sync_or_work(&mut rng, &pool, &vols, &mut model, &mut synced, &mut acked) {
                    assert!(is_power_failure(&e), "seed {seed}: step {i} failed, not for the power: {e}");
                    break;
                }
            }
        }
        let images = m.crash_images(&mut rng, SECTOR);
        drop(pool);
        let (m2, notes) = SimMirror::open(images, true)
            .unwrap_or_else(|e| panic!("seed {seed}: the members do not open after the crash: {e}"));
        let pool = Pool::open(m2.device(), test_pool_options())
            .unwrap_or_else(|e| panic!("seed {seed}: the pool does not open after the crash: {e}"));
        let st = pool.status().devices.unwrap().members[victim].clone();
        if offlined {
            assert_eq!(st.state, MemberState::Offline, "seed {seed}: the member taken offline: {notes:?}");
            let note = st.note.clone().unwrap_or_default();
            assert!(note.contains("(the missed map)"), "seed {seed}: no record came back: {note}");
        }
        // Work while it is still offline, on the map it was opened with.
        let (replayed, _) = check_reopened_set(&pool, &synced, acked, &mut rng, seed);
        seen[2].fetch_add(u64::from(replayed), Ordering::Relaxed);
        if st.state == MemberState::Offline {
            m2.dev.online(victim).unwrap_or_else(|e| panic!("seed {seed}: online: {e}"));
            let note = pool.status().devices.unwrap().members[victim].note.clone().unwrap_or_default();
            let resynced = note.contains("being resynced");
            assert!(resynced || !offlined, "seed {seed}: the member was rebuilt, not resynced: {note}");
            seen[1].fetch_add(u64::from(resynced), Ordering::Relaxed);
            let mut steps = 0;
            while let Some(p) = pool.rebuild_step(256 << 10).unwrap() {
                steps += 1;
                assert!(steps < 100_000, "seed {seed}: the rebuild does not end");
                if p.done {
                    break;
                }
            }
        }
        assert_eq!(pool.status().devices.unwrap().members[victim].state, MemberState::Online, "seed {seed}");
        assert_eq!(scrub_damage(&pool), 0, "seed {seed}: damage after the resync");
        let want = capture(&pool).unwrap();
        drop(pool);
        let (m3, _) = SimMirror::open(m2.alone(layout, victim, SECTOR), true)
            .unwrap_or_else(|e| panic!("seed {seed}: the member alone does not open: {e}"));
        let pool = Pool::open(m3.device(), test_pool_options())
            .unwrap_or_else(|e| panic!("seed {seed}: the pool does not open from the member alone: {e}"));
        assert_eq!(capture(&pool).unwrap(), want, "seed {seed}: the resynced member does not hold the pool");
    });
    if !strata_testkit::replaying_seed() {
        let seen: Vec<u64> = seen.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        eprintln!(
            "{name}: power lost in offline {}, resynced from the map {}, log replayed {}",
            seen[0], seen[1], seen[2]
        );
        assert!(seen[1] > 0 && seen[2] > 0, "{name}: cases not met: {seen:?}");
    }
}
