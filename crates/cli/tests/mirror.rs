//! Mirror pools through the daemon and the CLI: create (and every refusal of a bad layout
//! or device list), status with its device table, a member image that disappears across a
//! restart (DEGRADED, not UNAVAILABLE), replace with a rebuild that finishes, offline/online,
//! scrub, destroy erasing every member. Real daemons, real image files. Needs root and
//! /dev/fuse.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 test paths")
}

fn pool(d: &Daemon, name: &str) -> Value {
    d.json(&["pool", "status", name])
}

fn states(v: &Value) -> Vec<String> {
    v["devices"].as_array().unwrap().iter().map(|d| d["state"].as_str().unwrap().to_string()).collect()
}

/// Wait until the pool has no rebuild in progress.
fn wait_rebuilt(d: &Daemon, name: &str) -> Value {
    let start = Instant::now();
    loop {
        let v = pool(d, name);
        if v.get("rebuild").is_none() {
            return v;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "rebuild did not finish: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn mirror_pools_through_the_cli() {
    let dir = temp_dir("mirror-cli");
    let mut d = Daemon::start(&dir);
    let img: Vec<_> = (0..4).map(|i| dir.join(format!("m{i}.img"))).collect();

    // Refusals: each says what to do.
    d.fails(&["pool", "create", "m", "--layout", "mirror", "--device", s(&img[0]), "--size", "128M"], "2 or 3");
    d.fails(
        &["pool", "create", "m", "--layout", "raid5", "--device", s(&img[0]), "--size", "128M"],
        "single, mirror or parity2",
    );
    d.fails(
        &[
            "pool",
            "create",
            "m",
            "--layout",
            "mirror",
            "--device",
            s(&img[0]),
            "--device",
            s(&img[0]),
            "--size",
            "128M",
        ],
        "given twice",
    );
    d.fails(&["pool", "create", "m", "--device", s(&img[0]), "--device", s(&img[1]), "--size", "128M"], "exactly one");
    d.fails(
        &["pool", "create", "m", "--layout", "mirror", "--device", s(&img[0]), "--device", s(&img[1])],
        "does not exist",
    );

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
        "128M",
    ]);
    let v = pool(&d, "m");
    assert_eq!(v["state"], "ONLINE", "{v}");
    assert_eq!(v["layout"], "mirror");
    assert_eq!(states(&v), ["ONLINE", "ONLINE"]);
    assert_eq!(v["members"], serde_json::json!([s(&img[0]), s(&img[1])]));
    let human = d.ok(&["pool", "status", "m"]);
    assert!(human.contains("layout    mirror") && human.contains("CKSUM"), "{human}");
    // A member of a mirror is not formatted over by another pool.
    d.fails(&["pool", "create", "x", "--device", s(&img[1])], "Strata");

    d.ok(&["volume", "create", "m/v"]);
    let mnt = dir.join("mnt");
    d.ok(&["mount", "m/v", s(&mnt)]);
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(mnt.join("f"), &data).unwrap();
    // Bit rot on one member: a block of an incompressible file overwritten on member 0's
    // image while the daemon is stopped; the scrub heals it from member 1, and the watch
    // thread records the healed checksum errors as an event.
    let rot: Vec<u8> = (0..256u32 << 10).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
    std::fs::write(mnt.join("rot"), &rot).unwrap();
    assert!(d.stop().success(), "{}", d.log());
    let mut image = std::fs::read(&img[0]).unwrap();
    let at = (0..image.len() - 4096)
        .step_by(512)
        .find(|&o| image[o..o + 64] == rot[64 << 10..(64 << 10) + 64])
        .expect("the file's block on member 0");
    image[at..at + 4096].iter_mut().for_each(|b| *b ^= 0x5a);
    std::fs::write(&img[0], &image).unwrap();
    // The offline check of the set (no daemon): every copy verified, the damaged one named
    // by member, exit 1, and nothing written (the images are as they were).
    let before: Vec<Vec<u8>> = img[..2].iter().map(|p| std::fs::read(p).unwrap()).collect();
    let (code, out, err) = d.cli(&["check", "--device", s(&img[0]), "--device", s(&img[1])]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("member 0") && out.contains("1 damaged copies") && out.contains("mirror set, ONLINE"),
        "{out}"
    );
    assert_eq!(out.matches("damaged copies").count(), 1, "only member 0 is damaged: {out}");
    let after: Vec<Vec<u8>> = img[..2].iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(before == after, "the offline check wrote to a member");
    // The good member alone: the set opens degraded from it and checks clean.
    let (code, out, err) = d.cli(&["check", "--device", s(&img[1])]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("mirror set, DEGRADED") && out.contains("clean"), "{out}");
    // A single-device pool's image with a member: refused with what to give.
    let single = dir.join("single.img");
    std::fs::write(&single, vec![0u8; 1 << 20]).unwrap();
    let (code, _, err) = d.cli(&["check", "--device", s(&img[1]), "--device", s(&single)]);
    assert_ne!(code, 0);
    assert!(err.contains("not a member of a device set"), "{err}");
    drop(image);
    d.spawn();
    let scrub = d.json(&["pool", "scrub", "m"]);
    assert!(scrub["checksum_errors"].as_u64().unwrap() >= 1, "{scrub}");
    assert_eq!(scrub["check"]["clean"], true, "healed: {scrub}");
    assert_eq!(std::fs::read(mnt.join("rot")).unwrap(), rot);
    let start = std::time::Instant::now();
    let healed = loop {
        let ev = d.json(&["events"]);
        if let Some(e) = ev.as_array().unwrap().iter().find(|e| e["kind"] == "device.errors").cloned() {
            break e;
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(10), "no device.errors event: {ev}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(healed["target"].as_str().unwrap().starts_with(s(&img[0])), "member 0: {healed}");
    assert!(healed["message"].as_str().unwrap().contains("checksum errors healed"), "{healed}");

    // Member 1's image goes away across a restart: the pool opens DEGRADED, data served.
    assert!(d.stop().success(), "{}", d.log());
    let away = dir.join("m1.away");
    std::fs::rename(&img[1], &away).unwrap();
    d.spawn();
    let v = pool(&d, "m");
    assert_eq!(v["state"], "DEGRADED", "{v}");
    assert_eq!(states(&v), ["ONLINE", "UNAVAILABLE"]);
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), data);
    std::fs::write(mnt.join("g"), b"written while degraded").unwrap();
    // The last member in sync cannot go offline.
    d.fails(&["pool", "offline", "m", "0"], "would be suspended");

    // Replace the missing member with a new image: rebuilt, ONLINE.
    d.fails(&["pool", "replace", "m", "1", s(&img[0])], "already");
    d.ok(&["pool", "replace", "m", "1", s(&img[2]), "--size", "128M"]);
    let v = wait_rebuilt(&d, "m");
    assert_eq!(states(&v), ["ONLINE", "ONLINE"], "{v}");
    assert_eq!(v["state"], "ONLINE");
    assert!(d.log().contains("rebuild complete"), "{}", d.log());
    // The rebuild was a job, not cancellable, that succeeded with what it copied.
    let jobs = d.json(&["job", "list"]);
    let rebuild = jobs.as_array().unwrap().iter().find(|j| j["kind"] == "rebuild").cloned().expect("a rebuild job");
    assert_eq!((rebuild["state"].as_str(), rebuild["pool"].as_str()), (Some("succeeded"), Some("m")), "{rebuild}");
    assert!(rebuild["target"].as_str().unwrap().starts_with(s(&img[2])), "{rebuild}");
    assert!(rebuild["result"]["copied_bytes"].as_u64().unwrap() >= 3_000_000, "{rebuild}");
    let scrub = d.json(&["pool", "scrub", "m"]);
    assert_eq!(scrub["checksum_errors"], 0, "{scrub}");
    assert_eq!(scrub["check"]["clean"], true, "{scrub}");

    // Offline and online: what was missed is rebuilt.
    d.ok(&["pool", "offline", "m", "0"]);
    assert_eq!(states(&pool(&d, "m")), ["OFFLINE", "ONLINE"]);
    std::fs::write(mnt.join("h"), b"member 0 misses this").unwrap();
    // --wait returns when the rebuild has ended (nothing left to poll for); 32 MiB to copy
    // keep it running well past the CLI's request.
    std::fs::write(mnt.join("big"), vec![7u8; 32 << 20]).unwrap();
    std::fs::File::open(mnt.join("big")).and_then(|f| f.sync_all()).unwrap();
    let out = d.ok(&["pool", "online", "m", "0", "--wait"]);
    assert!(out.contains("rebuilt in") && out.contains("ONLINE"), "{out}");
    let v = pool(&d, "m");
    assert!(v.get("rebuild").is_none(), "{v}");
    assert_eq!(states(&v), ["ONLINE", "ONLINE"], "{v}");
    let out = d.ok(&["pool", "online", "m", "0", "--wait"]);
    assert!(out.contains("nothing to rebuild"), "{out}");

    // After a restart the state file names the replacement.
    d.ok(&["unmount", s(&mnt)]);
    assert!(d.stop().success(), "{}", d.log());
    d.spawn();
    let v = pool(&d, "m");
    assert_eq!(v["state"], "ONLINE", "{v}");
    assert_eq!(v["members"], serde_json::json!([s(&img[0]), s(&img[2])]));
    d.ok(&["mount", "m/v", s(&mnt)]);
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), data);
    assert_eq!(std::fs::read(mnt.join("h")).unwrap(), b"member 0 misses this");

    // Offline across a restart: the missed map brings back what the member missed, and
    // online copies that, not the 32 MiB file and the rest.
    d.ok(&["pool", "offline", "m", "0"]);
    std::fs::write(mnt.join("h2"), b"missed across a restart").unwrap();
    std::fs::File::open(mnt.join("h2")).and_then(|f| f.sync_all()).unwrap();
    d.ok(&["unmount", s(&mnt)]);
    assert!(d.stop().success(), "{}", d.log());
    d.spawn();
    let v = pool(&d, "m");
    assert_eq!(states(&v), ["OFFLINE", "ONLINE"], "{v}");
    let note = v["devices"][0]["note"].as_str().unwrap_or_default().to_string();
    assert!(note.contains("(the missed map)"), "{v}");
    d.ok(&["pool", "online", "m", "0", "--wait"]);
    let v = wait_rebuilt(&d, "m");
    assert_eq!(states(&v), ["ONLINE", "ONLINE"], "{v}");
    let jobs = d.json(&["job", "list"]);
    let last = jobs.as_array().unwrap().iter().rev().find(|j| j["kind"] == "rebuild").cloned().expect("a rebuild job");
    let copied = last["result"]["copied_bytes"].as_u64().unwrap();
    assert!(copied < 8 << 20, "a resync after a restart copied {copied} bytes: {last}");
    d.ok(&["mount", "m/v", s(&mnt)]);
    assert_eq!(std::fs::read(mnt.join("h2")).unwrap(), b"missed across a restart");
    d.ok(&["unmount", s(&mnt)]);
    d.ok(&["check", "m"]);
    let scrub = d.json(&["pool", "scrub", "m"]);
    assert_eq!(scrub["checksum_errors"], 0, "{scrub}");

    // Export and import: a member alone is not a pool; a directory holding the members is
    // scanned (the replaced device m1.img is there too, with the set's older label); the
    // set imports ONLINE with its members, and stays so across a restart.
    d.ok(&["pool", "export", "m"]);
    assert!(!d.ok(&["pool", "list"]).contains("\nm "), "exported");
    d.fails(&["pool", "import", "m", "--device", s(&img[0])], "member 0 of a device set of 2");
    let scan = d.ok(&["pool", "import", "--dir", s(&dir)]);
    assert!(scan.contains("pool m (guid") && scan.contains("on a set of 2 devices"), "{scan}");
    d.ok(&["pool", "import", "m", "--dir", s(&dir)]);
    let v = pool(&d, "m");
    assert_eq!(v["state"], "ONLINE", "{v}");
    assert_eq!(v["members"], serde_json::json!([s(&img[0]), s(&img[2])]));
    d.ok(&["mount", "m/v", s(&mnt)]);
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), data);
    d.ok(&["unmount", s(&mnt)]);
    assert!(d.stop().success(), "{}", d.log());
    d.spawn();
    assert_eq!(pool(&d, "m")["state"], "ONLINE");
    d.ok(&["check", "m"]);
    // With a member missing it imports DEGRADED; back, the member is stale until brought
    // online (rebuilt).
    d.ok(&["pool", "export", "m"]);
    std::fs::create_dir_all(dir.join("away")).unwrap();
    let away = dir.join("away/m2.img");
    std::fs::rename(&img[2], &away).unwrap();
    let scan = d.ok(&["pool", "import", "--dir", s(&dir)]);
    assert!(scan.contains("on a set of 2 devices, 1 found"), "{scan}");
    d.ok(&["pool", "import", "m", "--dir", s(&dir)]);
    assert_eq!(pool(&d, "m")["state"], "DEGRADED");
    d.ok(&["pool", "export", "m"]);
    std::fs::rename(&away, &img[2]).unwrap();
    d.ok(&["pool", "import", "m", "--dir", s(&dir)]);
    let v = pool(&d, "m");
    assert_eq!(v["state"], "DEGRADED", "the member that missed the degraded import is stale: {v}");
    d.ok(&["pool", "online", "m", "1", "--wait"]);
    assert_eq!(wait_rebuilt(&d, "m")["state"], "ONLINE");
    d.ok(&["check", "m"]);

    // Destroy erases every member: each can hold a new pool afterwards.
    d.ok(&["pool", "destroy", "m", "--yes"]);
    d.ok(&["pool", "create", "again", "--device", s(&img[2])]);
}

