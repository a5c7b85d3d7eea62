//! Pool lifecycle and the guard rails around it, end to end: the refusal to format over a
//! device holding data, export on one daemon and import on another, the host check that
//! keeps two daemons off one pool, a missing device at start, destroy, volume settings that
//! are all applied or none, and the audit history. Real daemons (`strata serve`), real FUSE
//! mounts, real image files. Needs root and /dev/fuse.

mod common;
use common::*;
use serde_json::Value;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Command;

const MIB: u64 = 1 << 20;

/// Run `args`; assert it fails with exactly exit status `code` and a message containing
/// every string of `want`. Returns the message.
fn refused(d: &Daemon, args: &[&str], code: i32, want: &[&str]) -> String {
    let (got, out, err) = d.cli(args);
    assert_eq!(got, code, "strata {args:?}: expected exit {code}, got {got}: {out}{err}");
    for w in want {
        assert!(err.contains(w), "strata {args:?}: expected {w:?} in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// The message of a failed command, as `--json` reports it.
fn error_message(d: &Daemon, args: &[&str]) -> String {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let (code, out, _) = d.cli(&a);
    assert_ne!(code, 0, "strata {a:?} should fail: {out}");
    let v: Value = serde_json::from_str(&out).expect("a JSON error");
    v["error"]["message"].as_str().expect("an error message").to_string()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 test paths")
}

/// Deterministic, incompressible bytes (xorshift64*).
fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A sparse file of `len` zero bytes.
fn zero_file(path: &Path, len: u64) {
    std::fs::File::create(path).unwrap().set_len(len).unwrap();
}

/// `len` bytes of `path` at `offset`.
fn bytes_at(path: &Path, offset: u64, len: u64) -> Vec<u8> {
    let mut f = std::fs::File::open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    let mut b = vec![0u8; len as usize];
    f.read_exact(&mut b).unwrap();
    b
}

/// The first and the last MiB of `path`.
fn ends(path: &Path) -> (Vec<u8>, Vec<u8>) {
    let size = std::fs::metadata(path).unwrap().len();
    (bytes_at(path, 0, MIB), bytes_at(path, size - MIB, MIB))
}

fn is_mounted(path: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap().lines().any(|l| l.split(' ').nth(4) == Some(s(path)))
}

/// The pool named `name` in `pool list --json`, if listed.
fn listed_pool(d: &Daemon, name: &str) -> Option<Value> {
    d.json(&["pool", "list"]).as_array().unwrap().iter().find(|p| p["name"] == name).cloned()
}

#[test]
fn pool_create_refuses_a_device_with_data_unless_forced() {
    let dir = temp_dir("lc-foreign");
    let d = Daemon::start(&dir);

    // An ext4 file system: refused, named, and not touched.
    let ext4 = dir.join("ext4.img");
    zero_file(&ext4, 64 * MIB);
    let mkfs = Command::new("mkfs.ext4").args(["-q", "-F", s(&ext4)]).status().expect("run mkfs.ext4");
    assert!(mkfs.success());
    let before = ends(&ext4);
    let err = refused(
        &d,
        &["pool", "create", "p", "--device", s(&ext4)],
        4,
        &["holds an ext4 file system (superblock magic at byte 1080)", s(&ext4), "--force"],
    );
    assert!(ends(&ext4) == before, "a refused create changed the image: {err}");
    assert!(listed_pool(&d, "p").is_none(), "no pool after a refusal");

    // Forced: formatted over, and served.
    d.ok(&["pool", "create", "p", "--device", s(&ext4), "--force"]);
    let p = d.json(&["pool", "status", "p"]);
    assert_eq!(p["state"], "ONLINE", "{p}");
    assert!(p["size_bytes"].as_u64().unwrap() <= 64 * MIB, "{p}");
    assert_ne!(ends(&ext4).0, before.0, "the forced create wrote its labels");
    d.ok(&["volume", "create", "p/v"]);
    // A device holding a Strata pool is never formatted over, even with --force.
    refused(&d, &["pool", "create", "q", "--device", s(&ext4), "--force"], 4, &["already holds a Strata pool"]);

    // One non-zero byte in the last MiB: refused, naming its offset.
    let tail = dir.join("tail.img");
    zero_file(&tail, 64 * MIB);
    let offset = 64 * MIB - 4096 + 17;
    {
        let mut f = std::fs::OpenOptions::new().write(true).open(&tail).unwrap();
        f.seek(SeekFrom::Start(offset)).unwrap();
        f.write_all(&[0x5a]).unwrap();
    }
    refused(&d, &["pool", "create", "t", "--device", s(&tail)], 4, &[&format!("holds non-zero data at byte {offset}")]);
    assert_eq!(bytes_at(&tail, offset, 1), [0x5a]);

    // An existing file of zeros holds nothing: no --force needed.
    let zeros = dir.join("zeros.img");
    zero_file(&zeros, 64 * MIB);
    d.ok(&["pool", "create", "z", "--device", s(&zeros)]);
    assert_eq!(d.json(&["pool", "status", "z"])["state"], "ONLINE");
    let names: Vec<Value> = d.json(&["pool", "list"]).as_array().unwrap().iter().map(|p| p["name"].clone()).collect();
    assert_eq!(names, ["default", "p", "z"]);
    assert!(!d.log().contains("ERROR"), "{}", d.log());
}

/// What a volume holds: relative path → bytes.
type Files = Vec<(&'static str, Vec<u8>)>;

fn write_files(root: &Path, files: &Files) {
    for (name, data) in files {
        let p = root.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, data).unwrap();
    }
}

/// Every file of `root` (outside .snapshot) is one of `files`, with the same bytes.
fn assert_files(root: &Path, files: &Files) {
    for (name, data) in files {
        let got = std::fs::read(root.join(name)).unwrap_or_else(|e| panic!("{}/{name}: {e}", root.display()));
        assert!(got == *data, "{}/{name}: {} bytes differ from the {} written", root.display(), got.len(), data.len());
    }
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                found.push(e.path().strip_prefix(root).unwrap().to_str().unwrap().to_string());
            }
        }
    }
    found.sort();
    let mut want: Vec<String> = files.iter().map(|(n, _)| n.to_string()).collect();
    want.sort();
    assert_eq!(found, want, "files of {}", root.display());
}

