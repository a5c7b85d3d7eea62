//! The `strata` command end to end on a real image file: exit codes, tables, JSON, and
//! errors that say what to do next.

use std::process::Command;

fn strata(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_strata")).args(args).output().expect("run strata");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn tmp_image(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("strata-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    p.to_string_lossy().into()
}

#[test]
fn create_list_check_and_json() {
    let img = tmp_image("a.img");
    let (code, out, err) = strata(&["pool", "create", "p1", "--device", &img, "--size", "64M"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("created pool p1"));
    assert_eq!(strata(&["volume", "create", "--device", &img, "db", "--size", "1G"]).0, 0);
    assert_eq!(strata(&["volume", "create", "--device", &img, "logs", "--record-size", "128K"]).0, 0);
    let (code, out, _) = strata(&["volume", "list", "--device", &img]);
    assert_eq!(code, 0);
    assert!(out.contains("db") && out.contains("logs") && out.contains("128.0K"), "{out}");
    let (code, out, _) = strata(&["--json", "volume", "list", "--device", &img]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v.as_array().unwrap().len(), 2);
    let (code, out, _) = strata(&["check", &img, "--json"]);
    assert_eq!(code, 0, "{out}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["clean"], true);
    assert_eq!(r["volumes"], 2);
    assert_eq!(strata(&["volume", "delete", "--device", &img, "logs"]).0, 0);
    let (code, out, _) = strata(&["pool", "status", &img]);
    assert_eq!(code, 0);
    assert!(out.contains("volumes   1"), "{out}");
}

#[test]
fn errors_say_what_to_do() {
    let img = tmp_image("b.img");
    let (code, _, err) = strata(&["check", &img]);
    assert_eq!(code, 2);
    assert!(err.contains("no such file") && err.contains("strata pool create"), "{err}");
    let (code, _, err) = strata(&["pool", "create", "p", "--device", &img]);
    assert_eq!(code, 2);
    assert!(err.contains("--size"), "{err}");
    let (code, _, err) = strata(&["pool", "create", "p", "--device", &img, "--size", "12Q"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown unit"), "{err}");
    assert_eq!(strata(&["pool", "create", "p", "--device", &img, "--size", "32M"]).0, 0);
    let (code, _, err) = strata(&["pool", "create", "p", "--device", &img]);
    assert_eq!(code, 2);
    assert!(err.contains("--force"), "{err}");
    let (code, _, err) = strata(&["volume", "create", "--device", &img, "v", "--record-size", "3K"]);
    assert_eq!(code, 2);
    assert!(err.contains("power of two"), "{err}");
    let (code, _, err) = strata(&["volume", "delete", "--device", &img, "nope"]);
    assert_eq!(code, 2);
    assert!(err.contains("volume list"), "{err}");
    let (code, _, _) = strata(&["volume", "frobnicate"]);
    assert_eq!(code, 2);
}

#[test]
fn check_reports_damage_with_exit_status() {
    let img = tmp_image("c.img");
    assert_eq!(strata(&["pool", "create", "p", "--device", &img, "--size", "32M"]).0, 0);
    assert_eq!(strata(&["volume", "create", "--device", &img, "v"]).0, 0);
    // Destroy both labels: not a pool any more.
    let mut bytes = std::fs::read(&img).unwrap();
    bytes[..16].fill(0xee);
    bytes[256 * 1024..256 * 1024 + 16].fill(0xee);
    std::fs::write(&img, &bytes).unwrap();
    let (code, _, err) = strata(&["check", &img]);
    assert_eq!(code, 2);
    assert!(err.contains("both labels are damaged"), "{err}");
}
