//! The server over a real TCP connection: how records arrive on the wire must not matter —
//! a large WRITE in pieces with pauses between them, records back to back in one segment,
//! several large WRITEs pipelined. (The connection reader waits for the rest of a large
//! fragment with a low-water mark; asking for a byte more than the fragment owes would
//! hang it, which these cases would show as a read timeout.)

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use strata_nfs::xdr::{Decoder, Encoder};
use strata_nfs::{HandleKey, NfsServer, ServerConfig};

const MIB: usize = 1 << 20;

struct Client {
    s: TcpStream,
    xid: u32,
}

impl Client {
    fn connect(server: &NfsServer) -> Client {
        let s = TcpStream::connect(server.local_addr()).expect("connect");
        // A hang in the server fails the test instead of stalling it.
        s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
        Client { s, xid: 1000 }
    }

    /// A call as one record (mark + body), and its xid.
    fn record(&mut self, prog: u32, proc_: u32, args: &[u8]) -> (u32, Vec<u8>) {
        self.xid += 1;
        let body = call_record(self.xid, prog, 3, proc_, 0, 0, args);
        let mut rec = (0x8000_0000u32 | body.len() as u32).to_be_bytes().to_vec();
        rec.extend_from_slice(&body);
        (self.xid, rec)
    }

    /// One reply record, mark included (as `common::results` takes it), and its xid.
    fn reply(&mut self) -> (u32, Vec<u8>) {
        let mut mark = [0u8; 4];
        self.s.read_exact(&mut mark).expect("reply record mark (a timeout means the server hung)");
        let len = (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize;
        let mut rec = mark.to_vec();
        rec.resize(4 + len, 0);
        self.s.read_exact(&mut rec[4..]).expect("reply body");
        let xid = u32::from_be_bytes(rec[4..8].try_into().expect("xid"));
        (xid, rec)
    }

    fn call(&mut self, prog: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
        let (xid, rec) = self.record(prog, proc_, args);
        self.s.write_all(&rec).expect("send");
        let (got, reply) = self.reply();
        assert_eq!(got, xid);
        results(&reply)
    }
}

fn write_args(fh: &[u8], offset: u64, data: &[u8]) -> Vec<u8> {
    let mut a = fh_args(fh);
    a.u64(offset);
    a.u32(data.len() as u32);
    a.u32(0); // UNSTABLE
    a.opaque(data);
    a.buf
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Server on 127.0.0.1, mounted /test/a, a file "big": (server, client, file handle).
fn setup() -> (NfsServer, Client, Vec<u8>) {
    let w = world();
    let server = NfsServer::start(
        ServerConfig::new("127.0.0.1:0".parse().expect("addr"), HandleKey::new([7u8; 32]), [1u8; 8]),
        w.exports.clone(),
    )
    .expect("start server");
    let mut c = Client::connect(&server);
    let mut a = Encoder::with_capacity(64);
    a.opaque(b"/test/a");
    let r = c.call(MOUNT, 1, &a.buf);
    let mut d = Decoder::new(&r);
    assert_eq!(d.u32(), Ok(0), "MNT");
    let root = d.opaque(64).expect("root handle").to_vec();
    let mut a = fh_args(&root);
    a.opaque(b"big");
    a.u32(0); // UNCHECKED
    a.bool(false); // mode
    for _ in 0..5 {
        a.u32(0); // uid, gid, size, atime, mtime: not set
    }
    let r = c.call(NFS, 8, &a.buf);
    let mut d = Decoder::new(&r);
    assert_eq!(d.u32(), Ok(0), "CREATE");
    assert!(d.bool().expect("handle follows"));
    let fh = d.opaque(64).expect("fh").to_vec();
    (server, c, fh)
}

fn read_back(c: &mut Client, fh: &[u8], offset: u64, len: usize) -> Vec<u8> {
    let mut a = fh_args(fh);
    a.u64(offset);
    a.u32(len as u32);
    let r = c.call(NFS, 6, &a.buf);
    let mut d = Decoder::new(&r);
    assert_eq!(d.u32(), Ok(0), "READ");
    if d.bool().expect("attributes follow") {
        d.fixed(84).expect("fattr3");
    }
    let _count = d.u32().expect("count");
    let _eof = d.bool().expect("eof");
    d.opaque(MIB).expect("data").to_vec()
}

#[test]
fn a_large_write_arriving_in_pieces_is_answered() {
    let (server, mut c, fh) = setup();
    let data = pattern(1, MIB);
    let (xid, rec) = c.record(NFS, 7, &write_args(&fh, 0, &data));
    // Pieces around every size the reader treats differently: under its minimum wait, a
    // few segments, more than its largest wait, and a tail shorter than the minimum.
    let cuts = [3, 100, 40_000, 300_000, rec.len() - 1000, rec.len() - 1];
    let mut at = 0;
    for cut in cuts.into_iter().chain([rec.len()]) {
        c.s.write_all(&rec[at..cut]).expect("send piece");
        c.s.flush().expect("flush");
        std::thread::sleep(Duration::from_millis(30));
        at = cut;
    }
    let (got, reply) = c.reply();
    assert_eq!(got, xid);
    assert_eq!(status(&results(&reply)), 0, "WRITE");
    assert_eq!(read_back(&mut c, &fh, 0, MIB), data);
    server.stop();
}

#[test]
fn records_back_to_back_and_pipelined_writes_are_all_answered() {
    let (server, mut c, fh) = setup();
    // Four 1 MiB WRITEs and a GETATTR in one stream, the last few bytes held back a while.
    let mut stream = Vec::new();
    let mut xids = Vec::new();
    for i in 0..4u8 {
        let (xid, rec) = c.record(NFS, 7, &write_args(&fh, i as u64 * MIB as u64, &pattern(i + 10, MIB)));
        xids.push(xid);
        stream.extend_from_slice(&rec);
    }
    let (xid, rec) = c.record(NFS, 1, &fh_args(&fh).buf);
    xids.push(xid);
    stream.extend_from_slice(&rec);
    let hold = stream.len() - 50;
    c.s.write_all(&stream[..hold]).expect("send");
    std::thread::sleep(Duration::from_millis(100));
    c.s.write_all(&stream[hold..]).expect("send the rest");
    let mut answered = Vec::new();
    for _ in 0..xids.len() {
        let (got, reply) = c.reply();
        assert_eq!(status(&results(&reply)), 0, "reply to xid {got}");
        answered.push(got);
    }
    answered.sort_unstable();
    assert_eq!(answered, xids);
    for i in 0..4u8 {
        assert_eq!(read_back(&mut c, &fh, i as u64 * MIB as u64, MIB), pattern(i + 10, MIB), "MiB {i}");
    }
    server.stop();
}

#[test]
fn a_client_that_stops_inside_a_record_is_dropped_when_it_closes() {
    let (server, mut c, fh) = setup();
    let (_, rec) = c.record(NFS, 7, &write_args(&fh, 0, &pattern(3, MIB)));
    c.s.write_all(&rec[..rec.len() / 2]).expect("send half");
    c.s.shutdown(std::net::Shutdown::Write).expect("close our side");
    // The server ends the connection (the record is cut short) rather than waiting forever.
    let mut rest = Vec::new();
    let n = c.s.read_to_end(&mut rest).expect("server closes the connection");
    assert_eq!(n, 0, "no reply to a cut record");
    // And it still serves others.
    let mut c2 = Client::connect(&server);
    let r = c2.call(NFS, 1, &fh_args(&fh).buf);
    assert_eq!(status(&r), 0, "GETATTR on a new connection");
    server.stop();
}

/// What `nfs-cp` does: a fresh connection, a few small calls, then one WRITE of 200,000
/// bytes in a single send. (The reader once hung on this against the daemon, 1 run in 5:
/// the kernel reported the socket readable before the low-water mark and a blocking `recv`
/// slept with the fragment's tail queued. In-process the timing has not hit it; the NFS
/// suite's `test_nfs_cp_many_times` is the test that reproduced it.)
#[test]
fn a_write_sent_at_once_on_a_fresh_connection_is_answered() {
    let (server, mut first, fh) = setup();
    let data = pattern(9, 200_000);
    for i in 0..50u64 {
        let mut c = Client::connect(&server);
        for _ in 0..3 {
            assert_eq!(status(&c.call(NFS, 1, &fh_args(&fh).buf)), 0, "GETATTR");
        }
        let (xid, rec) = c.record(NFS, 7, &write_args(&fh, i * 200_000, &data));
        c.s.write_all(&rec).expect("send");
        let (got, reply) = c.reply();
        assert_eq!(got, xid, "connection {i}");
        assert_eq!(status(&results(&reply)), 0, "WRITE on connection {i}");
    }
    assert_eq!(read_back(&mut first, &fh, 49 * 200_000, 200_000), data);
    server.stop();
}

/// A request whose handler panics is answered SYSTEM_ERR; the workers survive it (more
/// panicking requests than workers, then ordinary ones are still answered), its reply is
/// not cached (a retransmission runs again), and the connection goes on.
#[test]
fn a_panicking_request_ends_that_request_only() {
    let (server, mut c, fh) = setup();
    let panicking: u32 = 0x7eed_beef;
    strata_nfs::failpoint_panic_on_xid(panicking);
    for _ in 0..20 {
        // NFS NULL with the failpoint's xid, 20 times: more than the 16 workers.
        let body = call_record(panicking, NFS, 3, 0, 0, 0, &[]);
        let mut rec = (0x8000_0000u32 | body.len() as u32).to_be_bytes().to_vec();
        rec.extend_from_slice(&body);
        c.s.write_all(&rec).expect("send");
        let (xid, reply) = c.reply();
        assert_eq!(xid, panicking);
        // reply: mark, xid, REPLY, MSG_ACCEPTED, verf (flavor, empty body), accept_stat.
        let stat = u32::from_be_bytes(reply[reply.len() - 4..].try_into().expect("stat"));
        assert_eq!(stat, 5, "SYSTEM_ERR");
    }
    strata_nfs::failpoint_panic_on_xid(0);
    assert_eq!(read_back(&mut c, &fh, 0, 0), Vec::<u8>::new(), "the connection and the workers go on");
    let data = pattern(3, 4096);
    let r = c.call(NFS, 7, &write_args(&fh, 0, &data));
    assert_eq!(Decoder::new(&r).u32(), Ok(0), "WRITE after the panics");
    assert_eq!(read_back(&mut c, &fh, 0, 4096), data);
    drop(server);
}

/// Connections are capped: one past MAX_CONNECTIONS is closed at once; when one closes, a
/// new one is served again.
#[test]
fn connections_are_capped() {
    let (server, mut first, _) = setup();
    let mut open = Vec::new();
    for _ in 1..strata_nfs::MAX_CONNECTIONS {
        open.push(TcpStream::connect(server.local_addr()).expect("connect"));
    }
    let mut over = Client::connect(&server);
    let (_, rec) = over.record(NFS, 0, &[]);
    let _ = over.s.write_all(&rec);
    let mut buf = [0u8; 4];
    let refused = matches!(over.s.read(&mut buf), Ok(0) | Err(_));
    assert!(refused, "a connection past the cap was served");
    assert_eq!(first.call(NFS, 0, &[]), Vec::<u8>::new(), "the connections within the cap are served");
    drop(open.pop());
    // The server notices the close when its reader ends: retry for a while.
    let start = std::time::Instant::now();
    loop {
        let mut c = Client::connect(&server);
        let (_, rec) = c.record(NFS, 0, &[]);
        let _ = c.s.write_all(&rec);
        let mut mark = [0u8; 4];
        if c.s.read_exact(&mut mark).is_ok() {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no connection served after one closed");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
}
