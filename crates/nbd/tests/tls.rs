//! TLS: certificates made with openssl, libnbd clients over `nbds://` with
//! `tls-certificates=DIR` (GnuTLS's layout: ca-cert.pem, client-cert.pem, client-key.pem).

mod common;
use common::*;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use strata_nbd::proto::*;
use strata_nbd::{Export, ExportTable, NbdServer, ServerConfig, TlsConfig};

fn openssl(dir: &Path, args: &[&str]) {
    run(Command::new("openssl").current_dir(dir).args(args));
}

/// A CA, a server certificate for 127.0.0.1/localhost and a client certificate, in
/// `dir`/server and `dir`/client (the client's also holding the CA).
fn make_certificates(dir: &Path) {
    require("openssl", "openssl");
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let mut ca = vec!["req", "-x509", "-days", "2", "-subj", "/CN=strata test CA", "-keyout", "ca-key.pem"];
    ca.extend_from_slice(&ec);
    ca.extend_from_slice(&["-out", "ca-cert.pem", "-addext", "basicConstraints=critical,CA:TRUE"]);
    ca.extend_from_slice(&["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
    openssl(dir, &ca);
    for (who, cn, ext) in [
        ("server", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
        ("client", "strata-test-client", "extendedKeyUsage=clientAuth\n"),
    ] {
        let mut req = vec!["req", "-subj"];
        let subj = format!("/CN={cn}");
        req.push(&subj);
        let (key, csr, cert, extfile) =
            (format!("{who}-key.pem"), format!("{who}.csr"), format!("{who}-cert.pem"), format!("{who}.ext"));
        req.extend_from_slice(&["-keyout", &key, "-out", &csr]);
        req.extend_from_slice(&ec);
        openssl(dir, &req);
        std::fs::write(dir.join(&extfile), ext).unwrap();
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-days",
                "2",
                "-in",
                &csr,
                "-CA",
                "ca-cert.pem",
                "-CAkey",
                "ca-key.pem",
                "-CAcreateserial",
                "-out",
                &cert,
                "-extfile",
                &extfile,
            ],
        );
    }
    // libnbd's directory for the client: the CA and the client's own certificate and key.
    let c = dir.join("client");
    std::fs::create_dir_all(&c).unwrap();
    std::fs::copy(dir.join("ca-cert.pem"), c.join("ca-cert.pem")).unwrap();
    std::fs::copy(dir.join("client-cert.pem"), c.join("client-cert.pem")).unwrap();
    std::fs::copy(dir.join("client-key.pem"), c.join("client-key.pem")).unwrap();
    // A client with the CA (it can check the server) but no certificate of its own.
    let a = dir.join("anonymous");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::copy(dir.join("ca-cert.pem"), a.join("ca-cert.pem")).unwrap();
}

fn tls_config(dir: &Path, verify_clients: bool) -> TlsConfig {
    TlsConfig {
        cert_pem: dir.join("server-cert.pem"),
        key_pem: dir.join("server-key.pem"),
        client_ca_pem: verify_clients.then(|| dir.join("ca-cert.pem")),
    }
}

fn tls_server(dir: &Path, bind: &str, verify_clients: bool, require: bool) -> std::io::Result<(NbdServer, Backing)> {
    let (b, lun) = file_lun(16 * MIB);
    let exports = Arc::new(ExportTable::new());
    exports.add("lun", Export { clients: strata_nbd::Cidr::loopback(), ..Export::new(lun) }).unwrap();
    let cfg = ServerConfig {
        tls: Some(tls_config(dir, verify_clients)),
        require_tls: require,
        ..ServerConfig::new(bind.parse().unwrap())
    };
    Ok((NbdServer::start(cfg, exports)?, b))
}

fn nbds(server: &NbdServer, certs: &Path) -> String {
    format!("nbds://{}/lun?tls-certificates={}", server.local_addr(), certs.display())
}

#[test]
fn mutual_tls_serves_authenticated_clients_only() {
    require("nbdinfo", "libnbd-bin");
    require("nbdcopy", "libnbd-bin");
    let dir = TempDir::new("tls");
    make_certificates(&dir.0);
    let (server, _b) = tls_server(&dir.0, "127.0.0.1:0", true, true).unwrap();
    let u = nbds(&server, &dir.0.join("client"));
    let json = stdout(Command::new("nbdinfo").arg("--json").arg(&u));
    assert!(json.contains("\"export-size\": 16777216") && json.contains("\"can_multi_conn\": true"), "{json}");
    // Data both ways, in requests larger than a TLS record and the session's buffer.
    let (src, dst) = (dir.0.join("src"), dir.0.join("dst"));
    let data: Vec<u8> = strata_testkit::SimRng::new(5).bytes(16 * MIB as usize);
    std::fs::write(&src, &data).unwrap();
    run(Command::new("nbdcopy").arg("--connections=2").arg(&src).arg(&u));
    run(Command::new("nbdcopy").arg(&u).arg(&dst));
    assert!(std::fs::read(&dst).unwrap() == data, "data read back over TLS differs");
    // No client certificate: the TLS handshake fails.
    let anon = Command::new("nbdinfo").arg(nbds(&server, &dir.0.join("anonymous"))).output().unwrap();
    assert!(!anon.status.success(), "a client without a certificate was served");
    // Plaintext: every option but STARTTLS is refused.
    let plain = Command::new("nbdinfo").arg(format!("nbd://{}/lun", server.local_addr())).output().unwrap();
    assert!(!plain.status.success(), "a plaintext client was served");
    let mut s = std::net::TcpStream::connect(server.local_addr()).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    s.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes()).unwrap();
    for option in [OPT_LIST, OPT_GO, OPT_STRUCTURED_REPLY] {
        let mut o = IHAVEOPT.to_be_bytes().to_vec();
        o.extend_from_slice(&option.to_be_bytes());
        o.extend_from_slice(&0u32.to_be_bytes());
        s.write_all(&o).unwrap();
        let mut r = [0u8; 20];
        s.read_exact(&mut r).unwrap();
        assert_eq!(u32::from_be_bytes(r[12..16].try_into().unwrap()), REP_ERR_TLS_REQD, "option {option}");
        let mut message = vec![0u8; u32::from_be_bytes(r[16..20].try_into().unwrap()) as usize];
        s.read_exact(&mut message).unwrap();
    }
    server.shutdown();
}

