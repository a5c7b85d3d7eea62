//! `strata serve`: the daemon. It owns the pools, serves FUSE mounts of their volumes, and
//! answers the control API (JSON over HTTP on 127.0.0.1, see docs/api.md).
//!
//! State that must survive a restart — which pools (by device) and which mounts — is kept
//! in `DATA_DIR/strata.json`, rewritten atomically (write + rename + fsync) on every change.
//! With no state file the daemon creates the embedded default pool `default` in
//! `DATA_DIR/default.img` (a sparse image file).
//!
//! A restart after `kill -9` is a crash for the pools: they reopen at their last committed
//! txg, stale FUSE mounts left by the dead process are detached, and the volumes are
//! mounted again where they were. Databases see ENOTCONN in between and must recover, as
//! after a power loss; what they fsynced is there.
//!
//! Commits: every `txg_interval` (5 s, as ZFS's txg timeout) a background thread commits
//! each pool, and fsync commits at once.
// The pool status JSON (api.rs) has more fields than serde_json's macro expands by default.
#![recursion_limit = "256"]

mod api;
mod logdev;
mod nfs;
mod policy;
mod quiesce;
mod snapshots;
mod state;
mod volumes;

use state::{MountRecord, PoolRecord, State};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strata_engine::{
    BlockDevice, ChecksumAlgo, Clock, CreateOptions, Error, ErrorKind, FileDevice, FileDeviceOptions, LogDeviceSpec,
    Pool, PoolOptions,
};

pub use api::{check_json, ApiError};
pub use nfs::NfsOptions;

/// The wall clock, for the engine (which never reads it itself).
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ns(&self) -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
    }
}

pub fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b)).is_err() {
        b = (SystemClock.now_ns() ^ ((std::process::id() as u64) << 32)).to_le_bytes();
    }
    u64::from_le_bytes(b) | 1
}

#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub data_dir: PathBuf,
    /// Address of the control API ("127.0.0.1:7420").
    pub listen: String,
    /// Size of the embedded default pool's image file (sparse).
    pub default_pool_bytes: u64,
    /// Interval of background commits.
    pub txg_interval: Duration,
    /// FUSE writeback cache (see docs/fuse-caching.md for the measurement behind the default).
    pub writeback_cache: bool,
    /// FUSE request threads per mount.
    pub fuse_threads: usize,
    /// Serve NFS exports (None: exports are recorded, not served). See nfs.rs.
    pub nfs: Option<NfsOptions>,
    /// Data-record cache of each pool, in bytes (0: none).
    pub cache_bytes: u64,
    /// Dirty data of each pool before writers wait for a commit, in bytes.
    pub dirty_limit_bytes: u64,
    /// Pools to open even though their separate log device is missing or damaged, at their
    /// last commit, losing the sync writes acknowledged since (`serve --discard-missing-log`).
    pub discard_missing_log: Vec<String>,
    /// Entries each pool's dedup table may hold (about 100 bytes each).
    pub dedup_table_max: usize,
}

impl ServeOptions {
    pub fn new(data_dir: PathBuf) -> ServeOptions {
        ServeOptions {
            data_dir,
            listen: "127.0.0.1:7420".into(),
            default_pool_bytes: 16 << 30,
            txg_interval: Duration::from_secs(5),
            writeback_cache: true,
            fuse_threads: DEFAULT_FUSE_THREADS as usize,
            nfs: None,
            cache_bytes: default_cache_bytes(),
            dirty_limit_bytes: default_dirty_limit_bytes(),
            discard_missing_log: Vec::new(),
            dedup_table_max: strata_engine::dedup::DEDUP_TABLE_MAX_DEFAULT,
        }
    }
}

pub(crate) struct PoolEntry {
    pub pool: Arc<Pool>,
    pub device: PathBuf,
    /// The separate intent-log device, if the pool has one.
    pub log_device: Option<PathBuf>,
}

pub(crate) struct MountEntry {
    pub pool: String,
    pub volume: String,
    pub session: Option<strata_fuse::BackgroundSession>,
}

