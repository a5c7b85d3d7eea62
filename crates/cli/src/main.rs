//! `strata`: the daemon (`strata serve`) and the command line, a client of the daemon's
//! control API (docs/api.md) over its Unix socket (or TCP with a token). `strata check
//! --device` also works offline, on a pool no daemon serves.
//!
//! Exit status: 0 success; 1 failure (I/O, corruption, no space, a daemon fault; `check`
//! found problems); 2 usage (bad arguments or request); 3 not found; 4 conflict (exists,
//! in use, has snapshots, read-only); 5 access refused; 6 daemon unreachable; 78 bad
//! daemon configuration. With --json, an error is printed as `{"error": {"kind", "message",
//! "hint"}}` on standard output.

mod access;
mod client;
mod export;
mod iostat;
mod job;
mod mirror;
mod offline;
mod peer;
mod pool;
mod serve;
mod snapshot;
mod units;
mod volume;

use clap::{Parser, Subcommand};
use client::{Client, Failure};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "strata", version, about = "Copy-on-write storage for databases")]
struct Cli {
    /// Machine-readable JSON output (errors too).
    #[arg(long, global = true)]
    json: bool,
    /// The daemon's Unix socket [default: /run/strata/strata.sock].
    #[arg(long, global = true, env = "STRATA_SOCKET")]
    socket: Option<PathBuf>,
    /// Talk to the daemon over TCP instead: HOST:PORT, or https://HOST:PORT for TLS.
    #[arg(long, global = true, env = "STRATA_API")]
    api: Option<String>,
    /// Bearer token for TCP (`strata token create`).
    #[arg(long, global = true, env = "STRATA_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// CA certificate (PEM) that signed the daemon's TLS certificate.
    #[arg(long, global = true, env = "STRATA_CA_CERT")]
    ca_cert: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon: own the pools, serve mounts, exports and the control API.
    Serve(Box<serve::ServeArgs>),
    /// Exports: volumes over NFS, LUNs over NBD and iSCSI.
    #[command(subcommand)]
    Export(export::ExportCmd),
    /// Mirrors: replicate volumes (or a group of them, as one unit) to another pool.
    #[command(subcommand)]
    Mirror(mirror::MirrorCmd),
    /// Long operations (check, scrub, clone split, mirror transfer, rebuild): list, show,
    /// cancel, wait.
    #[command(subcommand)]
    Job(job::JobCmd),
    /// Peers: other Strata daemons paired with this one (invite, add, list, show, delete).
    #[command(subcommand)]
    Peer(peer::PeerCmd),
    /// Create, list, inspect, destroy, export and import pools.
    #[command(subcommand)]
    Pool(pool::PoolCmd),
    /// Create, list, show, change and delete volumes.
    #[command(subcommand)]
    Volume(volume::VolumeCmd),
    /// Take, list, show and delete snapshots (POOL/VOLUME@NAME).
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCmd),
    /// Restore a volume to a snapshot (POOL/VOLUME@NAME), keeping every snapshot. A mounted
    /// volume is unmounted and mounted again; stop the database using it first.
    Restore {
        snapshot: String,
        /// Restore only this file (its path inside the volume), sharing the snapshot's blocks
        /// where possible; the rest of the volume is untouched.
        #[arg(long)]
        file: Option<String>,
        /// More volumes of a group snapshot to restore with it, in the same txg.
        #[arg(long, value_delimiter = ',')]
        group: Vec<String>,
    },
    /// Writable clones of snapshots.
    #[command(subcommand)]
    Clone(snapshot::CloneCmd),
    /// Mount a volume (POOL/VOLUME) at an empty directory; with no arguments, list mounts.
    Mount { volume: Option<String>, dir: Option<PathBuf> },
    /// Unmount a volume.
    Unmount { dir: PathBuf },
    /// Verify every invariant of a pool: a pool the daemon serves, or (--device) offline.
    Check {
        /// Pool name (served by the daemon).
        pool: Option<String>,
        /// A pool image or device no daemon is using; repeated: the members of a device
        /// set (mirror, parity2), every copy verified.
        #[arg(long, conflicts_with = "pool")]
        device: Vec<PathBuf>,
        /// The separate log device of the pool given with --device, if it has one.
        #[arg(long, requires = "device")]
        log_device: Option<PathBuf>,
        /// Verify metadata only (skip reading data blocks).
        #[arg(long)]
        no_data: bool,
        /// Print the check's job and return (`strata job wait ID` follows it).
        #[arg(long, conflicts_with = "device")]
        no_wait: bool,
    },
    /// API tokens for TCP callers (admin only).
    #[command(subcommand)]
    Token(access::TokenCmd),
    /// Every change asked of the daemon: when, who, what, on what, and the result.
    History {
        /// Only what concerns this pool.
        pool: Option<String>,
        /// At most this many of the newest entries.
        #[arg(long)]
        limit: Option<u32>,
    },
    /// I/O per pool and volume, in `zpool iostat`'s shape: operations, bandwidth and p99
    /// latency per second over INTERVAL seconds (the first report: since the daemon started),
    /// COUNT reports (forever without).
    Iostat {
        /// POOL or POOL/VOLUME (all pools without).
        target: Option<String>,
        interval: Option<f64>,
        count: Option<u64>,
        /// One row per protocol under each volume.
        #[arg(short, long)]
        verbose: bool,
    },
    /// What happened to the storage: mirror transfers and failures, breaks, scrubs, device
    /// state changes, refused requests (oldest first).
    Events {
        /// At most this many of the newest.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Keep printing new events as they happen (Ctrl-C to stop).
        #[arg(long)]
        follow: bool,
    },
    /// Who the daemon takes you for, and your role.
    Whoami,
    /// Print the control API's OpenAPI document (as docs/openapi.json holds it).
    #[command(hide = true)]
    Openapi,
}

