//! What a device set reports about itself and its members: the states administrators read
//! first in `strata pool status` (OpenZFS `zpool status`: state, read/write/checksum
//! errors per device, a health line per pool).

use crate::format::member::Layout;
use std::fmt;

/// A member's state while the pool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// In sync and used.
    Online,
    /// In sync and used, but it returned more checksum errors than the threshold.
    Degraded,
    /// Returned I/O errors past the threshold: no longer used.
    Faulted,
    /// Taken offline by the administrator.
    Offline,
    /// Disappeared while the pool ran (the device or its image is gone).
    Removed,
    /// Not found when the pool was opened.
    Unavailable,
    /// Present but out of sync (it missed writes while away): not used until rebuilt.
    Stale,
    /// Being rebuilt: written, not read, until the rebuild reaches its end.
    Rebuilding,
}

impl MemberState {
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Online => "ONLINE",
            MemberState::Degraded => "DEGRADED",
            MemberState::Faulted => "FAULTED",
            MemberState::Offline => "OFFLINE",
            MemberState::Removed => "REMOVED",
            MemberState::Unavailable => "UNAVAILABLE",
            MemberState::Stale => "STALE",
            MemberState::Rebuilding => "REBUILDING",
        }
    }

    /// Whether reads and writes go to the member.
    pub fn in_use(self) -> bool {
        matches!(self, MemberState::Online | MemberState::Degraded)
    }

    pub(crate) fn to_usize(self) -> usize {
        self as usize
    }

    pub(crate) fn from_usize(v: usize) -> MemberState {
        match v {
            0 => MemberState::Online,
            1 => MemberState::Degraded,
            2 => MemberState::Faulted,
            3 => MemberState::Offline,
            4 => MemberState::Removed,
            5 => MemberState::Unavailable,
            6 => MemberState::Stale,
            _ => MemberState::Rebuilding,
        }
    }
}

impl fmt::Display for MemberState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One member's figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    /// The device group the member belongs to (0: the pool's first; `strata pool add`
    /// adds more).
    pub group: usize,
    /// Its place in its group's set.
    pub index: usize,
    pub guid: u64,
    /// The device ("/dev/sdb", an image path), or what the set remembers of a missing one.
    pub device: String,
    pub state: MemberState,
    pub read_errors: u64,
    pub write_errors: u64,
    /// Copies that failed verification while another copy verified (then repaired).
    pub checksum_errors: u64,
    /// Bytes rewritten on this member from a good copy.
    pub repaired_bytes: u64,
    /// Why it is not ONLINE, when it is not.
    pub note: Option<String>,
}

/// The health of a set as a whole (ordered: the worst of several groups is the max).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SetHealth {
    /// Every member in use.
    Online,
    /// Serving, with fewer copies than the layout has.
    Degraded,
    /// No member left in use: I/O fails until a device comes back.
    Suspended,
}

impl SetHealth {
    pub fn name(self) -> &'static str {
        match self {
            SetHealth::Online => "ONLINE",
            SetHealth::Degraded => "DEGRADED",
            SetHealth::Suspended => "SUSPENDED",
        }
    }
}

/// A device set's report (`BlockDevice::set_status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetStatus {
    pub layout: Layout,
    pub set_guid: u64,
    pub health: SetHealth,
    pub members: Vec<MemberStatus>,
    /// The rebuild in progress.
    pub rebuild: Option<super::mirror::RebuildStatus>,
}
