//! The devices under a run's pool: one simulated disk, or a device set (a 2- or 3-way
//! mirror, or parity2 over 4–6 members) of simulated disks on one power supply, each member
//! behind its own [`SimDevice`] (a scheduling point per I/O, its own fault) so that the
//! mirror's per-member threads interleave under the seed like every other thread.
//!
//! A member's fault (an error, a pulled disk, bits flipped in what it wrote) must never
//! reach the workload while the layout tolerates it: on a set, the only error a run may
//! see is the power failure.

use crate::check::SECTOR;
use crate::disk::{Fault, SimDevice};
use std::sync::Arc;
use strata_engine::format::member::Layout;
use strata_engine::sync::atomic::AtomicUsize;
use strata_engine::{BlockDevice, MirrorDevice};
use strata_testkit::devset::member_guid;
use strata_testkit::{test_create_options, SimDisk, SimPower, SimRng};

/// Size of the one disk of a plain run, and of each member of a mirror.
pub const DISK_BYTES: u64 = 32 << 20;
/// Size of each member of a parity2 set (its logical size is (members - 2) × this).
pub const PARITY_MEMBER_BYTES: u64 = 16 << 20;

pub struct Rig {
    /// None: one plain device.
    pub layout: Option<Layout>,
    /// The disk, or the members in set order.
    pub members: Vec<Arc<SimDevice>>,
    /// The set's power supply (a plain disk has its own).
    pub power: Option<Arc<SimPower>>,
    /// What the pool sees.
    pub device: Arc<dyn BlockDevice>,
    /// The members that were given a fault.
    pub victims: Vec<usize>,
    /// A device admin thread takes fault-free members offline and resyncs them
    /// (resync.rs); the faults leave room for one member more out of sync.
    pub resync: bool,
    /// The member the device admin has out of sync now (usize::MAX: none).
    pub out_of_sync: AtomicUsize,
}

impl Rig {
    /// One disk with `fault`.
    pub fn single(fault: Fault) -> Rig {
        let disk = Arc::new(SimDisk::new(DISK_BYTES, SECTOR));
        let dev = Arc::new(SimDevice::new(disk, fault));
        Rig {
            layout: None,
            members: vec![dev.clone()],
            power: None,
            device: dev,
            victims: Vec::new(),
            resync: false,
            out_of_sync: AtomicUsize::new(usize::MAX),
        }
    }

    /// A device set drawn from `rng`: the layout, its width, and a fault on as many members
    /// as it tolerates or fewer (each a write, flush or read error, a pulled disk, or bits
    /// flipped in a few of its writes), at a random I/O of that member.
    pub fn random_set(rng: &mut SimRng, seed: u64) -> Rig {
        let (layout, ways) = match rng.below(3) {
            0 => (Layout::Mirror, 2),
            1 => (Layout::Mirror, 3),
            _ => (Layout::Parity2, rng.range(4, 7) as usize),
        };
        let tolerance = ways_tolerated(layout, ways);
        // Mostly as many faulted members as the layout tolerates, sometimes fewer or none.
        let n_victims = if rng.chance(20) { rng.below(tolerance as u64) as usize } else { tolerance };
        let mut faults = vec![Fault::None; ways];
        let mut victims = Vec::new();
        while victims.len() < n_victims {
            let v = rng.below(ways as u64) as usize;
            if victims.contains(&v) {
                continue;
            }
            faults[v] = match rng.below(5) {
                // A member does 50–400 writes in a run, a few dozen flushes and reads.
                0 => Fault::Write(rng.range(1, 80)),
                1 => Fault::Flush(rng.range(1, 20)),
                2 => Fault::Read(rng.range(1, 30)),
                3 => Fault::Gone(rng.range(1, 80)),
                _ => Fault::Rot(rng.range(1, 80), rng.range(1, 20)),
            };
            victims.push(v);
        }
        // Two runs in five also take members offline and back (their own draw, so that the
        // layouts and faults of the other runs stay what they were): one faulted member
        // fewer, so that a member offline and the faults stay within what the layout bears.
        let resync = SimRng::new(seed ^ 0x5E5C).chance(40);
        if resync {
            if let Some(v) = (victims.len() == tolerance).then(|| victims.pop()).flatten() {
                faults[v] = Fault::None;
            }
        }
        let size = if layout == Layout::Parity2 { PARITY_MEMBER_BYTES } else { DISK_BYTES };
        let power = Arc::new(SimPower::default());
        let members: Vec<Arc<SimDevice>> = faults
            .into_iter()
            .map(|f| {
                let disk = Arc::new(SimDisk::new(size, SECTOR));
                disk.share_power(power.clone());
                Arc::new(SimDevice::new(disk, f))
            })
            .collect();
        let devs = members.iter().enumerate().map(|(i, m)| (m.clone() as Arc<dyn BlockDevice>, member_guid(i)));
        let set = MirrorDevice::create(layout, devs.collect(), test_create_options(seed).pool_guid, seed ^ 0x5e7, 1)
            .expect("create the device set");
        Rig {
            layout: Some(layout),
            members,
            power: Some(power),
            device: Arc::new(set),
            victims,
            resync,
            out_of_sync: AtomicUsize::new(usize::MAX),
        }
    }

    /// Members that may be missing or wrong at once and the pool still holds every byte.
    pub fn tolerance(&self) -> usize {
        self.layout.map_or(0, |l| ways_tolerated(l, self.members.len()))
    }

    /// What the run's header line says of the devices.
    pub fn describe(&self) -> String {
        match self.layout {
            None => String::new(),
            Some(l) => {
                let faults: Vec<String> =
                    self.victims.iter().map(|&v| format!("{:?} on {v}", self.members[v].fault())).collect();
                let resync = if self.resync { " + resync" } else { "" };
                format!("{l:?}×{} [{}]{resync}", self.members.len(), faults.join(", "))
            }
        }
    }

    /// Inject faults from now on (the setup is over).
    pub fn arm(&self) {
        self.members.iter().for_each(|m| m.arm());
    }

    /// Faults that hit, on every member.
    pub fn injected(&self) -> u64 {
        self.members.iter().map(|m| m.injected()).sum()
    }

    /// The I/O sequence of every member, in set order.
    pub fn fingerprint(&self) -> u64 {
        self.members.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, m| (h ^ m.fingerprint()).wrapping_mul(0x100_0000_01b3))
    }

    /// I/Os refused because the power was off (more than zero: the engine met the failure).
    pub fn refused_ios(&self) -> u64 {
        self.members.iter().map(|m| m.disk.refused_ios()).sum()
    }

    pub fn has_crashed(&self) -> bool {
        self.members[0].disk.has_crashed()
    }

    /// Let `n` more writes and flushes (of all members together) succeed, then cut the power.
    pub fn set_crash_after(&self, n: u64) {
        match &self.power {
            Some(p) => p.set_crash_after(n),
            None => self.members[0].disk.set_crash_after(n),
        }
    }

    /// Writes and flushes so far, on every member.
    pub fn op_count(&self) -> u64 {
        self.members.iter().map(|m| m.disk.op_count()).sum()
    }
}

fn ways_tolerated(layout: Layout, ways: usize) -> usize {
    match layout {
        Layout::Mirror => ways - 1,
        Layout::Parity2 => 2,
    }
}