pub struct Daemon {
    pub(crate) opts: ServeOptions,
    pub(crate) pools: Mutex<BTreeMap<String, PoolEntry>>,
    pub(crate) mounts: Mutex<BTreeMap<PathBuf, MountEntry>>,
    /// Serialises changes to pools, volumes and mounts (and the state file).
    pub(crate) admin: Mutex<()>,
    /// Snapshot policies by POOL/VOLUME.
    pub(crate) policies: Mutex<BTreeMap<String, Vec<policy::Schedule>>>,
    stopping: AtomicBool,
    pub(crate) nfs: nfs::NfsService,
    pub(crate) filesystems: volumes::FsRegistry,
}

/// Bytes of data-record cache each pool gets (`serve --cache-size`; set once at start).
static DATA_CACHE_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(64 << 20);
/// Dirty data a pool holds before writers must wait for a commit (`serve --dirty-limit`).
static DIRTY_LIMIT_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(256 << 20);
/// Entries of each pool's dedup table (`serve --dedup-table-max`).
static DEDUP_TABLE_MAX: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(strata_engine::dedup::DEDUP_TABLE_MAX_DEFAULT);

pub(crate) fn pool_options() -> PoolOptions {
    let mut o = PoolOptions::new(Arc::new(SystemClock));
    o.data_cache_bytes = DATA_CACHE_BYTES.load(Ordering::Relaxed);
    o.dirty_limit_bytes = DIRTY_LIMIT_BYTES.load(Ordering::Relaxed);
    o.dedup_table_max = DEDUP_TABLE_MAX.load(Ordering::Relaxed);
    o
}

fn mem_total_bytes() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = m
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
}

/// Request-handling threads per FUSE mount (`strata serve --fuse-threads`).
pub use strata_fuse::DEFAULT_THREADS as DEFAULT_FUSE_THREADS;

/// The default data cache: a quarter of the machine's memory (ZFS's ARC takes up to half;
/// the databases Strata serves want the rest), 64 MiB if /proc/meminfo cannot be read.
pub fn default_cache_bytes() -> u64 {
    mem_total_bytes().map_or(64 << 20, |b| b / 4)
}

/// The default dirty-data limit: a tenth of memory, between 256 MiB and 4 GiB (ZFS's
/// `zfs_dirty_data_max`). Asynchronous writes up to it are absorbed in memory, as a page
/// cache would; sync writes are durable through the intent log either way.
pub fn default_dirty_limit_bytes() -> u64 {
    mem_total_bytes().map_or(256 << 20, |b| (b / 10).clamp(256 << 20, 4 << 30))
}

pub(crate) fn open_device(path: &Path, create_size: Option<u64>) -> Result<Arc<dyn BlockDevice>, ApiError> {
    FileDevice::open(path, &FileDeviceOptions { direct: true, create_size })
        .map(|d| Arc::new(d) as Arc<dyn BlockDevice>)
        .map_err(|e| ApiError::bad_request(format!("{}: {e}", path.display()), "check the device path and permissions"))
}

