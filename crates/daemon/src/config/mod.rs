//! The daemon's configuration file, `/etc/strata/strata.toml` (`strata serve --config PATH`).
//!
//! Every key is optional; an absent key takes the default documented on its field, and an
//! empty (or absent) file gives the same daemon as `strata serve` with no flags. The shipped
//! `packaging/strata.toml` lists every key, commented out, with its default and why; a test
//! below keeps the two in step.
//!
//! Invariants: unknown keys are refused (`deny_unknown_fields` on every table), so a typo
//! never silently falls back to a default; a `Config` that passed `validate()` can be turned
//! into listeners without further checks (absolute paths, a parseable TCP address, TLS off
//! loopback, limits in range).
//!
//! Errors name the file, the line and column, the dotted key (`api.tcp`) and an example of
//! what to write instead. The dotted key is recovered from the source text around toml's
//! error span (a scan for the enclosing `[table]` header): exact for the plain
//! `[table]` + `key = value` layout the shipped file uses, and merely absent (the message
//! keeps its line and column) for inline tables or dotted keys.
//!
//! Precedence, for the caller: built-in defaults < this file < command-line flags.

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// Where `strata serve` looks for its configuration when `--config` is not given.
pub const DEFAULT_PATH: &str = "/etc/strata/strata.toml";

/// Mode of the API socket: the owner (root) and the socket group (delegated admins) may
/// connect; nobody else. Not configurable: the group is the knob.
pub const SOCKET_MODE: u32 = 0o660;

/// The smallest dirty limit: below it a pool commits for every few records it takes in and
/// writers wait on commits all the time (the same floor `serve --dirty-limit` enforces).
pub const DIRTY_LIMIT_MIN_BYTES: u64 = 16 << 20;

/// The smallest device the engine formats (`strata_engine::format::MIN_DEVICE_SIZE`;
/// repeated here so this module compiles on its own — keep the two equal).
pub const POOL_SIZE_MIN_BYTES: u64 = 16 << 20;

/// Entries of each pool's dedup table by default
/// (`strata_engine::pipeline::dedup::DEDUP_TABLE_MAX_DEFAULT`, repeated for the same reason).
pub const DEDUP_TABLE_MAX_DEFAULT: u64 = 256 * 1024;

/// FUSE request threads per mount by default (`strata_fuse::DEFAULT_THREADS`).
pub const FUSE_THREADS_DEFAULT: u16 = 4;

/// Longest path a Unix socket address holds (`sizeof(sun_path)` less the NUL on Linux).
const SOCKET_PATH_MAX_BYTES: usize = 107;

/// The whole file. Tables: `[api]`, `[pools]`, `[fuse]`, and `[nfs]` (absent: no NFS).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the daemon keeps its state file (`strata.json`: pools, mounts and exports,
    /// which come back after a restart) and the default pool's image.
    /// Default `/var/lib/strata`, the FHS place for a service's state (systemd's
    /// `StateDirectory=strata`).
    pub data_dir: PathBuf,
    pub api: ApiConfig,
    pub pools: PoolsConfig,
    pub fuse: FuseConfig,
    /// NFSv3 server (docs/nfs.md). `None` when the `[nfs]` table is absent: exports are
    /// recorded but not served, and no port is opened.
    pub nfs: Option<NfsConfig>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            data_dir: PathBuf::from("/var/lib/strata"),
            api: ApiConfig::default(),
            pools: PoolsConfig::default(),
            fuse: FuseConfig::default(),
            nfs: None,
        }
    }
}

/// `[api]`: where the control API listens.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// The Unix socket, always served. Mode 0660, owner root, group `socket_group`; the
    /// caller's uid comes from SO_PEERCRED, so the daemon knows who asked without tokens.
    /// Default `/run/strata/strata.sock` (`/run` is a tmpfs: no stale socket after a reboot;
    /// systemd's `RuntimeDirectory=strata` makes the directory).
    pub socket: PathBuf,
    /// Group owning the socket: its members are delegated admins. Default `strata`
    /// (made by scripts/install.sh). If the group does not exist the daemon should keep the
    /// socket root-only rather than fail (see `lookup_group`).
    pub socket_group: String,
    /// Optional TCP listener, "IP:PORT". Default none: a TCP socket cannot tell who is
    /// calling, so every request on it must carry a bearer token, and off loopback it must
    /// be TLS.
    pub tcp: Option<String>,
    /// PEM certificate chain for TLS on `tcp`. Required (with `tls_key`) when `tcp` is not
    /// a loopback address; optional on loopback. Default none.
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for `tls_cert`. Default none.
    pub tls_key: Option<PathBuf>,
}

