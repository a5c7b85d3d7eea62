//! LUNs exported over NBD and iSCSI through the daemon and the CLI, reached with real
//! clients (nbdinfo, nbdcopy; iscsi-ls, iscsi-readcapacity16): data written over NBD reads
//! back over NBD and its size over iSCSI; a snapshot's export is read-only and holds the
//! snapshot's bytes; CHAP is enforced; exports survive a restart; every refusal (a plain
//! volume, NFS options, half a CHAP pair, deleting what is exported) says what to do; a pool
//! with block exports can be exported. Needs root, /dev/fuse, libnbd-bin and libiscsi-bin.

mod common;
use common::*;
use std::path::Path;
use std::process::Command;

fn tool(name: &str, package: &str, args: &[&str]) -> std::process::Output {
    Command::new(name)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{name} (Debian package {package}) could not run: {e}; install it"))
}

fn text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn random_file(path: &Path, len: usize, seed: u32) -> Vec<u8> {
    let data: Vec<u8> = (0..len as u32).map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 11) as u8).collect();
    std::fs::write(path, &data).unwrap();
    data
}

/// The I/O counters of `volume` through `protocol` (`strata iostat --json`).
fn io_of(d: &Daemon, volume: &str, protocol: &str) -> serde_json::Value {
    let s = d.json(&["iostat", "default"]);
    let found = s["volumes"].as_array().unwrap().iter().find(|v| v["volume"] == volume && v["protocol"] == protocol);
    found.cloned().unwrap_or_else(|| panic!("no {protocol} counters for {volume}: {s}"))
}

fn nbd_copy(from: &str, to: &str) {
    let o = tool("nbdcopy", "libnbd-bin", &[from, to]);
    assert!(o.status.success(), "nbdcopy {from} {to}: {}", text(&o));
}

