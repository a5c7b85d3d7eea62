//! The fuzz target's session driver on mutated valid sessions, in the ordinary test run
//! (the coverage-guided run is scripts/fuzz.sh's `nbd_requests`): no input may panic.

use strata_nbd::proto::*;
use strata_testkit::SimRng;

/// Requests of every kind, with and without flags, some past the end of the 1 MiB LUN.
fn requests(rng: &mut SimRng) -> Vec<u8> {
    let mut out = Vec::new();
    for cookie in 0..24u64 {
        let kind =
            *rng.pick(&[CMD_READ, CMD_WRITE, CMD_FLUSH, CMD_TRIM, CMD_CACHE, CMD_WRITE_ZEROES, CMD_BLOCK_STATUS]);
        let flags = rng.below(32) as u16;
        let offset = rng.below(2 << 20) & !511;
        let length = (rng.range(1, 64) * 512) as u32;
        out.extend_from_slice(&encode_request(&RequestHeader { flags, kind, cookie, offset, length }));
        if kind == CMD_WRITE {
            out.extend_from_slice(&rng.bytes(length as usize));
        }
    }
    out
}

/// Well-formed option data (before mutation).
fn option_data(option: u32, rng: &mut SimRng) -> Vec<u8> {
    let name: &[u8] = if rng.chance(50) { b"" } else { b"ro" };
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name);
    match option {
        OPT_INFO | OPT_GO => {
            let n = rng.below(4) as u16;
            d.extend_from_slice(&n.to_be_bytes());
            for _ in 0..n {
                d.extend_from_slice(&(rng.below(5) as u16).to_be_bytes());
            }
        }
        OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
            let queries: &[&[u8]] = &[META_BASE_ALLOCATION.as_bytes(), b"base:", b"qemu:x"];
            let n = rng.below(3) as u32;
            d.extend_from_slice(&n.to_be_bytes());
            for _ in 0..n {
                let q = rng.pick(queries);
                d.extend_from_slice(&(q.len() as u32).to_be_bytes());
                d.extend_from_slice(q);
            }
        }
        _ => d.clear(),
    }
    d
}

#[test]
fn mutated_sessions_never_panic() {
    let mut rng = SimRng::new(2024);
    for round in 0..3000 {
        let mut input = vec![1u8]; // the canned handshake, then requests
        if round % 4 == 0 {
            // The handshake itself: flags and a few options, fuzzed below.
            input = vec![0u8];
            input.extend_from_slice(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes());
            for option in
                [OPT_STRUCTURED_REPLY, OPT_LIST, OPT_INFO, OPT_LIST_META_CONTEXT, OPT_SET_META_CONTEXT, OPT_GO]
            {
                let mut data = option_data(option, &mut rng);
                if rng.chance(50) {
                    // Cut short, with the length saying so: the decoders must notice.
                    data.truncate(rng.below(data.len() as u64 + 1) as usize);
                }
                input.extend_from_slice(&IHAVEOPT.to_be_bytes());
                input.extend_from_slice(&option.to_be_bytes());
                input.extend_from_slice(&(data.len() as u32).to_be_bytes());
                input.extend_from_slice(&data);
            }
        }
        input.extend_from_slice(&requests(&mut rng));
        // Flip, overwrite or cut.
        for _ in 0..rng.below(6) {
            let at = rng.below(input.len() as u64) as usize;
            match rng.below(3) {
                0 => input[at] ^= 1 << rng.below(8),
                1 => input[at] = rng.below(256) as u8,
                _ => input.truncate(at.max(1)),
            }
        }
        let result = std::panic::catch_unwind(|| strata_nbd::fuzz_session(&input));
        assert!(
            result.is_ok(),
            "round {round}: the session panicked on {} bytes: {:02x?}",
            input.len(),
            &input[..input.len().min(256)]
        );
    }
}
