//! The event history: what happened to the storage that an operator should be able to look
//! back at — mirror transfers and failures, breaks and resyncs, scrubs, device state
//! changes, requests refused. `strata events [--follow]`, `GET /v1/events`.
//!
//! Bounded and persisted: the newest `EVENTS_MAX` events are kept in memory and appended to
//! `DATA_DIR/events.jsonl` (one JSON object per line, written through, not fsynced: a
//! crash may lose the last few, never the pools' data). At start the file's newest
//! `EVENTS_MAX` lines are read back; when the file holds twice that many it is rewritten
//! with the newest (atomically: write, fsync, rename). Ids only grow, across restarts, so a
//! follower asks for "after id N".

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Mutex;
use strata_api::EventInfo;

/// Events kept. 10,000: months of a busy mirror schedule's transfers at a few hundred bytes
/// each (~3 MiB on disk at most, twice that before a rewrite).
pub(crate) const EVENTS_MAX: usize = 10_000;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stored {
    id: u64,
    time_ns: u64,
    severity: String,
    kind: String,
    #[serde(default)]
    pool: Option<String>,
    #[serde(default)]
    target: Option<String>,
    message: String,
}

pub(crate) struct EventLog {
    path: Option<PathBuf>,
    max: usize,
    inner: Mutex<Inner>,
}

struct Inner {
    events: VecDeque<Stored>,
    next_id: u64,
    /// Lines in the file (to know when to rewrite it).
    lines: usize,
    file: Option<std::fs::File>,
}

impl EventLog {
    /// The history of `DATA_DIR/events.jsonl` (created if missing); `max` events kept.
    pub(crate) fn open(path: Option<PathBuf>, max: usize) -> EventLog {
        let mut events = VecDeque::new();
        let mut lines = 0;
        if let Some(p) = &path {
            if let Ok(f) = std::fs::File::open(p) {
                for line in std::io::BufReader::new(f).lines() {
                    let Ok(line) = line else { break };
                    lines += 1;
                    // A torn last line (a crash while appending) is skipped.
                    if let Ok(e) = serde_json::from_str::<Stored>(&line) {
                        events.push_back(e);
                        if events.len() > max {
                            events.pop_front();
                        }
                    }
                }
            }
        }
        let next_id = events.back().map_or(1, |e| e.id + 1);
        let mut file = path.as_ref().and_then(|p| {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(p).ok()
        });
        // A line torn by a crash is ended, so the next event starts a line of its own.
        let torn =
            path.as_ref().and_then(|p| std::fs::read(p).ok()).is_some_and(|b| b.last().is_some_and(|&c| c != b'\n'));
        if let (true, Some(f)) = (torn, file.as_mut()) {
            let _ = f.write_all(b"\n");
        }
        EventLog { path, max: max.max(1), inner: Mutex::new(Inner { events, next_id, lines, file }) }
    }

    /// Record an event (and log it: `tracing` at the level of its severity is the caller's).
    pub(crate) fn record(&self, severity: &str, kind: &str, pool: Option<&str>, target: Option<&str>, message: String) {
        let time_ns =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let e = Stored {
            id: g.next_id,
            time_ns,
            severity: severity.to_string(),
            kind: kind.to_string(),
            pool: pool.map(str::to_string),
            target: target.map(str::to_string),
            message,
        };
        g.next_id += 1;
        let line = serde_json::to_string(&e).expect("events serialise");
        if let Some(f) = g.file.as_mut() {
            if let Err(err) = writeln!(f, "{line}") {
                tracing::warn!("append to the event history: {err}");
            }
        }
        g.lines += 1;
        g.events.push_back(e);
        if g.events.len() > self.max {
            g.events.pop_front();
        }
        if g.lines >= 2 * self.max {
            self.rewrite(&mut g);
        }
    }

    fn rewrite(&self, g: &mut Inner) {
        let Some(path) = &self.path else { return };
        let mut bytes = Vec::new();
        for e in &g.events {
            bytes.extend_from_slice(serde_json::to_string(e).expect("events serialise").as_bytes());
            bytes.push(b'\n');
        }
        match super::state::write_atomic(path, &bytes, 0o600) {
            Ok(()) => {
                g.lines = g.events.len();
                g.file = std::fs::OpenOptions::new().append(true).open(path).ok();
            }
            Err(err) => tracing::warn!("rewrite the event history {}: {err}", path.display()),
        }
    }

    /// Events after id `after` (0: from the oldest kept), oldest first, at most `limit` of
    /// the newest.
    pub(crate) fn list(&self, after: u64, limit: usize) -> Vec<EventInfo> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let sel: Vec<&Stored> = g.events.iter().filter(|e| e.id > after).collect();
        let skip = sel.len().saturating_sub(limit);
        sel[skip..]
            .iter()
            .map(|e| EventInfo {
                id: e.id,
                time_ns: e.time_ns,
                severity: e.severity.clone(),
                kind: e.kind.clone(),
                pool: e.pool.clone(),
                target: e.target.clone(),
                message: e.message.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("strata-events-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_history_is_bounded_persisted_and_its_ids_only_grow() {
        let d = dir("bound");
        let path = d.join("events.jsonl");
        let log = EventLog::open(Some(path.clone()), 10);
        for i in 0..25 {
            log.record("info", "test", Some("p"), None, format!("event {i}"));
        }
        let all = log.list(0, 1000);
        assert_eq!(all.len(), 10, "the newest 10 are kept");
        assert_eq!(all.first().unwrap().id, 16);
        assert_eq!(all.last().unwrap().message, "event 24");
        assert_eq!(log.list(20, 1000).len(), 5, "after id 20");
        assert_eq!(log.list(0, 3).iter().map(|e| e.id).collect::<Vec<_>>(), vec![23, 24, 25], "the newest 3");
        // The file was rewritten when it reached twice the bound: not more than that.
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert!(lines < 20, "{lines} lines on disk");
        drop(log);
        // A torn last line (a crash while appending) is skipped, and ended.
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"id\": 99, \"time_ns\": ").unwrap();
        drop(f);
        let log = EventLog::open(Some(path.clone()), 10);
        let again = log.list(0, 1000);
        assert_eq!(again.iter().map(|e| e.id).collect::<Vec<_>>(), all.iter().map(|e| e.id).collect::<Vec<_>>());
        log.record("warning", "test", None, Some("x"), "after the restart".into());
        let last = log.list(0, 1).pop().unwrap();
        assert_eq!(last.id, 26, "ids go on from the persisted ones");
        let reopened = EventLog::open(Some(path), 10);
        assert_eq!(reopened.list(0, 1).pop().unwrap().message, "after the restart", "the torn line did not swallow it");
        let _ = std::fs::remove_dir_all(&d);
    }
}
