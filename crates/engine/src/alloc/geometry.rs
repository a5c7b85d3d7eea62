//! Where a pool's space is: the fixed regions of the first device group (labels, space map,
//! intent log, data units) and the groups added after creation (`strata pool add`), each
//! with its own space map region followed by its data units.
//!
//! Units are numbered across groups: the first group's are `0..data_units`; an added group's
//! start at the first space map chunk after the groups before it (`Segment::first_unit` is
//! chunk aligned), so every chunk of the bitmap belongs to one group and its slots live in
//! that group's region. The numbers between a group's last unit and the next group's first
//! are *phantom*: no unit exists there; the allocator keeps them unavailable and never
//! persists them (their bits in the space map are clear).

use crate::format::label::{GroupPhys, LabelPhys};
use crate::format::spacemap::{BITS_PER_CHUNK, CHUNK_SLOT_SIZE};
use crate::format::UNIT_SIZE;
use std::ops::Range;
use std::sync::Arc;

/// Where an added group's regions start, rounded: its space map region, then its data.
const GROUP_ALIGN: u64 = 1 << 20;
/// Fewest data units an added group must bring.
const GROUP_UNITS_MIN: u64 = 256;

#[derive(Debug, Clone)]
pub struct Geometry {
    pub spacemap_offset: u64,
    /// The first group's space map chunks.
    pub spacemap_chunks: u64,
    pub data_offset: u64,
    /// The first group's data units.
    pub data_units: u64,
    /// The intent log region, between the space map and the data area.
    pub log_offset: u64,
    pub log_bytes: u64,
    /// Groups added after creation, in address order.
    pub groups: Arc<[Segment]>,
}

/// An added device group's place in the pool (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub set_guid: u64,
    /// The group's logical space: `base..base + bytes` of the pool's device.
    pub base: u64,
    pub bytes: u64,
    /// Its space map chunks (two slots each from `base`).
    pub first_chunk: u64,
    pub chunks: u64,
    /// Its data units, from `data_offset`.
    pub data_offset: u64,
    pub first_unit: u64,
    pub units: u64,
}

impl Segment {
    /// Lay out group `g` whose chunks are numbered from `first_chunk`. `None`: too small.
    pub fn lay_out(g: GroupPhys, first_chunk: u64) -> Option<Segment> {
        let region_chunks = (g.bytes / UNIT_SIZE).div_ceil(BITS_PER_CHUNK);
        let region = (region_chunks * 2 * CHUNK_SLOT_SIZE as u64).next_multiple_of(GROUP_ALIGN);
        let data_offset = g.base.checked_add(region)?;
        let units = g.base.checked_add(g.bytes)?.checked_sub(data_offset)? / UNIT_SIZE;
        if units < GROUP_UNITS_MIN || !g.base.is_multiple_of(UNIT_SIZE) {
            return None;
        }
        Some(Segment {
            set_guid: g.set_guid,
            base: g.base,
            bytes: g.bytes,
            first_chunk,
            chunks: units.div_ceil(BITS_PER_CHUNK),
            data_offset,
            first_unit: first_chunk.checked_mul(BITS_PER_CHUNK)?,
            units,
        })
    }

    /// The group's space map region (bytes of the pool's device).
    pub fn spacemap_region(&self) -> Range<u64> {
        self.base..self.data_offset
    }
}

impl Geometry {
    /// Lay out a device of `device_size` bytes.
    pub fn for_device(device_size: u64) -> Option<Geometry> {
        let spacemap_offset = crate::format::SPACEMAP_OFFSET;
        let (log_offset, log_bytes, data_offset) = crate::format::fixed_regions(device_size);
        let data_units = device_size.checked_sub(data_offset)? / UNIT_SIZE;
        if data_units < 256 {
            return None;
        }
        Some(Geometry {
            spacemap_offset,
            spacemap_chunks: data_units.div_ceil(BITS_PER_CHUNK),
            data_offset,
            data_units,
            log_offset,
            log_bytes,
            groups: Arc::new([]),
        })
    }

    /// The geometry a label describes: its first group, checked against the layout its
    /// device size gives, and its added groups. `None`: the label's figures are not ones
    /// this build would have written.
    pub fn from_label(label: &LabelPhys) -> Option<Geometry> {
        let geo = Geometry {
            spacemap_offset: label.spacemap_offset,
            spacemap_chunks: label.spacemap_chunks,
            data_offset: label.data_offset,
            data_units: label.data_units,
            log_offset: label.log_offset,
            log_bytes: label.log_bytes,
            groups: Arc::new([]),
        };
        let expected = Geometry::for_device(label.device_size)?;
        let same = |g: &Geometry| (g.spacemap_chunks, g.data_offset, g.data_units, g.log_offset, g.log_bytes);
        if same(&expected) != same(&geo) {
            return None;
        }
        label.groups.iter().try_fold(geo, |geo, g| geo.with_group(*g))
    }

    /// This geometry with group `g` added after the last. `None`: it overlaps or is too small.
    pub fn with_group(&self, g: GroupPhys) -> Option<Geometry> {
        if g.base < self.end() {
            return None;
        }
        let seg = Segment::lay_out(g, self.total_chunks())?;
        let mut groups = self.groups.to_vec();
        groups.push(seg);
        Some(Geometry { groups: groups.into(), ..self.clone() })
    }

    /// Where the pool's logical space ends: the first byte past the last group.
    pub fn end(&self) -> u64 {
        self.groups.last().map_or(self.data_offset + self.data_units * UNIT_SIZE, |s| s.base + s.bytes)
    }

    /// Unit numbers in use, phantom ones included: the bitmap's length.
    pub fn index_units(&self) -> u64 {
        self.groups.last().map_or(self.data_units, |s| s.first_unit + s.units)
    }

