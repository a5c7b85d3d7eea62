//! Scrubs in the background: `strata pool scrub POOL` starts one (a thread per pool), and
//! `--pause`, `--resume`, `--cancel`, `--status` drive it; `pool status` shows its progress.
//!
//! The engine walks the committed root outside the pool's lock (`Pool::scrub`), so the
//! pool serves and commits meanwhile; this driver paces it while the pool serves I/O (at
//! the rate the devices thread finds for it from the clients' latency, between the pool's
//! scrub-rate bounds: client_pace.rs; full speed when idle), holds it while paused, and
//! stops it when cancelled. The engine stops it by itself when writers run short of the space its pin
//! holds back ("yielded": start it again later).
//!
//! A scrub survives a restart of the daemon: the engine reports how far every data record
//! is verified (`WalkControl::reached`), the watch loop writes that bookmark to the state
//! file every few seconds (`PoolRecord::scrub_progress`), a shutdown interrupts the scrub
//! (not a cancel) and saves its last bookmark, and the next start resumes it — paused if it
//! was — without reading the records before the bookmark again (the metadata is walked and
//! verified whole each time).

use super::jobs::{Job, JobSpec};
use super::state::ScrubProgress;
use resume::ProgressBook;

mod resume;
use super::{devset, ApiError, Daemon};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use strata_api::{ScrubReport, ScrubStatus};
use strata_engine::{Pool, PoolStatus, WalkBookmark, WalkControl};

#[derive(Default)]
pub(crate) struct Scrubs {
    jobs: Mutex<BTreeMap<String, Arc<ScrubJob>>>,
    /// Per pool: whether the devices thread saw clients served in its last round (a new
    /// scrub starts paced if so, instead of at full speed for its first window).
    clients: Mutex<BTreeMap<String, bool>>,
    book: Arc<Mutex<ProgressBook>>,
}

struct ScrubJob {
    pool: Arc<Pool>,
    /// Its job resource (jobs.rs): progress mirrored there; its cancel cancels the scrub.
    job: Arc<Job>,
    /// `serve --scrub-rate`: a limit that holds whether the pool is busy or not.
    limit: Option<u64>,
    /// Bytes per second it may verify while the pool serves clients: set by the devices
    /// thread from the clients' latency (client_pace.rs), inside the pool's bounds.
    rate: AtomicU64,
    started: Instant,
    done: AtomicU64,
    total: AtomicU64,
    cancel: AtomicBool,
    paused: Mutex<bool>,
    wake: Condvar,
    /// Set when it ended: the state and the report.
    ended: Mutex<Option<(String, Option<ScrubReport>, Option<String>, f64)>>,
    /// Pacing: bytes verified since `window_start`, and the client activity seen there.
    pace: Mutex<Pace>,
    /// Microseconds `pace` slept.
    paced_us: AtomicU64,
    /// Client operations on the pool's volumes so far (StatsRegistry::pool_ops).
    client_ops: Box<dyn Fn() -> u64 + Send + Sync>,
    /// Its pool's name (the key of `book`).
    pool_name: String,
    /// Resumed after a restart: the data records at or before this were verified then.
    resume: Option<WalkBookmark>,
    /// Every data record up to here is verified.
    reached: Mutex<Option<WalkBookmark>>,
    /// Stopped by the daemon's shutdown, not cancelled: the next start resumes it.
    interrupted: AtomicBool,
    /// When it first started (wall clock), kept across resumptions.
    started_ns: u64,
    book: Arc<Mutex<ProgressBook>>,
}

struct Pace {
    window_start: Instant,
    window_bytes: u64,
    activity: (u64, u64),
    busy: bool,
}

impl WalkControl for ScrubJob {
    fn begin(&self, total_bytes: u64) {
        self.total.store(total_bytes, Ordering::Relaxed);
        self.job.set_total(total_bytes);
    }

    fn block_done(&self, bytes: u64) -> bool {
        self.done.fetch_add(bytes, Ordering::Relaxed);
        self.job.add(bytes);
        // Paused: wait here (holding no lock), unless cancelled or the pool wants the space
        // the scrub's pin holds back.
        let mut paused = self.paused.lock().expect("scrub pause");
        while *paused && !self.cancelled() && !self.pool.scrub_yield_requested() {
            paused = self.wake.wait_timeout(paused, Duration::from_millis(100)).expect("scrub pause").0;
        }
        drop(paused);
        self.pace(bytes);
        !self.cancelled()
    }

