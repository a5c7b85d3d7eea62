//! The `strata` command and daemon end to end, as an administrator uses them: a real
//! daemon (`strata serve`) on a temporary data directory and port, real FUSE mounts, and
//! the bad inputs an administrator will eventually type. Needs root and /dev/fuse.

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::*;

#[test]
fn volumes_mounts_and_restart() {
    let dir = temp_dir("life");
    let mut d = Daemon::start(&dir);
    let pools = d.json(&["pool", "list"]);
    assert_eq!(pools[0]["name"], "default", "the embedded default pool: {pools}");
    d.ok(&["volume", "create", "default/db", "--size", "100M"]);
    d.ok(&["volume", "create", "default/logs", "--record-size", "128K"]);
    let vols = d.json(&["volume", "list"]);
    assert_eq!(vols.as_array().unwrap().len(), 2);
    let show = d.json(&["volume", "show", "default/logs"]);
    assert_eq!(show["record_size"], 131072);
    d.ok(&["volume", "set", "default/logs", "--size", "1G"]);
    assert_eq!(d.json(&["volume", "show", "default/logs"])["size_bytes"], 1u64 << 30);
    let mnt = dir.join("mnt");
    d.ok(&["mount", "default/db", mnt.to_str().unwrap()]);
    std::fs::write(mnt.join("hello.txt"), b"hello strata").unwrap();
    let f = std::fs::File::open(mnt.join("hello.txt")).unwrap();
    f.sync_all().unwrap();
    drop(f);
    // statfs shows the volume's limit as the size of the file system.
    let df = Command::new("df").args(["-B1", "--output=size", mnt.to_str().unwrap()]).output().unwrap();
    let size: u64 = String::from_utf8_lossy(&df.stdout).lines().nth(1).unwrap().trim().parse().unwrap();
    assert_eq!(size, 100 << 20);
    assert!(d.ok(&["mount"]).contains("default/db"));
    d.ok(&["unmount", mnt.to_str().unwrap()]);
    assert!(!mnt.join("hello.txt").exists(), "unmounted");
    d.ok(&["mount", "default/db", mnt.to_str().unwrap()]);
    assert_eq!(std::fs::read(mnt.join("hello.txt")).unwrap(), b"hello strata");
    // SIGTERM: clean stop (commits, unmounts), and the mount comes back at the next start.
    assert!(d.stop().success(), "{}", d.log());
    assert!(!mnt.join("hello.txt").exists());
    d.spawn_with(&["--fuse-threads", "12"]);
    assert_eq!(std::fs::read(mnt.join("hello.txt")).unwrap(), b"hello strata");
    let check = d.json(&["check", "default"]);
    assert_eq!(check["clean"], true, "{check}");
    d.ok(&["unmount", mnt.to_str().unwrap()]);
    d.ok(&["volume", "delete", "default/logs"]);
    assert_eq!(d.json(&["volume", "list", "default"]).as_array().unwrap().len(), 1);
    assert!(!d.log().contains("ERROR"), "unexpected errors in the daemon log: {}", d.log());
}

#[test]
fn kill_9_keeps_what_was_fsynced() {
    let dir = temp_dir("kill9");
    let mut d = Daemon::start(&dir);
    d.ok(&["volume", "create", "default/v"]);
    let mnt = dir.join("mnt");
    d.ok(&["mount", "default/v", mnt.to_str().unwrap()]);
    let mut f = std::fs::File::create(mnt.join("durable")).unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    std::fs::create_dir(mnt.join("sub")).unwrap();
    std::fs::File::open(&mnt).unwrap().sync_all().unwrap(); // fsync of the directory
                                                            // sync=always: a plain write (no fsync) is durable when it returns.
    d.ok(&["volume", "create", "default/always", "--sync", "always"]);
    assert_eq!(d.json(&["volume", "show", "default/always"])["sync"], "always");
    let mnt2 = dir.join("mnt2");
    d.ok(&["mount", "default/always", mnt2.to_str().unwrap()]);
    std::fs::write(mnt2.join("no-fsync"), b"written, never fsynced").unwrap();
    d.kill9();
    // The dead mount answers ENOTCONN until the daemon is back.
    let e = std::fs::metadata(mnt.join("durable")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(107), "{e}");
    d.spawn();
    assert_eq!(std::fs::read(mnt.join("durable")).unwrap(), data);
    assert!(mnt.join("sub").is_dir());
    assert_eq!(std::fs::read(mnt2.join("no-fsync")).unwrap(), b"written, never fsynced");
    assert_eq!(d.json(&["check", "default"])["clean"], true);
    d.ok(&["volume", "set", "default/always", "--sync", "disabled"]);
    assert_eq!(d.json(&["volume", "show", "default/always"])["sync"], "disabled");
}

