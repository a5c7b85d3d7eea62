//! Failover of a synchronous mirror between two daemons through an etcd lease
//! (`mirror create ... --sync --etcd URL`), against a real etcd (Debian's etcd-server):
//! - the source daemon dies (kill -9): once its lease runs out the target takes over by
//!   itself — breaks, replays its journal, mounts the volume — with every fsynced write;
//!   the old source, restarted, finds the lease taken and stays fenced (no mount, its NFS
//!   export not served);
//! - etcd stops answering: the source refuses fsync (EIO) before its lease can run out,
//!   and acknowledges again once etcd is back; the target does not take over;
//! - the link fell back (target down) while the source acknowledged writes: the source
//!   said so in etcd, and the target does not take over by itself when the source dies.
//!
//! Needs root, /dev/fuse and etcd.

mod common;
use common::*;
use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

fn paired(dir: &Path) -> (Daemon, Daemon, u16, u16) {
    let (a, a_port) = start_with_repl(dir, "a");
    let (b, b_port) = start_with_repl(dir, "b");
    let img = dir.join("b").join("backup.img");
    b.ok(&["pool", "create", "backup", "--device", img.to_str().unwrap(), "--size", "512M"]);
    let (code, token, err) = b.cli(&["peer", "invite", "--name", "site-a", "--grant", "backup"]);
    assert_eq!(code, 0, "{err}");
    a.json(&["peer", "add", "site-b", &format!("127.0.0.1:{b_port}"), "--invitation", token.trim()]);
    (a, b, a_port, b_port)
}

