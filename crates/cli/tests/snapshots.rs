//! Snapshots, restore and clones end to end: the CLI against a real daemon with real FUSE
//! mounts. Needs root and /dev/fuse.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;

fn write(path: &Path, data: &str) {
    std::fs::write(path, data).unwrap();
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn snapshot_restore_clone_and_their_errors() {
    let dir = temp_dir("snap");
    let d = Daemon::start(&dir);
    let mnt = dir.join("mnt");
    let cmnt = dir.join("clone");
    d.ok(&["volume", "create", "default/db"]);
    d.ok(&["volume", "create", "default/wal"]);
    d.ok(&["mount", "default/db", mnt.to_str().unwrap()]);

    // Written through the kernel's write cache, not fsynced: the snapshot still has it.
    write(&mnt.join("a"), "one");
    std::fs::create_dir(mnt.join("sub")).unwrap();
    write(&mnt.join("sub/b"), &"x".repeat(100_000));
    let s1 = d.json(&["snapshot", "create", "default/db@s1"]);
    assert_eq!(s1["name"], "s1");
    write(&mnt.join("a"), "two");
    std::fs::remove_file(mnt.join("sub/b")).unwrap();
    let s2 = d.json(&["snapshot", "create", "default/db@s2", "--group", "wal"]);
    let group = s2.as_array().expect("a group snapshot lists each volume");
    assert_eq!(group.len(), 2);
    assert_eq!(group[0]["txg"], group[1]["txg"], "one txg for the group");
    write(&mnt.join("a"), "three");

    // The hidden .snapshot directory shows each snapshot read-only.
    assert_eq!(read(&mnt.join(".snapshot/s1/a")), "one");
    assert_eq!(read(&mnt.join(".snapshot/s1/sub/b")).len(), 100_000);
    assert_eq!(read(&mnt.join(".snapshot/s2/a")), "two");
    assert!(!mnt.join(".snapshot/s2/sub/b").exists());
    let names: Vec<String> = std::fs::read_dir(mnt.join(".snapshot"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let e = std::fs::write(mnt.join(".snapshot/s1/a"), "no").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(30), "EROFS writing into a snapshot: {e}");
    let top: Vec<String> =
        std::fs::read_dir(&mnt).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    assert!(!top.contains(&".snapshot".to_string()), "hidden from listings (initdb wants an empty dir)");

    // Space: the snapshot holding the deleted 100 KB file owns it.
    let list = d.json(&["snapshot", "list", "default/db"]);
    assert_eq!(list.as_array().unwrap().len(), 2);
    assert!(list[0]["unique_bytes"].as_u64().unwrap() >= 100_000, "{list}");

    // Clone of s1, mounted beside the source, independent of it.
    d.ok(&["clone", "create", "default/db@s1", "default/dbclone"]);
    d.ok(&["mount", "default/dbclone", cmnt.to_str().unwrap()]);
    assert_eq!(read(&cmnt.join("a")), "one");
    write(&cmnt.join("a"), "clone");
    assert_eq!(read(&mnt.join("a")), "three");
    let show = d.json(&["volume", "show", "default/dbclone"]);
    assert_eq!(show["origin"], "db@s1");

    // The origin cannot go while the clone needs it.
    d.fails(&["snapshot", "delete", "default/db@s1"], "dbclone");
    // A volume with snapshots and clones goes only with --recursive, which names them; and
    // not while its clone is mounted.
    let (code, _, err) = d.cli(&["volume", "delete", "default/db"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("default/db@s1") && err.contains("default/dbclone") && err.contains("--recursive"), "{err}");
    d.fails(&["volume", "delete", "default/db", "--recursive"], "is mounted at");

    // Single-file restore. `a` was overwritten after s2: its s2 block is held only by
    // snapshots (on the live volume's deadlist), so it is shared back, not copied. `sub/b`
    // was deleted before s2: its blocks are s1's alone and must be copied.
    let r = d.json(&["restore", "default/db@s2", "--file", "a"]);
    assert_eq!(r["created"], false, "{r}");
    assert!(r["shared_bytes"].as_u64().unwrap() > 0, "blocks shared, not copied: {r}");
    assert_eq!(r["copied_bytes"], 0, "{r}");
    assert_eq!(read(&mnt.join("a")), "two", "the kernel's cached page was dropped");
    let r = d.json(&["restore", "default/db@s1", "--file", "sub/b"]);
    assert_eq!(r["created"], true, "{r}");
    assert!(r["copied_bytes"].as_u64().unwrap() >= 100_000, "{r}");
    assert_eq!(read(&mnt.join("sub/b")).len(), 100_000);
    let r = d.json(&["restore", "default/db@s1", "--file", "/a"]);
    assert_eq!(r["created"], false, "{r}");
    assert_eq!(read(&mnt.join("a")), "one");
    let check = d.json(&["check", "default"]);
    assert_eq!(check["clean"], true, "{check}");
    write(&mnt.join("a"), "three");
    std::fs::remove_file(mnt.join("sub/b")).unwrap();
    d.fails(&["restore", "default/db@s1", "--file", "sub"], "regular files");
    d.fails(&["restore", "default/db@s1", "--file", "nosuch"], "nosuch");
    d.fails(&["restore", "default/db@s1", "--file", "../x"], "plain path");

    // Restore while a file is open: refused; closed: done, later snapshot kept.
    let f = std::fs::File::open(mnt.join("a")).unwrap();
    d.fails(&["restore", "default/db@s1"], "in use");
    drop(f);
    d.ok(&["restore", "default/db@s1"]);
    assert_eq!(read(&mnt.join("a")), "one");
    assert_eq!(read(&mnt.join("sub/b")).len(), 100_000);
    assert_eq!(read(&mnt.join(".snapshot/s2/a")), "two", "the later snapshot survives the restore");
    let both = d.json(&["restore", "default/db@s2", "--group", "wal"]);
    assert_eq!(both.as_array().map(|a| a.len()), Some(2), "a group restore: {both}");
    assert_eq!(read(&mnt.join("a")), "two");
    let clones = d.json(&["clone", "create", "default/db@s2", "default/db2", "--group", "wal:wal2"]);
    assert_eq!(clones.as_array().map(|a| a.len()), Some(2), "a group clone: {clones}");
    d.fails(&["clone", "create", "default/db@s2", "default/db3", "--group", "wal"], "VOLUME:NEW");
    d.ok(&["volume", "delete", "default/db2"]);
    d.ok(&["volume", "delete", "default/wal2"]);

    // Bad input: precise errors, no panics.
    d.fails(&["snapshot", "create", "default/db"], "POOL/VOLUME@SNAPSHOT");
    d.fails(&["snapshot", "create", "default/db@s1"], "already exists");
    d.fails(&["snapshot", "create", "default/db@.bad"], "snapshot name");
    d.fails(&["snapshot", "create", "default/nosuch@x"], "nosuch");
    d.fails(&["snapshot", "delete", "default/db@nosuch"], "not found");
    d.fails(&["restore", "default/db@nosuch"], "not found");
    d.fails(&["clone", "create", "default/db@s1", "default/dbclone"], "already exists");
    d.fails(&["clone", "create", "default/db@s1", "other/x"], "origin's pool");

    // Quiescing that cannot happen takes no snapshot.
    d.fails(&["snapshot", "create", "default/db@q", "--quiesce", "ftp://x"], "quiesce URL");
    d.fails(
        &["snapshot", "create", "default/db@q", "--quiesce", "postgresql://postgres@/x?host=/nonexistent"],
        "quiesce",
    );
    d.fails(&["snapshot", "show", "default/db@q"], "not found");

    // A policy: every second, keep two.
    d.fails(&["snapshot", "policy", "set", "default/wal", "fast=0s:2"], "every_seconds");
    d.fails(&["snapshot", "policy", "set", "default/wal", "fast=1x:2"], "unit");
    d.fails(&["snapshot", "policy", "set", "default/nosuch", "fast=1s:2"], "nosuch");
    d.ok(&["snapshot", "policy", "set", "default/wal", "fast=1s:2"]);
    assert_eq!(d.json(&["snapshot", "policy", "show", "default/wal"])["schedules"][0]["keep"], 2);
    std::thread::sleep(std::time::Duration::from_millis(4500));
    d.ok(&["snapshot", "policy", "clear", "default/wal"]);
    let autos: Vec<String> = d
        .json(&["snapshot", "list", "default/wal"])
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str().filter(|n| n.starts_with("auto-fast-")).map(String::from))
        .collect();
    assert_eq!(autos.len(), 2, "retention keeps two: {autos:?}\n{}", d.log());
    // The policy's own snapshots and expiries are in the history, with the schedule as caller.
    let h = d.json(&["history", "default"]);
    let by_policy: Vec<&Value> =
        h.as_array().unwrap().iter().filter(|e| e["caller"] == "daemon (snapshot policy fast)").collect();
    assert!(by_policy.iter().any(|e| e["operation"].as_str().unwrap().starts_with("POST")), "{h}");
    assert!(by_policy.iter().any(|e| e["operation"].as_str().unwrap().starts_with("DELETE")), "{h}");
    assert!(by_policy.iter().all(|e| e["result"] == "ok"), "{h}");
    for a in &autos {
        d.ok(&["snapshot", "delete", &format!("default/wal@{a}")]);
    }

    // A split clone no longer pins its origin; it keeps its data.
    d.fails(&["clone", "split", "default/db"], "not a clone");
    d.ok(&["clone", "create", "default/db@s1", "default/c2"]);
    d.ok(&["snapshot", "create", "default/c2@own"]);
    d.fails(&["clone", "split", "default/c2"], "has snapshots");
    d.ok(&["snapshot", "delete", "default/c2@own"]);
    let split = d.json(&["clone", "split", "default/c2"]);
    assert!(split["copied_bytes"].as_u64().unwrap() >= 100_000, "{split}");
    assert!(split["origin"].is_null(), "{split}");
    let c2 = dir.join("c2");
    d.ok(&["mount", "default/c2", c2.to_str().unwrap()]);
    assert_eq!(read(&c2.join("sub/b")).len(), 100_000);
    d.ok(&["unmount", c2.to_str().unwrap()]);

    // The clone goes, then its origin can.
    d.ok(&["unmount", cmnt.to_str().unwrap()]);
    d.ok(&["volume", "delete", "default/dbclone"]);
    d.ok(&["snapshot", "delete", "default/db@s1"]);
    let check = d.json(&["check", "default"]);
    assert_eq!(check["clean"], true, "{check}");
    assert_eq!(check["snapshots"], 2, "db@s2 and wal@s2 remain: {check}");
}
