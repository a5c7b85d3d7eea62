//! The wire protocol with hand-made PDUs (the crate's own encoder, plain TCP): a hostile
//! data segment length ends the connection, a malformed or unknown PDU in full-feature
//! phase is answered with a Reject, NOP-Out pings are echoed, and commands outside the
//! CmdSN window are dropped while the session goes on.

mod common;

use common::{IQN, MIB};
use std::io::Read;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;
use strata_iscsi::pdu::{self, Pdu};
use strata_iscsi::text;

fn login_pdu(pairs: &[(&str, &str)]) -> Pdu {
    let mut p = Pdu::new(pdu::OP_LOGIN_REQ);
    p.bhs[0] |= 0x40;
    p.bhs[1] = 0x80 | (1 << 2) | 3; // operational -> full feature
    p.bhs[8..14].copy_from_slice(&[0x80, 0, 0, 0, 0, 9]);
    p.set32(16, 1);
    p.set32(24, 1);
    let owned: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    p.data = text::encode(&owned);
    p
}

fn read(s: &mut TcpStream) -> Pdu {
    Pdu::read(s, false, false, 1 << 20).expect("a PDU from the target")
}

/// Log in to the test target; returns the stream, CmdSN to use next and the StatSN seen.
fn logged_in(port: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    login_pdu(&[("InitiatorName", "iqn.2026-01.org.strata:raw"), ("TargetName", IQN)])
        .write(&mut s, false, false)
        .expect("send");
    let r = read(&mut s);
    assert_eq!(r.opcode(), pdu::OP_LOGIN_RESP);
    assert_eq!((r.bhs[36], r.bhs[37]), (0, 0), "login succeeded");
    s
}

fn response(s: &mut TcpStream, itt: u32) -> Pdu {
    let r = read(s);
    assert_eq!((r.opcode(), r.itt()), (pdu::OP_SCSI_RESP, itt));
    r
}

/// The (status, sense key, ASC, ASCQ) of a SCSI Response.
fn status(r: &Pdu) -> (u8, u8, u8, u8) {
    match r.data.get(2..20) {
        Some(sense) => (r.bhs[3], sense[2] & 0x0f, sense[12], sense[13]),
        None => (r.bhs[3], 0, 0, 0),
    }
}

fn tur(cmdsn: u32, itt: u32) -> Pdu {
    let mut p = Pdu::new(pdu::OP_SCSI_CMD);
    p.bhs[1] = 0x80;
    p.set32(16, itt);
    p.set32(24, cmdsn);
    p
}

#[test]
fn hostile_length_during_login_disconnects() {
    let f = common::start(1, 4 * MIB, |_, _| {});
    let mut s = TcpStream::connect(("127.0.0.1", f.port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let mut bhs = login_pdu(&[]).encode(false, false);
    bhs[5..8].copy_from_slice(&[0xff, 0xff, 0xff]); // 16 MiB of login text announced
    std::io::Write::write_all(&mut s, &bhs).expect("send");
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("answered with {n} bytes instead of closing"),
        Err(e) => panic!("not closed within 5 s ({e}): the target waits for the announced data"),
    }
    f.server.expect("server").shutdown();
}

#[test]
fn reject_nop_and_window() {
    let f = common::start(1, 4 * MIB, |_, _| {});
    let mut s = logged_in(f.port);
    // An opcode no initiator may send: Reject, with the header echoed.
    let mut bad = Pdu::new(0x1c);
    bad.set32(16, 77);
    bad.write(&mut s, false, false).expect("send");
    let r = read(&mut s);
    assert_eq!(r.opcode(), pdu::OP_REJECT);
    assert_eq!(r.bhs[2], pdu::REJECT_NOT_SUPPORTED);
    assert_eq!(&r.data[..], &bad.encode(false, false)[..48]);
    // A ping is echoed with its data.
    let mut nop = Pdu::new(pdu::OP_NOP_OUT);
    nop.bhs[0] |= 0x40;
    nop.bhs[1] = 0x80;
    nop.set32(16, 5);
    nop.set32(20, pdu::RESERVED_TAG);
    nop.set32(24, 1);
    nop.data = b"ping".to_vec();
    nop.write(&mut s, false, false).expect("send");
    let r = read(&mut s);
    assert_eq!((r.opcode(), r.itt(), &r.data[..]), (pdu::OP_NOP_IN, 5, &b"ping"[..]));
    let max_cmdsn = r.field32(32);
    // A command beyond MaxCmdSN is dropped; the next one in the window is answered.
    tur(max_cmdsn + 1, 8).write(&mut s, false, false).expect("send");
    tur(1, 9).write(&mut s, false, false).expect("send");
    let r = read(&mut s);
    assert_eq!((r.opcode(), r.itt(), r.bhs[3]), (pdu::OP_SCSI_RESP, 9, 0), "only the in-window TUR is answered");
    assert_eq!(r.field32(28), 2, "ExpCmdSN advanced past the TUR");
    f.server.expect("server").shutdown();
}

#[test]
fn shutdown_closes_sessions_and_joins() {
    let mut f = common::start(1, 4 * MIB, |_, _| {});
    let mut s = logged_in(f.port);
    // A session mid-way through a login, too.
    let mut half = TcpStream::connect(("127.0.0.1", f.port)).expect("connect");
    half.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let server = f.server.take().expect("server");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        server.shutdown();
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(10)).expect("shutdown() returned within 10 s");
    let mut buf = [0u8; 8];
    assert!(matches!(s.read(&mut buf), Ok(0)), "the full-feature session was closed");
    assert!(matches!(half.read(&mut buf), Ok(0)), "the half-logged-in connection was closed");
    assert!(TcpStream::connect(("127.0.0.1", f.port)).is_err(), "the listener was closed");
}

