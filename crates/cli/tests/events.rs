//! The event history through the daemon: a mirror transfer, a scrub, a refused request and a
//! mirror break are recorded with their kind, pool and target; `--limit`; the history and
//! its ids survive a restart. Needs root and /dev/fuse.

mod common;
use common::*;
use serde_json::Value;

fn kinds(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap().to_string()).collect()
}

#[test]
fn events_record_transfers_scrubs_refusals_and_breaks_and_survive_a_restart() {
    let dir = temp_dir("events");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut d = Daemon { child: None, socket: dir.join("strata.sock"), dir: dir.clone() };
    d.spawn_with(&["--tcp", &addr]);
    let img = dir.join("p2.img");
    d.ok(&["pool", "create", "p2", "--device", img.to_str().unwrap(), "--size", "256M"]);
    d.ok(&["volume", "create", "default/db"]);
    let m = d.json(&["mirror", "create", "default/db", "p2"]);
    assert_eq!(m["state"], "mirrored", "{m}");
    d.ok(&["pool", "scrub", "default"]);
    // A request with a forged token over TCP is refused, and recorded.
    let (code, _, err) = d.cli(&["--api", &addr, "--token", "strata_0000000000000001_00", "whoami"]);
    assert_ne!(code, 0, "{err}");
    d.json(&["mirror", "break", "p2/db"]);

    let ev = d.json(&["events", "--limit", "100"]);
    let k = kinds(&ev);
    for want in ["mirror.transfer", "scrub.finished", "request.refused", "mirror.break"] {
        assert!(k.iter().any(|x| x == want), "no {want} event in {ev}");
    }
    let t = ev.as_array().unwrap().iter().find(|e| e["kind"] == "mirror.transfer").unwrap();
    assert_eq!(t["pool"], "default", "{t}");
    assert_eq!(t["target"], "p2/db", "{t}");
    assert!(t["message"].as_str().unwrap().starts_with("transferred mirror-"), "{t}");
    let s = ev.as_array().unwrap().iter().find(|e| e["kind"] == "scrub.finished").unwrap();
    assert_eq!(s["severity"], "info", "{s}");
    assert!(s["message"].as_str().unwrap().contains("blocks verified"), "{s}");
    let ids: Vec<u64> = ev.as_array().unwrap().iter().map(|e| e["id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "oldest first, ids growing: {ids:?}");
    let last = d.json(&["events", "--limit", "1"]);
    assert_eq!(last.as_array().unwrap().len(), 1);
    assert_eq!(last[0]["id"].as_u64().unwrap(), *ids.last().unwrap(), "the newest");

    // A restart keeps the history; new events go on from the last id.
    d.stop();
    d.spawn_with(&["--tcp", &addr]);
    let after = d.json(&["events", "--limit", "100"]);
    assert_eq!(kinds(&after), k, "the same history after a restart");
    d.json(&["mirror", "resync", "p2/db"]);
    let newest = d.json(&["events", "--limit", "1"]);
    assert_eq!(newest[0]["kind"], "mirror.resync", "{newest}");
    assert!(newest[0]["id"].as_u64().unwrap() > *ids.last().unwrap());
    assert!(d.ok(&["events"]).contains("mirror.resync"), "the human form lists it too");
}

fn wait_kind(d: &Daemon, kind: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let start = std::time::Instant::now();
    loop {
        let ev = d.json(&["events", "--limit", "1000"]);
        if let Some(e) = ev.as_array().unwrap().iter().find(|e| e["kind"] == kind && pred(e)) {
            return e.clone();
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(30), "no {kind} event: {ev}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// What the watch thread and the snapshot policy record: a pool past 80 % and 90 % full
/// (and back under, with hysteresis), commits slower than `--slow-commit-ms`, a policy's
/// snapshot with the expired ones it deleted.
#[test]
fn capacity_slow_commits_and_policy_runs_are_events() {
    let dir = temp_dir("events-watch");
    let mut d = Daemon::start(&dir);
    d.stop();
    // Every commit with data takes more than 1 ms (it syncs the pool's image).
    d.spawn_with(&["--slow-commit-ms", "1"]);
    let mnt = dir.join("mnt");
    d.ok(&["volume", "create", "default/fill"]);
    d.ok(&["mount", "default/fill", mnt.to_str().unwrap()]);
    let status = d.json(&["pool", "status", "default"]);
    let size = status["size_bytes"].as_u64().unwrap();
    // Past 90 %: the pool is 256 MiB; write (and sync) what brings it there.
    let used = status["allocated_bytes"].as_u64().unwrap();
    let want = (size as f64 * 0.92) as u64 - used;
    write_file(&mnt.join("a"), 1, (want / 2) as usize);
    write_file(&mnt.join("b"), 2, (want / 2) as usize);
    d.ok(&["snapshot", "create", "default/fill@x"]); // a commit: the space is allocated
    let e = wait_kind(&d, "pool.capacity", |e| e["message"].as_str().unwrap().contains("past 90%"));
    assert_eq!(e["severity"], "warning", "{e}");
    assert_eq!(e["pool"], "default", "{e}");
    let slow = wait_kind(&d, "pool.slow_commit", |_| true);
    assert!(slow["message"].as_str().unwrap().contains("longer than 1 ms"), "{slow}");
    // Back under 85 %: the files and the snapshot holding them deleted.
    std::fs::remove_file(mnt.join("a")).unwrap();
    std::fs::remove_file(mnt.join("b")).unwrap();
    d.ok(&["snapshot", "delete", "default/fill@x"]);
    d.ok(&["unmount", mnt.to_str().unwrap()]);
    let back = wait_kind(&d, "pool.capacity", |e| e["message"].as_str().unwrap().contains("back under"));
    assert_eq!(back["severity"], "info", "{back}");
    // Each level announced once on the way up (80 then 90, or 90 at once), not repeated.
    let ev = d.json(&["events", "--limit", "1000"]);
    let ups = ev.as_array().unwrap().iter().filter(|e| e["kind"] == "pool.capacity" && e["severity"] != "info").count();
    assert!((1..=2).contains(&ups), "{ev}");

    // A policy every second keeping one: its snapshot, then the expiry of the one before.
    d.ok(&["snapshot", "policy", "set", "default/fill", "tick=1s:1"]);
    let p = wait_kind(&d, "policy.snapshot", |e| e["message"].as_str().unwrap().contains("expired deleted"));
    assert_eq!(p["target"], "fill", "{p}");
    assert!(p["message"].as_str().unwrap().contains("schedule tick: snapshot auto-tick-"), "{p}");
    d.ok(&["snapshot", "policy", "clear", "default/fill"]);
}
