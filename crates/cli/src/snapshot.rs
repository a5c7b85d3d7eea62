//! `strata snapshot ...`, `strata restore`, `strata clone ...`: clients of the snapshot
//! endpoints (docs/api.md).

use crate::client::Client;
use crate::units::human;
use clap::Subcommand;
use serde_json::{json, Value};
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

/// NAME=EVERY:KEEP → JSON schedule.
fn parse_schedule(s: &str) -> Result<Value, String> {
    let bad = |why: &str| format!("schedule {s:?}: {why} (expected NAME=EVERY:KEEP, e.g. hourly=1h:24)");
    let (name, rest) = s.split_once('=').ok_or_else(|| bad("no '='"))?;
    let (every, keep) = rest.split_once(':').ok_or_else(|| bad("no ':'"))?;
    let (num, unit) = every.split_at(every.find(|c: char| !c.is_ascii_digit()).unwrap_or(every.len()));
    let n: u64 = num.parse().map_err(|_| bad("EVERY is not a number with a unit"))?;
    let mult = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err(bad("EVERY's unit must be s, m, h or d")),
    };
    let keep: u32 = keep.parse().map_err(|_| bad("KEEP is not a number"))?;
    Ok(json!({"name": name, "every_seconds": n.saturating_mul(mult), "keep": keep}))
}

