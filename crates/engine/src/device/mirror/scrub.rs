//! A scrub's reads of a mirrored range: every member's copy verified, failed copies healed
//! from a good one — one block (`mirror_scrub_read`) or a run of blocks read with one request
//! per member (`mirror_scrub_run`).

use super::errors::keep;
use super::{MirrorDevice, MEMBER_AREA_BYTES};
use crate::device::{AlignedBuf, BlockDevice};
use std::io;
use std::ops::Range;
use std::sync::Arc;

impl MirrorDevice {
    pub(super) fn mirror_scrub_read(
        &self,
        buf: &mut [u8],
        offset: u64,
        heal: Range<usize>,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> io::Result<bool> {
        let mut copies: Vec<(usize, io::Result<()>, Vec<u8>)> = Vec::new();
        for (i, dev) in self.read_order() {
            let mut copy = vec![0u8; buf.len()];
            let r = dev.read_at(&mut copy, offset + MEMBER_AREA_BYTES);
            copies.push((i, r, copy));
        }
        let good = copies.iter().position(|(_, r, c)| r.is_ok() && verify(c));
        let Some(good) = good else {
            // No copy verified: report the first copy read (or the last error).
            let mut last = None;
            for (i, r, copy) in copies {
                match r {
                    Ok(()) => {
                        buf.copy_from_slice(&copy);
                        return Ok(false);
                    }
                    Err(e) => {
                        let later = self.read_error(i, "scrub read", &e);
                        last = keep(keep(last, Some(e)), later);
                    }
                }
            }
            return Err(last.unwrap_or_else(|| self.suspended("scrub read")));
        };
        let (_, _, good_copy) = copies.swap_remove(good);
        for (i, r, copy) in copies {
            match r {
                Ok(()) if verify(&copy) => {}
                Ok(()) => self.heal(i, offset, copy, &good_copy, heal.clone()),
                Err(e) => {
                    self.read_error(i, "scrub read", &e);
                    self.rewrite(i, offset, &good_copy, good_copy.len() as u64);
                }
            }
        }
        buf.copy_from_slice(&good_copy);
        Ok(true)
    }

    /// `scrub_read_run` of a mirrored run: the run read from each member in sync once (the
    /// first into `buf`), each block checked in every copy, failed copies healed block by
    /// block from a good one (as `mirror_scrub_read`). A copy whose bytes equal the first
    /// one's has its verdict: only differing copies are hashed again (a scrub hashed twice
    /// the bytes it read, and was CPU-bound). None when a member's read failed: the blocks
    /// then go one by one, which counts and rewrites per block.
    pub(super) fn mirror_scrub_run(
        &self,
        buf: &mut [u8],
        offset: u64,
        blocks: &[(Range<usize>, Range<usize>)],
        verify: &(dyn Fn(usize, &[u8]) -> bool + Sync),
    ) -> Option<Vec<io::Result<bool>>> {
        if blocks.iter().any(|(span, b)| span.end > buf.len() || b.start < span.start || b.end > span.end) {
            return None;
        }
        let order: Vec<(usize, Arc<dyn BlockDevice>)> = self.read_order().collect();
        let ((first, dev), rest) = order.split_first()?;
        dev.read_at(buf, offset + MEMBER_AREA_BYTES).ok()?;
        let mut others: Vec<(usize, AlignedBuf)> = Vec::new();
        for (i, dev) in rest {
            let mut copy = AlignedBuf::zeroed(buf.len());
            dev.read_at(&mut copy, offset + MEMBER_AREA_BYTES).ok()?;
            others.push((*i, copy));
        }
        let results = blocks
            .iter()
            .enumerate()
            .map(|(k, (span, block))| {
                let first_ok = verify(k, &buf[block.clone()]);
                let ok: Vec<bool> =
                    others
                        .iter()
                        .map(|(_, c)| {
                            if c[block.clone()] == buf[block.clone()] {
                                first_ok
                            } else {
                                verify(k, &c[block.clone()])
                            }
                        })
                        .collect();
                let heal = block.start - span.start..block.end - span.start;
                let at = offset + span.start as u64;
                if !first_ok {
                    // No copy verified: the caller reports the corruption (`buf` holds the first).
                    let good = ok.iter().position(|v| *v)?;
                    self.heal(*first, at, buf[span.clone()].to_vec(), &others[good].1[span.clone()], heal.clone());
                    buf[span.clone()].copy_from_slice(&others[good].1[span.clone()]);
                }
                for ((i, c), _) in others.iter().zip(&ok).filter(|(_, v)| !**v) {
                    self.heal(*i, at, c[span.clone()].to_vec(), &buf[span.clone()], heal.clone());
                }
                Some(())
            })
            .map(|healed| Ok(healed.is_some()))
            .collect();
        Some(results)
    }
}
