//! `strata`: the daemon (`strata serve`) and the command line, a client of the daemon's
//! control API (docs/api.md). `strata check --device` also works offline, on a pool no
//! daemon serves.
//!
//! Exit status: 0 success; 1 the checker found problems; 2 bad usage or an error, with a
//! message that says what to do next.

mod client;
mod export;
mod offline;
mod snapshot;
mod units;

use clap::{Parser, Subcommand};
use client::Client;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;
use units::{human, parse_size};

#[derive(Parser)]
#[command(name = "strata", version, about = "Copy-on-write storage for databases")]
struct Cli {
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    json: bool,
    /// Address of the daemon's control API.
    #[arg(long, global = true, env = "STRATA_API", default_value = "127.0.0.1:7420")]
    api: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon: own the pools, serve mounts and the control API.
    Serve {
        /// Where the daemon keeps its state and the default pool's image.
        #[arg(long, env = "STRATA_DATA_DIR", default_value = "/var/lib/strata")]
        data_dir: PathBuf,
        /// Size of the embedded default pool, made when no configuration exists.
        #[arg(long, default_value = "16G")]
        default_pool_size: String,
        /// Seconds between background commits.
        #[arg(long, default_value_t = 5)]
        txg_interval: u64,
        /// Disable the FUSE writeback cache (every write goes to the daemon as it comes).
        #[arg(long)]
        no_writeback_cache: bool,
        /// Request-handling threads of each FUSE mount (1 to 64): a request that waits
        /// (an fsync for its log write) holds one, so many concurrent clients want more.
        #[arg(long, default_value_t = strata_daemon::DEFAULT_FUSE_THREADS,
              value_parser = clap::value_parser!(u16).range(1..=64))]
        fuse_threads: u16,
        /// Serve NFS exports (NFSv3 and MOUNT) on this TCP port (see docs/nfs.md).
        #[arg(long)]
        nfs_port: Option<u16>,
        /// Address of the NFS listener (127.0.0.1: this host only; 0.0.0.0 for the network).
        #[arg(long, default_value = "127.0.0.1")]
        nfs_bind: std::net::IpAddr,
        /// Also answer the portmapper on this port (111 lets clients find NFS without ports).
        #[arg(long, requires = "nfs_port")]
        nfs_portmap_port: Option<u16>,
        /// Data cache of each pool (e.g. 4G, 512M, 0 for none); default a quarter of memory.
        #[arg(long)]
        cache_size: Option<String>,
        /// Dirty data of each pool before writers wait for a commit (at least 16M); default
        /// a tenth of memory, 256M to 4G. Commits start at half of it.
        #[arg(long)]
        dirty_limit: Option<String>,
        /// Entries each pool's dedup table may hold (about 100 bytes of memory each); when
        /// full, new unique records of dedup volumes are stored without an entry.
        #[arg(long, default_value_t = strata_engine::dedup::DEDUP_TABLE_MAX_DEFAULT)]
        dedup_table_max: usize,
        /// Open POOL even though its log device is missing or damaged, at its last commit:
        /// the sync writes acknowledged since are LOST. The pool then logs in its own
        /// region. Repeat for several pools.
        #[arg(long, value_name = "POOL")]
        discard_missing_log: Vec<String>,
    },
    /// NFS exports of volumes.
    #[command(subcommand)]
    Export(export::ExportCmd),
    /// Create, list and inspect pools.
    #[command(subcommand)]
    Pool(PoolCmd),
    /// Create, list, show, change and delete volumes.
    #[command(subcommand)]
    Volume(VolumeCmd),
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
        /// A pool image or device no daemon is using.
        #[arg(long, conflicts_with = "pool")]
        device: Option<PathBuf>,
        /// The separate log device of the pool given with --device, if it has one.
        #[arg(long, requires = "device")]
        log_device: Option<PathBuf>,
        /// Verify metadata only (skip reading data blocks).
        #[arg(long)]
        no_data: bool,
    },
}

