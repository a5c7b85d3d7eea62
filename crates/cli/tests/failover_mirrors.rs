//! Failover of a synchronous mirror between two daemons through an etcd lease
//! (`mirror create ... --sync --etcd URL`), against a real etcd (Debian's etcd-server):
//! - the source daemon dies (kill -9): once its lease runs out the target takes over by
//!   itself — breaks, replays its journal, mounts the volume — with every fsynced write;
//!   the old source, restarted, finds the lease taken: fenced (no mount, its NFS export not
//!   served), then by itself the mirror of the new source (a reverse: an incremental
//!   transfer); the new source dies in turn and the old one takes over back, with every
//!   write fsynced on either side;
//! - etcd stops answering: the source refuses fsync (EIO) before its lease can run out,
//!   and acknowledges again once etcd is back; the target does not take over;
//! - etcd with authentication: a daemon without a user, with a wrong password or a user
//!   without access to /strata/failover/ is refused with what to do; with the right
//!   user the lease is held and the target takes over;
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

/// The mirror, if it exists (under that name) now.
fn try_show(d: &Daemon, m: &str) -> Option<Value> {
    let (code, out, _) = d.cli(&["--json", "mirror", "show", m]);
    (code == 0).then(|| serde_json::from_str(&out).expect("valid JSON"))
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> Option<Value>, last: impl Fn() -> Value) {
    let start = Instant::now();
    while f().is_none() {
        assert!(start.elapsed() < Duration::from_secs(secs), "{what}: not within {secs} s: {}", last());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Takeovers `d` has logged as done (the line comes after the mounts were tried).
fn takeovers(d: &Daemon) -> usize {
    d.log().matches("failover: took over").count()
}

/// A takeover shows the mirror broken and serving before it mounts the volumes: wait for
/// the line it logs after the mounts were tried (more takeovers than `before`).
fn wait_mounts_tried(d: &Daemon, before: usize) {
    wait_for(
        "the takeover's mounts tried",
        30,
        || (takeovers(d) > before).then_some(Value::Null),
        || Value::String(d.log()),
    );
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
fn the_target_takes_over_and_the_old_source_comes_back_fenced_then_as_its_mirror() {
    let dir = temp_dir("failover");
    let etcd = Etcd::start(&dir);
    let (mut a, b, a_port, _) = paired(&dir);
    let src = a.dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    a.ok(&["volume", "create", "default/db"]);
    a.ok(&["mount", "default/db", src.to_str().unwrap()]);
    let base = write_file(&src.join("base"), 1, 1 << 20);
    a.ok(&["export", "nfs", "default/db"]);
    // Where the target mounts on takeover: a path the peer names, so under an operator's
    // mount roots only (/mnt, /srv, ...).
    let served = std::path::PathBuf::from(format!("/mnt/strata-it-failover-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&served);

    a.fails(&["mirror", "create", "default/db", "site-b:backup", "--etcd", &etcd.url], "failover needs --sync");
    a.fails(&["mirror", "create", "default/db", "site-b:backup", "--sync", "--etcd", "http://127.0.0.1:1"], "failover");
    a.fails(
        &[
            "mirror",
            "create",
            "default/db",
            "site-b:backup",
            "--sync",
            "--etcd",
            &etcd.url,
            "--failover-mount",
            "/etc/cron.d",
        ],
        "an operator may not mount",
    );
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
    wait_mounts_tried(&b, 0);
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

    // The old source comes back: the key is the target's, so it does not serve (decided
    // before its mounts and exports come back) ...
    a.spawn_with(&["--repl-port", a_port.to_string().as_str()]);
    assert!(!a.ok(&["mount"]).contains("default/db"), "the fenced volume was not mounted again");
    let alog = a.log();
    assert!(alog.contains("failover: fenced"), "{alog}");
    let not_served = alog.lines().find(|l| l.contains("NFS export not served")).unwrap_or_else(|| panic!("{alog}"));
    assert!(not_served.contains("took these volumes over"), "{not_served}");
    // ... and becomes the mirror of the daemon that took over, by itself: a reverse, so
    // only what changed since the common snapshot travels.
    wait_for(
        "the old source a mirror of the new one",
        60,
        || try_show(&b, "site-a:default/db").filter(|s| s["state"] == "mirrored" && s["sync"]["state"] == "in-sync"),
        || b.json(&["mirror", "list"]),
    );
    let s = show(&a, "default/db");
    assert_eq!(s["failover"]["role"], "standby", "{s}");
    assert_eq!(s["source_peer"], "site-b", "{s}");
    let last = show(&b, "site-a:default/db")["last_transfer"].clone();
    assert!(last["base"].is_string(), "an incremental transfer, not a full one: {last}");
    a.fails(&["mount", "default/db", src.to_str().unwrap()], "target of mirror");
    let kept = a.json(&["snapshot", "list", "default/db"]);
    assert!(kept.to_string().contains("reverse-"), "what the old source had is kept: {kept}");

    // The round trip: the new source's fsynced writes reach the old one, which takes over
    // when the new one dies in turn (once the new source's link is armed, nothing in etcd
    // says the mirror may lack writes: the marker the old source left is gone).
    let marker = format!("{key}/unmirrored");
    wait_for(
        "the marker cleared",
        10,
        || etcd.get(&marker).is_none().then_some(Value::Null),
        || etcd.get(&marker).into(),
    );
    let again = write_file(&at.join("again"), 5, 1 << 20);
    std::fs::File::open(&at).unwrap().sync_all().unwrap();
    let mut b = b;
    let before = takeovers(&a);
    b.kill9();
    wait_for(
        "the takeover back",
        30,
        || {
            let s = show(&a, "default/db");
            (s["state"] == "broken" && s["failover"]["role"] == "serving").then_some(s)
        },
        || show(&a, "default/db"),
    );
    wait_mounts_tried(&a, before);
    for (f, want) in [("base", &base), ("acked", &acked), ("again", &again)] {
        assert_eq!(&std::fs::read(at.join(f)).unwrap(), want, "{f} after the takeover back");
    }
    assert_eq!(std::fs::read(at.join("after")).unwrap(), b"written on the new side");
    a.ok(&["unmount", at.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&served);
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
    a.json(&[
        "mirror",
        "create",
        "default/db",
        "site-b:backup",
        "--sync",
        "--etcd",
        &etcd.url,
        "--failover-ttl",
        "10s",
    ]);
    wait_in_sync(&a);
    write_synced(&src.join("before"), b"acknowledged").expect("fsync with the lease held");

    // etcd stops answering. Keep-alives go every 3.3 s, the gate closes 5 s after the last
    // one was sent, and etcd would expire the lease 10 s after it got it (at least 6.7 s
    // from now): at 5.3 s the source must refuse, while the lease is still alive in etcd.
    etcd.signal(19); // SIGSTOP
    let stopped = Instant::now();
    std::thread::sleep(Duration::from_millis(5300));
    let r = write_synced(&src.join("fenced"), b"must not be acknowledged");
    let at = stopped.elapsed();
    etcd.signal(18); // SIGCONT
    assert!(at < Duration::from_millis(6500), "the check ran late ({at:?}): the test proves nothing");
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

#[test]
fn a_mirror_to_a_peer_is_reversed_by_hand_after_a_break_there() {
    let dir = temp_dir("reverse-remote");
    let (a, b, _, _) = paired(&dir);
    let src = a.dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    a.ok(&["volume", "create", "default/db"]);
    a.ok(&["mount", "default/db", src.to_str().unwrap()]);
    let base = write_file(&src.join("base"), 1, 256 << 10);
    a.json(&["mirror", "create", "default/db", "site-b:backup"]);
    // Written on the source after the last transfer: kept there by the reverse.
    let late = write_file(&src.join("late"), 2, 4096);
    a.fails(&["mirror", "reverse", "site-b:backup/db"], "unmount the volumes that become the target");
    a.ok(&["unmount", src.to_str().unwrap()]);
    a.fails(&["mirror", "reverse", "site-b:backup/db"], "not broken");
    assert!(
        !a.json(&["snapshot", "list", "default/db"]).to_string().contains("reverse-"),
        "a refused reverse changed nothing"
    );

    b.json(&["mirror", "break", "backup/db"]);
    let tgt = dir.join("tgt");
    std::fs::create_dir_all(&tgt).unwrap();
    b.ok(&["mount", "backup/db", tgt.to_str().unwrap()]);
    let there = write_file(&tgt.join("there"), 3, 512 << 10);
    // A second break would restore the target again, losing what was written since.
    b.fails(&["mirror", "break", "backup/db"], "already broken");
    assert_eq!(std::fs::read(tgt.join("there")).unwrap(), there);

    let r = a.json(&["mirror", "reverse", "site-b:backup/db"]);
    assert_eq!(r["name"], "default/db", "{r}");
    assert_eq!(r["source_peer"], "site-b", "{r}");
    let snaps = a.json(&["snapshot", "list", "default/db"]).to_string();
    assert!(snaps.contains("reverse-"), "the source's late write kept: {snaps}");
    let m = b.json(&["mirror", "update", "site-a:default/db"]);
    assert_eq!(m["state"], "mirrored", "{m}");
    let last = &m["last_transfer"];
    assert!(last["base"].is_string(), "incremental: {last}");
    assert!(last["done_bytes"].as_u64().unwrap() < 2 << 20, "only what changed travelled: {last}");
    let snap = m["common_snapshot"].as_str().unwrap();
    assert_eq!(read_snapshot_file(&a, &dir, "default", "db", snap, "there").unwrap(), there);
    assert_eq!(read_snapshot_file(&a, &dir, "default", "db", snap, "base").unwrap(), base);
    assert!(
        read_snapshot_file(&a, &dir, "default", "db", snap, "late").is_none(),
        "the late write is not the mirror's"
    );
    let kept = snaps.split('"').find(|s| s.starts_with("reverse-")).unwrap().to_string();
    assert_eq!(read_snapshot_file(&a, &dir, "default", "db", &kept, "late").unwrap(), late);
    b.ok(&["unmount", tgt.to_str().unwrap()]);
}

#[test]
fn failover_through_an_etcd_that_asks_for_tls_client_certificates() {
    let dir = temp_dir("failover-tls");
    let etcd = Etcd::start_tls(&dir);
    let (ca, cert, key) = etcd.tls_files();
    let tls =
        ["--etcd-ca", ca.to_str().unwrap(), "--etcd-cert", cert.to_str().unwrap(), "--etcd-key", key.to_str().unwrap()];
    let a_dir = dir.join("a");
    std::fs::create_dir_all(&a_dir).unwrap();
    let a_port = free_port();
    let mut a = Daemon { child: None, socket: a_dir.join("strata.sock"), dir: a_dir };
    let (mut b, b_port) = start_with_repl(&dir, "b");
    // b restarted with the TLS files (it takes over through the same etcd).
    b.stop();
    let b_port_s = b_port.to_string();
    let b_args = [&["--repl-port", b_port_s.as_str()][..], &tls[..]].concat();
    b.spawn_with(&b_args);
    // a without them first: an https etcd is refused with what to do.
    a.spawn_with(&["--repl-port", a_port.to_string().as_str()]);
    let img = dir.join("b").join("backup.img");
    b.ok(&["pool", "create", "backup", "--device", img.to_str().unwrap(), "--size", "512M"]);
    let (code, token, err) = b.cli(&["peer", "invite", "--name", "site-a", "--grant", "backup"]);
    assert_eq!(code, 0, "{err}");
    a.json(&["peer", "add", "site-b", &format!("127.0.0.1:{b_port}"), "--invitation", token.trim()]);
    a.ok(&["volume", "create", "default/db"]);
    let create =
        ["mirror", "create", "default/db", "site-b:backup", "--sync", "--etcd", &etcd.url, "--failover-ttl", "2s"];
    a.fails(&create, "--etcd-ca");
    a.stop();
    let a_port_s = a_port.to_string();
    let a_args = [&["--repl-port", a_port_s.as_str()][..], &tls[..]].concat();
    a.spawn_with(&a_args);
    let m = a.json(&create);
    assert_eq!(m["failover"]["role"], "serving", "{m}");
    let key_name = m["failover"]["key"].as_str().unwrap().to_string();
    assert!(etcd.get(&key_name).is_some_and(|v| v.starts_with("strata ")), "the lease is in the TLS etcd");
    wait_in_sync(&a);
    wait_for(
        "the target standing by over TLS",
        10,
        || Some(show(&b, "backup/db")).filter(|s| s["failover"]["owner"] == "peer site-a"),
        || show(&b, "backup/db"),
    );
    a.kill9();
    wait_for(
        "the takeover over TLS",
        30,
        || Some(show(&b, "backup/db")).filter(|s| s["state"] == "broken" && s["failover"]["role"] == "serving"),
        || show(&b, "backup/db"),
    );
}

#[test]
fn failover_through_an_etcd_with_authentication() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("failover-auth");
    let mut etcd = Etcd::start(&dir);
    etcd.enable_auth(&[("strata", "s3cret-pw", "/strata/failover/"), ("other", "other-pw", "/other/")]);
    let pw = |name: &str, text: &str, mode: u32| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p.display().to_string()
    };
    let (good, wrong, other, open) = (
        pw("good", "s3cret-pw\n", 0o600),
        pw("wrong", "nope\n", 0o600),
        pw("other", "other-pw", 0o600),
        pw("open", "s3cret-pw\n", 0o644),
    );

    // A password file others may read: serve refuses to start (exit 78), naming chmod.
    let out = std::process::Command::new(BIN)
        .args(["serve", "--config", "/dev/null", "--data-dir", dir.join("x").to_str().unwrap()])
        .args(["--etcd-user", "strata", "--etcd-password-file", &open])
        .env("STRATA_SOCKET", dir.join("x.sock"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.contains("chmod 600"), "{err}");

    let (mut a, mut b, a_port, b_port) = paired(&dir);
    a.ok(&["volume", "create", "default/db"]);
    let create =
        ["mirror", "create", "default/db", "site-b:backup", "--sync", "--etcd", &etcd.url, "--failover-ttl", "2s"];
    let restart = |d: &mut Daemon, port: u16, user: &str, file: &str| {
        d.stop();
        let port = port.to_string();
        d.spawn_with(&["--repl-port", &port, "--etcd-user", user, "--etcd-password-file", file]);
    };
    // No user: etcd asks for one, and the error says which flags give it.
    a.fails(&create, "--etcd-password-file");
    restart(&mut a, a_port, "strata", &wrong);
    a.fails(&create, "check serve --etcd-user");
    restart(&mut a, a_port, "other", &other);
    a.fails(&create, "readwrite on the prefix /strata/failover/");
    assert!(a.json(&["mirror", "list"]).as_array().unwrap().is_empty(), "no mirror made by a refused create");

    restart(&mut a, a_port, "strata", &good);
    restart(&mut b, b_port, "strata", &good);
    // The takeover mount directory: under /mnt at create (accepted), then made a symbolic
    // link out of the operator roots before the takeover: the target checks the path the
    // source named again, resolved, and does not mount there.
    let served = std::path::PathBuf::from(format!("/mnt/strata-it-failover-auth-{}", std::process::id()));
    let _ = std::fs::remove_file(&served);
    let _ = std::fs::remove_dir_all(&served);
    std::fs::create_dir_all(&served).unwrap();
    let create = [&create[..], &["--failover-mount", served.to_str().unwrap()]].concat();
    let m = a.json(&create);
    assert_eq!(m["failover"]["role"], "serving", "{m}");
    let key_name = m["failover"]["key"].as_str().unwrap().to_string();
    assert!(etcd.get(&key_name).is_some_and(|v| v.starts_with("strata ")), "the lease is in etcd");
    wait_in_sync(&a);
    wait_for(
        "the target standing by with its etcd user",
        10,
        || Some(show(&b, "backup/db")).filter(|s| s["failover"]["owner"] == "peer site-a"),
        || show(&b, "backup/db"),
    );
    // Past several keep-alives (every ttl/3) the lease is still ours.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(show(&a, "site-b:backup/db")["failover"]["role"], "serving");
    let outside = dir.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::remove_dir(&served).unwrap();
    std::os::unix::fs::symlink(&outside, &served).unwrap();
    a.kill9();
    wait_for(
        "the takeover with an etcd user",
        30,
        || Some(show(&b, "backup/db")).filter(|s| s["state"] == "broken" && s["failover"]["role"] == "serving"),
        || show(&b, "backup/db"),
    );
    wait_mounts_tried(&b, 0);
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let _ = std::fs::remove_file(&served);
    assert!(!mounts.contains(outside.to_str().unwrap()), "mounted outside the operator roots: {mounts}");
    assert!(b.log().contains("an operator may not mount"), "the refusal is logged: {}", b.log());
}