#[test]
fn export_on_one_daemon_and_import_on_another_keeps_everything() {
    let root = temp_dir("lc-move");
    let shared = root.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let img = shared.join("tank.img");
    let a_dir = root.join("a");
    let b_dir = root.join("b");
    std::fs::create_dir_all(&a_dir).unwrap();
    std::fs::create_dir_all(&b_dir).unwrap();
    let a = Daemon::start(&a_dir);
    let b = Daemon::start(&b_dir);

    a.ok(&["pool", "create", "tank", "--device", s(&img), "--size", "256M"]);
    a.ok(&["volume", "create", "tank/db", "--size", "1G"]);
    let mnt = a_dir.join("mnt");
    a.ok(&["mount", "tank/db", s(&mnt)]);
    let at_s1: Files = vec![
        ("base/big", random_bytes(1, 5 << 20)),
        ("small", random_bytes(2, 3000)),
        ("dir/sub/mid", random_bytes(3, 200_000)),
    ];
    write_files(&mnt, &at_s1);
    a.ok(&["snapshot", "create", "tank/db@s1"]);
    let mut at_s2 = at_s1.clone();
    at_s2[1].1 = random_bytes(4, 7000);
    let mut big = at_s2[0].1.clone();
    big[1 << 20..(1 << 20) + 65536].copy_from_slice(&random_bytes(5, 65536));
    at_s2[0].1 = big;
    write_files(&mnt, &at_s2);
    a.ok(&["snapshot", "create", "tank/db@s2"]);
    // After s2: a file only the live volume has.
    let mut live = at_s2.clone();
    live.push(("after", random_bytes(6, 12345)));
    write_files(&mnt, &live);
    a.ok(&["clone", "create", "tank/db@s1", "tank/c"]);
    // Not while a volume is mounted (unless --force).
    refused(&a, &["pool", "export", "tank"], 4, &[&format!("pool tank is in use: tank/db mounted at {}", s(&mnt))]);
    a.ok(&["unmount", s(&mnt)]);
    let guid = a.json(&["pool", "status", "tank"])["guid"].clone();
    let volumes = a.json(&["volume", "list", "tank"]);
    let snapshots = a.json(&["snapshot", "list", "tank"]);
    assert_eq!(volumes.as_array().unwrap().len(), 2, "{volumes}");
    assert_eq!(snapshots.as_array().unwrap().len(), 2, "{snapshots}");
    assert!(snapshots[0]["txg"].as_u64().unwrap() < snapshots[1]["txg"].as_u64().unwrap(), "{snapshots}");
    assert_eq!(snapshots[0]["clones"], serde_json::json!(["c"]), "{snapshots}");

    let done = a.json(&["pool", "export", "tank"]);
    assert_eq!(done["target"], "tank", "{done}");
    assert!(listed_pool(&a, "tank").is_none(), "A still lists tank after exporting it");
    refused(&a, &["volume", "list", "tank"], 3, &["pool tank"]);

    // B finds it, exported by another host, importable.
    let found = b.json(&["pool", "import", "--dir", s(&shared)]);
    let found = found.as_array().unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    let c = &found[0];
    assert_eq!(c["name"], "tank");
    assert_eq!(c["guid"], guid);
    assert_eq!(c["device"], s(&img));
    assert_eq!(c["pool_state"], "exported", "{c}");
    assert_eq!(c["this_host"], false, "{c}");
    assert_eq!(c["imported"], false, "{c}");
    assert_eq!(c["refusal"], Value::Null, "{c}");
    let human = b.ok(&["pool", "import", "--dir", s(&shared)]);
    assert!(human.contains("pool tank") && human.contains("exported by host"), "{human}");

    let imported = b.json(&["pool", "import", "tank", "--dir", s(&shared)]);
    assert_eq!(imported["state"], "ONLINE", "{imported}");
    assert_eq!(imported["guid"], guid, "{imported}");
    assert_eq!(listed_pool(&b, "tank").expect("B lists tank")["state"], "ONLINE");
    // Every field of every volume and snapshot is what A had (none is mounted on either).
    assert_eq!(b.json(&["volume", "list", "tank"]), volumes);
    assert_eq!(b.json(&["snapshot", "list", "tank"]), snapshots);

    // Every byte, live and in the snapshots, and in the clone.
    let bmnt = b_dir.join("mnt");
    let cmnt = b_dir.join("clone");
    b.ok(&["mount", "tank/db", s(&bmnt)]);
    b.ok(&["mount", "tank/c", s(&cmnt)]);
    assert_files(&bmnt, &live);
    assert_files(&bmnt.join(".snapshot/s1"), &at_s1);
    assert_files(&bmnt.join(".snapshot/s2"), &at_s2);
    assert_files(&cmnt, &at_s1);
    b.ok(&["unmount", s(&cmnt)]);
    b.ok(&["unmount", s(&bmnt)]);
    let check = b.json(&["check", "tank"]);
    assert_eq!(check["clean"], true, "{check}");
    assert_eq!(check["volumes"], 2, "{check}");
    assert_eq!(check["snapshots"], 2, "{check}");
    assert!(!a.log().contains("ERROR"), "{}", a.log());
    assert!(!b.log().contains("ERROR"), "{}", b.log());
}