#[derive(Subcommand)]
enum PoolCmd {
    /// Make a new pool on an image file (created if missing) or a block device.
    Create {
        name: String,
        /// Image file or block device; must not hold a pool.
        #[arg(long)]
        device: PathBuf,
        /// Size of a new image file (sparse), e.g. 100G.
        #[arg(long)]
        size: Option<String>,
        /// Checksum of new blocks: blake3 or crc32c.
        #[arg(long, default_value = "blake3")]
        checksum: String,
        /// Keep the intent log (what fsync writes) on this separate, fast device or image
        /// file (existing, at least 16 MiB) instead of in the pool (docs/intent-log.md).
        #[arg(long)]
        log_device: Option<PathBuf>,
    },
    /// List pools.
    List,
    /// Space (logical vs physical, reservations, capacity warnings), txg and health of a pool.
    Status { name: String },
    /// Change a pool's settings.
    Set {
        name: String,
        /// Warn in `pool status` when available space falls below this percentage (1-99,
        /// default 10).
        #[arg(long)]
        capacity_alert: Option<u8>,
        /// Move the intent log to this separate device (image file or block device of at
        /// least 16 MiB) from now on; the pool commits first.
        #[arg(long, conflicts_with = "remove_log_device")]
        log_device: Option<PathBuf>,
        /// Stop using the separate log device: the intent log goes back into the pool.
        #[arg(long)]
        remove_log_device: bool,
    },
}

#[derive(Subcommand)]
enum VolumeCmd {
    /// Create a volume POOL/VOLUME.
    Create {
        volume: String,
        /// Size limit (thin: not reserved), e.g. 100G.
        #[arg(long)]
        size: Option<String>,
        /// Record size, 4K to 1M, a power of two (16K suits PostgreSQL and InnoDB).
        #[arg(long, default_value = "16K")]
        record_size: String,
        /// Sync policy: standard (honour fsync), always (every write is synchronous),
        /// disabled (ignore fsync: UNSAFE, for scratch data).
        #[arg(long, default_value = "standard")]
        sync: String,
        /// Compression of data records: off, lz4, zstd or zstd-LEVEL (1-19; zstd = zstd-3).
        #[arg(long, default_value = "off")]
        compression: String,
        /// Space the pool keeps for this volume (thick provisioning), e.g. 10G. Refused if
        /// the pool cannot hold it.
        #[arg(long)]
        reserve: Option<String>,
        /// Deduplicate data records: on or off (identical records stored once; needs a
        /// pool with BLAKE3 checksums, the default).
        #[arg(long, default_value = "off")]
        dedup: String,
    },
    /// List volumes (of one pool, or all).
    List { pool: Option<String> },
    /// Show one volume.
    Show { volume: String },
    /// Change a volume's settings.
    Set {
        volume: String,
        /// New size limit (0 = none).
        #[arg(long)]
        size: Option<String>,
        /// New sync policy: standard, always or disabled (UNSAFE).
        #[arg(long)]
        sync: Option<String>,
        /// New compression for data written from now on: off, lz4, zstd, zstd-LEVEL.
        #[arg(long)]
        compression: Option<String>,
        /// New reservation (0 = thin).
        #[arg(long)]
        reserve: Option<String>,
        /// Deduplicate data written from now on: on or off.
        #[arg(long)]
        dedup: Option<String>,
    },
    /// Delete a volume and everything in it (it must not be mounted).
    Delete { volume: String },
}

/// `on` / `off` for a switch option.
fn parse_on_off(option: &str, v: &str) -> Result<bool, String> {
    match v {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{option} {v:?}: use on or off")),
    }
}

fn split(spec: &str) -> Result<(&str, &str), String> {
    match spec.split_once('/') {
        Some((p, v)) if !p.is_empty() && !v.is_empty() && !v.contains('/') => Ok((p, v)),
        _ => Err(format!("{spec:?} is not POOL/VOLUME (e.g. default/pgdata)")),
    }
}

fn ratio_text(v: &Value) -> String {
    v["compress_ratio"].as_f64().map(|r| format!("{r:.2}x")).unwrap_or_else(|| "-".into())
}

