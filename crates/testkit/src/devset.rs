//! Simulated device sets: the members of a mirror as simulated disks on one power supply,
//! and reopening a set from crash images with members missing.

use crate::model::{assert_last_acknowledged_sync, capture, PoolModel};
use crate::workload::object_op;
use crate::{test_create_options, CrashMode, SimDisk, SimPower, SimRng};
use std::sync::Arc;
use strata_engine::format::member::{Layout, MEMBER_AREA_BYTES};
use strata_engine::format::node::IndirectPhys;
use strata_engine::format::BlockPtr;
use strata_engine::{BlockDevice, CheckOptions, MirrorDevice, ObjectId, Pool, Result, VolumeId};

/// A simulated mirror: its members (sharing one power supply) and the mirror device.
pub struct SimMirror {
    pub disks: Vec<Arc<SimDisk>>,
    pub power: Arc<SimPower>,
    pub dev: Arc<MirrorDevice>,
}

/// Member guids of test mirrors: 0x100 + index.
pub fn member_guid(i: usize) -> u64 {
    0x100 + i as u64
}

impl SimMirror {
    /// A new `ways`-way mirror of disks of `size` bytes for the pool `test_create_options(seed)`.
    pub fn create(ways: usize, size: u64, sector: usize, seed: u64) -> SimMirror {
        SimMirror::create_set(Layout::Mirror, ways, size, sector, seed)
    }

    /// A new device set of `layout` over `ways` disks of `size` bytes.
    pub fn create_set(layout: Layout, ways: usize, size: u64, sector: usize, seed: u64) -> SimMirror {
        let power = Arc::new(SimPower::default());
        let disks: Vec<Arc<SimDisk>> = (0..ways)
            .map(|_| {
                let d = Arc::new(SimDisk::new(size, sector));
                d.share_power(power.clone());
                d
            })
            .collect();
        let members = disks.iter().enumerate().map(|(i, d)| (d.clone() as Arc<dyn BlockDevice>, member_guid(i)));
        let dev = MirrorDevice::create(layout, members.collect(), test_create_options(seed).pool_guid, seed ^ 0x5e7, 1)
            .expect("create device set");
        SimMirror { disks, power, dev: Arc::new(dev) }
    }

    /// Open the mirror of `disks` (None: that member is missing).
    pub fn open(disks: Vec<Option<Arc<SimDisk>>>, writable: bool) -> Result<(SimMirror, Vec<String>)> {
        let power = Arc::new(SimPower::default());
        let found = disks
            .iter()
            .enumerate()
            .map(|(i, d)| match d {
                Some(d) => {
                    d.share_power(power.clone());
                    Ok(d.clone() as Arc<dyn BlockDevice>)
                }
                None => Err(format!("member {i}: missing")),
            })
            .collect();
        let (dev, notes) = MirrorDevice::open(found, writable)?;
        Ok((SimMirror { disks: disks.into_iter().flatten().collect(), power, dev: Arc::new(dev) }, notes))
    }

    /// Fresh copies of the members' current images with as many members other than `keep`
    /// left out as `layout` tolerates: opened, `keep` (with the fewest others the layout
    /// needs) must hold the pool — what a rebuilt or resynced member is checked by.
    pub fn alone(&self, layout: Layout, keep: usize, sector: usize) -> Vec<Option<Arc<SimDisk>>> {
        let tolerated = if layout == Layout::Parity2 { 2 } else { self.disks.len() - 1 };
        let mut left_out = 0;
        (0..self.disks.len())
            .map(|j| {
                if j != keep && left_out < tolerated {
                    left_out += 1;
                    return None;
                }
                Some(Arc::new(SimDisk::from_image(self.disks[j].current_image(), sector)))
            })
            .collect()
    }

    /// The logical device, as the pool takes it.
    pub fn device(&self) -> Arc<dyn BlockDevice> {
        self.dev.clone()
    }
}

/// Where logical byte `offset` of a mirror is on each member.
pub fn member_offset(offset: u64) -> u64 {
    offset + MEMBER_AREA_BYTES
}

/// Damaged copies a scrub found (and repaired) on a device set's members; the checker must
/// be clean.
pub fn scrub_damage(pool: &Pool) -> u64 {
    let damaged = |pool: &Pool| -> u64 {
        pool.status().devices.expect("a device set").members.iter().map(|m| m.checksum_errors).sum()
    };
    let before = damaged(pool);
    let r = pool.check(CheckOptions { all_copies: true, ..Default::default() }).expect("scrub");
    assert!(r.is_clean(), "{:#?}", r.errors);
    damaged(pool) - before
}