#[test]
fn import_refuses_a_pool_another_daemon_has_open() {
    let root = temp_dir("lc-host");
    let shared = root.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let img = shared.join("tank.img");
    let a_dir = root.join("a");
    let b_dir = root.join("b");
    std::fs::create_dir_all(&a_dir).unwrap();
    std::fs::create_dir_all(&b_dir).unwrap();
    let mut a = Daemon::start(&a_dir);
    let b = Daemon::start(&b_dir);
    a.ok(&["pool", "create", "tank", "--device", s(&img), "--size", "256M"]);
    a.ok(&["volume", "create", "tank/v"]);
    let a_host = std::fs::read_to_string(a_dir.join("data/host-id")).unwrap().trim().to_string();

    // A has it open: B's scan says so, and an import without --force is refused.
    let found = b.json(&["pool", "import", "--dir", s(&shared)]);
    let c = &found[0];
    assert_eq!(found.as_array().unwrap().len(), 1, "{found}");
    assert_eq!(c["pool_state"], "active", "{c}");
    assert_eq!(c["host_id"], a_host.as_str(), "{c}");
    assert_eq!(c["this_host"], false, "{c}");
    let why = c["refusal"].as_str().unwrap_or_else(|| panic!("no refusal: {c}"));
    assert!(why.contains(&format!("host {a_host} has it open")) && why.contains("--force"), "{why}");
    assert!(b.ok(&["pool", "import", "--dir", s(&shared)]).contains("not importable"));
    refused(
        &b,
        &["pool", "import", "tank", "--dir", s(&shared)],
        4,
        &[&format!("host {a_host} has it open"), "--force"],
    );
    assert!(listed_pool(&b, "tank").is_none());
    // A itself: it is already imported there.
    refused(&a, &["pool", "import", "tank", "--dir", s(&shared)], 4, &["already imported here as tank"]);
    // Nothing of that name anywhere.
    refused(&b, &["pool", "import", "nosuch", "--dir", s(&shared)], 3, &["no pool nosuch found there"]);

    // A dies without exporting (a dead host): only --force imports it.
    a.kill9();
    refused(&b, &["pool", "import", "tank", "--dir", s(&shared)], 4, &["has it open"]);
    let p = b.json(&["pool", "import", "tank", "--dir", s(&shared), "--force"]);
    assert_eq!(p["state"], "ONLINE", "{p}");
    let vols = b.json(&["volume", "list", "tank"]);
    assert_eq!(vols.as_array().unwrap().len(), 1, "{vols}");
    assert_eq!(vols[0]["name"], "v");
    // Imported once is enough.
    refused(&b, &["pool", "import", "tank", "--dir", s(&shared)], 4, &["already imported here as tank"]);
    refused(&b, &["pool", "import", "tank", "--dir", s(&shared), "--force"], 4, &["already imported here as tank"]);
    // Now B has it: the scan says B's host, and no refusal but "imported".
    let c = &b.json(&["pool", "import", "--device", s(&img)])[0];
    assert_eq!((c["this_host"].clone(), c["imported"].clone()), (Value::Bool(true), Value::Bool(true)), "{c}");
    assert_eq!(b.json(&["check", "tank"])["clean"], true);
    assert!(b.log().contains("importing despite"), "the forced import is logged: {}", b.log());
}

