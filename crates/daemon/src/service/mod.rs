//! The daemon's services: pools, volumes, mounts, snapshots, exports, policies — what the
//! control API does, with no knowledge of HTTP (crate::http turns requests into calls
//! here and errors into statuses).
//!
//! State that must survive a restart — which pools (by device), mounts, exports and
//! policies — is kept in `DATA_DIR/strata.json`, rewritten atomically (write + rename +
//! fsync) on every change. With no state file the daemon creates the embedded default pool
//! `default` in `DATA_DIR/default.img` (a sparse image file).
//!
//! A pool that cannot be opened at start (device missing, unreadable, damaged) is kept as
//! UNAVAILABLE with the reason; every other pool is served. Its mounts and exports stay
//! recorded and come back when it does (at the next start).
//!
//! A restart after `kill -9` is a crash for the pools: they reopen at their last committed
//! txg, stale FUSE mounts left by the dead process are detached, and the volumes are
//! mounted again where they were.
//!
//! Locks, in the order they are taken: `admin` (serialises changes to pools, volumes,
//! mounts, exports and the state file) → `pools` → `unavailable` → `mounts` → `policies` →
//! the NFS service's `records` → `next_id`. `pools`, `unavailable`, `mounts` and `policies`
//! are held only for map look-ups and updates, never across engine calls or I/O.
//! `stats`'s map of volume counters (stats.rs) is a leaf, taken alone.
//! The peers' `records` → `invitations` (peers/) are taken after `admin` when at all, also
//! only for look-ups and updates.

pub(crate) mod blockexports;
pub(crate) mod client_pace;
pub(crate) mod db_freeze;
pub(crate) mod devcheck;
pub(crate) mod devices;
pub(crate) mod devset;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod exports;
pub(crate) mod fsreg;
mod groups;
pub(crate) mod jobs;
pub(crate) mod lifecycle;
pub(crate) mod logdev;
pub(crate) mod luns;
pub(crate) mod metrics;
pub(crate) mod mirrors;
pub(crate) mod mounts;
pub(crate) mod peers;
pub(crate) mod policy;
pub(crate) mod pools;
pub(crate) mod scrub;
pub(crate) mod snapshots;
pub(crate) mod state;
pub(crate) mod stats;
pub(crate) mod volumes;
pub(crate) mod watch;

use crate::access::{audit::History, tokens::TokenStore};
use crate::{ServeOptions, SystemClock};
pub use error::ApiError;
use state::{MountRecord, PoolRecord, State};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strata_engine::{BlockDevice, Clock, ErrorKind, FileDevice, FileDeviceOptions, Pool, PoolOptions};

pub(crate) struct PoolEntry {
    pub pool: Arc<Pool>,
    pub device: PathBuf,
    /// The member devices of a mirror (empty for a pool on one device).
    pub members: Vec<PathBuf>,
    /// The members of each device group `pool add` added (groups 1, 2, ...).
    pub groups: Vec<Vec<PathBuf>>,
    /// The separate intent-log device, if the pool has one.
    pub log_device: Option<PathBuf>,
    /// Hot spares (a mirror's): the first replaces a member that faults or disappears.
    pub spares: Vec<PathBuf>,
    /// When the pool is scrubbed by itself (watch.rs).
    pub scrub_schedule: Option<state::ScrubSchedule>,
    /// Bounds of a rebuild's rate beside clients; `None`: the defaults (client_pace.rs).
    pub rebuild_rate: Option<state::RateBounds>,
    /// Bounds of a scrub's rate beside clients; `None`: the defaults.
    pub scrub_rate: Option<state::RateBounds>,
}

/// A pool of the state file that could not be opened.
pub(crate) struct UnavailablePool {
    pub record: PoolRecord,
    pub reason: String,
}

pub(crate) struct MountEntry {
    pub pool: String,
    pub volume: String,
    /// None: recorded, not served (its pool is unavailable, or the daemon is stopping).
    pub session: Option<strata_fuse::BackgroundSession>,
}

