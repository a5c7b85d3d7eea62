//! A tiny run of engine-bench so the benchmark never rots (a smoke run, not a measurement).

#[test]
fn engine_bench_runs_and_prints_its_table() {
    let dir = std::env::temp_dir().join(format!("strata-bench-test-{}", std::process::id()));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_engine-bench"))
        .args(["--dir", dir.to_str().unwrap(), "--pool-mib", "128", "--object-mib", "16", "--ops", "64"])
        .output()
        .expect("run engine-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    for row in ["commit (16 KiB + sync)", "random write 16 KiB", "random read 16 KiB"] {
        assert!(stdout.contains(row), "missing row {row}: {stdout}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
