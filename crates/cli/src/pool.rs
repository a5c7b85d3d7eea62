//! `strata pool ...`: create, list, status, set, destroy, export, import.

use crate::client::{seg, Client, Failure};
use crate::units::{human, parse_size};
use crate::Out;
use clap::Subcommand;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use strata_api::*;

#[derive(Subcommand)]
pub enum PoolCmd {
    /// Make a new pool on an image file (created if missing) or a block device, a mirror of
    /// 2 or 3 (`--layout mirror --device A --device B`), or a parity2 set of 4 to 16
    /// (`--layout parity2 --device A ... --device D`). A device or file that holds a
    /// file system, a partition table, a label or other data is refused (the refusal names
    /// what it found) unless --force.
    Create {
        name: String,
        /// Image file or block device; must not hold a pool. Repeat for a mirror or parity2.
        #[arg(long, required = true)]
        device: Vec<PathBuf>,
        /// single (one device), mirror (2 or 3 devices, each holding every byte; any one
        /// device may fail, and damaged blocks are repaired from another) or parity2 (4 to
        /// 16 devices, two devices' worth of Reed-Solomon parity; any two may fail).
        #[arg(long, default_value = "single")]
        layout: String,
        /// Size of a new image file (sparse), e.g. 100G (each device of a set).
        #[arg(long)]
        size: Option<String>,
        /// Checksum of new blocks: blake3 or crc32c.
        #[arg(long, default_value = "blake3")]
        checksum: String,
        /// Keep the intent log (what fsync writes) on this separate, fast device or image
        /// file (existing, at least 16 MiB) instead of in the pool (docs/intent-log.md).
        #[arg(long)]
        log_device: Option<PathBuf>,
        /// A hot spare of a mirror (repeatable): it replaces a device that fails or
        /// disappears, and is rebuilt at once.
        #[arg(long)]
        spare: Vec<PathBuf>,
        /// Format the device even though it holds data (it is overwritten).
        #[arg(long)]
        force: bool,
    },
    /// List pools (UNAVAILABLE ones too, with the reason).
    List,
    /// Space (logical vs physical, reservations, capacity warnings), txg and health of a pool.
    Status { name: String },
    /// Read every copy of every block (each device of a mirror), verify it, and repair the
    /// damaged copies from a good one; runs every check too. Runs in the background (the
    /// pool serves meanwhile, the scrub paced while it does); this waits for the end, showing
    /// progress, unless --no-wait. Exit status 1 if damage could not be repaired.
    Scrub {
        name: String,
        /// Pause the running scrub (it keeps its place).
        #[arg(long, conflicts_with_all = ["resume", "cancel", "status", "no_wait"])]
        pause: bool,
        /// Resume a paused scrub.
        #[arg(long, conflicts_with_all = ["cancel", "status", "no_wait"])]
        resume: bool,
        /// Stop the running scrub (what it verified so far is reported).
        #[arg(long, conflicts_with_all = ["status", "no_wait"])]
        cancel: bool,
        /// Show the running scrub, or the last one.
        #[arg(long, conflicts_with = "no_wait")]
        status: bool,
        /// Start it and return at once (`--status` shows progress).
        #[arg(long)]
        no_wait: bool,
    },
    /// Put NEW in the place of device OLD of a mirror (failed, missing or healthy); NEW is
    /// rebuilt from the other devices in the background (`pool status` shows progress).
    Replace {
        name: String,
        /// The device as `pool status` lists it, or its index (0, 1, 2).
        old: String,
        /// Image file or block device; must not hold a pool.
        new: PathBuf,
        /// Size of a new image file, e.g. 100G.
        #[arg(long)]
        size: Option<String>,
        /// Format NEW even though it holds data.
        #[arg(long)]
        force: bool,
        /// Return when the rebuild has ended (like `zpool replace -w`), not when it started.
        #[arg(long)]
        wait: bool,
    },
    /// Add a device group: a new set of the pool's layout (a mirror of 2 or 3 devices, a
    /// parity2 set of 4 to 16) whose space extends the pool's (`zpool add`); new blocks are
    /// spread over every group. Groups cannot be removed
    /// again. Devices that hold data are refused unless --force.
    Add {
        name: String,
        /// Image file or block device of the new set (repeat: 2 or 3 for a mirror, 4 to 16
        /// for parity2).
        #[arg(long, required = true)]
        device: Vec<PathBuf>,
        /// Size of new image files (sparse), e.g. 100G.
        #[arg(long)]
        size: Option<String>,
        /// Format the devices even though they hold data (it is overwritten).
        #[arg(long)]
        force: bool,
    },
    /// Add a hot spare to a mirror: it replaces a device that fails or disappears.
    Spare {
        name: String,
        /// Image file or block device; must not hold data or belong to a pool.
        device: PathBuf,
        /// Size of a new image file, e.g. 100G.
        #[arg(long)]
        size: Option<String>,
        /// Take the device even though it holds data.
        #[arg(long)]
        force: bool,
    },
    /// Remove a hot spare that is not in use.
    Unspare { name: String, device: PathBuf },
    /// Bring a device of a mirror or parity2 set back into use: what it missed is rebuilt
    /// first — only the regions written while it was offline or failed (and, for a device
    /// that failed, what it may have lost from its cache then), when the missed map covers
    /// it (`pool status` says so); otherwise everything the pool uses. After a device that
    /// failed comes back, run a scrub: the rest of it is trusted as it was.
    Online {
        name: String,
        device: String,
        /// Return when the rebuild has ended, not when it started.
        #[arg(long)]
        wait: bool,
    },
    /// Stop using a device of a mirror or parity2 set (refused when the set would be suspended).
    Offline { name: String, device: String },
    /// Change a pool's settings (all of them, or none if one is refused).
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
        /// Scrub the pool on a schedule, e.g. 7d (the first one that long from now); 0 stops it.
        #[arg(long)]
        scrub_every: Option<String>,
        /// The least a rebuild copies per second while the pool serves clients, e.g. 32M
        /// (default; at least 1M). An idle pool is rebuilt at full speed.
        #[arg(long, value_name = "BYTES")]
        rebuild_rate_min: Option<String>,
        /// The most a rebuild copies per second while the pool serves clients, e.g. 512M
        /// (default); between the two the rate follows the clients' latency.
        #[arg(long, value_name = "BYTES")]
        rebuild_rate_max: Option<String>,
        /// The least a scrub verifies per second while the pool serves clients, e.g. 16M
        /// (default; at least 1M). An idle pool is scrubbed at full speed.
        #[arg(long, value_name = "BYTES")]
        scrub_rate_min: Option<String>,
        /// The most a scrub verifies per second while the pool serves clients, e.g. 256M
        /// (default); between the two the rate follows the clients' latency.
        #[arg(long, value_name = "BYTES")]
        scrub_rate_max: Option<String>,
    },
    /// Destroy a pool: every volume, snapshot and clone in it; its devices' labels are erased.
    Destroy {
        name: String,
        /// Confirm: this erases the pool's data.
        #[arg(long)]
        yes: bool,
        /// Unmount and unexport its volumes first instead of refusing.
        #[arg(long)]
        force: bool,
    },
    /// Commit what was written to the pool now and wait until it is durable (as `zpool
    /// sync`); the background commit would do it within the txg interval.
    Sync { name: String },
    /// Close a pool cleanly and forget it, so it can be imported here or on another host
    /// (an UNAVAILABLE pool is just forgotten).
    Export {
        name: String,
        /// Unmount and unexport its volumes first instead of refusing.
        #[arg(long)]
        force: bool,
    },
    /// Find pools by their labels (--device or --dir) and list them; with a POOL (name or
    /// guid), import it.
    Import {
        /// The pool to import: its name or guid as the list shows it.
        pool: Option<String>,
        #[arg(long, conflicts_with = "dir")]
        device: Option<PathBuf>,
        /// Look at every file and block device in this directory.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The pool's separate log device, if it has one.
        #[arg(long)]
        log_device: Option<PathBuf>,
        /// Serve it under this name.
        #[arg(long)]
        new_name: Option<String>,
        /// Import even though another host has it open (it must really be closed there).
        #[arg(long)]
        force: bool,
    },
}

