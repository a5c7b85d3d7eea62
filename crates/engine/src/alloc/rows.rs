//! Rows: the allocator's side of a parity2 device set (device/mirror/parity.rs).
//!
//! A parity set keeps, for every row of `width` data units, two parity units computed over
//! the whole row. Writing into a row whose other units hold committed data would rewrite
//! its parity in place: a crash in the middle of that write, followed by the loss of a
//! device, would reconstruct the committed data from a torn parity — the RAID write hole.
//! So the allocator never puts a block into a row that holds anything, except the one row
//! the current txg is filling (its *open* row):
//!
//! - a run must lie in rows that are wholly free (no unit allocated or held), or continue
//!   the open row;
//! - a row is open from the allocation that leaves it partly filled until the txg is durable
//!   (`txg_synced`) or the pool closes it (`close_row`: around intent-log blocks written by
//!   reference, which are acknowledged before their txg commits and so must not share a
//!   row with later writes);
//! - units below `origin` are mirrored by the device, not in rows: allocated as usual, but
//!   no run crosses `origin`.
//!
//! The free units of rows that hold something cannot be allocated until the whole row is
//! free: they are *trapped*, counted here and left out of the space the pool offers (a
//! cleaner that relocates the live blocks of such rows would win them back; not built).

use super::bit;

/// Where rows are, in data-area units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowLayout {
    /// First unit of row 0; units below it are not in rows.
    pub origin: u64,
    /// Data units per row.
    pub width: u64,
}

/// The rows of one parity2 set: a pool of several device groups has one per parity2 group,
/// each over its group's units `start..end` (alloc/geometry.rs).
#[derive(Debug)]
pub(super) struct RowState {
    pub layout: RowLayout,
    /// The group's unit numbers: rows lie in `origin..end`; `start..origin` is mirrored.
    pub start: u64,
    pub end: u64,
    /// The row the open txg is filling.
    pub open: Option<u64>,
    /// Free units in rows that hold something, the open row excepted.
    pub trapped: u64,
}

impl RowState {
    pub fn new(layout: RowLayout, unavailable: &[u64], start: u64, end: u64) -> RowState {
        let mut s = RowState { layout, start, end, open: None, trapped: 0 };
        let rows = end.saturating_sub(layout.origin) / layout.width;
        s.trapped = (0..rows).map(|r| s.trapped_in(s.busy(unavailable, r))).sum();
        s
    }

    /// The row unit `u` is in (None below the origin or past the group).
    pub fn row_of(&self, u: u64) -> Option<u64> {
        (u < self.end).then(|| u.checked_sub(self.layout.origin).map(|k| k / self.layout.width)).flatten()
    }

    /// Whether unit `u` is in this set's group.
    pub fn holds(&self, u: u64) -> bool {
        (self.start..self.end).contains(&u)
    }

    pub fn row_start(&self, r: u64) -> u64 {
        self.layout.origin + r * self.layout.width
    }

    /// Units of row `r` that are allocated or held.
    pub fn busy(&self, unavailable: &[u64], r: u64) -> u64 {
        let s = self.row_start(r);
        (s..s + self.layout.width).filter(|&u| bit(unavailable, u)).count() as u64
    }

    /// Free units a row with `busy` units taken keeps from allocation (when not open).
    pub fn trapped_in(&self, busy: u64) -> u64 {
        if busy > 0 && busy < self.layout.width {
            self.layout.width - busy
        } else {
            0
        }
    }

