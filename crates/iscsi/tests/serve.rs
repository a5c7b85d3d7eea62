//! A server to point tools at by hand: `STRATA_ISCSI_SERVE_SECS=600 cargo test -p
//! strata-iscsi --test serve -- --ignored --nocapture` prints the port and serves two
//! 64 MiB LUNs for that long.

mod common;

#[test]
#[ignore]
fn serve_for_manual_use() {
    let _ = tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).try_init();
    let secs: u64 = std::env::var("STRATA_ISCSI_SERVE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let f = common::start(2, 64 * common::MIB, |_, _| {});
    println!("serving iscsi://127.0.0.1:{}/{}/0 for {secs}s", f.port, common::IQN);
    std::thread::sleep(std::time::Duration::from_secs(secs));
}