fn show(d: &Daemon, m: &str) -> Value {
    d.json(&["mirror", "show", m])
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> Option<Value>, last: impl Fn() -> Value) {
    let start = Instant::now();
    while f().is_none() {
        assert!(start.elapsed() < Duration::from_secs(secs), "{what}: not within {secs} s: {}", last());
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_in_sync(a: &Daemon) {
    wait_for(
        "in sync",
        60,
        || {
            let s = show(a, "site-b:backup/db");
            (s["sync"]["state"] == "in-sync" && s["state"] == "mirrored").then_some(s)
        },
        || show(a, "site-b:backup/db"),
    );
}

/// Write and fsync `path`: the fsync's result.
fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(data)?;
    f.sync_all()
}

#[test]
fn the_target_takes_over_when_the_source_dies_and_the_old_source_stays_fenced() {
    let dir = temp_dir("failover");
    let etcd = Etcd::start(&dir);
    let (mut a, b, a_port, _) = paired(&dir);
    let src = a.dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    a.ok(&["volume", "create", "default/db"]);
    a.ok(&["mount", "default/db", src.to_str().unwrap()]);
    let base = write_file(&src.join("base"), 1, 1 << 20);
    a.ok(&["export", "nfs", "default/db"]);
    let served = dir.join("served");

    a.fails(&["mirror", "create", "default/db", "site-b:backup", "--etcd", &etcd.url], "failover needs --sync");
    a.fails(&["mirror", "create", "default/db", "site-b:backup", "--sync", "--etcd", "http://127.0.0.1:1"], "failover");
    let m = a.json(&[
        "mirror",
        "create",
        "default/db",
        "site-b:backup",
        "--sync",
        "--etcd",
        &etcd.url,
        "--failover-ttl",
        "3s",
        "--failover-mount",
        served.to_str().unwrap(),
    ]);
    assert_eq!(m["failover"]["role"], "serving", "{m}");
    wait_in_sync(&a);
    let key = m["failover"]["key"].as_str().unwrap().to_string();
    let owner = etcd.get(&key).expect("the source holds the key");
    assert!(owner.starts_with("strata "), "{owner}");
    wait_for(
        "the target sees the source holding the lease",
        10,
        || {
            let s = show(&b, "backup/db");
            (s["failover"]["role"] == "standby" && s["failover"]["owner"] == "peer site-a").then_some(s)
        },
        || show(&b, "backup/db"),
    );
    // A break by hand while the source serves: refused (two daemons would serve).
    b.fails(&["mirror", "break", "backup/db"], "holds the failover lease");

    let acked = write_file(&src.join("acked"), 2, 2 << 20);
    let small = write_file(&src.join("small"), 3, 100);
    std::fs::rename(src.join("small"), src.join("renamed")).unwrap();
    std::fs::File::open(&src).unwrap().sync_all().unwrap();

    // The source daemon dies: after its lease runs out (3 s) the target takes over.
    let died = Instant::now();
    a.kill9();
    wait_for(
        "the takeover",
        30,
        || {
            let s = show(&b, "backup/db");
            (s["state"] == "broken" && s["failover"]["role"] == "serving").then_some(s)
        },
        || show(&b, "backup/db"),
    );
    let took = died.elapsed();
    assert!(took >= Duration::from_secs(2), "taken over before the source's lease could run out: {took:?}");
    let log = b.log();
    assert!(log.contains("taking over"), "{log}");
    let line = log.lines().find(|l| l.contains("sync journal replayed")).unwrap_or_else(|| panic!("no replay: {log}"));
    assert!(!line.contains("frames=0 "), "the takeover replayed the journal: {line}");
    assert!(etcd.get(&key).is_some_and(|v| v != owner), "the target holds the key now");
    // Served where --failover-mount said, with every fsynced write.
    let at = served.join("db");
    assert_eq!(std::fs::read(at.join("base")).unwrap(), base);
    assert_eq!(std::fs::read(at.join("acked")).unwrap(), acked, "fsynced after the last transfer");
    assert_eq!(std::fs::read(at.join("renamed")).unwrap(), small, "a rename made durable by a directory fsync");
    write_synced(&at.join("after"), b"written on the new side").expect("the new side acknowledges syncs");

    // The old source comes back: the key is the target's, so it does not serve.
    a.spawn_with(&["--repl-port", a_port.to_string().as_str()]);
    let s = show(&a, "site-b:backup/db");
    assert_eq!(s["state"], "fenced", "{s}");
    assert_eq!(s["failover"]["role"], "fenced", "{s}");
    assert!(s["failover"]["owner"].as_str().unwrap().contains("site-b"), "{s}");
    assert!(!a.ok(&["mount"]).contains("default/db"), "the fenced volume was not mounted again");
    a.fails(&["mount", "default/db", src.to_str().unwrap()], "took these volumes over");
    a.fails(&["mirror", "update", "site-b:backup/db"], "took these volumes over");
    let alog = a.log();
    assert!(alog.contains("fenced"), "{alog}");
    let not_served = alog.lines().find(|l| l.contains("NFS export not served")).unwrap_or_else(|| panic!("{alog}"));
    assert!(not_served.contains("took these volumes over"), "{not_served}");
    b.ok(&["unmount", at.to_str().unwrap()]);
}

#[test]
fn a_source_that_cannot_renew_its_lease_refuses_fsync_until_etcd_answers_again() {
    let dir = temp_dir("failover-fence");
    let etcd = Etcd::start(&dir);
    let (a, b, _, _) = paired(&dir);
    let src = a.dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    a.ok(&["volume", "create", "default/db"]);
    a.ok(&["mount", "default/db", src.to_str().unwrap()]);
    a.json(&["mirror", "create", "default/db", "site-b:backup", "--sync", "--etcd", &etcd.url, "--failover-ttl", "6s"]);
    wait_in_sync(&a);
    write_synced(&src.join("before"), b"acknowledged").expect("fsync with the lease held");

    // etcd stops answering. Keep-alives go every 2 s, the gate closes 3 s after the last
    // one was sent, and etcd would expire the lease 6 s after it got it: at 3.3 s the
    // source must refuse, while the lease is still alive in etcd.
    etcd.signal(19); // SIGSTOP
    let stopped = Instant::now();
    std::thread::sleep(Duration::from_millis(3300));
    let r = write_synced(&src.join("fenced"), b"must not be acknowledged");
    let at = stopped.elapsed();
    etcd.signal(18); // SIGCONT
    assert!(at < Duration::from_millis(3900), "the check ran late ({at:?}): the test proves nothing");
    let e = r.expect_err("an fsync without a renewed lease must fail");
    assert_eq!(e.raw_os_error(), Some(5), "EIO: {e}");

    // etcd back before the lease ran out: the next keep-alive opens the gate again, and
    // the target never took over.
    let start = Instant::now();
    while write_synced(&src.join("after"), b"acknowledged again").is_err() {
        assert!(start.elapsed() < Duration::from_secs(20), "fsync never came back: {}", a.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let s = show(&b, "backup/db");
    assert_eq!(s["state"], "mirrored", "the target did not take over: {s}");
    assert_eq!(show(&a, "site-b:backup/db")["failover"]["role"], "serving");
    assert!(a.log().contains("failover"), "{}", a.log());
}

#[test]
fn a_target_that_may_lack_acknowledged_writes_does_not_take_over_by_itself() {
    let dir = temp_dir("failover-marker");
    let etcd = Etcd::start(&dir);
    let (mut a, mut b, _, b_port) = paired(&dir);
    let src = a.dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    a.ok(&["volume", "create", "default/db"]);
    a.ok(&["mount", "default/db", src.to_str().unwrap()]);
    let m = a.json(&[
        "mirror",
        "create",
        "default/db",
        "site-b:backup",
        "--sync",
        "--etcd",
        &etcd.url,
        "--failover-ttl",
        "2s",
    ]);
    wait_in_sync(&a);
    let key = m["failover"]["key"].as_str().unwrap().to_string();
    let base = write_file(&src.join("base"), 1, 64 << 10);

    // The target dies; the source (an `on` mirror) falls back and goes on acknowledging —
    // after telling etcd the target may lack writes.
    b.kill9();
    write_synced(&src.join("unmirrored"), b"acknowledged while the target was down")
        .expect("an `on` mirror falls back");
    assert!(etcd.get(&format!("{key}/unmirrored")).is_some(), "the source marked the mirror in etcd");
    a.kill9();

    // The target comes back, the source's lease runs out: no takeover by itself.
    b.spawn_with(&["--repl-port", b_port.to_string().as_str()]);
    std::thread::sleep(Duration::from_secs(6));
    let s = show(&b, "backup/db");
    assert_eq!(s["state"], "mirrored", "no takeover: {s}");
    let note = s["failover"]["message"].as_str().unwrap_or_default();
    assert!(note.contains("not taking over"), "{s}");
    // An operator may still break (the lease is free): the last transferred state and
    // the journal up to the fall-back.
    b.json(&["mirror", "break", "backup/db"]);
    let tgt = dir.join("tgt");
    std::fs::create_dir_all(&tgt).unwrap();
    b.ok(&["mount", "backup/db", tgt.to_str().unwrap()]);
    assert_eq!(std::fs::read(tgt.join("base")).unwrap(), base);
    assert!(!tgt.join("unmirrored").exists(), "written while the target was down: not there");
    b.ok(&["unmount", tgt.to_str().unwrap()]);
}