#[test]
fn a_missing_device_leaves_its_pool_unavailable_and_the_rest_served() {
    let dir = temp_dir("lc-missing");
    let mut d = Daemon::start(&dir);
    let img = dir.join("extra.img");
    let away = dir.join("extra.img.away");
    d.ok(&["pool", "create", "extra", "--device", s(&img), "--size", "256M"]);
    d.ok(&["volume", "create", "extra/v"]);
    let mnt = dir.join("mnt");
    d.ok(&["mount", "extra/v", s(&mnt)]);
    let data = random_bytes(7, 300_000);
    std::fs::write(mnt.join("f"), &data).unwrap();
    assert!(d.stop().success(), "{}", d.log());
    std::fs::rename(&img, &away).unwrap();

    d.spawn();
    let extra = listed_pool(&d, "extra").expect("extra still listed");
    assert_eq!(extra["state"], "UNAVAILABLE", "{extra}");
    let reason = extra["reason"].as_str().unwrap_or_else(|| panic!("no reason: {extra}"));
    assert!(reason.contains(s(&img)), "the reason names the missing file: {reason}");
    assert_eq!(extra["device"], s(&img));
    assert!(extra.get("size_bytes").is_none(), "no figures for a pool that is not open: {extra}");
    let human = d.ok(&["pool", "list"]);
    assert!(human.contains("UNAVAILABLE") && human.contains(reason), "{human}");
    refused(&d, &["volume", "list", "extra"], 1, &["pool extra is UNAVAILABLE", s(&img)]);
    refused(&d, &["volume", "create", "extra/w"], 1, &["UNAVAILABLE"]);
    // Its mount waits for it; nothing is mounted there.
    let mounts = d.json(&["mount"]);
    assert_eq!(mounts, serde_json::json!([{"volume": "extra/v", "path": s(&mnt), "active": false}]));
    assert!(!is_mounted(&mnt));
    // An UNAVAILABLE pool cannot be destroyed (its device cannot be erased).
    refused(&d, &["pool", "destroy", "extra", "--yes"], 4, &["UNAVAILABLE"]);

    // The default pool is served as ever.
    assert_eq!(listed_pool(&d, "default").unwrap()["state"], "ONLINE");
    d.ok(&["volume", "create", "default/ok"]);
    let dmnt = dir.join("dmnt");
    d.ok(&["mount", "default/ok", s(&dmnt)]);
    std::fs::write(dmnt.join("g"), b"served").unwrap();
    assert_eq!(std::fs::read(dmnt.join("g")).unwrap(), b"served");
    d.ok(&["unmount", s(&dmnt)]);

    // Export forgets it, with its mount.
    let done = d.json(&["pool", "export", "extra"]);
    assert_eq!(done["also"], serde_json::json!(["forgotten: it was UNAVAILABLE"]), "{done}");
    assert!(listed_pool(&d, "extra").is_none());
    assert_eq!(d.json(&["mount"]), serde_json::json!([]));
    refused(&d, &["volume", "list", "extra"], 3, &["pool extra"]);

    // The device back: imported with its volume and data.
    std::fs::rename(&away, &img).unwrap();
    let p = d.json(&["pool", "import", "extra", "--device", s(&img)]);
    assert_eq!(p["state"], "ONLINE", "{p}");
    let vols = d.json(&["volume", "list", "extra"]);
    assert_eq!(vols.as_array().unwrap().len(), 1, "{vols}");
    assert_eq!(vols[0]["name"], "v");
    d.ok(&["mount", "extra/v", s(&mnt)]);
    assert!(std::fs::read(mnt.join("f")).unwrap() == data);
    d.ok(&["unmount", s(&mnt)]);
    // And remembered: served again after a restart.
    assert!(d.stop().success());
    d.spawn();
    assert_eq!(listed_pool(&d, "extra").unwrap()["state"], "ONLINE");
    assert_eq!(d.json(&["check", "extra"])["clean"], true);
}

