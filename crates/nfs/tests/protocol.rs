//! NFSv3 and MOUNT through the server's request path, on a pool on a simulated disk:
//! the procedures, their error codes, handle checks and export policies.

mod common;

use common::*;
use strata_nfs::xdr::{Decoder, Encoder};
use strata_nfs::Squash;
use strata_testkit::SimRng;

const OK: u32 = 0;
const NOENT: u32 = 2;
const NOSPC: u32 = 28;
const DQUOT: u32 = 69;
const ACCES: u32 = 13;
const EXIST: u32 = 17;
const ROFS: u32 = 30;
const NOTEMPTY: u32 = 66;
const STALE: u32 = 70;
const BADHANDLE: u32 = 10001;

fn sattr_none(e: &mut Encoder) {
    for _ in 0..6 {
        e.u32(0);
    }
}

/// CREATE (how) name in dir; returns (status, handle).
fn create(w: &World, dir: &[u8], name: &str, how: u32, verf: [u8; 8], uid: u32) -> (u32, Vec<u8>) {
    let mut a = fh_args(dir);
    a.opaque(name.as_bytes());
    a.u32(how);
    if how == 2 {
        a.fixed(&verf);
    } else {
        a.bool(true);
        a.u32(0o644);
        for _ in 0..5 {
            a.u32(0);
        }
    }
    let r = w.call_as(localhost(), NFS, 8, uid, &a.buf);
    let mut d = Decoder::new(&r);
    let st = d.u32().expect("status");
    if st != OK {
        return (st, Vec::new());
    }
    assert!(d.bool().expect("handle follows"));
    (st, d.opaque(64).expect("fh").to_vec())
}

fn lookup(w: &World, dir: &[u8], name: &str) -> (u32, Vec<u8>) {
    let mut a = fh_args(dir);
    a.opaque(name.as_bytes());
    let r = w.call(NFS, 3, &a.buf);
    let mut d = Decoder::new(&r);
    let st = d.u32().expect("status");
    if st != OK {
        return (st, Vec::new());
    }
    (st, d.opaque(64).expect("fh").to_vec())
}

/// WRITE: (status, committed, verifier).
fn write(w: &World, fh: &[u8], offset: u64, data: &[u8], stable: u32) -> (u32, u32, Vec<u8>) {
    let mut a = fh_args(fh);
    a.u64(offset);
    a.u32(data.len() as u32);
    a.u32(stable);
    a.opaque(data);
    let r = w.call(NFS, 7, &a.buf);
    let mut d = Decoder::new(&r);
    let st = d.u32().expect("status");
    // wcc_data
    if d.bool().expect("pre") {
        d.fixed(24).expect("wcc_attr");
    }
    if d.bool().expect("post") {
        d.fixed(84).expect("fattr3");
    }
    if st != OK {
        return (st, 0, Vec::new());
    }
    assert_eq!(d.u32().expect("count"), data.len() as u32);
    let committed = d.u32().expect("committed");
    (st, committed, d.fixed(8).expect("verf").to_vec())
}

fn read(w: &World, fh: &[u8], offset: u64, count: u32) -> (u32, Vec<u8>, bool) {
    let mut a = fh_args(fh);
    a.u64(offset);
    a.u32(count);
    let r = w.call(NFS, 6, &a.buf);
    let mut d = Decoder::new(&r);
    let st = d.u32().expect("status");
    if d.bool().expect("attr") {
        d.fixed(84).expect("fattr3");
    }
    if st != OK {
        assert_eq!(d.remaining(), 0, "nothing after a failed READ's attributes");
        return (st, Vec::new(), false);
    }
    let count = d.u32().expect("count");
    let eof = d.bool().expect("eof");
    let data = d.opaque(1 << 20).expect("data").to_vec();
    assert_eq!(count as usize, data.len(), "count is the data's length");
    assert_eq!(d.remaining(), 0, "the reply ends with the data's padding");
    (st, data, eof)
}

