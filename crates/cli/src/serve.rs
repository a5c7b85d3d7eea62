//! `strata serve`: the daemon's settings from, in rising order of precedence, the defaults,
//! the config file (`--config`, else /etc/strata/strata.toml if it exists), the
//! environment (STRATA_DATA_DIR, STRATA_SOCKET) and the flags.

use crate::units::parse_size;
use clap::Args;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;
use strata_daemon::config::{self, Config};
use strata_daemon::{ApiListen, BlockListen, NfsOptions, ServeOptions};

/// A config error: exit 78 (EX_CONFIG), which the systemd unit does not restart on.
pub const EXIT_CONFIG: u8 = 78;

#[derive(Args)]
pub struct ServeArgs {
    /// The configuration file (default /etc/strata/strata.toml, if it exists).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Where the daemon keeps its state and the default pool's image.
    #[arg(long, env = "STRATA_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Size of the embedded default pool, made when no configuration exists (e.g. 16G).
    #[arg(long)]
    default_pool_size: Option<String>,
    /// Seconds between background commits.
    #[arg(long)]
    txg_interval: Option<u64>,
    /// Disable the FUSE writeback cache (every write goes to the daemon as it comes).
    #[arg(long)]
    no_writeback_cache: bool,
    /// Request-handling threads of each FUSE mount (1 to 64): a request that waits
    /// (an fsync for its log write) holds one, so many concurrent clients want more.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    fuse_threads: Option<u16>,
    /// Serve NFS exports (NFSv3 and MOUNT) on this TCP port (see docs/nfs.md).
    #[arg(long)]
    nfs_port: Option<u16>,
    /// Address of the NFS listener (127.0.0.1: this host only; 0.0.0.0 for the network).
    #[arg(long)]
    nfs_bind: Option<IpAddr>,
    /// Also answer the portmapper on this port (111 lets clients find NFS without ports).
    #[arg(long)]
    nfs_portmap_port: Option<u16>,
    /// Most bytes per second a scrub verifies on every pool, whether it is busy or not
    /// (e.g. 100M); default: while the pool serves I/O, a rate that follows the clients'
    /// latency between the pool's bounds (`pool set --scrub-rate-min/-max`), full speed
    /// when it is idle.
    #[arg(long)]
    scrub_rate: Option<String>,
    /// Record a `pool.slow_commit` event for each commit slower than this (milliseconds;
    /// default 5000).
    #[arg(long)]
    slow_commit_ms: Option<u64>,
    /// Serve NBD exports of LUNs on this TCP port (10809 is NBD's).
    #[arg(long)]
    nbd_port: Option<u16>,
    /// Address of the NBD listener (127.0.0.1 by default; elsewhere needs TLS with client
    /// certificates).
    #[arg(long)]
    nbd_bind: Option<IpAddr>,
    /// Microseconds an NBD connection polls for its next request before sleeping (default
    /// 50; 0 never polls): polling nearly doubles (1.75×) what a client at queue depth 1
    /// gets on a virtual machine, for up to that much CPU time per request.
    #[arg(long)]
    nbd_poll_us: Option<u64>,
    /// NBD over TLS: the server's certificate chain (PEM); every client must then use TLS.
    #[arg(long, requires = "nbd_tls_key")]
    nbd_tls_cert: Option<PathBuf>,
    /// NBD over TLS: the server's private key (PEM).
    #[arg(long, requires = "nbd_tls_cert")]
    nbd_tls_key: Option<PathBuf>,
    /// NBD over TLS: accept only clients with a certificate signed by this CA (PEM) — what
    /// an NBD listener off loopback needs.
    #[arg(long, requires = "nbd_tls_cert")]
    nbd_tls_client_ca: Option<PathBuf>,
    /// Serve iSCSI exports of LUNs on this TCP port (3260 is iSCSI's).
    #[arg(long)]
    iscsi_port: Option<u16>,
    /// Address of the iSCSI listener (127.0.0.1 by default; elsewhere every target needs CHAP,
    /// and discovery too: --iscsi-discovery-user/--iscsi-discovery-secret).
    #[arg(long)]
    iscsi_bind: Option<IpAddr>,
    /// CHAP user name of iSCSI discovery sessions (SendTargets).
    #[arg(long, requires = "iscsi_discovery_secret")]
    iscsi_discovery_user: Option<String>,
    /// CHAP secret of iSCSI discovery sessions, 12 to 255 characters.
    #[arg(long, requires = "iscsi_discovery_user")]
    iscsi_discovery_secret: Option<String>,
    /// Data cache of each pool (e.g. 4G, 512M, 0 for none); default a quarter of memory.
    #[arg(long)]
    cache_size: Option<String>,
    /// Dirty data of each pool before writers wait for a commit (at least 16M); default
    /// a tenth of memory, 256M to 4G. Commits start at half of it.
    #[arg(long)]
    dirty_limit: Option<String>,
    /// Entries each pool's dedup table may hold (about 100 bytes of memory each); when
    /// full, new unique records of dedup volumes are stored without an entry.
    #[arg(long)]
    dedup_table_max: Option<u64>,
    /// Open POOL even though its log device is missing or damaged, at its last commit:
    /// the sync writes acknowledged since are LOST. The pool then logs in its own
    /// region. Repeat for several pools.
    #[arg(long, value_name = "POOL")]
    discard_missing_log: Vec<String>,
    /// The group whose members administer the daemon through its socket.
    #[arg(long)]
    socket_group: Option<String>,
    /// Also serve the API on TCP (IP:PORT); every request then needs a token (`strata
    /// token create`), and TLS (--tls-cert/--tls-key) unless the address is loopback.
    #[arg(long)]
    tcp: Option<SocketAddr>,
    /// TLS certificate chain (PEM) of the TCP listener.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) of the TCP listener.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Listen for replication peers (pairing and mirrors between daemons) on this TCP port.
    /// Every connection is TLS 1.3 with pinned certificates on both sides (docs/peers.md).
    #[arg(long)]
    repl_port: Option<u16>,
    /// Address of the replication listener (127.0.0.1: this host only; 0.0.0.0 for the
    /// network — it accepts paired peers only, whatever the address).
    #[arg(long, requires = "repl_port")]
    repl_bind: Option<IpAddr>,
    /// CA certificate (PEM) that signed etcd's server certificate: failover leases are
    /// then taken over TLS (`--etcd https://...` on `mirror create`).
    #[arg(long)]
    etcd_ca: Option<PathBuf>,
    /// This daemon's client certificate (PEM) for etcd's --client-cert-auth.
    #[arg(long, requires_all = ["etcd_key", "etcd_ca"])]
    etcd_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,
    /// The etcd user to authenticate as (etcd with `auth enable`); the user needs
    /// read-write access to the keys under /strata/failover/.
    #[arg(long, requires = "etcd_password_file")]
    etcd_user: Option<String>,
    /// A file holding that user's password (its first line; the file must not be readable
    /// by group or others: chmod 600).
    #[arg(long, requires = "etcd_user")]
    etcd_password_file: Option<PathBuf>,
}

