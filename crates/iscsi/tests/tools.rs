//! The target through libiscsi's own tools (Debian libiscsi-bin) and a small libiscsi
//! client built from tests/roundtrip.c (libiscsi-dev): SendTargets discovery with and
//! without CHAP, normal-session CHAP (one-way and mutual, wrong secrets refused), the
//! initiator and network allow lists, the VPD pages as iscsi-inq decodes them, a data
//! round trip of random bytes (with and without header digests), target removal while
//! serving, and the refusal to listen beyond loopback without authentication.

mod common;

use common::{text, tool, IQN, MIB};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use strata_iscsi::{Chap, Cidr, IscsiServer, ServerConfig, TargetConfig, TargetTable};

/// Build tests/roundtrip.c once per test process. Under nextest every test is its own
/// process: each builds under its own name and renames into place (atomic), so none runs
/// a half-written binary.
fn roundtrip_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let out = dir.join("iscsi-roundtrip");
        let tmp = dir.join(format!("iscsi-roundtrip.{}", std::process::id()));
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/roundtrip.c");
        let o = match Command::new("cc").args(["-O1", "-o"]).arg(&tmp).arg(src).arg("-liscsi").output() {
            Ok(o) => o,
            Err(e) => panic!("cannot run cc ({e}): install the Debian package build-essential"),
        };
        assert!(o.status.success(), "building {src} failed (install the Debian package libiscsi-dev): {}", text(&o));
        std::fs::rename(&tmp, &out).expect("move the client into place");
        out
    })
    .clone()
}

fn roundtrip(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(roundtrip_bin());
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run the roundtrip client")
}

fn random_file(name: &str, len: usize, seed: u64) -> PathBuf {
    let mut x = seed | 1;
    let data: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&p, data).expect("write random file");
    p
}

fn chap(user: &str, secret: &str) -> Chap {
    Chap { user: user.into(), secret: secret.as_bytes().to_vec(), mutual: None }
}

#[test]
fn discovery_without_chap_lists_targets_and_luns() {
    let f = common::start(2, 16 * MIB, |_, _| {});
    let o = tool("iscsi-ls", "libiscsi-bin", &["-s", &format!("iscsi://127.0.0.1:{}", f.port)]);
    let t = text(&o);
    assert!(o.status.success(), "iscsi-ls failed: {t}");
    assert!(t.contains(&format!("Target:{IQN} Portal:127.0.0.1:{},1", f.port)), "{t}");
    assert!(t.contains("Lun:0") && t.contains("Lun:1"), "both LUNs listed: {t}");
    // A removed target disappears from discovery and refuses logins.
    assert!(f.targets.remove(IQN));
    let o = tool("iscsi-ls", "libiscsi-bin", &[&format!("iscsi://127.0.0.1:{}", f.port)]);
    assert!(!text(&o).contains(IQN), "removed target still listed: {}", text(&o));
    f.server.expect("server").shutdown();
}

#[test]
fn discovery_with_chap_refuses_a_wrong_secret() {
    let f = common::start(1, 16 * MIB, |t, s| {
        s.discovery_chap = Some(chap("disc", "discovery-secret"));
        t.chap = Some(chap("user1", "target-secret-1"));
    });
    let url = |u: &str, p: &str| format!("iscsi://{u}%{p}@127.0.0.1:{}", f.port);
    let o = tool("iscsi-ls", "libiscsi-bin", &[&url("disc", "discovery-secret")]);
    assert!(o.status.success() && text(&o).contains(IQN), "right secret: {}", text(&o));
    let o = tool("iscsi-ls", "libiscsi-bin", &[&url("disc", "wrong-secret")]);
    assert!(!o.status.success() && !text(&o).contains(IQN), "wrong secret accepted: {}", text(&o));
    let o = tool("iscsi-ls", "libiscsi-bin", &[&format!("iscsi://127.0.0.1:{}", f.port)]);
    assert!(!text(&o).contains(IQN), "no secret accepted: {}", text(&o));
    f.server.expect("server").shutdown();
}

#[test]
fn session_chap_one_way_and_mutual() {
    let f = common::start(1, 16 * MIB, |t, _| {
        t.chap = Some(Chap {
            user: "user1".into(),
            secret: b"target-secret-1".to_vec(),
            mutual: Some(("tgt".into(), b"mutual-secret-22".to_vec())),
        });
    });
    let file = random_file("chap.bin", 64 << 10, 3);
    let f_s = file.to_str().expect("path");
    let url = |p: &str| format!("iscsi://user1%{p}@127.0.0.1:{}/{IQN}/0", f.port);
    let ok = roundtrip(&["write", &url("target-secret-1"), f_s], &[]);
    assert!(ok.status.success(), "one-way CHAP: {}", text(&ok));
    let bad = roundtrip(&["write", &url("target-secret-2"), f_s], &[]);
    assert!(!bad.status.success(), "a wrong secret logged in");
    let none = roundtrip(&["write", &format!("iscsi://127.0.0.1:{}/{IQN}/0", f.port), f_s], &[]);
    assert!(!none.status.success(), "no CHAP logged in to a CHAP target");
    let mutual = roundtrip(
        &["write", &url("target-secret-1"), f_s],
        &[("RT_TARGET_USER", "tgt"), ("RT_TARGET_PASSWORD", "mutual-secret-22")],
    );
    assert!(mutual.status.success(), "mutual CHAP: {}", text(&mutual));
    let mutual_bad = roundtrip(
        &["write", &url("target-secret-1"), f_s],
        &[("RT_TARGET_USER", "tgt"), ("RT_TARGET_PASSWORD", "not-the-secret")],
    );
    assert!(!mutual_bad.status.success(), "the initiator accepted a target that does not know the mutual secret");
    f.server.expect("server").shutdown();
}