impl Daemon {
    /// Open (or create) everything the state file names and remount its mounts.
    pub fn start(opts: ServeOptions) -> Result<Arc<Daemon>, String> {
        std::fs::create_dir_all(&opts.data_dir)
            .map_err(|e| format!("create data directory {}: {e}", opts.data_dir.display()))?;
        let d = Arc::new(Daemon {
            opts,
            pools: Mutex::new(BTreeMap::new()),
            mounts: Mutex::new(BTreeMap::new()),
            admin: Mutex::new(()),
            policies: Mutex::new(BTreeMap::new()),
            stopping: AtomicBool::new(false),
            nfs: nfs::NfsService::new(),
            filesystems: volumes::FsRegistry::default(),
        });
        let state = match State::load(&d.state_path())? {
            Some(s) => s,
            None => {
                let image = d.opts.data_dir.join("default.img");
                tracing::info!(image = %image.display(), "no configuration: creating the embedded default pool");
                d.create_pool("default", &image, Some(d.opts.default_pool_bytes), None, ChecksumAlgo::Blake3, false)
                    .map_err(|e| format!("create the default pool: {}", e.message))?;
                nfs::NfsService::start(&d, Vec::new(), 1)?;
                return Ok(d);
            }
        };
        let mut forgot_log = false;
        for p in &state.pools {
            let dev = open_device(&p.device, None).map_err(|e| e.message)?;
            let discard = d.opts.discard_missing_log.contains(&p.name);
            // A log device that cannot even be opened is missing: discardable, like one
            // whose label is gone.
            let log = match &p.log_device {
                None => None,
                Some(path) => match open_device(path, None) {
                    Ok(l) => Some(l),
                    Err(_) if discard => None,
                    Err(e) => {
                        return Err(format!(
                            "open pool {}: log device {}: {}; bring it back, or start with \
                             `--discard-missing-log {}` to open at the last commit, losing the sync \
                             writes acknowledged since",
                            p.name,
                            path.display(),
                            e.message,
                            p.name
                        ))
                    }
                },
            };
            let opts = PoolOptions { discard_missing_log: discard, ..pool_options() };
            match Pool::open_with_log(dev, log, opts) {
                Ok(pool) => {
                    for n in pool.status().open_notes {
                        tracing::warn!(pool = %p.name, "{n}");
                    }
                    tracing::info!(pool = %p.name, txg = pool.status().txg, "pool opened");
                    let log_device = p.log_device.clone().filter(|_| pool.status().log_device.is_some());
                    forgot_log |= log_device.is_none() && p.log_device.is_some();
                    d.pools.lock().expect("pools").insert(
                        p.name.clone(),
                        PoolEntry { pool: Arc::new(pool), device: p.device.clone(), log_device },
                    );
                }
                Err(e) if p.log_device.is_some() && log_device_refused(&e) => {
                    return Err(format!(
                        "open pool {} on {} with log device {}: {e} (the daemon option is \
                         `--discard-missing-log {}`)",
                        p.name,
                        p.device.display(),
                        p.log_device.as_deref().map_or("-".into(), |l| l.display().to_string()),
                        p.name
                    ))
                }
                Err(e) => return Err(format!("open pool {} on {}: {e}", p.name, p.device.display())),
            }
        }
        *d.policies.lock().expect("policies") =
            state.policies.iter().map(|p| (p.volume.clone(), p.schedules.clone())).collect();
        for m in &state.mounts {
            if let Err(e) = d.mount(&m.volume, &m.path, false) {
                tracing::warn!(volume = %m.volume, path = %m.path.display(), "could not remount: {}", e.message);
            }
        }
        nfs::NfsService::start(&d, state.exports.clone(), state.next_export_id)?;
        if forgot_log {
            // A discarded log device is no longer the pool's: do not ask for it again.
            d.save_state().map_err(|e| e.message)?;
        }
        Ok(d)
    }

    fn state_path(&self) -> PathBuf {
        self.opts.data_dir.join("strata.json")
    }

    pub(crate) fn save_state(&self) -> Result<(), ApiError> {
        let pools = self.pools.lock().expect("pools");
        let mounts = self.mounts.lock().expect("mounts");
        let s = State {
            pools: pools
                .iter()
                .map(|(n, e)| PoolRecord {
                    name: n.clone(),
                    device: e.device.clone(),
                    log_device: e.log_device.clone(),
                })
                .collect(),
            mounts: mounts
                .iter()
                .map(|(p, m)| MountRecord { volume: format!("{}/{}", m.pool, m.volume), path: p.clone() })
                .collect(),
            policies: self
                .policies
                .lock()
                .expect("policies")
                .iter()
                .map(|(v, s)| policy::PolicyRecord { volume: v.clone(), schedules: s.clone() })
                .collect(),
            exports: self.nfs.records(),
            next_export_id: *self.nfs.next_id.lock().expect("export ids"),
        };
        s.save(&self.state_path()).map_err(|e| ApiError::internal(format!("save daemon state: {e}")))
    }