fn absolute(p: &PathBuf, what: &str) -> Result<PathBuf, Failure> {
    std::path::absolute(p).map_err(|e| Failure::usage(format!("{what} {}: {e}", p.display())))
}

pub fn run(c: &Client, out: &Out, cmd: PoolCmd) -> Result<(), Failure> {
    match cmd {
        PoolCmd::Create { name, device, layout, size, checksum, log_device, spare, force } => {
            let devices = device.iter().map(|d| absolute(d, "--device")).collect::<Result<Vec<_>, _>>()?;
            let req = CreatePool {
                name,
                device: None,
                layout: Some(layout),
                devices,
                size_bytes: size.as_deref().map(parse_size).transpose()?,
                checksum: Some(checksum),
                log_device: log_device.as_ref().map(|l| absolute(l, "--log-device")).transpose()?,
                spares: spare.iter().map(|s| absolute(s, "--spare")).collect::<Result<Vec<_>, _>>()?,
                force,
            };
            let p: PoolInfo = c.send("POST", "/v1/pools", &req)?;
            out.show(&p, |p| {
                let size = p.status.as_ref().map_or(0, |s| s.size_bytes);
                match p.members.is_empty() {
                    true => println!("created pool {} on {} ({} usable)", p.name, p.device.display(), human(size)),
                    false => {
                        let m: Vec<String> = p.members.iter().map(|m| m.display().to_string()).collect();
                        let layout = p.status.as_ref().map_or("mirror", |s| s.layout.as_str());
                        println!("created pool {} as a {layout} of {} ({} usable)", p.name, m.join(", "), human(size))
                    }
                }
                if let Some(l) = &p.log_device {
                    println!("intent log on {}", l.display());
                }
            });
        }
        PoolCmd::List => {
            let pools: Vec<PoolInfo> = c.get("/v1/pools")?;
            out.show(&pools, |pools| {
                println!(
                    "{:<16} {:<11} {:>10} {:>10} {:>10} {:>8}  DEVICE",
                    "POOL", "STATE", "SIZE", "ALLOC", "FREE", "VOLUMES"
                );
                for p in pools {
                    let (size, alloc, free, vols) = match &p.status {
                        Some(s) => {
                            (human(s.size_bytes), human(s.allocated_bytes), human(s.free_bytes), s.volumes.to_string())
                        }
                        None => ("-".into(), "-".into(), "-".into(), "-".into()),
                    };
                    println!(
                        "{:<16} {:<11} {:>10} {:>10} {:>10} {:>8}  {}",
                        p.name,
                        state_name(p.state),
                        size,
                        alloc,
                        free,
                        vols,
                        p.device.display()
                    );
                    if let Some(r) = &p.reason {
                        println!("  {r}");
                    }
                }
            });
        }
        PoolCmd::Status { name } => {
            let p: PoolInfo = c.get(&format!("/v1/pools/{}", seg(&name)))?;
            out.show(&p, print_pool);
        }
        PoolCmd::Replace { name, old, new, size, force, wait } => {
            let req = strata_api::DeviceChange {
                action: "replace".into(),
                device: old.clone(),
                new_device: Some(absolute(&new, "NEW")?),
                size_bytes: size.as_deref().map(parse_size).transpose()?,
                force,
            };
            let p: PoolInfo = c.send("POST", &format!("/v1/pools/{}/devices", seg(&name)), &req)?;
            if wait {
                return wait_for_rebuild(c, out, &name, &p);
            }
            out.show(&p, |_| {
                println!(
                    "replacing {old} with {} in pool {name}: rebuilding (see `strata pool status {name}`)",
                    new.display()
                )
            });
        }
        PoolCmd::Add { name, device, size, force } => {
            let devices = device.iter().map(|d| absolute(d, "DEVICE")).collect::<Result<Vec<_>, _>>()?;
            let req = strata_api::AddGroup { devices, size_bytes: size.as_deref().map(parse_size).transpose()?, force };
            let p: PoolInfo = c.send("POST", &format!("/v1/pools/{}/groups", seg(&name)), &req)?;
            out.show(&p, |p| {
                let size = p.status.as_ref().map_or(0, |s| s.size_bytes);
                println!("device group added to pool {name}: now {}", human(size))
            });
        }
        PoolCmd::Spare { name, device, size, force } => {
            let path = absolute(&device, "DEVICE")?;
            let req = strata_api::DeviceChange {
                action: "spare".into(),
                device: path.display().to_string(),
                new_device: None,
                size_bytes: size.as_deref().map(parse_size).transpose()?,
                force,
            };
            let p: PoolInfo = c.send("POST", &format!("/v1/pools/{}/devices", seg(&name)), &req)?;
            out.show(&p, |_| println!("hot spare {} added to pool {name}", path.display()));
        }
        PoolCmd::Unspare { name, device } => {
            let path = absolute(&device, "DEVICE")?;
            device_action(c, out, &name, "unspare", &path.display().to_string(), true)?;
        }
        PoolCmd::Online { name, device, wait } => {
            let p = device_action(c, out, &name, "online", &device, !wait)?;
            if wait {
                return wait_for_rebuild(c, out, &name, &p);
            }
        }
        PoolCmd::Offline { name, device } => {
            device_action(c, out, &name, "offline", &device, true)?;
        }
        PoolCmd::Scrub { name, pause, resume, cancel, status, no_wait } => {
            scrub(c, out, &name, pause, resume, cancel, status, no_wait)?
        }
        PoolCmd::Set {
            name,
            capacity_alert,
            log_device,
            remove_log_device,
            scrub_every,
            rebuild_rate_min,
            rebuild_rate_max,
            scrub_rate_min,
            scrub_rate_max,
        } => {
            let rate = |v: Option<String>, flag: &str| {
                v.map(|s| parse_size(&s).map_err(|e| Failure::usage(format!("{flag} {e}")))).transpose()
            };
            let req = SetPool {
                capacity_alert_percent: capacity_alert,
                log_device: log_device.as_ref().map(|l| absolute(l, "--log-device")).transpose()?,
                remove_log_device: remove_log_device.then_some(true),
                scrub_every_seconds: scrub_every
                    .as_deref()
                    .map(|s| crate::units::parse_interval(s).map_err(|e| Failure::usage(format!("--scrub-every {e}"))))
                    .transpose()?,
                rebuild_rate_min_bytes_per_second: rate(rebuild_rate_min, "--rebuild-rate-min")?,
                rebuild_rate_max_bytes_per_second: rate(rebuild_rate_max, "--rebuild-rate-max")?,
                scrub_rate_min_bytes_per_second: rate(scrub_rate_min, "--scrub-rate-min")?,
                scrub_rate_max_bytes_per_second: rate(scrub_rate_max, "--scrub-rate-max")?,
            };
            if req.capacity_alert_percent.is_none()
                && req.log_device.is_none()
                && req.remove_log_device.is_none()
                && req.scrub_every_seconds.is_none()
                && req.rebuild_rate_min_bytes_per_second.is_none()
                && req.rebuild_rate_max_bytes_per_second.is_none()
                && req.scrub_rate_min_bytes_per_second.is_none()
                && req.scrub_rate_max_bytes_per_second.is_none()
            {
                return Err(Failure::usage(
                    "nothing to set: give --capacity-alert PERCENT, --log-device PATH, --remove-log-device, --scrub-every INTERVAL, --rebuild-rate-min/--rebuild-rate-max BYTES or --scrub-rate-min/--scrub-rate-max BYTES",
                ));
            }
            let p: PoolInfo = c.send("PATCH", &format!("/v1/pools/{}", seg(&name)), &req)?;
            out.show(&p, print_pool);
        }
        PoolCmd::Destroy { name, yes, force } => {
            if !yes {
                return Err(Failure::usage(format!(
                    "destroying pool {name} erases every volume, snapshot and clone in it: add --yes to confirm"
                )));
            }
            let q = format!("/v1/pools/{}?confirm={}&force={force}", seg(&name), seg(&name));
            let d: Done = c.call::<(), Done>("DELETE", &q, None)?;
            out.show(&d, |d| {
                println!("destroyed pool {}", d.target);
                for a in &d.also {
                    println!("  {a}");
                }
            });
        }
        PoolCmd::Sync { name } => {
            let r: strata_api::PoolSynced =
                c.send("POST", &format!("/v1/pools/{}/sync", seg(&name)), &serde_json::json!({}))?;
            out.show(&r, |r| println!("pool {}: committed, txg {} durable", r.pool, r.txg));
        }
        PoolCmd::Export { name, force } => {
            let d: Done = c.send("POST", &format!("/v1/pools/{}/export", seg(&name)), &ExportPoolRequest { force })?;
            out.show(&d, |d| {
                println!("exported pool {}", d.target);
                for a in &d.also {
                    println!("  {a}");
                }
            });
        }
        PoolCmd::Import { pool, device, dir, log_device, new_name, force } => {
            let device = device.as_ref().map(|d| absolute(d, "--device")).transpose()?;
            let dir = dir.as_ref().map(|d| absolute(d, "--dir")).transpose()?;
            if device.is_none() && dir.is_none() {
                return Err(Failure::usage("where to look: give --device PATH or --dir DIR"));
            }
            match pool {
                None => {
                    let mut q = String::from("/v1/import/scan?");
                    if let Some(d) = &device {
                        q.push_str(&format!("device={}", seg(&d.to_string_lossy())));
                    }
                    if let Some(d) = &dir {
                        q.push_str(&format!("dir={}", seg(&d.to_string_lossy())));
                    }
                    let found: Vec<ImportCandidate> = c.get(&q)?;
                    out.show(&found, |found| {
                        if found.is_empty() {
                            println!("no pools found");
                        }
                        for p in found {
                            if p.members.is_empty() {
                                println!("pool {} (guid {}) on {}", p.name, p.guid, p.device.display());
                            } else {
                                let names: Vec<String> = p.members.iter().map(|m| m.display().to_string()).collect();
                                println!(
                                    "pool {} (guid {}) on a set of {} devices, {} found: {}",
                                    p.name,
                                    p.guid,
                                    p.set_members,
                                    p.members.len(),
                                    names.join(", ")
                                );
                                for (i, g) in p.groups.iter().enumerate() {
                                    let names: Vec<String> = g.iter().map(|m| m.display().to_string()).collect();
                                    println!("  and device group {}: {}", i + 1, names.join(", "));
                                }
                            }
                            println!(
                                "  txg {}, {} by host {}{}",
                                p.txg,
                                p.pool_state,
                                p.host_id,
                                if p.this_host { " (this daemon)" } else { "" }
                            );
                            if let Some(l) = &p.log_device_guid {
                                println!("  needs its log device {l} (--log-device)");
                            }
                            match &p.refusal {
                                Some(r) => println!("  not importable: {r}"),
                                None => println!(
                                    "  import with: strata pool import {} --{} ...",
                                    p.name,
                                    if device.is_some() { "device" } else { "dir" }
                                ),
                            }
                        }
                    });
                }
                Some(pool) => {
                    let req = ImportPoolRequest {
                        pool,
                        device,
                        dir,
                        log_device: log_device.as_ref().map(|l| absolute(l, "--log-device")).transpose()?,
                        new_name,
                        force,
                    };
                    let p: PoolInfo = c.send("POST", "/v1/import", &req)?;
                    out.show(&p, |p| {
                        println!(
                            "imported pool {} from {} (txg {})",
                            p.name,
                            p.device.display(),
                            p.status.as_ref().map_or(0, |s| s.txg)
                        )
                    });
                }
            }
        }
    }
    Ok(())
}

