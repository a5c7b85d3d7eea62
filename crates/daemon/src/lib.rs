//! `strata serve`: the daemon. It owns the pools, serves FUSE mounts and NFS exports of
//! their volumes, and answers the control API — on a Unix socket by default
//! (`/run/strata/strata.sock`), on TCP with tokens when configured (docs/api.md).
//!
//! Layers: `http` (routes, the guard, listeners, the OpenAPI document) calls `service`
//! (pools, volumes, mounts, snapshots, exports, policies — no HTTP in it), which calls the
//! engine and the front ends; `access` holds callers, tokens and the audit history.
//!
//! Peers: `peer_net` is the replication listener and the authenticated transport between
//! daemons (pairing, pinned certificates); `service::peers` keeps the records.
//!
//! Commits: every `txg_interval` (5 s, as ZFS's txg timeout) a background thread commits
//! each pool, and fsync commits at once.

pub(crate) mod access;
pub mod config;
mod http;
pub mod peer_net;
pub mod sd_notify;
pub(crate) mod service;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;
use strata_engine::Clock;

pub use http::openapi_document;
pub use http::server::ApiListen;
pub use service::blockexports::BlockListen;
pub use service::exports::NfsOptions;
pub use service::{random_u64, ApiError, Daemon};
pub use strata_nbd::TlsConfig as NbdTlsConfig;
pub use strata_nbd::DEFAULT_POLL as NBD_DEFAULT_POLL;

/// The API's Unix socket unless configured otherwise.
pub const DEFAULT_SOCKET: &str = "/run/strata/strata.sock";

/// A checker report as the API and `strata check --json` show it.
pub fn check_report(r: &strata_engine::CheckReport) -> strata_api::CheckReport {
    service::pools::check_report(r)
}

/// The wall clock, for the engine (which never reads it itself).
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ns(&self) -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
    }
}

#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub data_dir: PathBuf,
    /// Where the control API listens: the Unix socket, and TCP if configured.
    pub api: ApiListen,
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
    /// Serve NBD exports of LUNs (None: recorded, not served). See service/blockexports.rs.
    pub nbd: Option<BlockListen>,
    /// A scrub's rate limit in bytes per second, always, on every pool (None: while the
    /// pool serves I/O, the rate that follows the clients' latency between the pool's
    /// scrub-rate bounds; full speed when idle). `serve --scrub-rate`.
    pub scrub_bytes_per_second: Option<u64>,
    /// Serve iSCSI exports of LUNs (None: recorded, not served).
    pub iscsi: Option<BlockListen>,
    /// A commit slower than this is recorded as a `pool.slow_commit` event (service/watch.rs;
    /// `serve --slow-commit-ms`).
    pub slow_commit: Duration,
    /// Data-record cache of each pool, in bytes (0: none).
    pub cache_bytes: u64,
    /// Dirty data of each pool before writers wait for a commit, in bytes.
    pub dirty_limit_bytes: u64,
    /// Pools to open even though their separate log device is missing or damaged, at their
    /// last commit, losing the sync writes acknowledged since (`serve --discard-missing-log`).
    pub discard_missing_log: Vec<String>,
    /// Entries each pool's dedup table may hold (about 100 bytes each).
    pub dedup_table_max: usize,
    /// The replication listener for peers (`serve --repl-port`, `--repl-bind`); None: off
    /// (this daemon can still connect to peers, but none can pair with it or reach it).
    pub repl: Option<std::net::SocketAddr>,
    /// How this daemon reaches etcd for the failover of sync mirrors (`serve --etcd-ca`,
    /// `--etcd-cert`, `--etcd-key`): TLS with these PEM files for `https://` endpoints.
    pub etcd_tls: Option<EtcdTls>,
    /// The etcd user this daemon authenticates as (`serve --etcd-user`,
    /// `--etcd-password-file`), for an etcd with authentication enabled.
    pub etcd_user: Option<EtcdUser>,
}

/// An etcd user and its password (read from a file at start; never logged).
#[derive(Clone)]
pub struct EtcdUser {
    pub name: String,
    pub password: String,
}

impl std::fmt::Debug for EtcdUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdUser").field("name", &self.name).field("password", &"(hidden)").finish()
    }
}

