//! A pool with a separate intent-log device, end to end: `pool create --log-device` on two
//! image files (and the bad inputs it refuses), fsync through a FUSE mount landing on the
//! log device, a kill -9 and restart, `pool status` showing the log device, a daemon that
//! refuses to start without it, and `serve --discard-missing-log`. Needs root and /dev/fuse.

use std::io::Write;

mod common;
use common::*;

/// The log region starts at 64 KiB of the log device (format/logdev.rs); a log block
/// starts with this magic.
const LOG_REGION: usize = 64 * 1024;

#[test]
fn pool_with_a_log_device_survives_kill_9_and_a_lost_log_device() {
    let dir = temp_dir("logdev");
    let mut d = Daemon::start(&dir);
    let (pool_img, log_img) = (dir.join("pool.img"), dir.join("log.img"));
    let (pool_s, log_s) = (pool_img.to_str().unwrap(), log_img.to_str().unwrap());

    // Bad input: a missing log device, the pool's own file, one too small.
    d.fails(&["pool", "create", "fast", "--device", pool_s, "--size", "64M", "--log-device", log_s], "log device");
    std::fs::File::create(&log_img).unwrap().set_len(8 << 20).unwrap();
    d.fails(&["pool", "create", "fast", "--device", pool_s, "--size", "64M", "--log-device", log_s], "at least 16 MiB");
    d.fails(&["pool", "create", "fast", "--device", log_s, "--log-device", log_s], "is the pool's device");
    assert_eq!(d.json(&["pool", "list"]).as_array().unwrap().len(), 1, "a refused create left a pool behind");

    std::fs::File::create(&log_img).unwrap().set_len(32 << 20).unwrap();
    let out = d.ok(&["pool", "create", "fast", "--device", pool_s, "--size", "64M", "--log-device", log_s]);
    assert!(out.contains("intent log on") && out.contains("log.img"), "{out}");
    let other = dir.join("other.img");
    d.fails(
        &["pool", "create", "other", "--device", other.to_str().unwrap(), "--size", "64M", "--log-device", log_s],
        "already the log device of pool fast",
    );
    d.fails(&["pool", "create", "other", "--device", log_s], "already holds a Strata pool");
    d.ok(&["volume", "create", "fast/db"]);
    let mnt = dir.join("mnt");
    d.ok(&["mount", "fast/db", mnt.to_str().unwrap()]);
    let mut f = std::fs::File::create(mnt.join("first")).unwrap();
    f.write_all(b"first").unwrap();
    f.sync_all().unwrap(); // may commit (the new volume is pending)
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    let mut f = std::fs::File::create(mnt.join("synced")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap(); // an intent-log write, on the log device
    drop(f);
    let log = std::fs::read(&log_img).unwrap();
    assert_eq!(&log[LOG_REGION..LOG_REGION + 8], b"STRATAIL", "fsync did not write the log device");
    assert_eq!(&log[..8], b"STRATALD");

    d.kill9();
    d.spawn();
    assert_eq!(std::fs::read(mnt.join("synced")).unwrap(), data);
    assert_eq!(std::fs::read(mnt.join("first")).unwrap(), b"first");
    let status = d.json(&["pool", "status", "fast"]);
    assert!(status["log_device"].as_str().unwrap_or("").contains("log.img"), "{status}");
    let human = d.ok(&["pool", "status", "fast"]);
    assert!(human.lines().any(|l| l.starts_with("log") && l.contains("log.img")), "{human}");
    assert!(human.lines().any(|l| l.starts_with("commits") && l.contains("pool lock held")), "{human}");
    assert!(human.lines().any(|l| l.starts_with("intent") && l.contains("blocks")), "{human}");
    assert_eq!(d.json(&["check", "fast"])["clean"], true);

    // The log device vanishes: the daemon starts, serves its other pools, and shows this
    // one UNAVAILABLE with what to do.
    assert!(d.stop().success(), "{}", d.log());
    std::fs::rename(&log_img, dir.join("log.gone")).unwrap();
    d.spawn();
    let status = d.json(&["pool", "status", "fast"]);
    assert_eq!(status["state"], "UNAVAILABLE", "{status}");
    let reason = status["reason"].as_str().unwrap_or("");
    assert!(reason.contains("log device") && reason.contains("--discard-missing-log fast"), "{reason}");
    assert_eq!(d.json(&["pool", "status", "default"])["state"], "ONLINE");
    d.fails(&["volume", "list", "fast"], "UNAVAILABLE");
    let mounts = d.json(&["mount"]);
    assert_eq!(mounts[0]["active"], false, "the mount waits for its pool: {mounts}");
    assert!(d.stop().success());

    // Discarded on request: the pool opens at its last commit (a clean stop committed
    // everything) and keeps its log in the pool from then on.
    d.spawn_with(&["--discard-missing-log", "fast"]);
    let status = d.json(&["pool", "status", "fast"]);
    assert!(status["log_device"].is_null(), "{status}");
    let notes = status["open_notes"].to_string();
    assert!(notes.contains("may be lost"), "{notes}");
    assert_eq!(std::fs::read(mnt.join("synced")).unwrap(), data);
    assert!(d.stop().success());
    d.spawn(); // no flag needed any more
    assert_eq!(std::fs::read(mnt.join("synced")).unwrap(), data);
    assert!(d.ok(&["pool", "status", "fast"]).contains("in the pool"));

    // Added again while the daemon runs (`pool set --log-device`), used by fsync, kept
    // across a kill -9, then removed again.
    let log2 = dir.join("log2.img");
    std::fs::File::create(&log2).unwrap().set_len(32 << 20).unwrap();
    d.ok(&["pool", "set", "fast", "--log-device", log2.to_str().unwrap()]);
    d.fails(&["pool", "set", "fast", "--log-device", log2.to_str().unwrap()], "already the log device of pool fast");
    let log3 = dir.join("log3.img");
    std::fs::File::create(&log3).unwrap().set_len(32 << 20).unwrap();
    d.fails(&["pool", "set", "fast", "--log-device", log3.to_str().unwrap()], "already has a log device");
    let mut f = std::fs::File::create(mnt.join("second")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(
        &std::fs::read(&log2).unwrap()[LOG_REGION..LOG_REGION + 8],
        b"STRATAIL",
        "fsync missed the new log device"
    );
    d.kill9();
    d.spawn();
    assert_eq!(std::fs::read(mnt.join("second")).unwrap(), data);
    assert!(d.json(&["pool", "status", "fast"])["log_device"].as_str().unwrap_or("").contains("log2.img"));
    d.ok(&["pool", "set", "fast", "--remove-log-device"]);
    d.fails(&["pool", "set", "fast", "--remove-log-device"], "has no log device");
    assert!(d.stop().success());
    d.spawn();
    assert!(d.ok(&["pool", "status", "fast"]).contains("in the pool"));
    assert_eq!(std::fs::read(mnt.join("second")).unwrap(), data);
    // The one ERROR expected: the start without the log device, which left the pool UNAVAILABLE.
    let log = d.log();
    let errors: Vec<&str> =
        log.lines().filter(|l| l.contains("ERROR") && !l.contains("pool UNAVAILABLE: log device")).collect();
    assert!(errors.is_empty(), "unexpected errors in the daemon log: {errors:?}");
}

/// A loop device over an image file (a block device whose writes can be made to fail),
/// made writable again and detached when dropped.
struct Loop(String);

impl Loop {
    fn attach(img: &std::path::Path) -> Loop {
        let out = std::process::Command::new("losetup").args(["--find", "--show"]).arg(img).output().unwrap();
        assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr));
        let lo = Loop(String::from_utf8(out.stdout).unwrap().trim().to_string());
        // A device's read-only flag outlives a detach: start writable.
        assert!(std::process::Command::new("blockdev").args(["--setrw", &lo.0]).status().unwrap().success());
        lo
    }

    /// From now on every write to the device fails (EPERM), as from a failed device.
    fn fail_writes(&self) {
        assert!(std::process::Command::new("blockdev").args(["--setro", &self.0]).status().unwrap().success());
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("blockdev").args(["--setrw", &self.0]).status();
        let _ = std::process::Command::new("losetup").args(["-d", &self.0]).status();
    }
}

