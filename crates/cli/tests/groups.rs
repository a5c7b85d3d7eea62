//! Device groups through the daemon and the CLI (`strata pool add`): a mirror pool holding
//! a mounted volume's files grows by a second mirror; new data lands on both groups; the
//! pool comes back whole after a restart; a member of the added group is replaced and
//! rebuilt, and a scrub is clean. Refusals say what to do. Real daemons, real image
//! files. Needs root and /dev/fuse.

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

/// 4 KiB blocks of `data` (at 4 KiB offsets) found in the image at `p`.
fn blocks_of(p: &Path, data: &[u8]) -> usize {
    let wanted: std::collections::HashSet<&[u8]> = data.chunks(4096).collect();
    std::fs::read(p).unwrap().chunks(4096).filter(|c| wanted.contains(c)).count()
}

fn data(seed: u32, len: u32) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8 ^ (seed as u8).wrapping_mul(0x9d)).collect()
}

#[test]
fn a_mirror_pool_grows_by_a_device_group() {
    let dir = temp_dir("groups-cli");
    let mut d = Daemon::start(&dir);
    let img: Vec<_> = (0..5).map(|i| dir.join(format!("g{i}.img"))).collect();
    let single = dir.join("single.img");
    d.ok(&["pool", "create", "one", "--device", s(&single), "--size", "64M"]);
    d.fails(&["pool", "add", "one", "--device", s(&img[2]), "--device", s(&img[3]), "--size", "64M"], "one device");
    d.ok(&[
        "pool",
        "create",
        "g",
        "--layout",
        "mirror",
        "--device",
        s(&img[0]),
        "--device",
        s(&img[1]),
        "--size",
        "128M",
    ]);
    d.fails(&["pool", "add", "g", "--device", s(&img[2]), "--size", "128M"], "2 or 3");
    d.fails(&["pool", "add", "g", "--device", s(&img[2]), "--device", s(&img[0]), "--size", "128M"], "already");
    d.fails(&["pool", "add", "g", "--device", s(&img[2]), "--device", s(&img[3])], "does not exist");
    d.ok(&["volume", "create", "g/v"]);
    let mnt = dir.join("mnt");
    d.ok(&["mount", "g/v", s(&mnt)]);
    let a = data(1, 24 << 20);
    std::fs::write(mnt.join("a"), &a).unwrap();
    std::fs::File::open(mnt.join("a")).unwrap().sync_all().unwrap();
    let size = pool(&d, "g")["size_bytes"].as_u64().unwrap();

    let out = d.ok(&["pool", "add", "g", "--device", s(&img[2]), "--device", s(&img[3]), "--size", "128M"]);
    assert!(out.contains("device group added"), "{out}");
    let v = pool(&d, "g");
    let grown = v["size_bytes"].as_u64().unwrap();
    assert!(grown > size + (100 << 20), "{size} -> {grown}: {v}");
    let groups: Vec<u64> = v["devices"].as_array().unwrap().iter().map(|d| d["group"].as_u64().unwrap()).collect();
    assert_eq!(groups, [0, 0, 1, 1], "{v}");
    let human = d.ok(&["pool", "status", "g"]);
    assert!(human.contains("group 1 (mirror)") && human.contains(s(&img[3])), "{human}");
    // A device of the new group is not taken by another pool.
    d.fails(&["pool", "create", "x", "--device", s(&img[3])], "Strata");

    let b = data(2, 32 << 20);
    std::fs::write(mnt.join("b"), &b).unwrap();
    std::fs::File::open(mnt.join("b")).unwrap().sync_all().unwrap();
    // A clean stop commits everything. After the restart the state file names both
    // groups and the files are whole.
    assert!(d.stop().success(), "{}", d.log());
    // Both groups took a share of the new file (1 MiB stripes): each holds a quarter of it
    // at least; the old file stayed where it was.
    let (first, second) = (blocks_of(&img[0], &b), blocks_of(&img[2], &b));
    assert!(first > 2048 && second > 2048 && first + second >= 8192, "{first} + {second} blocks of 8192");
    assert_eq!(blocks_of(&img[2], &a), 0);
    // The offline check takes the members of every group, in any order; without the added
    // group's it says which is missing.
    let (code, out, err) = d.cli(&[
        "check",
        "--device",
        s(&img[2]),
        "--device",
        s(&img[0]),
        "--device",
        s(&img[3]),
        "--device",
        s(&img[1]),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("clean") && out.contains("member 1.1"), "{out}");
    let (code, _, err) = d.cli(&["check", "--device", s(&img[0]), "--device", s(&img[1])]);
    assert_ne!(code, 0);
    assert!(err.contains("device group 1") && err.contains("missing"), "{err}");
    d.spawn();
    assert_eq!(pool(&d, "g")["state"], "ONLINE", "{}", d.log());
    assert_eq!(std::fs::read(mnt.join("a")).unwrap(), a);
    assert_eq!(std::fs::read(mnt.join("b")).unwrap(), b);

    // Replace a member of the added group, named GROUP.INDEX; the rebuild completes.
    d.ok(&["pool", "replace", "g", "1.1", s(&img[4]), "--size", "128M", "--wait"]);
    let v = pool(&d, "g");
    let devices = v["devices"].as_array().unwrap();
    assert!(devices[3]["device"].as_str().unwrap().starts_with(s(&img[4])), "{v}");
    assert_eq!(v["groups"], serde_json::json!([[s(&img[2]), s(&img[4])]]), "{v}");
    assert_eq!(devices[3]["group"], 1, "{v}");
    assert!(devices.iter().all(|d| d["state"] == "ONLINE"), "{v}");
    let start = Instant::now();
    while pool(&d, "g").get("rebuild").is_some() {
        assert!(start.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(100));
    }
    let scrub = d.json(&["pool", "scrub", "g"]);
    assert_eq!(scrub["check"]["clean"], true, "{scrub}");
    assert_eq!(scrub["checksum_errors"], 0, "the rebuilt member holds every block: {scrub}");
    // The replaced member's image is no longer needed: the pool opens without it.
    std::fs::remove_file(&img[3]).unwrap();
    assert!(d.stop().success(), "{}", d.log());
    d.spawn();
    assert_eq!(pool(&d, "g")["state"], "ONLINE", "{}", d.log());
    assert_eq!(std::fs::read(mnt.join("b")).unwrap(), b);

    // Export and import: the scan finds the first group by its pool label and the added
    // group by the set guid that label names; the pool imports whole.
    d.ok(&["unmount", s(&mnt)]);
    d.ok(&["pool", "export", "g"]);
    let scan = d.ok(&["pool", "import", "--dir", s(&dir)]);
    assert!(
        scan.contains("pool g (guid") && scan.contains(&format!("and device group 1: {}, {}", s(&img[2]), s(&img[4]))),
        "{scan}"
    );
    d.ok(&["pool", "import", "g", "--dir", s(&dir)]);
    let v = pool(&d, "g");
    assert_eq!(v["state"], "ONLINE", "{v}");
    assert_eq!(v["groups"], serde_json::json!([[s(&img[2]), s(&img[4])]]), "{v}");
    d.ok(&["mount", "g/v", s(&mnt)]);
    assert_eq!(std::fs::read(mnt.join("a")).unwrap(), a);
    assert_eq!(std::fs::read(mnt.join("b")).unwrap(), b);
    d.ok(&["check", "g"]);

    // A group the state file lists but the pool's label does not name (a `pool add` cut
    // short between recording its devices and the label write): the pool opens without it,
    // the state file forgets it, and its devices are free again.
    let x: Vec<_> = (0..2).map(|i| dir.join(format!("x{i}.img"))).collect();
    d.ok(&["pool", "create", "x", "--layout", "mirror", "--device", s(&x[0]), "--device", s(&x[1]), "--size", "64M"]);
    d.ok(&["pool", "export", "x"]);
    d.ok(&["unmount", s(&mnt)]);
    assert!(d.stop().success(), "{}", d.log());
    let state_file = dir.join("data").join("strata.json");
    let mut state: Value = serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    let g = state["pools"].as_array_mut().unwrap().iter_mut().find(|p| p["name"] == "g").unwrap();
    g["groups"].as_array_mut().unwrap().push(serde_json::json!([s(&x[0]), s(&x[1])]));
    std::fs::write(&state_file, serde_json::to_string_pretty(&state).unwrap()).unwrap();
    d.spawn();
    let v = pool(&d, "g");
    assert_eq!(v["state"], "ONLINE", "{v}\n{}", d.log());
    assert_eq!(v["groups"], serde_json::json!([[s(&img[2]), s(&img[4])]]), "{v}");
    assert!(d.log().contains("does not name"), "{}", d.log());
    let state = std::fs::read_to_string(&state_file).unwrap();
    assert!(!state.contains(s(&x[0])), "{state}");
    // No longer "a device of a pool already": refused only because it holds pool x.
    d.fails(&["pool", "add", "g", "--device", s(&x[0]), "--device", s(&x[1])], "never formatted over");
    d.ok(&["pool", "import", "x", "--dir", s(&dir)]);
}

#[test]
fn a_parity2_pool_grows_by_a_parity2_group() {
    let dir = temp_dir("groups-parity-cli");
    let mut d = Daemon::start(&dir);
    let img: Vec<_> = (0..8).map(|i| dir.join(format!("p{i}.img"))).collect();
    let mut create = vec!["pool", "create", "p", "--layout", "parity2", "--size", "96M"];
    img[..4].iter().for_each(|i| create.extend(["--device", s(i)]));
    d.ok(&create);
    let mut add = vec!["pool", "add", "p", "--size", "96M"];
    img[4..7].iter().for_each(|i| add.extend(["--device", s(i)]));
    d.fails(&add, "4 to 16");
    add.extend(["--device", s(&img[7])]);
    d.ok(&add);
    let v = pool(&d, "p");
    let groups: Vec<u64> = v["devices"].as_array().unwrap().iter().map(|d| d["group"].as_u64().unwrap()).collect();
    assert_eq!(groups, [0, 0, 0, 0, 1, 1, 1, 1], "{v}");
    d.ok(&["volume", "create", "p/v"]);
    let mnt = dir.join("mnt");
    d.ok(&["mount", "p/v", s(&mnt)]);
    let a = data(3, 40 << 20);
    std::fs::write(mnt.join("a"), &a).unwrap();
    std::fs::File::open(mnt.join("a")).unwrap().sync_all().unwrap();
    assert!(d.stop().success(), "{}", d.log());
    // A data unit of the file on the added group's members (each unit is on one member).
    let on_second: usize = img[4..].iter().map(|i| blocks_of(i, &a)).sum();
    assert!(on_second > 1024, "{on_second} units of the file on the added group");
    // One member of each group gone: every byte is there.
    std::fs::rename(&img[1], dir.join("p1.away")).unwrap();
    std::fs::rename(&img[6], dir.join("p6.away")).unwrap();
    d.spawn();
    assert_eq!(pool(&d, "p")["state"], "DEGRADED", "{}", d.log());
    assert_eq!(std::fs::read(mnt.join("a")).unwrap(), a);
    d.ok(&["check", "p"]);
}