impl Default for ApiConfig {
    fn default() -> ApiConfig {
        ApiConfig {
            socket: PathBuf::from("/run/strata/strata.sock"),
            socket_group: "strata".into(),
            tcp: None,
            tls_cert: None,
            tls_key: None,
        }
    }
}

impl ApiConfig {
    /// The TCP listener's address, if one is configured and it parses (`validate` reports
    /// the ones that do not).
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp.as_deref().and_then(|t| t.trim().parse().ok())
    }

    /// Whether the TCP listener speaks TLS (both halves configured).
    pub fn tls(&self) -> bool {
        self.tls_cert.is_some() && self.tls_key.is_some()
    }
}

/// `[pools]`: settings every pool the daemon opens gets.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolsConfig {
    /// Size of the embedded default pool's image file (sparse), made in `data_dir` when
    /// there is no state yet. Default 16G: room for a few databases, and sparse, so it
    /// costs only what is written.
    pub default_pool_size: Size,
    /// Seconds between background commits. Default 5, as ZFS's txg timeout: long enough
    /// to batch writes into few commits, short enough that little async data waits.
    pub txg_interval_seconds: u64,
    /// Data-record cache of each pool ("4G", "0" for none). Default `None`: a quarter of
    /// the machine's memory (ZFS's ARC takes up to half; the databases Strata serves
    /// want the rest).
    pub cache_size: Option<Size>,
    /// Dirty data of each pool before writers wait for a commit; commits start at half.
    /// Default `None`: a tenth of memory, between 256M and 4G (ZFS's
    /// `zfs_dirty_data_max`). At least 16M.
    pub dirty_limit: Option<Size>,
    /// Entries each pool's dedup table may hold (about 100 bytes of memory each); when
    /// full, new unique records of dedup volumes are stored without an entry. Default
    /// 262144 (about 25 MiB per pool, covering 4 GiB of unique 16 KiB records).
    pub dedup_table_max: u64,
}

impl Default for PoolsConfig {
    fn default() -> PoolsConfig {
        PoolsConfig {
            default_pool_size: Size(16 << 30),
            txg_interval_seconds: 5,
            cache_size: None,
            dirty_limit: None,
            dedup_table_max: DEDUP_TABLE_MAX_DEFAULT,
        }
    }
}

/// `[fuse]`: how volumes are mounted.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FuseConfig {
    /// Kernel writeback cache. Default true: docs/fuse-caching.md has the measurement
    /// (small writes are merged by the kernel; fsync still reaches the intent log).
    pub writeback_cache: bool,
    /// Request-handling threads per mount, 1 to 64. Default 4: a request that waits (an
    /// fsync for its log write) holds one, so many concurrent clients want more.
    pub threads: u16,
}

impl Default for FuseConfig {
    fn default() -> FuseConfig {
        FuseConfig { writeback_cache: true, threads: FUSE_THREADS_DEFAULT }
    }
}

/// `[nfs]`: present means "serve NFSv3 and MOUNT".
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NfsConfig {
    /// TCP port of NFS and MOUNT (one port for both). Default 2049, NFS's registered port,
    /// which clients try first.
    pub port: u16,
    /// Address to listen on. Default 127.0.0.1: nothing is reachable from the network
    /// until the admin says so (0.0.0.0 or a host address).
    pub bind: IpAddr,
    /// Also answer the portmapper here (111 lets clients mount without `port=` and
    /// `mountport=`). Default none: port 111 belongs to rpcbind when it is installed, and
    /// taking it would fail the start.
    pub portmap_port: Option<u16>,
}

impl Default for NfsConfig {
    fn default() -> NfsConfig {
        NfsConfig { port: 2049, bind: IpAddr::V4(Ipv4Addr::LOCALHOST), portmap_port: None }
    }
}