pub struct Daemon {
    pub(crate) opts: ServeOptions,
    pub(crate) pools: Mutex<BTreeMap<String, PoolEntry>>,
    pub(crate) unavailable: Mutex<BTreeMap<String, UnavailablePool>>,
    pub(crate) mounts: Mutex<BTreeMap<PathBuf, MountEntry>>,
    /// Serialises changes to pools, volumes and mounts (and the state file).
    pub(crate) admin: Mutex<()>,
    /// Snapshot policies by POOL/VOLUME.
    pub(crate) policies: Mutex<BTreeMap<String, Vec<strata_api::Schedule>>>,
    pub(crate) stopping: AtomicBool,
    pub(crate) nfs: exports::NfsService,
    pub(crate) filesystems: fsreg::FsRegistry,
    /// LUNs being served, one per volume (luns.rs).
    pub(crate) luns: luns::LunRegistry,
    /// NBD and iSCSI exports of LUNs (blockexports.rs).
    pub(crate) blocks: blockexports::BlockService,
    pub(crate) tokens: TokenStore,
    pub(crate) history: History,
    /// This daemon's host id (DATA_DIR/host-id): recorded in the pools it has open, so
    /// another daemon will not import them by accident.
    pub(crate) host_id: u64,
    /// Rebuilds in progress, for their rate and ETA (devices.rs).
    pub(crate) rebuilds: devices::RebuildTracks,
    /// Scrubs running or ended, by pool (scrub.rs).
    pub(crate) scrubs: scrub::Scrubs,
    /// Mirrors to other pools and their transfers (mirrors/).
    pub(crate) mirrors: mirrors::Mirrors,
    /// The event history (events.rs).
    pub(crate) events: Arc<events::EventLog>,
    /// Long operations as resources (jobs.rs).
    pub(crate) jobs: Arc<jobs::Jobs>,
    /// I/O counters of the volumes served (stats.rs).
    pub(crate) stats: stats::StatsRegistry,
    /// This daemon's peer identity, its paired peers and pending invitations (peers/).
    pub(crate) peers: peers::Peers,
}

pub fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b)).is_err() {
        b = (SystemClock.now_ns() ^ ((std::process::id() as u64) << 32)).to_le_bytes();
    }
    u64::from_le_bytes(b) | 1
}

pub(crate) fn pool_options() -> PoolOptions {
    let mut o = PoolOptions::new(Arc::new(SystemClock));
    o.data_cache_bytes = crate::DATA_CACHE_BYTES.load(Ordering::Relaxed);
    o.dirty_limit_bytes = crate::DIRTY_LIMIT_BYTES.load(Ordering::Relaxed);
    o.dedup_table_max = crate::DEDUP_TABLE_MAX.load(Ordering::Relaxed);
    o.host_id = HOST_ID.load(Ordering::Relaxed);
    o
}

/// This daemon's host id, for every pool it opens (set once at start).
static HOST_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub(crate) fn open_device(path: &Path, create_size: Option<u64>) -> Result<Arc<dyn BlockDevice>, ApiError> {
    FileDevice::open(path, &FileDeviceOptions { direct: true, create_size })
        .map(|d| Arc::new(d) as Arc<dyn BlockDevice>)
        .map_err(|e| ApiError::bad_request(format!("{}: {e}", path.display()), "check the device path and permissions"))
}

