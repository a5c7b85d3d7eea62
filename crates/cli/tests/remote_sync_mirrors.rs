//! A synchronous mirror between two daemons paired as peers (`mirror create --sync` to
//! PEER:POOL): the journal lives on the target daemon, frames travel over the mutually
//! authenticated replication port. The target daemon is killed and restarted: the link
//! falls back (fsync goes on), arms again by itself and catches up with a transfer. Then
//! the source daemon is killed with `kill -9` after writes that were fsynced but never
//! transferred; broken on the target, the mirror holds them (replayed from the target's
//! journal, which its log says). Needs root and /dev/fuse.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

fn daemon(dir: &Path, tag: &str) -> (Daemon, u16) {
    start_with_repl(dir, tag)
}

fn sync_state(d: &Daemon, m: &str) -> Value {
    d.json(&["mirror", "show", m])
}

#[test]
fn a_sync_mirror_to_a_peer_holds_every_fsynced_write_after_the_source_daemon_dies() {
    let dir = temp_dir("remote-sync-mirror");
    let (mut a, _) = daemon(&dir, "a");
    let (b, b_port) = daemon(&dir, "b");
    let img = dir.join("b").join("backup.img");
    b.ok(&["pool", "create", "backup", "--device", img.to_str().unwrap(), "--size", "512M"]);
    let (code, token, err) = b.cli(&["peer", "invite", "--name", "site-a", "--grant", "backup"]);
    assert_eq!(code, 0, "{err}");
    a.json(&["peer", "add", "site-b", &format!("127.0.0.1:{b_port}"), "--invitation", token.trim()]);

    // Under the source daemon's directory: its Drop unmounts it after the kill -9.
    let src = a.dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    a.ok(&["volume", "create", "default/db"]);
    a.ok(&["mount", "default/db", src.to_str().unwrap()]);
    let base = write_file(&src.join("base"), 1, 1 << 20);

    a.fails(&["mirror", "create", "default/db", "site-b:default", "--sync"], "may not write to pool default");
    let m = a.json(&["mirror", "create", "default/db", "site-b:backup", "--sync"]);
    assert_eq!(m["sync"]["mode"], "on", "{m}");
    let start = Instant::now();
    loop {
        let s = sync_state(&a, "site-b:backup/db");
        if s["sync"]["state"] == "in-sync" && s["state"] == "mirrored" {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "never in sync: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
    b.fails(&["volume", "delete", "backup/db.sync-journal"], "target of mirror backup/db");
    let first_common = sync_state(&a, "site-b:backup/db")["common_snapshot"].clone();

    // The target daemon dies and comes back: the link falls back (an `on` mirror: fsync
    // still returns), then arms again by itself and catches up with a transfer.
    let mut b = b;
    b.kill9();
    let during = write_file(&src.join("during"), 4, 64 << 10);
    b.spawn_with(&["--repl-port", b_port.to_string().as_str()]);
    let start = Instant::now();
    loop {
        let s = sync_state(&a, "site-b:backup/db");
        if s["sync"]["state"] == "in-sync" && s["state"] == "mirrored" && s["common_snapshot"] != first_common {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "not in sync again after the target's restart: {s}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let alog = a.log();
    assert!(alog.contains("sync mirror fell back to asynchronous"), "the link fell back: {alog}");
    let common = sync_state(&a, "site-b:backup/db")["common_snapshot"].as_str().unwrap().to_string();

    // Fsynced after the last transfer: on the peer's journal once fsync returns.
    let acked = write_file(&src.join("acked"), 2, 3 << 20);
    let small = write_file(&src.join("small"), 3, 100);
    std::fs::rename(src.join("small"), src.join("renamed")).unwrap();
    std::fs::File::open(&src).unwrap().sync_all().unwrap();
    let s = sync_state(&a, "site-b:backup/db");
    assert_eq!(s["common_snapshot"], common.as_str(), "no transfer ran meanwhile: {s}");
    assert!(s["sync"]["bytes"].as_u64().unwrap() >= 3 << 20, "the writes were journaled: {s}");

    // The source daemon dies; the target breaks the mirror and holds every fsynced write.
    a.kill9();
    let broken = b.json(&["mirror", "break", "backup/db"]);
    assert_eq!(broken["state"], "broken", "{broken}");
    let log = b.log();
    let line = log.lines().find(|l| l.contains("sync journal replayed")).unwrap_or_else(|| panic!("no replay: {log}"));
    assert!(!line.contains("frames=0 "), "the break replayed frames: {line}");
    let tgt = dir.join("tgt");
    std::fs::create_dir_all(&tgt).unwrap();
    b.ok(&["mount", "backup/db", tgt.to_str().unwrap()]);
    assert_eq!(std::fs::read(tgt.join("base")).unwrap(), base);
    assert_eq!(std::fs::read(tgt.join("during")).unwrap(), during, "written while the target was down");
    assert_eq!(std::fs::read(tgt.join("acked")).unwrap(), acked, "an fsynced file after the last transfer");
    assert_eq!(std::fs::read(tgt.join("renamed")).unwrap(), small, "a rename made durable by a directory fsync");
    b.ok(&["unmount", tgt.to_str().unwrap()]);
}