/// How results are printed: JSON, or the human form.
pub struct Out {
    pub json: bool,
}

impl Out {
    pub fn show<T: Serialize>(&self, v: &T, human: impl FnOnce(&T)) {
        if self.json {
            println!("{}", serde_json::to_string(v).expect("API values serialise"));
        } else {
            human(v);
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Failure> {
    let out = Out { json: cli.json };
    if let Command::Serve(args) = cli.command {
        return serve_daemon(*args, cli.socket);
    }
    if let Command::Openapi = cli.command {
        print!("{}", strata_daemon::openapi_document());
        return Ok(ExitCode::SUCCESS);
    }
    let socket = cli.socket.clone().unwrap_or_else(|| PathBuf::from(strata_daemon::DEFAULT_SOCKET));
    let c = Client::new(socket, cli.api.clone(), cli.token.clone(), cli.ca_cert.clone())?;
    match cli.command {
        Command::Serve(_) | Command::Openapi => unreachable!("handled above"),
        Command::Pool(cmd) => pool::run(&c, &out, cmd)?,
        Command::Volume(cmd) => volume::run(&c, &out, cmd)?,
        Command::Snapshot(cmd) => snapshot::run_snapshot(cmd, &c, &out)?,
        Command::Restore { snapshot, file, group } => {
            snapshot::run_restore(&snapshot, file.as_deref(), &group, &c, &out)?
        }
        Command::Clone(cmd) => snapshot::run_clone(cmd, &c, &out)?,
        Command::Export(cmd) => export::run(&c, &out, cmd)?,
        Command::Mirror(cmd) => mirror::run(&c, &out, cmd)?,
        Command::Peer(cmd) => peer::run(&c, &out, cmd)?,
        Command::Job(cmd) => job::run(&c, &out, cmd)?,
        Command::Token(cmd) => access::run_token(&c, &out, cmd)?,
        Command::History { pool, limit } => access::run_history(&c, &out, pool, limit)?,
        Command::Whoami => access::run_whoami(&c, &out)?,
        Command::Events { limit, follow } => access::run_events(&c, &out, limit, follow)?,
        Command::Iostat { target, interval, count, verbose } => {
            iostat::run(&c, &out, iostat::Args { target, interval, count, verbose })?
        }
        Command::Mount { volume: None, dir: None } => {
            let v: Vec<strata_api::MountInfo> = c.get("/v1/mounts")?;
            out.show(&v, |v| {
                println!("{:<28} PATH", "VOLUME");
                for m in v {
                    let note = if m.active { "" } else { "  (waiting for its pool)" };
                    println!("{:<28} {}{note}", m.volume, m.path.display());
                }
            });
        }
        Command::Mount { volume: Some(volume), dir: Some(dir) } => {
            volume::split(&volume)?;
            let dir = std::path::absolute(&dir).map_err(|e| Failure::usage(format!("{}: {e}", dir.display())))?;
            let req = strata_api::MountRequest { volume: volume.clone(), path: dir.clone() };
            let m: strata_api::MountInfo = c.send("POST", "/v1/mounts", &req)?;
            out.show(&m, |_| println!("mounted {volume} at {}", dir.display()));
        }
        Command::Mount { .. } => {
            return Err(Failure::usage("usage: strata mount POOL/VOLUME DIR (or no arguments to list)"))
        }
        Command::Unmount { dir } => {
            let dir = std::path::absolute(&dir).map_err(|e| Failure::usage(format!("{}: {e}", dir.display())))?;
            let d: strata_api::Done =
                c.send("DELETE", "/v1/mounts", &strata_api::UnmountRequest { path: dir.clone() })?;
            out.show(&d, |_| println!("unmounted {}", dir.display()));
        }
        Command::Check { pool: None, device, log_device, no_data, .. } if !device.is_empty() => {
            return offline::check(&device, log_device.as_deref(), !no_data, cli.json).map_err(Failure::other)
        }
        Command::Check { pool: Some(pool), no_data, no_wait, .. } => {
            let req = strata_api::CheckRequest { verify_data: Some(!no_data) };
            let j: strata_api::JobInfo = c.send("POST", &format!("/v1/pools/{}/check", client::seg(&pool)), &req)?;
            if no_wait {
                job::started(&out, &j);
                return Ok(ExitCode::SUCCESS);
            }
            let v: strata_api::CheckReport = job::result(&job::follow(&c, j)?)?;
            out.show(&v, |v| offline::print_check(&pool, v));
            return Ok(if v.clean { ExitCode::SUCCESS } else { ExitCode::from(strata_api::EXIT_FAILURE) });
        }
        Command::Check { .. } => {
            return Err(Failure::usage("usage: strata check POOL, or strata check --device PATH (offline)"))
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn serve_daemon(args: serve::ServeArgs, socket: Option<PathBuf>) -> Result<ExitCode, Failure> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // fuser logs every reply the kernel no longer wants (the request was
                // interrupted, e.g. by the signals PostgreSQL sends its backends) as an
                // error: tens of thousands per benchmark, and harmless. RUST_LOG brings
                // them back.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,fuser::reply=off")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let opts = match serve::options(args, socket) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("strata: configuration: {e}");
            return Ok(ExitCode::from(serve::EXIT_CONFIG));
        }
    };
    strata_daemon::serve(opts).map_err(Failure::other)?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve(_)) {
        // A client behaves like other Unix tools when its output pipe closes (`| head`):
        // it ends quietly. The daemon keeps SIGPIPE ignored (sockets report EPIPE instead).
        // SAFETY: restoring the default disposition of a signal at start-up, single-threaded.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let json = cli.json;
    match run(cli) {
        Ok(code) => code,
        Err(f) => {
            if json {
                let body = serde_json::json!({"error": {
                    "kind": f.kind, "message": f.message, "hint": f.hint, "exit_code": f.exit}});
                println!("{body}");
            } else {
                match &f.hint {
                    Some(h) => eprintln!("strata: {} ({h})", f.message),
                    None => eprintln!("strata: {}", f.message),
                }
            }
            ExitCode::from(f.exit)
        }
    }
}
