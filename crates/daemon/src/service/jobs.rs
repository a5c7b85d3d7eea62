//! Jobs: every long operation (check, scrub, clone split, mirror transfer, rebuild) as a
//! resource with an id, a state, progress, rate and ETA, and a cancel where it makes sense.
//! It runs on a thread of its own, so it finishes whether or not the caller waits
//! (`GET /v1/jobs/{id}`; the CLI polls it and draws a progress bar).
//!
//! The newest `JOBS_KEPT` are listed, and written to `DATA_DIR/jobs.json` when one starts
//! or ends (atomically: jobs start seconds apart, the file is a few tens of KiB), so ids
//! only grow across restarts and an ended job can be looked up after one. A job the file
//! shows running when the daemon starts was interrupted by the stop: it is listed as
//! `interrupted` (scrubs, rebuilds and mirror transfers resume as new jobs).

use super::ApiError;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use strata_api::{ErrorInfo, JobInfo};

/// Jobs listed (running ones always are).
pub(crate) const JOBS_KEPT: usize = 200;

/// One job. Its worker adds to `done` (and sets `total` when known), looks at
/// [`Job::cancelled`] between steps, and ends it with [`Job::finish`].
pub(crate) struct Job {
    pub id: u64,
    kind: String,
    pool: String,
    target: Option<String>,
    caller: String,
    started_ns: u64,
    started: Instant,
    cancellable: bool,
    pub done: AtomicU64,
    pub total: AtomicU64,
    cancel: AtomicBool,
    ended: Mutex<Option<Ended>>,
}

struct Ended {
    state: &'static str,
    finished_ns: u64,
    seconds: f64,
    error: Option<ErrorInfo>,
    result: Option<serde_json::Value>,
}

pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

impl Job {
    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// Ask it to stop (it ends `cancelled`).
    pub(crate) fn request_cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    pub(crate) fn add(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn set_total(&self, n: u64) {
        self.total.store(n, Ordering::Relaxed);
    }

    pub(crate) fn info(&self) -> JobInfo {
        let done = self.done.load(Ordering::Relaxed);
        let total = self.total.load(Ordering::Relaxed);
        let ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        let secs = ended.as_ref().map_or_else(|| self.started.elapsed().as_secs_f64(), |e| e.seconds);
        let per_second = if secs > 0.0 { (done as f64 / secs) as u64 } else { 0 };
        let percent = match (total, &*ended) {
            (_, Some(e)) if e.state == "succeeded" => 100.0,
            (0, _) => 0.0,
            (t, _) => (done as f64 * 100.0 / t as f64).min(100.0),
        };
        let eta_seconds = (ended.is_none() && total > 0 && per_second > 0)
            .then(|| total.saturating_sub(done) as f64 / per_second as f64);
        JobInfo {
            id: self.id,
            kind: self.kind.clone(),
            pool: self.pool.clone(),
            target: self.target.clone(),
            state: ended.as_ref().map_or("running", |e| e.state).to_string(),
            caller: self.caller.clone(),
            started_ns: self.started_ns,
            finished_ns: ended.as_ref().map(|e| e.finished_ns),
            done,
            total,
            unit: "bytes".into(),
            percent,
            per_second,
            eta_seconds,
            cancellable: self.cancellable && ended.is_none(),
            error: ended.as_ref().and_then(|e| e.error.clone()),
            result: ended.as_ref().and_then(|e| e.result.clone()),
        }
    }

    /// End the job: `Ok` with its result (`cancelled` if it was asked to stop and did), or
    /// the error it failed with.
    pub(crate) fn finish(&self, r: Result<serde_json::Value, ApiError>) {
        let mut ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        if ended.is_some() {
            return;
        }
        let (state, error, result) = match r {
            Ok(v) if self.cancelled() => ("cancelled", None, Some(v)),
            Ok(v) => ("succeeded", None, Some(v)),
            Err(e) => ("failed", Some(e.info()), None),
        };
        *ended =
            Some(Ended { state, finished_ns: now_ns(), seconds: self.started.elapsed().as_secs_f64(), error, result });
    }
}

/// A check, scrub or split drives its job's progress and sees its cancel.
impl strata_engine::WalkControl for Job {
    fn begin(&self, total_bytes: u64) {
        self.set_total(total_bytes);
    }
    fn block_done(&self, bytes: u64) -> bool {
        self.add(bytes);
        !self.cancelled()
    }
}

/// A job as `jobs.json` keeps it: its last known info.
type Stored = JobInfo;

pub(crate) struct Jobs {
    path: Option<PathBuf>,
    inner: Mutex<Inner>,
}

struct Inner {
    next_id: u64,
    live: Vec<Arc<Job>>,
    /// Ended before this start of the daemon (read from the file), newest last.
    past: VecDeque<Stored>,
}

/// What to start: the kind and what it concerns.
pub(crate) struct JobSpec<'a> {
    pub kind: &'a str,
    pub pool: &'a str,
    pub target: Option<&'a str>,
    pub caller: &'a str,
    pub cancellable: bool,
}

