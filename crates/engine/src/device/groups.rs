//! Device groups: the logical device of a pool that spans several device sets (`strata
//! pool add`; a ZFS pool's top-level vdevs). Each group is a whole device (a mirror or a
//! parity2 set) whose logical space follows the previous group's: group 0 at 0, the next at
//! a `base` the pool's label records (format::label `GroupPhys`). The pool above lays out
//! each group's space (alloc/geometry.rs) and never places a block across two groups, so
//! every I/O lands in one group: one that would cross is refused, not split.
//!
//! Groups are only ever appended, so the table is a fixed array of once-set slots and a
//! count: the I/O path takes no lock.

use super::status::SetStatus;
use super::{BlockDevice, MirrorDevice};
use crate::format::label::GROUPS_MAX;
use crate::sync::atomic::{AtomicUsize, Ordering};
use std::io;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

/// Groups a pool may have: the first and those its label may add.
pub const GROUPS_TOTAL: usize = GROUPS_MAX + 1;

struct Group {
    base: u64,
    dev: Arc<dyn BlockDevice>,
}

pub struct GroupedDevice {
    groups: Box<[OnceLock<Group>]>,
    count: AtomicUsize,
    fan: super::mirror::fan_out::FanOut,
}

impl GroupedDevice {
    /// A pool's device of one group, `first` (more are added with `push`).
    pub fn new(first: Arc<dyn BlockDevice>) -> GroupedDevice {
        let groups: Box<[OnceLock<Group>]> = (0..GROUPS_TOTAL).map(|_| OnceLock::new()).collect();
        let _ = groups[0].set(Group { base: 0, dev: first });
        GroupedDevice { groups, count: AtomicUsize::new(1), fan: super::mirror::fan_out::FanOut::new() }
    }

    /// Add `dev` as the next group at `base` (past the end of the last one). The caller
    /// serialises additions (the pool's lock).
    pub fn push(&self, base: u64, dev: Arc<dyn BlockDevice>) -> io::Result<()> {
        let n = self.count.load(Ordering::Acquire);
        if base < self.size_bytes() || n >= GROUPS_TOTAL {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a device group at {base} overlaps the pool's groups, or the pool has {n} groups already"),
            ));
        }
        self.groups[n].set(Group { base, dev }).map_err(|_| io::Error::other("two device groups added at once"))?;
        self.count.store(n + 1, Ordering::Release);
        Ok(())
    }

    fn all(&self) -> impl Iterator<Item = &Group> + '_ {
        let n = self.count.load(Ordering::Acquire);
        self.groups[..n].iter().filter_map(OnceLock::get)
    }

    /// The groups: (where each starts in the logical space, its device).
    pub fn groups(&self) -> Vec<(u64, Arc<dyn BlockDevice>)> {
        self.all().map(|g| (g.base, g.dev.clone())).collect()
    }

    pub fn group_count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// The group holding `len` bytes at `offset`, and the offset in it.
    fn route(&self, offset: u64, len: usize) -> io::Result<(&Group, u64)> {
        let g = self.all().filter(|g| g.base <= offset).last();
        let fits = |g: &Group| {
            let at = offset - g.base;
            at.checked_add(len as u64).is_some_and(|end| end <= g.dev.size_bytes())
        };
        match g {
            Some(g) if fits(g) => Ok((g, offset - g.base)),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("I/O of {len} bytes at {offset} is not inside one device group of {}", self.describe()),
            )),
        }
    }

    /// The mirrors or parity2 sets among the groups, with their range of the logical space.
    pub fn sets(&self) -> Vec<(Range<u64>, Arc<dyn BlockDevice>)> {
        self.all()
            .filter(|g| g.dev.as_mirror().is_some())
            .map(|g| (g.base..g.base + g.dev.size_bytes(), g.dev.clone()))
            .collect()
    }
}

impl BlockDevice for GroupedDevice {
    fn size_bytes(&self) -> u64 {
        self.all().last().map_or(0, |g| g.base + g.dev.size_bytes())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let (g, at) = self.route(offset, buf.len())?;
        g.dev.read_at(buf, at)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let (g, at) = self.route(offset, buf.len())?;
        g.dev.write_at(buf, at)
    }

    fn flush(&self) -> io::Result<()> {
        let groups: Vec<&Group> = self.all().collect();
        let results = self.fan.map(&groups, |g| g.dev.flush(), || Err(io::Error::other("a group's flush panicked")));
        results.into_iter().collect()
    }

    fn write_durable(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let (g, at) = self.route(offset, buf.len())?;
        g.dev.write_durable(buf, at)
    }

    fn describe(&self) -> String {
        let groups: Vec<String> = self.all().map(|g| g.dev.describe()).collect();
        match groups.as_slice() {
            [one] => one.clone(),
            many => format!("groups [{}]", many.join("; ")),
        }
    }

    fn read_verified(
        &self,
        buf: &mut [u8],
        offset: u64,
        heal: Range<usize>,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> io::Result<bool> {
        let (g, at) = self.route(offset, buf.len())?;
        g.dev.read_verified(buf, at, heal, verify)
    }

    fn scrub_read(
        &self,
        buf: &mut [u8],
        offset: u64,
        heal: Range<usize>,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> io::Result<bool> {
        let (g, at) = self.route(offset, buf.len())?;
        g.dev.scrub_read(buf, at, heal, verify)
    }

    fn scrub_read_run(
        &self,
        buf: &mut [u8],
        offset: u64,
        blocks: &[(Range<usize>, Range<usize>)],
        verify: &(dyn Fn(usize, &[u8]) -> bool + Sync),
    ) -> Vec<io::Result<bool>> {
        // A run within one group goes to it whole; one across groups, block by block.
        match self.route(offset, buf.len()) {
            Ok((g, at)) => g.dev.scrub_read_run(buf, at, blocks, verify),
            Err(_) => super::scrub_blocks_one_by_one(self, buf, offset, blocks, verify),
        }
    }

    fn read_best(&self, buf: &mut [u8], offset: u64, score: &dyn Fn(&[u8]) -> Option<u64>) -> io::Result<Option<u64>> {
        let (g, at) = self.route(offset, buf.len())?;
        g.dev.read_best(buf, at, score)
    }

    fn note_txg(&self, txg: u64) {
        self.all().for_each(|g| g.dev.note_txg(txg));
    }

    /// A parity2 set's rows, while it is the only group; with several, the pool asks each
    /// group (`groups`) and the allocator keeps rows per group.
    fn rows(&self) -> Option<(u64, u64)> {
        match self.group_count() {
            1 => self.all().next().and_then(|g| g.dev.rows()),
            _ => None,
        }
    }

    /// The first group's report, with the members of every group and the worst health.
    fn set_status(&self) -> Option<SetStatus> {
        let mut statuses = self.all().enumerate().filter_map(|(i, g)| Some((i, g.dev.set_status()?)));
        let (_, mut first) = statuses.next()?;
        for (group, s) in statuses {
            first.health = first.health.max(s.health);
            first.members.extend(s.members.into_iter().map(|m| super::MemberStatus { group, ..m }));
            first.rebuild = first.rebuild.or(s.rebuild);
        }
        Some(first)
    }

    /// The mirror, while the pool has one group; with several, administration goes through
    /// `sets`.
    fn as_mirror(&self) -> Option<&MirrorDevice> {
        match self.group_count() {
            1 => self.groups[0].get().and_then(|g| g.dev.as_mirror()),
            _ => None,
        }
    }

    fn as_groups(&self) -> Option<&GroupedDevice> {
        Some(self)
    }
}