/// A size in bytes, written in the file as "16G", "512M", "1.5T", "0" or a plain integer
/// of bytes. Units are binary (1K = 1024) and case-insensitive, as on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Size(pub u64);

impl Size {
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Size {
    /// The shortest exact spelling: "16G", "1536M", "100".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
            if self.0 != 0 && self.0.is_multiple_of(1u64 << shift) {
                return write!(f, "{}{unit}", self.0 >> shift);
            }
        }
        write!(f, "{}", self.0)
    }
}

/// Parses "16G", "512M", "1.5T", "0", "4096", "2MiB" (binary units K, M, G, T, P; an
/// optional trailing "B" or "iB"). A fraction of a byte is dropped ("0.3K" is 307).
/// Exact integer arithmetic, so "1.1T" is the same number on every machine.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty size: write a number with an optional unit, e.g. \"16G\", \"512M\" or \"0\"".into());
    }
    if t.starts_with('-') {
        return Err(format!("size {text:?} is negative: sizes are 0 or more, e.g. \"0\" or \"512M\""));
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        "P" | "PB" | "PIB" => 50,
        _ => {
            return Err(format!("size {text:?}: unknown unit {unit:?}: use K, M, G, T or P (1K = 1024), e.g. \"16G\""))
        }
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return Err(format!("size {text:?}: no number before the unit: write e.g. \"16G\""));
    }
    if !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("size {text:?}: not a number: write e.g. \"1.5G\""));
    }
    // Below 2^63: sizes end up as file offsets (`off_t`, signed) and engine `u64`s.
    let too_large = || format!("size {text:?} is too large: sizes are below 8192P (2^63 bytes)");
    let mut bytes: u128 = 0;
    for d in whole.bytes() {
        bytes = bytes.checked_mul(10).and_then(|b| b.checked_add(u128::from(d - b'0'))).ok_or_else(too_large)?;
    }
    bytes = bytes.checked_mul(1u128 << shift).ok_or_else(too_large)?;
    // The fraction: digits beyond 20 cannot change a whole byte of a unit of at most 2^50.
    let mut scale: u128 = 1;
    let mut numerator: u128 = 0;
    for d in fraction.bytes().take(20) {
        numerator = numerator * 10 + u128::from(d - b'0');
        scale *= 10;
    }
    bytes += (numerator << shift) / scale;
    if bytes > u128::from(i64::MAX as u64) {
        return Err(too_large());
    }
    Ok(bytes as u64)
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        struct SizeVisitor;
        impl Visitor<'_> for SizeVisitor {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as \"16G\", \"512M\" or \"0\", or a number of bytes")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                parse_size(v).map(Size).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| E::custom(format!("size {v} is negative: sizes are 0 or more, e.g. \"512M\"")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
        }
        d.deserialize_any(SizeVisitor)
    }
}

/// One thing wrong with a configuration: the dotted key it is about and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Problem {
    key: &'static str,
    message: String,
}

impl Config {
    /// Every problem with the values, one per line as "KEY: what is wrong and what to
    /// write instead". `load` calls it; a caller that builds a `Config` by hand (or
    /// overrides fields from flags) calls it again afterwards.
    pub fn validate(&self) -> Result<(), String> {
        let problems = self.problems();
        if problems.is_empty() {
            return Ok(());
        }
        Err(problems.iter().map(|p| format!("{}: {}", p.key, p.message)).collect::<Vec<_>>().join("\n"))
    }

