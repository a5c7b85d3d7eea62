//! The transport between two in-process daemons: pairing through the service calls, then
//! what the mirror code relies on — requests and typed errors, raw bytes after a request,
//! a session that survives a bad frame, one that ends on an oversized one, a delete that
//! takes effect on open sessions, the grants, and the cap on unauthenticated connections.

use super::*;
use crate::service::Daemon;
use crate::ServeOptions;
use std::io::{BufWriter, Read, Write};
use std::sync::Arc;
use strata_api::{AddPeer, CreateInvitation, ErrorKind};

/// An in-process daemon with a replication listener on a free port.
pub(crate) fn daemon(tag: &str) -> Arc<Daemon> {
    let dir = std::env::temp_dir().join(format!("strata-peer-net-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut o = ServeOptions::new(dir);
    o.default_pool_bytes = 256 << 20;
    o.cache_bytes = 1 << 20;
    let d = Daemon::start(o).expect("daemon starts");
    let l = bind("127.0.0.1:0".parse().expect("an address")).expect("bind");
    spawn_listener(d.clone(), l).expect("listener");
    d
}

/// `a` joins `b` as peer "b"; `b` calls it "a" and lets it write to `default`.
pub(crate) fn pair(a: &Daemon, b: &Daemon) {
    pair_at(a, b, &b.peers.listen_addr().expect("listening").to_string());
}

/// `pair`, with `a` reaching `b` at `address` (a proxy in front of it).
pub(crate) fn pair_at(a: &Daemon, b: &Daemon, address: &str) {
    let inv = b
        .create_invitation(&CreateInvitation {
            name: Some("a".into()),
            grants: vec!["default".into()],
            expires_seconds: None,
        })
        .expect("invitation");
    a.add_peer(&AddPeer { name: "b".into(), address: address.into(), token: inv.token }).expect("pairs");
}

/// The daemons' directories (their pool images are sparse, but still).
pub(crate) fn cleanup(daemons: &[&Daemon]) {
    for d in daemons {
        let _ = std::fs::remove_dir_all(&d.opts.data_dir);
    }
}

fn ping(c: &mut PeerConnection) -> Result<PeerResponse, crate::service::ApiError> {
    c.request(&PeerRequest::Ping { version: "test".into() })
}

#[test]
fn requests_raw_bytes_errors_deletes_and_limits_over_a_peer_session() {
    let (a, b) = (daemon("a"), daemon("b"));
    pair(&a, &b);

    // A session: greeting, ping, versions both ways.
    let mut c = PeerClient::connect(&a, "b").expect("connects");
    assert_eq!(c.peer_name(), "b");
    assert_eq!(c.known_as(), "a");
    assert_eq!(c.peer_version(), VERSION);
    assert_eq!(ping(&mut c).unwrap(), PeerResponse::Pong { version: VERSION.into(), peer_version: "test".into() });
    // And the other way: b reaches a at the address a announced when pairing.
    let mut back = PeerClient::connect(&b, "a").expect("connects back");
    assert!(matches!(ping(&mut back).unwrap(), PeerResponse::Pong { .. }));

    // Raw bytes after a request, both ways, then frames again.
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    c.send_request(&PeerRequest::Echo { bytes: data.len() as u64 }).unwrap();
    assert_eq!(c.read_response().unwrap(), PeerResponse::Ok);
    {
        let mut w = BufWriter::new(c.stream());
        w.write_all(&data).unwrap();
        w.flush().unwrap();
    }
    let mut back_bytes = vec![0u8; data.len()];
    c.stream().read_exact(&mut back_bytes).unwrap();
    assert!(back_bytes == data, "the bytes came back unchanged");
    assert_eq!(c.read_response().unwrap(), PeerResponse::Ok);
    assert!(matches!(ping(&mut c).unwrap(), PeerResponse::Pong { .. }));

    // A typed error travels back, and the session goes on.
    let e = c.request(&PeerRequest::Mirror(serde_json::json!({"op": "receive"}))).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{}", e.message);
    assert!(e.message.contains("mirror message"), "{}", e.message);
    assert!(matches!(ping(&mut c).unwrap(), PeerResponse::Pong { .. }));

    // A frame that is no request: refused with a message; the session stays in step.
    let junk = b"{\"nonsense\": 1}";
    let mut frame = (junk.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(junk);
    c.stream().write_all(&frame).unwrap();
    let e = c.read_response().unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{}", e.message);
    assert!(e.message.contains("malformed"), "{}", e.message);
    assert!(matches!(ping(&mut c).unwrap(), PeerResponse::Pong { .. }));

    // The grants: what b's invitation said, from the current record.
    let a_at_b = b.peers.identity_of(&a.peers.identity.fingerprint).expect("a is b's peer");
    assert_eq!(a_at_b.name, "a");
    assert!(b.peer_may_write(&a_at_b, "default"));
    assert!(!b.peer_may_write(&a_at_b, "other"));
    let b_at_a = a.peers.identity_of(&b.peers.identity.fingerprint).expect("b is a's peer");
    assert!(!a.peer_may_write(&b_at_a, "default"), "joining grants nothing");

    // An oversized frame: refused with a message, then the session ends.
    let mut other = PeerClient::connect(&a, "b").expect("connects");
    other.stream().write_all(&((MAX_FRAME_BYTES as u32) + 1).to_be_bytes()).unwrap();
    let e = other.read_response().unwrap_err();
    assert!(e.message.contains("over the limit"), "{}", e.message);
    assert!(ping(&mut other).is_err(), "the session ended");

    // Unauthenticated connections are capped; an established session is not affected.
    let silent: Vec<_> =
        (0..MAX_HANDSHAKES).map(|_| std::net::TcpStream::connect(b.peers.listen_addr().unwrap()).unwrap()).collect();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut over = std::net::TcpStream::connect(b.peers.listen_addr().unwrap()).unwrap();
    over.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 16];
    let r = over.read(&mut buf);
    assert!(matches!(r, Ok(0)) || r.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset), "{r:?}");
    assert!(matches!(ping(&mut c).unwrap(), PeerResponse::Pong { .. }));
    drop(silent);

    // Something that is not TLS at all is closed, not answered.
    let mut http = std::net::TcpStream::connect(b.peers.listen_addr().unwrap()).unwrap();
    http.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    http.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut reply = Vec::new();
    let _ = http.read_to_end(&mut reply);
    assert!(!reply.starts_with(b"HTTP"), "{reply:?}");

    // Deleted on b: the open session is refused at its next request, new ones in the
    // handshake, and the grants are gone.
    b.delete_peer("a").unwrap();
    let e = ping(&mut c).unwrap_err();
    assert_eq!(e.kind, ErrorKind::PermissionDenied);
    assert!(e.message.contains("no longer has you as a peer"), "{}", e.message);
    let e = PeerClient::connect(&a, "b").err().expect("refused");
    assert_eq!(e.kind, ErrorKind::PermissionDenied);
    assert!(e.message.contains("refused this daemon's certificate"), "{}", e.message);
    assert!(!b.peer_may_write(&a_at_b, "default"));
    // b still knows nothing of a, but a still has b: b's connections to a still work.
    assert!(matches!(ping(&mut back).unwrap(), PeerResponse::Pong { .. }));
    cleanup(&[&a, &b]);
}

#[test]
fn pairing_refusals_leave_the_invitation_usable_until_void() {
    let (a, b) = (daemon("pa"), daemon("pb"));
    let inv = b.create_invitation(&CreateInvitation::default()).unwrap();
    let address = b.peers.listen_addr().unwrap().to_string();
    let mut wrong = token::Token::parse(&inv.token).unwrap();
    wrong.secret[0] ^= 1;
    for i in 1..=5 {
        let e = a.add_peer(&AddPeer { name: "b".into(), address: address.clone(), token: wrong.encode() }).unwrap_err();
        assert!(e.message.contains("wrong token"), "{}", e.message);
        assert_eq!(e.message.contains("now void"), i == 5, "{}", e.message);
    }
    // Five wrong proofs voided it: the right token is refused too.
    let e = a.add_peer(&AddPeer { name: "b".into(), address: address.clone(), token: inv.token }).unwrap_err();
    assert!(e.message.contains("void after 5 wrong tokens"), "{}", e.message);
    // Nobody listening there.
    let inv = b.create_invitation(&CreateInvitation::default()).unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let e = a.add_peer(&AddPeer { name: "b".into(), address: closed, token: inv.token.clone() }).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{}", e.message);
    assert!(e.message.contains("cannot reach"), "{}", e.message);
    // A daemon cannot pair with itself, and a name is unique.
    let e = b.add_peer(&AddPeer { name: "me".into(), address: address.clone(), token: inv.token.clone() }).unwrap_err();
    assert!(e.message.contains("made by this daemon"), "{}", e.message);
    a.add_peer(&AddPeer { name: "b".into(), address: address.clone(), token: inv.token }).unwrap();
    let inv = b.create_invitation(&CreateInvitation::default()).unwrap();
    let e = a.add_peer(&AddPeer { name: "b".into(), address, token: inv.token }).unwrap_err();
    assert_eq!(e.kind, ErrorKind::AlreadyExists, "{}", e.message);
    cleanup(&[&a, &b]);
}

/// Someone holding a copy of a peer's certificate but not its private key: the handshake
/// signature does not verify, and the listener refuses the session.
#[test]
fn a_peer_certificate_without_its_key_is_refused() {
    use rustls::client::ResolvesClientCert;
    use rustls::sign::CertifiedKey;
    use rustls::SignatureScheme;

    #[derive(Debug)]
    struct Fixed(Arc<CertifiedKey>);
    impl ResolvesClientCert for Fixed {
        fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
            Some(self.0.clone())
        }
        fn has_certs(&self) -> bool {
            true
        }
    }

    let (a, b) = (daemon("ka"), daemon("kb"));
    pair(&a, &b);
    let other_dir = std::env::temp_dir().join(format!("strata-peer-net-kc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&other_dir);
    std::fs::create_dir_all(&other_dir).unwrap();
    let other = Identity::load_or_make(&other_dir).unwrap();

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let wrong_key = provider.key_provider.load_private_key(other.key()).unwrap();
    let stolen = Arc::new(CertifiedKey::new(vec![a.peers.identity.cert.clone()], wrong_key));
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verify::PinnedServer::new(&b.peers.identity.fingerprint)))
        .with_client_cert_resolver(Arc::new(Fixed(stolen)));
    config.alpn_protocols = vec![ALPN_PEER.to_vec()];
    let mut sock = std::net::TcpStream::connect(b.peers.listen_addr().unwrap()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), "strata-peer".try_into().unwrap()).unwrap();
    let deadline = std::time::Instant::now() + HANDSHAKE_TIMEOUT;
    // The client's half of the handshake completes; the server's verdict comes as an alert.
    let shaken = wire::handshake(&mut conn, &mut sock, deadline);
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let greeting = shaken.map_err(|e| e.to_string()).and_then(|_| {
        wire::read_frame::<_, wire::Reply<wire::Hello>>(&mut tls, MAX_FRAME_BYTES).map_err(|e| e.to_string())
    });
    match greeting {
        Err(e) => assert!(e.contains("alert"), "{e}"),
        Ok(_) => panic!("a certificate without its key was taken"),
    }
    // The real a, with its key, is still welcome.
    assert!(matches!(ping(&mut PeerClient::connect(&a, "b").unwrap()).unwrap(), PeerResponse::Pong { .. }));
    std::fs::remove_dir_all(&other_dir).unwrap();
    cleanup(&[&a, &b]);
}

