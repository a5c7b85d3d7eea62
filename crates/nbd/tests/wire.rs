//! The server against a hand-written client on a raw socket: what real clients never
//! send (bad lengths, magic, flags, too many or too large options, oversized writes, a
//! payload cut short), export removal under an open connection, and the refusal to
//! listen off loopback without authentication.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;
use strata_nbd::proto::*;
use strata_nbd::{Export, ExportTable, NbdServer, ServerConfig};

fn connect(addr: SocketAddr, client_flags: u32) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    assert_eq!(u64::from_be_bytes(g[0..8].try_into().unwrap()), NBDMAGIC);
    assert_eq!(u64::from_be_bytes(g[8..16].try_into().unwrap()), IHAVEOPT);
    assert_eq!(u16::from_be_bytes(g[16..18].try_into().unwrap()), FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
    s.write_all(&client_flags.to_be_bytes()).unwrap();
    s
}

fn send_opt(s: &mut TcpStream, option: u32, data: &[u8]) {
    let mut b = IHAVEOPT.to_be_bytes().to_vec();
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b).unwrap();
}

/// (option, reply type, data)
fn opt_reply(s: &mut TcpStream) -> (u32, u32, Vec<u8>) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).unwrap();
    assert_eq!(u64::from_be_bytes(h[0..8].try_into().unwrap()), OPT_REPLY_MAGIC);
    let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
    let mut d = vec![0u8; len];
    s.read_exact(&mut d).unwrap();
    (u32::from_be_bytes(h[8..12].try_into().unwrap()), u32::from_be_bytes(h[12..16].try_into().unwrap()), d)
}

fn go_data(name: &str) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&0u16.to_be_bytes());
    d
}

/// Negotiate `name` with GO (simple replies); the reply types seen.
fn go(s: &mut TcpStream, name: &str) -> Vec<u32> {
    send_opt(s, OPT_GO, &go_data(name));
    let mut kinds = Vec::new();
    loop {
        let (o, kind, _) = opt_reply(s);
        assert_eq!(o, OPT_GO);
        kinds.push(kind);
        if kind != REP_INFO {
            return kinds;
        }
    }
}

fn request(s: &mut TcpStream, kind: u16, cookie: u64, offset: u64, length: u32) {
    let h = RequestHeader { flags: 0, kind, cookie, offset, length };
    s.write_all(&encode_request(&h)).unwrap();
}

/// (error, cookie) of a simple reply.
fn simple(s: &mut TcpStream) -> (u32, u64) {
    let mut r = [0u8; 16];
    s.read_exact(&mut r).unwrap();
    assert_eq!(u32::from_be_bytes(r[0..4].try_into().unwrap()), SIMPLE_REPLY_MAGIC);
    (u32::from_be_bytes(r[4..8].try_into().unwrap()), u64::from_be_bytes(r[8..16].try_into().unwrap()))
}

/// True if the server closes the connection (reads end) within the timeout.
fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 4096];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

const FIXED: u32 = FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES;

/// A WRITE whose client leaves mid-payload (64 KiB cut at half; 1 MiB of whole records cut
/// at an odd byte inside a record), on a file LUN and on a volume LUN.
#[test]
fn a_write_cut_short_changes_nothing() {
    for (kind, _b, lun) in luns(4 * MIB) {
        for (len, sent) in [(65536u32, 32768usize), (1 << 20, 700_001)] {
            let (server, _e) = serve(lun.clone());
            let mut s = connect(server.local_addr(), FIXED);
            assert_eq!(go(&mut s, "lun").last(), Some(&REP_ACK));
            request(&mut s, CMD_WRITE, 1, 0, len);
            s.write_all(&vec![0xff; sent]).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            assert!(closed(&mut s), "{kind}: the server ends the connection");
            drop(s);
            // The server may still be winding down: give it time to do anything it would.
            std::thread::sleep(Duration::from_millis(300));
            let mut buf = vec![1u8; len as usize];
            lun.read(0, &mut buf).unwrap();
            assert!(buf.iter().all(|&b| b == 0), "{kind}: no byte of the cut-short {len}-byte write reached the LUN");
            server.shutdown();
        }
    }
}