fn state_name(s: PoolState) -> &'static str {
    match s {
        PoolState::Online => "ONLINE",
        PoolState::Degraded => "DEGRADED",
        PoolState::Suspended => "SUSPENDED",
        PoolState::Unavailable => "UNAVAILABLE",
    }
}

fn ratio_text(r: f64) -> String {
    format!("{r:.2}x")
}

pub fn print_pool(p: &PoolInfo) {
    println!("pool      {}", p.name);
    println!("state     {}", state_name(p.state));
    if let Some(r) = &p.reason {
        println!("reason    {r}");
    }
    match &p.status {
        Some(s) => println!("device    {}", s.device_io),
        None => println!("device    {}", p.device.display()),
    }
    match p.status.as_ref().and_then(|s| s.log_failover.as_ref()) {
        Some(why) => println!("log       in the pool: {why}"),
        None => {
            println!("log       {}", p.log_device.as_ref().map_or("in the pool".into(), |l| l.display().to_string()))
        }
    }
    for s in &p.spares {
        println!("spare     {} (AVAIL)", s.display());
    }
    if let (Some(every), Some(next)) = (p.scrub_every_seconds, p.scrub_next_ns) {
        println!("schedule  scrub every {every} s, next at {}", strata_daemon::utc(next / 1_000_000_000));
    }
    let Some(s) = &p.status else { return };
    if s.layout != "single" {
        println!(
            "rebuilds  {}/s to {}/s while clients are served (following their latency), full speed when idle",
            human(p.rebuild_rate_min_bytes_per_second),
            human(p.rebuild_rate_max_bytes_per_second)
        );
    }
    println!(
        "scrubs    {}/s to {}/s while clients are served (following their latency), full speed when idle",
        human(p.scrub_rate_min_bytes_per_second),
        human(p.scrub_rate_max_bytes_per_second)
    );
    if s.layout != "single" || s.devices.iter().any(|d| d.state != "ONLINE") {
        print_devices(s);
    }
    print_scrub_line(s);
    println!("guid      {}", s.guid);
    println!("txg       {}", s.txg);
    println!("size      {}", human(s.size_bytes));
    let pct = if s.size_bytes > 0 { 100.0 * s.allocated_bytes as f64 / s.size_bytes as f64 } else { 0.0 };
    println!("allocated {} ({pct:.1}%)", human(s.allocated_bytes));
    println!("free      {}", human(s.free_bytes));
    if s.trapped_bytes > 0 {
        println!("trapped   {} (free, in parity rows that still hold blocks)", human(s.trapped_bytes));
    }
    if s.destroying_bytes > 0 {
        println!("freeing   {} of deleted volumes (returns over the next commits)", human(s.destroying_bytes));
    }
    println!("reserved  {} (unused parts of volume reservations)", human(s.reserved_bytes));
    println!("available {} (alert below {}%)", human(s.available_bytes), s.capacity_alert_percent);
    println!(
        "logical   {} (saved {} by compression and trimming, ratio {})",
        human(s.logical_bytes),
        human(s.saved_bytes),
        ratio_text(s.compress_ratio)
    );
    if s.packs > 0 {
        println!(
            "packs     {} (small compressed records sharing units; {} records packed since open)",
            s.packs, s.packed_records_written
        );
    }
    if s.untracked_volumes > 0 {
        println!("note      {} volume(s) written by an older build: savings not counted", s.untracked_volumes);
    }
    println!("volumes   {}", s.volumes);
    let ms = |us: u64| us as f64 / 1000.0;
    println!(
        "commits   {} since open; pool lock held {:.1} ms at most, {:.1} ms the last one; {} skipped early passes",
        s.commits.count,
        ms(s.commits.locked_us_max),
        ms(s.commits.locked_us_last),
        s.commits.early_passes_skipped
    );
    println!(
        "intent    {} blocks, {} logged ({} more written in place by reference); {} syncs found the log full; {} held for unsynced operations",
        s.log_blocks_written,
        human(s.log_bytes_written),
        human(s.log_bytes_by_reference),
        s.log_full_commits,
        human(s.log_memory_bytes)
    );
    let ratio = |hits: u64, misses: u64| match hits + misses {
        0 => "-".to_string(),
        n => format!("{:.1}%", hits as f64 * 100.0 / n as f64),
    };
    println!(
        "cache     {} of {} data, {} hits, {} misses ({} hit); metadata {} hit",
        human(s.data_cache_bytes),
        human(s.data_cache_capacity_bytes),
        s.data_cache_hits,
        s.data_cache_misses,
        ratio(s.data_cache_hits, s.data_cache_misses),
        ratio(s.metadata_cache_hits, s.metadata_cache_misses)
    );
    for w in &s.warnings {
        println!("WARNING   {w}");
    }
    if let Some(l) = &s.latched {
        println!("STATE     READ-ONLY: {l}");
    }
    if s.corruptions_detected > 0 {
        println!("errors    {} corrupt blocks detected since open (run `strata check`)", s.corruptions_detected);
    }
    for n in &s.open_notes {
        println!("note      {n}");
    }
}