#[test]
fn destroy_needs_confirmation_and_refuses_a_pool_in_use() {
    let dir = temp_dir("lc-destroy");
    let d = Daemon::start(&dir);
    let img = dir.join("p.img");
    d.ok(&["pool", "create", "p", "--device", s(&img), "--size", "256M"]);
    d.ok(&["volume", "create", "p/v"]);
    let mnt = dir.join("mnt");
    d.ok(&["mount", "p/v", s(&mnt)]);
    std::fs::write(mnt.join("f"), random_bytes(8, 1 << 20)).unwrap();
    d.ok(&["snapshot", "create", "p/v@s"]);

    refused(&d, &["pool", "destroy", "p"], 2, &["destroying pool p erases every volume", "--yes"]);
    refused(
        &d,
        &["pool", "destroy", "p", "--yes"],
        4,
        &[&format!("pool p is in use: p/v mounted at {}", s(&mnt)), "--force"],
    );
    // Refusals changed nothing.
    assert_eq!(listed_pool(&d, "p").unwrap()["state"], "ONLINE");
    assert!(is_mounted(&mnt));
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), random_bytes(8, 1 << 20));

    let done = d.json(&["pool", "destroy", "p", "--yes", "--force"]);
    assert_eq!(done["target"], "p", "{done}");
    assert_eq!(
        done["also"],
        serde_json::json!([format!("p/v mounted at {}", s(&mnt)), format!("erased {}", s(&img))]),
        "{done}"
    );
    assert!(listed_pool(&d, "p").is_none());
    assert!(!is_mounted(&mnt), "the mount went with the pool");
    assert_eq!(d.json(&["mount"]), serde_json::json!([]));
    let (head, tail) = ends(&img);
    assert!(head.iter().all(|&b| b == 0), "first MiB not erased");
    assert!(tail.iter().all(|&b| b == 0), "last MiB not erased");
    refused(&d, &["pool", "import", "p", "--device", s(&img)], 3, &["no Strata pool"]);
    refused(&d, &["pool", "import", "--device", s(&img)], 3, &["no Strata pool"]);

    // The erased image takes a new pool without --force, empty.
    d.ok(&["pool", "create", "p2", "--device", s(&img)]);
    assert_eq!(d.json(&["volume", "list", "p2"]), serde_json::json!([]));
    assert_eq!(d.json(&["check", "p2"])["clean"], true);
    // A name that was never a pool.
    refused(&d, &["pool", "destroy", "nosuch", "--yes"], 3, &["pool nosuch"]);
}

