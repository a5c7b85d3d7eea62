//! Synchronous mirrors through the daemon and the CLI (`mirror create --sync`): the link
//! arms, catches up with the first transfer and goes in sync; fsynced writes reach the
//! target pool's journal with no transfer; the daemon is killed with `kill -9` and the
//! source pool's image taken away (the source's storage is lost); after the restart the
//! mirror is broken, and the target holds every write that was fsynced, replayed from the
//! journal (the daemon's log and the break's event say so). Needs root and /dev/fuse.

mod common;
use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

fn show(d: &Daemon, m: &str) -> Value {
    d.json(&["mirror", "show", m])
}

#[test]
fn a_sync_mirror_holds_every_fsynced_write_after_the_source_is_lost() {
    let dir = temp_dir("sync-mirrors");
    let mut d = Daemon::start(&dir);
    let (img1, img2) = (dir.join("p1.img"), dir.join("p2.img"));
    d.ok(&["pool", "create", "p1", "--device", img1.to_str().unwrap(), "--size", "512M"]);
    d.ok(&["pool", "create", "p2", "--device", img2.to_str().unwrap(), "--size", "512M"]);
    d.ok(&["volume", "create", "p1/db"]);
    let m1 = dir.join("m1");
    std::fs::create_dir_all(&m1).unwrap();
    d.ok(&["mount", "p1/db", m1.to_str().unwrap()]);
    let base = write_file(&m1.join("base"), 1, 1 << 20);

    // Bad requests: each a clear refusal.
    d.fails(&["mirror", "create", "p1/db", "p2", "--sync", "sometimes"], "possible values");
    d.fails(&["mirror", "create", "p1/db", "nobody:p2", "--sync"], "no peer nobody");

    let m = d.json(&["mirror", "create", "p1/db", "p2", "--sync"]);
    assert_eq!(m["state"], "mirrored", "{m}");
    assert_eq!(m["sync"]["mode"], "on", "{m}");
    let start = Instant::now();
    while show(&d, "p2/db")["sync"]["state"] != "in-sync" {
        assert!(start.elapsed() < Duration::from_secs(30), "never in sync: {}", show(&d, "p2/db"));
        std::thread::sleep(Duration::from_millis(100));
    }
    d.fails(&["volume", "delete", "p2/db.sync-journal"], "target of mirror p2/db");
    d.fails(&["mirror", "create", "p1/db", "default", "--sync"], "already the source of synchronous mirror");
    let common = show(&d, "p2/db")["common_snapshot"].as_str().unwrap().to_string();

    // Writes after the last transfer: fsynced ones are on the target once fsync returns.
    let acked = write_file(&m1.join("acked"), 2, 3 << 20);
    let small = write_file(&m1.join("small"), 3, 100);
    std::fs::rename(m1.join("small"), m1.join("renamed")).unwrap();
    std::fs::File::open(&m1).unwrap().sync_all().unwrap();
    let s = show(&d, "p2/db");
    assert_eq!(s["common_snapshot"], common.as_str(), "no transfer ran meanwhile: {s}");
    assert!(s["sync"]["bytes"].as_u64().unwrap() >= 3 << 20, "the writes were journaled: {s}");

    // The source's storage is lost with the daemon.
    d.kill9();
    std::fs::rename(&img1, dir.join("p1.lost")).unwrap();
    d.spawn();
    let log = d.log();
    assert!(log.contains("sync mirror in sync"), "the link went in sync before the crash: {log}");
    let s = show(&d, "p2/db");
    assert_eq!(s["sync"]["state"], "off", "no link without the source pool: {s}");

    let b = d.json(&["mirror", "break", "p2/db"]);
    assert_eq!(b["state"], "broken", "{b}");
    let log = d.log();
    let line = log.lines().find(|l| l.contains("sync journal replayed")).unwrap_or_else(|| panic!("no replay: {log}"));
    assert!(!line.contains("frames=0 "), "the break replayed frames: {line}");
    let events = d.ok(&["events"]);
    assert!(events.contains("of synchronous writes replayed"), "{events}");

    let m2 = dir.join("m2");
    std::fs::create_dir_all(&m2).unwrap();
    d.ok(&["mount", "p2/db", m2.to_str().unwrap()]);
    assert_eq!(std::fs::read(m2.join("base")).unwrap(), base);
    assert_eq!(std::fs::read(m2.join("acked")).unwrap(), acked, "an fsynced file after the last transfer");
    assert_eq!(std::fs::read(m2.join("renamed")).unwrap(), small, "a rename made durable by a directory fsync");
    assert!(!m2.join("small").exists());
    d.ok(&["unmount", m2.to_str().unwrap()]);
}

