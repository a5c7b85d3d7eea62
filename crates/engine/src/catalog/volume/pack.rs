//! How a commit places a volume's dirty records besides writing each one alone: as
//! references to identical blocks already in the dedup table, or packed several to a unit
//! when their compressed forms are small (compaction). Both run inside `VolumeState::sync`.

use crate::alloc::Allocator;
use crate::error::{Error, Result};
use crate::format::BlockPtr;
use crate::pipeline::dedup::DedupTable;
use crate::pipeline::BlockIo;

/// References to blocks of the dedup table for the records it holds (`dedup.rs`):
/// per record (as `compressed`), its pointer if it is one, and the sectors they are charged.
pub(super) fn dedup_records(
    ddt: &mut DedupTable,
    inputs: &[&[u8]],
    compressed: &[Option<(crate::format::Compression, Vec<u8>)>],
    lsizes: &[usize],
    txg: u64,
) -> (Vec<Option<BlockPtr>>, u64) {
    let mut placed = vec![None; compressed.len()];
    let mut sectors = 0;
    for (i, c) in compressed.iter().enumerate() {
        let (algo, stored) = match c {
            Some((algo, bytes)) => (*algo, bytes.as_slice()),
            None => (crate::format::Compression::None, inputs[i]),
        };
        let hash = crate::format::ChecksumAlgo::Blake3.compute(stored);
        if let Some(bp) = ddt.reference(&hash, lsizes[i], algo, txg) {
            sectors += bp.sectors();
            placed[i] = Some(bp);
        }
    }
    (placed, sectors)
}

/// Pack the records not `placed` yet whose compressed form is small (`pipeline::packable`)
/// when the pool packs, entering them in the dedup table if `dedup`: fills in their
/// pointers and returns the sectors they are charged.
pub(super) fn pack_records(
    io: &BlockIo,
    alloc: &mut Allocator,
    ddt: &mut DedupTable,
    compressed: &[Option<(crate::format::Compression, Vec<u8>)>],
    lsizes: &[usize],
    txg: u64,
    placed: &mut [Option<BlockPtr>],
    dedup: bool,
) -> Result<u64> {
    if !io.packing() {
        return Ok(0);
    }
    let small: Vec<(usize, crate::format::Compression, &[u8])> = compressed
        .iter()
        .enumerate()
        .filter(|(i, _)| placed[*i].is_none())
        .filter_map(|(i, c)| c.as_ref().map(|(algo, b)| (i, *algo, b.as_slice())))
        .filter(|(_, _, b)| crate::pipeline::packable(b.len()))
        .collect();
    let sizes: Vec<usize> = small.iter().map(|(_, _, b)| b.len()).collect();
    let mut sectors = 0;
    for (first, count, units) in crate::pipeline::plan_packs(&sizes) {
        let members = &small[first..first + count];
        let items: Vec<crate::pipeline::PackItem<'_>> = members
            .iter()
            .map(|&(i, compression, stored)| crate::pipeline::PackItem {
                stored,
                compression,
                lsize: lsizes[i],
                checksum: io.checksum_algo().compute(stored),
            })
            .collect();
        // A pack needs its units in one run: on a fragmented pool that may fail where the
        // records' own units would not, so the rest are written one by one instead.
        let bps = match io.write_pack(alloc, &items, units, txg) {
            Ok(bps) => bps,
            Err(Error::NoSpace(_)) => break,
            Err(e) => return Err(e),
        };
        for (&(i, _, _), mut bp) in members.iter().zip(bps) {
            sectors += bp.sectors();
            bp.dedup = dedup && ddt.add(&bp, txg);
            placed[i] = Some(bp);
        }
    }
    Ok(sectors)
}