/// After a crash test reopened a device set: the state must be the last acknowledged sync
/// (or the one in flight), a scrub must leave nothing for a second one, and the pool must go
/// on taking work (volumes "a" and "b"). Returns (the intent log was replayed, the first
/// scrub repaired something).
pub fn check_reopened_set(
    pool: &Pool,
    synced: &[PoolModel],
    acked: usize,
    rng: &mut SimRng,
    seed: u64,
) -> (bool, bool) {
    let replayed = assert_last_acknowledged_sync(pool, synced, acked, seed);
    let r = pool.check(CheckOptions { all_copies: true, ..Default::default() }).expect("scrub");
    assert!(r.is_clean(), "seed {seed}: scrub: {:#?}", r.errors);
    let set = pool.status().devices.expect("a device set");
    let repaired = set.members.iter().any(|s| s.repaired_bytes > 0);
    let again = scrub_damage(pool);
    assert_eq!(again, 0, "seed {seed}: a second scrub found damage the first left: {set:?}");
    let mut model = PoolModel::clone(&capture(pool).expect("capture"));
    for _ in 0..20 {
        let name = if rng.chance(50) { "a" } else { "b" };
        let vol = pool.volume_id(name).expect("volume");
        object_op(rng, pool, vol, model.volumes.get_mut(name).expect("modelled")).expect("work after the reopen");
    }
    pool.commit().expect("commit after the reopen");
    assert!(pool.check(CheckOptions::default()).expect("check").is_clean(), "seed {seed}");
    (replayed, repaired)
}

/// The block pointer of record `rec` of an object whose block tree has one level (through
/// its indirect block, read from the set's logical device).
pub fn data_block(set: &SimMirror, pool: &Pool, vol: VolumeId, obj: ObjectId, rec: usize) -> BlockPtr {
    let (root, levels) = pool.object_block_root(vol, obj).expect("block root");
    assert_eq!(levels, 1, "one level of indirect blocks");
    let mut raw = vec![0u8; root.psize as usize];
    set.dev.read_at(&mut raw, root.addr).expect("read the indirect block");
    raw.resize(16384, 0);
    IndirectPhys::decode(&raw, None).expect("an indirect block").bps[rec]
}

/// One step of a crash test's workload on volumes `vols`: a commit or an intent-log sync
/// (recorded in `synced`; `acked` moves to it when it returned Ok), or an object operation
/// recorded in `model`.
pub fn sync_or_work(
    rng: &mut SimRng,
    pool: &Pool,
    vols: &[(String, VolumeId)],
    model: &mut PoolModel,
    synced: &mut Vec<PoolModel>,
    acked: &mut usize,
) -> Result<()> {
    if rng.chance(12) {
        synced.push(model.clone());
        let r = if rng.chance(20) { pool.commit().map(|_| ()) } else { pool.sync_log() };
        if r.is_ok() {
            *acked = synced.len() - 1;
        }
        r
    } else {
        let (name, vol) = vols[rng.below(vols.len() as u64) as usize].clone();
        object_op(rng, pool, vol, model.volumes.get_mut(&name).expect("modelled volume"))
    }
}

impl SimMirror {
    /// Cut the power now if the workload did not (every crash test run loses power), and
    /// each member's image after it, each member tearing its unflushed writes its own way
    /// (one random mode for all).
    pub fn crash_images(&self, rng: &mut SimRng, sector: usize) -> Vec<Option<Arc<SimDisk>>> {
        if !self.power.has_crashed() {
            self.power.set_crash_after(0);
        }
        let mode = *rng.pick(&[CrashMode::Random, CrashMode::DropUnflushed, CrashMode::KeepAll]);
        self.disks.iter().map(|d| Some(Arc::new(SimDisk::from_image(d.crash_image(mode, rng), sector)))).collect()
    }
}

/// A pool's device groups (`Pool::add_group`): mirrors of simulated disks, every disk on
/// one power supply. `dev` is the pool's device; it holds the first set, the others are
/// added by the test.
pub struct SimGroups {
    pub sets: Vec<SimMirror>,
    pub power: Arc<SimPower>,
    pub dev: Arc<strata_engine::GroupedDevice>,
}

impl SimGroups {
    /// `groups` mirrors of `ways` disks of `size` bytes for the pool `test_create_options(seed)`
    /// (set guids differ per group); the pool's device holds the first.
    pub fn create(ways: usize, size: u64, sector: usize, seed: u64, groups: usize) -> SimGroups {
        SimGroups::create_layout(Layout::Mirror, ways, size, sector, seed, groups)
    }

    /// `groups` sets of `layout` over `ways` disks each.
    pub fn create_layout(layout: Layout, ways: usize, size: u64, sector: usize, seed: u64, groups: usize) -> SimGroups {
        let power = Arc::new(SimPower::default());
        let sets: Vec<SimMirror> = (0..groups)
            .map(|g| {
                let disks: Vec<Arc<SimDisk>> = (0..ways)
                    .map(|_| {
                        let d = Arc::new(SimDisk::new(size, sector));
                        d.share_power(power.clone());
                        d
                    })
                    .collect();
                let members =
                    disks.iter().enumerate().map(|(i, d)| (d.clone() as Arc<dyn BlockDevice>, member_guid(i + 8 * g)));
                let set_guid = seed ^ 0x5e7 ^ ((g as u64 + 1) << 40);
                let dev =
                    MirrorDevice::create(layout, members.collect(), test_create_options(seed).pool_guid, set_guid, 1)
                        .expect("create device set");
                SimMirror { disks, power: power.clone(), dev: Arc::new(dev) }
            })
            .collect();
        let dev = Arc::new(strata_engine::GroupedDevice::new(sets[0].device()));
        SimGroups { sets, power, dev }
    }

