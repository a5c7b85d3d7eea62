//! Mirrors through the daemon and the CLI: a group of two volumes mirrored to a second pool,
//! full then incremental transfers (the target snapshots read exactly as the source's),
//! the rules on a target (no mount, no delete, no restore; the common snapshot held on both
//! sides), pause and resume, a transfer cut by `kill -9` and resumed after the restart, break
//! (target writable at the last transferred snapshot), resync (the target's writes kept as a
//! snapshot), retention, and delete. Needs root and /dev/fuse.

mod common;
use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

fn show(d: &Daemon, m: &str) -> Value {
    d.json(&["mirror", "show", m])
}

fn show_after_restart(d: &mut Daemon) -> Value {
    d.spawn();
    show(d, "p2/data")
}

#[test]
fn a_group_is_mirrored_updated_broken_resynced_and_resumed_after_a_crash() {
    let dir = temp_dir("mirrors");
    let mut d = Daemon::start(&dir);
    let img = dir.join("p2.img");
    d.ok(&["pool", "create", "p2", "--device", img.to_str().unwrap(), "--size", "1G"]);
    let (data_mnt, wal_mnt) = (dir.join("mdata"), dir.join("mwal"));
    for (v, m) in [("data", &data_mnt), ("wal", &wal_mnt)] {
        d.ok(&["volume", "create", &format!("default/{v}")]);
        std::fs::create_dir_all(m).unwrap();
        d.ok(&["mount", &format!("default/{v}"), m.to_str().unwrap()]);
    }
    let a1 = write_file(&data_mnt.join("table"), 1, 3 << 20);
    let w1 = write_file(&wal_mnt.join("log"), 2, 1 << 20);

    // Bad requests first: each a clear refusal.
    d.fails(&["mirror", "create", "default/data", "default"], "both in pool default");
    d.fails(&["mirror", "create", "default/nope", "p2"], "nope");
    d.fails(&["mirror", "create", "default/data", "p2", "--every", "5x"], "unit s, m, h or d");
    d.fails(&["mirror", "show", "p2"], "DEST_POOL/VOLUME");

    // Create: the target volumes appear, the full transfer runs (the CLI waits for it).
    let m = d.json(&["mirror", "create", "default/data", "p2", "--group", "wal", "--keep", "2"]);
    assert_eq!(m["state"], "mirrored", "{m}");
    assert_eq!(m["name"], "p2/data");
    let s1 = m["common_snapshot"].as_str().unwrap().to_string();
    assert!(s1.starts_with("mirror-"), "{m}");
    let full_bytes = m["last_transfer"]["done_bytes"].as_u64().unwrap();
    assert!(full_bytes >= (4 << 20) - 4096, "the full transfer carries both volumes: {m}");
    assert_eq!(read_snapshot_file(&d, &dir, "p2", "data", &s1, "table").as_deref(), Some(&a1[..]));
    assert_eq!(read_snapshot_file(&d, &dir, "p2", "wal", &s1, "log").as_deref(), Some(&w1[..]));

    // The rules on a target while mirrored.
    let tm = dir.join("target-mnt");
    std::fs::create_dir_all(&tm).unwrap();
    d.fails(&["mount", "p2/data", tm.to_str().unwrap()], "target of mirror p2/data");
    d.fails(&["volume", "delete", "p2/wal"], "target of mirror p2/data");
    d.fails(&["restore", &format!("p2/data@{s1}")], "target of mirror");
    d.fails(&["snapshot", "delete", &format!("default/data@{s1}")], "common snapshot of mirror p2/data");
    d.fails(&["snapshot", "delete", &format!("p2/wal@{s1}")], "common snapshot of mirror p2/data");
    d.fails(&["volume", "delete", "default/data"], "mirrored by p2/data");

    // An incremental carries what changed: 256 KiB rewritten in the 3 MiB table.
    let mut a2 = a1.clone();
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(data_mnt.join("table")).unwrap();
        f.seek(SeekFrom::Start(1 << 20)).unwrap();
        f.write_all(&vec![0xAB; 256 << 10]).unwrap();
        f.sync_all().unwrap();
        a2[1 << 20..(1 << 20) + (256 << 10)].fill(0xAB);
    }
    let m = d.json(&["mirror", "update", "p2/data"]);
    assert_eq!(m["state"], "mirrored", "{m}");
    let s2 = m["common_snapshot"].as_str().unwrap().to_string();
    assert_ne!(s1, s2);
    let inc = m["last_transfer"]["done_bytes"].as_u64().unwrap();
    assert!(
        (256 << 10..1 << 20).contains(&inc),
        "the incremental carries the rewrite, not the volume: {inc} bytes: {m}"
    );
    assert_eq!(m["last_transfer"]["base"], s1.as_str());
    assert_eq!(read_snapshot_file(&d, &dir, "p2", "data", &s2, "table").as_deref(), Some(&a2[..]));

    // Pause: updates refused; resume: allowed again.
    d.json(&["mirror", "pause", "p2/data"]);
    d.fails(&["mirror", "update", "p2/data"], "paused");
    let m = d.json(&["mirror", "resume", "p2/data"]);
    assert_eq!(m["state"], "mirrored", "{m}");

    // A transfer cut by kill -9 resumes after the restart and completes.
    let big = write_file(&data_mnt.join("big"), 3, 160 << 20);
    d.ok(&["mirror", "update", "p2/data", "--no-wait"]);
    let start = Instant::now();
    let cut_at = loop {
        let s = show(&d, "p2/data");
        let done = s["transfer"]["done_bytes"].as_u64().unwrap_or(0);
        // Well into the transfer: the restart resumes from the receiver's last checkpoint.
        if done > 80 << 20 {
            break done;
        }
        assert!(s["state"] == "transferring" && start.elapsed() < Duration::from_secs(60), "no transfer to cut: {s}");
        std::thread::sleep(Duration::from_millis(5));
    };
    d.kill9();
    let before = show_after_restart(&mut d);
    assert_eq!(
        before["common_snapshot"],
        s2.as_str(),
        "the cut transfer had not finished ({cut_at} bytes sent): {before}"
    );
    let start = Instant::now();
    let m = loop {
        let m = show(&d, "p2/data");
        if m["common_snapshot"] != s2.as_str() && m["state"] != "transferring" {
            break m;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "the cut transfer never finished: {m}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(m["state"], "mirrored", "{m}");
    let s3 = m["common_snapshot"].as_str().unwrap().to_string();
    let log = d.log();
    assert!(log.contains("resuming a mirror transfer"), "the restart resumed the transfer: {log}");
    assert!(log.contains("mirror transfer done"), "the daemon's log tells the transfer ended");
    // Resumed from the checkpoint: what was committed before the crash is not sent again;
    // at most one checkpoint interval (4 MiB for this stream: `checkpoint_for`) is resent.
    let resent = m["last_transfer"]["done_bytes"].as_u64().unwrap();
    let bound = (160u64 << 20) - cut_at + (4 << 20) + (1 << 20);
    assert!(
        resent <= bound,
        "the resumed transfer sent {resent} bytes of 160 MiB (cut at {cut_at}, bound {bound}): {log}"
    );
    assert_eq!(read_snapshot_file(&d, &dir, "p2", "data", &s3, "big").as_deref(), Some(&big[..]));
    // Retention: two transferred snapshots per side.
    let snaps = d.json(&["snapshot", "list", "p2/data"]);
    let names: Vec<&str> = snaps
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .filter(|n| n.starts_with("mirror-"))
        .collect();
    assert_eq!(names.len(), 2, "keep 2: {names:?}");
    assert!(names.contains(&s3.as_str()));

    // Break: the target is writable, at the last transferred snapshot.
    let m = d.json(&["mirror", "break", "p2/data"]);
    assert_eq!(m["state"], "broken", "{m}");
    d.ok(&["mount", "p2/data", tm.to_str().unwrap()]);
    assert_eq!(std::fs::read(tm.join("big")).unwrap(), big);
    std::fs::write(tm.join("written-on-target"), b"keep me").unwrap();
    d.fails(&["mirror", "update", "p2/data"], "broken");
    d.fails(&["mirror", "resync", "p2/data"], "is mounted");
    d.ok(&["unmount", tm.to_str().unwrap()]);

    // Resync: the target's writes are kept as a snapshot; updates flow again.
    let m = d.json(&["mirror", "resync", "p2/data"]);
    assert_eq!(m["state"], "mirrored", "{m}");
    let snaps = d.json(&["snapshot", "list", "p2/data"]);
    let saved = snaps
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .find(|n| n.starts_with("resync-"))
        .expect("a resync snapshot")
        .to_string();
    assert_eq!(
        read_snapshot_file(&d, &dir, "p2", "data", &saved, "written-on-target").as_deref(),
        Some(&b"keep me"[..])
    );
    std::fs::write(data_mnt.join("after-resync"), b"new").unwrap();
    let m = d.json(&["mirror", "update", "p2/data"]);
    let s4 = m["common_snapshot"].as_str().unwrap().to_string();
    assert_eq!(read_snapshot_file(&d, &dir, "p2", "data", &s4, "after-resync").as_deref(), Some(&b"new"[..]));
    assert_eq!(read_snapshot_file(&d, &dir, "p2", "data", &s4, "written-on-target"), None);

    // List, delete: the targets stay, writable.
    let l = d.json(&["mirror", "list"]);
    assert_eq!(l.as_array().unwrap().len(), 1, "{l}");
    d.ok(&["mirror", "delete", "p2/data"]);
    d.ok(&["mount", "p2/data", tm.to_str().unwrap()]);
    d.ok(&["unmount", tm.to_str().unwrap()]);
    for m in [&data_mnt, &wal_mnt] {
        d.ok(&["unmount", m.to_str().unwrap()]);
    }
    let c = d.json(&["check", "p2"]);
    assert_eq!(c["clean"], true, "{c}");
    let c = d.json(&["check", "default"]);
    assert_eq!(c["clean"], true, "{c}");
}

#[test]
fn a_broken_mirror_is_reversed_and_sends_only_what_changed() {
    let dir = temp_dir("mirror-reverse");
    let d = Daemon::start(&dir);
    let img = dir.join("p2.img");
    d.ok(&["pool", "create", "p2", "--device", img.to_str().unwrap(), "--size", "512M"]);
    let (src, tgt) = (dir.join("src"), dir.join("tgt"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&tgt).unwrap();
    d.ok(&["volume", "create", "default/db"]);
    d.ok(&["mount", "default/db", src.to_str().unwrap()]);
    let base = write_file(&src.join("table"), 7, 8 << 20);
    let m = d.json(&["mirror", "create", "default/db", "p2"]);
    assert_eq!(m["state"], "mirrored", "{m}");
    d.fails(&["mirror", "reverse", "p2/db"], "not broken");
    d.json(&["mirror", "break", "p2/db"]);
    // The application moves to the target and writes there; the old source also wrote
    // something after the last transfer (lost to the application, kept as a snapshot).
    d.ok(&["mount", "p2/db", tgt.to_str().unwrap()]);
    std::fs::write(tgt.join("after-failover"), b"written on the target").unwrap();
    std::fs::File::open(tgt.join("after-failover")).unwrap().sync_all().unwrap();
    std::fs::write(src.join("late"), b"late write on the old source").unwrap();
    std::fs::File::open(src.join("late")).unwrap().sync_all().unwrap();
    d.fails(&["mirror", "reverse", "p2/db"], "is mounted");
    d.ok(&["unmount", src.to_str().unwrap()]);
    let m = d.json(&["mirror", "reverse", "p2/db"]);
    assert_eq!(m["name"], "default/db", "{m}");
    assert_eq!(m["source_pool"], "p2");
    assert_eq!(m["state"], "mirrored");
    d.fails(&["mount", "default/db", src.to_str().unwrap()], "target of mirror default/db");
    // Only the change since the common snapshot travels back.
    let m = d.json(&["mirror", "update", "default/db"]);
    let sent = m["last_transfer"]["done_bytes"].as_u64().unwrap();
    assert!(sent < 1 << 20, "the reverse update sent {sent} bytes for a 21-byte file: {m}");
    let snap = m["common_snapshot"].as_str().unwrap().to_string();
    assert_eq!(
        read_snapshot_file(&d, &dir, "default", "db", &snap, "after-failover").as_deref(),
        Some(&b"written on the target"[..])
    );
    assert_eq!(read_snapshot_file(&d, &dir, "default", "db", &snap, "table").as_deref(), Some(&base[..]));
    let snaps = d.json(&["snapshot", "list", "default/db"]);
    let kept = snaps
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .find(|n| n.starts_with("reverse-"))
        .expect("the old source's late write kept")
        .to_string();
    assert_eq!(
        read_snapshot_file(&d, &dir, "default", "db", &kept, "late").as_deref(),
        Some(&b"late write on the old source"[..])
    );
    d.ok(&["unmount", tgt.to_str().unwrap()]);
}

/// A bandwidth limit holds over the transfer (never faster; sleeping can only slow it, so
/// the upper bound is what is asserted, with a floor to show the transfer was not stalled).
#[test]
fn a_bandwidth_limit_holds() {
    let dir = temp_dir("mirror-limit");
    let d = Daemon::start(&dir);
    let img = dir.join("p2.img");
    d.ok(&["pool", "create", "p2", "--device", img.to_str().unwrap(), "--size", "512M"]);
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    d.ok(&["volume", "create", "default/db"]);
    d.ok(&["mount", "default/db", src.to_str().unwrap()]);
    write_file(&src.join("table"), 9, 24 << 20);
    d.fails(&["mirror", "create", "default/db", "p2", "--limit", "0"], "a limit above 0");
    let m = d.json(&["mirror", "create", "default/db", "p2", "--limit", "8M"]);
    assert_eq!(m["limit_bytes_per_second"], 8 << 20, "{m}");
    let l = &m["last_transfer"];
    let (bytes, secs) = (l["done_bytes"].as_u64().unwrap(), l["seconds"].as_f64().unwrap());
    let rate = bytes as f64 / secs;
    assert!(bytes >= (24 << 20) - 65536, "{m}");
    assert!(
        (8.0 * 1048576.0 * 0.5..=8.0 * 1048576.0 * 1.05).contains(&rate),
        "{rate:.0} B/s for a limit of 8 MiB/s: {m}"
    );
    d.ok(&["unmount", src.to_str().unwrap()]);
}

/// A target pool that fills up mid-transfer: the transfer fails with a message saying so,
/// the target keeps exactly its last transferred snapshot (nothing half applied becomes a
/// snapshot), and once the source shrinks again the next update succeeds.
#[test]
fn a_full_target_pool_fails_the_transfer_cleanly() {
    let dir = temp_dir("mirror-full");
    let d = Daemon::start(&dir);
    let img = dir.join("small.img");
    d.ok(&["pool", "create", "small", "--device", img.to_str().unwrap(), "--size", "128M"]);
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    d.ok(&["volume", "create", "default/db"]);
    d.ok(&["mount", "default/db", src.to_str().unwrap()]);
    let first = write_file(&src.join("first"), 1, 16 << 20);
    let m = d.json(&["mirror", "create", "default/db", "small"]);
    let s1 = m["common_snapshot"].as_str().unwrap().to_string();
    write_file(&src.join("big"), 2, 200 << 20);
    let (code, _, err) = d.cli(&["mirror", "update", "small/db"]);
    assert_ne!(code, 0, "the update into a full pool must fail");
    assert!(err.contains("space") || err.contains("full"), "the error says the target is out of space: {err}");
    let m = d.json(&["mirror", "show", "small/db"]);
    assert_eq!(m["state"], "failed", "{m}");
    assert_eq!(m["common_snapshot"], s1.as_str(), "{m}");
    let snaps = d.json(&["snapshot", "list", "small/db"]);
    let names: Vec<&str> = snaps.as_array().unwrap().iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names, vec![s1.as_str()], "only the last complete transfer is a snapshot on the target");
    // The transfer that could not fit was abandoned (its snapshot too): once the source is
    // small again, the next update snapshots it afresh and succeeds.
    let snaps = d.json(&["snapshot", "list", "default/db"]);
    assert_eq!(snaps.as_array().unwrap().len(), 1, "the abandoned transfer's snapshot is gone: {snaps}");
    std::fs::remove_file(src.join("big")).unwrap();
    std::fs::File::open(&src).unwrap().sync_all().unwrap();
    std::fs::write(src.join("small"), b"fits").unwrap();
    std::fs::File::open(src.join("small")).unwrap().sync_all().unwrap();
    let m = d.json(&["mirror", "update", "small/db"]);
    assert_eq!(m["state"], "mirrored", "{m}");
    let s2 = m["common_snapshot"].as_str().unwrap().to_string();
    assert_ne!(s2, s1);
    let clone_dir = dir.join("check");
    std::fs::create_dir_all(&clone_dir).unwrap();
    d.ok(&["clone", "create", &format!("small/db@{s2}"), "small/check"]);
    d.ok(&["mount", "small/check", clone_dir.to_str().unwrap()]);
    assert_eq!(std::fs::read(clone_dir.join("first")).unwrap(), first);
    assert_eq!(std::fs::read(clone_dir.join("small")).unwrap(), b"fits");
    assert!(!clone_dir.join("big").exists());
    d.ok(&["unmount", clone_dir.to_str().unwrap()]);
    assert_eq!(d.json(&["check", "small"])["clean"], true);
    d.ok(&["unmount", src.to_str().unwrap()]);
}