#[test]
fn mount_then_files_round_trip() {
    let w = world();
    let (st, root) = w.mnt(localhost(), "/test/a/");
    assert_eq!(st, OK);
    assert_eq!(w.mnt(localhost(), "/test/nope").0, NOENT);

    let (st, f) = create(&w, &root, "data", 1, [0; 8], 0);
    assert_eq!(st, OK);
    assert_eq!(create(&w, &root, "data", 1, [0; 8], 0).0, EXIST, "GUARDED on an existing name");
    assert_eq!(create(&w, &root, "data", 0, [0; 8], 0).0, OK, "UNCHECKED on an existing file");

    let (st, committed, verf) = write(&w, &f, 3, b"hello", 0);
    assert_eq!((st, committed), (OK, 0), "UNSTABLE");
    assert_eq!(verf, [1, 2, 3, 4, 5, 6, 7, 8]);
    let (st, committed, _) = write(&w, &f, 8, b"!", 1);
    assert_eq!((st, committed), (OK, 2), "DATA_SYNC answered as FILE_SYNC");
    let (st, data, eof) = read(&w, &f, 0, 100);
    assert_eq!((st, eof), (OK, true));
    assert_eq!(data, b"\0\0\0hello!");
    assert_eq!(read(&w, &f, 4, 3), (OK, b"ell".to_vec(), false), "a range inside the file");
    assert_eq!(read(&w, &f, 6, 100), (OK, b"lo!".to_vec(), true), "clipped at the end");
    assert_eq!(read(&w, &f, 100, 10), (OK, Vec::new(), true), "past the end");
    assert_eq!(read(&w, &root, 0, 10).0, 21, "READ of a directory: ISDIR");

    // COMMIT returns the same verifier.
    let mut a = fh_args(&f);
    a.u64(0);
    a.u32(0);
    let r = w.call(NFS, 21, &a.buf);
    assert_eq!(status(&r), OK);
    assert_eq!(&r[r.len() - 8..], &[1, 2, 3, 4, 5, 6, 7, 8]);

    assert_eq!(lookup(&w, &root, "data").1, f, "LOOKUP finds the handle CREATE gave");
    assert_eq!(lookup(&w, &root, "missing").0, NOENT);
}

#[test]
fn exclusive_create_is_idempotent() {
    let w = world();
    let (_, root) = w.mnt(localhost(), "/test/a");
    let v = [9, 8, 7, 6, 5, 4, 3, 2];
    let (st, f1) = create(&w, &root, "x", 2, v, 0);
    assert_eq!(st, OK);
    let (st, f2) = create(&w, &root, "x", 2, v, 0);
    assert_eq!((st, &f2), (OK, &f1), "a retransmission gets the same file");
    assert_eq!(create(&w, &root, "x", 2, [1; 8], 0).0, EXIST, "another verifier");
}

#[test]
fn removal_errors_and_stale_handles() {
    let w = world();
    let (_, root) = w.mnt(localhost(), "/test/a");
    let mut a = fh_args(&root);
    a.opaque(b"d");
    sattr_none(&mut a);
    assert_eq!(status(&w.call(NFS, 9, &a.buf)), OK, "MKDIR");
    let (_, d) = lookup(&w, &root, "d");
    let (_, f) = create(&w, &d, "f", 1, [0; 8], 0);
    let mut rm = fh_args(&root);
    rm.opaque(b"d");
    assert_eq!(status(&w.call(NFS, 13, &rm.buf)), NOTEMPTY, "RMDIR of a non-empty directory");
    let mut rmf = fh_args(&d);
    rmf.opaque(b"f");
    assert_eq!(status(&w.call(NFS, 12, &rmf.buf)), OK, "REMOVE");
    assert_eq!(status(&w.call(NFS, 12, &rmf.buf)), NOENT, "REMOVE again");
    assert_eq!(status(&w.call(NFS, 1, &fh_args(&f).buf)), STALE, "GETATTR of a removed file");
    assert_eq!(status(&w.call(NFS, 13, &rm.buf)), OK, "RMDIR");
}