/// `show`: print the pool as the action left it (the caller waits for a rebuild otherwise).
fn device_action(
    c: &Client,
    out: &Out,
    pool: &str,
    action: &str,
    device: &str,
    show: bool,
) -> Result<PoolInfo, Failure> {
    let req = strata_api::DeviceChange {
        action: action.into(),
        device: device.into(),
        new_device: None,
        size_bytes: None,
        force: false,
    };
    let p: PoolInfo = c.send("POST", &format!("/v1/pools/{}/devices", seg(pool)), &req)?;
    if show {
        out.show(&p, |p| {
            println!("device {device} of pool {pool}: {action}");
            if let Some(r) = p.status.as_ref().and_then(|s| s.rebuild.as_ref()) {
                println!("rebuilding {} (see `strata pool status {pool}`)", r.device);
            }
        });
    }
    Ok(p)
}

/// `--wait`: poll the pool until the rebuild that `p` shows has ended (a line every 10 s on
/// stderr), then show the pool. A failure if the device did not come out ONLINE.
fn wait_for_rebuild(c: &Client, out: &Out, pool: &str, p: &PoolInfo) -> Result<(), Failure> {
    let rebuilding = |p: &PoolInfo| p.status.as_ref().and_then(|s| s.rebuild.clone());
    let Some(first) = rebuilding(p) else {
        out.show(p, |_| println!("pool {pool}: nothing to rebuild"));
        return Ok(());
    };
    let started = Instant::now();
    let mut said = Instant::now();
    let mut now = p.clone();
    while let Some(r) = rebuilding(&now) {
        if said.elapsed() >= Duration::from_secs(10) {
            let eta = r.eta_seconds.map_or("-".to_string(), |e| format!("{}m{:02}s", e / 60, e % 60));
            eprintln!(
                "rebuilding {}: {:.1}% ({} copied) at {}/s, eta {eta}",
                r.device,
                r.percent,
                human(r.copied_bytes),
                human(r.scan_bytes_per_second)
            );
            said = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(50));
        now = c.get(&format!("/v1/pools/{}", seg(pool)))?;
    }
    let state = now
        .status
        .as_ref()
        .and_then(|s| s.devices.iter().find(|d| d.device == first.device))
        .map(|d| (d.state.clone(), d.note.clone().unwrap_or_default()));
    match state {
        Some((s, _)) if s == "ONLINE" => {
            let secs = started.elapsed().as_secs_f64();
            out.show(&now, |_| println!("device {} of pool {pool} rebuilt in {secs:.2} s: ONLINE", first.device));
            Ok(())
        }
        Some((s, note)) => Err(Failure::other(format!(
            "the rebuild of {} in pool {pool} ended with the device {s}{}{note}; see `strata pool status {pool}`",
            first.device,
            if note.is_empty() { "" } else { ": " }
        ))),
        None => Err(Failure::other(format!(
            "{} left pool {pool} during its rebuild; see `strata pool status {pool}`",
            first.device
        ))),
    }
}

