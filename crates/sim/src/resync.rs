//! The device admin of a set run (`Rig::resync`): takes a member that has no fault offline
//! while the writers, the committer and the admin work, brings it back online and runs the
//! rebuild — a resync of what it missed (device/mirror/missed.rs) — to its end, a few times.
//! The writes that race `offline` and `online` are the ones the record must not lose: a
//! range lost there leaves the member stale, which the checks after the crash find (the
//! member read alone when another is left out, or a scrub).

use crate::threads::Ctx;
use std::sync::Arc;
use strata_engine::sync::atomic::Ordering;
use strata_engine::sync::thread;
use strata_engine::{Error, MemberState};
use strata_testkit::SimRng;

/// Rebuild windows: small, so that a resync takes many steps beside the writers.
const WINDOWS: [u64; 3] = [64 << 10, 256 << 10, 1 << 20];

pub fn device_admin(ctx: Arc<Ctx>) {
    let rig = &ctx.rig;
    let Some(set) = rig.device.as_mirror() else { return };
    let mut rng = SimRng::new(ctx.seed ^ 0xDE_AD31);
    let candidates: Vec<usize> = (0..rig.members.len()).filter(|i| !rig.victims.contains(i)).collect();
    for round in 0..rng.range(1, 4) {
        let v = *rng.pick(&candidates);
        let doing = format!("device admin round {round}: member {v}");
        rig.out_of_sync.store(v, Ordering::SeqCst);
        if let Err(e) = set.offline(v) {
            // Refused: a faulted member left too few in sync (or the power went and faulted
            // them). Nothing was taken out.
            if crate::tracing() {
                eprintln!("{doing}: offline refused: {e}");
            }
            rig.out_of_sync.store(usize::MAX, Ordering::SeqCst);
            return;
        }
        if crate::tracing() {
            eprintln!("{doing}: offline");
        }
        for _ in 0..rng.range(1, 40) {
            thread::yield_now();
        }
        if let Err(e) = set.online(v) {
            // Refused when the power failure faulted the members it would copy from.
            let refused = rig.has_crashed() && matches!(e, Error::InvalidArgument(_));
            if !refused {
                ctx.expect_failure(&e, &format!("{doing} (online)"));
            }
            return;
        }
        let window = *rng.pick(&WINDOWS);
        loop {
            match ctx.pool.rebuild_step(window) {
                Ok(Some(p)) if p.done => break,
                Ok(Some(_)) => thread::yield_now(),
                // No rebuild any more: done, or cancelled because the member failed (the
                // power went while it was written); only the first ends its time out.
                Ok(None) => break,
                Err(e) => {
                    ctx.expect_failure(&e, &format!("{doing} (rebuild step)"));
                    return;
                }
            }
        }
        let state = ctx.pool.status().devices.and_then(|d| d.members.get(v).map(|m| m.state));
        if state != Some(MemberState::Online) {
            if crate::tracing() {
                eprintln!("{doing}: the resync ended with the member {state:?}");
            }
            return;
        }
        if crate::tracing() {
            eprintln!("{doing}: resynced");
        }
        rig.out_of_sync.store(usize::MAX, Ordering::SeqCst);
        for _ in 0..rng.range(1, 20) {
            thread::yield_now();
        }
    }
}