    pub(crate) fn pool(&self, name: &str) -> Result<Arc<Pool>, ApiError> {
        self.pools
            .lock()
            .expect("pools")
            .get(name)
            .map(|e| e.pool.clone())
            .ok_or_else(|| ApiError::not_found(format!("pool {name}"), "see `strata pool list`"))
    }

    pub(crate) fn create_pool(
        &self,
        name: &str,
        device: &Path,
        size: Option<u64>,
        log_device: Option<&Path>,
        checksum: ChecksumAlgo,
        save: bool,
    ) -> Result<(), ApiError> {
        if self.pools.lock().expect("pools").contains_key(name) {
            return Err(ApiError::conflict(format!("pool {name} exists"), "choose another name"));
        }
        // The log device first: its checks need nothing written (the pool's image file is
        // created by opening it).
        let log = log_device.map(|l| logdev::open_new_log_device(device, l)).transpose()?;
        let dev = open_device(device, size)?;
        // A pool with a log device opens read-only without it when told to discard it.
        let probe = PoolOptions { read_only: true, discard_missing_log: true, ..pool_options() };
        if Pool::open(dev.clone(), probe).is_ok()
            || strata_engine::log_device::read_log_device_label(dev.as_ref()).is_ok()
        {
            return Err(ApiError::conflict(
                format!("{} already holds a Strata pool (or the log device of one)", device.display()),
                "import it instead, or wipe the device first",
            ));
        }
        let create = CreateOptions { name: name.into(), pool_guid: random_u64(), device_guid: random_u64(), checksum };
        let log = log.map(|dev| LogDeviceSpec { dev, log_device_guid: random_u64() });
        let pool = Pool::create_with_log(dev, create, log, pool_options()).map_err(ApiError::from)?;
        self.pools.lock().expect("pools").insert(
            name.to_string(),
            PoolEntry {
                pool: Arc::new(pool),
                device: device.to_path_buf(),
                log_device: log_device.map(Path::to_path_buf),
            },
        );
        let _ = save;
        self.save_state()
    }

    /// Give pool `name` the separate log device `log` (checked as at creation), and
    /// remember it for the next start.
    pub(crate) fn add_log_device(&self, name: &str, log: &Path) -> Result<(), ApiError> {
        let (pool, device) = {
            let pools = self.pools.lock().expect("pools");
            let e = pools.get(name).ok_or_else(|| ApiError::not_found(format!("pool {name}"), "strata pool list"))?;
            (e.pool.clone(), e.device.clone())
        };
        let dev = logdev::open_new_log_device(&device, log)?;
        pool.add_log_device(LogDeviceSpec { dev, log_device_guid: random_u64() }).map_err(ApiError::from)?;
        if let Some(e) = self.pools.lock().expect("pools").get_mut(name) {
            e.log_device = Some(log.to_path_buf());
        }
        tracing::info!(pool = name, log = %log.display(), "log device added");
        self.save_state()
    }

    /// Stop using pool `name`'s separate log device.
    pub(crate) fn remove_log_device(&self, name: &str) -> Result<(), ApiError> {
        let pool = self.pool(name)?;
        pool.remove_log_device().map_err(ApiError::from)?;
        if let Some(e) = self.pools.lock().expect("pools").get_mut(name) {
            e.log_device = None;
        }
        tracing::info!(pool = name, "log device removed; the intent log is back in the pool");
        self.save_state()
    }