#[test]
fn luns_over_nbd_and_iscsi_through_the_daemon() {
    let dir = temp_dir("block-exports");
    let (nbd, iscsi) = (free_port(), free_port());
    let (nbd_s, iscsi_s) = (nbd.to_string(), iscsi.to_string());
    let args = ["--nbd-port", &nbd_s, "--iscsi-port", &iscsi_s];
    let mut d = Daemon::start(&dir);
    d.stop();
    d.spawn_with(&args);
    d.ok(&["volume", "create", "default/lun0", "--lun", "32M", "--block-size", "8K"]);
    d.ok(&["volume", "create", "default/files"]);

    // Refusals.
    d.fails(&["export", "nbd", "default/files"], "is not a LUN");
    d.fails(&["export", "iscsi", "default/lun0", "--chap-user", "u"], "--chap-secret");
    d.fails(&["export", "iscsi", "default/lun0", "--chap-user", "u", "--chap-secret", "short"], "at least 12");
    d.fails(&["export", "nfs", "default/lun0@s0"], "NFS exports serve live volumes");

    // NBD: write a file in, read it back out.
    let e = d.json(&["export", "nbd", "default/lun0"]);
    let uri = e["uri"].as_str().unwrap().to_string();
    assert_eq!(uri, format!("nbd://127.0.0.1:{nbd}/default/lun0"), "{e}");
    assert_eq!(e["protocol"], "nbd");
    d.fails(&["export", "nbd", "default/lun0"], "is taken by export");
    let info = tool("nbdinfo", "libnbd-bin", &["--json", &uri]);
    let j: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap_or_else(|_| panic!("{}", text(&info)));
    assert_eq!(j["exports"][0]["export-size"], 32 << 20, "{j}");
    assert_eq!(j["exports"][0]["is_read_only"], false, "{j}");
    let input = dir.join("in.bin");
    let data = random_file(&input, 32 << 20, 1);
    nbd_copy(input.to_str().unwrap(), &uri);
    let output = dir.join("out.bin");
    nbd_copy(&uri, output.to_str().unwrap());
    assert!(std::fs::read(&output).unwrap() == data, "what NBD wrote does not read back");
    // The NBD counters moved: every byte written and read back is counted (strata iostat).
    let nbd_io = io_of(&d, "lun0", "nbd");
    assert!(nbd_io["write"]["bytes"].as_u64().unwrap() >= 32 << 20, "{nbd_io}");
    assert!(nbd_io["read"]["bytes"].as_u64().unwrap() >= 32 << 20, "{nbd_io}");
    assert!(nbd_io["write"]["ops"].as_u64().unwrap() >= 1 && nbd_io["write"]["errors"] == 0, "{nbd_io}");
    assert!(nbd_io["write"]["latency_us_p99"].as_u64().unwrap() > 0, "{nbd_io}");

    // A snapshot, exported read-only, keeps those bytes after the live LUN changes.
    d.ok(&["snapshot", "create", "default/lun0@s1"]);
    random_file(&input, 32 << 20, 2);
    nbd_copy(input.to_str().unwrap(), &uri);
    let s = d.json(&["export", "nbd", "default/lun0@s1"]);
    let suri = s["uri"].as_str().unwrap().to_string();
    assert_eq!(s["read_only"], true, "{s}");
    nbd_copy(&suri, output.to_str().unwrap());
    assert!(std::fs::read(&output).unwrap() == data, "the snapshot's export does not hold the snapshot");
    let o = tool("nbdcopy", "libnbd-bin", &[input.to_str().unwrap(), &suri]);
    assert!(!o.status.success(), "a write to a snapshot's export succeeded");
    d.fails(&["snapshot", "delete", "default/lun0@s1"], "is exported");
    d.fails(&["restore", "default/lun0@s1"], "is exported");
    d.fails(&["volume", "delete", "default/lun0", "--recursive"], "is exported");

    // iSCSI with CHAP: discovery and capacity with the secret, nothing without it.
    let e = d.json(&["export", "iscsi", "default/lun0", "--chap-user", "dba", "--chap-secret", "twelve-chars!"]);
    let iqn = e["path"].as_str().unwrap().to_string();
    assert_eq!(iqn, "iqn.2026-11.io.strata:default.lun0", "{e}");
    assert_eq!(e["chap"], true, "{e}");
    let url = format!("iscsi://dba%twelve-chars!@127.0.0.1:{iscsi}/{iqn}/0");
    let o = tool("iscsi-readcapacity16", "libiscsi-bin", &["-s", &url]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), (32u64 << 20).to_string(), "{}", text(&o));
    let iscsi_io = io_of(&d, "lun0", "iscsi");
    assert!(iscsi_io["other"]["ops"].as_u64().unwrap() >= 1, "READ CAPACITY is counted: {iscsi_io}");
    let o = tool("iscsi-readcapacity16", "libiscsi-bin", &["-s", &format!("iscsi://127.0.0.1:{iscsi}/{iqn}/0")]);
    assert!(!o.status.success(), "a login without CHAP succeeded: {}", text(&o));
    let list = d.ok(&["export", "list"]);
    assert!(list.contains("default/lun0 (iqn.2026-11.io.strata:default.lun0)"), "{list}");
    assert!(list.contains(&format!("nbd {nbd}")) && list.contains(&format!("iscsi {iscsi}")), "{list}");

    // A grown LUN: new connections see the new size.
    d.ok(&["volume", "set", "default/lun0", "--lun-size", "64M"]);
    let o = tool("nbdinfo", "libnbd-bin", &["--size", &uri]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), (64u64 << 20).to_string(), "{}", text(&o));

    // Exports come back after a restart.
    d.stop();
    d.spawn_with(&args);
    nbd_copy(&suri, output.to_str().unwrap());
    assert!(std::fs::read(&output).unwrap()[..32 << 20] == data[..], "the snapshot's export after a restart");
    let o = tool("iscsi-readcapacity16", "libiscsi-bin", &["-s", &url]);
    assert!(o.status.success(), "iSCSI after a restart: {}", text(&o));

    // Deleting the exports frees the LUN for delete; a pool with exports can be exported.
    let ids: Vec<String> =
        d.json(&["export", "list"]).as_array().unwrap().iter().map(|e| e["id"].to_string()).collect();
    assert_eq!(ids.len(), 3);
    d.ok(&["export", "delete", &ids[0]]);
    let o = tool("nbdinfo", "libnbd-bin", &["--size", &uri]);
    assert!(!o.status.success(), "a deleted export still serves: {}", text(&o));
    d.ok(&["snapshot", "create", "default/lun0@s2"]);
    d.ok(&["export", "nbd", "default/lun0@s2", "--name", "snap2"]);

    // A pool whose LUN is exported, with a client connected and idle, is refused without
    // --force and exported with it: the idle connection is closed and lets go of the pool.
    let img = dir.join("p2.img");
    d.ok(&["pool", "create", "p2", "--device", img.to_str().unwrap(), "--size", "256M"]);
    d.ok(&["volume", "create", "p2/l", "--lun", "16M"]);
    d.ok(&["export", "nbd", "p2/l"]);
    let idle_uri = format!("nbd://127.0.0.1:{nbd}/p2/l");
    let mut idle = Command::new("nbdsh")
        .env("PATH", format!("/usr/bin:{}", std::env::var("PATH").unwrap_or_default()))
        .args(["-u", &idle_uri, "-c", "import time; h.pread(512, 0); time.sleep(60)"])
        .spawn()
        .expect("nbdsh (Debian package python3-libnbd)");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(idle.try_wait().unwrap().is_none(), "nbdsh did not stay connected");
    d.fails(&["pool", "export", "p2"], "NBD export");
    let start = std::time::Instant::now();
    d.ok(&["pool", "export", "p2", "--force"]);
    assert!(start.elapsed() < std::time::Duration::from_secs(8), "the export waited for the idle client");
    let _ = idle.kill();
    let _ = idle.wait();
    let list = d.ok(&["export", "list"]);
    assert!(!list.contains("p2/l"), "{list}");
    d.stop();
}

