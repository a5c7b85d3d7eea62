//! `strata snapshot ...`, `strata restore`, `strata clone ...`: clients of the snapshot
//! endpoints (docs/api.md).

use crate::client::{seg, Client, Failure};
use crate::units::human;
use crate::Out;
use clap::Subcommand;
use strata_api::*;
use strata_daemon::utc;

#[derive(Subcommand)]
pub enum SnapshotCmd {
    /// Take snapshot POOL/VOLUME@NAME (constant time at any size). With --group, the same
    /// name is taken of every listed volume in one transaction group: a database's data and
    /// log volumes stay consistent with each other.
    Create {
        snapshot: String,
        /// More volumes of the same pool for a group snapshot, e.g. --group pgwal,pgarchive.
        #[arg(long, value_delimiter = ',')]
        group: Vec<String>,
        /// Quiesce a database around the snapshot: postgresql://USER@/DB?host=SOCKDIR&port=N
        /// (CHECKPOINT + backup start/stop) or mysql://USER:PASS@HOST:PORT/ (FLUSH TABLES WITH
        /// READ LOCK, released after). If it cannot, no snapshot is taken.
        #[arg(long)]
        quiesce: Option<String>,
    },
    /// List snapshots of a pool or of one volume (POOL or POOL/VOLUME; all pools if omitted).
    List { of: Option<String> },
    /// Show one snapshot.
    Show { snapshot: String },
    /// Delete a snapshot, freeing exactly the space only it holds.
    Delete { snapshot: String },
    /// Scheduled snapshots with retention, run by the daemon.
    #[command(subcommand)]
    Policy(PolicyCmd),
}

#[derive(Subcommand)]
pub enum PolicyCmd {
    /// Set the schedules of POOL/VOLUME, e.g. `hourly=1h:24 daily=1d:7` (NAME=EVERY:KEEP;
    /// EVERY in s, m, h or d). Snapshots are named auto-NAME-YYYYMMDD-HHMMSS.
    Set {
        volume: String,
        #[arg(required = true)]
        schedules: Vec<String>,
    },
    /// Show the schedules of POOL/VOLUME.
    Show { volume: String },
    /// Remove every schedule of POOL/VOLUME (its snapshots stay).
    Clear { volume: String },
}

/// NAME=EVERY:KEEP → a schedule.
fn parse_schedule(s: &str) -> Result<Schedule, String> {
    let bad = |why: &str| format!("schedule {s:?}: {why} (expected NAME=EVERY:KEEP, e.g. hourly=1h:24)");
    let (name, rest) = s.split_once('=').ok_or_else(|| bad("no '='"))?;
    let (every, keep) = rest.split_once(':').ok_or_else(|| bad("no ':'"))?;
    let every_seconds = crate::units::parse_interval(every).map_err(|e| bad(&format!("EVERY {e}")))?;
    let keep: u32 = keep.parse().map_err(|_| bad("KEEP is not a number"))?;
    Ok(Schedule { name: name.into(), every_seconds, keep })
}

fn print_policy(v: &PolicyInfo) {
    if v.schedules.is_empty() {
        println!("{}: no snapshot schedules", v.volume);
    }
    for x in &v.schedules {
        println!("{}: {} every {} s, keep {}", v.volume, x.name, x.every_seconds, x.keep);
    }
}

#[derive(Subcommand)]
pub enum CloneCmd {
    /// Make a writable volume POOL/NEW from POOL/VOLUME@SNAPSHOT, sharing all its blocks.
    Create {
        origin: String,
        name: String,
        /// More clones in the same txg from the same snapshot name, VOLUME:NEW each (the
        /// other volumes of a group snapshot), e.g. --group pgwal:pgwal-test.
        #[arg(long, value_delimiter = ',')]
        group: Vec<String>,
    },
    /// Copy what clone POOL/VOLUME still shares with its origin, so the origin snapshot can
    /// be deleted (work and space proportional to what is shared).
    Split {
        volume: String,
        /// Print the split's job and return (`strata job wait ID` follows it).
        #[arg(long)]
        no_wait: bool,
    },
}

/// POOL/VOLUME@NAME → (pool, volume, name).
pub fn split_snapshot(spec: &str) -> Result<(&str, &str, &str), String> {
    let bad = || format!("{spec:?} is not POOL/VOLUME@SNAPSHOT (e.g. default/pgdata@before-upgrade)");
    let (pv, name) = spec.split_once('@').ok_or_else(bad)?;
    let (p, v) = pv.split_once('/').ok_or_else(bad)?;
    if p.is_empty() || v.is_empty() || name.is_empty() || v.contains('/') {
        return Err(bad());
    }
    Ok((p, v, name))
}