/// The device table of `pool status` (zpool status's config section).
fn print_devices(s: &strata_api::PoolFigures) {
    println!("layout    {}", s.layout);
    println!(
        "          {:<40} {:<11} {:>6} {:>6} {:>6} {:>10}",
        "DEVICE", "STATE", "READ", "WRITE", "CKSUM", "REPAIRED"
    );
    let groups = s.devices.iter().map(|d| d.group).max().unwrap_or(0) + 1;
    for (i, d) in s.devices.iter().enumerate() {
        if groups > 1 && (i == 0 || s.devices[i - 1].group != d.group) {
            println!("          group {} ({})", d.group, s.layout);
        }
        println!(
            "          {:<40} {:<11} {:>6} {:>6} {:>6} {:>10}",
            d.device,
            d.state,
            d.read_errors,
            d.write_errors,
            d.checksum_errors,
            human(d.repaired_bytes)
        );
        if let Some(n) = &d.note {
            println!("            {n}");
        }
    }
    if let Some(r) = &s.rebuild {
        let eta = r.eta_seconds.map_or("-".to_string(), |e| format!("{}m{:02}s", e / 60, e % 60));
        let limit = r
            .limit_bytes_per_second
            .map(|l| format!(" (copying at most {}/s beside clients)", human(l)))
            .unwrap_or_default();
        println!(
            "rebuild   {}: {:.1}% ({} of {} scanned, {} copied) at {}/s{limit}, {eta} to go",
            r.device,
            r.percent,
            human(r.done_bytes),
            human(r.total_bytes),
            human(r.copied_bytes),
            human(r.scan_bytes_per_second)
        );
    }
}

