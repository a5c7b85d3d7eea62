//! The NBD server's handshake and transmission decoders on arbitrary bytes, over an
//! in-memory stream against in-memory LUNs: errors and closed sessions allowed, panics not.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    strata_nbd::fuzz_session(data);
});
