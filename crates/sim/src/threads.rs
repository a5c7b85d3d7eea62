//! The simulated threads of the mixed run: writers, a committer, and what they share.

use crate::disk::InjectedFault;
use crate::history::{digest_object, digest_value, Clock, Line};
use crate::ops::{read_and_verify, ObjOp};
use crate::rig::Rig;
use std::sync::Arc;
use strata_engine::sync::atomic::{AtomicBool, Ordering};
use strata_engine::{Error, ObjectId, Pool, VolumeId};
use strata_testkit::model::ObjectModel;
use strata_testkit::{is_power_failure, SimRng};

/// What every thread of a run shares.
pub struct Ctx {
    pub seed: u64,
    pub pool: Pool,
    /// The pool's devices.
    pub rig: Rig,
    pub clock: Clock,
    /// The writers' volume.
    pub w: VolumeId,
    pub record_size: u32,
    /// Set when the writers and the admin are done: the committer stops.
    pub stop: AtomicBool,
}

impl Ctx {
    /// An operation failed: that must be the run's power failure or one of its injected
    /// faults, or the pool's read-only latch after one of them. Anything else fails the
    /// run. On a device set, a member's fault is never acceptable: the layout tolerates it.
    pub fn expect_failure(&self, e: &Error, doing: &str) {
        let masked = self.rig.layout.is_some();
        let device_fault = |e: &Error| matches!(e, Error::Io { source, .. } if source.get_ref().is_some_and(|s| s.is::<InjectedFault>()));
        let injected = |e: &Error| (!masked && device_fault(e)) || strata_engine::failpoint::is_injected(e);
        // A later error names the one it follows from: the pool's read-only latch carries
        // the error that latched it, a prewrite batch that failed says why to every later
        // caller.
        let causes: &[&str] = if masked {
            &["device lost power", "injected at failpoint"]
        } else {
            &["device lost power", "injected by the simulator", "injected at failpoint"]
        };
        let follows_from_one = |e: &Error| {
            let m = e.to_string();
            matches!(e, Error::ReadOnly(_) | Error::Io { .. }) && causes.iter().any(|s| m.contains(s))
        };
        let ok = is_power_failure(e) || injected(e) || follows_from_one(e);
        assert!(
            ok,
            "seed {}: {doing} failed, and not by the run's power failure or injected fault: {e}{}",
            self.seed,
            if masked {
                format!(" (devices: {}; {:?})", self.rig.describe(), self.pool.status().devices)
            } else {
                String::new()
            }
        );
        if is_power_failure(e) {
            assert!(self.rig.refused_ios() > 0, "seed {}: {doing}: a power failure the disk never produced", self.seed);
        }
    }

    /// Run a pool-wide durable point (a commit, `sync_log`): Ok makes everything that
    /// ended before it started durable.
    pub fn durable_point(&self, f: impl FnOnce(&Pool) -> strata_engine::Result<()>) -> strata_engine::Result<()> {
        let start = self.clock.tick();
        let r = f(&self.pool);
        if crate::tracing() {
            eprintln!("durable point (tick {start}) -> {:?}", r.as_ref().map(|_| ()));
        }
        r?;
        self.clock.pool_durable(start);
        Ok(())
    }
}