    fn problems(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        let mut bad = |key: &'static str, message: String| out.push(Problem { key, message });

        absolute_path(&mut bad, "data_dir", &self.data_dir);

        let api = &self.api;
        absolute_path(&mut bad, "api.socket", &api.socket);
        if api.socket.as_os_str().len() > SOCKET_PATH_MAX_BYTES {
            bad(
                "api.socket",
                format!(
                    "{} is {} bytes long; a Unix socket path holds at most {SOCKET_PATH_MAX_BYTES}: choose a shorter one, e.g. \"/run/strata/strata.sock\"",
                    api.socket.display(),
                    api.socket.as_os_str().len()
                ),
            );
        }
        if !valid_group_name(&api.socket_group) {
            bad(
                "api.socket_group",
                format!(
                    "{:?} is not a group name: letters, digits, '_', '-' and '.', not starting with '-', e.g. \"strata\"",
                    api.socket_group
                ),
            );
        }
        for (key, path) in [("api.tls_cert", &api.tls_cert), ("api.tls_key", &api.tls_key)] {
            if let Some(p) = path {
                absolute_path(&mut bad, key, p);
            }
        }
        match (&api.tls_cert, &api.tls_key) {
            (Some(_), None) => bad(
                "api.tls_key",
                "api.tls_cert is set but api.tls_key is not: set both, e.g. tls_key = \"/etc/strata/tls/key.pem\""
                    .into(),
            ),
            (None, Some(_)) => bad(
                "api.tls_cert",
                "api.tls_key is set but api.tls_cert is not: set both, e.g. tls_cert = \"/etc/strata/tls/cert.pem\""
                    .into(),
            ),
            _ => {}
        }
        match &api.tcp {
            None => {
                if api.tls_cert.is_some() || api.tls_key.is_some() {
                    bad(
                        "api.tcp",
                        "TLS is configured but api.tcp is not: TLS applies only to the TCP listener; set tcp = \"IP:PORT\" or remove tls_cert and tls_key".into(),
                    );
                }
            }
            Some(text) => match text.trim().parse::<SocketAddr>() {
                Err(_) => bad(
                    "api.tcp",
                    format!("{text:?} is not an address and port: write an IP address and a port, e.g. \"127.0.0.1:7420\" or \"[::1]:7420\" (no host names)"),
                ),
                Ok(addr) if addr.port() == 0 => {
                    bad("api.tcp", format!("{text:?}: port 0 would pick a random port clients cannot know: give one, e.g. \"127.0.0.1:7420\""))
                }
                Ok(addr) if !addr.ip().is_loopback() && !api.tls() => bad(
                    "api.tcp",
                    format!("{addr} is not a loopback address: TLS is required off loopback: set api.tls_cert and api.tls_key"),
                ),
                Ok(_) => {}
            },
        }

        let pools = &self.pools;
        if pools.default_pool_size.0 < POOL_SIZE_MIN_BYTES {
            bad(
                "pools.default_pool_size",
                format!("{} is below the smallest pool, 16M: write e.g. \"16G\"", pools.default_pool_size),
            );
        }
        if !(1..=300).contains(&pools.txg_interval_seconds) {
            bad(
                "pools.txg_interval_seconds",
                format!(
                    "{} is outside 1 to 300: commits more than 5 minutes apart would hold that much async data at risk; write e.g. 5",
                    pools.txg_interval_seconds
                ),
            );
        }
        if let Some(d) = pools.dirty_limit {
            if d.0 < DIRTY_LIMIT_MIN_BYTES {
                bad("pools.dirty_limit", format!("{d} is below 16M: write at least \"16M\", e.g. \"256M\" or \"2G\""));
            }
        }
        if usize::try_from(pools.dedup_table_max).is_err() {
            bad(
                "pools.dedup_table_max",
                format!("{} does not fit this machine's memory: write e.g. 262144", pools.dedup_table_max),
            );
        }

        if !(1..=64).contains(&self.fuse.threads) {
            bad(
                "fuse.threads",
                format!("{} is outside 1 to 64: write e.g. 4 (or 16 for many concurrent clients)", self.fuse.threads),
            );
        }

        if let Some(nfs) = &self.nfs {
            if nfs.port == 0 {
                bad("nfs.port", "0 would pick a random port clients cannot know: write e.g. 2049".into());
            }
            match nfs.portmap_port {
                Some(0) => bad("nfs.portmap_port", "0 would pick a random port: write 111, or remove the key".into()),
                Some(p) if p == nfs.port => bad(
                    "nfs.portmap_port",
                    format!("{p} is also nfs.port: the portmapper needs its own port, normally 111"),
                ),
                _ => {}
            }
        }
        out
    }
}

fn absolute_path(bad: &mut impl FnMut(&'static str, String), key: &'static str, path: &Path) {
    if path.as_os_str().is_empty() {
        bad(key, "empty path: write an absolute path".into());
    } else if !path.is_absolute() {
        bad(
            key,
            format!(
                "{} is a relative path (the daemon's working directory is /): write an absolute path, e.g. \"/{}\"",
                path.display(),
                path.display()
            ),
        );
    }
}

/// The group names `groupadd` accepts by default (shadow-utils' `is_valid_user_name`,
/// less the trailing '$' of Samba machine accounts).
fn valid_group_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.starts_with('-')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
        && !name.bytes().all(|b| b.is_ascii_digit())
}