    /// Mount `pool/volume` at `path`.
    pub(crate) fn mount(&self, spec: &str, path: &Path, save: bool) -> Result<(), ApiError> {
        let (pool_name, vol_name) = split_volume(spec)?;
        let pool = self.pool(pool_name)?;
        pool.volume_id(vol_name).map_err(ApiError::from)?;
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
                "see `strata mount --list`",
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

    /// Background commits until the daemon stops: every `txg_interval`, and sooner for a
    /// pool whose dirty data passed half its limit — so that the commit happens here, not in
    /// a writer that hit the limit. Writes go on while it writes its data (the quiescing txg,
    /// engine quiesce.rs), into the other half. (A quarter before the quiescing txg; a
    /// client rewriting a 1 GiB file then had nearly every byte it sent hashed and written.
    /// Half, with prewrite passes that stop chasing: 1.26 → 2.35 GB/s of NFS writes,
    /// docs/txg-pipeline.md.)
    fn commit_loop(self: Arc<Self>) {
        let tick = Duration::from_millis(100).min(self.opts.txg_interval);
        let mut last: BTreeMap<String, Instant> = BTreeMap::new();
        while !self.stopping.load(Ordering::Relaxed) {
            std::thread::sleep(tick);
            let pools: Vec<(String, Arc<Pool>)> =
                self.pools.lock().expect("pools").iter().map(|(n, e)| (n.clone(), e.pool.clone())).collect();
            for (name, pool) in pools {
                let since = last.entry(name.clone()).or_insert_with(Instant::now);
                let due = since.elapsed() >= self.opts.txg_interval;
                if !due && pool.dirty_bytes() <= pool.dirty_limit_bytes() / 2 {
                    continue;
                }
                *since = Instant::now();
                match pool.commit() {
                    Err(e) if e.kind() != ErrorKind::ReadOnly => {
                        tracing::error!(pool = %name, "background commit failed: {e}")
                    }
                    Err(_) => {}
                    Ok(txg) => {
                        let c = pool.status_commits();
                        if c.locked_us_last > 1_000_000 && c.count > 0 {
                            tracing::warn!(pool = %name, txg, locked_ms = c.locked_us_last / 1000,
                                blocks_read = c.locked_blocks_read, "slow commit: requests waited for it");
                        }
                    }
                }
            }
        }
    }

    /// Unmount everything and close the pools (committing). The clean way out (SIGTERM).
    pub fn shutdown(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.nfs.stop();
        let paths: Vec<PathBuf> = self.mounts.lock().expect("mounts").keys().cloned().collect();
        for p in paths {
            // Keep the mount in the state file: it comes back at the next start.
            let entry = self.mounts.lock().expect("mounts").remove(&p);
            if let Some(mut e) = entry {
                if let Some(s) = e.session.take() {
                    if let Err(err) = s.umount_and_join() {
                        tracing::warn!(path = %p.display(), "unmount at shutdown: {err}; detaching");
                        detach_stale_mount(&p);
                    }
                }
                self.mounts.lock().expect("mounts").insert(p, MountEntry { session: None, ..e });
            }
        }
        let _ = self.save_state();
        for (name, e) in self.pools.lock().expect("pools").iter() {
            match e.pool.commit() {
                Ok(txg) => tracing::info!(pool = %name, txg, "committed at shutdown"),
                Err(err) => tracing::error!(pool = %name, "commit at shutdown failed: {err}"),
            }
        }
    }
}

/// Seconds since 1970 as "YYYY-MM-DD HH:MM:SS" (UTC).
pub fn utc(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Seconds since 1970 as "YYYYMMDD-HHMMSS" (UTC), for snapshot names.
pub fn utc_compact(secs: u64) -> String {
    utc(secs).replace(['-', ':'], "").replacen(' ', "-", 1)
}

pub(crate) fn split_volume(spec: &str) -> Result<(&str, &str), ApiError> {
    match spec.split_once('/') {
        Some((p, v)) if !p.is_empty() && !v.is_empty() && !v.contains('/') => Ok((p, v)),
        _ => Err(ApiError::bad_request(format!("volume {spec:?} is not POOL/VOLUME"), "name volumes as POOL/VOLUME")),
    }
}

fn is_mount_point(path: &Path) -> bool {
    let Ok(canon) = path.canonicalize() else { return false };
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|s| s.lines().any(|l| l.split(' ').nth(4).is_some_and(|mp| Path::new(&unescape(mp)) == canon)))
        .unwrap_or(false)
}

fn unescape(s: &str) -> String {
    s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

/// A FUSE mount whose daemon died answers ENOTCONN: detach it so the path can be reused.
fn detach_stale_mount(path: &Path) {
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

/// Run the daemon until SIGTERM or SIGINT.
pub fn serve(opts: ServeOptions) -> Result<(), String> {
    tune_malloc();
    DATA_CACHE_BYTES.store(opts.cache_bytes, Ordering::Relaxed);
    DIRTY_LIMIT_BYTES.store(opts.dirty_limit_bytes.max(16 << 20), Ordering::Relaxed);
    DEDUP_TABLE_MAX.store(opts.dedup_table_max, Ordering::Relaxed);
    let listen = opts.listen.clone();
    let server = tiny_http::Server::http(&listen).map_err(|e| format!("listen on {listen}: {e}"))?;
    let d = Daemon::start(opts)?;
    let server = Arc::new(server);
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT])
        .map_err(|e| format!("install signal handlers: {e}"))?;
    {
        let d = d.clone();
        std::thread::Builder::new()
            .name("txg-commit".into())
            .spawn(move || d.commit_loop())
            .map_err(|e| e.to_string())?;
    }
    {
        let d = d.clone();
        std::thread::Builder::new()
            .name("snapshot-policy".into())
            .spawn(move || d.policy_loop())
            .map_err(|e| e.to_string())?;
    }
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let (d, server) = (d.clone(), server.clone());
            std::thread::Builder::new()
                .name(format!("api-{i}"))
                .spawn(move || {
                    for req in server.incoming_requests() {
                        api::handle(&d, req);
                    }
                })
                .expect("spawn API thread")
        })
        .collect();
    tracing::info!(listen = %listen, "strata daemon ready");
    if let Some(sig) = signals.forever().next() {
        tracing::info!(signal = sig, "shutting down");
    }
    // Each unblock wakes one API thread out of accept(); they are not joined (a client
    // mid-request must not hold the shutdown up), the process ends after the pools close.
    for _ in &workers {
        server.unblock();
    }
    d.shutdown();
    drop(workers);
    tracing::info!("stopped");
    Ok(())
}