fn print_policy(v: &Value) {
    let s = v["schedules"].as_array().cloned().unwrap_or_default();
    if s.is_empty() {
        println!("{}: no snapshot schedules", v["volume"].as_str().unwrap_or("?"));
    }
    for x in s {
        println!(
            "{}: {} every {} s, keep {}",
            v["volume"].as_str().unwrap_or("?"),
            x["name"].as_str().unwrap_or("?"),
            x["every_seconds"],
            x["keep"]
        );
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
    Split { volume: String },
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

fn print_snapshots(rows: &[Value]) {
    println!(
        "{:<36} {:>8} {:>10} {:>10} {:>10}  {:<20} {}",
        "SNAPSHOT", "TXG", "REFER", "WRITTEN", "UNIQUE", "CREATED", "CLONES"
    );
    for s in rows {
        let created = s["created_ns"].as_u64().unwrap_or(0) / 1_000_000_000;
        let clones: Vec<&str> = s["clones"].as_array().into_iter().flatten().filter_map(|c| c.as_str()).collect();
        println!(
            "{:<36} {:>8} {:>10} {:>10} {:>10}  {:<20} {}",
            format!(
                "{}/{}@{}",
                s["pool"].as_str().unwrap_or("?"),
                s["volume"].as_str().unwrap_or("?"),
                s["name"].as_str().unwrap_or("?")
            ),
            s["txg"],
            human(s["referenced_bytes"].as_u64().unwrap_or(0)),
            human(s["written_bytes"].as_u64().unwrap_or(0)),
            human(s["unique_bytes"].as_u64().unwrap_or(0)),
            utc(created),
            if clones.is_empty() { "-".into() } else { clones.join(",") }
        );
    }
}

pub fn run_snapshot(cmd: SnapshotCmd, c: &Client, json_out: bool) -> Result<(), String> {
    let out = |v: &Value, f: &dyn Fn(&Value)| if json_out { println!("{v}") } else { f(v) };
    match cmd {
        SnapshotCmd::Create { snapshot, group, quiesce } => {
            let (p, v, name) = split_snapshot(&snapshot)?;
            let r = if group.is_empty() {
                c.call(
                    "POST",
                    &format!("/v1/pools/{p}/volumes/{v}/snapshots"),
                    Some(&json!({"name": name, "quiesce": quiesce})),
                )?
            } else {
                let mut vols = vec![v.to_string()];
                vols.extend(group.iter().map(|g| g.strip_prefix(&format!("{p}/")).unwrap_or(g).to_string()));
                c.call(
                    "POST",
                    &format!("/v1/pools/{p}/snapshots"),
                    Some(&json!({"name": name, "volumes": vols, "quiesce": quiesce})),
                )?
            };
            out(&r, &|r| {
                let rows = r.as_array().cloned().unwrap_or_else(|| vec![r.clone()]);
                for s in &rows {
                    println!("created snapshot {p}/{}@{name} (txg {})", s["volume"].as_str().unwrap_or("?"), s["txg"]);
                }
            });
        }
        SnapshotCmd::List { of } => {
            let paths: Vec<String> = match of.as_deref() {
                Some(spec) => match spec.split_once('/') {
                    Some((p, v)) => vec![format!("/v1/pools/{p}/volumes/{v}/snapshots")],
                    None => vec![format!("/v1/pools/{spec}/snapshots")],
                },
                None => c
                    .call("GET", "/v1/pools", None)?
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p["name"].as_str().map(|n| format!("/v1/pools/{n}/snapshots")))
                    .collect(),
            };
            let mut rows = Vec::new();
            for path in paths {
                rows.extend(c.call("GET", &path, None)?.as_array().cloned().unwrap_or_default());
            }
            out(&Value::Array(rows.clone()), &|_| print_snapshots(&rows));
        }
        SnapshotCmd::Show { snapshot } => {
            let (p, v, name) = split_snapshot(&snapshot)?;
            let r = c.call("GET", &format!("/v1/pools/{p}/volumes/{v}/snapshots/{name}"), None)?;
            out(&r, &|r| print_snapshots(std::slice::from_ref(r)));
        }
        SnapshotCmd::Policy(cmd) => {
            let (method, volume, body) = match cmd {
                PolicyCmd::Set { volume, schedules } => {
                    let s: Result<Vec<Value>, String> = schedules.iter().map(|s| parse_schedule(s)).collect();
                    ("PUT", volume, Some(json!({"schedules": s?})))
                }
                PolicyCmd::Show { volume } => ("GET", volume, None),
                PolicyCmd::Clear { volume } => ("DELETE", volume, None),
            };
            let (p, v) = crate::split(&volume)?;
            let r = c.call(method, &format!("/v1/pools/{p}/volumes/{v}/policy"), body.as_ref())?;
            out(&r, &print_policy);
        }
        SnapshotCmd::Delete { snapshot } => {
            let (p, v, name) = split_snapshot(&snapshot)?;
            let r = c.call("DELETE", &format!("/v1/pools/{p}/volumes/{v}/snapshots/{name}"), None)?;
            out(&r, &|_| println!("deleted snapshot {snapshot}"));
        }
    }
    Ok(())
}

pub fn run_restore(
    snapshot: &str,
    file: Option<&str>,
    group: &[String],
    c: &Client,
    json_out: bool,
) -> Result<(), String> {
    let (p, v, name) = split_snapshot(snapshot)?;
    let prefix = format!("{p}/");
    let group: Vec<&str> = group.iter().map(|g| g.strip_prefix(&prefix).unwrap_or(g)).collect();
    let r = c.call(
        "POST",
        &format!("/v1/pools/{p}/volumes/{v}/restore"),
        Some(&json!({"snapshot": name, "file": file, "group": (!group.is_empty()).then_some(group.clone())})),
    )?;
    if json_out {
        println!("{r}");
    } else if let Some(f) = file {
        println!(
            "restored {f} of {p}/{v} from snapshot {name}{}: {} shared, {} copied, {} unchanged",
            if r["created"] == true { " (created)" } else { "" },
            human(r["shared_bytes"].as_u64().unwrap_or(0)),
            human(r["copied_bytes"].as_u64().unwrap_or(0)),
            human(r["unchanged_bytes"].as_u64().unwrap_or(0))
        );
    } else {
        let all: Vec<String> = std::iter::once(v).chain(group.iter().copied()).map(|x| format!("{p}/{x}")).collect();
        println!("restored {} to snapshot {name} (later snapshots kept)", all.join(", "));
    }
    Ok(())
}

pub fn run_clone(cmd: CloneCmd, c: &Client, json_out: bool) -> Result<(), String> {
    match cmd {
        CloneCmd::Create { origin, name, group } => {
            let (p, v, snap) = split_snapshot(&origin)?;
            let new = match name.split_once('/') {
                Some((np, nv)) if np == p => nv.to_string(),
                Some((np, _)) => return Err(format!("a clone lives in its origin's pool ({p}), not {np}")),
                None => name.clone(),
            };
            let mut more = Vec::new();
            for g in &group {
                let (gv, gn) = g
                    .split_once(':')
                    .ok_or_else(|| format!("--group {g:?}: give VOLUME:NEW (e.g. pgwal:pgwal-test)"))?;
                more.push(json!({"origin": format!("{gv}@{snap}"), "name": gn}));
            }
            let r = c.call(
                "POST",
                &format!("/v1/pools/{p}/clones"),
                Some(&json!({"origin": format!("{v}@{snap}"), "name": new,
                             "group": (!more.is_empty()).then_some(more)})),
            )?;
            if json_out {
                println!("{r}");
            } else {
                let rows = r.as_array().cloned().unwrap_or_else(|| vec![r.clone()]);
                for x in rows {
                    println!(
                        "created clone {p}/{} of {p}/{}",
                        x["name"].as_str().unwrap_or("?"),
                        x["origin"].as_str().unwrap_or("?")
                    );
                }
            }
        }
        CloneCmd::Split { volume } => {
            let (p, v) = crate::split(&volume)?;
            let r = c.call("POST", &format!("/v1/pools/{p}/volumes/{v}/split"), None)?;
            if json_out {
                println!("{r}");
            } else {
                println!(
                    "split {volume} from its origin: {} copied; it no longer depends on any snapshot",
                    human(r["copied_bytes"].as_u64().unwrap_or(0))
                );
            }
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
        assert_eq!(parse_schedule("hourly=1h:24").unwrap()["every_seconds"], 3600);
        assert_eq!(parse_schedule("fast=2:3").unwrap()["keep"], 3);
        assert!(parse_schedule("x=1w:3").is_err());
        assert!(parse_schedule("x=1h").is_err());
        assert!(parse_schedule("x=h:1").is_err());
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_795_000_000), "2026-11-18 11:06:40");
        assert_eq!(strata_daemon::utc_compact(1_795_000_000), "20261118-110640");
    }
}