    /// Whether `count` units from `u` may be allocated as far as rows go (the units' own
    /// bits are checked by the caller); if not, the next unit worth trying.
    pub fn run_ok(&self, unavailable: &[u64], u: u64, count: u64) -> Result<(), u64> {
        let origin = self.layout.origin;
        if u < origin {
            return if u + count > origin { Err(origin) } else { Ok(()) };
        }
        let (Some(first), Some(last)) = (self.row_of(u), self.row_of(u + count - 1)) else { return Ok(()) };
        for r in first..=last {
            if Some(r) == self.open {
                continue;
            }
            // A row other than the open one is entered only at its start, and only free.
            if (r == first && u != self.row_start(r)) || self.busy(unavailable, r) != 0 {
                return Err(self.row_start(r + 1));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::alloc::{Allocator, Geometry, RowLayout};
    use crate::format::UNIT_SIZE;

    fn rows_alloc(units: u64, origin: u64, width: u64) -> Allocator {
        let geo = Geometry {
            spacemap_offset: 512 << 10,
            spacemap_chunks: units.div_ceil(crate::format::spacemap::BITS_PER_CHUNK),
            data_offset: 1 << 20,
            data_units: units,
            log_offset: 1 << 20,
            log_bytes: 0,
            groups: std::sync::Arc::new([]),
        };
        let mut a = Allocator::new_empty(geo);
        a.set_rows(RowLayout { origin, width });
        a
    }

    fn unit(a: &Allocator, addr: u64) -> u64 {
        a.geometry().unit_of(addr).unwrap()
    }

    /// Allocate `n` units; their first unit.
    fn take(a: &mut Allocator, n: u64) -> u64 {
        let addr = a.allocate(n).unwrap();
        unit(a, addr)
    }

    /// The write-hole rule: within a txg allocations fill the open row; after the txg (or a
    /// close) nothing goes into a row that holds a block until the whole row is free, and
    /// the space such rows keep is counted as trapped, not offered.
    #[test]
    fn blocks_share_a_row_only_within_the_txg_that_opened_it() {
        // Units 0..4 mirrored, then rows of 4.
        let mut a = rows_alloc(4 + 4 * 16, 4, 4);
        let x = take(&mut a, 2);
        assert_eq!(x, 0, "below the origin: no rows");
        let y = take(&mut a, 3);
        assert_eq!(y, 4, "a run does not cross the origin");
        let z = take(&mut a, 1);
        assert_eq!(z, 7, "the open row is filled");
        let w = take(&mut a, 2);
        assert_eq!(w, 8);
        assert_eq!(a.trapped_units(), 0, "the open row's free units are not trapped");
        a.txg_synced(1);
        // Row 1 (units 8..12) holds a block: closed, its two free units trapped.
        assert_eq!(a.trapped_units(), 2);
        let v = take(&mut a, 1);
        assert_eq!(v, 12, "a new txg starts a free row");
        a.close_row();
        let t = take(&mut a, 1);
        assert_eq!(t, 16, "a closed row is not continued");
        assert_eq!(a.trapped_units(), 2 + 3);
        // Freeing row 1's block frees the row once the deferral passed.
        a.free(a.geometry().addr_of(8), 2, 2).unwrap();
        a.txg_synced(2);
        a.txg_synced(3);
        assert_eq!(a.trapped_units(), 3 + 3, "row 1 free; row 3 (unit 16) closed at the sync");
        let free_before = a.available_units() + a.slop_units();
        assert_eq!(free_before, 4 * 16 + 4 - a.allocated_units() - a.trapped_units() - a.held_units());
        // Filling the pool never hands out a trapped unit.
        let mut got = Vec::new();
        while let Ok(addr) = a.allocate(1) {
            got.push(a.geometry().unit_of(addr).unwrap());
        }
        for trapped in [13, 14, 15, 17, 18, 19] {
            assert!(!got.contains(&trapped), "trapped unit {trapped} allocated");
        }
        assert!(got.contains(&8) && got.contains(&2));
        let _ = UNIT_SIZE;
    }

    #[test]
    fn a_run_longer_than_a_row_takes_whole_free_rows() {
        let mut a = rows_alloc(4 * 8, 0, 4);
        assert_eq!(take(&mut a, 1), 0);
        a.close_row();
        // 6 units: rows 1 and 2, leaving row 2 open with 2 free.
        assert_eq!(take(&mut a, 6), 4);
        assert_eq!(take(&mut a, 2), 10);
        // Wrap-around: row 0 holds unit 0, so the run skips it.
        a.txg_synced(1);
        let mut starts = Vec::new();
        while let Ok(addr) = a.allocate(4) {
            starts.push(a.geometry().unit_of(addr).unwrap());
        }
        assert_eq!(starts, vec![12, 16, 20, 24, 28]);
        assert_eq!(a.trapped_units(), 3);
    }
}
