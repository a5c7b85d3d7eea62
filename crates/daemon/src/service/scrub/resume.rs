//! A scrub's progress across restarts of the daemon: the book of bookmarks the state file
//! records (`PoolRecord::scrub_progress`), written by the watch loop every few seconds and
//! at shutdown, and the resumption at the next start (the module comment of scrub/mod.rs).

use super::{ScrubJob, Scrubs};
use crate::service::state::ScrubProgress;
use crate::service::{ApiError, Daemon};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The state file gets a running scrub's bookmark at most this often.
const PROGRESS_SAVE_EVERY: Duration = Duration::from_secs(5);

/// Scrubs under way as the state file records them (what a restart resumes), and whether
/// that changed since it was written.
#[derive(Default)]
pub(super) struct ProgressBook {
    pub(super) pools: BTreeMap<String, ScrubProgress>,
    pub(super) unsaved: bool,
    saved_at: Option<Instant>,
}

impl ScrubJob {
    /// Record how far it got in the book (for the state file), if that changed.
    pub(super) fn note_progress(&self) {
        let bookmark = self.reached.lock().expect("scrub bookmark").or(self.resume);
        let progress = ScrubProgress {
            bookmark: bookmark.map(|b| (b.tree, b.object, b.record)),
            paused: *self.paused.lock().expect("scrub pause"),
            started_ns: self.started_ns,
        };
        let mut book = self.book.lock().expect("scrub book");
        if book.pools.get(&self.pool_name) != Some(&progress) {
            book.pools.insert(self.pool_name.clone(), progress);
            book.unsaved = true;
        }
    }

    /// It ended for good (finished, cancelled, failed): nothing to resume.
    pub(super) fn drop_progress(&self) {
        let mut book = self.book.lock().expect("scrub book");
        if book.pools.remove(&self.pool_name).is_some() {
            book.unsaved = true;
        }
    }
}

impl Scrubs {
    /// Pool `pool`'s scrub as the state file records it.
    pub(crate) fn progress(&self, pool: &str) -> Option<ScrubProgress> {
        self.book.lock().expect("scrub book").pools.get(pool).copied()
    }

    /// Note every running scrub's progress; true if the state file should be written now
    /// (something changed, and it was not written in the last `PROGRESS_SAVE_EVERY`).
    pub(crate) fn progress_due(&self) -> bool {
        let running: Vec<Arc<ScrubJob>> = self
            .jobs
            .lock()
            .expect("scrubs")
            .values()
            .filter(|j| j.ended.lock().expect("scrub end").is_none())
            .cloned()
            .collect();
        for j in &running {
            j.note_progress();
        }
        let book = self.book.lock().expect("scrub book");
        book.unsaved && book.saved_at.is_none_or(|t| t.elapsed() >= PROGRESS_SAVE_EVERY)
    }

    /// The state file was written with the book as it is.
    pub(crate) fn progress_saved(&self) {
        let mut book = self.book.lock().expect("scrub book");
        book.unsaved = false;
        book.saved_at = Some(Instant::now());
    }
}

impl Daemon {
    /// The daemon starts: resume pool `name`'s scrub that a stop interrupted (`progress`,
    /// from the state file).
    pub(crate) fn resume_scrub(&self, name: &str, progress: ScrubProgress) {
        let started = match self.pool(name) {
            Ok(pool) if pool.status().latched.is_none() && !pool.status().read_only => {
                self.launch_scrub(name, pool, "restart", Some(progress))
            }
            Ok(_) => Err(ApiError::conflict(
                format!("pool {name} is read-only or refuses writes: its scrub could not repair anything"),
                "start it again once the devices are healthy",
            )),
            Err(e) => Err(e),
        };
        match started {
            Ok(()) => {
                let text = match progress.bookmark {
                    Some((tree, object, _)) => {
                        format!("scrub resumed after the restart, from object {object} of tree {tree}")
                    }
                    None => "scrub resumed after the restart, from the start".to_string(),
                };
                tracing::info!(pool = name, paused = progress.paused, "{text}");
                self.events.record("info", "scrub.resumed", Some(name), None, text);
            }
            Err(e) => {
                let text =
                    format!("the scrub interrupted by the last stop was not resumed: {} ({})", e.message, e.hint);
                tracing::warn!(pool = name, "{text}");
                self.events.record("warning", "scrub.failed", Some(name), None, text);
            }
        }
    }
}