fn print_snapshots(rows: &[SnapshotInfo]) {
    println!(
        "{:<36} {:>8} {:>10} {:>10} {:>10}  {:<20} CLONES",
        "SNAPSHOT", "TXG", "REFER", "WRITTEN", "UNIQUE", "CREATED"
    );
    for s in rows {
        println!(
            "{:<36} {:>8} {:>10} {:>10} {:>10}  {:<20} {}",
            format!("{}/{}@{}", s.pool, s.volume, s.name),
            s.txg,
            human(s.referenced_bytes),
            human(s.written_bytes),
            human(s.unique_bytes),
            utc(s.created_ns / 1_000_000_000),
            if s.clones.is_empty() { "-".into() } else { s.clones.join(",") }
        );
    }
}

pub fn run_snapshot(cmd: SnapshotCmd, c: &Client, out: &Out) -> Result<(), Failure> {
    match cmd {
        SnapshotCmd::Create { snapshot, group, quiesce } => {
            let (p, v, name) = split_snapshot(&snapshot)?;
            let taken: Vec<SnapshotInfo> = if group.is_empty() {
                let one: SnapshotInfo = c.send(
                    "POST",
                    &format!("/v1/pools/{}/volumes/{}/snapshots", seg(p), seg(v)),
                    &CreateSnapshot { name: name.into(), quiesce },
                )?;
                vec![one]
            } else {
                let mut vols = vec![v.to_string()];
                vols.extend(group.iter().map(|g| g.strip_prefix(&format!("{p}/")).unwrap_or(g).to_string()));
                c.send(
                    "POST",
                    &format!("/v1/pools/{}/snapshots", seg(p)),
                    &CreateGroupSnapshot { name: name.into(), volumes: vols, quiesce },
                )?
            };
            let shown = if taken.len() == 1 { serde_json::to_value(&taken[0]) } else { serde_json::to_value(&taken) };
            out.show(&shown.map_err(|e| Failure::other(e.to_string()))?, |_| {
                for s in &taken {
                    println!("created snapshot {p}/{}@{name} (txg {})", s.volume, s.txg);
                    if let Some(w) = &s.warning {
                        println!("warning: {w}");
                    }
                }
            });
        }
        SnapshotCmd::List { of } => {
            let paths: Vec<String> = match of.as_deref() {
                Some(spec) => match spec.split_once('/') {
                    Some((p, v)) => vec![format!("/v1/pools/{}/volumes/{}/snapshots", seg(p), seg(v))],
                    None => vec![format!("/v1/pools/{}/snapshots", seg(spec))],
                },
                None => {
                    let pools: Vec<PoolInfo> = c.get("/v1/pools")?;
                    pools
                        .iter()
                        .filter(|p| p.status.is_some())
                        .map(|p| format!("/v1/pools/{}/snapshots", seg(&p.name)))
                        .collect()
                }
            };
            let mut rows: Vec<SnapshotInfo> = Vec::new();
            for path in paths {
                rows.extend(c.get::<Vec<SnapshotInfo>>(&path)?);
            }
            out.show(&rows, |rows| print_snapshots(rows));
        }
        SnapshotCmd::Show { snapshot } => {
            let (p, v, name) = split_snapshot(&snapshot)?;
            let s: SnapshotInfo = c.get(&format!("/v1/pools/{}/volumes/{}/snapshots/{}", seg(p), seg(v), seg(name)))?;
            out.show(&s, |s| print_snapshots(std::slice::from_ref(s)));
        }
        SnapshotCmd::Policy(cmd) => {
            let r = match cmd {
                PolicyCmd::Set { volume, schedules } => {
                    let s: Result<Vec<Schedule>, String> = schedules.iter().map(|s| parse_schedule(s)).collect();
                    let (p, v) = crate::volume::split(&volume)?;
                    let path = format!("/v1/pools/{}/volumes/{}/policy", seg(p), seg(v));
                    c.send::<_, PolicyInfo>("PUT", &path, &SetPolicy { schedules: s? })?
                }
                PolicyCmd::Show { volume } => {
                    let (p, v) = crate::volume::split(&volume)?;
                    c.get::<PolicyInfo>(&format!("/v1/pools/{}/volumes/{}/policy", seg(p), seg(v)))?
                }
                PolicyCmd::Clear { volume } => {
                    let (p, v) = crate::volume::split(&volume)?;
                    let path = format!("/v1/pools/{}/volumes/{}/policy", seg(p), seg(v));
                    c.call::<(), PolicyInfo>("DELETE", &path, None)?
                }
            };
            out.show(&r, print_policy);
        }
        SnapshotCmd::Delete { snapshot } => {
            let (p, v, name) = split_snapshot(&snapshot)?;
            let path = format!("/v1/pools/{}/volumes/{}/snapshots/{}", seg(p), seg(v), seg(name));
            let d: Done = c.call::<(), Done>("DELETE", &path, None)?;
            out.show(&d, |_| println!("deleted snapshot {snapshot}"));
        }
    }
    Ok(())
}

