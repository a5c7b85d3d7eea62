//! `strata pool add` (`POST /v1/pools/{pool}/groups`): a pool on a mirror (or parity2 set)
//! grows by another set of its layout (a device group; ZFS `zpool add`). The engine lays the group out and spreads new
//! blocks over every group (engine pool/groups.rs); here the devices are checked, the set
//! is formatted with the pool's guid, and the state file learns its members *before* the
//! engine adds it — a crash in between opens the pool with the set given and, if the
//! pool's label does not name it, unused (a note says so).

use super::{devcheck, devset, open_device, random_u64, ApiError, Daemon};
use std::sync::Arc;
use strata_api::AddGroup;
use strata_engine::{BlockDevice, Layout, MirrorDevice};

impl Daemon {
    pub(crate) fn add_group(&self, pool: &str, req: &AddGroup) -> Result<(), ApiError> {
        let _admin = self.admin.lock().expect("admin");
        let p = self.pool(pool)?;
        let Some(set) = p.status().devices else {
            return Err(ApiError::conflict(
                format!("pool {pool} is on one device"),
                "device groups are for pools on a mirror (`pool create --layout mirror`)",
            ));
        };
        let layout = set.layout;
        let (ways, hint) = match layout {
            Layout::Mirror => (2..=3, "give 2 or 3 devices (`--device A --device B [--device C]`)"),
            Layout::Parity2 => (4..=16, "give 4 to 16 devices (`--device A ... --device D`)"),
        };
        if !ways.contains(&req.devices.len()) {
            return Err(ApiError::bad_request(
                format!("a {} group of {} devices", layout.name(), req.devices.len()),
                hint,
            ));
        }
        devset::check_new_devices(&req.devices, req.size_bytes)?;
        for d in &req.devices {
            if self.device_in_use(d) {
                return Err(ApiError::conflict(
                    format!("{} is a device or a spare of a pool already", d.display()),
                    "choose devices no pool uses",
                ));
            }
            if d.exists() {
                devcheck::refuse_foreign_data(d, req.force)?;
            }
        }
        let mut members = Vec::new();
        for d in &req.devices {
            members.push((open_device(d, req.size_bytes)?, random_u64() | 1));
        }
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let new = MirrorDevice::create(layout, members, p.status().pool_guid, random_u64(), created)
            .map_err(ApiError::from)?;
        let new: Arc<dyn BlockDevice> = Arc::new(new);
        self.set_groups(pool, |g| g.push(req.devices.clone()))?;
        match p.add_group(new) {
            Ok(bytes) => {
                let text = format!("device group of {} added: {bytes} bytes more", req.devices.len());
                tracing::warn!(pool, devices = ?req.devices, bytes, "device group added");
                self.events.record("info", "pool.group", Some(pool), None, text);
                Ok(())
            }
            Err(e) => {
                // A group the label does not name is not used at the next open either; the
                // state file stops listing it.
                self.set_groups(pool, |g| {
                    g.pop();
                })?;
                Err(ApiError::from(e))
            }
        }
    }

    /// Change pool `pool`'s recorded device groups and save the state file.
    fn set_groups(&self, pool: &str, f: impl FnOnce(&mut Vec<Vec<std::path::PathBuf>>)) -> Result<(), ApiError> {
        if let Some(e) = self.pools.lock().expect("pools").get_mut(pool) {
            f(&mut e.groups);
        }
        self.save_state()
    }
}