#[test]
fn handles_cannot_cross_exports() {
    let w = world();
    let (_, a_root) = w.mnt(localhost(), "/test/a");
    let (_, b_root) = w.mnt(localhost(), "/test/b");
    assert_eq!(status(&w.call(NFS, 1, &fh_args(&a_root).buf)), OK);
    // Export a's handle relabelled as export b's: the tag no longer matches.
    let mut forged = a_root.clone();
    forged[4..8].copy_from_slice(&b_root[4..8]);
    assert_eq!(status(&w.call(NFS, 1, &fh_args(&forged).buf)), BADHANDLE);
    assert_eq!(status(&w.call(NFS, 1, &fh_args(&[1, 2, 3]).buf)), BADHANDLE);
    // A deleted export's handles are STALE.
    w.exports.remove(1);
    assert_eq!(status(&w.call(NFS, 1, &fh_args(&a_root).buf)), STALE);
}

#[test]
fn policies_refuse_clients_read_only_and_squash() {
    let w = world();
    let other: std::net::IpAddr = "127.0.0.2".parse().expect("ip");
    assert_eq!(w.mnt(other, "/test/b").0, ACCES, "client outside the export's networks");
    let (_, b_root) = w.mnt(localhost(), "/test/b");
    assert_eq!(status(&w.call_as(other, NFS, 1, 0, &fh_args(&b_root).buf)), ACCES);
    assert_eq!(create(&w, &b_root, "f", 0, [0; 8], 0).0, ROFS, "read-only export");

    // Root squash: root acts as nobody, and the root directory (0755 root) refuses it.
    let (_, a_root) = w.mnt(localhost(), "/test/a");
    let mut e = w.exports.get(1).expect("export 1");
    let mut p = e.policy.clone();
    p.squash = Squash::Root;
    let ex = strata_nfs::Export {
        id: 1,
        path: e.path.clone(),
        fs: e.fs.clone(),
        pool_guid: e.pool_guid,
        policy: p,
        stats: None,
    };
    e = std::sync::Arc::new(ex);
    w.exports.remove(1);
    w.exports.insert(std::sync::Arc::try_unwrap(e).ok().expect("sole owner"));
    assert_eq!(create(&w, &a_root, "f", 0, [0; 8], 0).0, ACCES);
    assert_eq!(create(&w, &a_root, "f", 0, [0; 8], 1000).0, ACCES, "uid 1000 cannot write 0755 root");
}

#[test]
fn every_procedure_answers() {
    let w = world();
    let (_, root) = w.mnt(localhost(), "/test/a");
    for proc_ in 0..22u32 {
        let mut a = fh_args(&root);
        a.buf.extend_from_slice(&[0u8; 64]);
        let rec = call_record(proc_, NFS, 3, proc_, 0, 0, &a.buf);
        let reply = w.server.process(localhost(), &rec).expect("a reply");
        assert!(reply.len() >= 28, "procedure {proc_} answered");
    }
    // Unknown procedure: PROC_UNAVAIL (3).
    let rec = call_record(1, NFS, 3, 22, 0, 0, &[]);
    let reply = w.server.process(localhost(), &rec).expect("a reply");
    assert_eq!(&reply[reply.len() - 4..], &3u32.to_be_bytes());
    // NFS v2: PROG_MISMATCH (2) 3..3.
    let rec = call_record(1, NFS, 2, 0, 0, 0, &[]);
    let reply = w.server.process(localhost(), &rec).expect("a reply");
    assert_eq!(&reply[reply.len() - 12..], &[0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 3]);
}

/// A retransmission (same client, xid and arguments) of a non-idempotent call that was
/// done gets the first reply, not the error a second execution would give; another xid is
/// a new call.
#[test]
fn retransmissions_get_the_first_reply() {
    let w = world();
    let (_, root) = w.mnt(localhost(), "/test/a");
    let (st, _) = create(&w, &root, "f", 0, [0; 8], 0);
    assert_eq!(st, OK);
    let mut rm = fh_args(&root);
    rm.opaque(b"f");
    let rec = call_record(0x5eed, NFS, 3, 12, 0, 0, &rm.buf);
    let first = w.server.process(localhost(), &rec).expect("a reply");
    assert_eq!(status(&results(&first)), OK, "REMOVE");
    let again = w.server.process(localhost(), &rec).expect("a reply");
    assert_eq!(again, first, "the retransmitted REMOVE got the first reply");
    let other_client = w.server.process("127.0.0.2".parse().unwrap(), &rec).expect("a reply");
    assert_eq!(status(&results(&other_client)), NOENT, "another client's call is its own");
    let rec2 = call_record(0x5eee, NFS, 3, 12, 0, 0, &rm.buf);
    assert_eq!(status(&results(&w.server.process(localhost(), &rec2).expect("a reply"))), NOENT, "a new xid runs");
}

