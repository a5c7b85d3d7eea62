//! `strata job`: the daemon's long operations (check, scrub, clone split, mirror transfer,
//! rebuild) — list, show, cancel, wait — and the progress bar the commands that start one
//! draw while they wait (`--no-wait` prints the job and returns; the job goes on).

use crate::client::{Client, Failure};
use crate::units::human;
use crate::Out;
use clap::Subcommand;
use std::io::IsTerminal;
use std::time::{Duration, Instant};
use strata_api::JobInfo;
use strata_daemon::utc;

#[derive(Subcommand)]
pub enum JobCmd {
    /// The jobs running and the newest ended ones.
    List,
    /// One job: state, progress, rate, ETA; its result or error once ended.
    Show { id: u64 },
    /// Stop a running job at its next step (what it did stays done).
    Cancel { id: u64 },
    /// Wait for a job to end, with a progress bar; exit status as the job's.
    Wait { id: u64 },
}

pub fn run(c: &Client, out: &Out, cmd: JobCmd) -> Result<(), Failure> {
    match cmd {
        JobCmd::List => {
            let jobs: Vec<JobInfo> = c.get("/v1/jobs")?;
            out.show(&jobs, |jobs| {
                println!(
                    "{:>5}  {:<16} {:<24} {:<11} {:>6}  {:<20} CALLER",
                    "ID", "KIND", "ON", "STATE", "DONE", "STARTED"
                );
                for j in jobs {
                    println!(
                        "{:>5}  {:<16} {:<24} {:<11} {:>5.1}%  {:<20} {}",
                        j.id,
                        j.kind,
                        on(j),
                        j.state,
                        j.percent,
                        utc(j.started_ns / 1_000_000_000),
                        j.caller
                    );
                }
            });
        }
        JobCmd::Show { id } => {
            let j: JobInfo = c.get(&format!("/v1/jobs/{id}"))?;
            out.show(&j, print_job);
        }
        JobCmd::Cancel { id } => {
            let j: JobInfo = c.send("POST", &format!("/v1/jobs/{id}/cancel"), &serde_json::json!({}))?;
            out.show(&j, |j| println!("job {id} ({} of {}): cancel asked; it stops at its next step", j.kind, on(j)));
        }
        JobCmd::Wait { id } => {
            let j: JobInfo = c.get(&format!("/v1/jobs/{id}"))?;
            let j = follow(c, j)?;
            out.show(&j, print_job);
        }
    }
    Ok(())
}

fn on(j: &JobInfo) -> String {
    match &j.target {
        Some(t) if t.contains('/') || t.contains(':') => t.clone(),
        Some(t) => format!("{}/{t}", j.pool),
        None => j.pool.clone(),
    }
}

fn print_job(j: &JobInfo) {
    println!("job {}: {} of {}", j.id, j.kind, on(j));
    println!("  state     {}", j.state);
    println!("  started   {} by {}", utc(j.started_ns / 1_000_000_000), j.caller);
    if let Some(f) = j.finished_ns {
        println!("  ended     {} ({:.1} s)", utc(f / 1_000_000_000), f.saturating_sub(j.started_ns) as f64 / 1e9);
    }
    println!(
        "  progress  {:.1}% ({} of {}) at {}/s{}",
        j.percent,
        human(j.done),
        human(j.total),
        human(j.per_second),
        j.eta_seconds.map(|e| format!(", {e:.0} s to go")).unwrap_or_default()
    );
    if let Some(e) = &j.error {
        println!("  error     {} ({})", e.message, e.hint);
    }
    if j.cancellable {
        println!("  cancel    strata job cancel {}", j.id);
    }
}

/// Say a job was started and how to follow it (`--no-wait`).
pub fn started(out: &Out, j: &JobInfo) {
    out.show(j, |j| {
        println!("job {} started: {} of {}; follow it with `strata job wait {}`", j.id, j.kind, on(j), j.id)
    });
}

/// Poll job `j` until it ends, drawing a progress bar on a terminal (a line every 10 s
/// otherwise). Killing the CLI does not stop the job. Ok with the job once it succeeded;
/// its error if it failed; a failure if it was cancelled or interrupted.
pub fn follow(c: &Client, mut j: JobInfo) -> Result<JobInfo, Failure> {
    let tty = std::io::stderr().is_terminal();
    let bar = tty.then(|| {
        let b = indicatif::ProgressBar::new(j.total.max(1));
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:32}] {percent:>3}% {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        b.set_message(format!("{} of {}", j.kind, on(&j)));
        b
    });
    let mut said = Instant::now();
    while !j.ended() {
        if let Some(b) = &bar {
            b.set_length(j.total.max(j.done).max(1));
            b.set_position(j.done);
        } else if said.elapsed() >= Duration::from_secs(10) {
            eprintln!(
                "job {}: {} of {} {:.1}% ({} of {}) at {}/s",
                j.id,
                j.kind,
                on(&j),
                j.percent,
                human(j.done),
                human(j.total),
                human(j.per_second)
            );
            said = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(200));
        j = c.get(&format!("/v1/jobs/{}", j.id))?;
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    match j.state.as_str() {
        "succeeded" => Ok(j),
        "failed" => Err(match &j.error {
            Some(e) => Failure {
                kind: Some(e.kind),
                message: format!("job {} ({} of {}): {}", j.id, j.kind, on(&j), e.message),
                hint: Some(e.hint.clone()),
                exit: e.kind.exit_code(),
            },
            None => Failure::other(format!("job {} ({} of {}) failed", j.id, j.kind, on(&j))),
        }),
        other => Err(Failure {
            kind: None,
            message: format!("job {} ({} of {}) was {other}", j.id, j.kind, on(&j)),
            hint: Some(format!("`strata job show {}`; start it again when ready", j.id)),
            exit: strata_api::EXIT_FAILURE,
        }),
    }
}

/// The result of a job that succeeded, as `T`.
pub fn result<T: serde::de::DeserializeOwned>(j: &JobInfo) -> Result<T, Failure> {
    serde_json::from_value(j.result.clone().unwrap_or_default())
        .map_err(|e| Failure::other(format!("job {}: its result is not what this CLI expects: {e}", j.id)))
}