#[test]
fn allow_lists_refuse_other_initiators_and_networks() {
    let f = common::start(1, 16 * MIB, |t, _| t.initiators = vec!["iqn.2026-01.org.example:someone-else".into()]);
    let file = random_file("acl.bin", 4096, 5);
    let url = format!("iscsi://127.0.0.1:{}/{IQN}/0", f.port);
    let o = roundtrip(&["write", &url, file.to_str().expect("path")], &[]);
    assert!(!o.status.success(), "an initiator outside the allow list logged in");
    f.server.expect("server").shutdown();
    let f = common::start(1, 16 * MIB, |t, _| t.networks = vec![Cidr::parse("10.9.0.0/16").expect("cidr")]);
    let o = roundtrip(&["write", &format!("iscsi://127.0.0.1:{}/{IQN}/0", f.port), file.to_str().expect("path")], &[]);
    assert!(!o.status.success(), "a client outside the target's networks logged in");
    f.server.expect("server").shutdown();
}

#[test]
fn vpd_pages_as_iscsi_inq_decodes_them() {
    let f = common::start(1, 16 * MIB, |_, _| {});
    let url = format!("iscsi://127.0.0.1:{}/{IQN}/0", f.port);
    let inq = |page: &str| {
        let o = tool("iscsi-inq", "libiscsi-bin", &["-e", "1", "-c", page, &url]);
        assert!(o.status.success(), "iscsi-inq page {page}: {}", text(&o));
        text(&o)
    };
    let pages = inq("0");
    for p in ["0x80", "0x83", "0xb0", "0xb1", "0xb2"] {
        assert!(pages.contains(&format!("Page:{p}")), "page {p} not listed: {pages}");
    }
    // The fixture's identity is [7; 16].
    assert!(inq("128").contains("Unit Serial Number:[07070707070707070707070707070707]"));
    let id = inq("131");
    assert!(id.contains("Designator Type:(3) NAA") && id.contains(&format!("Designator:[{IQN}]")), "{id}");
    let bl = inq("176");
    for l in [
        "wsnz:1",
        "maximum compare and write length:255",
        "maximum unmap lba count:1048576",
        "maximum write same length:1048576",
    ] {
        assert!(bl.contains(l), "block limits lack {l}: {bl}");
    }
    assert!(inq("177").contains("Medium Rotation Rate:1"), "non-rotating");
    let lbp = inq("178");
    for l in ["lbpu:1", "lbpws:1", "lbpws10:1", "lbprz:1", "provisioning type:2"] {
        assert!(lbp.contains(l), "provisioning page lacks {l}: {lbp}");
    }
    let o = tool("iscsi-readcapacity16", "libiscsi-bin", &[&url]);
    let t = text(&o);
    assert!(t.contains("LBPME:1 LBPRZ:1") && t.contains("Total size:16777216"), "{t}");
    f.server.expect("server").shutdown();
}

#[test]
fn random_data_round_trip_with_and_without_digests() {
    let f = common::start(2, 16 * MIB, |_, _| {});
    for (lun, digest) in [(0, false), (1, true)] {
        let len = 5 * MIB as usize + 1234;
        let file = random_file(&format!("rt{lun}.bin"), len, 11 + lun as u64);
        let back = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("rt{lun}.back"));
        let url = format!("iscsi://127.0.0.1:{}/{IQN}/{lun}", f.port);
        let env: &[(&str, &str)] = if digest { &[("RT_DIGEST", "1")] } else { &[] };
        let w = roundtrip(&["write", &url, file.to_str().expect("path")], env);
        assert!(w.status.success(), "write: {}", text(&w));
        let r = roundtrip(&["read", &url, &len.to_string(), back.to_str().expect("path")], env);
        assert!(r.status.success(), "read: {}", text(&r));
        let (a, b) = (std::fs::read(&file).expect("source"), std::fs::read(&back).expect("copy"));
        assert_eq!(a.len(), b.len());
        assert!(a == b, "LUN {lun} (digests: {digest}) read back different data");
    }
    f.server.expect("server").shutdown();
}

#[test]
fn refuses_non_loopback_without_auth() {
    let targets = std::sync::Arc::new(TargetTable::new());
    targets.add(TargetConfig::new(IQN, vec![])).expect("target");
    let cfg = ServerConfig::new("0.0.0.0:0".parse().expect("addr"));
    let e = IscsiServer::start(cfg.clone(), targets.clone()).err().expect("a non-loopback server without CHAP started");
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    let s =
        IscsiServer::start(ServerConfig { insecure_allow_no_auth: true, ..cfg }, targets).expect("explicitly insecure");
    s.shutdown();
}

#[test]
fn several_sessions_at_once() {
    let f = common::start(4, 8 * MIB, |_, _| {});
    let port = f.port;
    let threads: Vec<_> = (0..4)
        .map(|lun| {
            std::thread::spawn(move || {
                let len = 3 * MIB as usize + 77;
                let file = random_file(&format!("many{lun}.bin"), len, 100 + lun as u64);
                let back = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("many{lun}.back"));
                let url = format!("iscsi://127.0.0.1:{port}/{IQN}/{lun}");
                for _ in 0..3 {
                    let w = roundtrip(&["write", &url, file.to_str().expect("path")], &[]);
                    assert!(w.status.success(), "write LUN {lun}: {}", text(&w));
                    let r = roundtrip(&["read", &url, &len.to_string(), back.to_str().expect("path")], &[]);
                    assert!(r.status.success(), "read LUN {lun}: {}", text(&r));
                    assert!(
                        std::fs::read(&file).expect("src") == std::fs::read(&back).expect("copy"),
                        "LUN {lun} differs"
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a session failed");
    }
    f.server.expect("server").shutdown();
}
