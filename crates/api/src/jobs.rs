//! Jobs: the long operations (check, scrub, clone split, mirror transfer, rebuild) as
//! resources. Starting one answers `202 Accepted` with its [`JobInfo`]; the job runs in the
//! daemon whether or not anyone waits (the CLI polls `GET /v1/jobs/{id}` and draws a
//! progress bar; `--no-wait` prints the id and returns).

use crate::ErrorInfo;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `GET /v1/jobs/{id}`: one job, running or ended.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JobInfo {
    /// Grows by one per job, across restarts of the daemon.
    pub id: u64,
    /// `check`, `scrub`, `split`, `mirror.transfer` or `rebuild`.
    pub kind: String,
    pub pool: String,
    /// The volume, mirror or device concerned (none for a whole-pool job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `running`, `succeeded`, `failed`, `cancelled`, or `interrupted` (the daemon stopped
    /// while it ran; a scrub, rebuild or mirror transfer resumes as a new job).
    pub state: String,
    /// Who started it (`uid 0 (root)`, `token ci (operator)`, `schedule`).
    pub caller: String,
    pub started_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ns: Option<u64>,
    /// Work done so far and in all, in `unit`s (`bytes`); `total` is 0 until known.
    pub done: u64,
    pub total: u64,
    pub unit: String,
    pub percent: f64,
    /// The rate since it started (units per second).
    pub per_second: u64,
    /// Seconds to the end at that rate (running jobs whose total is known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_seconds: Option<f64>,
    /// `POST /v1/jobs/{id}/cancel` stops it (what it did so far stays done).
    pub cancellable: bool,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// What it produced, once ended (a check's report, a split's result, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
}

impl JobInfo {
    pub fn ended(&self) -> bool {
        self.state != "running"
    }
}
