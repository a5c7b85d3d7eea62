//! The background scrub through the daemon and the CLI: start without waiting, status with
//! progress, pause (no progress while paused), resume, cancel (a report of what was
//! verified), a finished scrub's report in `pool status`, and every refusal. A real daemon
//! with `--scrub-rate 1M`, so the scrub is slow enough to drive. Needs root and /dev/fuse.

mod common;
use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

fn scrub(d: &Daemon, extra: &[&str]) -> Value {
    let mut args = vec!["pool", "scrub", "default"];
    args.extend_from_slice(extra);
    d.json(&args)
}

fn wait_state(d: &Daemon, want: &str) -> Value {
    let start = Instant::now();
    loop {
        let s = scrub(d, &["--status"]);
        if s["state"] == want {
            return s;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "scrub never {want}: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_background_scrub_is_paused_resumed_cancelled_and_reported() {
    let dir = temp_dir("scrub-cli");
    let mut d = Daemon::start(&dir);
    d.stop();
    d.spawn_with(&["--scrub-rate", "1M"]);
    // ~24 MiB of data to scrub: 24+ s at 1 MiB/s.
    let mnt = dir.join("mnt");
    d.ok(&["volume", "create", "default/data"]);
    d.ok(&["mount", "default/data", mnt.to_str().unwrap()]);
    let blob: Vec<u8> = (0..24u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(mnt.join("blob"), &blob).unwrap();
    d.ok(&["unmount", mnt.to_str().unwrap()]);

    let s = scrub(&d, &["--status"]);
    assert_eq!(s["state"], "none", "{s}");
    d.fails(&["pool", "scrub", "default", "--pause"], "no scrub running");

    let s = scrub(&d, &["--no-wait"]);
    assert_eq!(s["state"], "running", "{s}");
    d.fails(&["pool", "scrub", "default", "--no-wait"], "being scrubbed already");
    // Progress while running; none while paused.
    std::thread::sleep(Duration::from_millis(1500));
    let s = scrub(&d, &["--pause"]);
    assert_eq!(s["state"], "paused", "{s}");
    std::thread::sleep(Duration::from_millis(300));
    let a = scrub(&d, &["--status"])["done_bytes"].as_u64().unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let b = scrub(&d, &["--status"]);
    assert_eq!(b["state"], "paused", "{b}");
    assert!(a > 0 && b["done_bytes"].as_u64().unwrap() == a, "progress while paused: {a} then {b}");
    assert!(b["total_bytes"].as_u64().unwrap() > 24 << 20, "{b}");
    let status = d.ok(&["pool", "status", "default"]);
    assert!(status.contains("scrub     paused"), "{status}");

    let s = scrub(&d, &["--resume"]);
    assert_eq!(s["state"], "running", "{s}");
    std::thread::sleep(Duration::from_millis(1500));
    let c = scrub(&d, &["--status"]);
    assert!(c["done_bytes"].as_u64().unwrap() > a, "no progress after resume: {c}");
    assert!(c["eta_seconds"].as_f64().is_some(), "{c}");

    // --scrub-rate holds whether the pool is busy or not: the scrub waited.
    assert!(c["paced_seconds"].as_f64().unwrap() > 0.5, "{c}");
    assert_eq!(c["limit_bytes_per_second"], 1 << 20, "--scrub-rate is the limit, busy or not: {c}");
    scrub(&d, &["--cancel"]);
    let s = wait_state(&d, "cancelled");
    let r = &s["report"];
    assert_eq!(r["check"]["clean"], true, "a cancelled scrub reports nothing false: {s}");
    assert!(r["blocks_verified"].as_u64().unwrap() > 0, "{s}");
    d.fails(&["pool", "scrub", "default", "--cancel"], "no scrub running");

    // A scrub to the end (at full speed: a restart without --scrub-rate, idle pool).
    d.stop();
    d.spawn();
    let r = d.json(&["pool", "scrub", "default"]);
    assert_eq!(r["check"]["clean"], true, "{r}");
    assert!(r["blocks_verified"].as_u64().unwrap() > 24 * 64, "{r}");
    let s = scrub(&d, &["--status"]);
    assert_eq!(s["state"], "finished", "{s}");
    assert_eq!(s["percent"], 100.0, "{s}");
    assert_eq!(s["paced_seconds"], 0.0, "an idle pool's scrub waits for nothing: {s}");
    let status = d.ok(&["pool", "status", "default"]);
    assert!(status.contains("scrub     finished 100.0%"), "{status}");
    d.fails(&["pool", "scrub", "nosuchpool"], "pool nosuchpool");
    d.stop();
}

/// A scrub schedule: `pool set --scrub-every` starts scrubs by itself (jobs whose caller is
/// the schedule), keeps its phase across a restart (the state file), and `0` stops it.
#[test]
fn a_scrub_schedule_starts_scrubs_and_survives_a_restart() {
    let dir = temp_dir("scrub-schedule");
    let mut d = Daemon::start(&dir);
    d.fails(&["pool", "set", "default", "--scrub-every", "2x"], "unit");
    d.fails(&["pool", "set", "default", "--scrub-every", "400d"], "longer than a year");
    d.ok(&["pool", "set", "default", "--scrub-every", "2s"]);
    let p = d.json(&["pool", "status", "default"]);
    assert_eq!(p["scrub_every_seconds"], 2, "{p}");
    assert!(d.ok(&["pool", "status", "default"]).contains("schedule  scrub every 2 s, next at"));
    let scheduled = |d: &Daemon| -> Vec<Value> {
        let jobs = d.json(&["job", "list"]);
        jobs.as_array()
            .unwrap()
            .iter()
            .filter(|j| j["kind"] == "scrub" && j["caller"] == "scrub schedule")
            .cloned()
            .collect()
    };
    let start = Instant::now();
    while scheduled(&d).iter().filter(|j| j["state"] == "succeeded").count() < 2 {
        assert!(start.elapsed() < Duration::from_secs(30), "no two scheduled scrubs: {:?}", scheduled(&d));
        std::thread::sleep(Duration::from_millis(200));
    }
    // Across a restart: the schedule is in the state file, and goes on.
    let before = scheduled(&d).len();
    d.stop();
    d.spawn();
    assert_eq!(d.json(&["pool", "status", "default"])["scrub_every_seconds"], 2);
    let start = Instant::now();
    while scheduled(&d).len() <= before {
        assert!(start.elapsed() < Duration::from_secs(30), "no scheduled scrub after the restart");
        std::thread::sleep(Duration::from_millis(200));
    }
    // 0 stops it: no more scheduled scrubs.
    d.ok(&["pool", "set", "default", "--scrub-every", "0"]);
    assert!(d.json(&["pool", "status", "default"]).get("scrub_every_seconds").is_none());
    std::thread::sleep(Duration::from_millis(500));
    let n = scheduled(&d).len();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(scheduled(&d).len(), n, "a scrub after the schedule was stopped");
}

fn state_progress(dir: &std::path::Path) -> Value {
    let s: Value = serde_json::from_slice(&std::fs::read(dir.join("data/strata.json")).unwrap()).unwrap();
    s["pools"].as_array().unwrap().iter().find(|p| p["name"] == "default").unwrap()["scrub_progress"].clone()
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A scrub survives restarts of the daemon: paused and stopped (SIGTERM), it comes back
/// paused from its bookmark (the state file); resumed, it verifies only what it had not
/// (fewer blocks than a whole scrub); killed (-9) mid-way it resumes from the last bookmark
/// the watch loop saved. A finished scrub leaves nothing to resume. Fails when the daemon
/// drops the progress at shutdown (nothing to resume) or the walk ignores the bookmark
/// (as many blocks as a whole scrub).
#[test]
fn a_scrub_resumes_after_the_daemon_restarts() {
    let dir = temp_dir("scrub-resume");
    let mut d = Daemon::start(&dir);
    d.stop();
    d.spawn_with(&["--scrub-rate", "2M"]);
    let mnt = dir.join("mnt");
    d.ok(&["volume", "create", "default/data"]);
    d.ok(&["mount", "default/data", mnt.to_str().unwrap()]);
    for f in 0..12u32 {
        let blob: Vec<u8> = (0..2u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8 ^ f as u8).collect();
        std::fs::write(mnt.join(format!("f{f}")), &blob).unwrap();
    }
    d.ok(&["unmount", mnt.to_str().unwrap()]);
    // A whole scrub's count, for comparison.
    d.stop();
    d.spawn();
    let whole = d.json(&["pool", "scrub", "default"])["blocks_verified"].as_u64().unwrap();
    assert!(state_progress(&dir).is_null(), "a finished scrub leaves nothing to resume");
    d.stop();

    // Slowly, to a bookmark in the state file; paused; stopped.
    d.spawn_with(&["--scrub-rate", "2M"]);
    scrub(&d, &["--no-wait"]);
    wait_for("a bookmark in the state file", || state_progress(&dir)["bookmark"].is_array());
    scrub(&d, &["--pause"]);
    d.stop();
    let saved = state_progress(&dir);
    assert_eq!(saved["paused"], true, "{saved}");
    assert!(d.log().contains("scrub interrupted"), "{}", d.log());

    // Back paused, from the bookmark; resumed at full speed, it verifies the rest only.
    d.spawn();
    let s = wait_state(&d, "paused");
    assert!(s["message"].as_str().unwrap().contains("resumed after a restart"), "{s}");
    assert!(d.log().contains("scrub resumed after the restart, from object"), "{}", d.log());
    scrub(&d, &["--resume"]);
    let s = wait_state(&d, "finished");
    let resumed = s["report"]["blocks_verified"].as_u64().unwrap();
    assert!(resumed < whole, "the resumed scrub read everything again: {resumed} of {whole} blocks");
    assert_eq!(s["report"]["check"]["clean"], true, "{s}");
    assert_eq!(s["percent"], 100.0, "{s}");
    wait_for("the finished scrub's record dropped", || state_progress(&dir).is_null());

    // Killed mid-way: it resumes from the bookmark the watch loop saved last.
    d.stop();
    d.spawn_with(&["--scrub-rate", "2M"]);
    scrub(&d, &["--no-wait"]);
    wait_for("a bookmark in the state file", || state_progress(&dir)["bookmark"].is_array());
    d.kill9();
    d.spawn();
    let s = wait_state(&d, "finished");
    assert!(s["report"]["blocks_verified"].as_u64().unwrap() < whole, "{s}");
    let jobs = d.json(&["job", "list"]);
    assert!(jobs.as_array().unwrap().iter().any(|j| j["kind"] == "scrub" && j["caller"] == "restart"), "{jobs}");
    d.stop();
}