#[test]
fn optional_tls_serves_both() {
    require("nbdinfo", "libnbd-bin");
    let dir = TempDir::new("tls-opt");
    make_certificates(&dir.0);
    let (server, _b) = tls_server(&dir.0, "127.0.0.1:0", false, false).unwrap();
    let tls = stdout(Command::new("nbdinfo").arg("--json").arg(nbds(&server, &dir.0.join("anonymous"))));
    assert!(tls.contains("\"export-size\": 16777216"), "{tls}");
    let plain = stdout(Command::new("nbdinfo").arg("--json").arg(format!("nbd://{}/lun", server.local_addr())));
    assert!(plain.contains("\"export-size\": 16777216"), "{plain}");
    server.shutdown();
}

#[test]
fn network_listeners_need_client_certificates() {
    let dir = TempDir::new("tls-net");
    make_certificates(&dir.0);
    // TLS without client verification does not authenticate: refused off loopback.
    let err = tls_server(&dir.0, "0.0.0.0:0", false, true).err().expect("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
    // Optional TLS does not either.
    assert!(tls_server(&dir.0, "0.0.0.0:0", true, false).is_err());
    let (server, _b) = tls_server(&dir.0, "0.0.0.0:0", true, true).unwrap();
    server.shutdown();
    // Bad certificate files are reported, not panicked on.
    let bad =
        TlsConfig { cert_pem: dir.0.join("nope.pem"), key_pem: dir.0.join("server-key.pem"), client_ca_pem: None };
    assert!(bad.build().is_err());
}

/// A raw connection past the server's greeting, the client's flags sent.
fn greeted(server: &NbdServer) -> std::net::TcpStream {
    let mut s = std::net::TcpStream::connect(server.local_addr()).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    s.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes()).unwrap();
    s
}

/// Option `o` without data.
fn option(o: u32) -> Vec<u8> {
    let mut b = IHAVEOPT.to_be_bytes().to_vec();
    b.extend_from_slice(&o.to_be_bytes());
    b.extend_from_slice(&0u32.to_be_bytes());
    b
}

/// The client's first option sent in the same segment as its TLS Finished (rustls does,
/// writing buffered data as soon as the handshake allows): the server must answer it, not
/// wait on the socket for more.
#[test]
fn an_option_riding_with_the_tls_finished_is_answered() {
    let dir = TempDir::new("tls-early");
    make_certificates(&dir.0);
    let (server, _b) = tls_server(&dir.0, "127.0.0.1:0", false, true).unwrap();
    let mut s = greeted(&server);
    s.write_all(&option(OPT_STARTTLS)).unwrap();
    let mut ack = [0u8; 20];
    s.read_exact(&mut ack).unwrap();
    assert_eq!(u32::from_be_bytes(ack[12..16].try_into().unwrap()), REP_ACK);
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from_pem_file(dir.0.join("ca-cert.pem")).unwrap()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut tls = rustls::ClientConnection::new(Arc::new(config), "localhost".try_into().unwrap()).unwrap();
    // Buffered now, sent right after the Finished, in the same write.
    tls.writer().write_all(&option(OPT_STRUCTURED_REPLY)).unwrap();
    while tls.is_handshaking() {
        tls.complete_io(&mut s).unwrap();
    }
    while tls.wants_write() {
        tls.write_tls(&mut s).unwrap();
    }
    let mut reply = [0u8; 20];
    rustls::Stream::new(&mut tls, &mut s).read_exact(&mut reply).expect("the option is answered");
    assert_eq!(u32::from_be_bytes(reply[8..12].try_into().unwrap()), OPT_STRUCTURED_REPLY);
    assert_eq!(u32::from_be_bytes(reply[12..16].try_into().unwrap()), REP_ACK);
    server.shutdown();
}

/// A client that sends bytes after NBD_OPT_STARTTLS without waiting for its reply (the
/// protocol forbids it): the server's reader may hold them, the TLS handshake would never
/// see them, so the connection is refused rather than the bytes lost.
#[test]
fn bytes_sent_after_starttls_before_its_reply_end_the_connection() {
    let dir = TempDir::new("tls-pipelined");
    make_certificates(&dir.0);
    let (server, _b) = tls_server(&dir.0, "127.0.0.1:0", false, true).unwrap();
    let mut s = greeted(&server);
    let mut b = option(OPT_STARTTLS);
    // A fake TLS record right behind the option, in the same write.
    b.extend_from_slice(&[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5]);
    s.write_all(&b).unwrap();
    // The ACK may come before the refusal; after it, the server closes the connection
    // (rather than wait in a TLS handshake for a ClientHello it already took).
    s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).expect("the server closes the connection");
    assert!(rest.len() <= 20, "nothing but (at most) the STARTTLS reply: {} bytes", rest.len());
    server.shutdown();
}