/// WRITEs of incompressible data to a new file on export a until one fails; its status.
fn fill(w: &World, limit: u64) -> u32 {
    let (_, root) = w.mnt(localhost(), "/test/a");
    let (st, fh) = create(w, &root, "big", 0, [0; 8], 0);
    assert_eq!(st, OK);
    let mut rng = SimRng::new(3);
    let mut off = 0u64;
    loop {
        let (st, _, _) = write(w, &fh, off, &rng.bytes(64 << 10), 0);
        if st != OK {
            return st;
        }
        off += 64 << 10;
        assert!(off < limit, "wrote {off} bytes without running out of space");
    }
}

#[test]
fn a_volume_at_its_size_limit_answers_dquot() {
    let w = world_sized(64 << 20, 2 << 20);
    assert_eq!(fill(&w, 8 << 20), DQUOT);
}

#[test]
fn a_full_pool_answers_nospc() {
    let w = world_sized(32 << 20, 0);
    assert_eq!(fill(&w, 64 << 20), NOSPC);
}

/// Requests on an export with statistics are counted by class, with the bytes they carried
/// and their errors; requests whose handle names no export are not counted anywhere.
#[test]
fn requests_are_counted_by_class() {
    use strata_stats::{OpClass, ProtocolStats};
    let w = world();
    let stats = std::sync::Arc::new(ProtocolStats::default());
    let e = w.exports.remove(1).expect("export 1");
    let counted = strata_nfs::Export {
        id: 1,
        path: e.path.clone(),
        fs: e.fs.clone(),
        pool_guid: e.pool_guid,
        policy: e.policy.clone(),
        stats: Some(stats.clone()),
    };
    w.exports.insert(counted);
    let (_, root) = w.mnt(localhost(), "/test/a");
    let (st, f) = create(&w, &root, "data", 1, [0; 8], 0);
    assert_eq!(st, OK);
    assert_eq!(write(&w, &f, 0, &[7u8; 5000], 0).0, OK);
    assert_eq!(write(&w, &f, 5000, b"!", 2).0, OK, "FILE_SYNC");
    assert_eq!(read(&w, &f, 0, 1 << 16).1.len(), 5001);
    assert_eq!(read(&w, &root, 0, 10).0, 21, "READ of a directory: ISDIR");
    let mut a = fh_args(&f);
    a.u64(0);
    a.u32(0);
    assert_eq!(status(&w.call(NFS, 21, &a.buf)), OK, "COMMIT");
    assert_eq!(status(&w.call(NFS, 1, &fh_args(&[1, 2, 3]).buf)), BADHANDLE, "counted nowhere");

    let wr = stats.snapshot(OpClass::Write);
    assert_eq!((wr.ops, wr.bytes, wr.errors), (2, 5001, 0), "{wr:?}");
    let rd = stats.snapshot(OpClass::Read);
    assert_eq!((rd.ops, rd.bytes, rd.errors), (2, 5001, 1), "{rd:?}");
    let sy = stats.snapshot(OpClass::Sync);
    assert_eq!((sy.ops, sy.bytes, sy.errors), (1, 0, 0), "{sy:?}");
    let other = stats.snapshot(OpClass::Other);
    assert_eq!((other.ops, other.errors), (1, 0), "CREATE: {other:?}");
    assert_eq!(wr.latency.count(), 2);
    assert!(wr.latency.quantile(strata_stats::P50) >= 1, "latencies are recorded");
}