/// The gid of a group, `None` if there is no such group (then the daemon should leave the
/// socket root:root 0660 and log a warning: only root can use it, which fails safe).
pub fn lookup_group(name: &str) -> Result<Option<u32>, String> {
    let c_name = std::ffi::CString::new(name).map_err(|_| format!("group name {name:?} holds a NUL byte"))?;
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: all-zero bytes are a valid `group` (null pointers, zero gid).
        let mut group: libc::group = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::group = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call; `buf` outlives the use of `group`'s
        // string pointers (we read only `gr_gid`).
        let rc =
            unsafe { libc::getgrnam_r(c_name.as_ptr(), &mut group, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
        match rc {
            0 if found.is_null() => return Ok(None),
            0 => return Ok(Some(group.gr_gid)),
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            // "No such group" is reported as one of these by some NSS modules.
            libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => return Ok(None),
            e => return Err(format!("look up group {name:?}: {}", std::io::Error::from_raw_os_error(e))),
        }
    }
}

/// Example lines, by dotted key: what an error about the key suggests writing instead.
const EXAMPLES: &[(&str, &str)] = &[
    ("data_dir", "data_dir = \"/var/lib/strata\""),
    ("api", "[api] with keys socket, socket_group, tcp, tls_cert, tls_key"),
    ("api.socket", "socket = \"/run/strata/strata.sock\""),
    ("api.socket_group", "socket_group = \"strata\""),
    ("api.tcp", "tcp = \"127.0.0.1:7420\""),
    ("api.tls_cert", "tls_cert = \"/etc/strata/tls/cert.pem\""),
    ("api.tls_key", "tls_key = \"/etc/strata/tls/key.pem\""),
    ("pools", "[pools] with keys default_pool_size, txg_interval_seconds, cache_size, dirty_limit, dedup_table_max"),
    ("pools.default_pool_size", "default_pool_size = \"16G\""),
    ("pools.txg_interval_seconds", "txg_interval_seconds = 5"),
    ("pools.cache_size", "cache_size = \"4G\""),
    ("pools.dirty_limit", "dirty_limit = \"1G\""),
    ("pools.dedup_table_max", "dedup_table_max = 262144"),
    ("fuse", "[fuse] with keys writeback_cache, threads"),
    ("fuse.writeback_cache", "writeback_cache = true"),
    ("fuse.threads", "threads = 4"),
    ("nfs", "[nfs] with keys port, bind, portmap_port"),
    ("nfs.port", "port = 2049"),
    ("nfs.bind", "bind = \"127.0.0.1\""),
    ("nfs.portmap_port", "portmap_port = 111"),
];

fn example(key: &str) -> Option<&'static str> {
    EXAMPLES.iter().find(|(k, _)| *k == key).map(|(_, e)| *e)
}

/// Reads, parses and validates the file at `path`. Errors, one per problem:
/// `PATH:LINE:COL: KEY: message`, the offending line, and "write e.g. ...".
pub fn load(path: &Path) -> Result<Config, String> {
    let source = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "read configuration {}: {e}; copy packaging/strata.toml there (every key is optional), or point --config elsewhere",
            path.display()
        )
    })?;
    parse(&source, &path.display().to_string())
}