impl Jobs {
    pub(crate) fn open(path: Option<PathBuf>) -> Jobs {
        let mut past: VecDeque<Stored> = path
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| match serde_json::from_slice::<Vec<Stored>>(&b) {
                Ok(v) => Some(v),
                Err(e) => {
                    tracing::warn!("the job list {}: {e}; starting a new one", path.as_ref().unwrap().display());
                    None
                }
            })
            .unwrap_or_default()
            .into();
        for j in past.iter_mut().filter(|j| j.state == "running") {
            j.state = "interrupted".into();
            j.cancellable = false;
            j.eta_seconds = None;
        }
        let next_id = past.iter().map(|j| j.id + 1).max().unwrap_or(1);
        Jobs { path, inner: Mutex::new(Inner { next_id, live: Vec::new(), past }) }
    }

    /// Register a job (the caller runs it: see [`Jobs::spawn`]).
    pub(crate) fn start(&self, spec: JobSpec) -> Arc<Job> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let job = Arc::new(Job {
            id: g.next_id,
            kind: spec.kind.into(),
            pool: spec.pool.into(),
            target: spec.target.map(Into::into),
            caller: spec.caller.into(),
            started_ns: now_ns(),
            started: Instant::now(),
            cancellable: spec.cancellable,
            done: AtomicU64::new(0),
            total: AtomicU64::new(0),
            cancel: AtomicBool::new(false),
            ended: Mutex::new(None),
        });
        g.next_id += 1;
        g.live.push(job.clone());
        self.trim_and_save(&mut g);
        job
    }

    /// Register a job and run `work` on a thread of its own; its result ends the job.
    pub(crate) fn spawn<F>(self: &Arc<Self>, spec: JobSpec, work: F) -> Result<JobInfo, ApiError>
    where
        F: FnOnce(&Job) -> Result<serde_json::Value, ApiError> + Send + 'static,
    {
        let job = self.start(spec);
        let (jobs, j) = (self.clone(), job.clone());
        std::thread::Builder::new()
            .name(format!("job-{}", job.id))
            .spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&j)))
                    .unwrap_or_else(|_| Err(ApiError::internal("the job's thread panicked (see the daemon's log)")));
                jobs.end(&j, r);
            })
            .map_err(|e| ApiError::internal(format!("start a thread for the job: {e}")))?;
        Ok(job.info())
    }

    /// End `job` and save the list.
    pub(crate) fn end(&self, job: &Job, r: Result<serde_json::Value, ApiError>) {
        job.finish(r);
        let info = job.info();
        tracing::info!(job = info.id, kind = %info.kind, pool = %info.pool, state = %info.state, "job ended");
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        self.trim_and_save(&mut g);
    }

    fn trim_and_save(&self, g: &mut Inner) {
        // Ended live jobs beyond the bound become past entries, the oldest dropped.
        let ended = g.live.iter().filter(|j| j.ended.lock().is_ok_and(|e| e.is_some())).count();
        if g.past.len() + ended > JOBS_KEPT {
            let mut keep = Vec::new();
            for j in std::mem::take(&mut g.live) {
                if j.ended.lock().is_ok_and(|e| e.is_some()) {
                    g.past.push_back(j.info());
                } else {
                    keep.push(j);
                }
            }
            g.live = keep;
            while g.past.len() > JOBS_KEPT {
                g.past.pop_front();
            }
        }
        let Some(path) = &self.path else { return };
        let all: Vec<JobInfo> = g.past.iter().cloned().chain(g.live.iter().map(|j| j.info())).collect();
        let bytes = serde_json::to_vec(&all).expect("jobs serialise");
        if let Err(e) = super::state::write_atomic(path, &bytes, 0o600) {
            tracing::warn!("save the job list {}: {e}", path.display());
        }
    }

    /// Every job kept, oldest first.
    pub(crate) fn list(&self) -> Vec<JobInfo> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<JobInfo> = g.past.iter().cloned().chain(g.live.iter().map(|j| j.info())).collect();
        all.sort_by_key(|j| j.id);
        all
    }

    pub(crate) fn get(&self, id: u64) -> Result<JobInfo, ApiError> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(j) = g.live.iter().find(|j| j.id == id) {
            return Ok(j.info());
        }
        g.past.iter().find(|j| j.id == id).cloned().ok_or_else(|| not_found(id))
    }

    /// The running job of `kind` on `pool` (and `target`), if any.
    pub(crate) fn running(&self, kind: &str, pool: &str, target: Option<&str>) -> Option<Arc<Job>> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.live
            .iter()
            .find(|j| {
                j.kind == kind
                    && j.pool == pool
                    && j.target.as_deref() == target
                    && j.ended.lock().is_ok_and(|e| e.is_none())
            })
            .cloned()
    }

    /// Ask job `id` to stop; it ends `cancelled` at its next step.
    pub(crate) fn cancel(&self, id: u64) -> Result<JobInfo, ApiError> {
        let job = {
            let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            g.live.iter().find(|j| j.id == id).cloned()
        };
        let Some(job) = job else {
            let info = self.get(id)?;
            return Err(ApiError::conflict(
                format!("job {id} ({} of {}) has ended: {}", info.kind, info.pool, info.state),
                "there is nothing to cancel",
            ));
        };
        let info = job.info();
        if info.ended() {
            return Err(ApiError::conflict(
                format!("job {id} ({} of {}) has ended: {}", info.kind, info.pool, info.state),
                "there is nothing to cancel",
            ));
        }
        if !info.cancellable {
            return Err(ApiError::conflict(
                format!("job {id} ({} of {}) cannot be cancelled", info.kind, info.pool),
                "wait for it to end (`strata job show ID`)",
            ));
        }
        job.request_cancel();
        tracing::info!(job = id, kind = %info.kind, pool = %info.pool, "job cancel asked");
        Ok(job.info())
    }
}

