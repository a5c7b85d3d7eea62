//! Damage the checksums do not catch, chosen by the fuzzer: the input picks which decoded
//! structure of a pristine pool (tree node, record, dnode, pointer, space map, intent-log
//! record, uberblock) is changed and how (strata_testkit::damage); every checksum up to the
//! uberblock is repaired, so only the engine's own checks stand between the damage and a
//! panic. The offline checker and a read-write pass (read everything, write, snapshot,
//! delete, commit, close) may return errors, never panic. The seeded version is
//! crates/testkit/tests/corrupt_rechecksum.rs.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use strata_testkit::damage::{damage, exercise, pristine_image, ByteChooser};

fn pristine() -> &'static [u8] {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(pristine_image)
}

fuzz_target!(|data: &[u8]| {
    if let Some((image, _)) = damage(pristine(), &mut ByteChooser::new(data)) {
        let _ = exercise(&image);
    }
});
