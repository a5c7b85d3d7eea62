//! Rebuilding a mirror member (device/mirror/rebuild.rs does the copying): which logical
//! ranges hold something — the fixed regions (labels, uberblock rings, space map, intent
//! log) and the units of the data area that are allocated or freed but still held — taken
//! window by window under the pool's lock (a moment: a bitmap scan), then copied without it.
//! Units allocated after a window was scanned are written to the rebuilding member by their
//! own writes; units freed meanwhile are copied for nothing. The daemon calls
//! `rebuild_step` in a loop at the rate it allows.

use crate::device::RebuildStatus;
use crate::error::Result;
use crate::format::UNIT_SIZE;
use crate::pool::Pool;

/// Where a rebuild stands after a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebuildProgress {
    pub status: RebuildStatus,
    /// Bytes this step copied.
    pub copied: u64,
    /// The rebuild is complete (the member is ONLINE).
    pub done: bool,
}

impl Pool {
    /// Copy the next `window` logical bytes of the rebuild in progress (only what the pool
    /// uses in them). `None`: no rebuild in progress (or the pool is not a mirror).
    pub fn rebuild_step(&self, window: u64) -> Result<Option<RebuildProgress>> {
        self.rebuild_step_lanes(window, crate::device::mirror::COPY_LANES)
    }

    /// `rebuild_step` with `lanes` chunks of a mirror's copy in flight: fewer while clients
    /// are served (their I/O waits behind the copy's), the default when idle.
    pub fn rebuild_step_lanes(&self, window: u64, lanes: usize) -> Result<Option<RebuildProgress>> {
        let dev = self.lock().dev.clone();
        // The set being rebuilt, and where its logical space starts in the pool's.
        let sets = match dev.as_groups() {
            Some(g) => g.sets().into_iter().map(|(r, d)| (r.start, d)).collect(),
            None => vec![(0, dev.clone())],
        };
        let found = sets.iter().find_map(|(base, d)| Some((*base, d.as_mirror()?, d.as_mirror()?.rebuild_status()?)));
        let Some((base, mirror, status)) = found else { return Ok(None) };
        let start = status.cursor;
        let end = start.saturating_add(window.max(UNIT_SIZE)).min(status.end);
        let extents = {
            let p = self.lock();
            live_extents(&p, base + start, base + end)
                .into_iter()
                .map(|(off, len)| (off - base, len))
                .collect::<Vec<_>>()
        };
        let copied = mirror.rebuild_copy_lanes(&extents, end, lanes)?;
        let now = mirror.rebuild_status();
        let done = now.is_none();
        Ok(Some(RebuildProgress {
            status: now.unwrap_or(RebuildStatus { cursor: status.end, ..status }),
            copied,
            done,
        }))
    }

    /// The pool's device (a mirror's logical device: `as_mirror` administers it).
    pub fn device(&self) -> std::sync::Arc<dyn crate::device::BlockDevice> {
        self.lock().dev.clone()
    }
}

/// What the pool holds in `lo..hi` of its logical space, as (offset, bytes): the fixed
/// regions — labels, uberblock rings and space map in full; of the intent log region only
/// what replay could read (`IntentLog::live_in_pool`: on a 4 GiB device the region is
/// 64 MiB, most of it stale blocks) — each added group's space map region, and the units
/// that are allocated or freed but still held.
fn live_extents(p: &crate::pool::PoolInner, lo: u64, hi: u64) -> Vec<(u64, u64)> {
    let geo = p.alloc.geometry();
    let log_live = (geo.log_offset, geo.log_offset + p.ilog.live_in_pool().min(geo.log_bytes));
    let fixed = [(0, log_live.1), (geo.log_offset + geo.log_bytes, geo.data_offset)]
        .into_iter()
        .chain(geo.groups.iter().map(|s| (s.base, s.data_offset)));
    let mut extents = Vec::new();
    for (a, b) in fixed {
        let (a, b) = (a.max(lo), b.min(hi));
        if a < b {
            extents.push((a, b - a));
        }
    }
    let areas = std::iter::once((geo.data_offset, 0, geo.data_units))
        .chain(geo.groups.iter().map(|s| (s.data_offset, s.first_unit, s.units)));
    for (data_offset, first_unit, units) in areas {
        let a = lo.max(data_offset);
        let b = hi.min(data_offset + units * UNIT_SIZE);
        if a >= b {
            continue;
        }
        let first = (a - data_offset) / UNIT_SIZE;
        let last = (b - data_offset).div_ceil(UNIT_SIZE);
        for (u, n) in p.alloc.unavailable_runs(first_unit + first, last - first) {
            let off = data_offset + (u - first_unit) * UNIT_SIZE;
            let stop = (off + n * UNIT_SIZE).min(b);
            extents.push((off.max(a), stop - off.max(a)));
        }
    }
    extents.sort_unstable();
    extents
}
