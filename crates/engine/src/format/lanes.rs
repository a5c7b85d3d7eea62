//! BLAKE3 over many records at once, the SIMD lanes filled across records.
//!
//! `blake3::hash` of one 4 KiB record hashes its four 1 KiB chunks side by side: four of the
//! sixteen lanes AVX-512 offers (of eight with AVX2). A commit hashes hundreds of thousands
//! of records of one size, so here chunk j of up to sixteen records is hashed in one call,
//! then their parent nodes level by level: the same tree, so the same hashes (the test
//! `lanes_hash_like_blake3` compares every size and batch shape with `blake3::hash`).
//! Measured on this project's 2-vCPU AVX-512 machine, cache-hot: 4 KiB records 1.46 →
//! 0.76 µs each, 8 KiB about 10 % less (2 KiB, inputs not in cache: 1.26 → 0.45 µs);
//! the commit's CPU per 4 KiB record 4.20 → 3.27 µs (docs/benchmarks/engine.md). 16 KiB
//! and larger records already fill the lanes alone and are hashed one by one, as is any
//! other size (compressed records have arbitrary lengths).
//!
//! This calls `blake3::platform`, which the blake3 crate marks "undocumented and unstable,
//! for benchmarks only". The workspace pins blake3 to one exact version for that reason;
//! before raising the pin, run the test above (it fails if the API changed meaning).
//!
//! No indexing here (format/mod.rs): every piece comes from `chunks_exact`, `zip` or `get`.

use blake3::platform::Platform;
use blake3::IncrementCounter;
use std::sync::OnceLock;

const CHUNK_LEN: usize = blake3::CHUNK_LEN;
const OUT_LEN: usize = blake3::OUT_LEN;
/// BLAKE3's key words for plain hashing (the IV; the specification, section 2.2).
const IV: [u32; 8] = [0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19];
/// Domain flags (the specification, table 3).
const CHUNK_START: u8 = 1 << 0;
const CHUNK_END: u8 = 1 << 1;
const PARENT: u8 = 1 << 2;
const ROOT: u8 = 1 << 3;
/// Records hashed together: AVX-512's sixteen lanes (narrower SIMD loops over them).
const LANES: usize = 16;
/// Bytes `hash_many` may read past the end of an input. Its AVX-512 assembly (blake3
/// 1.8.7, `blake3_avx512_x86-64_unix.S`) loads the first input of its 4-way and 2-way
/// loops with 64- and 32-byte moves at 16-byte steps, so the last load of a block reads
/// up to 48 bytes beyond it. The crate's own callers pass consecutive chunks of one
/// buffer, where that lands in the next input; here inputs are chunks of separate
/// records, and a record that ends where a mapping ends made the commit fault (SIGSEGV in
/// `blake3_hash_many_avx512` under a 1 MiB sequential LUN write). So every input handed to
/// `hash_many` has at least this much readable memory after it: the last chunk of each
/// record is hashed from a copy with slack after it (the others are followed by the
/// record's next chunk), and parent blocks from a vector with a spare block at its end.
const OVERREAD: usize = 64;

fn platform() -> Platform {
    static P: OnceLock<Platform> = OnceLock::new();
    *P.get_or_init(Platform::detect)
}

/// Whether records of `len` bytes are hashed across records: 2, 4 or 8 whole chunks
/// (a perfect tree each, which is what the level-by-level reduction below assumes).
fn laned(len: usize) -> bool {
    matches!(len, 2048 | 4096 | 8192)
}

/// The BLAKE3 hash of every input, in order: `blake3::hash(inputs[i])` for each i.
pub fn blake3_many(inputs: &[&[u8]]) -> Vec<[u8; 32]> {
    let mut out = vec![[0u8; 32]; inputs.len()];
    for size in [2048usize, 4096, 8192] {
        let idx: Vec<usize> = inputs.iter().enumerate().filter(|(_, b)| b.len() == size).map(|(i, _)| i).collect();
        for batch in idx.chunks(LANES) {
            let records: Vec<&[u8]> = batch.iter().filter_map(|&i| inputs.get(i).copied()).collect();
            for (&i, hash) in batch.iter().zip(hash_batch(&records, size / CHUNK_LEN)) {
                if let Some(o) = out.get_mut(i) {
                    *o = hash;
                }
            }
        }
    }
    for (o, b) in out.iter_mut().zip(inputs) {
        if !laned(b.len()) {
            *o = *blake3::hash(b).as_bytes();
        }
    }
    out
}

