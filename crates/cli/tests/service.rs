//! Running as a service: the configuration file, its refusals (exit 78, which the systemd
//! unit does not restart on), and the readiness notification of `Type=notify`.

mod common;

use common::*;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn the_config_file_sets_the_daemon_up_and_bad_ones_are_refused() {
    let dir = temp_dir("service-config");
    let port = free_port();
    let cfg = dir.join("strata.toml");
    std::fs::write(
        &cfg,
        format!(
            "data_dir = \"{data}\"\n[api]\nsocket = \"{sock}\"\ntcp = \"127.0.0.1:{port}\"\n\
             [pools]\ndefault_pool_size = \"256M\"\ntxg_interval_seconds = 2\n[fuse]\nthreads = 2\n",
            data = dir.join("data").display(),
            sock = dir.join("cfg.sock").display()
        ),
    )
    .unwrap();
    let mut d = Daemon { child: None, socket: dir.join("cfg.sock"), dir: dir.clone() };
    // The harness passes --data-dir and --default-pool-size; the config must give the rest.
    d.spawn_with(&["--config", cfg.to_str().unwrap()]);
    let p = d.json(&["pool", "status", "default"]);
    assert_eq!(p["state"], "ONLINE");
    // The TCP listener of the file answers (and wants a token).
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("the configured TCP listener");
    std::io::Write::write_all(
        &mut s,
        format!("GET /v1/pools HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut s, &mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 401"), "{out}");
    drop(d);

    // A typo is refused with the file, the key and exit 78.
    std::fs::write(&cfg, "[api]\nsockett = \"/x\"\n").unwrap();
    let out = Command::new(BIN).args(["serve", "--config", cfg.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.contains("sockett") && err.contains("strata.toml"), "{err}");
    // TCP off loopback without TLS.
    std::fs::write(&cfg, "[api]\ntcp = \"0.0.0.0:7420\"\n").unwrap();
    let out = Command::new(BIN).args(["serve", "--config", cfg.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.contains("TLS is required off loopback"), "{err}");
}

#[test]
fn the_daemon_tells_systemd_when_it_is_ready_and_when_it_stops() {
    let dir = temp_dir("service-notify");
    let notify = dir.join("notify.sock");
    let listener = UnixDatagram::bind(&notify).unwrap();
    listener.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let socket = dir.join("strata.sock");
    let mut child = Command::new(BIN)
        .args(["serve", "--data-dir", dir.join("data").to_str().unwrap(), "--default-pool-size", "256M"])
        .env("STRATA_SOCKET", &socket)
        .env("NOTIFY_SOCKET", &notify)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 256];
    let n = listener.recv(&mut buf).expect("READY=1 within 30 s");
    assert_eq!(&buf[..n], b"READY=1");
    // Ready means served: the API answers at once.
    let out = Command::new(BIN).args(["pool", "list"]).env("STRATA_SOCKET", &socket).output().unwrap();
    assert!(out.status.success(), "ready before the API answered");
    assert!(start.elapsed() < Duration::from_secs(30));
    // SIGTERM: STOPPING=1, then a clean exit.
    unsafe { libc_kill(child.id() as i32, 15) };
    let n = listener.recv(&mut buf).expect("STOPPING=1");
    assert_eq!(&buf[..n], b"STOPPING=1");
    assert!(child.wait().unwrap().success());
    assert!(!socket.exists(), "the socket is removed at a clean stop");
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
