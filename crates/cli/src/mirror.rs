//! `strata mirror`: replicate volumes to another pool (create, update, break, resync,
//! reverse, pause, resume, delete, list, show). A mirror is named by its target, DEST_POOL/VOLUME.

use crate::client::{seg, Client, Failure};
use crate::units::human;
use crate::Out;
use clap::Subcommand;
use strata_api::{CreateFailover, CreateMirror, Done, MirrorAction, MirrorInfo};

#[derive(Subcommand)]
pub enum MirrorCmd {
    /// Mirror POOL/VOLUME to DEST_POOL: the target volumes are created, then the first
    /// (full) transfer runs; this waits for it unless --no-wait.
    Create {
        source: String,
        dest_pool: String,
        /// More volumes of the source's pool mirrored with it as one unit (one group
        /// snapshot per transfer: a database's data and log volumes always match).
        #[arg(long, value_delimiter = ',')]
        group: Vec<String>,
        /// Transfer on a schedule: 30s, 5m, 1h, 1d.
        #[arg(long)]
        every: Option<String>,
        /// Transferred snapshots kept on each side (default 2).
        #[arg(long)]
        keep: Option<u32>,
        /// Bandwidth limit in bytes per second of record data (e.g. 50M).
        #[arg(long)]
        limit: Option<String>,
        /// Synchronous: every fsync of a source volume waits until the target pool's
        /// journal holds it. `on` falls back to asynchronous if the target fails (and
        /// catches up by itself); `strict` fails the fsync instead. The target may be a pool
        /// of this daemon or PEER:POOL.
        #[arg(long, num_args = 0..=1, default_missing_value = "on", value_parser = ["on", "strict"])]
        sync: Option<String>,
        /// Failover through etcd (with --sync, to PEER:POOL): the daemon holding the lease
        /// serves the volumes; when the source's lease runs out the target takes over
        /// (breaks the mirror, replays its journal, mounts the volumes). Endpoints, e.g.
        /// http://10.0.0.5:2379 (comma-separated).
        #[arg(long, value_delimiter = ',')]
        etcd: Vec<String>,
        /// The failover lease's time to live: 10s by default (2s to 5m).
        #[arg(long, requires = "etcd")]
        failover_ttl: Option<String>,
        /// On the target, after a takeover: mount each volume at DIR/VOLUME.
        #[arg(long, requires = "etcd")]
        failover_mount: Option<String>,
        #[arg(long)]
        no_wait: bool,
    },
    /// Transfer what changed since the last transfer now (waits unless --no-wait).
    Update {
        mirror: String,
        #[arg(long)]
        no_wait: bool,
    },
    /// Make the target volumes writable, at the last transferred snapshot.
    Break {
        mirror: String,
    },
    /// Make a broken mirror a mirror again from the common snapshot; what was written on the
    /// target since the break is kept as a snapshot `resync-…`.
    Resync {
        mirror: String,
    },
    /// Swap the roles of a broken mirror: the target becomes the source (the mirror takes the
    /// old source's pool as its name); what the old source wrote since the last transfer is
    /// kept there as a snapshot `reverse-…`; the next update sends only what changed. For a
    /// mirror to another daemon, run it here, on the old source (PEER:POOL/VOL), once the
    /// mirror is broken there.
    Reverse {
        mirror: String,
    },
    /// Stop transfers (one in progress stops at its checkpoint and resumes later).
    Pause {
        mirror: String,
    },
    Resume {
        mirror: String,
    },
    /// End the relationship; the target volumes and their snapshots stay, writable.
    Delete {
        mirror: String,
    },
    List,
    Show {
        mirror: String,
    },
}

fn parse_every(s: &str) -> Result<u64, Failure> {
    crate::units::parse_interval(s).map_err(|e| Failure::usage(format!("--every {e}")))
}

