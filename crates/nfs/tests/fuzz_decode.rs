//! Fuzz-style test of the RPC/XDR decoders: random records, well-formed calls of every
//! program and procedure with random arguments, and mutations of them (bit flips, cuts,
//! length fields set to hostile values), fed through the whole request path. Asserts: no
//! panic, every call gets at most one reply of bounded size, and no single allocation is
//! larger than a record plus a reply (a global allocator records the largest request).
//! Replay: STRATA_SEED=<seed>; more: STRATA_ITERS=<n>.

mod common;

use common::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use strata_nfs::rpc::{read_record, MAX_RECORD_BYTES};
use strata_nfs::xdr::Encoder;
use strata_testkit::{iters_from_env, seed_from_env, SimRng};

struct Tracking;
static LARGEST: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Only allocations made while a test thread decodes are measured (not the pool set-up,
    /// whose simulated disk is one large buffer).
    static MEASURING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn note(size: usize) {
    if MEASURING.try_with(|m| m.get()).unwrap_or(false) {
        LARGEST.fetch_max(size, Ordering::Relaxed);
    }
}

fn measure<T>(f: impl FnOnce() -> T) -> T {
    MEASURING.with(|m| m.set(true));
    let r = f();
    MEASURING.with(|m| m.set(false));
    r
}

unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(l.size());
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        note(new);
        System.realloc(p, l, new)
    }
}

#[global_allocator]
static ALLOC: Tracking = Tracking;

/// A record and a reply of the largest READ, with room for the reply's growth.
const ALLOCATION_LIMIT: usize = 4 * MAX_RECORD_BYTES;

const HOSTILE: [u32; 6] = [0xffff_ffff, 0x7fff_ffff, 0x8000_0000, (1 << 20) + 1, 4097, 65];

fn random_args(rng: &mut SimRng, root: &[u8]) -> Vec<u8> {
    let mut e = Encoder::with_capacity(256);
    for _ in 0..rng.below(12) {
        match rng.below(6) {
            0 => e.opaque(root),
            1 => e.u32(*rng.pick(&HOSTILE)),
            2 => e.opaque(&rng.blob(300)),
            3 => e.u64(rng.next_u64()),
            _ => e.u32(rng.below(8) as u32),
        }
    }
    e.buf
}

fn mutate(rng: &mut SimRng, rec: &mut Vec<u8>) {
    for _ in 0..rng.range(1, 4) {
        if rec.is_empty() {
            return;
        }
        match rng.below(4) {
            0 => {
                let i = rng.below(rec.len() as u64) as usize;
                rec[i] ^= 1 << rng.below(8);
            }
            1 => rec.truncate(rng.below(rec.len() as u64) as usize),
            2 if rec.len() >= 4 => {
                let i = (rng.below(rec.len() as u64 / 4) * 4) as usize;
                rec[i..i + 4].copy_from_slice(&rng.pick(&HOSTILE).to_be_bytes());
            }
            _ => rec.extend_from_slice(&rng.blob(64)),
        }
    }
}

#[test]
fn random_and_mutated_calls_never_panic() {
    let seed = seed_from_env(0x0005_eed0_f2f5);
    let iters = iters_from_env(20_000);
    eprintln!("seed {seed} (replay with STRATA_SEED={seed})");
    let mut rng = SimRng::new(seed);
    let w = world();
    let (_, root) = w.mnt(localhost(), "/test/a");
    let progs = [NFS, MOUNT, 100000, 100003, 7];
    for i in 0..iters {
        let mut rec = match rng.below(3) {
            0 => rng.blob(512),
            _ => {
                let prog = *rng.pick(&progs);
                let vers = if rng.chance(90) {
                    if prog == 100000 {
                        2
                    } else {
                        3
                    }
                } else {
                    rng.below(5) as u32
                };
                let args = random_args(&mut rng, &root);
                call_record(i as u32, prog, vers, rng.below(25) as u32, rng.below(2000) as u32, 0, &args)
            }
        };
        if rng.chance(50) {
            mutate(&mut rng, &mut rec);
        }
        if let Some(reply) = measure(|| w.server.process(localhost(), &rec)) {
            assert!(reply.len() <= MAX_RECORD_BYTES, "reply of {} bytes (seed {seed}, iteration {i})", reply.len());
            let mark = u32::from_be_bytes(reply[..4].try_into().expect("mark"));
            assert_eq!(mark, 0x8000_0000 | (reply.len() as u32 - 4), "record mark (seed {seed})");
        }
    }
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(largest <= ALLOCATION_LIMIT, "largest allocation {largest} bytes (seed {seed})");
}

#[test]
fn record_marking_is_bounded_on_random_streams() {
    let seed = seed_from_env(77);
    let mut rng = SimRng::new(seed);
    for _ in 0..iters_from_env(5_000) {
        let mut wire = Vec::new();
        for _ in 0..rng.below(4) {
            let len = if rng.chance(30) { *rng.pick(&HOSTILE) } else { rng.below(200) as u32 };
            wire.extend_from_slice(&len.to_be_bytes());
            wire.extend_from_slice(&rng.blob(200));
        }
        let mut r = &wire[..];
        while let Ok(Some(rec)) = measure(|| read_record(&mut r, MAX_RECORD_BYTES)) {
            assert!(rec.len() <= MAX_RECORD_BYTES);
        }
    }
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(largest <= ALLOCATION_LIMIT, "largest allocation {largest} bytes (seed {seed})");
}