#[test]
fn bad_input_gets_clear_errors() {
    let dir = temp_dir("bad");
    let d = Daemon::start(&dir);
    // Wrong arguments.
    let (code, _, err) = d.cli(&["volume", "frobnicate"]);
    assert_eq!(code, 2, "{err}");
    d.fails(&["volume", "create", "novolume"], "POOL/VOLUME");
    d.fails(&["volume", "create", "default/x", "--size", "12Q"], "unknown unit");
    d.fails(&["volume", "create", "default/x", "--record-size", "3K"], "power of two");
    d.fails(&["volume", "create", "default/.hidden"], "volume name");
    d.fails(&["volume", "create", "default/s", "--sync", "sometimes"], "standard, always or disabled");
    // Unknown names.
    d.fails(&["pool", "status", "nopool"], "strata pool list");
    d.fails(&["volume", "show", "default/none"], "not found");
    d.fails(&["mount", "nopool/v", dir.join("m0").to_str().unwrap()], "pool nopool");
    // Duplicates and busy targets.
    d.ok(&["volume", "create", "default/v"]);
    d.fails(&["volume", "create", "default/v"], "already exists");
    let busy = dir.join("busy");
    std::fs::create_dir_all(&busy).unwrap();
    std::fs::write(busy.join("something"), b"x").unwrap();
    d.fails(&["mount", "default/v", busy.to_str().unwrap()], "not an empty directory");
    let mnt = dir.join("mnt");
    d.ok(&["mount", "default/v", mnt.to_str().unwrap()]);
    d.fails(&["mount", "default/v", dir.join("other").to_str().unwrap()], "already mounted");
    d.ok(&["volume", "create", "default/w"]);
    d.fails(&["mount", "default/w", mnt.to_str().unwrap()], "already a Strata mount");
    d.fails(&["volume", "delete", "default/v"], "unmount it first");
    d.fails(&["unmount", dir.join("nothing-here").to_str().unwrap()], "no Strata mount");
    // A pool on a device that already holds one.
    let img = dir.join("data").join("default.img");
    d.fails(&["pool", "create", "again", "--device", img.to_str().unwrap()], "already holds a Strata pool");
    d.fails(&["pool", "create", "p2", "--device", dir.join("missing.img").to_str().unwrap()], "size_bytes");
    // Raw API: malformed JSON and unknown endpoints.
    let raw = |req: &str| {
        let mut s = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        std::io::Read::read_to_string(&mut s, &mut out).unwrap();
        out
    };
    let json = "Host: x\r\nContent-Type: application/json\r\nConnection: close\r\n";
    let r = raw(&format!("POST /v1/pools HTTP/1.1\r\n{json}Content-Length: 5\r\n\r\n{{nope"));
    assert!(r.starts_with("HTTP/1.1 400") && r.contains("invalid JSON"), "{r}");
    let r = raw("GET /v1/teapot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 404"), "{r}");
    let body = r#"{"volume":"default/w","path":"rel"}"#;
    let r = raw(&format!("POST /v1/mounts HTTP/1.1\r\n{json}Content-Length: {}\r\n\r\n{body}", body.len()));
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    // A body that is not declared JSON is refused before anything is parsed.
    let plain = "Host: x\r\nContent-Type: text/plain\r\nConnection: close\r\n";
    let r = raw(&format!("POST /v1/mounts HTTP/1.1\r\n{plain}Content-Length: {}\r\n\r\n{body}", body.len()));
    assert!(r.starts_with("HTTP/1.1 415") && r.contains("UnsupportedMediaType"), "{r}");
    // Serve options out of range.
    let out = Command::new(BIN)
        .args(["serve", "--data-dir", dir.join("data2").to_str().unwrap(), "--fuse-threads", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("1..=64"), "{}", String::from_utf8_lossy(&out.stderr));
    // A daemon that is not there.
    let out = Command::new(BIN)
        .args(["pool", "list"])
        .env("STRATA_SOCKET", dir.join("nobody.sock"))
        .env_remove("STRATA_API")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6));
    assert!(String::from_utf8_lossy(&out.stderr).contains("strata serve"));
}

