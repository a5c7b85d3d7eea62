//! Shared set-up of the integration tests: a server on 127.0.0.1:0 over VolumeLuns on a
//! simulated disk (the real engine), and the libiscsi tools they drive.
#![allow(dead_code)]

use std::process::{Command, Output};
use std::sync::Arc;
use strata_engine::{ManualClock, Pool, VolumeOptions};
use strata_fs::{Caller, VolumeFs};
use strata_iscsi::{IscsiServer, ServerConfig, TargetConfig, TargetTable};
use strata_lun::{Lun, VolumeLun};
use strata_testkit::{test_create_options, test_pool_options, SimDisk};

pub const MIB: u64 = 1 << 20;
pub const IQN: &str = "iqn.2026-01.org.strata:test";

pub struct Fixture {
    pub server: Option<IscsiServer>,
    pub targets: Arc<TargetTable>,
    pub pools: Vec<Arc<Pool>>,
    pub port: u16,
}

/// A pool on its own SimDisk with one LUN volume of `size` bytes.
pub fn volume_lun(size: u64, block: u32, seed: u8, read_only: bool) -> (Arc<Pool>, Arc<dyn Lun>) {
    let (pool, lun) = volume_lun_concrete(size, block, seed, read_only);
    (pool, lun)
}

/// As [`volume_lun`], keeping the VolumeLun type (to grow it).
pub fn volume_lun_concrete(size: u64, block: u32, seed: u8, read_only: bool) -> (Arc<Pool>, Arc<VolumeLun>) {
    let disk = Arc::new(SimDisk::new(size * 2 + 64 * MIB, 512));
    let pool =
        Arc::new(Pool::create(disk, test_create_options(seed as u64), test_pool_options()).expect("create pool"));
    let opts = VolumeOptions { record_size: 4096, ..Default::default() };
    let vol = pool.create_volume("lun", &opts).expect("create volume");
    let fs =
        VolumeFs::mount(pool.clone(), vol, Arc::new(ManualClock::new(1)), Caller { uid: 0, gid: 0 }).expect("mount");
    VolumeLun::create(&fs, size, block).expect("create LUN");
    let lun = VolumeLun::open(Arc::new(fs), [seed; 16], read_only).expect("open LUN");
    (pool, Arc::new(lun))
}

/// A server with target `IQN` serving `luns` LUNs of `size` bytes each.
pub fn start(luns: usize, size: u64, edit: impl FnOnce(&mut TargetConfig, &mut ServerConfig)) -> Fixture {
    let mut pools = Vec::new();
    let mut l = Vec::new();
    for i in 0..luns {
        let (p, lun) = volume_lun(size, 512, 7 + i as u8, false);
        pools.push(p);
        l.push(lun);
    }
    let mut tc = TargetConfig::new(IQN, l);
    let mut sc = ServerConfig::new("127.0.0.1:0".parse().expect("address"));
    edit(&mut tc, &mut sc);
    let targets = Arc::new(TargetTable::new());
    targets.add(tc).expect("add target");
    let server = IscsiServer::start(sc, targets.clone()).expect("start server");
    let port = server.local_addr().port();
    Fixture { server: Some(server), targets, pools, port }
}

/// Run a tool, failing with the package to install when it is missing.
pub fn tool(name: &str, package: &str, args: &[&str]) -> Output {
    match Command::new(name).args(args).output() {
        Ok(o) => o,
        Err(e) => panic!("cannot run {name} ({e}): install the Debian package {package} (scripts/test.sh does)"),
    }
}

pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}