    fn resume_after(&self) -> Option<WalkBookmark> {
        self.resume
    }

    fn block_skipped(&self, bytes: u64) {
        self.done.fetch_add(bytes, Ordering::Relaxed);
        self.job.add(bytes);
    }

    fn reached(&self, at: WalkBookmark) {
        *self.reached.lock().expect("scrub bookmark") = Some(at);
    }
}

impl ScrubJob {
    /// `--cancel`, or a cancel of its job.
    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || self.job.cancelled()
    }

    /// Client operations and intent-log writes so far: what moves while the pool serves
    /// clients. Not the pool's block counters: the scrub's own reads move those (it paced
    /// itself at its rate on an idle pool: 2.0 s for 320 MiB at 256 MiB/s).
    fn activity(&self) -> (u64, u64) {
        ((self.client_ops)(), self.pool.io_activity().2)
    }

    /// While the pool serves clients (they were served in the last window), keep to the
    /// rate the devices thread set; when idle, run at full speed.
    fn pace(&self, bytes: u64) {
        let mut p = self.pace.lock().expect("scrub pace");
        p.window_bytes += bytes;
        let elapsed = p.window_start.elapsed();
        if elapsed >= Duration::from_millis(100) {
            let now = self.activity();
            p.busy = now != p.activity;
            p.activity = now;
            p.window_start = Instant::now();
            p.window_bytes = 0;
            return;
        }
        let rate = match self.limit {
            Some(l) => Some(l),
            None => p.busy.then(|| self.rate.load(Ordering::Relaxed)),
        };
        if let Some(rate) = rate {
            let allowed = Duration::from_secs_f64(p.window_bytes as f64 / rate.max(1) as f64);
            if allowed > elapsed {
                let wait = (allowed - elapsed).min(Duration::from_millis(100));
                drop(p);
                std::thread::sleep(wait);
                self.paced_us.fetch_add(wait.as_micros() as u64, Ordering::Relaxed);
            }
        }
    }

    fn status(&self) -> ScrubStatus {
        let done = self.done.load(Ordering::Relaxed);
        let total = self.total.load(Ordering::Relaxed);
        let ended = self.ended.lock().expect("scrub end").clone();
        let seconds = ended.as_ref().map(|e| e.3).unwrap_or_else(|| self.started.elapsed().as_secs_f64());
        let rate = if seconds > 0.0 { done as f64 / seconds } else { 0.0 };
        let paused = *self.paused.lock().expect("scrub pause");
        let resumed = self.resume.map(|b| {
            format!(
                "resumed after a restart of the daemon: the data records before object {} of tree {} were verified before it",
                b.object, b.tree
            )
        });
        let (state, report, message) = match ended {
            Some((s, r, m, _)) => (s, r, m),
            None if paused => ("paused".to_string(), None, resumed),
            None => ("running".to_string(), None, resumed),
        };
        let running = state == "running";
        let limit = match self.limit {
            Some(l) => Some(l),
            None => self.pace.lock().expect("scrub pace").busy.then(|| self.rate.load(Ordering::Relaxed)),
        };
        ScrubStatus {
            percent: if total > 0 {
                ((done.min(total) as f64 * 1000.0 / total as f64).round() / 10.0).min(100.0)
            } else {
                0.0
            },
            eta_seconds: (running && rate > 0.0).then(|| total.saturating_sub(done) as f64 / rate),
            bytes_per_second: rate as u64,
            state,
            done_bytes: done,
            total_bytes: total,
            seconds,
            paced_seconds: self.paced_us.load(Ordering::Relaxed) as f64 / 1e6,
            limit_bytes_per_second: limit.filter(|_| running),
            report,
            message,
            job: Some(self.job.id),
        }
    }
}

fn sums(s: &PoolStatus) -> (u64, u64) {
    let m = s.devices.as_ref().map(|d| d.members.as_slice()).unwrap_or_default();
    (m.iter().map(|m| m.checksum_errors).sum(), m.iter().map(|m| m.repaired_bytes).sum())
}