/// A writer: owns objects `objs` of the writers' volume and one key; writes, truncates,
/// punches, reads back, fsyncs its objects, syncs the pool and commits. Returns its lines.
pub fn writer(ctx: Arc<Ctx>, t: u64, objs: Vec<(ObjectId, ObjectModel)>) -> Vec<Line> {
    let seed = ctx.seed;
    let mut rng = SimRng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (0x5752 + t));
    let (ids, mut models): (Vec<ObjectId>, Vec<ObjectModel>) = objs.into_iter().unzip();
    let mut lines: Vec<Line> = ids
        .iter()
        .zip(&models)
        .map(|(id, m)| Line::new(format!("writer {t}, object {}", id.0), false, digest_object(Some(m))))
        .collect();
    let key = format!("writer-{t}").into_bytes();
    let mut key_line =
        Line::new(format!("writer {t}, key {}", String::from_utf8_lossy(&key)), true, digest_value(None));
    let pool = &ctx.pool;
    for step in 0..rng.range(25, 70) {
        let i = rng.below(ids.len() as u64) as usize;
        let (id, doing) = (ids[i], format!("writer {t} step {step}"));
        match rng.below(100) {
            0..=59 => {
                let op = ObjOp::random(&mut rng, &models[i], ctx.record_size);
                let mut next = models[i].clone();
                op.apply(&mut next);
                let r = op.run(pool, ctx.w, id);
                let end = ctx.clock.tick();
                if crate::tracing() {
                    eprintln!(
                        "{doing}: object {} {} -> {:?} (tick {end})",
                        id.0,
                        op.describe(),
                        r.as_ref().map(|_| ())
                    );
                }
                if let Err(e) = r {
                    ctx.expect_failure(&e, &format!("{doing} ({op:?})"));
                    lines[i].uncertain(digest_object(Some(&next)));
                    break;
                }
                models[i] = next;
                if crate::tracing() {
                    eprintln!("  state of object {}: {}", id.0, crate::history::sketch(Some(&models[i])));
                }
                lines[i].done(digest_object(Some(&models[i])), end);
            }
            60..=67 => {
                if let Err(e) = read_and_verify(&mut rng, pool, ctx.w, id.0, &models[i], seed) {
                    ctx.expect_failure(&e, &format!("{doing} (read)"));
                    break;
                }
            }
            68..=79 => {
                // fsync: this object's operations, and every shared one, are durable.
                let start = ctx.clock.tick();
                let r = pool.sync_object(ctx.w, id);
                if crate::tracing() {
                    eprintln!("{doing}: sync_object {} (tick {start}) -> {:?}", id.0, r.as_ref().map(|_| ()));
                }
                if let Err(e) = r {
                    ctx.expect_failure(&e, &format!("{doing} (sync_object)"));
                    break;
                }
                lines[i].synced();
                ctx.clock.shared_durable(start);
            }
            80..=89 => {
                let next = if rng.chance(75) { Some(rng.blob(80)) } else { None };
                let r = match &next {
                    Some(v) => pool.kv_put(ctx.w, &key, v),
                    None => pool.kv_delete(ctx.w, &key),
                };
                let end = ctx.clock.tick();
                if let Err(e) = r {
                    ctx.expect_failure(&e, &format!("{doing} (key)"));
                    key_line.uncertain(digest_value(next.as_deref()));
                    break;
                }
                key_line.done(digest_value(next.as_deref()), end);
            }
            90..=95 => {
                if let Err(e) = ctx.durable_point(|p| {
                    p.sync_log().map(|()| {
                        if crate::tracing() {
                            eprintln!("  sync_log ok")
                        }
                    })
                }) {
                    ctx.expect_failure(&e, &format!("{doing} (sync_log)"));
                    break;
                }
            }
            _ => {
                if let Err(e) = ctx.durable_point(|p| {
                    p.commit().map(|t| {
                        if crate::tracing() {
                            eprintln!("  commit -> txg {t}")
                        }
                    })
                }) {
                    ctx.expect_failure(&e, &format!("{doing} (commit)"));
                    break;
                }
            }
        }
    }
    lines.push(key_line);
    lines
}

/// Commits, prewrites and pool syncs, until the others are done (or a bounded number).
pub fn committer(ctx: Arc<Ctx>) {
    let mut rng = SimRng::new(ctx.seed ^ 0xC0_4417);
    for step in 0..200 {
        if ctx.stop.load(Ordering::SeqCst) {
            break;
        }
        let r = match rng.below(100) {
            0..=69 => ctx.durable_point(|p| {
                p.commit().map(|t| {
                    if crate::tracing() {
                        eprintln!("  commit -> txg {t}")
                    }
                })
            }),
            70..=84 => ctx.pool.prewrite().map(|_| ()),
            _ => ctx.durable_point(|p| {
                p.sync_log().map(|()| {
                    if crate::tracing() {
                        eprintln!("  sync_log ok")
                    }
                })
            }),
        };
        if let Err(e) = r {
            ctx.expect_failure(&e, &format!("committer step {step}"));
            break;
        }
        strata_engine::sync::thread::yield_now();
    }
}