/// `load` on text already read; `origin` names it in messages.
pub fn parse(source: &str, origin: &str) -> Result<Config, String> {
    let config: Config = toml::from_str(source).map_err(|e| {
        let Some(span) = e.span() else {
            return format!("{origin}: {}", e.message().trim());
        };
        let key = key_at(source, span.start);
        let mut out = locate(source, origin, span.start);
        if let Some(k) = &key {
            out.push_str(&format!(" {k}:"));
        }
        out.push_str(&format!(" {}", e.message().trim()));
        out.push_str(&excerpt(source, span));
        if let Some(ex) = key.as_deref().and_then(example) {
            out.push_str(&format!("\n  write e.g.: {ex}"));
        }
        out
    })?;
    let problems = config.problems();
    if problems.is_empty() {
        return Ok(config);
    }
    Err(problems
        .iter()
        .map(|p| {
            // The key's line; for a key the file lacks, its table's header line.
            let span = find_key(source, p.key)
                .or_else(|| p.key.rsplit_once('.').and_then(|(table, _)| find_header(source, table)));
            let mut out = match span {
                Some(span) => {
                    let mut s = locate(source, origin, span.start);
                    s.push_str(&format!(" {}: {}", p.key, p.message));
                    s.push_str(&excerpt(source, span));
                    s
                }
                None => format!("{origin}: {}: {}", p.key, p.message),
            };
            if let Some(ex) = example(p.key).filter(|ex| !p.message.contains(ex)) {
                out.push_str(&format!("\n  write e.g.: {ex}"));
            }
            out
        })
        .collect::<Vec<_>>()
        .join("\n"))
}

/// "ORIGIN:LINE:COL:" for a byte offset (1-based line and column, columns in characters).
fn locate(source: &str, origin: &str, offset: usize) -> String {
    let offset = offset.min(source.len());
    let before = &source[..floor_char_boundary(source, offset)];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("{origin}:{line}:{column}:")
}

/// The source line holding `span.start`, with carets under the span.
fn excerpt(source: &str, span: std::ops::Range<usize>) -> String {
    let start = floor_char_boundary(source, span.start.min(source.len()));
    let line_start = source[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = source[start..].find('\n').map_or(source.len(), |i| start + i);
    let line = &source[line_start..line_end];
    let pad = source[line_start..start].chars().count();
    let end = floor_char_boundary(source, span.end.clamp(start, line_end));
    let width = source[start..end].chars().count().max(1);
    format!("\n  | {}\n  | {}{}", line.trim_end(), " ".repeat(pad), "^".repeat(width))
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The dotted key an error at `offset` is about: the enclosing `[table]` header and the
/// key on the error's line (or the header itself when the error is on a header line).
fn key_at(source: &str, offset: usize) -> Option<String> {
    let offset = floor_char_boundary(source, offset.min(source.len()));
    let line_start = source[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = source[offset..].find('\n').map_or(source.len(), |i| offset + i);
    let line = &source[line_start..line_end];
    if let Some(name) = header(line) {
        return Some(name);
    }
    let table = source[..line_start].lines().rev().find_map(header);
    let key = line.split_once('=').map_or(line, |(k, _)| k).trim().trim_matches('"');
    if key.is_empty()
        || key.starts_with('#')
        || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return table;
    }
    Some(match table {
        Some(t) => format!("{t}.{key}"),
        None => key.to_string(),
    })
}

/// The name of a `[table]` header line, if `line` is one.
fn header(line: &str) -> Option<String> {
    let t = line.trim();
    let t = t.split_once('#').map_or(t, |(h, _)| h).trim();
    let name = t.strip_prefix('[')?.strip_suffix(']')?;
    if name.starts_with('[') {
        return None;
    }
    Some(name.trim().trim_matches('"').to_string())
}

/// The span of the name in the `[table]` header line.
fn find_header(source: &str, table: &str) -> Option<std::ops::Range<usize>> {
    let mut offset = 0;
    for line in source.split_inclusive('\n') {
        if header(line).as_deref() == Some(table) {
            let start = offset + line.find(table).unwrap_or(0);
            return Some(start..start + table.len());
        }
        offset += line.len();
    }
    None
}

/// The span of `key = ...`'s key (dotted: table then key) in plain `[table]` layout.
fn find_key(source: &str, dotted: &str) -> Option<std::ops::Range<usize>> {
    let (table, key) = dotted.rsplit_once('.').map_or((None, dotted), |(t, k)| (Some(t), k));
    let mut current: Option<String> = None;
    let mut offset = 0;
    for line in source.split_inclusive('\n') {
        if let Some(name) = header(line) {
            current = Some(name);
        } else if current.as_deref() == table {
            let trimmed = line.trim_start();
            if let Some((k, _)) = trimmed.split_once('=') {
                if k.trim().trim_matches('"') == key {
                    let start = offset + (line.len() - trimmed.len());
                    return Some(start..start + k.trim_end().len());
                }
            }
        }
        offset += line.len();
    }
    None
}

#[cfg(test)]
mod tests;