#[test]
fn malformed_requests_end_the_connection() {
    let (_b, lun) = file_lun(4 * MIB);
    let (server, _e) = serve(lun.clone());
    // A WRITE over the maximum payload: closed without its payload being read.
    let mut s = connect(server.local_addr(), FIXED);
    go(&mut s, "lun");
    request(&mut s, CMD_WRITE, 1, 0, MAX_PAYLOAD_BYTES + 512);
    assert!(closed(&mut s), "an oversized WRITE ends the connection");
    // A bad request magic.
    let mut s = connect(server.local_addr(), FIXED);
    go(&mut s, "lun");
    s.write_all(&[0x11; REQUEST_HEADER_BYTES]).unwrap();
    assert!(closed(&mut s), "a bad magic ends the connection");
    // Unknown commands and flags are answered, and the connection goes on.
    let mut s = connect(server.local_addr(), FIXED);
    go(&mut s, "lun");
    request(&mut s, 42, 7, 0, 512);
    assert_eq!(simple(&mut s), (EINVAL, 7));
    s.write_all(&encode_request(&RequestHeader { flags: 1 << 9, kind: CMD_READ, cookie: 8, offset: 0, length: 512 }))
        .unwrap();
    assert_eq!(simple(&mut s), (EINVAL, 8));
    // BLOCK_STATUS without a negotiated context.
    request(&mut s, CMD_BLOCK_STATUS, 9, 0, 512);
    assert_eq!(simple(&mut s), (EINVAL, 9));
    request(&mut s, CMD_READ, 10, 0, 512);
    assert_eq!(simple(&mut s), (0, 10));
    let mut data = [1u8; 512];
    s.read_exact(&mut data).unwrap();
    assert_eq!(data, [0u8; 512]);
    request(&mut s, CMD_DISC, 11, 0, 0);
    assert!(closed(&mut s), "DISC ends the connection");
    server.shutdown();
}

