//! Compression of data records: the per-volume policy, the encoder the write pipeline calls,
//! and the bounded decoder every read path (and the checker) goes through.
//!
//! What is stored (see docs/efficiency.md): a data record's logical bytes are first trimmed
//! of their zero tail (as for every block); the remaining prefix is compressed as one LZ4
//! block (lz4_flex's raw block format, no frame) or one Zstandard frame. The block pointer
//! says which (`Compression`), `psize` is the exact compressed length and the checksum
//! covers those stored bytes. Decoding yields the prefix; the rest of `lsize` is zeros.
//!
//! Invariants:
//! - a record is stored compressed only if that saves at least one allocation unit
//!   (`UNIT_SIZE`): the encoder is handed an output buffer one unit smaller than the
//!   trimmed record rounded up, and gives up as soon as it does not fit, so incompressible
//!   data costs one failed attempt and is stored as before;
//! - decoding never writes or allocates more than `lsize` bytes (the block pointer's
//!   logical size, itself bounded by MAX_BLOCK_SIZE), whatever the input says: a damaged or
//!   hostile payload yields an error, never a panic.
//!
//! Trade-off: compression runs in the commit, under the pool lock, one record after the
//! other. LZ4 costs a few µs per 16 KiB record; zstd at high levels is much slower and
//! lengthens commits (the policy is the user's choice). Parallel compression across cores
//! is the known next step if commits show it.

use crate::error::{Error, Result};
use crate::format::{round_up_unit, Compression, MAX_BLOCK_SIZE, UNIT_SIZE};
use std::cell::RefCell;

pub use crate::format::records::{CompressionPolicy, ZSTD_LEVEL_DEFAULT, ZSTD_LEVEL_MAX};

/// Bound on the window a zstd frame may ask the decoder for: 2^20 = 1 MiB, the largest
/// record. A frame asking for more was not written by us.
const ZSTD_WINDOW_LOG_MAX: u32 = 20;

impl CompressionPolicy {
    /// Parse `off`, `lz4`, `zstd` (level 3) or `zstd-N` (N in 1..=19).
    pub fn parse(s: &str) -> Result<CompressionPolicy> {
        let bad = || {
            Error::invalid(format!(
                "compression {s:?}: use off, lz4, zstd or zstd-LEVEL (LEVEL 1-{ZSTD_LEVEL_MAX}, default {ZSTD_LEVEL_DEFAULT})"
            ))
        };
        match s {
            "off" | "none" => Ok(CompressionPolicy::Off),
            "lz4" => Ok(CompressionPolicy::Lz4),
            "zstd" => Ok(CompressionPolicy::Zstd { level: ZSTD_LEVEL_DEFAULT }),
            _ => {
                let level: u8 = s.strip_prefix("zstd-").and_then(|l| l.parse().ok()).ok_or_else(bad)?;
                if (1..=ZSTD_LEVEL_MAX).contains(&level) {
                    Ok(CompressionPolicy::Zstd { level })
                } else {
                    Err(bad())
                }
            }
        }
    }

    /// The name `parse` accepts back.
    pub fn name(self) -> String {
        match self {
            CompressionPolicy::Off => "off".into(),
            CompressionPolicy::Lz4 => "lz4".into(),
            CompressionPolicy::Zstd { level } => format!("zstd-{level}"),
        }
    }
}