#[test]
fn volume_guard_rails() {
    let dir = temp_dir("lc-guard");
    let mut d = Daemon::start(&dir);
    d.ok(&["volume", "create", "default/v", "--size", "1G"]);
    let mnt = dir.join("mnt");
    d.ok(&["mount", "default/v", s(&mnt)]);
    let mut f = std::fs::File::create(mnt.join("data")).unwrap();
    f.write_all(&random_bytes(9, 4 << 20)).unwrap();
    f.sync_all().unwrap();
    drop(f);
    // Unmounting commits: used_bytes counts the 4 MiB.
    d.ok(&["unmount", s(&mnt)]);
    let v = d.json(&["volume", "show", "default/v"]);
    let used = v["used_bytes"].as_u64().unwrap();
    assert!(used >= 4 << 20, "{v}");
    assert_eq!(v["size_bytes"], 1u64 << 30);

    // A size limit below what the volume uses: refused, with both numbers.
    refused(
        &d,
        &["volume", "set", "default/v", "--size", "1M"],
        4,
        &["size limit of 1048576 bytes is below what default/v uses now", &format!("({used} bytes)")],
    );
    refused(
        &d,
        &["volume", "set", "default/v", "--size", &used.saturating_sub(4096).to_string()],
        4,
        &[&format!("({used} bytes)")],
    );
    assert_eq!(d.json(&["volume", "show", "default/v"]), v, "nothing changed");
    // Exactly the used bytes is allowed (and put back).
    d.ok(&["volume", "set", "default/v", "--size", &used.to_string()]);
    assert_eq!(d.json(&["volume", "show", "default/v"])["size_bytes"], used);
    d.ok(&["volume", "set", "default/v", "--size", "1G"]);

    // All or nothing: the size limit is applied first, then the reservation is refused
    // (more than the 256 MiB pool): the size limit is put back.
    refused(&d, &["volume", "set", "default/v", "--size", "2G", "--reserve", "1G"], 1, &["cannot reserve"]);
    assert_eq!(d.json(&["volume", "show", "default/v"]), v, "a refused PATCH changed the volume");
    // Dedup is applied before the reservation: put back too.
    refused(&d, &["volume", "set", "default/v", "--dedup", "on", "--reserve", "1G"], 1, &["cannot reserve"]);
    assert_eq!(d.json(&["volume", "show", "default/v"]), v, "a refused PATCH changed the volume");
    // A bad value among good ones: nothing is applied.
    refused(&d, &["volume", "set", "default/v", "--compression", "gzip", "--size", "3G"], 2, &["gzip"]);
    assert_eq!(d.json(&["volume", "show", "default/v"]), v, "a refused PATCH changed the volume");
    refused(&d, &["volume", "set", "default/v", "--size", "3G", "--sync", "sometimes"], 2, &["sometimes"]);
    assert_eq!(d.json(&["volume", "show", "default/v"]), v, "a refused PATCH changed the volume");
    // And after a restart, still as it was.
    assert!(d.stop().success(), "{}", d.log());
    d.spawn();
    assert_eq!(d.json(&["volume", "show", "default/v"]), v, "after a restart");
    let check = d.json(&["check", "default"]);
    assert_eq!(check["clean"], true, "{check}");
}