    /// Units that exist, over every group.
    pub fn total_units(&self) -> u64 {
        self.data_units + self.groups.iter().map(|s| s.units).sum::<u64>()
    }

    /// Space map chunks over every group.
    pub fn total_chunks(&self) -> u64 {
        self.spacemap_chunks + self.groups.iter().map(|s| s.chunks).sum::<u64>()
    }

    /// The unit numbers of each group: (first unit, units), the first group first.
    pub fn unit_ranges(&self) -> impl DoubleEndedIterator<Item = (u64, u64)> + '_ {
        std::iter::once((0, self.data_units)).chain(self.groups.iter().map(|s| (s.first_unit, s.units)))
    }

    /// Units of chunk `c` that exist.
    pub fn chunk_units(&self, c: u64) -> u64 {
        let first = c * BITS_PER_CHUNK;
        let (start, units) = self.unit_ranges().rfind(|&(start, _)| start <= first).unwrap_or((0, self.data_units));
        (start + units).saturating_sub(first).min(BITS_PER_CHUNK)
    }

    /// The added group holding chunk `c`, if any.
    fn group_of_chunk(&self, c: u64) -> Option<&Segment> {
        self.groups.iter().rfind(|s| s.first_chunk <= c)
    }

    pub fn slot_addr(&self, chunk: u64, slot: u8) -> u64 {
        match self.group_of_chunk(chunk) {
            None => self.spacemap_offset + (chunk * 2 + slot as u64) * CHUNK_SLOT_SIZE as u64,
            Some(s) => s.base + ((chunk - s.first_chunk) * 2 + slot as u64) * CHUNK_SLOT_SIZE as u64,
        }
    }

    /// The unit at `addr`, if `addr` is the start of a unit that exists.
    pub fn unit_of(&self, addr: u64) -> Option<u64> {
        if !addr.is_multiple_of(UNIT_SIZE) {
            return None;
        }
        let at = |data_offset: u64, first: u64, units: u64| {
            let u = addr.checked_sub(data_offset)? / UNIT_SIZE;
            (u < units).then_some(first + u)
        };
        match self.groups.iter().rfind(|s| s.base <= addr) {
            None => at(self.data_offset, 0, self.data_units),
            Some(s) => at(s.data_offset, s.first_unit, s.units),
        }
    }

    /// The first unit of the `count` units at `addr`, if they all exist in one group.
    pub fn run_of(&self, addr: u64, count: u64) -> Option<u64> {
        let u = self.unit_of(addr)?;
        let (start, units) = self.unit_ranges().rfind(|&(start, _)| start <= u)?;
        (u.checked_add(count)? <= start + units).then_some(u)
    }

    pub fn addr_of(&self, unit: u64) -> u64 {
        match self.groups.iter().rfind(|s| s.first_unit <= unit) {
            None => self.data_offset + unit * UNIT_SIZE,
            Some(s) => s.data_offset + (unit - s.first_unit) * UNIT_SIZE,
        }
    }

    /// Unit numbers that name no unit (between one group's last and the next one's first).
    pub fn phantom_ranges(&self) -> Vec<Range<u64>> {
        let mut out = Vec::new();
        let mut end = self.data_units;
        for s in self.groups.iter() {
            if end < s.first_unit {
                out.push(end..s.first_unit);
            }
            end = s.first_unit + s.units;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_groups_number_their_units_from_a_chunk_boundary() {
        let geo = Geometry::for_device(64 << 20).unwrap();
        let base = geo.end().next_multiple_of(1 << 20);
        let g = geo.with_group(GroupPhys { set_guid: 7, base, bytes: 600 << 20 }).unwrap();
        let s = g.groups[0];
        assert_eq!(s.first_chunk, geo.spacemap_chunks);
        assert_eq!(s.first_unit, geo.spacemap_chunks * BITS_PER_CHUNK);
        assert_eq!(s.data_offset, base + (1 << 20));
        assert_eq!(s.chunks, s.units.div_ceil(BITS_PER_CHUNK));
        assert_eq!(g.total_units(), geo.data_units + s.units);
        assert_eq!(g.phantom_ranges(), vec![geo.data_units..s.first_unit]);
        // Addresses and units map both ways, in each group.
        for u in [0, geo.data_units - 1, s.first_unit, s.first_unit + s.units - 1] {
            assert_eq!(g.unit_of(g.addr_of(u)), Some(u));
        }
        assert_eq!(g.unit_of(s.base), None, "the group's space map region holds no unit");
        assert_eq!(g.unit_of(s.data_offset + s.units * UNIT_SIZE), None);
        // A run may not leave its group.
        assert_eq!(g.run_of(g.addr_of(geo.data_units - 1), 1), Some(geo.data_units - 1));
        assert_eq!(g.run_of(g.addr_of(geo.data_units - 1), 2), None);
        assert_eq!(g.run_of(g.addr_of(s.first_unit + s.units - 2), 3), None);
        // Chunks: the group's slots are in its own region.
        assert_eq!(g.slot_addr(s.first_chunk, 1), base + CHUNK_SLOT_SIZE as u64);
        assert_eq!(g.chunk_units(s.first_chunk + s.chunks - 1), s.units - (s.chunks - 1) * BITS_PER_CHUNK);
        assert_eq!(g.chunk_units(geo.spacemap_chunks - 1), geo.data_units % BITS_PER_CHUNK);
        // Overlapping or tiny groups are refused.
        assert!(g.with_group(GroupPhys { set_guid: 8, base: s.base + 4096, bytes: 600 << 20 }).is_none());
        assert!(g.with_group(GroupPhys { set_guid: 8, base: g.end(), bytes: 1 << 20 }).is_none());
    }
}
