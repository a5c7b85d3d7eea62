//! Shared by the end-to-end tests: a real `strata serve` on a temporary directory and port.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_strata");

pub struct Daemon {
    pub child: Option<Child>,
    /// The daemon's control socket (the CLI finds it through STRATA_SOCKET).
    pub socket: PathBuf,
    pub dir: PathBuf,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A test's directory under /tmp: removed when the test passes (dropped while not
/// panicking), kept for a look when it fails. Declare it before the daemons using it, so
/// they stop (and unmount) first.
pub struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub fn temp_dir(tag: &str) -> TempDir {
    let d = std::env::temp_dir().join(format!("strata-it-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

impl Daemon {
    pub fn start(dir: &Path) -> Daemon {
        let socket = dir.join("strata.sock");
        let mut d = Daemon { child: None, socket, dir: dir.to_path_buf() };
        d.spawn();
        d
    }

    pub fn spawn(&mut self) {
        self.spawn_with(&[]);
    }

    /// Start the daemon with extra `strata serve` arguments.
    pub fn spawn_with(&mut self, extra: &[&str]) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("daemon.log")).unwrap();
        // Never the machine's /etc/strata/strata.toml: a test daemon is configured by its flags.
        let config: &[&str] = if extra.contains(&"--config") { &[] } else { &["--config", "/dev/null"] };
        let child = Command::new(BIN)
            .args(["serve", "--data-dir", self.dir.join("data").to_str().unwrap(), "--default-pool-size", "256M"])
            .args(config)
            .args(extra)
            .env("STRATA_SOCKET", &self.socket)
            .env_remove("STRATA_API")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start strata serve");
        self.child = Some(child);
        let start = Instant::now();
        while self.cli(&["pool", "list"]).0 != 0 {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("daemon exited with {status}: {}", self.log());
            }
            assert!(start.elapsed() < Duration::from_secs(20), "daemon did not come up: {}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    pub fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(BIN)
            .args(args)
            .env("STRATA_SOCKET", &self.socket)
            .env_remove("STRATA_API")
            .env_remove("STRATA_TOKEN")
            .output()
            .expect("run strata");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into(),
            String::from_utf8_lossy(&out.stderr).into(),
        )
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.cli(args);
        assert_eq!(code, 0, "strata {args:?} failed: {out}{err}\n--- daemon log ---\n{}", self.log());
        out
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        serde_json::from_str(&self.ok(&a)).expect("valid JSON")
    }

    /// Fails (exit status 1-6: failure, usage, not found, conflict, access, unreachable)
    /// with a message containing `want`.
    pub fn fails(&self, args: &[&str], want: &str) {
        let (code, out, err) = self.cli(args);
        assert!((1..=6).contains(&code), "strata {args:?} should fail: {code} {out}{err}");
        assert!(err.contains(want), "strata {args:?}: expected {want:?} in: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }

    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        unsafe { libc_kill(child.id() as i32, 15) };
        child.wait().unwrap()
    }

    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
        // Never leave a mount behind, whatever happened.
        if let Ok(m) = std::fs::read_to_string("/proc/self/mountinfo") {
            for line in m.lines() {
                if let Some(mp) = line.split(' ').nth(4) {
                    if mp.starts_with(self.dir.to_str().unwrap()) {
                        let _ = Command::new("umount").args(["-l", mp]).status();
                    }
                }
            }
        }
    }
}

/// A daemon in `dir/tag` with a replication listener on a free port (for the peer and
/// remote-mirror tests), and that port.
pub fn start_with_repl(dir: &Path, tag: &str) -> (Daemon, u16) {
    let d_dir = dir.join(tag);
    std::fs::create_dir_all(&d_dir).unwrap();
    let port = free_port();
    let mut d = Daemon { child: None, socket: d_dir.join("strata.sock"), dir: d_dir };
    d.spawn_with(&["--repl-port", port.to_string().as_str()]);
    (d, port)
}

/// Write `len` bytes derived from `seed` to `path` and fsync them (through the page cache to
/// the daemon: a snapshot taken next holds them). The bytes written.
pub fn write_file(path: &Path, seed: u32, len: usize) -> Vec<u8> {
    let data: Vec<u8> = (0..len as u32).map(|i| (i.wrapping_add(seed).wrapping_mul(2654435761) >> 11) as u8).collect();
    std::fs::write(path, &data).unwrap();
    std::fs::File::open(path).unwrap().sync_all().unwrap();
    data
}

/// A client that keeps a pool busy (small synchronous writes to `path` every 5 ms) until
/// `stop()`, which says how many it made.
pub struct BusyWriter {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl BusyWriter {
    pub fn start(path: PathBuf) -> BusyWriter {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut n = 0u64;
            while !flag.load(Ordering::Relaxed) {
                std::fs::write(&path, n.to_le_bytes()).unwrap();
                std::fs::File::open(&path).and_then(|f| f.sync_all()).unwrap();
                n += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            n
        });
        BusyWriter { stop, thread }
    }

    pub fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Clone `pool/vol@snap` on `d`, read `file` from it, drop the clone.
pub fn read_snapshot_file(d: &Daemon, dir: &Path, pool: &str, vol: &str, snap: &str, file: &str) -> Option<Vec<u8>> {
    let clone = format!("{pool}/check-{vol}");
    d.ok(&["clone", "create", &format!("{pool}/{vol}@{snap}"), &clone]);
    let mnt = dir.join(format!("check-{vol}-{}", std::process::id()));
    std::fs::create_dir_all(&mnt).unwrap();
    d.ok(&["mount", &clone, mnt.to_str().unwrap()]);
    let data = std::fs::read(mnt.join(file)).ok();
    d.ok(&["unmount", mnt.to_str().unwrap()]);
    d.ok(&["volume", "delete", &clone]);
    data
}

/// A one-member etcd cluster (Debian's etcd-server) on free loopback ports, for the
/// failover tests; killed when dropped.
pub struct Etcd {
    pub child: Option<Child>,
    pub url: String,
    dir: PathBuf,
    args: Vec<String>,
    tls: bool,
    /// `user:password` for etcdctl once `enable_auth` ran.
    root: Option<String>,
}

impl Etcd {
    pub fn start(dir: &Path) -> Etcd {
        Etcd::start_with(dir, None)
    }

    /// etcd serving https with a certificate of a test CA made here (openssl), asking
    /// clients for a certificate of that CA. The PEM files: `dir/etcd/tls/{ca,client,client.key}.pem`.
    pub fn start_tls(dir: &Path) -> Etcd {
        let tls = dir.join("etcd").join("tls");
        std::fs::create_dir_all(&tls).unwrap();
        let run = |args: &[&str]| {
            let out = Command::new("openssl").args(args).current_dir(&tls).output().expect("openssl");
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=strata-test-ca",
        ]);
        // X.509 v3 leaves (rustls takes no v1 certificate), each for its use.
        std::fs::write(tls.join("server.ext"), "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n").unwrap();
        std::fs::write(tls.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        for (name, cn) in [("server", "etcd"), ("client", "root")] {
            let (key, csr, pem, ext) =
                (format!("{name}.key"), format!("{name}.csr"), format!("{name}.pem"), format!("{name}.ext"));
            let subj = format!("/CN={cn}");
            run(&["req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", &subj]);
            run(&["x509", "-req", "-in", &csr, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial"]
                .into_iter()
                .chain(["-out", &pem, "-days", "2", "-extfile", &ext])
                .collect::<Vec<_>>());
        }
        let t = |f: &str| tls.join(f).display().to_string();
        let extra = vec![
            "--cert-file".into(),
            t("server.pem"),
            "--key-file".into(),
            t("server.key"),
            "--trusted-ca-file".into(),
            t("ca.pem"),
            "--client-cert-auth".into(),
        ];
        Etcd::start_with(dir, Some(extra))
    }

    fn start_with(dir: &Path, tls: Option<Vec<String>>) -> Etcd {
        let bin = ["/usr/bin/etcd", "/usr/local/bin/etcd"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("etcd is not installed: apt-get install etcd-server (scripts/test.sh does)");
        let (client, peer) = (free_port(), free_port());
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let dir = dir.join("etcd");
        std::fs::create_dir_all(&dir).unwrap();
        let mut args: Vec<String> = vec![
            bin.into(),
            "--name".into(),
            "t".into(),
            "--data-dir".into(),
            dir.join("data").display().to_string(),
            "--listen-client-urls".into(),
            url.clone(),
            "--advertise-client-urls".into(),
            url.clone(),
            "--listen-peer-urls".into(),
            peer_url.clone(),
            "--initial-advertise-peer-urls".into(),
            peer_url.clone(),
            "--initial-cluster".into(),
            format!("t={peer_url}"),
        ];
        let tls_args = tls.is_some();
        args.extend(tls.unwrap_or_default());
        let mut e = Etcd { child: None, url, dir, args, tls: tls_args, root: None };
        e.spawn();
        e
    }

    /// etcdctl's arguments for this etcd (its endpoint, and the test CA's files).
    fn ctl(&self) -> Vec<String> {
        let mut a = vec!["--endpoints".to_string(), self.url.clone()];
        if let Some(root) = &self.root {
            a.extend(["--user".to_string(), root.clone()]);
        }
        if self.tls {
            let t = |f: &str| self.dir.join("tls").join(f).display().to_string();
            a.extend([
                "--cacert".into(),
                t("ca.pem"),
                "--cert".into(),
                t("client.pem"),
                "--key".into(),
                t("client.key"),
            ]);
        }
        a
    }

    /// The PEM files of `start_tls`: CA, client certificate, client key.
    pub fn tls_files(&self) -> (PathBuf, PathBuf, PathBuf) {
        let t = |f: &str| self.dir.join("tls").join(f);
        (t("ca.pem"), t("client.pem"), t("client.key"))
    }

    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("etcd.log")).unwrap();
        self.child =
            Some(Command::new(&self.args[0]).args(&self.args[1..]).stdout(Stdio::null()).stderr(log).spawn().unwrap());
        let start = Instant::now();
        loop {
            let ok = Command::new("etcdctl")
                .args(self.ctl())
                .args(["endpoint", "health"])
                .env("ETCDCTL_API", "3")
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                return;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "etcd did not come up: {}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `etcdctl ARGS` as root once auth is on; panics on failure.
    pub fn ctl_ok(&self, args: &[&str]) {
        let out = Command::new("etcdctl").args(self.ctl()).args(args).env("ETCDCTL_API", "3").output().unwrap();
        assert!(out.status.success(), "etcdctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Authentication on (`etcdctl auth enable`), with a root user and `users` = (name,
    /// password, key prefix it may read and write).
    pub fn enable_auth(&mut self, users: &[(&str, &str, &str)]) {
        self.ctl_ok(&["user", "add", "root", "--new-user-password", "root-pw"]);
        self.ctl_ok(&["user", "grant-role", "root", "root"]);
        for (name, password, prefix) in users {
            let role = format!("{name}-role");
            self.ctl_ok(&["role", "add", &role]);
            self.ctl_ok(&["role", "grant-permission", &role, "--prefix=true", "readwrite", prefix]);
            self.ctl_ok(&["user", "add", name, "--new-user-password", password]);
            self.ctl_ok(&["user", "grant-role", name, &role]);
        }
        self.ctl_ok(&["auth", "enable"]);
        self.root = Some("root:root-pw".into());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
    }

    /// Send `sig` to etcd (SIGSTOP: an etcd that does not answer; SIGCONT: back).
    pub fn signal(&self, sig: i32) {
        unsafe { libc_kill(self.child.as_ref().unwrap().id() as i32, sig) };
    }

    /// `etcdctl get KEY` (the value, if the key exists).
    pub fn get(&self, key: &str) -> Option<String> {
        let out = Command::new("etcdctl")
            .args(self.ctl())
            .args(["get", key, "--print-value-only"])
            .env("ETCDCTL_API", "3")
            .output()
            .unwrap();
        let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (!v.is_empty()).then_some(v)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            unsafe { libc_kill(c.id() as i32, 18) };
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