/// The options the daemon runs with, or a config error (exit 78).
pub fn options(a: ServeArgs, socket: Option<PathBuf>) -> Result<ServeOptions, String> {
    let cfg: Config = match &a.config {
        Some(path) => config::load(path)?,
        None => {
            let default = PathBuf::from(config::DEFAULT_PATH);
            if default.exists() {
                config::load(&default)?
            } else {
                Config::default()
            }
        }
    };
    let mut o = ServeOptions::new(a.data_dir.unwrap_or(cfg.data_dir));
    let mut api = ApiListen::new(socket.unwrap_or(cfg.api.socket));
    let group = a.socket_group.unwrap_or(cfg.api.socket_group);
    api.socket_group = (!group.is_empty()).then_some(group);
    api.tcp = match a.tcp {
        Some(t) => Some(t),
        None => match &cfg.api.tcp {
            None => None,
            Some(t) => Some(t.trim().parse().map_err(|e| format!("api.tcp {t:?}: {e}"))?),
        },
    };
    api.tls = match (a.tls_cert.or(cfg.api.tls_cert), a.tls_key.or(cfg.api.tls_key)) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => return Err("TLS needs both a certificate and a key".into()),
    };
    o.api = api;
    o.default_pool_bytes = match a.default_pool_size {
        Some(s) => parse_size(&s).map_err(|e| format!("--default-pool-size: {e}"))?,
        None => cfg.pools.default_pool_size.bytes(),
    };
    o.txg_interval = Duration::from_secs(a.txg_interval.unwrap_or(cfg.pools.txg_interval_seconds).max(1));
    o.writeback_cache = !a.no_writeback_cache && cfg.fuse.writeback_cache;
    o.fuse_threads = a.fuse_threads.unwrap_or(cfg.fuse.threads) as usize;
    if let Some(c) = a.cache_size {
        o.cache_bytes = parse_size(&c).map_err(|e| format!("--cache-size: {e}"))?;
    } else if let Some(c) = cfg.pools.cache_size {
        o.cache_bytes = c.bytes();
    }
    let dirty = match a.dirty_limit {
        Some(d) => Some(parse_size(&d).map_err(|e| format!("--dirty-limit: {e}"))?),
        None => cfg.pools.dirty_limit.map(|d| d.bytes()),
    };
    if let Some(bytes) = dirty {
        if bytes < 16 << 20 {
            return Err(format!("dirty limit of {bytes} bytes: at least 16M (e.g. 256M, 2G)"));
        }
        o.dirty_limit_bytes = bytes;
    }
    o.discard_missing_log = a.discard_missing_log;
    o.dedup_table_max = a.dedup_table_max.unwrap_or(cfg.pools.dedup_table_max) as usize;
    let nfs_cfg = cfg.nfs.clone();
    let port = a.nfs_port.or(nfs_cfg.as_ref().map(|n| n.port));
    o.nfs = port.map(|port| NfsOptions {
        bind: a.nfs_bind.or(nfs_cfg.as_ref().map(|n| n.bind)).unwrap_or(IpAddr::from([127, 0, 0, 1])),
        port,
        portmap_port: a.nfs_portmap_port.or(nfs_cfg.as_ref().and_then(|n| n.portmap_port)),
    });
    if a.nfs_portmap_port.is_some() && o.nfs.is_none() {
        return Err("--nfs-portmap-port needs --nfs-port".into());
    }
    if let Some(r) = &a.scrub_rate {
        let bytes = crate::units::parse_size(r).map_err(|e| format!("--scrub-rate: {e}"))?;
        if bytes < 1 << 20 {
            return Err(format!("--scrub-rate of {bytes} bytes/s: at least 1M"));
        }
        o.scrub_bytes_per_second = Some(bytes);
    }
    if let Some(ms) = a.slow_commit_ms {
        o.slow_commit = std::time::Duration::from_millis(ms);
    }
    let loopback = IpAddr::from([127, 0, 0, 1]);
    if a.nbd_bind.is_some() && a.nbd_port.is_none() {
        return Err("--nbd-bind needs --nbd-port".into());
    }
    if a.iscsi_bind.is_some() && a.iscsi_port.is_none() {
        return Err("--iscsi-bind needs --iscsi-port".into());
    }
    let tls = match (a.nbd_tls_cert, a.nbd_tls_key) {
        (Some(cert_pem), Some(key_pem)) => {
            if a.nbd_port.is_none() {
                return Err("--nbd-tls-cert needs --nbd-port".into());
            }
            Some(strata_daemon::NbdTlsConfig { cert_pem, key_pem, client_ca_pem: a.nbd_tls_client_ca })
        }
        _ => None,
    };
    let discovery_chap = match (a.iscsi_discovery_user, a.iscsi_discovery_secret) {
        (Some(u), Some(s)) => {
            if !(12..=255).contains(&s.len()) {
                return Err("--iscsi-discovery-secret: 12 to 255 characters (RFC 7143 asks for 96 bits)".into());
            }
            Some((u, s))
        }
        _ => None,
    };
    if a.nbd_poll_us.is_some() && a.nbd_port.is_none() {
        return Err("--nbd-poll-us needs --nbd-port".into());
    }
    let poll = match a.nbd_poll_us {
        Some(us) if us > 10_000 => {
            return Err(format!("--nbd-poll-us {us}: at most 10000 (10 ms); 50 is the default, 0 never polls"))
        }
        Some(us) => std::time::Duration::from_micros(us),
        None => strata_daemon::NBD_DEFAULT_POLL,
    };
    o.nbd = a.nbd_port.map(|port| BlockListen {
        bind: a.nbd_bind.unwrap_or(loopback),
        port,
        tls,
        discovery_chap: None,
        poll,
    });
    o.repl = a.repl_port.map(|port| SocketAddr::new(a.repl_bind.unwrap_or(loopback), port));
    let read = |flag: &str, p: &PathBuf| std::fs::read(p).map_err(|e| format!("--{flag} {}: {e}", p.display()));
    if let Some(ca) = &a.etcd_ca {
        let client = match (&a.etcd_cert, &a.etcd_key) {
            (Some(c), Some(k)) => Some((read("etcd-cert", c)?, read("etcd-key", k)?)),
            _ => None,
        };
        o.etcd_tls = Some(strata_daemon::EtcdTls { ca_pem: read("etcd-ca", ca)?, client });
    }
    if let (Some(name), Some(file)) = (&a.etcd_user, &a.etcd_password_file) {
        o.etcd_user = Some(etcd_user(name, file)?);
    }
    o.iscsi = a.iscsi_port.map(|port| BlockListen {
        bind: a.iscsi_bind.unwrap_or(loopback),
        port,
        tls: None,
        discovery_chap,
        poll: std::time::Duration::ZERO,
    });
    Ok(o)
}

/// `--etcd-user NAME --etcd-password-file FILE`: the password is the file's first line; a
/// file others may read is refused (a password on the command line would be in `ps`).
fn etcd_user(name: &str, file: &std::path::Path) -> Result<strata_daemon::EtcdUser, String> {
    use std::os::unix::fs::PermissionsExt;
    if name.is_empty() || name.chars().any(|c| c.is_control() || c == ':') {
        return Err(format!("--etcd-user {name:?}: a name without ':' or control characters"));
    }
    let flag = format!("--etcd-password-file {}", file.display());
    let meta = std::fs::metadata(file).map_err(|e| format!("{flag}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{flag}: not a regular file"));
    }
    let mode = meta.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(format!(
            "{flag}: readable by group or others (mode {:o}); chmod 600 {}",
            mode & 0o777,
            file.display()
        ));
    }
    let text = std::fs::read_to_string(file).map_err(|e| format!("{flag}: {e}"))?;
    let password = text.lines().next().unwrap_or("").to_string();
    if password.is_empty() {
        return Err(format!("{flag}: the first line is empty; write the password of etcd user {name} there"));
    }
    Ok(strata_daemon::EtcdUser { name: name.to_string(), password })
}