#[test]
fn history_records_a_scripted_session() {
    let dir = temp_dir("lc-history");
    let mut d = Daemon::start(&dir);
    let img = dir.join("hist.img");
    d.ok(&["pool", "create", "hist", "--device", s(&img), "--size", "256M"]);
    d.ok(&["pool", "list"]);
    d.ok(&["volume", "create", "hist/v"]);
    d.ok(&["volume", "list"]);
    d.ok(&["snapshot", "create", "hist/v@s1"]);
    d.ok(&["snapshot", "list", "hist"]);
    d.ok(&["volume", "show", "hist/v"]);
    let refusal = error_message(&d, &["volume", "delete", "hist/v"]);
    assert!(refusal.contains("hist/v@s1"), "{refusal}");
    let (code, _, err) = d.cli(&["volume", "delete", "hist/v"]);
    assert_eq!(code, 4);
    assert!(err.contains("--recursive"), "the refusal says what to do: {err}");
    // Refused by the CLI itself: never reaches the daemon.
    refused(&d, &["pool", "destroy", "hist"], 2, &["--yes"]);
    d.ok(&["volume", "delete", "hist/v", "--recursive"]);
    d.ok(&["volume", "create", "default/other"]);
    d.ok(&["pool", "import", "--device", s(&img)]); // a scan: a GET

    let h = d.json(&["history"]);
    let rows: Vec<(String, String, String, u64, String)> = h
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["caller"], "uid 0 (root)", "{e}");
            assert!(e["time_ns"].as_u64().unwrap() > 0, "{e}");
            (
                e["operation"].as_str().unwrap().into(),
                e["target"].as_str().unwrap().into(),
                e["request"].as_str().unwrap_or("").into(),
                e["status"].as_u64().unwrap(),
                e["result"].as_str().unwrap().into(),
            )
        })
        .collect();
    let ops: Vec<(&str, &str, u64, &str)> =
        rows.iter().map(|(o, t, _, st, r)| (o.as_str(), t.as_str(), *st, r.as_str())).collect();
    assert_eq!(
        ops,
        [
            ("POST /v1/pools", "/v1/pools", 201, "ok"),
            ("POST /v1/pools/{pool}/volumes", "/v1/pools/hist/volumes", 201, "ok"),
            ("POST /v1/pools/{pool}/volumes/{volume}/snapshots", "/v1/pools/hist/volumes/v/snapshots", 201, "ok"),
            (
                "DELETE /v1/pools/{pool}/volumes/{volume}",
                "/v1/pools/hist/volumes/v?recursive=false",
                409,
                refusal.as_str()
            ),
            (
                "DELETE /v1/pools/{pool}/volumes/{volume}",
                "/v1/pools/hist/volumes/v?recursive=false",
                409,
                refusal.as_str()
            ),
            ("DELETE /v1/pools/{pool}/volumes/{volume}", "/v1/pools/hist/volumes/v?recursive=true", 200, "ok"),
            ("POST /v1/pools/{pool}/volumes", "/v1/pools/default/volumes", 201, "ok"),
        ],
        "{h:#}"
    );
    // The request bodies as sent.
    assert!(rows[0].2.contains("\"name\":\"hist\"") && rows[0].2.contains(s(&img)), "{}", rows[0].2);
    assert!(rows[1].2.contains("\"name\":\"v\""), "{}", rows[1].2);
    assert!(rows[2].2.contains("\"name\":\"s1\""), "{}", rows[2].2);
    assert!(rows[6].2.contains("\"name\":\"other\""), "{}", rows[6].2);
    // The human form shows the same.
    let human = d.ok(&["history"]);
    assert!(
        human.contains(&format!(
            "uid 0 (root) [DELETE /v1/pools/{{pool}}/volumes/{{volume}}] /v1/pools/hist/volumes/v?recursive=false -> 409 {refusal}"
        )),
        "{human}"
    );

    // By pool: only that pool's entries (its creation included).
    let of = |pool: &str| -> Vec<Value> { d.json(&["history", pool]).as_array().unwrap().clone() };
    let all = h.as_array().unwrap().clone();
    assert_eq!(of("hist"), all[..6].to_vec());
    assert_eq!(of("default"), all[6..].to_vec());
    assert_eq!(of("nosuch"), Vec::<Value>::new());
    assert_eq!(d.json(&["history", "--limit", "2"]), serde_json::json!(all[5..].to_vec()));

    // Reading it recorded nothing; a crash keeps every entry.
    assert_eq!(d.json(&["history"]), h);
    d.kill9();
    d.spawn();
    assert_eq!(d.json(&["history"]), h, "history after kill -9 and restart");
    d.ok(&["volume", "create", "hist/w"]);
    let after = d.json(&["history", "hist"]);
    assert_eq!(after.as_array().unwrap().len(), 7, "{after}");
    assert_eq!(after[6]["target"], "/v1/pools/hist/volumes");
}

