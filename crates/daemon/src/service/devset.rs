//! The devices under a pool: one device (layout `single`) or the members of a device set
//! (`mirror`, `parity2`). How
//! `pool create` validates and formats them, how a recorded pool's devices are opened
//! (members missing or unreadable leave the pool DEGRADED, not UNAVAILABLE), and how their
//! states and error counters are reported.

use super::{devcheck, open_device, random_u64, ApiError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use strata_api::{CreatePool, DeviceFigures, PoolState};
use strata_engine::format::member::Layout;
use strata_engine::{BlockDevice, GroupedDevice, MirrorDevice, PoolStatus, SetHealth, PARITY2_MEMBERS};

/// What `pool create` was asked to build.
pub(crate) enum LayoutRequest {
    Single(PathBuf),
    Set(Layout, Vec<PathBuf>),
}

impl LayoutRequest {
    /// The devices, validated: absolute, distinct, existing unless `size_bytes` creates them.
    pub(crate) fn parse(req: &CreatePool) -> Result<LayoutRequest, ApiError> {
        let layout = match (req.layout.as_deref(), &req.device, req.devices.len()) {
            (None | Some("single"), Some(d), 0) => LayoutRequest::Single(d.clone()),
            (None | Some("single"), None, 1) => LayoutRequest::Single(req.devices[0].clone()),
            (Some("mirror"), None, 2..=3) => LayoutRequest::Set(Layout::Mirror, req.devices.clone()),
            (Some("mirror"), Some(_), _) | (Some("mirror"), None, _) => {
                return Err(ApiError::bad_request(
                    format!("a mirror of {} devices", req.devices.len() + req.device.is_some() as usize),
                    "give 2 or 3 devices in `devices` (`--device A --device B [--device C]`)",
                ))
            }
            (Some("parity2"), None, n) if PARITY2_MEMBERS.contains(&n) => {
                LayoutRequest::Set(Layout::Parity2, req.devices.clone())
            }
            (Some("parity2"), _, _) => {
                return Err(ApiError::bad_request(
                    format!("a parity2 set of {} devices", req.devices.len() + req.device.is_some() as usize),
                    "give 4 to 16 devices in `devices` (`--device A --device B --device C --device D ...`): \
                     two devices' worth of space holds parity",
                ))
            }
            (None | Some("single"), _, _) => {
                return Err(ApiError::bad_request(
                    "a single-device pool needs exactly one device",
                    "give one device, or --layout mirror with 2 or 3, or --layout parity2 with 4 to 16",
                ))
            }
            (Some(other), _, _) => {
                return Err(ApiError::bad_request(format!("layout {other:?}"), "use single, mirror or parity2"))
            }
        };
        check_new_devices(layout.paths(), req.size_bytes)?;
        Ok(layout)
    }

    pub(crate) fn paths(&self) -> &[PathBuf] {
        match self {
            LayoutRequest::Single(d) => std::slice::from_ref(d),
            LayoutRequest::Set(_, v) => v,
        }
    }

    /// Refuse devices that hold something (a pool, or — unless `force` — anything else).
    pub(crate) fn refuse_foreign_data(&self, force: bool) -> Result<(), ApiError> {
        for d in self.paths().iter().filter(|d| d.exists()) {
            devcheck::refuse_foreign_data(d, force)?;
        }
        Ok(())
    }

    /// Open (creating image files of `size` where asked) and, for a mirror, format the
    /// member labels. Returns the device the pool is made on.
    pub(crate) fn make(&self, size: Option<u64>, pool_guid: u64) -> Result<Arc<dyn BlockDevice>, ApiError> {
        match self {
            LayoutRequest::Single(d) => open_device(d, size),
            LayoutRequest::Set(layout, paths) => {
                let mut members = Vec::new();
                for p in paths {
                    members.push((open_device(p, size)?, random_u64() | 1));
                }
                let created = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
                let m =
                    MirrorDevice::create(*layout, members, pool_guid, random_u64(), created).map_err(ApiError::from)?;
                // A set's pool may add device groups (`pool add`) while it is open.
                Ok(Arc::new(GroupedDevice::new(Arc::new(m))))
            }
        }
    }
}

/// The devices of a new set (`pool create`, `pool add`): absolute, existing unless
/// `size_bytes` creates them, each a different device.
pub(crate) fn check_new_devices(paths: &[PathBuf], size_bytes: Option<u64>) -> Result<(), ApiError> {
    for (i, d) in paths.iter().enumerate() {
        if !d.is_absolute() {
            return Err(ApiError::bad_request(
                format!("device {} is not an absolute path", d.display()),
                "give the full path",
            ));
        }
        if !d.exists() && size_bytes.is_none() {
            return Err(ApiError::bad_request(
                format!("{} does not exist", d.display()),
                "give size_bytes (--size) to create an image file",
            ));
        }
        if paths[..i].iter().any(|e| same_device(e, d)) {
            return Err(ApiError::bad_request(
                format!("device {} is given twice", d.display()),
                "each device of a set must be a different device",
            ));
        }
    }
    Ok(())
}

/// Whether two paths name the same file or device (same inode), or the same path.
pub(crate) fn same_device(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => a == b,
    }
}

