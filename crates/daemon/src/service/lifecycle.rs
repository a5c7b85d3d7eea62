//! Pool lifecycle (ZFS's `zpool destroy|export|import`):
//! - destroy: refused while volumes are mounted or exported unless forced (then they are
//!   unmounted and unexported); the name must be confirmed; the pool's labels and roots
//!   are erased (first and last MiB of each device) so nothing imports it by mistake.
//! - export: close cleanly, record "exported by this host" in the last root, forget it.
//!   An UNAVAILABLE pool is just forgotten. Its mounts, exports and policies go with it.
//! - import: find pools by their labels on a device or in a directory; import one by name
//!   or guid; refuse one whose newest root says another host has it open, unless forced.

use super::state::PoolRecord;
use super::{devset, open_device, pool_options, ApiError, Daemon, PoolEntry};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata_api::{Done, ErrorKind, ImportCandidate, ImportPoolRequest, PoolInfo};
use strata_engine::{read_member_identity, read_pool_identity, HostState, MemberIdentity, Pool};

/// How long export and destroy wait for requests still using the pool to finish.
const RELEASE_WAIT: Duration = Duration::from_secs(10);

/// Bytes erased at each end of a destroyed pool's devices: its labels, rings and anything
/// a probe would find.
const ERASE_BYTES: u64 = 1 << 20;

fn state_name(s: HostState) -> &'static str {
    match s {
        HostState::Unknown => "unknown",
        HostState::Active => "active",
        HostState::Exported => "exported",
    }
}

impl Daemon {
    /// Volumes of `pool` in use: mounted or exported ("POOL/VOL at PATH", "POOL/VOL (export N)").
    fn in_use(&self, pool: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .mounts
            .lock()
            .expect("mounts")
            .iter()
            .filter(|(_, m)| m.pool == pool && m.session.is_some())
            .map(|(p, m)| format!("{}/{} mounted at {}", m.pool, m.volume, p.display()))
            .collect();
        let prefix = format!("{pool}/");
        out.extend(
            self.nfs
                .records()
                .iter()
                .filter(|r| r.volume.starts_with(&prefix))
                .map(|r| format!("{} (NFS export {})", r.volume, r.id)),
        );
        out.extend(
            self.blocks
                .records()
                .iter()
                .filter(|r| r.volume.starts_with(&prefix))
                .map(|r| format!("{} ({} export {})", r.volume, r.protocol.to_uppercase(), r.id)),
        );
        out
    }

    /// Unmount and unexport everything of `pool` (forced export/destroy), and drop its
    /// mount, export and policy records.
    fn release_pool_users(&self, pool: &str) -> Result<(), ApiError> {
        let paths: Vec<PathBuf> = self
            .mounts
            .lock()
            .expect("mounts")
            .iter()
            .filter(|(_, m)| m.pool == pool)
            .map(|(p, _)| p.clone())
            .collect();
        for p in paths {
            let active = self.mounts.lock().expect("mounts").get(&p).is_some_and(|m| m.session.is_some());
            if active {
                self.unmount(&p, false)?;
            } else {
                self.mounts.lock().expect("mounts").remove(&p);
            }
        }
        let prefix = format!("{pool}/");
        let mut ids: Vec<u32> =
            self.nfs.records().iter().filter(|r| r.volume.starts_with(&prefix)).map(|r| r.id).collect();
        ids.extend(self.blocks.records().iter().filter(|r| r.volume.starts_with(&prefix)).map(|r| r.id));
        for id in ids {
            self.remove_export(id)?;
        }
        self.policies.lock().expect("policies").retain(|k, _| !k.starts_with(&prefix));
        // A synchronous mirror from or to the pool goes on without its link (asynchronous
        // until the pool is back and the daemon restarts).
        self.disarm_sync_for_pool(pool);
        Ok(())
    }