fn print_volumes(rows: &[Value]) {
    println!(
        "{:<28} {:>8} {:>10} {:>10} {:>10} {:>7} {:>8} {:>9}  {}",
        "VOLUME", "RECORD", "USED", "LOGICAL", "LIMIT", "RATIO", "COMPRESS", "SYNC", "MOUNTED AT"
    );
    for v in rows {
        let limit = v["size_bytes"].as_u64().filter(|&s| s > 0).map(human).unwrap_or_else(|| "-".into());
        println!(
            "{:<28} {:>8} {:>10} {:>10} {:>10} {:>7} {:>8} {:>9}  {}",
            format!("{}/{}", v["pool"].as_str().unwrap_or("?"), v["name"].as_str().unwrap_or("?")),
            human(v["record_size"].as_u64().unwrap_or(0)),
            human(v["used_bytes"].as_u64().unwrap_or(0)),
            v["logical_bytes"].as_u64().map(human).unwrap_or_else(|| "-".into()),
            limit,
            ratio_text(v),
            v["compression"].as_str().unwrap_or("?"),
            v["sync"].as_str().unwrap_or("?"),
            v["mounted_at"].as_str().unwrap_or("-")
        );
    }
}

/// `strata volume show`: one volume, one field a line.
fn print_volume(v: &Value) {
    let opt = |k: &str| v[k].as_u64().map(human).unwrap_or_else(|| "- (not tracked: written by an older build)".into());
    println!("volume       {}/{}", v["pool"].as_str().unwrap_or("?"), v["name"].as_str().unwrap_or("?"));
    println!("record size  {}", human(v["record_size"].as_u64().unwrap_or(0)));
    println!("compression  {}", v["compression"].as_str().unwrap_or("?"));
    println!("dedup        {}", if v["dedup"].as_bool().unwrap_or(false) { "on" } else { "off" });
    println!("sync         {}", v["sync"].as_str().unwrap_or("?"));
    println!(
        "used         {} (physical: units allocated, data and metadata)",
        human(v["used_bytes"].as_u64().unwrap_or(0))
    );
    println!("logical      {}", opt("logical_bytes"));
    println!("saved        {}", opt("saved_bytes"));
    println!("ratio        {}", ratio_text(v));
    let limit = v["size_bytes"].as_u64().filter(|&s| s > 0).map(human).unwrap_or_else(|| "none (thin)".into());
    println!("size limit   {limit}");
    let reserve = v["reservation_bytes"].as_u64().filter(|&s| s > 0).map(human).unwrap_or_else(|| "none (thin)".into());
    println!("reservation  {reserve}");
    println!("mounted at   {}", v["mounted_at"].as_str().unwrap_or("-"));
}