/// Hash `records`, each exactly `chunks` (a power of two, at least 2) chunks long.
fn hash_batch(records: &[&[u8]], chunks: usize) -> Vec<[u8; 32]> {
    let p = platform();
    let n = records.len();
    // cvs[i * width + k]: record i's k-th chaining value at the current tree level.
    let mut cvs = vec![[0u8; 32]; n * chunks];
    let mut flat = vec![0u8; n * OUT_LEN];
    // The last chunks, copied end to end with slack after them (see `OVERREAD`).
    let mut last = vec![0u8; n * CHUNK_LEN + OVERREAD];
    for (dst, r) in last.chunks_exact_mut(CHUNK_LEN).zip(records) {
        if let Some(src) = r.get((chunks - 1) * CHUNK_LEN..chunks * CHUNK_LEN) {
            dst.copy_from_slice(src);
        }
    }
    for j in 0..chunks {
        // Chunk j of every record: chunk counter j, hashed in one call.
        let inputs: Vec<&[u8; CHUNK_LEN]> = if j + 1 == chunks {
            last.chunks_exact(CHUNK_LEN).take(n).filter_map(|c| c.try_into().ok()).collect()
        } else {
            records
                .iter()
                .filter_map(|r| r.get(j * CHUNK_LEN..(j + 1) * CHUNK_LEN).and_then(|c| c.try_into().ok()))
                .collect()
        };
        p.hash_many(&inputs, &IV, j as u64, IncrementCounter::No, 0, CHUNK_START, CHUNK_END, &mut flat);
        for (rec, cv) in cvs.chunks_exact_mut(chunks).zip(flat.chunks_exact(OUT_LEN)) {
            if let (Some(slot), Ok(cv)) = (rec.get_mut(j), <[u8; 32]>::try_from(cv)) {
                *slot = cv;
            }
        }
    }
    let mut width = chunks;
    while width > 1 {
        let half = width / 2;
        // Each parent block: two adjacent chaining values of the level below.
        let mut blocks: Vec<[u8; 64]> = Vec::with_capacity(n * half + 1);
        for rec in cvs.chunks_exact(chunks) {
            for pair in rec.get(..width).unwrap_or_default().chunks_exact(2) {
                let mut b = [0u8; 64];
                for (dst, src) in b.chunks_exact_mut(OUT_LEN).zip(pair) {
                    dst.copy_from_slice(src);
                }
                blocks.push(b);
            }
        }
        // A block of slack after the last (see `OVERREAD`), not hashed.
        blocks.push([0u8; 64]);
        let inputs: Vec<&[u8; 64]> = blocks.iter().take(n * half).collect();
        let mut parents = vec![0u8; inputs.len() * OUT_LEN];
        let flags_end = if half == 1 { ROOT } else { 0 };
        p.hash_many(&inputs, &IV, 0, IncrementCounter::No, PARENT, 0, flags_end, &mut parents);
        for (rec, level) in cvs.chunks_exact_mut(chunks).zip(parents.chunks_exact(half * OUT_LEN)) {
            for (slot, cv) in rec.iter_mut().zip(level.chunks_exact(OUT_LEN)) {
                if let Ok(cv) = <[u8; 32]>::try_from(cv) {
                    *slot = cv;
                }
            }
        }
        width = half;
    }
    cvs.chunks_exact(chunks).filter_map(|rec| rec.first().copied()).collect()
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn bytes(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn lanes_hash_like_blake3() {
        // Every laned size and its neighbours, one by one, in full and partial batches of
        // lanes, and mixed in one call (the order of the answers is the inputs' order).
        let sizes = [0usize, 1, 1023, 1024, 1025, 2047, 2048, 2049, 3072, 4095, 4096, 4097, 8192, 12288, 16384];
        let mut seed = 1;
        for batch in [1usize, 2, 3, 15, 16, 17, 33] {
            for &size in &sizes {
                let data: Vec<Vec<u8>> = (0..batch)
                    .map(|_| {
                        seed += 1;
                        bytes(seed, size)
                    })
                    .collect();
                let inputs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
                let want: Vec<[u8; 32]> = inputs.iter().map(|b| *blake3::hash(b).as_bytes()).collect();
                assert_eq!(blake3_many(&inputs), want, "{batch} inputs of {size} bytes");
            }
        }
        let data: Vec<Vec<u8>> = (0..100).map(|i| bytes(i, sizes[i as usize % sizes.len()])).collect();
        let inputs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let want: Vec<[u8; 32]> = inputs.iter().map(|b| *blake3::hash(b).as_bytes()).collect();
        assert_eq!(blake3_many(&inputs), want, "mixed sizes");
    }

    /// Pages mapped readable with an inaccessible page after them: reading one byte past
    /// the readable ones faults.
    struct Guarded {
        base: *mut u8,
        readable: usize,
    }

    impl Guarded {
        fn new(readable: usize) -> Guarded {
            let page = 4096;
            assert!(readable.is_multiple_of(page));
            // SAFETY: a fresh private anonymous mapping; the guard page is its last page.
            unsafe {
                let base = libc::mmap(
                    std::ptr::null_mut(),
                    readable + page,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                assert_ne!(base, libc::MAP_FAILED);
                assert_eq!(libc::mprotect(base.cast::<u8>().add(readable).cast(), page, libc::PROT_NONE), 0);
                Guarded { base: base.cast(), readable }
            }
        }

        /// The last `len` readable bytes, filled from `seed`.
        fn tail(&mut self, seed: u64, len: usize) -> &[u8] {
            // SAFETY: within the readable pages of the mapping, which lives as long as self.
            let s = unsafe { std::slice::from_raw_parts_mut(self.base.add(self.readable - len), len) };
            s.copy_from_slice(&bytes(seed, len));
            s
        }
    }

    impl Drop for Guarded {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`, with its size.
            unsafe { libc::munmap(self.base.cast(), self.readable + 4096) };
        }
    }

    #[test]
    fn a_record_ending_where_its_mapping_ends_is_not_read_past() {
        // The record that ends at the guard page is first of every group of inputs the
        // SIMD code forms (16, 8, 4, 2 and 1 lanes); before `OVERREAD` the 4-way loop
        // read 48 bytes past it and this test died of SIGSEGV.
        for size in [2048usize, 4096, 8192] {
            for batch in [1usize, 2, 3, 4, 5, 8, 12, 16] {
                let mut guarded = Guarded::new(size.next_multiple_of(4096));
                let others: Vec<Vec<u8>> = (1..batch as u64).map(|i| bytes(i, size)).collect();
                let mut inputs: Vec<&[u8]> = vec![guarded.tail(99, size)];
                inputs.extend(others.iter().map(Vec::as_slice));
                let want: Vec<[u8; 32]> = inputs.iter().map(|b| *blake3::hash(b).as_bytes()).collect();
                assert_eq!(blake3_many(&inputs), want, "{batch} inputs of {size} bytes");
            }
        }
    }
}
