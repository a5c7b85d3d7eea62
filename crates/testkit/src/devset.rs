//! Simulated device sets: the members of a mirror as simulated disks on one power supply,
//! and reopening a set from crash images with members missing.

use crate::{test_create_options, SimDisk, SimPower};
use std::sync::Arc;
use strata_engine::format::member::{Layout, MEMBER_AREA_BYTES};
use strata_engine::{BlockDevice, MirrorDevice, Result};

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

    /// The logical device, as the pool takes it.
    pub fn device(&self) -> Arc<dyn BlockDevice> {
        self.dev.clone()
    }
}

/// Where logical byte `offset` of a mirror is on each member.
pub fn member_offset(offset: u64) -> u64 {
    offset + MEMBER_AREA_BYTES
}