/// Open a recorded pool's device: `device` alone, or the mirror of `members` and those of
/// the device groups `groups` added, assembled as the pool's label says. Members that
/// cannot be opened are left out (the set says which are missing); returns notes for the
/// log.
pub(crate) fn open_recorded_devices(
    device: &Path,
    members: &[PathBuf],
    groups: &[Vec<PathBuf>],
    read_only: bool,
) -> Result<(Arc<dyn BlockDevice>, Vec<String>), String> {
    if members.is_empty() {
        return open_device(device, None).map(|d| (d, Vec::new())).map_err(|e| e.message);
    }
    let (first, mut notes) = open_set(members, read_only)?;
    let mut sets: Vec<Arc<dyn BlockDevice>> = Vec::new();
    for (i, paths) in groups.iter().enumerate() {
        let (m, n) = open_set(paths, read_only).map_err(|e| format!("device group {}: {e}", i + 1))?;
        notes.extend(n);
        sets.push(Arc::new(m));
    }
    let (dev, n) = strata_engine::pool::groups::assemble(Arc::new(first), sets).map_err(|e| e.to_string())?;
    notes.extend(n);
    Ok((dev, notes))
}

/// The recorded device groups `recorded` that `pool`'s device has (a group the state file
/// lists but the pool's label does not name — a `pool add` cut short — is left out).
pub(crate) fn groups_in_use(pool: &strata_engine::Pool, recorded: &[Vec<PathBuf>]) -> Vec<Vec<PathBuf>> {
    let dev = pool.device();
    let Some(grouped) = dev.as_groups() else { return Vec::new() };
    let guids: Vec<u64> =
        grouped.groups().iter().skip(1).filter_map(|(_, d)| d.set_status().map(|s| s.set_guid)).collect();
    recorded
        .iter()
        .filter(|paths| {
            paths.iter().any(|p| {
                open_device(p, None)
                    .ok()
                    .and_then(|d| strata_engine::read_member_identity(d.as_ref()).ok())
                    .is_some_and(|id| guids.contains(&id.set_guid))
            })
        })
        .cloned()
        .collect()
}

/// Open the device set (mirror or parity2) of `paths` alone, not assembled with the
/// pool's other groups.
pub(crate) fn open_set(paths: &[PathBuf], read_only: bool) -> Result<(MirrorDevice, Vec<String>), String> {
    let found = paths.iter().map(|p| open_device(p, None).map_err(|e| e.message)).collect();
    MirrorDevice::open(found, !read_only).map_err(|e| e.to_string())
}

/// `single` or the set's layout, the devices with their figures, and the pool's state.
pub(crate) fn device_figures(s: &PoolStatus) -> (String, Vec<DeviceFigures>, PoolState) {
    let Some(set) = &s.devices else {
        let one = DeviceFigures {
            device: s.device.clone(),
            group: 0,
            state: "ONLINE".into(),
            read_errors: 0,
            write_errors: 0,
            checksum_errors: 0,
            repaired_bytes: 0,
            note: None,
        };
        return ("single".into(), vec![one], PoolState::Online);
    };
    let devices = set
        .members
        .iter()
        .map(|m| DeviceFigures {
            device: m.device.clone(),
            group: m.group as u32,
            state: m.state.name().into(),
            read_errors: m.read_errors,
            write_errors: m.write_errors,
            checksum_errors: m.checksum_errors,
            repaired_bytes: m.repaired_bytes,
            note: m.note.clone(),
        })
        .collect();
    let state = match set.health {
        SetHealth::Online => PoolState::Online,
        SetHealth::Degraded => PoolState::Degraded,
        SetHealth::Suspended => PoolState::Suspended,
    };
    (set.layout.name().into(), devices, state)
}
