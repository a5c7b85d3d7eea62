//! parity2 pools through the daemon and the CLI: create (and the refusal of too few
//! devices), status, bit rot on two members healed by a scrub, two member images gone
//! across a restart (DEGRADED, every byte served, writes go on), both replaced and rebuilt
//! by reconstruction, a restart, the checker. Real daemons, real image files. Needs root
//! and /dev/fuse.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 test paths")
}

fn states(v: &Value) -> Vec<String> {
    v["devices"].as_array().unwrap().iter().map(|d| d["state"].as_str().unwrap().to_string()).collect()
}

fn wait_rebuilt(d: &Daemon, name: &str) -> Value {
    let start = Instant::now();
    loop {
        let v = d.json(&["pool", "status", name]);
        if v.get("rebuild").is_none() {
            return v;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "rebuild did not finish: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Flip the 4 KiB unit of `image` that starts with `needle` (the start of a file's block);
/// false if no such unit is there.
fn rot_unit(image: &Path, needle: &[u8]) -> bool {
    let mut bytes = std::fs::read(image).unwrap();
    let Some(at) = (0..bytes.len() - 4096).step_by(4096).find(|&o| &bytes[o..o + needle.len()] == needle) else {
        return false;
    };
    bytes[at..at + 4096].iter_mut().for_each(|b| *b ^= 0xa5);
    std::fs::write(image, &bytes).unwrap();
    true
}

#[test]
fn parity2_pools_through_the_cli() {
    let dir = temp_dir("parity-cli");
    let mut d = Daemon::start(&dir);
    let img: Vec<_> = (0..7).map(|i| dir.join(format!("p{i}.img"))).collect();
    let mut create = vec!["pool", "create", "p", "--layout", "parity2", "--size", "96M"];
    for i in img.iter().take(3) {
        create.extend(["--device", s(i)]);
    }
    d.fails(&create, "4 to 16 devices");
    for i in &img[3..5] {
        create.extend(["--device", s(i)]);
    }
    d.ok(&create);
    let v = d.json(&["pool", "status", "p"]);
    assert_eq!((v["state"].as_str(), v["layout"].as_str()), (Some("ONLINE"), Some("parity2")), "{v}");
    assert_eq!(states(&v), ["ONLINE"; 5]);
    assert!(d.ok(&["pool", "status", "p"]).contains("layout    parity2"));

    d.ok(&["volume", "create", "p/v"]);
    let mnt = dir.join("mnt");
    d.ok(&["mount", "p/v", s(&mnt)]);
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(mnt.join("f"), &data).unwrap();
    let rot: Vec<u8> = (0..512u32 << 10).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
    std::fs::write(mnt.join("rot"), &rot).unwrap();
    assert!(d.stop().success(), "{}", d.log());
    // Two units of the incompressible file, each on whichever member holds it.
    let mut rotted = 0;
    for unit in [16usize, 77] {
        let needle = &rot[unit * 4096..unit * 4096 + 64];
        rotted += img[..5].iter().filter(|i| rot_unit(i, needle)).count();
    }
    assert_eq!(rotted, 2, "each unit is on one member");
    d.spawn();
    let scrub = d.json(&["pool", "scrub", "p"]);
    assert!(scrub["checksum_errors"].as_u64().unwrap() >= 2, "{scrub}");
    assert_eq!(scrub["check"]["clean"], true, "{scrub}");
    assert_eq!(std::fs::read(mnt.join("rot")).unwrap(), rot);
    let scrub = d.json(&["pool", "scrub", "p"]);
    assert_eq!(scrub["checksum_errors"], 0, "healed for good: {scrub}");

    // Two members' images go away across a restart: DEGRADED, every byte there.
    assert!(d.stop().success(), "{}", d.log());
    for i in [1, 3] {
        std::fs::rename(&img[i], dir.join(format!("p{i}.away"))).unwrap();
    }
    d.spawn();
    let v = d.json(&["pool", "status", "p"]);
    assert_eq!(v["state"], "DEGRADED", "{v}");
    assert_eq!(states(&v), ["ONLINE", "UNAVAILABLE", "ONLINE", "UNAVAILABLE", "ONLINE"]);
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), data);
    std::fs::write(mnt.join("g"), b"written with two members gone").unwrap();
    d.fails(&["pool", "offline", "p", "0"], "would be suspended");

    // Both replaced, one after the other: rebuilt by reconstruction, ONLINE, scrub clean.
    d.ok(&["pool", "replace", "p", "1", s(&img[5]), "--size", "96M"]);
    wait_rebuilt(&d, "p");
    d.ok(&["pool", "replace", "p", "3", s(&img[6]), "--size", "96M"]);
    let v = wait_rebuilt(&d, "p");
    assert_eq!((v["state"].as_str(), states(&v)), (Some("ONLINE"), vec!["ONLINE".to_string(); 5]), "{v}");
    let scrub = d.json(&["pool", "scrub", "p"]);
    assert_eq!((scrub["checksum_errors"].as_u64(), scrub["check"]["clean"].as_bool()), (Some(0), Some(true)));

    d.ok(&["unmount", s(&mnt)]);
    assert!(d.stop().success(), "{}", d.log());
    // The replacements stand in for two original members: leave two others out.
    for i in [0, 4] {
        std::fs::rename(&img[i], dir.join(format!("p{i}.out"))).unwrap();
    }
    d.spawn();
    assert_eq!(d.json(&["pool", "status", "p"])["state"], "DEGRADED");
    d.ok(&["mount", "p/v", s(&mnt)]);
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), data);
    assert_eq!(std::fs::read(mnt.join("rot")).unwrap(), rot);
    assert_eq!(std::fs::read(mnt.join("g")).unwrap(), b"written with two members gone");
    d.ok(&["unmount", s(&mnt)]);
    d.ok(&["check", "p"]);
    // Back again, the two left out missed nothing but are not read before a rebuild.
    assert!(d.stop().success(), "{}", d.log());
    for i in [0, 4] {
        std::fs::rename(dir.join(format!("p{i}.out")), &img[i]).unwrap();
    }
    d.spawn();
    let v = d.json(&["pool", "status", "p"]);
    assert_eq!(states(&v), ["STALE", "ONLINE", "ONLINE", "ONLINE", "STALE"], "{v}");
    d.ok(&["pool", "online", "p", "0"]);
    wait_rebuilt(&d, "p");
    d.ok(&["pool", "online", "p", "4"]);
    let v = wait_rebuilt(&d, "p");
    assert_eq!(v["state"], "ONLINE", "{v}");
    d.ok(&["pool", "destroy", "p", "--yes"]);
    // Every member was erased: each can hold a new pool.
    d.ok(&["pool", "create", "again", "--device", s(&img[4])]);
}