/// The engine refused a pool's log device (missing, another pool's, or a damaged label):
/// what `--discard-missing-log` is for.
fn log_device_refused(e: &Error) -> bool {
    match e {
        Error::InvalidArgument(_) => true,
        Error::Corruption(c) => c.what == "log device label",
        _ => false,
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        let (status, hint) = match e.kind() {
            ErrorKind::InvalidArgument => (400, "fix the request (see docs/api.md)"),
            ErrorKind::NotFound => (404, "check the name (`strata pool list`, `strata volume list`)"),
            ErrorKind::AlreadyExists => (409, "choose another name"),
            ErrorKind::NoSpace => (507, "free space or grow the pool"),
            ErrorKind::Io => (500, "check the device; the pool may need a restart of the daemon"),
            ErrorKind::Corruption => (500, "run `strata check`; restore from a replica or backup"),
            ErrorKind::ReadOnly => (409, "the pool refuses writes: restart the daemon once the device is healthy"),
            ErrorKind::Unsupported => (501, "upgrade Strata"),
            ErrorKind::Busy => (409, "deal with what depends on it first (named in the message)"),
        };
        ApiError { status, kind: format!("{:?}", e.kind()), message: e.to_string(), hint: hint.into() }
    }
}

/// The daemon allocates and frees dirty records (16 KiB–1 MiB each) at its write rate.
/// glibc returns freed heap tops to the kernel past 128 KiB and serves blocks of 128 KiB
/// and more with fresh mmaps, so each txg's worth of records page-faults in again (zeroed
/// by the kernel: a third of the commit thread's time under a sequential write, measured
/// with perf). Keep freed memory for reuse instead; what the daemon holds stays bounded by
/// the dirty limit and the caches.
fn tune_malloc() {
    // SAFETY: mallopt only changes allocator parameters; called before other threads start.
    unsafe {
        // Never give the heap's top back: a commit frees a txg's worth of buffers (records,
        // intent-log groups) at once, and memory returned to the kernel comes back zeroed
        // page by page at the next txg (half the daemon's CPU in a sequential NFS write).
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
}