fn path(mirror: &str) -> Result<String, Failure> {
    match mirror.split_once('/') {
        Some((p, v)) if !p.is_empty() && !v.is_empty() && !v.contains('/') => {
            Ok(format!("/v1/mirrors/{}/{}", seg(p), seg(v)))
        }
        _ => Err(Failure::usage(format!(
            "{mirror:?}: name a mirror by its target, DEST_POOL/VOLUME (see `strata mirror list`)"
        ))),
    }
}

fn age(secs: f64) -> String {
    match secs {
        s if s < 120.0 => format!("{s:.0}s"),
        s if s < 7200.0 => format!("{:.0}m", s / 60.0),
        s => format!("{:.1}h", s / 3600.0),
    }
}

fn print_line(m: &MirrorInfo) {
    let what = match &m.transfer {
        Some(t) => format!("{:.1}% of {} at {}/s", t.percent, human(t.total_bytes), human(t.bytes_per_second)),
        None => m.last_transfer.as_ref().map_or(String::new(), |l| {
            format!("last: {} in {:.1}s ({}/s)", human(l.done_bytes), l.seconds, human(l.bytes_per_second))
        }),
    };
    println!(
        "{:<24} {:<14} {:<22} {:<8} {}",
        m.name,
        m.state,
        format!("{}/{}", m.source_pool, m.volumes.join(",")),
        m.lag_seconds.map_or("-".into(), age),
        what
    );
}

fn print_info(m: &MirrorInfo) {
    println!("mirror {}: {}", m.name, m.state);
    println!("  source:   {}/{}", m.source_pool, m.volumes.join(", "));
    println!("  target:   {}/{}", m.dest_pool, m.volumes.join(", "));
    println!(
        "  schedule: {}; keep {} transferred snapshots; {}",
        m.every_seconds.map_or("on update only".into(), |s| format!("every {s} s")),
        m.keep,
        m.limit_bytes_per_second.map_or("no bandwidth limit".into(), |l| format!("at most {}/s", human(l)))
    );
    println!(
        "  common:   {} (lag {})",
        m.common_snapshot.as_deref().unwrap_or("none yet"),
        m.lag_seconds.map_or("-".into(), age)
    );
    if let Some(l) = &m.last_transfer {
        println!(
            "  last:     {} {} in {:.1} s ({}/s), {}",
            l.snapshot,
            human(l.done_bytes),
            l.seconds,
            human(l.bytes_per_second),
            l.base.as_deref().map_or("full".into(), |b| format!("incremental from {b}"))
        );
    }
    if let Some(t) = &m.transfer {
        println!(
            "  transfer: {} {:.1}% ({} of {}) at {}/s{}",
            t.snapshot,
            t.percent,
            human(t.done_bytes),
            human(t.total_bytes),
            human(t.bytes_per_second),
            t.eta_seconds.map_or(String::new(), |e| format!(", {} to go", age(e)))
        );
    }
    if let Some(s) = &m.sync {
        println!(
            "  sync:     {} ({}), {} frames ({}) journaled on the target{}",
            s.state,
            s.mode,
            s.frames,
            human(s.bytes),
            s.message.as_deref().map_or(String::new(), |w| format!("; {w}"))
        );
    }
    if let Some(f) = &m.failover {
        println!(
            "  failover: {} (lease {} in etcd {}, {} s; owner {}){}",
            f.role,
            f.key,
            f.etcd.join(","),
            f.ttl_seconds,
            f.owner.as_deref().unwrap_or("none"),
            f.message.as_deref().map_or(String::new(), |w| format!("; {w}"))
        );
    }
    if let Some(msg) = &m.message {
        println!("  error:    {msg}");
    }
}

