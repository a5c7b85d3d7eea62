//! Snapshot policies: per volume, schedules with retention ("hourly every 1 h, keep 24").
//!
//! The daemon checks every second. A schedule is due when its newest snapshot (named
//! `auto-NAME-YYYYMMDD-HHMMSS`) is older than its interval, or it has none; then it takes one
//! and deletes its oldest beyond `keep` (a snapshot a clone depends on is kept, with a
//! warning, until the clone is split or deleted). Policies live in the state file.

use super::{ApiError, Daemon};
use crate::utc_compact;
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use strata_api::{PolicyInfo, Schedule};
use strata_engine::ErrorKind;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PolicyRecord {
    /// POOL/VOLUME
    pub volume: String,
    pub schedules: Vec<Schedule>,
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

impl Daemon {
    pub(crate) fn policy(&self, p: &str, v: &str) -> Result<PolicyInfo, ApiError> {
        self.pool(p)?.volume_id(v)?;
        let volume = format!("{p}/{v}");
        let schedules = self.policies.lock().expect("policies").get(&volume).cloned().unwrap_or_default();
        Ok(PolicyInfo { volume, schedules })
    }

    pub(crate) fn set_policy(&self, p: &str, v: &str, schedules: Vec<Schedule>) -> Result<PolicyInfo, ApiError> {
        validate(&schedules)?;
        self.pool(p)?.volume_id(v)?;
        let volume = format!("{p}/{v}");
        let _g = self.admin.lock().expect("admin");
        self.policies.lock().expect("policies").insert(volume.clone(), schedules.clone());
        self.save_state()?;
        tracing::info!(volume, schedules = ?schedules, "snapshot policy set");
        Ok(PolicyInfo { volume, schedules })
    }

    pub(crate) fn clear_policy(&self, p: &str, v: &str) -> Result<PolicyInfo, ApiError> {
        let volume = format!("{p}/{v}");
        let _g = self.admin.lock().expect("admin");
        self.policies.lock().expect("policies").remove(&volume);
        self.save_state()?;
        Ok(PolicyInfo { volume, schedules: Vec::new() })
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
    let taken = super::snapshots::create(d, pool, &[vol.to_string()], &name, None);
    record(d, s, "POST", &format!("/v1/pools/{pool}/volumes/{vol}/snapshots/{name}"), &taken);
    if let Err(e) = &taken {
        let text = format!("schedule {}: snapshot {name} not taken: {} ({})", s.name, e.message, e.hint);
        d.events.record("warning", "policy.failed", Some(pool), Some(vol), text);
    }
    taken?;
    let mut expired = Vec::new();
    mine.push((u64::MAX, now_ns, name.clone()));
    let excess = mine.len().saturating_sub(s.keep as usize);
    let _g = d.admin.lock().expect("admin");
    for (_, _, old) in mine.iter().take(excess) {
        match p.delete_snapshot(vol, old) {
            Ok(()) => {
                expired.push(old.clone());
                tracing::info!(pool, volume = vol, snapshot = old, "policy: expired snapshot deleted");
                record(d, s, "DELETE", &format!("/v1/pools/{pool}/volumes/{vol}/snapshots/{old}"), &Ok(()));
            }
            Err(e) if e.kind() == ErrorKind::Busy => {
                tracing::warn!(pool, volume = vol, snapshot = old, "policy: kept past retention: {e}")
            }
            Err(e) => return Err(e.into()),
        }
    }
    let text = match expired.len() {
        0 => format!("schedule {}: snapshot {name} taken", s.name),
        _ => format!("schedule {}: snapshot {name} taken; expired deleted: {}", s.name, expired.join(", ")),
    };
    d.events.record("info", "policy.snapshot", Some(pool), Some(vol), text);
    Ok(())
}

/// The daemon's own changes go into the history too, with the schedule as the caller.
fn record<T>(d: &Daemon, s: &Schedule, method: &str, target: &str, r: &Result<T, ApiError>) {
    use strata_engine::Clock;
    d.history.record(&strata_api::HistoryEntry {
        time_ns: crate::SystemClock.now_ns(),
        caller: format!("daemon (snapshot policy {})", s.name),
        operation: format!("{method} /v1/pools/{{pool}}/volumes/{{volume}}/snapshots/{{snapshot}}"),
        target: target.into(),
        request: None,
        status: if r.is_ok() { 200 } else { 500 },
        result: match r {
            Ok(_) => "ok".into(),
            Err(e) => e.message.clone(),
        },
    });
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
                if self.unavailable.lock().expect("unavailable").contains_key(pool) {
                    continue; // its schedules resume when the pool is back
                }
                for s in &schedules {
                    if let Err(e) = run_schedule(self, pool, vol, s, now_ns) {
                        tracing::warn!(volume = spec, schedule = s.name, "policy: {}", e.message);
                    }
                }
            }
        }
    }
}