#[test]
fn full_pool_gives_enospc_and_recovers() {
    let dir = temp_dir("full");
    let d = Daemon::start(&dir);
    let img = dir.join("small.img");
    d.ok(&["pool", "create", "small", "--device", img.to_str().unwrap(), "--size", "48M"]);
    d.ok(&["volume", "create", "small/v"]);
    let mnt = dir.join("mnt");
    d.ok(&["mount", "small/v", mnt.to_str().unwrap()]);
    let mut f = std::fs::File::create(mnt.join("fill")).unwrap();
    let chunk = vec![0x5au8; 1 << 20];
    let mut written = 0u64;
    let err = loop {
        match f.write_all(&chunk).and_then(|_| f.sync_data()) {
            Ok(()) => written += chunk.len() as u64,
            Err(e) => break e,
        }
        assert!(written < 200 << 20, "a 48 MiB pool took {written} bytes");
    };
    assert_eq!(err.raw_os_error(), Some(28), "ENOSPC reaches the application: {err}");
    drop(f);
    assert!(written >= 20 << 20, "only {written} bytes fit in a 48 MiB pool");
    // The pool is consistent, and usable again once space is freed.
    assert_eq!(d.json(&["check", "small"])["clean"], true);
    std::fs::remove_file(mnt.join("fill")).unwrap();
    std::fs::File::open(&mnt).unwrap().sync_all().unwrap();
    let mut g = std::fs::File::create(mnt.join("again")).unwrap();
    g.write_all(&vec![1u8; 8 << 20]).unwrap();
    g.sync_all().unwrap();
    assert_eq!(d.json(&["check", "small"])["clean"], true);
    assert!(!d.log().contains("ERROR"), "{}", d.log());
}