impl Scrubs {
    pub(crate) fn status(&self, pool: &str) -> Option<ScrubStatus> {
        self.jobs.lock().expect("scrubs").get(pool).map(|j| j.status())
    }

    fn running(&self, pool: &str) -> Option<Arc<ScrubJob>> {
        self.jobs.lock().expect("scrubs").get(pool).filter(|j| j.ended.lock().expect("scrub end").is_none()).cloned()
    }

    /// Whether pool `pool` is being scrubbed now (not paused).
    pub(crate) fn is_active(&self, pool: &str) -> bool {
        self.running(pool).is_some_and(|j| !*j.paused.lock().expect("scrub pause"))
    }

    /// The rate pool `pool`'s scrub may go at beside clients from now on (the devices
    /// thread, every round).
    pub(crate) fn set_rate(&self, pool: &str, bytes_per_second: u64) {
        if let Some(j) = self.running(pool) {
            j.rate.store(bytes_per_second.max(1), Ordering::Relaxed);
        }
    }

    /// Whether pool `pool` served clients in the devices thread's last round.
    pub(crate) fn note_clients(&self, pool: &str, served: bool) {
        let mut c = self.clients.lock().expect("scrub clients");
        if c.get(pool) != Some(&served) {
            c.insert(pool.to_string(), served);
        }
    }

    fn clients_seen(&self, pool: &str) -> bool {
        self.clients.lock().expect("scrub clients").get(pool).copied().unwrap_or(false)
    }

    /// New bounds of pool `pool`'s scrub rate (`pool set`): a running scrub is kept
    /// inside them at once.
    pub(crate) fn bound_rate(&self, pool: &str, min: u64, max: u64) {
        if let Some(j) = self.running(pool) {
            let now = j.rate.load(Ordering::Relaxed);
            j.rate.store(now.clamp(min.max(1), max.max(min).max(1)), Ordering::Relaxed);
        }
    }

    /// Cancel pool `pool`'s scrub, wait for it to end, and drop it (the pool is going away).
    pub(crate) fn forget(&self, pool: &str) {
        self.clients.lock().expect("scrub clients").remove(pool);
        let job = self.jobs.lock().expect("scrubs").remove(pool);
        if let Some(j) = job {
            Self::cancel_and_wait(&[j]);
        }
        let mut book = self.book.lock().expect("scrub book");
        if book.pools.remove(pool).is_some() {
            book.unsaved = true;
        }
    }

    /// Stop every scrub and wait (a little) for them to end, keeping their progress for
    /// the next start: the daemon is stopping.
    pub(crate) fn interrupt_all(&self) {
        let jobs: Vec<Arc<ScrubJob>> = self.jobs.lock().expect("scrubs").values().cloned().collect();
        let running: Vec<Arc<ScrubJob>> =
            jobs.into_iter().filter(|j| j.ended.lock().expect("scrub end").is_none()).collect();
        for j in &running {
            j.interrupted.store(true, Ordering::Relaxed);
        }
        Self::cancel_and_wait(&running);
        for j in &running {
            j.note_progress();
        }
        self.jobs.lock().expect("scrubs").clear();
    }

