//! Snapshot policies: per volume, schedules with retention ("hourly every 1 h, keep 24").
//!
//! The daemon checks every second. A schedule is due when its newest snapshot (named
//! `auto-NAME-YYYYMMDD-HHMMSS`) is older than its interval, or it has none; then it takes one
//! and deletes its oldest beyond `keep` (a snapshot a clone depends on is kept, with a
//! warning, until the clone is split or deleted). Policies live in the state file.

use crate::api::{body, ApiError, Reply};
use crate::{utc_compact, Daemon};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use strata_engine::ErrorKind;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    pub name: String,
    pub every_seconds: u64,
    pub keep: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PolicyRecord {
    /// POOL/VOLUME
    pub volume: String,
    pub schedules: Vec<Schedule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetPolicy {
    schedules: Vec<Schedule>,
}

fn validate(s: &[Schedule]) -> Result<(), ApiError> {
    for (i, a) in s.iter().enumerate() {
        let ok_name = !a.name.is_empty()
            && a.name.len() <= 32
            && a.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !ok_name {
            return Err(ApiError::bad_request(
                format!("schedule name {:?}", a.name),
                "use 1-32 lowercase letters, digits or '_' (e.g. hourly)",
            ));
        }
        if a.every_seconds == 0 || a.keep == 0 || a.keep > 100_000 {
            return Err(ApiError::bad_request(
                format!("schedule {}: every {} s, keep {}", a.name, a.every_seconds, a.keep),
                "every_seconds must be at least 1 and keep 1 to 100000",
            ));
        }
        if s[..i].iter().any(|b| b.name == a.name) {
            return Err(ApiError::bad_request(format!("schedule {} given twice", a.name), "name each once"));
        }
    }
    Ok(())
}

fn policy_json(spec: &str, s: &[Schedule]) -> Value {
    json!({"volume": spec, "schedules": s})
}

/// GET/PUT/DELETE /v1/pools/{p}/volumes/{v}/policy.
pub(crate) fn route(d: &Daemon, method: &str, p: &str, v: &str, req: &mut tiny_http::Request) -> Reply {
    let spec = format!("{p}/{v}");
    match method {
        "GET" => {
            d.pool(p)?.volume_id(v)?;
            let s = d.policies.lock().expect("policies").get(&spec).cloned().unwrap_or_default();
            Ok((200, policy_json(&spec, &s)))
        }
        "PUT" => {
            let b: SetPolicy = body(req)?;
            validate(&b.schedules)?;
            d.pool(p)?.volume_id(v)?;
            let _g = d.admin.lock().expect("admin");
            d.policies.lock().expect("policies").insert(spec.clone(), b.schedules.clone());
            d.save_state()?;
            tracing::info!(volume = spec, schedules = ?b.schedules, "snapshot policy set");
            Ok((200, policy_json(&spec, &b.schedules)))
        }
        "DELETE" => {
            let _g = d.admin.lock().expect("admin");
            d.policies.lock().expect("policies").remove(&spec);
            d.save_state()?;
            Ok((200, policy_json(&spec, &[])))
        }
        _ => Err(ApiError::not_found(format!("no endpoint {method} .../policy"), "GET, PUT or DELETE")),
    }
}

fn run_schedule(d: &Daemon, pool: &str, vol: &str, s: &Schedule, now_ns: u64) -> Result<(), ApiError> {
    let p = d.pool(pool)?;
    let prefix = format!("auto-{}-", s.name);
    let mut mine: Vec<(u64, u64, String)> = p
        .snapshots(Some(vol))?
        .into_iter()
        .filter(|i| i.name.starts_with(&prefix))
        .map(|i| (i.txg, i.created_ns, i.name))
        .collect();
    mine.sort();
    let due = mine.last().is_none_or(|(_, c, _)| now_ns.saturating_sub(*c) >= s.every_seconds * 1_000_000_000);
    if !due {
        return Ok(());
    }
    let base = format!("{prefix}{}", utc_compact(now_ns / 1_000_000_000));
    let mut name = base.clone();
    let mut n = 1;
    while mine.iter().any(|(_, _, m)| *m == name) {
        n += 1;
        name = format!("{base}-{n}");
    }
    crate::snapshots::create(d, pool, &[vol.to_string()], &name, None)?;
    mine.push((u64::MAX, now_ns, name));
    let excess = mine.len().saturating_sub(s.keep as usize);
    let _g = d.admin.lock().expect("admin");
    for (_, _, old) in mine.iter().take(excess) {
        match p.delete_snapshot(vol, old) {
            Ok(()) => tracing::info!(pool, volume = vol, snapshot = old, "policy: expired snapshot deleted"),
            Err(e) if e.kind() == ErrorKind::Busy => {
                tracing::warn!(pool, volume = vol, snapshot = old, "policy: kept past retention: {e}")
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

impl Daemon {
    /// Run due schedules every second until the daemon stops.
    pub(crate) fn policy_loop(&self) {
        while !self.stopping.load(Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_secs(1));
            let all: Vec<(String, Vec<Schedule>)> =
                self.policies.lock().expect("policies").iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let now_ns =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
            for (spec, schedules) in all {
                let Some((pool, vol)) = spec.split_once('/') else { continue };
                for s in &schedules {
                    if let Err(e) = run_schedule(self, pool, vol, s, now_ns) {
                        tracing::warn!(volume = spec, schedule = s.name, "policy: {}", e.message);
                    }
                }
            }
        }
    }
}