/// `pool status`'s scrub line (zpool status's `scan:`).
fn print_scrub_line(s: &strata_api::PoolFigures) {
    if let Some(sc) = &s.scrub {
        let found = sc
            .report
            .as_ref()
            .map(|r| format!(", {} damaged copies found, {} repaired", r.checksum_errors, human(r.repaired_bytes)))
            .unwrap_or_default();
        println!(
            "scrub     {} {:.1}% ({} of {}) at {}/s{}{}{found}",
            sc.state,
            sc.percent,
            human(sc.done_bytes),
            human(sc.total_bytes),
            human(sc.bytes_per_second),
            sc.eta_seconds.map(|e| format!(", {e:.0} s to go")).unwrap_or_default(),
            limited(sc)
        );
    }
}

/// The limit a running scrub keeps to now, if any.
fn limited(s: &ScrubStatus) -> String {
    s.limit_bytes_per_second.map(|l| format!(", verifying at most {}/s beside clients", human(l))).unwrap_or_default()
}

fn print_scrub_status(name: &str, s: &ScrubStatus) {
    match s.state.as_str() {
        "none" => println!("pool {name}: no scrub since the daemon started"),
        "running" | "paused" => println!(
            "pool {name}: scrub {} {:.1}% ({} of {}) at {}/s{}{}{}",
            s.state,
            s.percent,
            human(s.done_bytes),
            human(s.total_bytes),
            human(s.bytes_per_second),
            s.eta_seconds.map(|e| format!(", {e:.0} s to go")).unwrap_or_default(),
            limited(s),
            paced(s)
        ),
        state => {
            println!(
                "pool {name}: scrub {state} after {:.1} s ({} verified){}",
                s.seconds,
                human(s.done_bytes),
                paced(s)
            );
            if let Some(m) = &s.message {
                println!("  {m}");
            }
        }
    }
}

