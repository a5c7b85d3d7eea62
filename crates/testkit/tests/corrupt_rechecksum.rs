//! Damage the checksums do not catch (testkit `damage`): a decoded structure reachable from
//! the committed root is changed in one field and every checksum up to the uberblock is
//! repaired. The offline checker must report it (or pass), and opening, reading, writing,
//! snapshotting, deleting, committing and closing may fail with errors, never panic
//! (docs/failure-policy.md). The fuzz target fuzz/fuzz_targets/corrupt_rechecksum.rs drives
//! the same damage from its input. `STRATA_SEED` replays one seed (printing the damage);
//! `STRATA_ITERS` runs more.

use std::sync::OnceLock;
use strata_testkit::damage::{damage, exercise, pristine_image, Image};
use strata_testkit::{iters_from_env, replaying_seed, seed_from_env, SimRng};

fn pristine() -> &'static [u8] {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(pristine_image)
}

/// The control: the undamaged image parses into enough structures to damage, checks
/// clean, and the read-write pass meets no error at all (so errors on damaged images are
/// the damage's, not the pass's).
#[test]
fn the_pristine_image_is_clean_and_the_pass_meets_no_error() {
    let img = Image::parse(pristine().to_vec()).expect("the pristine image parses");
    let (blocks, data, log) = img.counts();
    assert!(
        blocks >= 20 && data >= 20 && log >= 1,
        "the walk found {blocks} blocks, {data} data pointers, {log} log blocks"
    );
    let out = exercise(pristine());
    let report = out.offline.as_ref().expect("the pristine image opens read-only");
    assert!(report.is_clean(), "{:#?}", report.errors);
    assert!(report.snapshots >= 4 && report.volumes >= 4, "{report:?}");
    assert!(out.errors.is_empty(), "the read-write pass met errors on a healthy pool: {:#?}", out.errors);
}

#[test]
fn rechecksummed_damage_is_reported_or_refused_never_a_panic() {
    let base = seed_from_env(0);
    let iters = if replaying_seed() { 1 } else { iters_from_env(300) };
    let (mut applied, mut reported, mut refused) = (0u64, 0u64, 0u64);
    let mut panics = Vec::new();
    for seed in base..base + iters {
        let Some((image, d)) = damage(pristine(), &mut SimRng::new(seed)) else { continue };
        applied += 1;
        if replaying_seed() {
            eprintln!("seed {seed}: {} (root of txg {})", d.what, d.txg);
        }
        match std::panic::catch_unwind(|| exercise(&image)) {
            Ok(out) => {
                reported += u64::from(out.checker_reported(d.txg));
                refused += u64::from(out.offline.is_err());
                if replaying_seed() {
                    eprintln!("offline check: {:?}\nread-write pass: {:#?}", out.offline, out.errors);
                }
            }
            Err(_) => panics.push(format!("seed {seed}: {} (replay with STRATA_SEED={seed})", d.what)),
        }
    }
    eprintln!("{applied} damages applied, {reported} reported by the checker, {refused} refused at open");
    assert!(panics.is_empty(), "{} damages panicked:\n{}", panics.len(), panics.join("\n"));
    if !replaying_seed() {
        // The test can fail short of a panic: damage that never lands, or that the checker
        // never sees, would test nothing.
        assert!(applied * 4 >= iters * 3, "only {applied} of {iters} damages could be applied");
        assert!(reported * 3 >= applied, "the checker reported only {reported} of {applied} damages");
    }
}