thread_local! {
    // zstd contexts are costly to make (allocations of hundreds of KiB): one of each per
    // thread, reused. The compressor remembers the level it was set to.
    static ZSTD_ENCODER: RefCell<Option<(u8, zstd::bulk::Compressor<'static>)>> = const { RefCell::new(None) };
    static ZSTD_DECODER: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// Compress `data` (a record's logical bytes with the zero tail already trimmed) under
/// `policy`. Returns the algorithm and stored bytes only when they occupy at least one unit
/// less than `data` would; `None` means "store it as is".
pub fn compress(policy: CompressionPolicy, data: &[u8]) -> Option<(Compression, Vec<u8>)> {
    assert!(data.len() as u64 <= MAX_BLOCK_SIZE, "records are at most MAX_BLOCK_SIZE");
    let limit = round_up_unit(data.len() as u64).saturating_sub(UNIT_SIZE) as usize;
    if limit == 0 || policy == CompressionPolicy::Off {
        return None;
    }
    let (algo, mut out, n) = match policy {
        CompressionPolicy::Off => return None,
        CompressionPolicy::Lz4 => {
            // lz4_flex wants room for the worst case up front (it cannot stop early).
            let mut out = vec![0u8; lz4_flex::block::get_maximum_output_size(data.len())];
            let n = lz4_flex::block::compress_into(data, &mut out).ok()?;
            (Compression::Lz4, out, n)
        }
        CompressionPolicy::Zstd { level } => {
            let mut out = vec![0u8; limit];
            let n = zstd_compress(level, data, &mut out)?;
            (Compression::Zstd, out, n)
        }
    };
    if n == 0 || n > limit {
        return None;
    }
    out.truncate(n);
    Some((algo, out))
}

/// Records below which a commit compresses on its own thread: spawning helpers costs more
/// than it saves for a handful of records (and each helper makes its own zstd context).
const PARALLEL_MIN_RECORDS: usize = 32;
/// Helper threads at most: compression is CPU-bound and the commit holds the pool lock, so
/// every core helps, up to a point where the write-out dominates.
const PARALLEL_MAX_THREADS: usize = 8;

/// [`compress`] every input (zero tails trimmed), in order, spread over the machine's cores.
/// The commit calls this for all of a volume's dirty records before writing them, so the
/// time the pool lock is held for compression shrinks with the number of cores.
pub fn compress_batch(policy: CompressionPolicy, inputs: &[&[u8]]) -> Vec<Option<(Compression, Vec<u8>)>> {
    if policy == CompressionPolicy::Off {
        return vec![None; inputs.len()];
    }
    let threads = crate::sync::thread::available_parallelism().min(PARALLEL_MAX_THREADS);
    if threads < 2 || inputs.len() < PARALLEL_MIN_RECORDS {
        return inputs.iter().map(|d| compress(policy, d)).collect();
    }
    let chunk = inputs.len().div_ceil(threads);
    crate::sync::thread::scope(|scope| {
        let handles: Vec<_> = inputs
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(|d| compress(policy, d)).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(v) => v,
                Err(p) => std::panic::resume_unwind(p),
            })
            .collect()
    })
}

fn zstd_compress(level: u8, data: &[u8], out: &mut [u8]) -> Option<usize> {
    ZSTD_ENCODER.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|(l, _)| *l != level) {
            match slot.as_mut() {
                Some((l, enc)) => {
                    enc.set_compression_level(level as i32).ok()?;
                    *l = level;
                }
                None => *slot = Some((level, zstd::bulk::Compressor::new(level as i32).ok()?)),
            }
        }
        let (_, enc) = slot.as_mut().expect("made above");
        // Fails with "destination too small" when the frame would not save a unit. A failed
        // frame leaves the context mid-session (it then refuses a level change): end the
        // session, and if even that fails, drop the context so the next call makes a new one.
        match enc.compress_to_buffer(data, out) {
            Ok(n) => Some(n),
            Err(_) => {
                if enc.context_mut().reset(zstd::zstd_safe::ResetDirective::SessionOnly).is_err() {
                    *slot = None;
                }
                None
            }
        }
    })
}