fn wait_sync_state(d: &Daemon, m: &str, want: &str) -> Value {
    let start = Instant::now();
    loop {
        let s = show(d, m);
        if s["sync"]["state"] == want && s["state"] != "transferring" {
            return s;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "sync state never {want}: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The link's life with both pools present: pause takes it off and resume puts it back; a
/// restore of the source volume makes it fall back and arm again by itself; a break with
/// the source alive replays the journal; resync arms it again; delete drops the journal.
#[test]
fn a_sync_mirror_is_paused_restored_under_broken_resynced_and_deleted() {
    let dir = temp_dir("sync-mirror-life");
    let d = Daemon::start(&dir);
    let img2 = dir.join("p2.img");
    d.ok(&["pool", "create", "p2", "--device", img2.to_str().unwrap(), "--size", "512M"]);
    d.ok(&["volume", "create", "default/db"]);
    let m1 = dir.join("m1");
    std::fs::create_dir_all(&m1).unwrap();
    d.ok(&["mount", "default/db", m1.to_str().unwrap()]);
    let first = write_file(&m1.join("first"), 1, 200 << 10);
    d.ok(&["snapshot", "create", "default/db@before"]);
    d.json(&["mirror", "create", "default/db", "p2", "--sync"]);
    wait_sync_state(&d, "p2/db", "in-sync");

    let p = d.json(&["mirror", "pause", "p2/db"]);
    assert_eq!(p["sync"]["state"], "off", "{p}");
    d.json(&["mirror", "resume", "p2/db"]);
    wait_sync_state(&d, "p2/db", "in-sync");

    // A restore changes the volume outside the tap: the link falls back and comes back.
    d.ok(&["unmount", m1.to_str().unwrap()]);
    d.ok(&["restore", "default/db@before"]);
    d.ok(&["mount", "default/db", m1.to_str().unwrap()]);
    let log_mark = d.log().len();
    let start = Instant::now();
    while !d.log()[log_mark..].contains("sync mirror armed") {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the link was not armed again after the restore: {}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let events = d.ok(&["events"]);
    assert!(events.contains("a source volume was restored"), "{events}");
    wait_sync_state(&d, "p2/db", "in-sync");

    // Break with the source alive: the target gets what was fsynced since the last transfer.
    let second = write_file(&m1.join("second"), 2, 300 << 10);
    d.json(&["mirror", "break", "p2/db"]);
    let m2 = dir.join("m2");
    std::fs::create_dir_all(&m2).unwrap();
    d.ok(&["mount", "p2/db", m2.to_str().unwrap()]);
    assert_eq!(std::fs::read(m2.join("first")).unwrap(), first);
    assert_eq!(std::fs::read(m2.join("second")).unwrap(), second);
    d.ok(&["unmount", m2.to_str().unwrap()]);

    // Resync: a mirror again, armed again, in sync after its transfer.
    d.json(&["mirror", "resync", "p2/db"]);
    wait_sync_state(&d, "p2/db", "in-sync");
    let third = write_file(&m1.join("third"), 3, 10 << 10);
    assert!(show(&d, "p2/db")["sync"]["frames"].as_u64().unwrap() > 0);
    let _ = third;

    d.ok(&["mirror", "delete", "p2/db"]);
    let vols = d.ok(&["volume", "list", "p2"]);
    assert!(!vols.contains("sync-journal"), "the journal went with the mirror: {vols}");
    d.ok(&["unmount", m1.to_str().unwrap()]);
}
