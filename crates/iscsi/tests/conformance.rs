//! libiscsi's conformance suite (`iscsi-test-cu`, Debian package libiscsi-bin) against
//! the target, in process, over a VolumeLun on the real engine (a 64 MiB LUN of 512-byte
//! blocks on a simulated disk). Runs the ALL family (230 tests in libiscsi 1.19) with
//! destructive tests allowed, saves the XML results under the target directory, lists the
//! failures, and asserts a floor on the passes and that the core suites pass entirely.
//! 39 of the passes are tests that skip themselves (EXTENDED COPY, WRITE ATOMIC, SANITIZE without --allow-sanitize, removable-medium tests and the like).

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Passes achieved when this floor was set (libiscsi 1.19.0): all 230 (39 of them tests that
/// skip themselves). GetLBAStatus.UnmapSingle failed while READ CAPACITY(16) announced 4 KiB
/// physical blocks under 512-byte sectors (its second loop assumes one logical block per
/// physical block); the record size is now announced as the optimal transfer granularity
/// only. For reference, tgt 1.0.85 (Debian 12's tgtd, a 64 MiB file LUN, the same command on
/// this machine): 221 passed (59 of them self-skipped), 9 failed.
const PASS_FLOOR: usize = 230;

/// Suites that must pass in full.
const CORE: &[&str] = &[
    "Read10",
    "Write10",
    "Read16",
    "Write16",
    "ReadCapacity10",
    "ReadCapacity16",
    "Inquiry",
    "Unmap",
    "WriteSame10",
    "WriteSame16",
    "CompareAndWrite",
    "PrinReadKeys",
    "PrinReportCapabilities",
    "ProutRegister",
    "ProutReserve",
    "ProutClear",
    "ProutPreempt",
    "ModeSense6",
    "ReportSupportedOpcodes",
    "iSCSIcmdsn",
    "iSCSIdatasn",
    "iSCSIResiduals",
    "iSCSITMF",
    "MultipathIO",
    "OrWrite",
    "Reserve6",
];

/// (suite, test) → the first failed condition, or None for a pass.
fn parse(xml: &str) -> BTreeMap<(String, String), Option<String>> {
    fn field<'a>(s: &'a str, tag: &str) -> Option<&'a str> {
        let open = format!("<{tag}>");
        let close = format!("</{tag}>");
        let a = s.find(&open)? + open.len();
        let b = a + s[a..].find(&close)?;
        Some(s[a..b].trim())
    }
    let mut out: BTreeMap<(String, String), Option<String>> = BTreeMap::new();
    for suite in xml.split("<CUNIT_RUN_SUITE>").skip(1) {
        let Some(name) = field(suite, "SUITE_NAME") else { continue };
        for rec in suite.split("<CUNIT_RUN_TEST_RECORD>").skip(1) {
            let Some(test) = field(rec, "TEST_NAME") else { continue };
            let failed = rec.contains("<CUNIT_RUN_TEST_FAILURE>");
            let entry = out.entry((name.to_string(), test.to_string())).or_insert(None);
            if failed && entry.is_none() {
                let cond = field(rec, "CONDITION").unwrap_or("?");
                let line = field(rec, "LINE_NUMBER").unwrap_or("?");
                let file = field(rec, "FILE_NAME").unwrap_or("?");
                *entry = Some(format!("{file}:{line}: {cond}"));
            }
        }
    }
    out
}

#[test]
fn iscsi_test_cu_all() {
    let f = common::start(1, 64 * common::MIB, |_, _| {});
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("iscsi-test-cu");
    std::fs::create_dir_all(&dir).expect("results directory");
    let results = dir.join("CUnitAutomated-Results.xml");
    let _ = std::fs::remove_file(&results);
    let url = format!("iscsi://127.0.0.1:{}/{}/0", f.port, common::IQN);
    let out = match std::process::Command::new("timeout")
        .current_dir(&dir)
        // The URL twice: the second is the multipath path (MultipathIO: two sessions to
        // one LUN, unit attentions after a LUN reset, CAW across paths).
        .args(["300", "iscsi-test-cu", "--dataloss", "-x", "-t", "ALL", &url, &url])
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!("cannot run timeout/iscsi-test-cu ({e}): install the Debian package libiscsi-bin"),
    };
    let Ok(xml) = std::fs::read_to_string(&results) else {
        panic!(
            "iscsi-test-cu wrote no results (is the Debian package libiscsi-bin installed?): {}",
            common::text(&out)
        );
    };
    println!("iscsi-test-cu results: {}", results.display());
    let tests = parse(&xml);
    let failed: Vec<_> = tests.iter().filter_map(|(k, v)| v.as_ref().map(|c| (k, c))).collect();
    let passed = tests.len() - failed.len();
    println!("iscsi-test-cu ALL: {} tests, {passed} passed, {} failed", tests.len(), failed.len());
    for ((suite, test), cond) in &failed {
        println!("  FAILED {suite}.{test}: {cond}");
    }
    assert!(tests.len() >= 230, "the ALL family has 230 tests in libiscsi 1.19; saw {}", tests.len());
    let core_failed: Vec<_> = failed.iter().filter(|((s, _), _)| CORE.contains(&s.as_str())).collect();
    assert!(core_failed.is_empty(), "core suites failed: {core_failed:?}");
    for s in CORE {
        assert!(tests.keys().any(|(suite, _)| suite == s), "core suite {s} did not run");
    }
    assert!(passed >= PASS_FLOOR, "{passed} passed, below the floor of {PASS_FLOOR}");
    f.server.expect("server").shutdown();
}

/// The ReadOnly suite over a read-only LUN (a snapshot's, say): every write command
/// (WRITE, WRITE SAME with and without UNMAP, WRITE AND VERIFY, ORWRITE, COMPARE AND
/// WRITE, UNMAP) must fail with DATA PROTECT / WRITE PROTECTED.
#[test]
fn iscsi_test_cu_read_only_lun() {
    let (_pool, lun) = common::volume_lun(16 * common::MIB, 512, 9, true);
    let targets = std::sync::Arc::new(strata_iscsi::TargetTable::new());
    targets.add(strata_iscsi::TargetConfig::new(common::IQN, vec![lun])).expect("target");
    let server = strata_iscsi::IscsiServer::start(
        strata_iscsi::ServerConfig::new("127.0.0.1:0".parse().expect("addr")),
        targets,
    )
    .expect("server");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("iscsi-test-cu-ro");
    std::fs::create_dir_all(&dir).expect("results directory");
    let results = dir.join("CUnitAutomated-Results.xml");
    let _ = std::fs::remove_file(&results);
    let url = format!("iscsi://127.0.0.1:{}/{}/0", server.local_addr().port(), common::IQN);
    let out = std::process::Command::new("timeout")
        .current_dir(&dir)
        .args(["120", "iscsi-test-cu", "--dataloss", "-x", "-t", "ALL.ReadOnly", &url])
        .output()
        .expect("run timeout (coreutils)");
    let Ok(xml) = std::fs::read_to_string(&results) else {
        panic!("iscsi-test-cu wrote no results (install the Debian package libiscsi-bin): {}", common::text(&out));
    };
    println!("iscsi-test-cu ReadOnly results: {}", results.display());
    let tests = parse(&xml);
    assert!(!tests.is_empty(), "the ReadOnly suite ran");
    for ((suite, test), failure) in &tests {
        assert!(failure.is_none(), "{suite}.{test} failed on a read-only LUN: {failure:?}");
    }
    server.shutdown();
}
