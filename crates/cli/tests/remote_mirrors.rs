//! Mirrors between two real daemons paired as peers: the source creates the mirror on the
//! target (which must have granted it the pool), a full then an incremental transfer over
//! the mutually authenticated replication port, the target's rules (no mount while
//! mirrored; no update from the target side), a transfer cut by `kill -9` of the target and
//! resumed from the target's checkpoint after its restart, a break on the target (a
//! database would start there), a pool the peer was not granted, and delete on both sides.
//! Needs root and /dev/fuse.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

fn daemon(dir: &Path, tag: &str) -> (Daemon, u16) {
    start_with_repl(dir, tag)
}

#[test]
fn a_mirror_between_two_daemons_transfers_resumes_and_breaks() {
    let dir = temp_dir("remote-mirror");
    let (a, _) = daemon(&dir, "a");
    let (mut b, b_port) = daemon(&dir, "b");
    let img = dir.join("b").join("backup.img");
    b.ok(&["pool", "create", "backup", "--device", img.to_str().unwrap(), "--size", "1G"]);
    let (code, token, err) = b.cli(&["peer", "invite", "--name", "site-a", "--grant", "backup"]);
    assert_eq!(code, 0, "{err}");
    a.json(&["peer", "add", "site-b", &format!("127.0.0.1:{b_port}"), "--invitation", token.trim()]);

    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    a.ok(&["volume", "create", "default/db"]);
    a.ok(&["mount", "default/db", src.to_str().unwrap()]);
    let t1 = write_file(&src.join("table"), 1, 4 << 20);

    // A pool the peer was not granted: refused by the target.
    a.fails(&["mirror", "create", "default/db", "site-b:default"], "may not write to pool default");
    a.fails(&["mirror", "create", "default/db", "nobody:backup"], "nobody");

    // Full transfer.
    let m = a.json(&["mirror", "create", "default/db", "site-b:backup"]);
    assert_eq!(m["name"], "site-b:backup/db", "{m}");
    assert_eq!(m["state"], "mirrored", "{m}");
    assert_eq!(m["dest_peer"], "site-b");
    let s1 = m["common_snapshot"].as_str().unwrap().to_string();
    let on_b = b.json(&["mirror", "show", "backup/db"]);
    assert_eq!(on_b["state"], "mirrored", "{on_b}");
    assert_eq!(on_b["source_peer"], "site-a");
    assert_eq!(on_b["common_snapshot"], s1.as_str());
    assert_eq!(read_snapshot_file(&b, &dir, "backup", "db", &s1, "table").as_deref(), Some(&t1[..]));

    // The target's rules; actions that belong to the other side are refused with a pointer.
    let tgt = dir.join("tgt");
    std::fs::create_dir_all(&tgt).unwrap();
    b.fails(&["mount", "backup/db", tgt.to_str().unwrap()], "target of mirror backup/db");
    b.fails(&["mirror", "update", "backup/db"], "on the source daemon");
    a.fails(&["mirror", "break", "site-b:backup/db"], "on the target daemon");

    // Incremental: only the rewrite travels.
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(src.join("table")).unwrap();
        f.seek(SeekFrom::Start(1 << 20)).unwrap();
        f.write_all(&[0x5A; 64 << 10]).unwrap();
        f.sync_all().unwrap();
    }
    let m = a.json(&["mirror", "update", "site-b:backup/db"]);
    let inc = m["last_transfer"]["done_bytes"].as_u64().unwrap();
    assert!((64 << 10..1 << 20).contains(&inc), "incremental of {inc} bytes: {m}");
    let s2 = m["common_snapshot"].as_str().unwrap().to_string();
    assert_eq!(b.json(&["mirror", "show", "backup/db"])["common_snapshot"], s2.as_str());

    // kill -9 of the target in the middle of a large transfer; after its restart the
    // source's next attempt resumes from the target's checkpoint.
    let big = write_file(&src.join("big"), 2, 160 << 20);
    a.ok(&["mirror", "update", "site-b:backup/db", "--no-wait"]);
    let start = Instant::now();
    loop {
        let s = a.json(&["mirror", "show", "site-b:backup/db"]);
        if s["transfer"]["done_bytes"].as_u64().unwrap_or(0) > 80 << 20 {
            break;
        }
        assert!(s["state"] == "transferring" && start.elapsed() < Duration::from_secs(60), "no transfer to cut: {s}");
        std::thread::sleep(Duration::from_millis(5));
    }
    b.kill9();
    // The source's transfer fails (the connection is gone).
    let start = Instant::now();
    let failed = loop {
        let s = a.json(&["mirror", "show", "site-b:backup/db"]);
        if s["state"] != "transferring" {
            break s;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{s}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(failed["common_snapshot"], s2.as_str());
    let p = b_port.to_string();
    b.spawn_with(&["--repl-port", p.as_str()]);
    let m = a.json(&["mirror", "update", "site-b:backup/db"]);
    assert_eq!(m["state"], "mirrored", "{m}");
    let s3 = m["common_snapshot"].as_str().unwrap().to_string();
    assert_ne!(s3, s2);
    let resent = m["last_transfer"]["done_bytes"].as_u64().unwrap();
    assert!(resent < 120 << 20, "the resumed transfer sent {resent} of 160 MiB");
    assert!(a.log().contains("the target resumes after frame"), "{}", a.log());
    assert_eq!(read_snapshot_file(&b, &dir, "backup", "db", &s3, "big").as_deref(), Some(&big[..]));

    // Break on the target: writable there, at the last transferred snapshot; the source's
    // updates are then refused by the target until it is resynced there.
    let m = b.json(&["mirror", "break", "backup/db"]);
    assert_eq!(m["state"], "broken", "{m}");
    b.ok(&["mount", "backup/db", tgt.to_str().unwrap()]);
    assert_eq!(std::fs::read(tgt.join("big")).unwrap(), big);
    b.ok(&["unmount", tgt.to_str().unwrap()]);
    a.fails(&["mirror", "update", "site-b:backup/db"], "broken on the target");
    let m = b.json(&["mirror", "resync", "backup/db"]);
    assert_eq!(m["state"], "mirrored", "{m}");
    std::fs::write(src.join("after"), b"after the resync").unwrap();
    std::fs::File::open(src.join("after")).unwrap().sync_all().unwrap();
    let m = a.json(&["mirror", "update", "site-b:backup/db"]);
    let s4 = m["common_snapshot"].as_str().unwrap().to_string();
    assert_eq!(read_snapshot_file(&b, &dir, "backup", "db", &s4, "after").as_deref(), Some(&b"after the resync"[..]));

    // Delete on the source also ends the target's record: its volume is free to use.
    a.ok(&["mirror", "delete", "site-b:backup/db"]);
    let l: Value = b.json(&["mirror", "list"]);
    assert_eq!(l.as_array().unwrap().len(), 0, "{l}");
    b.ok(&["mount", "backup/db", tgt.to_str().unwrap()]);
    b.ok(&["unmount", tgt.to_str().unwrap()]);
    a.ok(&["unmount", src.to_str().unwrap()]);
    assert_eq!(b.json(&["check", "backup"])["clean"], true);
}

/// A TCP proxy in front of the target's replication port that cuts the connections that
/// carry a transfer, after `schedule[k]` bytes from the source for the k-th cut (later
/// connections pass whole), and delays a little now and then.
struct CuttingProxy {
    port: u16,
    cuts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

fn cutting_proxy(target: u16, schedule: Vec<u64>) -> CuttingProxy {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let cuts = Arc::new(AtomicUsize::new(0));
    let c2 = cuts.clone();
    std::thread::spawn(move || {
        for client in l.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else { continue };
            let budget = schedule.get(c2.load(Ordering::SeqCst)).copied().unwrap_or(u64::MAX);
            let (c_in, s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let cuts = c2.clone();
            // Source → target: counted, cut at the budget.
            std::thread::spawn(move || {
                let (mut from, mut to) = (c_in, s_out);
                let (mut buf, mut n, mut chunks) = (vec![0u8; 64 << 10], 0u64, 0u64);
                loop {
                    let r = match from.read(&mut buf) {
                        Ok(0) | Err(_) => {
                            let _ = to.shutdown(Shutdown::Write);
                            return;
                        }
                        Ok(r) => r,
                    };
                    if n + r as u64 > budget {
                        let part = (budget - n) as usize;
                        let _ = to.write_all(&buf[..part]);
                        cuts.fetch_add(1, Ordering::SeqCst);
                        let _ = from.shutdown(Shutdown::Both);
                        let _ = to.shutdown(Shutdown::Both);
                        return;
                    }
                    if to.write_all(&buf[..r]).is_err() {
                        let _ = from.shutdown(Shutdown::Both);
                        return;
                    }
                    n += r as u64;
                    chunks += 1;
                    if chunks % 16 == 0 {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            });
            // Target → source: as is.
            std::thread::spawn(move || {
                let (mut from, mut to) = (server, client);
                let _ = std::io::copy(&mut from, &mut to);
                let _ = to.shutdown(Shutdown::Write);
            });
        }
    });
    CuttingProxy { port, cuts }
}

/// Connection cuts at several points of a transfer (a proxy between the daemons): every
/// cut fails the transfer with an error and applies nothing half way; `mirror update`
/// resumes it (from the target's checkpoint once one was reached); at the end the target
/// holds exactly the source's snapshot and both pools check clean.
#[test]
fn transfers_cut_by_the_network_resume_and_end_equal() {
    use std::sync::atomic::Ordering;
    let dir = temp_dir("remote-mirror-cuts");
    let (a, _) = daemon(&dir, "a");
    let (b, b_port) = daemon(&dir, "b");
    let img = dir.join("b").join("backup.img");
    b.ok(&["pool", "create", "backup", "--device", img.to_str().unwrap(), "--size", "1G"]);
    // Cuts before the target's first checkpoint (every 4 MiB of this stream) and after
    // several.
    let proxy = cutting_proxy(b_port, vec![3 << 20, 29 << 20, 30 << 20, 11 << 20]);
    let (code, token, err) = b.cli(&["peer", "invite", "--name", "site-a", "--grant", "backup"]);
    assert_eq!(code, 0, "{err}");
    a.json(&["peer", "add", "site-b", &format!("127.0.0.1:{}", proxy.port), "--invitation", token.trim()]);

    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    a.ok(&["volume", "create", "default/db"]);
    a.ok(&["mount", "default/db", src.to_str().unwrap()]);
    let data = write_file(&src.join("table"), 3, 96 << 20);
    // The first transfer is cut (its create reports the failure); updates resume it.
    let (code, out, err) = a.cli(&["--json", "mirror", "create", "default/db", "site-b:backup"]);
    let mut attempts = 1;
    let mut last = if code == 0 { serde_json::from_str::<Value>(&out).unwrap() } else { Value::Null };
    while last["state"] != "mirrored" {
        assert!(
            attempts < 12,
            "not mirrored after {attempts} attempts ({} cuts): {last} {err}",
            proxy.cuts.load(Ordering::SeqCst)
        );
        let (_, out, e) = a.cli(&["--json", "mirror", "update", "site-b:backup/db"]);
        last = serde_json::from_str(&out).unwrap_or(Value::Null);
        if last.get("error").is_some() {
            assert!(!e.contains("panicked"), "{e}");
            last = a.json(&["mirror", "show", "site-b:backup/db"]);
        }
        attempts += 1;
    }
    let cuts = proxy.cuts.load(Ordering::SeqCst);
    assert_eq!(cuts, 4, "the proxy cut every transfer of its schedule");
    // The transfers after the cuts past a checkpoint started from it, not from the start.
    let resumed = a.log().matches("the target resumes after frame").count();
    assert!(resumed >= 3, "{resumed} resumed transfers: {}", a.log());
    let snap = last["common_snapshot"].as_str().unwrap().to_string();
    assert_eq!(b.json(&["mirror", "show", "backup/db"])["common_snapshot"], snap.as_str());
    assert_eq!(read_snapshot_file(&b, &dir, "backup", "db", &snap, "table").as_deref(), Some(&data[..]));
    // Every cut was a failed transfer in the source's events, not a crash of either side.
    let failed = a.json(&["events", "--limit", "1000"]);
    let n = failed.as_array().unwrap().iter().filter(|e| e["kind"] == "mirror.failed").count();
    assert!(n >= 3, "{failed}");
    assert_eq!(a.json(&["check", "default"])["clean"], true);
    assert_eq!(b.json(&["check", "backup"])["clean"], true);
    // An incremental after the cuts goes through the proxy whole (the schedule is spent).
    let more = write_file(&src.join("more"), 4, 1 << 20);
    let m = a.json(&["mirror", "update", "site-b:backup/db"]);
    let s2 = m["common_snapshot"].as_str().unwrap().to_string();
    assert_eq!(read_snapshot_file(&b, &dir, "backup", "db", &s2, "more").as_deref(), Some(&more[..]));
    a.ok(&["unmount", src.to_str().unwrap()]);
}
