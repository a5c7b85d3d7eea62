//! Every on-disk decoder on the same arbitrary bytes: errors allowed, panics not.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    strata_engine::pipeline::decode_all(data);
});