/// Secure by default: an NBD listener off loopback without TLS client certificates does not
/// start; an iSCSI listener off loopback takes only exports with CHAP.
#[test]
fn block_listeners_off_loopback_need_authentication() {
    let dir = temp_dir("block-auth");
    let nbd = free_port().to_string();
    let o = Command::new(BIN)
        .args(["serve", "--config", "/dev/null", "--data-dir", dir.join("data").to_str().unwrap()])
        .args(["--default-pool-size", "256M", "--nbd-port", &nbd, "--nbd-bind", "0.0.0.0"])
        .env("STRATA_SOCKET", dir.join("s.sock"))
        .output()
        .unwrap();
    assert!(!o.status.success(), "an NBD listener on 0.0.0.0 without TLS started");
    assert!(text(&o).contains("without authenticating clients"), "{}", text(&o));

    let iscsi = free_port().to_string();
    let mut d = Daemon::start(&dir);
    d.stop();
    let o = Command::new(BIN)
        .args(["serve", "--config", "/dev/null", "--data-dir", dir.join("data").to_str().unwrap()])
        .args(["--iscsi-port", &iscsi, "--iscsi-bind", "0.0.0.0"])
        .env("STRATA_SOCKET", dir.join("s.sock"))
        .output()
        .unwrap();
    assert!(!o.status.success(), "an iSCSI listener on 0.0.0.0 with open discovery started");
    assert!(text(&o).contains("without CHAP"), "{}", text(&o));
    d.spawn_with(&[
        "--iscsi-port",
        &iscsi,
        "--iscsi-bind",
        "0.0.0.0",
        "--iscsi-discovery-user",
        "disc",
        "--iscsi-discovery-secret",
        "discovery-secret",
    ]);
    d.ok(&["volume", "create", "default/l", "--lun", "16M"]);
    d.fails(&["export", "iscsi", "default/l"], "without CHAP");
    let e = d.json(&["export", "iscsi", "default/l", "--chap-user", "u", "--chap-secret", "a-long-secret"]);
    assert_eq!(e["chap"], true, "{e}");
    assert!(e["uri"].as_str().unwrap().starts_with("iscsi://HOST:"), "{e}");
    let o = tool("iscsi-ls", "libiscsi-bin", &[&format!("iscsi://disc%discovery-secret@127.0.0.1:{iscsi}")]);
    assert!(text(&o).contains("iqn.2026-11.io.strata:default.l"), "discovery with CHAP: {}", text(&o));
    let o = tool("iscsi-ls", "libiscsi-bin", &[&format!("iscsi://127.0.0.1:{iscsi}")]);
    assert!(!text(&o).contains("iqn.2026-11.io.strata:default.l"), "discovery without CHAP: {}", text(&o));
    d.stop();
}