    /// Take `name` out of service and get sole ownership of its Pool, waiting a little for
    /// requests that still hold it. On failure the pool is served again.
    /// Returns the pool, its devices (the device, or a mirror's members) and its log device.
    fn take_pool(&self, name: &str) -> Result<(Pool, Vec<PathBuf>, Option<PathBuf>), ApiError> {
        // A scrub holds the pool: stop it first (and forget it).
        self.scrubs.forget(name);
        self.stats.forget_pool(name);
        let entry = self
            .pools
            .lock()
            .expect("pools")
            .remove(name)
            .ok_or_else(|| ApiError::not_found(format!("pool {name}"), "see `strata pool list`"))?;
        let PoolEntry { pool, device, members, groups, log_device, spares, scrub_schedule, rebuild_rate, scrub_rate } =
            entry;
        let start = Instant::now();
        let mut pool = pool;
        loop {
            match Arc::try_unwrap(pool) {
                Ok(p) => {
                    let devices = if members.is_empty() {
                        vec![device]
                    } else {
                        members.into_iter().chain(groups.into_iter().flatten()).collect()
                    };
                    return Ok((p, devices, log_device));
                }
                Err(shared) if start.elapsed() < RELEASE_WAIT => {
                    pool = shared;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(shared) => {
                    self.pools.lock().expect("pools").insert(
                        name.into(),
                        PoolEntry {
                            pool: shared,
                            device,
                            members,
                            groups,
                            log_device,
                            spares,
                            scrub_schedule,
                            rebuild_rate,
                            scrub_rate,
                        },
                    );
                    return Err(ApiError::conflict(
                        format!("pool {name} is still in use by requests in flight"),
                        "retry when they are done",
                    ));
                }
            }
        }
    }

    pub(crate) fn export_pool(&self, name: &str, force: bool) -> Result<Done, ApiError> {
        let _g = self.admin.lock().expect("admin");
        if self.unavailable.lock().expect("unavailable").remove(name).is_some() {
            self.release_pool_users(name)?;
            self.save_state()?;
            tracing::info!(pool = name, "UNAVAILABLE pool forgotten (export)");
            return Ok(Done { target: name.into(), also: vec!["forgotten: it was UNAVAILABLE".into()] });
        }
        self.pool(name)?;
        let users = self.in_use(name);
        if !users.is_empty() && !force {
            return Err(ApiError::conflict(
                format!("pool {name} is in use: {}", users.join(", ")),
                "unmount and unexport them, or give --force to do it as part of the export",
            ));
        }
        self.release_pool_users(name)?;
        let (pool, devices, _) = self.take_pool(name)?;
        let device = devices.first().cloned().unwrap_or_default();
        pool.export()?;
        self.save_state()?;
        tracing::info!(pool = name, device = %device.display(), "pool exported");
        Ok(Done { target: name.into(), also: users })
    }

    pub(crate) fn destroy_pool(&self, name: &str, confirm: Option<&str>, force: bool) -> Result<Done, ApiError> {
        if confirm != Some(name) {
            return Err(ApiError::bad_request(
                format!("destroying pool {name} erases every volume, snapshot and clone in it; it was not confirmed"),
                "repeat the pool's name as confirm (the CLI: `strata pool destroy NAME --yes`)",
            ));
        }
        let _g = self.admin.lock().expect("admin");
        if self.unavailable.lock().expect("unavailable").contains_key(name) {
            return Err(ApiError::conflict(
                format!("pool {name} is UNAVAILABLE: its devices cannot be erased"),
                "forget it with `strata pool export`, or bring its device back and restart the daemon",
            ));
        }
        self.pool(name)?;
        let users = self.in_use(name);
        if !users.is_empty() && !force {
            return Err(ApiError::conflict(
                format!("pool {name} is in use: {}", users.join(", ")),
                "unmount and unexport them, or give --force to do it as part of the destroy",
            ));
        }
        self.release_pool_users(name)?;
        let (pool, devices, log_device) = self.take_pool(name)?;
        let device = devices.first().cloned().unwrap_or_default();
        if let Err(e) = pool.close() {
            tracing::warn!(pool = name, "close before destroy: {e}");
        }
        let mut erased = Vec::new();
        for dev in devices.iter().chain(log_device.as_ref()) {
            erase_ends(dev).map_err(|e| {
                ApiError::new(
                    ErrorKind::Io,
                    format!("pool {name} is no longer served, but erasing {} failed: {e}", dev.display()),
                    "erase its first and last MiB by hand (dd) before reusing it",
                )
            })?;
            erased.push(format!("erased {}", dev.display()));
        }
        self.save_state()?;
        tracing::warn!(pool = name, device = %device.display(), "pool destroyed");
        let mut also = users;
        also.extend(erased);
        Ok(Done { target: name.into(), also })
    }

    /// Pools on `device`, or on every regular file and block device directly in `dir`.
    pub(crate) fn scan_importable(
        &self,
        device: Option<&Path>,
        dir: Option<&Path>,
    ) -> Result<Vec<ImportCandidate>, ApiError> {
        let paths: Vec<PathBuf> = match (device, dir) {
            (Some(d), None) => vec![d.to_path_buf()],
            (None, Some(dir)) => {
                let rd = std::fs::read_dir(dir).map_err(|e| {
                    ApiError::bad_request(format!("{}: {e}", dir.display()), "give a readable directory")
                })?;
                let mut v: Vec<PathBuf> = rd
                    .filter_map(|e| e.ok())
                    .filter(|e| {
                        e.file_type().is_ok_and(|t| {
                            use std::os::unix::fs::FileTypeExt;
                            t.is_file() || t.is_block_device()
                        })
                    })
                    .map(|e| e.path())
                    .collect();
                v.sort();
                v
            }
            _ => {
                return Err(ApiError::bad_request(
                    "where to look: give a device or a directory (one of them)",
                    "e.g. --device /dev/sdb or --dir /var/lib/strata",
                ))
            }
        };
        let served: Vec<(String, String)> = self
            .pools
            .lock()
            .expect("pools")
            .iter()
            .map(|(n, e)| (n.clone(), format!("{:016x}", e.pool.status().pool_guid)))
            .collect();
        let mut out = Vec::new();
        // Members of device sets, by (pool, set), with their member labels.
        let mut sets: BTreeMap<(u64, u64), Vec<(MemberIdentity, PathBuf)>> = BTreeMap::new();
        for path in paths {
            let dev = match open_device(&path, None) {
                Ok(d) => d,
                Err(e) if device.is_some() => return Err(e),
                Err(_) => continue, // not a device we can open: a directory holds other files too
            };
            let id = match read_pool_identity(dev.as_ref()) {
                Ok(id) => id,
                Err(e) => match read_member_identity(dev.as_ref()) {
                    Ok(m) if device.is_some() => {
                        return Err(ApiError::bad_request(
                            format!(
                                "{} is member {} of a device set of {} (pool {:016x}): its pool is on all of them",
                                path.display(),
                                m.member_index,
                                m.members,
                                m.pool_guid
                            ),
                            "look with --dir DIR, a directory holding the set's members (links will do)",
                        ))
                    }
                    Ok(m) => {
                        sets.entry((m.pool_guid, m.set_guid)).or_default().push((m, path));
                        continue;
                    }
                    Err(_) if device.is_some() => return Err(e.into()),
                    Err(_) => continue, // not a pool
                },
            };
            out.push(self.candidate(id, path, Vec::new(), 0, &served));
        }
        // Each set opened alone: the one that holds a pool label is a pool's first group;
        // the pool's other groups are the sets its label names (found by set guid).
        let mut found: Vec<(u64, u64, Vec<PathBuf>, u32, Option<strata_engine::PoolIdentity>, Vec<u64>)> = Vec::new();
        for ((pool_guid, set_guid), mut members) in sets {
            // The newest label names the set's members: a device replaced since (an older
            // label, its guid no longer listed) is left out.
            let newest = members.iter().map(|(m, _)| m).max_by_key(|m| m.generation).cloned().expect("a member");
            members.retain(|(m, _)| newest.member_guids.contains(&m.member_guid));
            members.sort_by_key(|(m, _)| m.member_index);
            let set_size = newest.members;
            let paths: Vec<PathBuf> = members.into_iter().map(|(_, p)| p).collect();
            // Read-only: a scan changes no label.
            let opened = devset::open_set(&paths, true).and_then(|(dev, _)| {
                let id = read_pool_identity(&dev).ok();
                let groups = match &id {
                    Some(_) => strata_engine::pool::groups::group_set_guids(&dev).map_err(|e| e.to_string())?,
                    None => Vec::new(),
                };
                Ok((id, groups))
            });
            match opened {
                Ok((id, groups)) => found.push((pool_guid, set_guid, paths, set_size, id, groups)),
                Err(e) => tracing::warn!(devices = ?paths, "members of a device set that does not open: {e}"),
            }
        }
        for (pool_guid, _, paths, set_size, id, group_guids) in &found {
            let Some(id) = id else { continue };
            let groups: Option<Vec<Vec<PathBuf>>> = group_guids
                .iter()
                .map(|g| found.iter().find(|f| f.0 == *pool_guid && f.1 == *g && f.4.is_none()).map(|f| f.2.clone()))
                .collect();
            let Some(groups) = groups else {
                tracing::warn!(devices = ?paths, "the first device group of pool {:016x}, but not all its other groups are here", pool_guid);
                continue;
            };
            let mut c = self.candidate(id.clone(), paths[0].clone(), paths.clone(), *set_size, &served);
            c.groups = groups;
            out.push(c);
        }
        for (pool_guid, _, paths, _, id, _) in &found {
            let named = found.iter().any(|f| f.0 == *pool_guid && f.4.is_some());
            if id.is_none() && !named {
                tracing::warn!(devices = ?paths, "a device group of pool {pool_guid:016x}, whose first group is not here");
            }
        }
        Ok(out)
    }

    /// The scan's entry for pool `id` found on `device` (a set's: its `members`).
    fn candidate(
        &self,
        id: strata_engine::PoolIdentity,
        device: PathBuf,
        members: Vec<PathBuf>,
        set_members: u32,
        served: &[(String, String)],
    ) -> ImportCandidate {
        let guid = format!("{:016x}", id.pool_guid);
        let imported_as = served.iter().find(|(_, g)| *g == guid).map(|(n, _)| n.clone());
        let this_host = id.host_id == self.host_id;
        let refusal = if let Some(n) = &imported_as {
            Some(format!("already imported here as {n}"))
        } else if id.state == HostState::Active && id.host_id != 0 && !this_host {
            Some(format!(
                "host {:016x} has it open (or stopped without exporting it): import it only if that host no longer uses it (--force)",
                id.host_id
            ))
        } else {
            None
        };
        ImportCandidate {
            name: id.name,
            guid,
            device,
            members,
            groups: Vec::new(),
            set_members,
            log_device_guid: (id.log_device_guid != 0).then(|| format!("{:016x}", id.log_device_guid)),
            txg: id.txg,
            pool_state: state_name(id.state).into(),
            host_id: format!("{:016x}", id.host_id),
            this_host,
            imported: imported_as.is_some(),
            refusal,
        }
    }

    pub(crate) fn import_pool(&self, req: &ImportPoolRequest) -> Result<PoolInfo, ApiError> {
        let _g = self.admin.lock().expect("admin");
        let found = self.scan_importable(req.device.as_deref(), req.dir.as_deref())?;
        let matches: Vec<&ImportCandidate> =
            found.iter().filter(|c| c.name == req.pool || c.guid == req.pool).collect();
        let c = match matches.as_slice() {
            [] => {
                return Err(ApiError::not_found(
                    format!("no pool {} found there", req.pool),
                    "list what is there with `strata pool import --dir DIR` (or --device)",
                ))
            }
            [one] => *one,
            more => {
                return Err(ApiError::conflict(
                    format!(
                        "{} pools named {} found: {}",
                        more.len(),
                        req.pool,
                        more.iter()
                            .map(|c| format!("{} on {}", c.guid, c.device.display()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    "import by guid",
                ))
            }
        };
        if c.imported {
            return Err(ApiError::conflict(
                format!("pool {} ({}) is {}", c.name, c.guid, c.refusal.as_deref().unwrap_or("imported")),
                "nothing to do",
            ));
        }
        if let Some(why) = &c.refusal {
            if !req.force {
                return Err(ApiError::conflict(
                    format!("pool {} ({}): {why}", c.name, c.guid),
                    "give --force if you are sure",
                ));
            }
            tracing::warn!(pool = %c.name, "importing despite: {why} (--force)");
        }
        let name = req.new_name.clone().unwrap_or_else(|| c.name.clone());
        if self.pools.lock().expect("pools").contains_key(&name)
            || self.unavailable.lock().expect("unavailable").contains_key(&name)
        {
            return Err(ApiError::new(
                ErrorKind::AlreadyExists,
                format!("this daemon already has a pool named {name}"),
                "import it under another name (--new-name)",
            ));
        }
        if c.log_device_guid.is_some() && req.log_device.is_none() {
            return Err(ApiError::bad_request(
                format!(
                    "pool {} keeps its intent log on a separate device ({})",
                    c.name,
                    c.log_device_guid.as_deref().unwrap_or("")
                ),
                "give that device with --log-device",
            ));
        }
        let dev = if c.members.is_empty() {
            open_device(&c.device, None)?
        } else {
            let (dev, notes) = devset::open_recorded_devices(&c.device, &c.members, &c.groups, false).map_err(|e| {
                ApiError::conflict(
                    format!("pool {} ({}): its device set does not open: {e}", c.name, c.guid),
                    "bring back its missing members (see `strata pool import --dir DIR`)",
                )
            })?;
            for n in notes {
                tracing::warn!(pool = %name, "{n}");
            }
            dev
        };
        let log = req.log_device.as_deref().map(|l| open_device(l, None)).transpose()?;
        let pool = Pool::open_with_log(dev, log, pool_options())?;
        let record = PoolRecord {
            name: name.clone(),
            device: c.device.clone(),
            members: c.members.clone(),
            groups: c.groups.clone(),
            log_device: req.log_device.clone(),
            spares: Vec::new(),
            scrub_schedule: None,
            rebuild_rate: None,
            scrub_rate: None,
            scrub_progress: None,
        };
        tracing::info!(pool = %name, guid = %c.guid, device = %c.device.display(), txg = pool.status().txg, "pool imported");
        self.pools.lock().expect("pools").insert(
            name.clone(),
            PoolEntry {
                pool: Arc::new(pool),
                device: record.device,
                members: record.members,
                groups: record.groups,
                log_device: record.log_device,
                spares: Vec::new(),
                scrub_schedule: None,
                rebuild_rate: None,
                scrub_rate: None,
            },
        );
        self.save_state()?;
        self.pool_info(&name)
    }
}

/// Zero the first and last `ERASE_BYTES` of a device or image file, and flush.
fn erase_ends(path: &Path) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    let size = f.seek(SeekFrom::End(0))?;
    let zeros = vec![0u8; ERASE_BYTES as usize];
    let n = ERASE_BYTES.min(size);
    f.seek(SeekFrom::Start(0))?;
    f.write_all(&zeros[..n as usize])?;
    if size > ERASE_BYTES {
        let tail = size.saturating_sub(ERASE_BYTES).max(ERASE_BYTES);
        f.seek(SeekFrom::Start(tail))?;
        f.write_all(&zeros[..(size - tail) as usize])?;
    }
    f.sync_all()
}