#[test]
fn damaged_pool_image_is_refused_clearly() {
    let dir = temp_dir("damaged");
    let mut d = Daemon::start(&dir);
    d.ok(&["volume", "create", "default/v"]);
    assert!(d.stop().success());
    let img = dir.join("data").join("default.img");
    let mut bytes = std::fs::read(&img).unwrap();
    for label in [0usize, 256 * 1024] {
        bytes[label..label + 64].fill(0xee);
    }
    std::fs::write(&img, &bytes).unwrap();
    // The daemon starts and shows the pool UNAVAILABLE, saying why; no panic.
    d.spawn();
    let p = d.json(&["pool", "status", "default"]);
    assert_eq!(p["state"], "UNAVAILABLE", "{p}");
    assert!(p["reason"].as_str().unwrap_or("").contains("both labels are damaged"), "{p}");
    let (code, _, err) = d.cli(&["volume", "list", "default"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("UNAVAILABLE"), "{err}");
    assert!(!d.log().contains("panicked"), "{}", d.log());
    assert!(d.stop().success());
    let (code, _, err) = d.cli(&["check", "--device", img.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("both labels are damaged"), "{err}");
}

#[test]
fn compression_reservations_and_capacity_alerts() {
    let dir = temp_dir("eff");
    let d = Daemon::start(&dir);
    d.fails(&["volume", "create", "default/x", "--compression", "gzip"], "use off, lz4, zstd");
    d.fails(&["volume", "create", "default/x", "--compression", "zstd-22"], "LEVEL 1-19");
    d.ok(&["volume", "create", "default/c", "--compression", "lz4"]);
    let show = d.json(&["volume", "show", "default/c"]);
    assert_eq!(show["compression"], "lz4", "{show}");
    assert_eq!(show["logical_bytes"], show["used_bytes"], "nothing saved yet: {show}");
    let mnt = dir.join("mnt");
    d.ok(&["mount", "default/c", mnt.to_str().unwrap()]);
    // 8 MiB of text-like rows, and 4 MiB of zeros (holes: zero detection).
    let rows: String = (0..220_000).map(|i| format!("{i:08},customer-{:04},ACTIVE,2024-01-01\n", i % 997)).collect();
    std::fs::write(mnt.join("table"), &rows.as_bytes()[..8 << 20]).unwrap();
    std::fs::write(mnt.join("zeros"), vec![0u8; 4 << 20]).unwrap();
    std::fs::File::open(mnt.join("table")).unwrap().sync_all().unwrap();
    // Savings are counted at commit (every 5 s in the daemon).
    let start = Instant::now();
    let show = loop {
        let v = d.json(&["volume", "show", "default/c"]);
        if v["compress_ratio"].as_f64().unwrap_or(0.0) > 1.5 {
            break v;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no savings reported: {v}");
        std::thread::sleep(Duration::from_millis(250));
    };
    let used = show["used_bytes"].as_u64().unwrap();
    assert!(used < 5 << 20, "8 MiB of rows + 4 MiB of zeros use {used}: {show}");
    assert!(show["logical_bytes"].as_u64().unwrap() >= 8 << 20, "{show}");
    assert_eq!(std::fs::read(mnt.join("table")).unwrap(), &rows.as_bytes()[..8 << 20]);
    // Human output names the figures.
    let human = d.ok(&["volume", "show", "default/c"]);
    assert!(human.contains("compression  lz4") && human.contains("ratio"), "{human}");
    // Policy change applies to new writes; old data stays readable.
    d.ok(&["volume", "set", "default/c", "--compression", "zstd-5"]);
    assert_eq!(d.json(&["volume", "show", "default/c"])["compression"], "zstd-5");
    std::fs::write(mnt.join("more"), &rows.as_bytes()[..1 << 20]).unwrap();
    assert_eq!(std::fs::read(mnt.join("table")).unwrap(), &rows.as_bytes()[..8 << 20]);
    let pool = d.json(&["pool", "status", "default"]);
    assert!(pool["saved_bytes"].as_u64().unwrap() > 0, "{pool}");
    assert!(pool["logical_bytes"].as_u64().unwrap() > pool["allocated_bytes"].as_u64().unwrap(), "{pool}");
    // Reservations: refused when they cannot fit, honoured and shown when they can.
    d.fails(&["volume", "create", "default/big", "--reserve", "1G"], "cannot reserve");
    d.fails(&["volume", "create", "default/q", "--size", "10M", "--reserve", "20M"], "exceeds its size limit");
    d.ok(&["volume", "create", "default/thick", "--reserve", "64M"]);
    assert_eq!(d.json(&["volume", "show", "default/thick"])["reservation_bytes"], 64u64 << 20);
    let pool = d.json(&["pool", "status", "default"]);
    assert_eq!(pool["reserved_bytes"], 64u64 << 20, "{pool}");
    d.fails(&["volume", "set", "default/c", "--reserve", "200M"], "cannot reserve");
    // Capacity alert: default 10%, configurable; a warning in status while available space
    // (free minus unused reservations) is below it.
    assert_eq!(pool["capacity_alert_percent"], 10);
    assert_eq!(pool["warnings"].as_array().unwrap().len(), 0, "{pool}");
    d.fails(&["pool", "set", "default", "--capacity-alert", "100"], "use 1 to 99");
    d.ok(&["pool", "set", "default", "--capacity-alert", "80"]);
    let human = d.ok(&["pool", "status", "default"]);
    assert!(human.contains("WARNING") && human.contains("capacity alert of 80%"), "{human}");
    d.ok(&["volume", "set", "default/thick", "--reserve", "0"]);
    let pool = d.json(&["pool", "status", "default"]);
    assert_eq!(pool["reserved_bytes"], 0);
    assert_eq!(pool["warnings"].as_array().unwrap().len(), 0, "{pool}");
    d.ok(&["unmount", mnt.to_str().unwrap()]);
    assert_eq!(d.json(&["check", "default"])["clean"], true);
    assert!(!d.log().contains("ERROR"), "{}", d.log());
}

#[test]
fn dedup_volumes_store_a_copied_file_once() {
    let dir = temp_dir("dedup");
    let d = Daemon::start(&dir);
    d.fails(&["volume", "create", "default/x", "--dedup", "maybe"], "use on or off");
    d.ok(&["volume", "create", "default/d", "--dedup", "on"]);
    let show = d.json(&["volume", "show", "default/d"]);
    assert_eq!(show["dedup"], true, "{show}");
    assert!(d.ok(&["volume", "show", "default/d"]).contains("dedup        on"));
    let mnt = dir.join("mnt");
    d.ok(&["mount", "default/d", mnt.to_str().unwrap()]);
    // 4 MiB of distinct pages, then a copy of them after a commit (every 5 s).
    let pages: Vec<u8> =
        (0..256u32).flat_map(|i| (0..16384u32).map(move |j| (i.wrapping_mul(31) ^ j.wrapping_mul(7)) as u8)).collect();
    std::fs::write(mnt.join("orig"), &pages).unwrap();
    std::fs::File::open(mnt.join("orig")).unwrap().sync_all().unwrap();
    std::thread::sleep(Duration::from_secs(6));
    std::fs::write(mnt.join("copy"), &pages).unwrap();
    let start = Instant::now();
    let pool = loop {
        let p = d.json(&["pool", "status", "default"]);
        if p["dedup_saved_bytes"].as_u64().unwrap_or(0) >= 2 << 20 {
            break p;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no dedup savings reported: {p}");
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(pool["dedup_blocks"].as_u64().unwrap() >= 128, "{pool}");
    assert_eq!(std::fs::read(mnt.join("copy")).unwrap(), pages);
    d.ok(&["volume", "set", "default/d", "--dedup", "off"]);
    assert_eq!(d.json(&["volume", "show", "default/d"])["dedup"], false);
    d.ok(&["unmount", mnt.to_str().unwrap()]);
    assert_eq!(d.json(&["check", "default"])["clean"], true);
    assert!(!d.log().contains("ERROR"), "{}", d.log());
}