#[test]
fn a_failed_log_device_fails_over_to_the_pool() {
    let dir = temp_dir("logfail");
    let mut d = Daemon::start(&dir);
    let (pool_img, log_img) = (dir.join("pool.img"), dir.join("log.img"));
    std::fs::File::create(&log_img).unwrap().set_len(32 << 20).unwrap();
    let log = Loop::attach(&log_img);
    d.ok(&["pool", "create", "fast", "--device", pool_img.to_str().unwrap(), "--size", "64M", "--log-device", &log.0]);
    d.ok(&["volume", "create", "fast/db"]);
    let mnt = dir.join("mnt");
    d.ok(&["mount", "fast/db", mnt.to_str().unwrap()]);
    let synced = |name: &str, seed: u32| {
        let data: Vec<u8> = (0..100_000u32).map(|i| ((i + seed) % 251) as u8).collect();
        let mut f = std::fs::File::create(mnt.join(name)).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap_or_else(|e| panic!("fsync of {name}: {e}"));
        data
    };
    let before = synced("before", 1);
    assert!(d.json(&["pool", "status", "fast"])["log_device"].as_str() == Some(log.0.as_str()));

    // The log device fails: the fsync is still acknowledged (the pool commits instead), the
    // pool goes on with its log in its own region, and says so.
    log.fail_writes();
    let failed = synced("failed", 2);
    let start = std::time::Instant::now();
    let status = loop {
        let s = d.json(&["pool", "status", "fast"]);
        if s["log_device"].is_null() {
            break s;
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(10), "the daemon still names the log device: {s}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(status["state"], "ONLINE", "{status}");
    let why = status["log_failover"].as_str().unwrap_or_default();
    assert!(why.contains(&log.0) && why.contains("in the pool since txg"), "{status}");
    let human = d.ok(&["pool", "status", "fast"]);
    assert!(human.lines().any(|l| l.starts_with("log") && l.contains("in the pool: log device")), "{human}");
    let events = d.json(&["events"]);
    let ev = events.as_array().unwrap().iter().find(|e| e["kind"] == "pool.log_device").cloned();
    let ev = ev.unwrap_or_else(|| panic!("no pool.log_device event: {events}"));
    assert_eq!(ev["severity"], "error", "{ev}");
    assert!(ev["message"].as_str().unwrap_or_default().contains("--log-device"), "{ev}");
    let after = synced("after", 3);

    // kill -9 and a restart (the device still failing): the pool opens without it, with
    // every acknowledged fsync.
    d.kill9();
    d.spawn();
    for (name, data) in [("before", &before), ("failed", &failed), ("after", &after)] {
        assert_eq!(&std::fs::read(mnt.join(name)).unwrap(), data, "{name}");
    }
    let status = d.json(&["pool", "status", "fast"]);
    assert!(status["log_device"].is_null() && status["state"] == "ONLINE", "{status}");
    assert_eq!(d.json(&["check", "fast"])["clean"], true);
    let errors = d.log().lines().filter(|l| l.contains("ERROR")).count();
    assert_eq!(errors, 1, "one error expected (the failover): {}", d.log());
    assert!(d.stop().success());
}