/// An idle session of a removed target is closed within a second and lets go of its LUN
/// (the daemon needs the pool under it back to export or destroy the pool).
#[test]
fn removing_a_target_closes_its_idle_sessions_and_frees_its_luns() {
    let f = common::start(1, 4 * MIB, |_, _| {});
    let mut s = logged_in(f.port);
    let t = f.targets.get(IQN).expect("target");
    let lun = t.luns[0].lun.clone();
    drop(t);
    assert!(f.targets.remove(IQN));
    s.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
    let mut buf = [0u8; 64];
    assert!(matches!(s.read(&mut buf), Ok(0)), "an idle session of a removed target stays open");
    let start = std::time::Instant::now();
    while Arc::strong_count(&lun) > 1 && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The fixture's pool holds the LUN's file system, not the LUN: only this test holds it.
    assert_eq!(Arc::strong_count(&lun), 1, "the session still holds the LUN");
    f.server.expect("server").shutdown();
}

#[test]
fn unit_attentions_for_a_grown_lun_and_a_lun_reset() {
    let (_pool, lun) = common::volume_lun_concrete(4 * MIB, 512, 5, false);
    let targets = std::sync::Arc::new(strata_iscsi::TargetTable::new());
    targets.add(strata_iscsi::TargetConfig::new(IQN, vec![lun.clone()])).expect("target");
    let server = strata_iscsi::IscsiServer::start(
        strata_iscsi::ServerConfig::new("127.0.0.1:0".parse().expect("addr")),
        targets,
    )
    .expect("server");
    let mut s = logged_in(server.local_addr().port());
    tur(1, 1).write(&mut s, false, false).expect("send");
    assert_eq!(status(&response(&mut s, 1)), (0, 0, 0, 0), "no attention pending at first");
    lun.grow(8 * MIB).expect("grow the LUN");
    tur(2, 2).write(&mut s, false, false).expect("send");
    assert_eq!(status(&response(&mut s, 2)), (2, 6, 0x2a, 0x09), "CAPACITY DATA HAS CHANGED");
    tur(3, 3).write(&mut s, false, false).expect("send");
    assert_eq!(status(&response(&mut s, 3)), (0, 0, 0, 0), "reported once");
    // LUN RESET (immediate TMF), then the attention, once.
    let mut tmf = Pdu::new(pdu::OP_TMF_REQ);
    tmf.bhs[0] |= 0x40;
    tmf.bhs[1] = 0x80 | 5;
    tmf.set32(16, 4);
    tmf.set32(20, pdu::RESERVED_TAG);
    tmf.set32(24, 4);
    tmf.write(&mut s, false, false).expect("send");
    let r = read(&mut s);
    assert_eq!((r.opcode(), r.bhs[2]), (pdu::OP_TMF_RESP, 0), "function complete");
    tur(4, 5).write(&mut s, false, false).expect("send");
    assert_eq!(status(&response(&mut s, 5)), (2, 6, 0x29, 0x00), "reset reported");
    tur(5, 6).write(&mut s, false, false).expect("send");
    assert_eq!(status(&response(&mut s, 6)), (0, 0, 0, 0), "reported once");
    server.shutdown();
}