/// How long a scrub waited to keep to its rate while the pool served clients.
fn paced(s: &ScrubStatus) -> String {
    if s.paced_seconds >= 0.05 {
        format!("; paced {:.1} s while the pool served clients", s.paced_seconds)
    } else {
        String::new()
    }
}

/// The final lines of a scrub (what `pool scrub` has always printed), and its exit status.
fn scrub_result(name: &str, r: &ScrubReport, state: &str) -> Result<(), Failure> {
    println!(
        "scrubbed pool {name} in {:.1} s: {} blocks, every copy verified; {} damaged copies found, {} repaired{}",
        r.seconds,
        r.blocks_verified,
        r.checksum_errors,
        human(r.repaired_bytes),
        if state == "finished" { String::new() } else { format!(" (scrub {state} before the end)") }
    );
    for e in &r.check.errors {
        println!("  error: {e}");
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn scrub(
    c: &Client,
    out: &Out,
    name: &str,
    pause: bool,
    resume: bool,
    cancel: bool,
    status: bool,
    no_wait: bool,
) -> Result<(), Failure> {
    let path = format!("/v1/pools/{}/scrub", seg(name));
    let action = match (pause, resume, cancel) {
        (true, _, _) => Some("pause"),
        (_, true, _) => Some("resume"),
        (_, _, true) => Some("cancel"),
        _ if status => None,
        _ => Some("start"),
    };
    let mut s: ScrubStatus = match action {
        Some(a) => c.send("POST", &path, &ScrubRequest { action: Some(a.into()) })?,
        None => c.get(&path)?,
    };
    if action != Some("start") || no_wait {
        out.show(&s, |s| print_scrub_status(name, s));
        return Ok(());
    }
    // Wait for the end, a progress line on stderr every few seconds.
    let mut last = std::time::Instant::now();
    while matches!(s.state.as_str(), "running" | "paused") {
        std::thread::sleep(std::time::Duration::from_millis(200));
        s = c.get(&path)?;
        if last.elapsed() >= std::time::Duration::from_secs(5) && matches!(s.state.as_str(), "running" | "paused") {
            eprintln!(
                "scrub {} {:.1}% ({} of {}) at {}/s",
                s.state,
                s.percent,
                human(s.done_bytes),
                human(s.total_bytes),
                human(s.bytes_per_second)
            );
            last = std::time::Instant::now();
        }
    }
    let Some(r) = s.report.clone() else {
        return Err(Failure::other(format!(
            "pool {name}: the scrub {}: {}",
            s.state,
            s.message.as_deref().unwrap_or("see the daemon log")
        )));
    };
    out.show(&r, |r| {
        let _ = scrub_result(name, r, &s.state);
    });
    if !r.check.clean {
        return Err(Failure::other(format!(
            "pool {name}: {} problems no copy could repair (see above; `strata check {name}`)",
            r.check.errors.len()
        )));
    }
    if s.state != "finished" {
        return Err(Failure::other(format!(
            "pool {name}: the scrub {} before the end{}",
            s.state,
            s.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
        )));
    }
    Ok(())
}