    /// Reopen groups from images (`images[g][member]`, None: missing): every set opened,
    /// then assembled as the first set's pool label says.
    pub fn open(images: Vec<Vec<Option<Arc<SimDisk>>>>, writable: bool) -> Result<(SimGroups, Vec<String>)> {
        let power = Arc::new(SimPower::default());
        let mut sets = Vec::new();
        let mut notes = Vec::new();
        for disks in images {
            let (mut m, n) = SimMirror::open(disks, writable)?;
            m.disks.iter().for_each(|d| d.share_power(power.clone()));
            m.power = power.clone();
            notes.extend(n);
            sets.push(m);
        }
        let others = sets[1..].iter().map(|s| s.device()).collect();
        let (dev, n) = strata_engine::pool::groups::assemble(sets[0].device(), others)?;
        notes.extend(n);
        Ok((SimGroups { sets, power, dev }, notes))
    }

    pub fn device(&self) -> Arc<dyn BlockDevice> {
        self.dev.clone()
    }

    /// Cut the power now if the workload did not, and take every member's image after it.
    pub fn crash_images(&self, rng: &mut SimRng, sector: usize) -> Vec<Vec<Option<Arc<SimDisk>>>> {
        if !self.power.has_crashed() {
            self.power.set_crash_after(0);
        }
        let mode = *rng.pick(&[CrashMode::Random, CrashMode::DropUnflushed, CrashMode::KeepAll]);
        self.sets
            .iter()
            .map(|s| {
                s.disks.iter().map(|d| Some(Arc::new(SimDisk::from_image(d.crash_image(mode, rng), sector)))).collect()
            })
            .collect()
    }
}

/// `img` (a member's image) with both copies of its label changed by `change` and written
/// again (as another build, or another moment, would have left them).
pub fn rewrite_labels(img: &mut [u8], change: impl Fn(&mut strata_engine::format::member::MemberLabelPhys)) {
    use strata_engine::format::member::{MemberLabelPhys, MEMBER_LABEL_COPY_1, MEMBER_LABEL_SIZE};
    for at in [0usize, MEMBER_LABEL_COPY_1 as usize] {
        let raw = &mut img[at..at + MEMBER_LABEL_SIZE];
        let mut l = MemberLabelPhys::decode(raw, at as u64).expect("a member label");
        change(&mut l);
        raw.copy_from_slice(&l.encode());
    }
}

/// `len` bytes of a pattern for logical offset `off`, varied by `i` (the resync tests' data).
pub fn pattern(i: u8, off: u64, len: usize) -> Vec<u8> {
    (off..off + len as u64).map(|j| (j % 251) as u8 ^ i).collect()
}

/// Rebuild steps of `window` bytes until the rebuild ends; the bytes they copied.
pub fn rebuild_all(pool: &Pool, window: u64) -> u64 {
    let mut copied = 0;
    for _ in 0..100_000 {
        let Some(p) = pool.rebuild_step(window).expect("rebuild step") else { return copied };
        copied += p.copied;
        if p.done {
            return copied;
        }
    }
    panic!("the rebuild does not end");
}

/// Bring member `victim` of `m` (opened as `pool`) online and check its resync: the note says
/// it is resynced (not rebuilt), it copies more than nothing and less than `most` bytes, the
/// member ends ONLINE with no stale copy for a scrub to find, and alone (with as few others
/// as the layout needs) it holds what the pool held. Returns the pool opened from it.
pub fn resync_and_check(layout: Layout, m: &SimMirror, pool: Pool, victim: usize, most: u64) -> Pool {
    m.dev.online(victim).expect("online");
    let member = |pool: &Pool| pool.status().devices.expect("a device set").members[victim].clone();
    let note = member(&pool).note.unwrap_or_default();
    assert!(note.contains("being resynced"), "{layout:?}: {note}");
    let copied = rebuild_all(&pool, 4 << 20);
    assert!(copied > 0 && copied < most, "{layout:?}: the resync copied {copied} bytes");
    assert_eq!(member(&pool).state, strata_engine::MemberState::Online, "{layout:?}");
    assert_eq!(scrub_damage(&pool), 0, "{layout:?}: the resynced member holds a stale copy");
    let want = capture(&pool).expect("capture");
    drop(pool);
    let (alone, _) = SimMirror::open(m.alone(layout, victim, 4096), true).expect("the member alone opens");
    let pool = Pool::open(alone.device(), crate::test_pool_options()).expect("the pool opens from the member");
    assert_eq!(capture(&pool).expect("capture"), want, "{layout:?}: the resynced member lacks what it missed");
    pool
}