pub fn run_restore(snapshot: &str, file: Option<&str>, group: &[String], c: &Client, out: &Out) -> Result<(), Failure> {
    let (p, v, name) = split_snapshot(snapshot)?;
    let prefix = format!("{p}/");
    let group: Vec<String> = group.iter().map(|g| g.strip_prefix(&prefix).unwrap_or(g).to_string()).collect();
    if let Some(f) = file {
        if !group.is_empty() {
            return Err(Failure::usage("--file and --group together: restore one file of one volume"));
        }
        let r: RestoredFile = c.send(
            "POST",
            &format!("/v1/pools/{}/volumes/{}/restore-file", seg(p), seg(v)),
            &RestoreFileRequest { snapshot: name.into(), file: f.into() },
        )?;
        out.show(&r, |r| {
            println!(
                "restored {f} of {p}/{v} from snapshot {name}{}: {} shared, {} copied, {} unchanged",
                if r.created { " (created)" } else { "" },
                human(r.shared_bytes),
                human(r.copied_bytes),
                human(r.unchanged_bytes)
            )
        });
        return Ok(());
    }
    let r: Vec<VolumeInfo> = c.send(
        "POST",
        &format!("/v1/pools/{}/volumes/{}/restore", seg(p), seg(v)),
        &RestoreRequest { snapshot: name.into(), group: group.clone() },
    )?;
    let shown = if r.len() == 1 { serde_json::to_value(&r[0]) } else { serde_json::to_value(&r) };
    out.show(&shown.map_err(|e| Failure::other(e.to_string()))?, |_| {
        let all: Vec<String> =
            std::iter::once(v.to_string()).chain(group.iter().cloned()).map(|x| format!("{p}/{x}")).collect();
        println!("restored {} to snapshot {name} (later snapshots kept)", all.join(", "));
    });
    Ok(())
}

pub fn run_clone(cmd: CloneCmd, c: &Client, out: &Out) -> Result<(), Failure> {
    match cmd {
        CloneCmd::Create { origin, name, group } => {
            let (p, v, snap) = split_snapshot(&origin)?;
            let new = match name.split_once('/') {
                Some((np, nv)) if np == p => nv.to_string(),
                Some((np, _)) => {
                    return Err(Failure::usage(format!("a clone lives in its origin's pool ({p}), not {np}")))
                }
                None => name.clone(),
            };
            let mut more = Vec::new();
            for g in &group {
                let (gv, gn) = g
                    .split_once(':')
                    .ok_or_else(|| Failure::usage(format!("--group {g:?}: give VOLUME:NEW (e.g. pgwal:pgwal-test)")))?;
                more.push(CloneOne { origin: format!("{gv}@{snap}"), name: gn.into() });
            }
            let req = CloneRequest { origin: format!("{v}@{snap}"), name: new, group: more };
            let r: Vec<VolumeInfo> = c.send("POST", &format!("/v1/pools/{}/clones", seg(p)), &req)?;
            let shown = if r.len() == 1 { serde_json::to_value(&r[0]) } else { serde_json::to_value(&r) };
            out.show(&shown.map_err(|e| Failure::other(e.to_string()))?, |_| {
                for x in &r {
                    println!("created clone {p}/{} of {p}/{}", x.name, x.origin.as_deref().unwrap_or("?"));
                }
            });
        }
        CloneCmd::Split { volume, no_wait } => {
            let (p, v) = crate::volume::split(&volume)?;
            let j: strata_api::JobInfo =
                c.call::<(), _>("POST", &format!("/v1/pools/{}/volumes/{}/split", seg(p), seg(v)), None)?;
            if no_wait {
                crate::job::started(out, &j);
                return Ok(());
            }
            let r: SplitResult = crate::job::result(&crate::job::follow(c, j)?)?;
            out.show(&r, |r| {
                println!(
                    "split {volume} from its origin: {} copied; it no longer depends on any snapshot",
                    human(r.copied_bytes)
                )
            });
        }
    }
    Ok(())
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_specs_and_dates() {
        assert_eq!(split_snapshot("p/v@s").unwrap(), ("p", "v", "s"));
        assert!(split_snapshot("p/v").is_err());
        assert!(split_snapshot("p@s").is_err());
        assert!(split_snapshot("p/v@").is_err());
        assert!(split_snapshot("p/a/b@s").is_err());
        assert_eq!(parse_schedule("hourly=1h:24").unwrap().every_seconds, 3600);
        assert_eq!(parse_schedule("fast=2:3").unwrap().keep, 3);
        assert!(parse_schedule("x=1w:3").is_err());
        assert!(parse_schedule("x=1h").is_err());
        assert!(parse_schedule("x=h:1").is_err());
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_795_000_000), "2026-11-18 11:06:40");
        assert_eq!(strata_daemon::utc_compact(1_795_000_000), "20261118-110640");
    }
}
