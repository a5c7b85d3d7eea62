//! A scrub beside clients keeps to the pool's scrub-rate bounds (`pool set
//! --scrub-rate-min/-max`): started while a writer keeps the pool busy, it verifies no
//! faster than the ceiling and shows the limit in its status; raised bounds apply to the
//! running scrub at once; the bounds survive a restart; bad bounds are refused with what to
//! give. A real daemon and an image file. Needs root and /dev/fuse.

mod common;
use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

fn bounds(v: &Value) -> (Option<u64>, Option<u64>) {
    (v["scrub_rate_min_bytes_per_second"].as_u64(), v["scrub_rate_max_bytes_per_second"].as_u64())
}

#[test]
fn a_scrub_beside_clients_keeps_to_the_pool_rate_bounds() {
    let dir = temp_dir("scrub-rate");
    let mut d = Daemon::start(&dir);
    let v = d.json(&["pool", "status", "default"]);
    assert_eq!(bounds(&v), (Some(16 * MIB), Some(256 * MIB)), "the defaults: {v}");

    // Refusals, each with what to give; nothing changes.
    d.fails(&["pool", "set", "default", "--scrub-rate-min", "100K"], "at least 1M");
    d.fails(&["pool", "set", "default", "--scrub-rate-max", "8M"], "below its floor");
    d.fails(&["pool", "set", "default", "--scrub-rate-max", "lots"], "--scrub-rate-max");
    assert_eq!(bounds(&d.json(&["pool", "status", "default"])), (Some(16 * MIB), Some(256 * MIB)));
    d.ok(&["pool", "set", "default", "--scrub-rate-min", "1M", "--scrub-rate-max", "2M"]);
    let text = d.ok(&["pool", "status", "default"]);
    assert!(text.contains("scrubs    1.0M/s to 2.0M/s while clients are served"), "{text}");
    // One bound alone keeps the other.
    d.ok(&["pool", "set", "default", "--scrub-rate-max", "1M"]);
    assert_eq!(bounds(&d.json(&["pool", "status", "default"])), (Some(MIB), Some(MIB)));

    // 32 MiB of data to verify: 30 s or more at 1 MiB/s.
    d.ok(&["volume", "create", "default/v"]);
    let mnt = dir.join("mnt");
    d.ok(&["mount", "default/v", mnt.to_str().unwrap()]);
    let data: Vec<u8> = (0..32u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(mnt.join("data"), &data).unwrap();
    std::fs::File::open(mnt.join("data")).and_then(|f| f.sync_all()).unwrap();

    // A client that keeps the pool busy: small synchronous writes.
    let writer = BusyWriter::start(mnt.join("busy"));
    std::thread::sleep(Duration::from_millis(600));
    let s = d.json(&["pool", "scrub", "default", "--no-wait"]);
    assert_eq!(s["state"], "running", "{s}");
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let s = d.json(&["pool", "scrub", "default", "--status"]);
    assert_eq!(s["state"], "running", "the scrub ended within 3 s at 1 MiB/s: {s}");
    assert_eq!(s["limit_bytes_per_second"], MIB, "held to the bounds beside clients: {s}");
    // Paced in windows of 100 ms: at most a window's share and a record more, each window.
    let done = s["done_bytes"].as_u64().unwrap();
    let allowed = (started.elapsed().as_secs_f64() * MIB as f64) as u64 + 2 * MIB;
    assert!(done <= allowed, "verified {done} bytes in {:?}, more than {allowed}: {s}", started.elapsed());
    assert!(s["paced_seconds"].as_f64().unwrap() > 1.0, "{s}");
    let text = d.ok(&["pool", "scrub", "default", "--status"]);
    assert!(text.contains("verifying at most 1.0M/s beside clients"), "{text}");

    // Raised bounds apply to the running scrub at once: the rest is verified in a second
    // or two.
    d.ok(&["pool", "set", "default", "--scrub-rate-min", "256M", "--scrub-rate-max", "1G"]);
    let raised = Instant::now();
    let s = loop {
        let s = d.json(&["pool", "scrub", "default", "--status"]);
        if s["state"] != "running" {
            break s;
        }
        assert!(raised.elapsed() < Duration::from_millis(3000), "the scrub did not speed up: {s}");
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("scrubbed {:?} after the bounds were raised", raised.elapsed());
    assert!(writer.stop() > 50, "the writer ran");
    assert_eq!(s["state"], "finished", "{s}");
    assert_eq!(s["report"]["check"]["clean"], true, "{s}");
    assert!(s["done_bytes"].as_u64().unwrap() >= 32 * MIB, "{s}");
    assert!(s.get("limit_bytes_per_second").is_none(), "an ended scrub has no limit: {s}");
    assert_eq!(std::fs::read(mnt.join("data")).unwrap(), data);

    // The bounds are in the state file.
    d.ok(&["unmount", mnt.to_str().unwrap()]);
    assert!(d.stop().success(), "{}", d.log());
    d.spawn();
    assert_eq!(bounds(&d.json(&["pool", "status", "default"])), (Some(256 * MIB), Some(1 << 30)));
    d.fails(&["pool", "set", "default", "--scrub-rate-max", "128M"], "below its floor");
    d.stop();
}
