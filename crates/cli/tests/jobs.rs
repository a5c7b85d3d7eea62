//! Jobs through the daemon and the CLI: a check and a clone split answer 202 with a job and
//! run to the end without anyone waiting; a scrub's job outlives the CLI that started it
//! (killed with SIGKILL); cancel; a failing job keeps its error; the list survives a restart
//! of the daemon (ids go on, a job cut by the stop is `interrupted`). A real daemon with
//! `--scrub-rate 2M`, so a scrub is slow enough to watch. Needs root and /dev/fuse.

mod common;
use common::*;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn wait_job(d: &Daemon, id: u64, want: &str) -> Value {
    let start = Instant::now();
    loop {
        let j = d.json(&["job", "show", &id.to_string()]);
        if j["state"] == want {
            return j;
        }
        assert!(j["state"] == "running", "job {id} ended {}, not {want}: {j}", j["state"]);
        assert!(start.elapsed() < Duration::from_secs(120), "job {id} never {want}: {j}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// ~`mib` MiB of data in volume default/`vol`.
fn fill(d: &Daemon, dir: &std::path::Path, vol: &str, mib: usize) {
    let mnt = dir.join(format!("mnt-{vol}"));
    d.ok(&["volume", "create", &format!("default/{vol}")]);
    d.ok(&["mount", &format!("default/{vol}"), mnt.to_str().unwrap()]);
    write_file(&mnt.join("blob"), 7, mib << 20);
    d.ok(&["unmount", mnt.to_str().unwrap()]);
}

#[test]
fn a_job_outlives_its_cli_and_cancel_stops_one() {
    let dir = temp_dir("jobs-outlive");
    let mut d = Daemon::start(&dir);
    d.stop();
    d.spawn_with(&["--scrub-rate", "2M"]);
    fill(&d, &dir, "data", 12);

    // `pool scrub` waits for the end; kill it once its job has made progress.
    let mut cli = Command::new(BIN)
        .args(["pool", "scrub", "default"])
        .env("STRATA_SOCKET", &d.socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let job = loop {
        let jobs = d.json(&["job", "list"]);
        let j = jobs.as_array().unwrap().iter().find(|j| j["kind"] == "scrub").cloned();
        if let Some(j) = j.filter(|j| j["done"].as_u64().unwrap() > 0) {
            break j;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no scrub job with progress: {jobs}");
        std::thread::sleep(Duration::from_millis(100));
    };
    cli.kill().unwrap();
    cli.wait().unwrap();
    let id = job["id"].as_u64().unwrap();
    assert_eq!(job["state"], "running", "{job}");
    assert_eq!(job["pool"], "default");
    assert!(job["caller"].as_str().unwrap().starts_with("uid 0"), "{job}");
    assert!(job["total"].as_u64().unwrap() > 12 << 20, "{job}");
    assert_eq!(job["cancellable"], true);
    // The scrub's own status names its job.
    assert_eq!(d.json(&["pool", "scrub", "default", "--status"])["job"], id);
    // It goes on without the CLI, with a rate and an ETA, and ends.
    std::thread::sleep(Duration::from_millis(1200));
    let j = d.json(&["job", "show", &id.to_string()]);
    assert_eq!(j["state"], "running", "{j}");
    assert!(j["done"].as_u64().unwrap() > job["done"].as_u64().unwrap(), "no progress after the CLI died: {j}");
    assert!(j["per_second"].as_u64().unwrap() > 0 && j["eta_seconds"].as_f64().is_some(), "{j}");
    let j = wait_job(&d, id, "succeeded");
    assert_eq!(j["percent"], 100.0, "{j}");
    assert!(j["finished_ns"].as_u64().unwrap() >= j["started_ns"].as_u64().unwrap());
    assert_eq!(j["result"]["state"], "finished", "the result is the scrub's status: {j}");
    assert_eq!(j["result"]["report"]["check"]["clean"], true, "{j}");
    // `job wait` on an ended job returns at once, with the job's status.
    let (code, text, _) = d.cli(&["job", "wait", &id.to_string()]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("succeeded"), "{text}");

    // Cancel: a second scrub, cancelled through its job.
    let s = d.json(&["pool", "scrub", "default", "--no-wait"]);
    let id2 = s["job"].as_u64().unwrap();
    assert!(id2 > id, "ids grow: {id} then {id2}");
    std::thread::sleep(Duration::from_millis(300));
    let c = d.json(&["job", "cancel", &id2.to_string()]);
    assert_eq!(c["id"], id2);
    let j = wait_job(&d, id2, "cancelled");
    assert!(j["done"].as_u64().unwrap() < j["total"].as_u64().unwrap(), "cancelled part way: {j}");
    assert_eq!(d.json(&["pool", "scrub", "default", "--status"])["state"], "cancelled");
    d.fails(&["job", "cancel", &id2.to_string()], "has ended");
    d.fails(&["job", "show", "999999"], "not found: job 999999");
    // `job wait` on a cancelled job fails (exit 1) and says so.
    let (code, _, err) = d.cli(&["job", "wait", &id2.to_string()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("was cancelled"), "{err}");
}

#[test]
fn check_and_split_are_jobs_their_errors_are_kept_and_the_list_survives_a_restart() {
    let dir = temp_dir("jobs-check-split");
    let mut d = Daemon::start(&dir);
    fill(&d, &dir, "db", 4);

    // A check without waiting: 202 + the job; its result is the report.
    let j = d.json(&["check", "default", "--no-wait"]);
    assert_eq!(j["kind"], "check", "{j}");
    let check = j["id"].as_u64().unwrap();
    let j = wait_job(&d, check, "succeeded");
    assert_eq!(j["result"]["clean"], true, "{j}");
    assert!(j["done"].as_u64().unwrap() >= 4 << 20, "the check counted the blocks it walked: {j}");
    // Waiting (the CLI's default) prints the report as before.
    let r = d.json(&["check", "default"]);
    assert_eq!(r["clean"], true, "{r}");

    // A clone split is a job too; its result is the split's.
    d.ok(&["snapshot", "create", "default/db@s1"]);
    d.ok(&["clone", "create", "default/db@s1", "default/c1"]);
    let j = d.json(&["clone", "split", "default/c1", "--no-wait"]);
    assert_eq!((j["kind"].as_str(), j["target"].as_str()), (Some("split"), Some("c1")), "{j}");
    let split = j["id"].as_u64().unwrap();
    let j = wait_job(&d, split, "succeeded");
    assert!(j["result"]["copied_bytes"].as_u64().unwrap() >= 4 << 20, "{j}");
    assert_eq!(j["result"]["volume"]["origin"], Value::Null, "no longer a clone: {j}");
    // Refused before a job starts: not a clone.
    d.fails(&["clone", "split", "default/c1"], "not a clone");
    // A job that fails keeps its error, and the CLI that waits says it with the job's id.
    d.ok(&["clone", "create", "default/db@s1", "default/c2"]);
    d.ok(&["snapshot", "create", "default/c2@x"]);
    let (code, _, err) = d.cli(&["clone", "split", "default/c2"]);
    assert_eq!(code, 4, "a conflict: {err}");
    assert!(err.contains("has snapshots") && err.contains("(split of default/c2)"), "{err}");
    let jobs = d.json(&["job", "list"]);
    let failed = jobs.as_array().unwrap().iter().find(|j| j["target"] == "c2").unwrap().clone();
    assert_eq!(failed["state"], "failed", "{failed}");
    assert!(failed["error"]["message"].as_str().unwrap().contains("has snapshots"), "{failed}");
    assert_eq!(failed["error"]["kind"], "Conflict", "{failed}");

    // The list survives a restart; ids go on from it.
    d.stop();
    d.spawn();
    let j = d.json(&["job", "show", &split.to_string()]);
    assert_eq!(j["state"], "succeeded", "{j}");
    let after = d.json(&["check", "default", "--no-wait"])["id"].as_u64().unwrap();
    assert!(after > failed["id"].as_u64().unwrap(), "ids go on after a restart");
    wait_job(&d, after, "succeeded");
    let text = d.ok(&["job", "list"]);
    assert!(text.contains("check") && text.contains("default/c1") && text.contains("failed"), "{text}");
}

#[test]
fn a_job_cut_by_a_daemon_stop_is_listed_interrupted() {
    let dir = temp_dir("jobs-interrupted");
    let mut d = Daemon::start(&dir);
    d.stop();
    d.spawn_with(&["--scrub-rate", "1M"]);
    fill(&d, &dir, "data", 8);
    let id = d.json(&["pool", "scrub", "default", "--no-wait"])["job"].as_u64().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    d.kill9();
    d.spawn();
    let j = d.json(&["job", "show", &id.to_string()]);
    assert_eq!(j["state"], "interrupted", "{j}");
    assert_eq!(j["cancellable"], false, "{j}");
    d.fails(&["job", "cancel", &id.to_string()], "has ended");
}