/// `pool sync` commits what was written and waits (as `zpool sync`): with background
/// commits five minutes apart, an fsync'd write leaves the txg where it was (it is in the
/// intent log), the sync commits it, a second sync has nothing to commit, and after a
/// power failure the file is there without the log replaying anything. An unknown pool is
/// refused, naming where to look.
#[test]
fn pool_sync_commits_what_was_written() {
    let dir = temp_dir("lc-sync");
    let mut d = Daemon::start(&dir);
    d.stop();
    d.spawn_with(&["--txg-interval", "300"]);
    d.ok(&["volume", "create", "default/v"]);
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    d.ok(&["mount", "default/v", s(&mnt)]);
    let txg = |d: &Daemon| d.json(&["pool", "status", "default"])["txg"].as_u64().unwrap();

    let t0 = txg(&d);
    let data = random_bytes(7, 256 * 1024);
    let mut f = std::fs::File::create(mnt.join("f")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    assert_eq!(txg(&d), t0, "an fsync'd write goes to the intent log, not a commit");
    let synced = d.json(&["pool", "sync", "default"]);
    let t1 = synced["txg"].as_u64().unwrap();
    assert!(t1 > t0, "the sync committed: {synced} after txg {t0}");
    assert_eq!(synced["pool"], "default", "{synced}");
    assert_eq!(txg(&d), t1);
    assert_eq!(d.json(&["pool", "sync", "default"])["txg"].as_u64().unwrap(), t1, "nothing dirty: no commit");
    assert!(d.ok(&["pool", "sync", "default"]).contains(&format!("pool default: committed, txg {t1} durable")));
    refused(&d, &["pool", "sync", "nosuch"], 3, &["pool nosuch", "strata pool list"]);

    // A power failure: the committed file needs no replay.
    drop(f);
    d.kill9();
    let _ = Command::new("umount").arg("-l").arg(&mnt).status();
    d.spawn();
    let notes = d.json(&["pool", "status", "default"])["open_notes"].to_string();
    assert!(!notes.contains("replayed"), "nothing was left for the intent log to replay: {notes}");
    // The daemon mounts it again at its start.
    assert!(std::fs::read(mnt.join("f")).unwrap() == data, "the synced file after a power failure");
    d.ok(&["unmount", s(&mnt)]);
    d.stop();
}