/// A hot spare takes the place of a member that is missing when the pool opens, is rebuilt
/// at once (a job), leaves the spares, and is a member after a restart; spares are added
/// and removed by name, refused where they make no sense.
#[test]
fn a_hot_spare_replaces_a_missing_member() {
    let dir = temp_dir("mirror-spare");
    let mut d = Daemon::start(&dir);
    let img: Vec<_> = (0..4).map(|i| dir.join(format!("m{i}.img"))).collect();
    let spare = &img[2];
    // On one device, a spare is refused; on a mirror, the spare is created with the members.
    d.fails(&["pool", "create", "one", "--device", s(&img[3]), "--size", "64M", "--spare", s(spare)], "for a mirror");
    d.fails(
        &[
            "pool",
            "create",
            "m",
            "--layout",
            "mirror",
            "--device",
            s(&img[0]),
            "--device",
            s(&img[1]),
            "--spare",
            s(&img[1]),
            "--size",
            "64M",
        ],
        "also a device",
    );
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
        "--spare",
        s(spare),
        "--size",
        "64M",
    ]);
    let v = pool(&d, "m");
    assert_eq!(v["spares"], serde_json::json!([s(spare)]), "{v}");
    assert!(d.ok(&["pool", "status", "m"]).contains(&format!("spare     {} (AVAIL)", s(spare))));
    // A spare is in use: no other pool takes it, not even as a spare.
    d.fails(&["pool", "create", "x", "--device", s(spare)], "is a hot spare of pool m");
    d.fails(&["pool", "spare", "m", s(spare)], "a spare of a pool already");
    // Added and removed by name.
    d.ok(&["pool", "spare", "m", s(&img[3]), "--size", "64M"]);
    assert_eq!(pool(&d, "m")["spares"].as_array().unwrap().len(), 2);
    d.ok(&["pool", "unspare", "m", s(&img[3])]);
    d.fails(&["pool", "unspare", "m", s(&img[3])], "has no spare");
    d.fails(&["pool", "spare", "default", s(&img[3])], "hot spares are for mirrors");

    d.ok(&["volume", "create", "m/v"]);
    let mnt = dir.join("mnt");
    d.ok(&["mount", "m/v", s(&mnt)]);
    let data = write_file(&mnt.join("f"), 9, 3 << 20);
    // Member 1 is gone when the daemon starts again: the spare takes its place.
    assert!(d.stop().success(), "{}", d.log());
    std::fs::remove_file(&img[1]).unwrap();
    d.spawn();
    let start = Instant::now();
    let v = loop {
        let v = pool(&d, "m");
        if v["members"][1] == s(spare) && v.get("rebuild").is_none() && v["state"] == "ONLINE" {
            break v;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the spare did not replace member 1: {v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(states(&v), ["ONLINE", "ONLINE"], "{v}");
    assert!(v.get("spares").is_none(), "the spare left the spares: {v}");
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), data);
    let ev = d.json(&["events"]);
    let e = ev.as_array().unwrap().iter().find(|e| e["kind"] == "device.spare").cloned().expect("a device.spare event");
    assert!(e["message"].as_str().unwrap().contains("replaced"), "{e}");
    let jobs = d.json(&["job", "list"]);
    assert!(jobs.as_array().unwrap().iter().any(|j| j["kind"] == "rebuild" && j["state"] == "succeeded"), "{jobs}");
    let scrub = d.json(&["pool", "scrub", "m"]);
    assert_eq!(scrub["check"]["clean"], true, "{scrub}");
    // The state file has it: after a restart the spare is a member, the pool ONLINE.
    assert!(d.stop().success(), "{}", d.log());
    d.spawn();
    let v = pool(&d, "m");
    assert_eq!((v["state"].as_str(), v["members"][1].as_str()), (Some("ONLINE"), Some(s(spare))), "{v}");
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), data);
}