/// Expand `stored` (as written by [`compress`] with `algo`) to exactly `lsize` bytes: the
/// decoded prefix, then zeros. Errors describe what was wrong; the caller wraps them in a
/// typed corruption. Never allocates more than `lsize` bytes.
pub fn decompress(algo: Compression, stored: &[u8], lsize: u32) -> std::result::Result<Vec<u8>, String> {
    if lsize as u64 > MAX_BLOCK_SIZE {
        return Err(format!("logical size {lsize} exceeds the largest record {MAX_BLOCK_SIZE}"));
    }
    let mut out = vec![0u8; lsize as usize];
    let n = match algo {
        Compression::None => {
            if stored.len() > out.len() {
                return Err(format!("{} stored bytes for a {lsize}-byte block", stored.len()));
            }
            out[..stored.len()].copy_from_slice(stored);
            stored.len()
        }
        Compression::Lz4 => lz4_flex::block::decompress_into(stored, &mut out)
            .map_err(|e| format!("lz4 payload does not decode: {e}"))?,
        Compression::Zstd => ZSTD_DECODER.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                let mut dec = zstd::bulk::Decompressor::new().map_err(|e| format!("zstd decoder: {e}"))?;
                dec.set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(ZSTD_WINDOW_LOG_MAX))
                    .map_err(|e| format!("zstd decoder: {e}"))?;
                *slot = Some(dec);
            }
            let dec = slot.as_mut().expect("made above");
            let r = dec.decompress_to_buffer(stored, &mut out[..]);
            if r.is_err() {
                // Damaged input is rare (the checksum passed): start the next block with a
                // fresh context rather than trust one that failed mid-frame.
                *slot = None;
            }
            r.map_err(|e| format!("zstd payload does not decode: {e}"))
        })?,
    };
    // A decoder never reports more than the buffer it was given; keep it that way.
    if n > lsize as usize {
        return Err(format!("payload decodes to {n} bytes, more than the block's {lsize}"));
    }
    // Decoders may scribble past the end of what they decode when the buffer has room (lz4's
    // wide copies do): the logical bytes after the decoded prefix are zeros, by definition.
    out[n..].fill(0);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(compressible: bool, len: usize) -> Vec<u8> {
        let mut x = 0x1234_5678u32;
        (0..len)
            .map(|i| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                if compressible {
                    b"row data, row data; "[i % 20] ^ u8::from(x >> 28 == 0)
                } else {
                    (x >> 16) as u8
                }
            })
            .collect()
    }

    #[test]
    fn parse_and_names_round_trip() {
        for s in ["off", "lz4", "zstd-1", "zstd-3", "zstd-19"] {
            assert_eq!(CompressionPolicy::parse(s).unwrap().name(), s);
        }
        assert_eq!(CompressionPolicy::parse("zstd").unwrap(), CompressionPolicy::Zstd { level: 3 });
        for bad in ["zstd-0", "zstd-20", "gzip", "", "zstd-", "lz4-1", "zstd-x"] {
            let e = CompressionPolicy::parse(bad).unwrap_err().to_string();
            assert!(e.contains("use off, lz4, zstd"), "{e}");
        }
        for p in [CompressionPolicy::Off, CompressionPolicy::Lz4, CompressionPolicy::Zstd { level: 7 }] {
            let (a, l) = p.to_bits();
            assert_eq!(CompressionPolicy::from_bits(a, l), Some(p));
        }
        assert_eq!(CompressionPolicy::from_bits(2, 0), None);
        assert_eq!(CompressionPolicy::from_bits(1, 3), None);
        assert_eq!(CompressionPolicy::from_bits(3, 0), None);
    }

    #[test]
    fn round_trips_and_saves_a_unit_or_stays_raw() {
        for policy in
            [CompressionPolicy::Lz4, CompressionPolicy::Zstd { level: 1 }, CompressionPolicy::Zstd { level: 19 }]
        {
            let data = sample(true, 16384);
            let (algo, stored) = compress(policy, &data).unwrap_or_else(|| panic!("{policy:?} compresses text"));
            assert!(round_up_unit(stored.len() as u64) < 16384);
            assert_eq!(decompress(algo, &stored, 16384).unwrap(), data);
            assert_eq!(compress(policy, &sample(false, 16384)), None, "random bytes stay raw");
            assert_eq!(compress(policy, &data[..4096]), None, "one unit cannot save a unit");
            assert_eq!(compress(CompressionPolicy::Off, &data), None);
        }
    }

    #[test]
    fn batches_match_one_by_one() {
        let records: Vec<Vec<u8>> =
            (0..100).map(|i| if i % 3 == 0 { sample(false, 16384) } else { sample(true, 8192 + i * 80) }).collect();
        let inputs: Vec<&[u8]> = records.iter().map(|r| r.as_slice()).collect();
        for policy in [CompressionPolicy::Off, CompressionPolicy::Lz4, CompressionPolicy::Zstd { level: 3 }] {
            let batch = compress_batch(policy, &inputs);
            let single: Vec<_> = inputs.iter().map(|d| compress(policy, d)).collect();
            assert_eq!(batch, single, "{policy:?}");
        }
    }

    #[test]
    fn the_tail_after_the_decoded_prefix_is_zero() {
        // A trimmed record whose prefix ends mid-record: nothing the decoder may leave in
        // its buffer past the prefix can show.
        for policy in [CompressionPolicy::Lz4, CompressionPolicy::Zstd { level: 3 }] {
            for prefix in [8193usize, 9000, 12287, 15999] {
                let data = sample(true, prefix);
                let (algo, stored) = compress(policy, &data).unwrap();
                let out = decompress(algo, &stored, 16384).unwrap();
                assert_eq!(&out[..prefix], &data[..]);
                assert!(out[prefix..].iter().all(|&b| b == 0), "{policy:?} prefix {prefix}");
            }
        }
    }

    #[test]
    fn damaged_payloads_are_errors_not_panics() {
        let data = sample(true, 65536);
        for policy in [CompressionPolicy::Lz4, CompressionPolicy::Zstd { level: 3 }] {
            let (algo, stored) = compress(policy, &data).unwrap();
            assert!(decompress(algo, &stored, 4096).is_err(), "too small an lsize is refused");
            assert!(decompress(algo, &stored[..stored.len() / 2], 65536).is_err());
            let _ = decompress(algo, &[], 65536); // an error or zeros; never a panic
            let mut x = 7u64;
            for i in 0..2000 {
                let mut bad = stored.clone();
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let at = (x >> 33) as usize % bad.len();
                bad[at] ^= 1 << (i % 8);
                if let Ok(out) = decompress(algo, &bad, 65536) {
                    assert_eq!(out.len(), 65536);
                }
            }
            assert!(decompress(algo, &stored, (MAX_BLOCK_SIZE + 1) as u32).is_err());
            assert_eq!(decompress(algo, &stored, 65536).unwrap(), data, "the decoder recovers after errors");
        }
    }
}
