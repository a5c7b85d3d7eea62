//! The data units a parity2 set last wrote to rows it wrote only in part.
//!
//! A write covering part of a row must compute the row's parity over the row's other data
//! units too. Read back from the members, a unit that went bad after it was written (a
//! flipped bit, a misdirected write) would be taken as the truth: the new parity would
//! cover the bad bytes, and the block could no longer be reconstructed — one bad member
//! would lose data that two parity units protect. The units this set wrote itself are
//! therefore remembered, per row, while the row may still be written in part: the open
//! row a txg is filling (alloc/rows.rs) gets its blocks one write at a time. Found by the
//! simulator's `set` scenario (seed 85590243: bits flipped on two members of a parity2 set
//! of five, and a scrub found a block no hypothesis could reconstruct).
//!
//! Bounded: the rows most recently written in part (a txg fills one row at a time; the
//! intent log's blocks get whole rows). A row forgotten is read back from the members, as
//! before. Callers hold the row's lock (parity.rs `lock_rows`).

use std::collections::VecDeque;

/// Rows remembered at most.
const MAX_ROWS: usize = 64;

#[derive(Default)]
pub(super) struct OpenRows {
    /// (row, its data units by position: the bytes last written there, if written here),
    /// most recently written last.
    rows: VecDeque<(u64, Vec<Option<Box<[u8]>>>)>,
}

impl OpenRows {
    /// The bytes this set last wrote to data unit `k` of row `row`, if remembered.
    pub(super) fn unit(&self, row: u64, k: usize) -> Option<&[u8]> {
        let (_, units) = self.rows.iter().find(|(r, _)| *r == row)?;
        units.get(k)?.as_deref()
    }

    /// Remember `units` (every data unit of `row`: what its parity now covers).
    pub(super) fn remember(&mut self, row: u64, units: Vec<Option<Box<[u8]>>>) {
        self.forget(row);
        if self.rows.len() == MAX_ROWS {
            self.rows.pop_front();
        }
        self.rows.push_back((row, units));
    }

    /// Forget `row` (written whole: no later write can need its old units).
    pub(super) fn forget(&mut self, row: u64) {
        self.rows.retain(|(r, _)| *r != row);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.rows.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(b: u8) -> Vec<Option<Box<[u8]>>> {
        vec![Some(vec![b; 8].into_boxed_slice()), None]
    }

    #[test]
    fn remembers_the_latest_units_of_a_bounded_number_of_rows() {
        let mut o = OpenRows::default();
        o.remember(7, units(1));
        o.remember(7, units(2));
        assert_eq!(o.unit(7, 0), Some(&[2u8; 8][..]), "the latest write wins");
        assert_eq!(o.unit(7, 1), None, "a unit never written here is read from the members");
        for r in 100..100 + MAX_ROWS as u64 {
            o.remember(r, units(3));
        }
        assert_eq!(o.len(), MAX_ROWS);
        assert_eq!(o.unit(7, 0), None, "the oldest row is forgotten first");
        o.forget(100);
        assert_eq!(o.unit(100, 0), None);
    }
}