#[test]
fn handshake_checks_flags_lengths_and_bounds() {
    let (_b, lun) = file_lun(4 * MIB);
    let (server, _e) = serve(lun);
    let addr = server.local_addr();
    // Client flags: unknown bits, or no fixed newstyle.
    let mut s = connect(addr, FIXED | 1 << 7);
    assert!(closed(&mut s));
    let mut s = connect(addr, 0);
    assert!(closed(&mut s));
    // Bad option magic.
    let mut s = connect(addr, FIXED);
    s.write_all(&[0u8; 16]).unwrap();
    assert!(closed(&mut s));
    // Option data over the bound.
    let mut s = connect(addr, FIXED);
    let mut b = IHAVEOPT.to_be_bytes().to_vec();
    b.extend_from_slice(&OPT_LIST.to_be_bytes());
    b.extend_from_slice(&(MAX_OPTION_BYTES + 1).to_be_bytes());
    s.write_all(&b).unwrap();
    assert!(closed(&mut s), "too much option data ends the connection");
    // Replies to bad options, on one connection.
    let mut s = connect(addr, FIXED);
    send_opt(&mut s, 99, b"whatever");
    assert_eq!(opt_reply(&mut s).1, REP_ERR_UNSUP);
    send_opt(&mut s, OPT_LIST, b"x");
    assert_eq!(opt_reply(&mut s).1, REP_ERR_INVALID);
    send_opt(&mut s, OPT_STARTTLS, &[]);
    assert_eq!(opt_reply(&mut s).1, REP_ERR_POLICY, "no TLS configured");
    let mut bad_go = go_data("lun");
    bad_go.push(0);
    send_opt(&mut s, OPT_GO, &bad_go);
    assert_eq!(opt_reply(&mut s).1, REP_ERR_INVALID);
    send_opt(&mut s, OPT_INFO, &go_data("nosuch"));
    assert_eq!(opt_reply(&mut s).1, REP_ERR_UNKNOWN);
    let mut meta = go_data("lun");
    meta.truncate(7);
    meta.extend_from_slice(&0u32.to_be_bytes());
    send_opt(&mut s, OPT_SET_META_CONTEXT, &meta);
    assert_eq!(opt_reply(&mut s).1, REP_ERR_INVALID, "meta contexts need structured replies");
    send_opt(&mut s, OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(opt_reply(&mut s).1, REP_ACK);
    send_opt(&mut s, OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(opt_reply(&mut s).1, REP_ERR_INVALID, "twice");
    send_opt(&mut s, OPT_INFO, &go_data("lun"));
    let mut infos = Vec::new();
    loop {
        let (_, kind, data) = opt_reply(&mut s);
        if kind != REP_INFO {
            assert_eq!(kind, REP_ACK);
            break;
        }
        infos.push(data);
    }
    let export = infos.iter().find(|d| d[..2] == INFO_EXPORT.to_be_bytes()).expect("NBD_INFO_EXPORT");
    assert_eq!(u64::from_be_bytes(export[2..10].try_into().unwrap()), 4 * MIB);
    let bs = infos.iter().find(|d| d[..2] == INFO_BLOCK_SIZE.to_be_bytes()).expect("NBD_INFO_BLOCK_SIZE");
    assert_eq!(bs[2..6], 512u32.to_be_bytes());
    assert_eq!(bs[10..14], MAX_PAYLOAD_BYTES.to_be_bytes());
    // ABORT is acknowledged and ends the connection.
    send_opt(&mut s, OPT_ABORT, &[]);
    assert_eq!(opt_reply(&mut s).1, REP_ACK);
    assert!(closed(&mut s));
    // Too many options.
    let mut s = connect(addr, FIXED);
    for i in 0..strata_nbd::MAX_OPTIONS {
        send_opt(&mut s, 99, &[]);
        assert_eq!(opt_reply(&mut s).1, REP_ERR_UNSUP, "option {i}");
    }
    send_opt(&mut s, 99, &[]);
    assert!(closed(&mut s), "one option too many ends the connection");
    server.shutdown();
}

#[test]
fn export_name_enters_transmission_with_or_without_zeroes() {
    let (_b, lun) = file_lun(4 * MIB);
    let (server, _e) = serve(lun);
    for (flags, reply_len) in [(FIXED, 10), (FLAG_C_FIXED_NEWSTYLE, 134)] {
        let mut s = connect(server.local_addr(), flags);
        send_opt(&mut s, OPT_EXPORT_NAME, b"lun");
        let mut r = vec![0u8; reply_len];
        s.read_exact(&mut r).unwrap();
        assert_eq!(u64::from_be_bytes(r[0..8].try_into().unwrap()), 4 * MIB);
        let tflags = u16::from_be_bytes(r[8..10].try_into().unwrap());
        assert_eq!(tflags & (FLAG_HAS_FLAGS | FLAG_CAN_MULTI_CONN), FLAG_HAS_FLAGS | FLAG_CAN_MULTI_CONN);
        assert_eq!(tflags & FLAG_SEND_DF, 0, "no DF without structured replies");
        request(&mut s, CMD_FLUSH, 3, 0, 0);
        assert_eq!(simple(&mut s), (0, 3), "{reply_len}: the next bytes are a reply, not zeroes");
    }
    // An unknown name cannot be refused with an error: the connection ends.
    let mut s = connect(server.local_addr(), FIXED);
    send_opt(&mut s, OPT_EXPORT_NAME, b"nosuch");
    assert!(closed(&mut s));
    server.shutdown();
}

#[test]
fn removing_an_export_ends_its_connections_with_eshutdown() {
    let (_b, lun) = file_lun(4 * MIB);
    let (server, exports) = serve(lun);
    let mut s = connect(server.local_addr(), FIXED);
    go(&mut s, "lun");
    request(&mut s, CMD_FLUSH, 1, 0, 0);
    assert_eq!(simple(&mut s), (0, 1));
    assert!(exports.remove("lun"));
    request(&mut s, CMD_FLUSH, 2, 0, 0);
    assert_eq!(simple(&mut s), (ESHUTDOWN, 2));
    assert!(closed(&mut s), "the connection ends after ESHUTDOWN");
    // And it can no longer be opened.
    let mut s = connect(server.local_addr(), FIXED);
    assert_eq!(go(&mut s, "lun"), vec![REP_ERR_UNKNOWN]);
    // The other export is untouched.
    assert_eq!(go(&mut s, "ro").last(), Some(&REP_ACK));
    server.shutdown();
}

/// An idle client of a removed export is disconnected within a second and lets go of the
/// LUN (the daemon needs the pool under it back to export or destroy the pool).
#[test]
fn removing_an_export_closes_its_idle_connections_and_frees_the_lun() {
    let (_b, lun) = file_lun(MIB);
    let (server, exports) = serve(lun.clone());
    let mut idle = connect(server.local_addr(), FIXED);
    go(&mut idle, "lun");
    assert!(exports.remove("lun") && exports.remove("ro"));
    idle.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    assert!(closed(&mut idle), "an idle connection of a removed export stays open");
    let start = std::time::Instant::now();
    while Arc::strong_count(&lun) > 1 && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(Arc::strong_count(&lun), 1, "the connection still holds the LUN");
    server.shutdown();
}

#[test]
fn shutdown_closes_open_connections() {
    let (_b, lun) = file_lun(MIB);
    let (server, _e) = serve(lun);
    let mut idle = connect(server.local_addr(), FIXED);
    let mut serving = connect(server.local_addr(), FIXED);
    go(&mut serving, "lun");
    server.shutdown();
    assert!(closed(&mut idle) && closed(&mut serving));
    assert!(TcpStream::connect(server.local_addr()).is_err(), "the listener is closed");
}

#[test]
fn no_unauthenticated_listener_off_loopback() {
    let exports = Arc::new(ExportTable::new());
    let (_b, lun) = file_lun(MIB);
    exports.add("", Export::new(lun)).unwrap();
    let cfg = ServerConfig::new("0.0.0.0:0".parse().unwrap());
    let err = NbdServer::start(cfg.clone(), exports.clone()).err().expect("plaintext on 0.0.0.0 refused");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("insecure_allow_plaintext"), "{err}");
    let required_without_tls = ServerConfig { require_tls: true, ..ServerConfig::new("127.0.0.1:0".parse().unwrap()) };
    assert!(NbdServer::start(required_without_tls, exports.clone()).is_err());
    let server = NbdServer::start(ServerConfig { insecure_allow_plaintext: true, ..cfg }, exports).unwrap();
    server.shutdown();
}

#[test]
fn client_networks_apply_over_ipv6() {
    let exports = Arc::new(ExportTable::new());
    let (_b, lun) = file_lun(MIB);
    exports.add("local", Export::new(lun.clone())).unwrap();
    let v4_only = Export { clients: vec![strata_nbd::Cidr::parse("127.0.0.0/8").unwrap()], ..Export::new(lun.clone()) };
    exports.add("v4only", v4_only).unwrap();
    let v6_net = Export { clients: vec![strata_nbd::Cidr::parse("::1/128").unwrap()], ..Export::new(lun) };
    exports.add("v6only", v6_net).unwrap();
    let server = match NbdServer::start(ServerConfig::new("[::1]:0".parse().unwrap()), exports) {
        Ok(s) => s,
        Err(e) => panic!("cannot listen on ::1 (IPv6 loopback needed by this test): {e}"),
    };
    let mut s = connect(server.local_addr(), FIXED);
    send_opt(&mut s, OPT_LIST, &[]);
    let mut names = Vec::new();
    loop {
        let (_, kind, data) = opt_reply(&mut s);
        if kind == REP_ACK {
            break;
        }
        assert_eq!(kind, REP_SERVER);
        let n = u32::from_be_bytes(data[0..4].try_into().unwrap()) as usize;
        names.push(String::from_utf8(data[4..4 + n].to_vec()).unwrap());
    }
    assert_eq!(names, vec!["local".to_string(), "v6only".to_string()], "an IPv6 client sees what ::1 may");
    assert_eq!(go(&mut s, "v4only"), vec![REP_ERR_UNKNOWN]);
    assert_eq!(go(&mut s, "v6only").last(), Some(&REP_ACK));
    server.shutdown();
}

/// WRITEs of mixed sizes, many in flight, then a WRITE of each size again: the server
/// reuses finished requests' payload buffers, longer than the next payload and full of an
/// older one's bytes; only each request's own bytes may reach the LUN. On a file LUN and on
/// a volume LUN; odd rounds are record-aligned (whole 4 KiB records of the volume LUN).
#[test]
fn reused_payload_buffers_write_only_their_own_bytes() {
    for (kind, _b, lun) in luns(8 * MIB) {
        reused_payload_buffers(kind, lun);
    }
}

fn reused_payload_buffers(kind: &str, lun: Arc<dyn strata_lun::Lun>) {
    let (server, _e) = serve(lun.clone());
    let mut s = connect(server.local_addr(), FIXED);
    assert_eq!(go(&mut s, "lun").last(), Some(&REP_ACK));
    let mut model = vec![0u8; 8 * MIB as usize];
    let sizes = [1 << 20, 4096, 512, 65536, 1 << 20, 512, 3 << 19, 4096, 12288, 512];
    let mut cookie = 0u64;
    for round in 0..6u64 {
        let mut at = (round * 777 * 512) % (4 * MIB);
        for (i, &len) in sizes.iter().enumerate() {
            if round % 2 == 1 {
                // Up, not down: the writes of a round run at once and must not overlap.
                at = at.next_multiple_of(4096);
            }
            cookie += 1;
            let fill = (cookie as u8).wrapping_mul(37) | 1;
            let data: Vec<u8> = (0..len).map(|k| fill ^ (k as u8)).collect();
            request(&mut s, CMD_WRITE, cookie, at, len as u32);
            s.write_all(&data).unwrap();
            model[at as usize..at as usize + len].copy_from_slice(&data);
            at = (at + len as u64 + (i as u64 + 1) * 512) % (6 * MIB);
        }
        // Every reply of the round before the next: buffers go back for the next round.
        for _ in 0..sizes.len() {
            assert_eq!(simple(&mut s).0, 0, "write ok");
        }
    }
    let mut got = vec![0u8; model.len()];
    lun.read(0, &mut got).unwrap();
    let first_bad = got.iter().zip(&model).position(|(a, b)| a != b);
    assert_eq!(first_bad, None, "{kind}: the LUN holds exactly what was written");
    server.shutdown();
}
