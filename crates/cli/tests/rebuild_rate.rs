//! A rebuild beside clients keeps to the pool's rebuild-rate bounds (`pool set
//! --rebuild-rate-min/-max`): a mirror member replaced while a writer keeps the pool busy
//! copies no faster than the ceiling, shows the limit in `pool status`, finishes soon after
//! the bounds are raised (the new rate applies at once), and the bounds survive a restart;
//! bad bounds are refused with what to give. A real daemon and image files. Needs root and
//! /dev/fuse.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 test paths")
}

const MIB: u64 = 1 << 20;

#[test]
fn a_rebuild_beside_clients_keeps_to_the_pool_rate_bounds() {
    let dir = temp_dir("rebuild-rate");
    let mut d = Daemon::start(&dir);
    let img: Vec<_> = (0..3).map(|i| dir.join(format!("r{i}.img"))).collect();
    d.ok(&[
        "pool",
        "create",
        "m",
        "--layout",
        "mirror",
        "--device",
        s(&img[0]),
        "--device",
        s(&img[1]),
        "--size",
        "256M",
    ]);
    let v = d.json(&["pool", "status", "m"]);
    assert_eq!(
        (v["rebuild_rate_min_bytes_per_second"].as_u64(), v["rebuild_rate_max_bytes_per_second"].as_u64()),
        (Some(32 * MIB), Some(512 * MIB)),
        "the defaults: {v}"
    );

    // Refusals, each with what to give; nothing changes.
    d.fails(&["pool", "set", "m", "--rebuild-rate-min", "100K"], "at least 1M");
    d.fails(&["pool", "set", "m", "--rebuild-rate-max", "16M"], "below its floor");
    d.fails(&["pool", "set", "m", "--rebuild-rate-min", "lots"], "--rebuild-rate-min");
    d.ok(&["pool", "set", "m", "--rebuild-rate-min", "1M", "--rebuild-rate-max", "2M"]);
    let v = d.json(&["pool", "status", "m"]);
    assert_eq!(v["rebuild_rate_max_bytes_per_second"], 2 * MIB, "{v}");
    let text = d.ok(&["pool", "status", "m"]);
    assert!(text.contains("rebuilds  1.0M/s to 2.0M/s while clients are served"), "{text}");
    // One bound alone keeps the other.
    d.ok(&["pool", "set", "m", "--rebuild-rate-max", "1M"]);
    let v = d.json(&["pool", "status", "m"]);
    assert_eq!(
        (v["rebuild_rate_min_bytes_per_second"].as_u64(), v["rebuild_rate_max_bytes_per_second"].as_u64()),
        (Some(MIB), Some(MIB)),
        "{v}"
    );

    // 32 MiB of data to copy: 1 MiB/s beside clients, 30 s or more.
    d.ok(&["volume", "create", "m/v"]);
    let mnt = dir.join("mnt");
    d.ok(&["mount", "m/v", s(&mnt)]);
    let data: Vec<u8> = (0..32u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(mnt.join("data"), &data).unwrap();
    std::fs::File::open(mnt.join("data")).and_then(|f| f.sync_all()).unwrap();

    // A client that keeps the pool busy: small synchronous writes.
    let writer = BusyWriter::start(mnt.join("busy"));
    std::thread::sleep(Duration::from_millis(600));
    d.ok(&["pool", "replace", "m", "1", s(&img[2]), "--size", "256M"]);
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let v = d.json(&["pool", "status", "m"]);
    let r = &v["rebuild"];
    assert!(r.is_object(), "the rebuild ended within 2 s at 1 MiB/s: {v}");
    assert_eq!(r["limit_bytes_per_second"], MIB, "held to the bounds beside clients: {v}");
    // The first step copies a window at once, then waits it out at the rate.
    let copied = r["copied_bytes"].as_u64().unwrap();
    let allowed = 8 * MIB + started.elapsed().as_secs() * MIB + MIB;
    assert!(copied <= allowed, "copied {copied} bytes in {:?}, more than {allowed}: {v}", started.elapsed());
    let text = d.ok(&["pool", "status", "m"]);
    assert!(text.contains("(copying at most 1.0M/s beside clients)"), "{text}");

    // Raised bounds apply at once, even to a rebuild waiting out a step copied at the old
    // rate (the first one: several seconds at 1 MiB/s): the rest is copied in a second or two.
    d.ok(&["pool", "set", "m", "--rebuild-rate-min", "256M", "--rebuild-rate-max", "1G"]);
    let raised = Instant::now();
    let v = loop {
        let v = d.json(&["pool", "status", "m"]);
        if v.get("rebuild").is_none() {
            break v;
        }
        assert!(raised.elapsed() < Duration::from_millis(2000), "the rebuild did not speed up: {v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("rebuilt {:?} after the bounds were raised", raised.elapsed());
    assert!(writer.stop() > 50, "the writer ran");
    let states: Vec<&str> = v["devices"].as_array().unwrap().iter().map(|d| d["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["ONLINE", "ONLINE"], "{v}");
    let jobs = d.json(&["job", "list"]);
    let job: Value = jobs.as_array().unwrap().iter().find(|j| j["kind"] == "rebuild").cloned().expect("a rebuild job");
    assert_eq!(job["state"], "succeeded", "{job}");
    assert!(job["result"]["copied_bytes"].as_u64().unwrap() >= 32 * MIB, "{job}");
    assert_eq!(std::fs::read(mnt.join("data")).unwrap(), data);

    // The bounds are in the state file.
    d.ok(&["unmount", s(&mnt)]);
    assert!(d.stop().success(), "{}", d.log());
    d.spawn();
    let v = d.json(&["pool", "status", "m"]);
    assert_eq!(
        (v["rebuild_rate_min_bytes_per_second"].as_u64(), v["rebuild_rate_max_bytes_per_second"].as_u64()),
        (Some(256 * MIB), Some(1 << 30)),
        "{v}"
    );
    d.fails(&["pool", "set", "m", "--rebuild-rate-max", "128M"], "below its floor");
    d.stop();
}