fn not_found(id: u64) -> ApiError {
    ApiError::not_found(format!("not found: job {id}"), "see `strata job list`; the newest 200 jobs are kept")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: &str) -> JobSpec<'_> {
        JobSpec { kind, pool: "p", target: None, caller: "test", cancellable: true }
    }

    #[test]
    fn jobs_are_persisted_their_ids_only_grow_and_a_running_one_is_interrupted_by_a_restart() {
        let d = std::env::temp_dir().join(format!("strata-jobs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("jobs.json");
        let jobs = Jobs::open(Some(path.clone()));
        let a = jobs.start(spec("check"));
        a.set_total(100);
        a.add(40);
        let info = a.info();
        assert_eq!((info.state.as_str(), info.done, info.total, info.percent), ("running", 40, 100, 40.0));
        jobs.end(&a, Ok(serde_json::json!({"errors": 0})));
        let b = jobs.start(spec("scrub"));
        jobs.cancel(b.id).unwrap();
        assert!(b.cancelled());
        let c = jobs.start(spec("split"));
        assert!(jobs.cancel(a.id).is_err(), "an ended job cannot be cancelled");
        drop(jobs);

        let again = Jobs::open(Some(path));
        let list = again.list();
        assert_eq!(list.iter().map(|j| j.id).collect::<Vec<_>>(), vec![a.id, b.id, c.id]);
        assert_eq!(list[0].state, "succeeded");
        assert_eq!(list[0].result, Some(serde_json::json!({"errors": 0})));
        assert_eq!(list[1].state, "interrupted", "asked to cancel but still running at the stop");
        assert_eq!(list[2].state, "interrupted");
        assert!(again.get(99).is_err());
        assert_eq!(again.start(spec("check")).id, c.id + 1, "ids go on from the persisted ones");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_list_is_bounded_and_running_jobs_stay_in_it() {
        let jobs = Jobs::open(None);
        let long = jobs.start(spec("scrub"));
        for _ in 0..JOBS_KEPT + 20 {
            let j = jobs.start(spec("check"));
            jobs.end(&j, Ok(serde_json::Value::Null));
        }
        let list = jobs.list();
        assert!(list.len() <= JOBS_KEPT + 1, "{} jobs listed", list.len());
        assert!(list.iter().any(|j| j.id == long.id && j.state == "running"), "the running job is listed");
        assert_eq!(list.last().unwrap().id, long.id + JOBS_KEPT as u64 + 20);
    }
}