/// Follow the transfer until it ends; a progress line on stderr every few seconds.
fn wait(c: &Client, p: &str, mut m: MirrorInfo) -> Result<MirrorInfo, Failure> {
    let mut last = std::time::Instant::now();
    while m.state == "transferring" {
        std::thread::sleep(std::time::Duration::from_millis(200));
        m = c.get(p)?;
        if let (Some(t), true) = (&m.transfer, last.elapsed() >= std::time::Duration::from_secs(5)) {
            eprintln!(
                "transfer {} {:.1}% ({} of {}) at {}/s",
                t.snapshot,
                t.percent,
                human(t.done_bytes),
                human(t.total_bytes),
                human(t.bytes_per_second)
            );
            last = std::time::Instant::now();
        }
    }
    if m.state == "failed" {
        return Err(Failure::other(format!(
            "mirror {}: the transfer failed: {}",
            m.name,
            m.message.as_deref().unwrap_or("see the daemon log")
        )));
    }
    Ok(m)
}

pub fn run(c: &Client, out: &Out, cmd: MirrorCmd) -> Result<(), Failure> {
    match cmd {
        MirrorCmd::Create {
            source,
            dest_pool,
            group,
            every,
            keep,
            limit,
            sync,
            etcd,
            failover_ttl,
            failover_mount,
            no_wait,
        } => {
            let limit = limit
                .as_deref()
                .map(|l| crate::units::parse_size(l).map_err(|e| Failure::usage(format!("--limit {l}: {e}"))))
                .transpose()?;
            let req = CreateMirror {
                source,
                group,
                dest_pool,
                every_seconds: every.as_deref().map(parse_every).transpose()?,
                keep,
                limit_bytes_per_second: limit,
                sync,
                failover: match etcd.is_empty() {
                    true => None,
                    false => Some(CreateFailover {
                        etcd,
                        ttl_seconds: failover_ttl
                            .as_deref()
                            .map(|t| {
                                crate::units::parse_interval(t)
                                    .map_err(|e| Failure::usage(format!("--failover-ttl {e}")))
                            })
                            .transpose()?,
                        mount_dir: failover_mount,
                    }),
                },
            };
            let mut m: MirrorInfo = c.send("POST", "/v1/mirrors", &req)?;
            if !no_wait {
                // The first transfer may not have been picked up yet: wait for it to show.
                let p = path(&m.name)?;
                for _ in 0..50 {
                    if m.state != "uninitialized" {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    m = c.get(&p)?;
                }
                m = wait(c, &p, m)?;
            }
            out.show(&m, print_info);
        }
        MirrorCmd::Update { mirror, no_wait } => {
            let p = path(&mirror)?;
            let mut m: MirrorInfo = c.send("POST", &p, &MirrorAction { action: "update".into() })?;
            if !no_wait {
                m = wait(c, &p, m)?;
            }
            out.show(&m, print_info);
        }
        MirrorCmd::Break { mirror } => act(c, out, &mirror, "break")?,
        MirrorCmd::Resync { mirror } => act(c, out, &mirror, "resync")?,
        MirrorCmd::Reverse { mirror } => act(c, out, &mirror, "reverse")?,
        MirrorCmd::Pause { mirror } => act(c, out, &mirror, "pause")?,
        MirrorCmd::Resume { mirror } => act(c, out, &mirror, "resume")?,
        MirrorCmd::Delete { mirror } => {
            let d: Done = c.call("DELETE", &path(&mirror)?, None::<&()>)?;
            out.show(&d, |d| println!("deleted mirror {} (its target volumes stay, writable)", d.target));
        }
        MirrorCmd::List => {
            let v: Vec<MirrorInfo> = c.get("/v1/mirrors")?;
            out.show(&v, |v| {
                println!("{:<24} {:<14} {:<22} {:<8} TRANSFER", "MIRROR", "STATE", "SOURCE", "LAG");
                v.iter().for_each(print_line);
            });
        }
        MirrorCmd::Show { mirror } => {
            let m: MirrorInfo = c.get(&path(&mirror)?)?;
            out.show(&m, print_info);
        }
    }
    Ok(())
}

fn act(c: &Client, out: &Out, mirror: &str, action: &str) -> Result<(), Failure> {
    let m: MirrorInfo = c.send("POST", &path(mirror)?, &MirrorAction { action: action.into() })?;
    out.show(&m, print_info);
    Ok(())
}
