//! FUSE mounts of volumes: mount at an empty directory, unmount, and the clean-up of
//! mounts a dead daemon left behind.

use super::{split_volume, ApiError, Daemon, MountEntry};
use std::path::{Path, PathBuf};
use strata_api::MountInfo;

impl Daemon {
    pub(crate) fn list_mounts(&self) -> Vec<MountInfo> {
        self.mounts
            .lock()
            .expect("mounts")
            .iter()
            .map(|(path, m)| MountInfo {
                volume: format!("{}/{}", m.pool, m.volume),
                path: path.clone(),
                active: m.session.is_some(),
            })
            .collect()
    }

    /// Mount `pool/volume` at `path`.
    pub(crate) fn mount(&self, spec: &str, path: &Path, save: bool) -> Result<(), ApiError> {
        let (pool_name, vol_name) = split_volume(spec)?;
        let pool = self.pool(pool_name)?;
        pool.volume_id(vol_name).map_err(ApiError::from)?;
        self.refuse_mirror_target(pool_name, vol_name, "a mount")?;
        self.refuse_fenced(pool_name, vol_name, "a mount")?;
        if !path.is_absolute() {
            return Err(ApiError::bad_request(
                format!("mount point {} is not absolute", path.display()),
                "give a full path",
            ));
        }
        if self.mounts.lock().expect("mounts").contains_key(path) {
            return Err(ApiError::conflict(
                format!("{} is already a Strata mount", path.display()),
                "unmount it first",
            ));
        }
        if self.mounts.lock().expect("mounts").values().any(|m| m.pool == pool_name && m.volume == vol_name) {
            return Err(ApiError::conflict(format!("volume {spec} is already mounted"), "a volume is mounted once"));
        }
        detach_stale_mount(path);
        std::fs::create_dir_all(path)
            .map_err(|e| ApiError::bad_request(format!("mount point {}: {e}", path.display()), "check the path"))?;
        if is_mount_point(path) {
            return Err(ApiError::conflict(
                format!("{} is already a mount point", path.display()),
                "unmount what is there, or choose another directory",
            ));
        }
        let busy = std::fs::read_dir(path).map(|mut d| d.next().is_some()).unwrap_or(true);
        if busy {
            return Err(ApiError::conflict(
                format!("mount point {} is not an empty directory", path.display()),
                "choose an empty directory",
            ));
        }
        // Shared with an NFS export of the volume, if there is one (volumes.rs).
        let fs = self.filesystems.get(pool_name, vol_name, pool)?;
        let opts = strata_fuse::MountOptions {
            writeback_cache: self.opts.writeback_cache,
            threads: self.opts.fuse_threads,
            fsname: format!("strata:{spec}"),
            stats: Some(self.stats.protocol(pool_name, vol_name, strata_stats::Protocol::Fuse)),
            ..Default::default()
        };
        let session = strata_fuse::mount(fs, path, opts)
            .map_err(|e| ApiError::internal(format!("FUSE mount of {spec} at {}: {e}", path.display())))?;
        tracing::info!(volume = spec, path = %path.display(), "mounted");
        self.mounts.lock().expect("mounts").insert(
            path.to_path_buf(),
            MountEntry { pool: pool_name.into(), volume: vol_name.into(), session: Some(session) },
        );
        if save {
            self.save_state()?;
        }
        Ok(())
    }

    pub(crate) fn unmount(&self, path: &Path, save: bool) -> Result<(), ApiError> {
        let entry = self.mounts.lock().expect("mounts").remove(path);
        let Some(mut entry) = entry else {
            return Err(ApiError::not_found(
                format!("no Strata mount at {}", path.display()),
                "see `strata mount` (no arguments lists the mounts)",
            ));
        };
        if let Some(s) = entry.session.take() {
            let still_mounted = is_mount_point(path);
            if let Err(e) = s.umount_and_join() {
                if still_mounted {
                    tracing::warn!(path = %path.display(), "unmount: {e}; detaching");
                    detach_stale_mount(path);
                }
            }
        }
        // Whatever the file system left dirty is committed now.
        if let Ok(pool) = self.pool(&entry.pool) {
            pool.commit().map_err(ApiError::from)?;
        }
        tracing::info!(path = %path.display(), "unmounted");
        if save {
            self.save_state()?;
        }
        Ok(())
    }
}

pub(crate) fn is_mount_point(path: &Path) -> bool {
    let Ok(canon) = path.canonicalize() else { return false };
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|s| s.lines().any(|l| l.split(' ').nth(4).is_some_and(|mp| Path::new(&unescape(mp)) == canon)))
        .unwrap_or(false)
}

fn unescape(s: &str) -> String {
    s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

/// A FUSE mount whose daemon died answers ENOTCONN: detach it so the path can be reused.
pub(crate) fn detach_stale_mount(path: &Path) {
    if let Err(e) = std::fs::metadata(path) {
        if e.raw_os_error() == Some(libc::ENOTCONN) {
            if let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) {
                // SAFETY: a valid NUL-terminated path.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
                tracing::info!(path = %path.display(), "detached a stale mount left by a previous daemon");
            }
        }
    }
}

/// Where callers below admin may mount. A mount decides what appears at a path of the
/// host: at /root/.ssh or /etc/cron.d a volume an operator filled (over NFS, say) would
/// give them root. Admins may mount anywhere (they are root-equivalent anyway).
pub(crate) const OPERATOR_MOUNT_ROOTS: &[&str] = &["/mnt", "/srv", "/data", "/var/lib/postgresql", "/var/lib/mysql"];

/// Refuse a mount point outside OPERATOR_MOUNT_ROOTS, judged on the path with `..` and
/// symbolic links resolved (its longest existing ancestor canonicalized).
pub(crate) fn check_operator_mount_path(path: &Path) -> Result<(), ApiError> {
    let refuse = || {
        ApiError::new(
            strata_api::ErrorKind::PermissionDenied,
            format!("an operator may not mount at {}", path.display()),
            format!("mount under {} (or ask an admin)", OPERATOR_MOUNT_ROOTS.join(", ")),
        )
    };
    if !path.is_absolute() {
        return Err(ApiError::bad_request(
            format!("mount point {} is not absolute", path.display()),
            "give a full path",
        ));
    }
    // The longest existing ancestor, canonicalized, plus the components that do not exist yet.
    let mut existing = path.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    while !existing.exists() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            _ => return Err(refuse()),
        }
    }
    let mut real: PathBuf = existing.canonicalize().map_err(|_| refuse())?;
    for c in rest.iter().rev() {
        if c == ".." || c == "." {
            return Err(refuse());
        }
        real.push(c);
    }
    let inside = OPERATOR_MOUNT_ROOTS.iter().any(|root| real.starts_with(root) && real != Path::new(root));
    if inside {
        Ok(())
    } else {
        Err(refuse())
    }
}
