//! Shared by the integration tests: servers over both LUN implementations, and the
//! client tools (a missing tool fails the test with the Debian package to install).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;
use strata_engine::{ManualClock, Pool, VolumeOptions};
use strata_fs::{Caller, VolumeFs};
use strata_lun::{FileLun, Lun, VolumeLun};
use strata_nbd::{Export, ExportTable, NbdServer, ServerConfig};
use strata_testkit::{test_create_options, test_pool_options, SimDisk};

pub const MIB: u64 = 1 << 20;

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("strata-nbd-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What keeps a LUN's backing alive for the test.
pub enum Backing {
    File(TempDir),
    Volume(Arc<Pool>),
}

pub fn file_lun(size: u64) -> (Backing, Arc<dyn Lun>) {
    let dir = TempDir::new("file");
    let path = dir.0.join("lun.img");
    std::fs::File::create(&path).unwrap().set_len(size).unwrap();
    let lun = FileLun::open(&path, false).unwrap();
    (Backing::File(dir), Arc::new(lun))
}

/// A LUN on a real engine pool over a simulated disk.
pub fn volume_lun(size: u64) -> (Backing, Arc<dyn Lun>) {
    let disk = Arc::new(SimDisk::new(128 * MIB, 512));
    let pool = Arc::new(Pool::create(disk, test_create_options(7), test_pool_options()).unwrap());
    let opts = VolumeOptions { record_size: 4096, ..Default::default() };
    let vol = pool.create_volume("lun0", &opts).unwrap();
    let root = Caller { uid: 0, gid: 0 };
    let fs = VolumeFs::mount(pool.clone(), vol, Arc::new(ManualClock::new(1)), root).unwrap();
    VolumeLun::create(&fs, size, 512).unwrap();
    let lun = VolumeLun::open(Arc::new(fs), [7; 16], false).unwrap();
    (Backing::Volume(pool), Arc::new(lun))
}

pub fn luns(size: u64) -> Vec<(&'static str, Backing, Arc<dyn Lun>)> {
    let (fb, fl) = file_lun(size);
    let (vb, vl) = volume_lun(size);
    vec![("file", fb, fl), ("volume", vb, vl)]
}

/// A server on 127.0.0.1:0 exporting `lun` as "lun" (writable) and "ro" (read-only).
pub fn serve(lun: Arc<dyn Lun>) -> (NbdServer, Arc<ExportTable>) {
    let exports = Arc::new(ExportTable::new());
    exports.add("lun", Export { description: "test LUN".into(), ..Export::new(lun.clone()) }).unwrap();
    exports.add("ro", Export { read_only: true, ..Export::new(lun) }).unwrap();
    let server = NbdServer::start(ServerConfig::new("127.0.0.1:0".parse().unwrap()), exports.clone()).unwrap();
    (server, exports)
}

pub fn uri(addr: SocketAddr, export: &str) -> String {
    format!("nbd://{addr}/{export}")
}

/// Fail (not skip) when a client tool is missing, naming its package.
pub fn require(tool: &str, package: &str) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path).any(|d| d.join(tool).is_file());
    assert!(found, "{tool} is not installed: apt-get install {package} (scripts/test.sh does)");
}

pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{} failed: {}\nstdout: {}\nstderr: {}",
        format!("{cmd:?}").chars().take(300).collect::<String>(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn stdout(cmd: &mut Command) -> String {
    String::from_utf8(run(cmd).stdout).unwrap()
}

/// Run a Python script in nbdsh with `h` connected to `uri`; the script asserts.
/// Run a Python script in nbdsh, with `uri` defined; the script asserts. nbdsh runs the
/// `python3` first on PATH, so the system's comes first (a pyenv one lacks the module).
pub fn nbdsh(uri: &str, script: &str) -> String {
    require("nbdsh", "python3-libnbd");
    let path = format!("/usr/bin:/bin:{}", std::env::var("PATH").unwrap_or_default());
    let script = format!("uri = {uri:?}\n{script}");
    stdout(Command::new("nbdsh").env("PATH", path).arg("-c").arg(script))
}