#[test]
fn a_split_session_carries_pipelined_requests_and_raw_bytes_in_order() {
    let (a, b) = (daemon("split-a"), daemon("split-b"));
    pair(&a, &b);
    let (mut tx, mut rx) = PeerClient::connect(&a, "b").expect("connects").into_split().expect("splits");
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
    let expected = data.clone();
    // The answers are read while requests are still being sent: hundreds of small answers
    // arrive in a few socket reads, the echoed megabyte between them.
    let reader = std::thread::spawn(move || {
        let pong = |rx: &mut PeerReceiver, i: usize| match rx.answer() {
            Answer::Reply(Ok(PeerResponse::Pong { peer_version, .. })) => assert_eq!(peer_version, format!("{i}")),
            other => panic!("answer {i}: {other:?}"),
        };
        for i in 0..300 {
            pong(&mut rx, i);
        }
        assert!(matches!(rx.answer(), Answer::Reply(Ok(PeerResponse::Ok))));
        let mut back = vec![0u8; expected.len()];
        rx.read_exact(&mut back).unwrap();
        assert!(back == expected, "the raw bytes came back unchanged");
        assert!(matches!(rx.answer(), Answer::Reply(Ok(PeerResponse::Ok))));
        for i in 300..600 {
            pong(&mut rx, i);
        }
        // An error answer is an answer: the session goes on.
        assert!(matches!(rx.answer(), Answer::Reply(Err(e)) if e.kind == ErrorKind::InvalidArgument));
        pong(&mut rx, 600);
        rx
    });
    let ping = |i: usize| PeerRequest::Ping { version: format!("{i}") };
    for i in 0..300 {
        tx.send(&ping(i), &[]).unwrap();
    }
    tx.send(&PeerRequest::Echo { bytes: data.len() as u64 }, &data).unwrap();
    for i in 300..600 {
        tx.send(&ping(i), &[]).unwrap();
    }
    tx.send(&PeerRequest::Mirror(serde_json::json!({"op": "nonsense"})), &[]).unwrap();
    tx.send(&ping(600), &[]).unwrap();
    let mut rx = reader.join().expect("every answer in order");
    // The sender gone, the receiver sees the end.
    drop(tx);
    assert!(matches!(rx.answer(), Answer::Ended(_)));
    cleanup(&[&a, &b]);
}