    fn cancel_and_wait(jobs: &[Arc<ScrubJob>]) {
        for j in jobs {
            j.cancel.store(true, Ordering::Relaxed);
            j.wake.notify_all();
        }
        for j in jobs {
            for _ in 0..100 {
                if j.ended.lock().expect("scrub end").is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

impl Daemon {
    /// `POST /v1/pools/{pool}/scrub`: start, pause, resume or cancel the pool's scrub.
    pub(crate) fn scrub_action(&self, name: &str, action: &str, caller: &str) -> Result<ScrubStatus, ApiError> {
        let pool = self.pool(name)?;
        let running = self.scrubs.running(name);
        let none = || {
            ApiError::conflict(format!("pool {name} has no scrub running"), "start one with `strata pool scrub POOL`")
        };
        match action {
            "start" => {
                if running.is_some() {
                    return Err(ApiError::conflict(
                        format!("pool {name} is being scrubbed already"),
                        "see `strata pool scrub POOL --status`; `--cancel` stops it",
                    ));
                }
                if pool.status().latched.is_some() {
                    return Err(ApiError::conflict(
                        format!("pool {name} refuses writes (its I/O failed): a scrub could not repair anything"),
                        "restart the daemon once the devices are healthy, then scrub",
                    ));
                }
                self.launch_scrub(name, pool, caller, None)?;
                tracing::info!(pool = name, "scrub started");
            }
            "pause" | "resume" => {
                let job = running.ok_or_else(none)?;
                *job.paused.lock().expect("scrub pause") = action == "pause";
                job.wake.notify_all();
                tracing::info!(pool = name, "scrub {}", if action == "pause" { "paused" } else { "resumed" });
            }
            "cancel" => {
                let job = running.ok_or_else(none)?;
                job.cancel.store(true, Ordering::Relaxed);
                job.wake.notify_all();
                tracing::info!(pool = name, "scrub cancelled");
            }
            other => {
                return Err(ApiError::bad_request(format!("scrub action {other:?}"), "start, pause, resume or cancel"))
            }
        }
        Ok(self.scrubs.status(name).expect("a scrub was recorded"))
    }

    /// Start pool `name`'s scrub (`resumed`: where one stopped before a restart).
    pub(super) fn launch_scrub(
        &self,
        name: &str,
        pool: Arc<Pool>,
        caller: &str,
        resumed: Option<ScrubProgress>,
    ) -> Result<(), ApiError> {
        let spec = JobSpec { kind: "scrub", pool: name, target: None, caller, cancellable: true };
        let job = Arc::new(ScrubJob {
            pool: pool.clone(),
            pool_name: name.to_string(),
            resume: resumed.and_then(|p| p.bookmark).map(|(tree, object, record)| WalkBookmark {
                tree,
                object,
                record,
            }),
            reached: Mutex::new(None),
            interrupted: AtomicBool::new(false),
            started_ns: resumed.map_or_else(super::jobs::now_ns, |p| p.started_ns),
            book: self.scrubs.book.clone(),
            job: self.jobs.start(spec),
            limit: self.opts.scrub_bytes_per_second,
            rate: AtomicU64::new(
                super::client_pace::scrub_rate_of(
                    self.pools.lock().expect("pools").get(name).and_then(|e| e.scrub_rate),
                )
                .0,
            ),
            started: Instant::now(),
            done: AtomicU64::new(0),
            total: AtomicU64::new(0),
            cancel: AtomicBool::new(false),
            paused: Mutex::new(resumed.is_some_and(|p| p.paused)),
            wake: Condvar::new(),
            ended: Mutex::new(None),
            pace: Mutex::new(Pace {
                window_start: Instant::now(),
                window_bytes: 0,
                activity: (self.stats.pool_ops(name), pool.io_activity().2),
                busy: self.scrubs.clients_seen(name),
            }),
            client_ops: self.stats.pool_ops_fn(name),
            paced_us: AtomicU64::new(0),
        });
        self.scrubs.jobs.lock().expect("scrubs").insert(name.to_string(), job.clone());
        if resumed.is_none() {
            // In the book at once (a restart from here on resumes it), and before its thread
            // runs: one that ends at once drops it again, not the other way round.
            job.note_progress();
        }
        let pool_name = name.to_string();
        let (events, jobs) = (self.events.clone(), self.jobs.clone());
        std::thread::Builder::new()
            .name(format!("scrub {name}"))
            .spawn(move || {
                run(&pool_name, &job);
                end_scrub(&pool_name, &job, &events, &jobs);
            })
            .map_err(|e| ApiError::internal(format!("start the scrub thread: {e}")))?;
        Ok(())
    }

    /// `GET /v1/pools/{pool}/scrub`.
    pub(crate) fn scrub_status(&self, name: &str) -> Result<ScrubStatus, ApiError> {
        self.pool(name)?;
        Ok(self.scrubs.status(name).unwrap_or(ScrubStatus {
            state: "none".into(),
            done_bytes: 0,
            total_bytes: 0,
            percent: 0.0,
            bytes_per_second: 0,
            eta_seconds: None,
            seconds: 0.0,
            paced_seconds: 0.0,
            limit_bytes_per_second: None,
            report: None,
            message: None,
            job: None,
        }))
    }
}

/// The scrub thread: run the engine's scrub under this job's control, then record the end.
/// After `run`: drop the scrub's progress unless a shutdown interrupted it, end its job,
/// and record the event.
fn end_scrub(pool_name: &str, job: &Arc<ScrubJob>, events: &super::events::EventLog, jobs: &super::jobs::Jobs) {
    let end = job.ended.lock().expect("scrub end").clone();
    if !job.interrupted.load(Ordering::Relaxed) {
        job.drop_progress();
    }
    if let Some((state, report, message, seconds)) = end {
        let status = job.status();
        jobs.end(
            &job.job,
            match state.as_str() {
                "cancelled" => {
                    job.job.request_cancel();
                    Ok(serde_json::to_value(&status).expect("statuses serialise"))
                }
                "finished" => Ok(serde_json::to_value(&status).expect("statuses serialise")),
                "interrupted" => Err(ApiError::conflict(
                    format!("scrub interrupted at {:.1}% by the daemon's stop", status.percent),
                    "it resumes where it stopped when the daemon starts again",
                )),
                _ => Err(ApiError::conflict(
                    format!("scrub {state}: {}", message.clone().unwrap_or_default()),
                    "start it again (`strata pool scrub POOL`)",
                )),
            },
        );
        let (severity, text) = match &report {
            _ if state == "interrupted" => (
                "info",
                format!("scrub interrupted by the daemon's stop after {seconds:.1} s: it resumes at the next start"),
            ),
            Some(r) if !r.check.clean => (
                "error",
                format!("scrub {state} in {seconds:.1} s: damage no copy could repair: {}", r.check.errors.join("; ")),
            ),
            Some(r) => (
                "info",
                format!(
                    "scrub {state} in {seconds:.1} s: {} blocks verified, {} damaged copies found, {} bytes repaired",
                    r.blocks_verified, r.checksum_errors, r.repaired_bytes
                ),
            ),
            None => ("warning", format!("scrub {state}: {}", message.unwrap_or_default())),
        };
        let kind = match (&report, state.as_str()) {
            (_, "interrupted") => "scrub.interrupted",
            (Some(_), _) => "scrub.finished",
            (None, _) => "scrub.failed",
        };
        events.record(severity, kind, Some(pool_name), None, text);
    }
}

fn run(name: &str, job: &ScrubJob) {
    let before = sums(&job.pool.status());
    let out = job.pool.scrub(job);
    let seconds = job.started.elapsed().as_secs_f64();
    let status = job.pool.status();
    let after = sums(&status);
    let end = match out {
        Ok(o) => {
            let state = if !o.stopped {
                "finished"
            } else if job.interrupted.load(Ordering::Relaxed) {
                "interrupted"
            } else if o.yielded_for_space {
                "yielded"
            } else {
                "cancelled"
            };
            let report = ScrubReport {
                check: super::pools::check_report(&o.report),
                blocks_verified: o.report.copies_verified,
                checksum_errors: after.0.saturating_sub(before.0),
                repaired_bytes: after.1.saturating_sub(before.1),
                seconds,
                devices: devset::device_figures(&status).1,
            };
            tracing::info!(
                pool = name,
                state,
                blocks = report.blocks_verified,
                damaged = report.checksum_errors,
                repaired_bytes = report.repaired_bytes,
                errors = report.check.errors.len(),
                "scrub {state} in {seconds:.1} s"
            );
            if !report.check.clean {
                tracing::warn!(pool = name, problems = ?report.check.errors, "scrub found damage no copy could repair");
            }
            let message = (state == "yielded").then(|| {
                "writers needed the freed space the scrub held back: start it again when the pool has room".to_string()
            });
            (state.to_string(), Some(report), message, seconds)
        }
        Err(e) => {
            tracing::warn!(pool = name, "scrub failed: {e}");
            ("failed".to_string(), None, Some(e.to_string()), seconds)
        }
    };
    *job.ended.lock().expect("scrub end") = Some(end);
}