fn print_pool(p: &Value) {
    let size = p["size_bytes"].as_u64().unwrap_or(0);
    let alloc = p["allocated_bytes"].as_u64().unwrap_or(0);
    println!("pool      {}", p["name"].as_str().unwrap_or("?"));
    println!("device    {}", p["device"].as_str().unwrap_or("?"));
    println!("log       {}", p["log_device"].as_str().unwrap_or("in the pool"));
    println!("txg       {}", p["txg"]);
    println!("size      {}", human(size));
    println!("allocated {} ({:.1}%)", human(alloc), if size > 0 { 100.0 * alloc as f64 / size as f64 } else { 0.0 });
    println!("free      {}", human(p["free_bytes"].as_u64().unwrap_or(0)));
    println!("reserved  {} (unused parts of volume reservations)", human(p["reserved_bytes"].as_u64().unwrap_or(0)));
    println!(
        "available {} (alert below {}%)",
        human(p["available_bytes"].as_u64().unwrap_or(0)),
        p["capacity_alert_percent"]
    );
    let saved = p["saved_bytes"].as_u64().unwrap_or(0);
    println!(
        "logical   {} (saved {} by compression and trimming, ratio {})",
        human(p["logical_bytes"].as_u64().unwrap_or(0)),
        human(saved),
        ratio_text(p)
    );
    if p["packs"].as_u64().unwrap_or(0) > 0 {
        println!(
            "packs     {} (small compressed records sharing units; {} records packed since open)",
            p["packs"],
            p["packed_records_written"].as_u64().unwrap_or(0)
        );
    }
    if p["untracked_volumes"].as_u64().unwrap_or(0) > 0 {
        println!("note      {} volume(s) written by an older build: savings not counted", p["untracked_volumes"]);
    }
    println!("volumes   {}", p["volumes"]);
    let c = &p["commits"];
    let ms = |v: &Value| v.as_u64().unwrap_or(0) as f64 / 1000.0;
    println!(
        "commits   {} since open; pool lock held {:.1} ms at most, {:.1} ms the last one; {} skipped early passes",
        c["count"].as_u64().unwrap_or(0),
        ms(&c["locked_us_max"]),
        ms(&c["locked_us_last"]),
        c["early_passes_skipped"].as_u64().unwrap_or(0)
    );
    println!(
        "intent    {} blocks, {} logged ({} more written in place by reference); {} syncs found the log full; {} held for unsynced operations",
        p["log_blocks_written"].as_u64().unwrap_or(0),
        human(p["log_bytes_written"].as_u64().unwrap_or(0)),
        human(p["log_bytes_by_reference"].as_u64().unwrap_or(0)),
        p["log_full_commits"].as_u64().unwrap_or(0),
        human(p["log_memory_bytes"].as_u64().unwrap_or(0))
    );
    println!(
        "cache     {} of {} data, {} hits",
        human(p["data_cache_bytes"].as_u64().unwrap_or(0)),
        human(p["data_cache_capacity_bytes"].as_u64().unwrap_or(0)),
        p["data_cache_hits"].as_u64().unwrap_or(0)
    );
    for w in p["warnings"].as_array().into_iter().flatten() {
        println!("WARNING   {}", w.as_str().unwrap_or(""));
    }
    if let Some(l) = p["latched"].as_str() {
        println!("STATE     READ-ONLY: {l}");
    }
    if p["corruptions_detected"].as_u64().unwrap_or(0) > 0 {
        println!("errors    {} corrupt blocks detected since open (run `strata check`)", p["corruptions_detected"]);
    }
    for n in p["open_notes"].as_array().into_iter().flatten() {
        println!("note      {}", n.as_str().unwrap_or(""));
    }
}

