//! A pool on a simulated disk with two exported volumes, and a minimal RPC client that
//! drives the server's request path (`Processor`) without sockets.

#![allow(dead_code)]

use std::net::IpAddr;
use std::sync::Arc;
use strata_engine::{Pool, VolumeOptions};
use strata_fs::{Caller, VolumeFs};
use strata_nfs::xdr::{Decoder, Encoder};
use strata_nfs::{Cidr, Export, ExportPolicy, ExportTable, HandleKey, Processor, Squash};
use strata_testkit::{test_create_options, test_pool_options, SimDisk};

pub const NFS: u32 = 100003;
pub const MOUNT: u32 = 100005;

pub struct World {
    pub exports: Arc<ExportTable>,
    pub server: Processor,
    pub pool: Arc<Pool>,
}

pub fn policy(clients: &[&str], read_only: bool, squash: Squash) -> ExportPolicy {
    ExportPolicy {
        clients: clients.iter().map(|c| Cidr::parse(c).expect("cidr")).collect(),
        read_only,
        squash,
        anon_uid: 65534,
        anon_gid: 65534,
    }
}

/// Exports: 1 = /test/a (read-write, 127.0.0.0/8), 2 = /test/b (read-only, 127.0.0.1).
pub fn world() -> World {
    world_sized(256 << 20, 0)
}

/// `world()` on a disk of `disk_bytes`, volume a limited to `quota_bytes` (0: no limit).
pub fn world_sized(disk_bytes: u64, quota_bytes: u64) -> World {
    let dev = Arc::new(SimDisk::new(disk_bytes, 4096));
    let pool = Arc::new(Pool::create(dev, test_create_options(1), test_pool_options()).expect("create pool"));
    let exports = Arc::new(ExportTable::new());
    for (id, name, ro) in [(1u32, "a", false), (2, "b", true)] {
        let quota_bytes = if ro { 0 } else { quota_bytes };
        let vol =
            pool.create_volume(name, &VolumeOptions { quota_bytes, ..Default::default() }).expect("create volume");
        let fs =
            VolumeFs::mount(pool.clone(), vol, Arc::new(strata_engine::ManualClock::new(1)), Caller { uid: 0, gid: 0 })
                .expect("mount");
        let clients: &[&str] = if ro { &["127.0.0.1"] } else { &["127.0.0.0/8"] };
        exports.insert(Export {
            id,
            path: format!("/test/{name}"),
            fs: Arc::new(fs),
            pool_guid: 99,
            policy: policy(clients, ro, Squash::None),
            stats: None,
        });
    }
    let server = Processor::new(exports.clone(), HandleKey::new([5u8; 32]));
    World { exports, server, pool }
}

pub fn localhost() -> IpAddr {
    "127.0.0.1".parse().expect("ip")
}

pub fn call_record(xid: u32, prog: u32, vers: u32, proc_: u32, uid: u32, gid: u32, args: &[u8]) -> Vec<u8> {
    call_record_groups(xid, prog, vers, proc_, (uid, gid, &[]), args)
}

/// A call with AUTH_SYS credentials `(uid, gid, supplementary gids)`.
pub fn call_record_groups(
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    (uid, gid, groups): (u32, u32, &[u32]),
    args: &[u8],
) -> Vec<u8> {
    let mut e = Encoder::with_capacity(128 + args.len());
    e.u32(xid);
    e.u32(0);
    e.u32(2);
    e.u32(prog);
    e.u32(vers);
    e.u32(proc_);
    let mut cred = Encoder::with_capacity(64);
    cred.u32(0);
    cred.opaque(b"test");
    cred.u32(uid);
    cred.u32(gid);
    cred.u32(groups.len() as u32);
    for &g in groups {
        cred.u32(g);
    }
    e.u32(1);
    e.opaque(&cred.buf);
    e.u32(0);
    e.opaque(b"");
    e.buf.extend_from_slice(args);
    e.buf
}

/// The results of an accepted SUCCESS reply (after the record mark and header).
pub fn results(reply: &[u8]) -> Vec<u8> {
    let mut d = Decoder::new(&reply[4..]);
    let _xid = d.u32().expect("xid");
    assert_eq!(d.u32(), Ok(1), "a reply");
    assert_eq!(d.u32(), Ok(0), "accepted");
    let _flavor = d.u32().expect("verf");
    let _ = d.opaque(400).expect("verf body");
    assert_eq!(d.u32(), Ok(0), "accept_stat SUCCESS");
    d.rest().to_vec()
}

impl World {
    pub fn call_as(&self, peer: IpAddr, prog: u32, proc_: u32, uid: u32, args: &[u8]) -> Vec<u8> {
        self.call_cred(peer, prog, proc_, (uid, uid, &[]), args)
    }

    /// A call from `peer` with AUTH_SYS credentials `(uid, gid, supplementary gids)`.
    pub fn call_cred(&self, peer: IpAddr, prog: u32, proc_: u32, cred: (u32, u32, &[u32]), args: &[u8]) -> Vec<u8> {
        // Every call its own xid, as a client does (the same xid is a retransmission).
        static XID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
        let xid = XID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let rec = call_record_groups(xid, prog, 3, proc_, cred, args);
        results(&self.server.process(peer, &rec).expect("a reply"))
    }

    pub fn call(&self, prog: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
        self.call_as(localhost(), prog, proc_, 0, args)
    }

    /// MOUNT MNT: (status, root handle).
    pub fn mnt(&self, peer: IpAddr, path: &str) -> (u32, Vec<u8>) {
        let mut a = Encoder::with_capacity(64);
        a.opaque(path.as_bytes());
        let r = self.call_as(peer, MOUNT, 1, 0, &a.buf);
        let mut d = Decoder::new(&r);
        let st = d.u32().expect("status");
        if st != 0 {
            return (st, Vec::new());
        }
        (st, d.opaque(64).expect("fh").to_vec())
    }
}

pub fn fh_args(fh: &[u8]) -> Encoder {
    let mut e = Encoder::with_capacity(256);
    e.opaque(fh);
    e
}

pub fn status(r: &[u8]) -> u32 {
    u32::from_be_bytes(r[..4].try_into().expect("status"))
}