/// TLS to etcd: the CA that signed etcd's certificate, and this daemon's client
/// certificate and key (etcd's `--client-cert-auth`), all PEM, read at start.
#[derive(Debug, Clone)]
pub struct EtcdTls {
    pub ca_pem: Vec<u8>,
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl ServeOptions {
    pub fn new(data_dir: PathBuf) -> ServeOptions {
        ServeOptions {
            data_dir,
            api: ApiListen::new(PathBuf::from(DEFAULT_SOCKET)),
            default_pool_bytes: 16 << 30,
            txg_interval: Duration::from_secs(5),
            writeback_cache: true,
            fuse_threads: DEFAULT_FUSE_THREADS as usize,
            nfs: None,
            nbd: None,
            scrub_bytes_per_second: None,
            iscsi: None,
            slow_commit: Duration::from_secs(5),
            cache_bytes: default_cache_bytes(),
            dirty_limit_bytes: default_dirty_limit_bytes(),
            discard_missing_log: Vec::new(),
            dedup_table_max: strata_engine::pipeline::dedup::DEDUP_TABLE_MAX_DEFAULT,
            repl: None,
            etcd_tls: None,
            etcd_user: None,
        }
    }
}

/// Bytes of data-record cache each pool gets (`serve --cache-size`; set once at start).
pub(crate) static DATA_CACHE_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(64 << 20);
/// Dirty data a pool holds before writers must wait for a commit (`serve --dirty-limit`).
pub(crate) static DIRTY_LIMIT_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(256 << 20);
/// Entries of each pool's dedup table (`serve --dedup-table-max`).
pub(crate) static DEDUP_TABLE_MAX: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(strata_engine::pipeline::dedup::DEDUP_TABLE_MAX_DEFAULT);

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

/// Run the daemon until SIGTERM or SIGINT.
pub fn serve(opts: ServeOptions) -> Result<(), String> {
    tune_malloc();
    DATA_CACHE_BYTES.store(opts.cache_bytes, Ordering::Relaxed);
    DIRTY_LIMIT_BYTES.store(opts.dirty_limit_bytes.max(16 << 20), Ordering::Relaxed);
    DEDUP_TABLE_MAX.store(opts.dedup_table_max, Ordering::Relaxed);
    // Bound first: a busy socket or port, or TCP off loopback without TLS, fails before
    // any pool is opened.
    // (The replication port first: it leaves nothing behind if the socket then fails.)
    let repl = opts.repl.map(peer_net::bind).transpose()?;
    let bound = http::server::bind(&opts.api)?;
    let socket = opts.api.socket.clone();
    let tcp = opts.api.tcp;
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT])
        .map_err(|e| format!("install signal handlers: {e}"))?;
    let d = Daemon::start(opts)?;
    {
        let d = d.clone();
        std::thread::Builder::new()
            .name("txg-commit".into())
            .spawn(move || d.commit_loop())
            .map_err(|e| e.to_string())?;
    }
    {
        let d = d.clone();
        std::thread::Builder::new().name("devices".into()).spawn(move || d.device_loop()).map_err(|e| e.to_string())?;
    }
    {
        let d = d.clone();
        std::thread::Builder::new()
            .name("snapshot-policy".into())
            .spawn(move || d.policy_loop())
            .map_err(|e| e.to_string())?;
    }
    if let Some(listener) = repl {
        peer_net::spawn_listener(d.clone(), listener)?;
    }
    {
        let d = d.clone();
        std::thread::Builder::new().name("mirrors".into()).spawn(move || d.mirror_loop()).map_err(|e| e.to_string())?;
    }
    {
        let d = d.clone();
        std::thread::Builder::new()
            .name("failover".into())
            .spawn(move || d.failover_loop())
            .map_err(|e| e.to_string())?;
    }
    {
        let d = d.clone();
        std::thread::Builder::new().name("watch".into()).spawn(move || d.watch_loop()).map_err(|e| e.to_string())?;
    }
    // The API's runtime: two workers (the API is light; handlers run on its blocking pool).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("api")
        .enable_all()
        .build()
        .map_err(|e| format!("start the API runtime: {e}"))?;
    let app = http::server::app(d.clone(), bound.admin_gid);
    runtime.spawn(http::server::serve(bound, app));
    tracing::info!(socket = %socket.display(), tcp = ?tcp, "strata daemon ready");
    if let Err(e) = sd_notify::ready() {
        tracing::warn!("tell systemd the daemon is ready: {e}");
    }
    if let Some(sig) = signals.forever().next() {
        tracing::info!(signal = sig, "shutting down");
    }
    let _ = sd_notify::stopping();
    // Requests in flight are not waited for: the pools close under the admin lock's
    // protection of changes, and the process ends after.
    runtime.shutdown_background();
    d.shutdown();
    let _ = std::fs::remove_file(&socket);
    tracing::info!("stopped");
    Ok(())
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