/// The host id kept in `DATA_DIR/host-id` (made at the first start).
fn load_or_make_host_id(dir: &Path) -> Result<u64, String> {
    let path = dir.join("host-id");
    match std::fs::read_to_string(&path) {
        Ok(s) => u64::from_str_radix(s.trim(), 16)
            .map_err(|_| format!("{} is damaged (not a hex number): fix or remove it", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = random_u64();
            state::write_atomic(&path, format!("{id:016x}\n").as_bytes(), 0o644)
                .map_err(|e| format!("write {}: {e}", path.display()))?;
            Ok(id)
        }
        Err(e) => Err(format!("read {}: {e}", path.display())),
    }
}

impl Daemon {
    /// Open everything the state file names (pools that cannot be opened are kept as
    /// UNAVAILABLE), remount its mounts, bring up its exports.
    pub fn start(opts: ServeOptions) -> Result<Arc<Daemon>, String> {
        std::fs::create_dir_all(&opts.data_dir)
            .map_err(|e| format!("create data directory {}: {e}", opts.data_dir.display()))?;
        let host_id = load_or_make_host_id(&opts.data_dir)?;
        HOST_ID.store(host_id, Ordering::Relaxed);
        let identity = crate::peer_net::Identity::load_or_make(&opts.data_dir)?;
        // STRATA_EVENTS_MAX: a smaller history, for the tests of its bound.
        let event_log = Arc::new(events::EventLog::open(
            Some(opts.data_dir.join("events.jsonl")),
            std::env::var("STRATA_EVENTS_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or(events::EVENTS_MAX),
        ));
        let jobs_path = opts.data_dir.join("jobs.json");
        let d = Arc::new(Daemon {
            tokens: TokenStore::load(opts.data_dir.join("tokens.json"))?,
            history: History::open(opts.data_dir.join("history.jsonl"))?,
            opts,
            pools: Mutex::new(BTreeMap::new()),
            unavailable: Mutex::new(BTreeMap::new()),
            mounts: Mutex::new(BTreeMap::new()),
            admin: Mutex::new(()),
            policies: Mutex::new(BTreeMap::new()),
            stopping: AtomicBool::new(false),
            nfs: exports::NfsService::new(),
            filesystems: fsreg::FsRegistry::default(),
            luns: luns::LunRegistry::default(),
            blocks: blockexports::BlockService::new(),
            host_id,
            rebuilds: Default::default(),
            scrubs: Default::default(),
            mirrors: Default::default(),
            events: event_log,
            jobs: Arc::new(jobs::Jobs::open(Some(jobs_path))),
            stats: Default::default(),
            peers: peers::Peers::new(identity),
        });
        let state = match State::load(&d.state_path())? {
            Some(s) => s,
            None => {
                let image = d.opts.data_dir.join("default.img");
                tracing::info!(image = %image.display(), "no configuration: creating the embedded default pool");
                let req = strata_api::CreatePool {
                    name: "default".into(),
                    device: Some(image),
                    layout: None,
                    devices: Vec::new(),
                    spares: Vec::new(),
                    size_bytes: Some(d.opts.default_pool_bytes),
                    checksum: None,
                    log_device: None,
                    force: false,
                };
                d.create_pool(&req).map_err(|e| format!("create the default pool: {}", e.message))?;
                exports::NfsService::start(&d, Vec::new(), 1)?;
                blockexports::BlockService::start(&d, Vec::new())?;
                return Ok(d);
            }
        };
        let mut forgot_log = false;
        for p in &state.pools {
            match pools::open_recorded(&d, p) {
                Ok((pool, log_device)) => {
                    forgot_log |= log_device.is_none() && p.log_device.is_some();
                    let groups = devset::groups_in_use(&pool, &p.groups);
                    if groups.len() != p.groups.len() {
                        tracing::warn!(pool = %p.name, recorded = ?p.groups, "device groups the pool's label does not name (a `pool add` that did not finish) are forgotten; their devices are free");
                        forgot_log = true;
                    }
                    d.pools.lock().expect("pools").insert(
                        p.name.clone(),
                        PoolEntry {
                            pool: Arc::new(pool),
                            device: p.device.clone(),
                            members: p.members.clone(),
                            groups,
                            log_device,
                            spares: p.spares.clone(),
                            scrub_schedule: p.scrub_schedule,
                            rebuild_rate: p.rebuild_rate,
                            scrub_rate: p.scrub_rate,
                        },
                    );
                }
                Err(reason) => {
                    tracing::error!(pool = %p.name, device = %p.device.display(), "pool UNAVAILABLE: {reason}");
                    d.unavailable
                        .lock()
                        .expect("unavailable")
                        .insert(p.name.clone(), UnavailablePool { record: p.clone(), reason });
                }
            }
        }
        *d.policies.lock().expect("policies") =
            state.policies.iter().map(|p| (p.volume.clone(), p.schedules.clone())).collect();
        d.mirrors.load(state.mirrors.clone());
        d.peers.load(state.peers.clone());
        // Volumes under a failover lease: gated, and known to be taken over (not remounted)
        // before their mounts come back (mirrors/failover.rs).
        d.failover_start();
        for m in &state.mounts {
            let pool_name = m.volume.split('/').next().unwrap_or("");
            if d.unavailable.lock().expect("unavailable").contains_key(pool_name) {
                if let Ok((p, v)) = split_volume(&m.volume) {
                    let entry = MountEntry { pool: p.into(), volume: v.into(), session: None };
                    d.mounts.lock().expect("mounts").insert(m.path.clone(), entry);
                }
                continue;
            }
            if let Err(e) = d.mount(&m.volume, &m.path, false) {
                tracing::warn!(volume = %m.volume, path = %m.path.display(), "could not remount: {}", e.message);
            }
        }
        exports::NfsService::start(&d, state.exports.clone(), state.next_export_id)?;
        blockexports::BlockService::start(&d, state.block_exports.clone())?;
        // Synchronous mirrors start catching up: what the source did while no link was
        // armed reaches the target with a transfer (mirrors/sync.rs).
        for m in d.mirrors.records() {
            if m.sync.is_some() && m.state != "broken" && m.state != "paused" {
                if let Err(e) = d.arm_sync(&m.name(), "restart") {
                    tracing::warn!(mirror = %m.name(), "sync mirror not armed: {} ({})", e.message, e.hint);
                }
            }
        }
        for p in &state.pools {
            if let Some(progress) = p.scrub_progress {
                d.resume_scrub(&p.name, progress);
            }
        }
        if forgot_log {
            // A discarded log device, or a group a `pool add` did not finish, is no longer the
            // pool's: do not ask for it again.
            d.save_state().map_err(|e| e.message)?;
        }
        Ok(d)
    }

    fn state_path(&self) -> PathBuf {
        self.opts.data_dir.join("strata.json")
    }

    pub(crate) fn save_state(&self) -> Result<(), ApiError> {
        let mut pools: Vec<PoolRecord> = self
            .pools
            .lock()
            .expect("pools")
            .iter()
            .map(|(n, e)| PoolRecord {
                name: n.clone(),
                device: e.device.clone(),
                members: e.members.clone(),
                groups: e.groups.clone(),
                log_device: e.log_device.clone(),
                spares: e.spares.clone(),
                scrub_schedule: e.scrub_schedule,
                rebuild_rate: e.rebuild_rate,
                scrub_rate: e.scrub_rate,
                scrub_progress: self.scrubs.progress(n),
            })
            .collect();
        pools.extend(self.unavailable.lock().expect("unavailable").values().map(|u| u.record.clone()));
        pools.sort_by(|a, b| a.name.cmp(&b.name));
        let mounts = self
            .mounts
            .lock()
            .expect("mounts")
            .iter()
            .map(|(p, m)| MountRecord { volume: format!("{}/{}", m.pool, m.volume), path: p.clone() })
            .collect();
        let s = State {
            pools,
            mounts,
            policies: self
                .policies
                .lock()
                .expect("policies")
                .iter()
                .map(|(v, s)| policy::PolicyRecord { volume: v.clone(), schedules: s.clone() })
                .collect(),
            exports: self.nfs.records(),
            block_exports: self.blocks.records(),
            next_export_id: *self.nfs.next_id.lock().expect("export ids"),
            mirrors: self.mirrors.records(),
            peers: self.peers.records(),
        };
        s.save(&self.state_path()).map_err(|e| ApiError::internal(format!("save daemon state: {e}")))
    }

    /// The open pool `name`; an UNAVAILABLE pool is a clear error saying why.
    pub(crate) fn pool(&self, name: &str) -> Result<Arc<Pool>, ApiError> {
        if let Some(e) = self.pools.lock().expect("pools").get(name) {
            return Ok(e.pool.clone());
        }
        if let Some(u) = self.unavailable.lock().expect("unavailable").get(name) {
            return Err(ApiError::unavailable(
                format!("pool {name} is UNAVAILABLE: {}", u.reason),
                "bring its device back and restart the daemon, or forget it with `strata pool export`",
            ));
        }
        Err(ApiError::not_found(format!("pool {name}"), "see `strata pool list`"))
    }

    /// Where POOL/VOLUME is mounted, if it is.
    pub(crate) fn mounted_at(&self, pool: &str, vol: &str) -> Option<PathBuf> {
        self.mounts
            .lock()
            .expect("mounts")
            .iter()
            .find(|(_, m)| m.pool == pool && m.volume == vol)
            .map(|(p, _)| p.clone())
    }

    /// Background commits until the daemon stops: every `txg_interval`, and sooner for a
    /// pool whose dirty data passed half its limit — so that the commit happens here, not in
    /// a writer that hit the limit. Writes go on while it writes its data (the quiescing txg,
    /// engine quiesce.rs), into the other half. (A quarter before the quiescing txg; a
    /// client rewriting a 1 GiB file then had nearly every byte it sent hashed and written.
    /// Half, with prewrite passes that stop chasing: 1.26 → 2.35 GB/s of NFS writes,
    /// docs/txg-pipeline.md.)
    pub(crate) fn commit_loop(self: Arc<Self>) {
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
        // Interrupted, not cancelled: their progress is saved below, and the next start
        // resumes them.
        self.scrubs.interrupt_all();
        self.nfs.stop();
        self.blocks.stop();
        let paths: Vec<PathBuf> = self.mounts.lock().expect("mounts").keys().cloned().collect();
        for p in paths {
            // Keep the mount in the state file: it comes back at the next start.
            let entry = self.mounts.lock().expect("mounts").remove(&p);
            if let Some(mut e) = entry {
                if let Some(s) = e.session.take() {
                    if let Err(err) = s.umount_and_join() {
                        tracing::warn!(path = %p.display(), "unmount at shutdown: {err}; detaching");
                        mounts::detach_stale_mount(&p);
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

pub(crate) fn split_volume(spec: &str) -> Result<(&str, &str), ApiError> {
    match spec.split_once('/') {
        Some((p, v)) if !p.is_empty() && !v.is_empty() && !v.contains('/') => Ok((p, v)),
        _ => Err(ApiError::bad_request(format!("volume {spec:?} is not POOL/VOLUME"), "name volumes as POOL/VOLUME")),
    }
}