fn run(cli: Cli) -> Result<ExitCode, String> {
    let c = Client { addr: cli.api.clone() };
    let out = |v: &Value, human_fn: &dyn Fn(&Value)| {
        if cli.json {
            println!("{v}");
        } else {
            human_fn(v);
        }
    };
    match cli.command {
        Command::Serve {
            data_dir,
            default_pool_size,
            txg_interval,
            no_writeback_cache,
            fuse_threads,
            nfs_port,
            nfs_bind,
            nfs_portmap_port,
            cache_size,
            dirty_limit,
            dedup_table_max,
            discard_missing_log,
        } => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        // fuser logs every reply the kernel no longer wants (the request was
                        // interrupted, e.g. by the signals PostgreSQL sends its backends) as an
                        // error: tens of thousands per benchmark, and harmless. RUST_LOG
                        // brings them back.
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,fuser::reply=off")),
                )
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .init();
            let mut opts = strata_daemon::ServeOptions::new(data_dir);
            opts.listen = cli.api.clone();
            opts.default_pool_bytes = parse_size(&default_pool_size)?;
            opts.txg_interval = std::time::Duration::from_secs(txg_interval.max(1));
            opts.writeback_cache = !no_writeback_cache;
            opts.fuse_threads = fuse_threads as usize;
            if let Some(c) = cache_size {
                opts.cache_bytes = parse_size(&c).map_err(|e| format!("--cache-size: {e}"))?;
            }
            if let Some(d) = dirty_limit {
                let bytes = parse_size(&d).map_err(|e| format!("--dirty-limit: {e}"))?;
                if bytes < 16 << 20 {
                    return Err(format!("--dirty-limit {d}: at least 16M (e.g. 256M, 2G)").into());
                }
                opts.dirty_limit_bytes = bytes;
            }
            opts.discard_missing_log = discard_missing_log;
            opts.dedup_table_max = dedup_table_max;
            opts.nfs =
                nfs_port.map(|port| strata_daemon::NfsOptions { bind: nfs_bind, port, portmap_port: nfs_portmap_port });
            strata_daemon::serve(opts)?;
        }
        Command::Pool(PoolCmd::Create { name, device, size, checksum, log_device }) => {
            let size_bytes = size.as_deref().map(parse_size).transpose()?;
            let device = std::path::absolute(&device).map_err(|e| format!("{}: {e}", device.display()))?;
            let log_device = log_device
                .map(|l| std::path::absolute(&l).map_err(|e| format!("--log-device {}: {e}", l.display())))
                .transpose()?;
            let mut body = json!({"name": name, "device": device, "size_bytes": size_bytes, "checksum": checksum});
            if let Some(l) = &log_device {
                body["log_device"] = json!(l);
            }
            let v = c.call("POST", "/v1/pools", Some(&body))?;
            out(&v, &|v| {
                println!(
                    "created pool {} on {} ({} usable)",
                    v["name"].as_str().unwrap_or("?"),
                    v["device"].as_str().unwrap_or("?"),
                    human(v["size_bytes"].as_u64().unwrap_or(0))
                );
                if let Some(l) = v["log_device"].as_str() {
                    println!("intent log on {l}");
                }
            });
        }
        Command::Pool(PoolCmd::List) => {
            let v = c.call("GET", "/v1/pools", None)?;
            out(&v, &|v| {
                println!("{:<16} {:>10} {:>10} {:>10} {:>8}  {}", "POOL", "SIZE", "ALLOC", "FREE", "VOLUMES", "DEVICE");
                for p in v.as_array().into_iter().flatten() {
                    println!(
                        "{:<16} {:>10} {:>10} {:>10} {:>8}  {}",
                        p["name"].as_str().unwrap_or("?"),
                        human(p["size_bytes"].as_u64().unwrap_or(0)),
                        human(p["allocated_bytes"].as_u64().unwrap_or(0)),
                        human(p["free_bytes"].as_u64().unwrap_or(0)),
                        p["volumes"],
                        p["device"].as_str().unwrap_or("?")
                    );
                }
            });
        }
        Command::Pool(PoolCmd::Status { name }) => {
            let v = c.call("GET", &format!("/v1/pools/{name}"), None)?;
            out(&v, &print_pool);
        }
        Command::Pool(PoolCmd::Set { name, capacity_alert, log_device, remove_log_device }) => {
            let mut body = json!({});
            if let Some(percent) = capacity_alert {
                body["capacity_alert_percent"] = json!(percent);
            }
            if let Some(l) = log_device {
                let l = std::path::absolute(&l).map_err(|e| format!("log device {}: {e}", l.display()))?;
                body["log_device"] = json!(l);
            }
            if remove_log_device {
                body["remove_log_device"] = json!(true);
            }
            if body.as_object().is_some_and(|o| o.is_empty()) {
                return Err(
                    "nothing to set: give --capacity-alert PERCENT, --log-device PATH or --remove-log-device".into()
                );
            }
            let v = c.call("PATCH", &format!("/v1/pools/{name}"), Some(&body))?;
            out(&v, &print_pool);
        }
        Command::Volume(VolumeCmd::Create { volume, size, record_size, sync, compression, reserve, dedup }) => {
            let dedup = parse_on_off("--dedup", &dedup)?;
            let (p, name) = split(&volume)?;
            let rs = parse_size(&record_size)?;
            let size_bytes = size.as_deref().map(parse_size).transpose()?;
            let reservation_bytes = reserve.as_deref().map(parse_size).transpose()?;
            let v = c.call(
                "POST",
                &format!("/v1/pools/{p}/volumes"),
                Some(&json!({"name": name, "record_size": rs, "size_bytes": size_bytes, "sync": sync,
                    "compression": compression, "reservation_bytes": reservation_bytes, "dedup": dedup})),
            )?;
            out(&v, &|v| {
                println!(
                    "created volume {volume} (record size {}, compression {})",
                    human(rs),
                    v["compression"].as_str().unwrap_or("?")
                )
            });
        }
        Command::Volume(VolumeCmd::List { pool }) => {
            let pools: Vec<String> = match pool {
                Some(p) => vec![p],
                None => c
                    .call("GET", "/v1/pools", None)?
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p["name"].as_str().map(String::from))
                    .collect(),
            };
            let mut rows = Vec::new();
            for p in pools {
                rows.extend(
                    c.call("GET", &format!("/v1/pools/{p}/volumes"), None)?.as_array().cloned().unwrap_or_default(),
                );
            }
            out(&Value::Array(rows.clone()), &|_| print_volumes(&rows));
        }
        Command::Volume(VolumeCmd::Show { volume }) => {
            let (p, name) = split(&volume)?;
            let v = c.call("GET", &format!("/v1/pools/{p}/volumes/{name}"), None)?;
            out(&v, &print_volume);
        }
        Command::Volume(VolumeCmd::Set { volume, size, sync, compression, reserve, dedup }) => {
            let (p, name) = split(&volume)?;
            if size.is_none() && sync.is_none() && compression.is_none() && reserve.is_none() && dedup.is_none() {
                return Err("nothing to set: give --size, --sync, --compression, --reserve and/or --dedup".into());
            }
            let dedup = dedup.as_deref().map(|d| parse_on_off("--dedup", d)).transpose()?;
            let size_bytes = size.as_deref().map(parse_size).transpose()?;
            let reservation_bytes = reserve.as_deref().map(parse_size).transpose()?;
            let v = c.call(
                "PATCH",
                &format!("/v1/pools/{p}/volumes/{name}"),
                Some(&json!({"size_bytes": size_bytes, "sync": sync, "compression": compression,
                    "reservation_bytes": reservation_bytes, "dedup": dedup})),
            )?;
            out(&v, &print_volume);
        }
        Command::Volume(VolumeCmd::Delete { volume }) => {
            let (p, name) = split(&volume)?;
            let v = c.call("DELETE", &format!("/v1/pools/{p}/volumes/{name}"), None)?;
            out(&v, &|_| println!("deleted volume {volume}"));
        }
        Command::Snapshot(cmd) => snapshot::run_snapshot(cmd, &c, cli.json)?,
        Command::Restore { snapshot, file, group } => {
            snapshot::run_restore(&snapshot, file.as_deref(), &group, &c, cli.json)?
        }
        Command::Clone(cmd) => snapshot::run_clone(cmd, &c, cli.json)?,
        Command::Mount { volume: None, dir: None } => {
            let v = c.call("GET", "/v1/mounts", None)?;
            out(&v, &|v| {
                println!("{:<28} {}", "VOLUME", "PATH");
                for m in v.as_array().into_iter().flatten() {
                    println!("{:<28} {}", m["volume"].as_str().unwrap_or("?"), m["path"].as_str().unwrap_or("?"));
                }
            });
        }
        Command::Mount { volume: Some(volume), dir: Some(dir) } => {
            split(&volume)?;
            let dir = std::path::absolute(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let v = c.call("POST", "/v1/mounts", Some(&json!({"volume": volume, "path": dir})))?;
            out(&v, &|_| println!("mounted {volume} at {}", dir.display()));
        }
        Command::Mount { .. } => return Err("usage: strata mount POOL/VOLUME DIR (or no arguments to list)".into()),
        Command::Unmount { dir } => {
            let dir = std::path::absolute(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let v = c.call("DELETE", "/v1/mounts", Some(&json!({"path": dir})))?;
            out(&v, &|_| println!("unmounted {}", dir.display()));
        }
        Command::Check { pool: None, device: Some(device), log_device, no_data } => {
            return offline::check(&device, log_device.as_deref(), !no_data, cli.json)
        }
        Command::Check { pool: Some(pool), device: None, no_data, .. } => {
            let v = c.call("POST", &format!("/v1/pools/{pool}/check"), Some(&json!({"verify_data": !no_data})))?;
            out(&v, &|v| offline::print_check(&pool, v));
            return Ok(if v["clean"].as_bool() == Some(true) { ExitCode::SUCCESS } else { ExitCode::from(1) });
        }
        Command::Check { .. } => return Err("usage: strata check POOL, or strata check --device PATH (offline)".into()),
        Command::Export(cmd) => export::run(&c, cli.json, cmd)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve { .. }) {
        // A client behaves like other Unix tools when its output pipe closes (`| head`):
        // it ends quietly. The daemon keeps SIGPIPE ignored (sockets report EPIPE instead).
        // SAFETY: restoring the default disposition of a signal at start-up, single-threaded.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    match run(cli) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("strata: {msg}");
            ExitCode::from(2)
        }
    }
}