#[test]
fn a_new_login_with_the_same_isid_reinstates_the_session() {
    let f = common::start(1, 4 * MIB, |_, _| {});
    let mut old = logged_in(f.port);
    let mut new = logged_in(f.port);
    let mut buf = [0u8; 8];
    assert!(matches!(old.read(&mut buf), Ok(0)), "the old connection of the same initiator and ISID was closed");
    tur(1, 1).write(&mut new, false, false).expect("send");
    assert_eq!(response(&mut new, 1).bhs[3], 0, "the new session works");
    f.server.expect("server").shutdown();
}

#[test]
fn a_long_sendtargets_answer_comes_in_continued_pdus() {
    let targets = std::sync::Arc::new(strata_iscsi::TargetTable::new());
    for i in 0..40 {
        targets
            .add(strata_iscsi::TargetConfig::new(format!("iqn.2026-01.org.strata:many-{i:02}"), vec![]))
            .expect("target");
    }
    let server = strata_iscsi::IscsiServer::start(
        strata_iscsi::ServerConfig::new("127.0.0.1:0".parse().expect("addr")),
        targets,
    )
    .expect("server");
    let mut s = TcpStream::connect(server.local_addr()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    // A discovery session whose initiator takes 512 bytes per PDU.
    login_pdu(&[
        ("InitiatorName", "iqn.2026-01.org.strata:raw"),
        ("SessionType", "Discovery"),
        ("MaxRecvDataSegmentLength", "512"),
    ])
    .write(&mut s, false, false)
    .expect("send");
    assert_eq!(read(&mut s).bhs[36], 0, "discovery login");
    let mut req = Pdu::new(pdu::OP_TEXT_REQ);
    req.bhs[0] |= 0x40;
    req.bhs[1] = 0x80;
    req.set32(16, 3);
    req.set32(20, pdu::RESERVED_TAG);
    req.set32(24, 1);
    req.data = b"SendTargets=All\0".to_vec();
    req.write(&mut s, false, false).expect("send");
    let mut all = Vec::new();
    let mut pdus = 0;
    loop {
        let r = read(&mut s);
        assert_eq!((r.opcode(), r.itt()), (pdu::OP_TEXT_RESP, 3));
        assert!(r.data.len() <= 512, "a PDU larger than the initiator takes");
        all.extend_from_slice(&r.data);
        pdus += 1;
        if r.final_bit() {
            break;
        }
        assert!(r.flags() & 0x40 != 0 && r.field32(20) != pdu::RESERVED_TAG, "C set and a TTT to continue by");
        let mut more = Pdu::new(pdu::OP_TEXT_REQ);
        more.bhs[0] |= 0x40;
        more.bhs[1] = 0x80;
        more.set32(16, 3);
        more.set32(20, r.field32(20));
        more.set32(24, 1);
        more.write(&mut s, false, false).expect("send");
    }
    let pairs = text::parse(&all).expect("the gathered answer parses");
    let names = pairs.iter().filter(|(k, _)| k == "TargetName").count();
    assert_eq!(names, 40, "every target listed, in {pdus} PDUs");
    assert!(pdus > 1);
    server.shutdown();
}

#[test]
fn an_initiator_that_stops_reading_does_not_hold_the_workers() {
    let f = common::start(1, 16 * MIB, |_, s| {
        s.workers = 2;
        s.send_timeout = Duration::from_secs(1);
    });
    // The stalled initiator: 32 READs of 4 MiB, none of the data read.
    let mut stalled = logged_in(f.port);
    for i in 0..32u32 {
        let mut read10 = Pdu::new(pdu::OP_SCSI_CMD);
        read10.bhs[1] = 0x80 | 0x40;
        read10.set32(16, 100 + i);
        read10.set32(20, 4 << 20);
        read10.set32(24, 1 + i);
        read10.bhs[32] = 0x28;
        read10.bhs[39..41].copy_from_slice(&8192u16.to_be_bytes());
        read10.write(&mut stalled, false, false).expect("send");
    }
    std::thread::sleep(Duration::from_millis(500));
    // Another session is served within a few seconds all the same.
    let mut other = TcpStream::connect(("127.0.0.1", f.port)).expect("connect");
    other.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut login = login_pdu(&[("InitiatorName", "iqn.2026-01.org.strata:other"), ("TargetName", IQN)]);
    login.bhs[13] = 10;
    login.write(&mut other, false, false).expect("send");
    assert_eq!(read(&mut other).bhs[36], 0, "login");
    let started = std::time::Instant::now();
    tur(1, 1).write(&mut other, false, false).expect("send");
    assert_eq!(response(&mut other, 1).bhs[3], 0);
    assert!(started.elapsed() < Duration::from_secs(8), "the other session waited {:?}", started.elapsed());
    f.server.expect("server").shutdown();
}
