//! The wire protocol with hand-made PDUs (the crate's own encoder, plain TCP): a hostile
//! data segment length ends the connection, a malformed or unknown PDU in full-feature
//! phase is answered with a Reject, NOP-Out pings are echoed, and commands outside the
//! CmdSN window are dropped while the session goes on.

mod common;

use common::{IQN, MIB};
use std::io::Read;
use std::net::TcpStream;
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
