//! Peers between real daemons: pairing with a one-time invitation, pings both ways over the
//! mutually authenticated replication port, records kept across a restart, and every
//! refusal with its message — a wrong, expired or reused token, a daemon that was never
//! paired (its certificate is refused in the TLS handshake), a peer deleted on the target,
//! a target whose identity changed (fingerprint mismatch), and a client that never speaks
//! (closed after the handshake timeout while the listener serves others).

mod common;
use common::*;
use serde_json::Value;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

/// A daemon in `dir/tag`, with a replication listener unless `repl` is false.
fn daemon(dir: &Path, tag: &str, repl: bool) -> (Daemon, u16) {
    if repl {
        return start_with_repl(dir, tag);
    }
    let d_dir = dir.join(tag);
    std::fs::create_dir_all(&d_dir).unwrap();
    let mut d = Daemon { child: None, socket: d_dir.join("strata.sock"), dir: d_dir };
    d.spawn_with(&[]);
    (d, free_port())
}

/// `strata peer invite` on `d`, as JSON (token, fingerprint, ...).
fn invite(d: &Daemon, args: &[&str]) -> Value {
    let mut a = vec!["peer", "invite"];
    a.extend_from_slice(args);
    let v = d.json(&a);
    assert!(v["token"].as_str().unwrap().starts_with("strata-peer1-"), "{v}");
    v
}

fn addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

#[test]
fn two_daemons_pair_and_ping_both_ways_and_keep_it_across_a_restart() {
    let dir = temp_dir("peers-pair");
    let (a, a_port) = daemon(&dir, "a", true);
    let (mut b, b_port) = daemon(&dir, "b", true);

    // The target invites; the token is printed alone on stdout (for scripts), once.
    let (code, out, err) = b.cli(&["peer", "invite", "--name", "site-a", "--grant", "default"]);
    assert_eq!(code, 0, "{out}{err}");
    let token = out.trim().to_string();
    assert!(token.starts_with("strata-peer1-") && !token.contains(char::is_whitespace), "{out}");
    assert!(err.contains("strata peer add NAME 127.0.0.1:") && err.contains("may write to: default"), "{err}");

    // The source joins with it.
    let p = a.json(&["peer", "add", "site-b", &addr(b_port), "--invitation", &token]);
    assert_eq!(p["name"], "site-b");
    assert_eq!(p["origin"], "joined");
    assert_eq!(p["known_there_as"], "site-a");
    assert_eq!(p["granted_there"], serde_json::json!(["default"]));
    assert_eq!(p["grants"], serde_json::json!([]), "the source grants nothing by joining");
    let b_fp = p["fingerprint"].as_str().unwrap().to_string();
    assert_eq!(b_fp.len(), 64);

    // Both sides recorded each other, with the other's fingerprint and address.
    let on_b = b.json(&["peer", "show", "site-a"]);
    assert_eq!(on_b["origin"], "invited");
    assert_eq!(on_b["grants"], serde_json::json!(["default"]));
    assert_eq!(on_b["address"], addr(a_port).as_str(), "the source's listener, learnt when pairing");
    let a_fp = on_b["fingerprint"].as_str().unwrap().to_string();
    assert_ne!(a_fp, b_fp);
    let list = a.json(&["peer", "list"]);
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert!(a.ok(&["peer", "list"]).contains("site-b"));

    // Pings both ways report the other daemon's version.
    let version = env!("CARGO_PKG_VERSION");
    let s = a.json(&["peer", "show", "site-b", "--ping"]);
    assert_eq!(s["ping"]["peer_version"], version, "{s}");
    assert_eq!(s["ping"]["known_there_as"], "site-a", "{s}");
    assert_eq!(s["fingerprint"], b_fp.as_str());
    let r = b.json(&["peer", "ping", "site-a"]);
    assert_eq!(r["peer_version"], version, "{r}");
    assert_eq!(r["known_there_as"], "site-b", "{r}");
    assert!(a.ok(&["peer", "show", "site-b", "--ping"]).contains(&format!("version {version}")));

    // A restart keeps the peers (state file) and the identity (DATA_DIR/peer-*.pem).
    b.stop();
    let mode = |f: &str| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(b.dir.join("data").join(f)).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode("peer-key.pem"), 0o600);
    assert_eq!(mode("peer-cert.pem"), 0o600);
    b.spawn_with(&["--repl-port", &b_port.to_string()]);
    assert_eq!(a.json(&["peer", "ping", "site-b"])["peer_version"], version);
    assert_eq!(b.json(&["peer", "ping", "site-a"])["peer_version"], version);

    // Deleted on the source: the source has nothing to connect to, and it refuses the
    // target's certificate from now on.
    a.ok(&["peer", "delete", "site-b"]);
    a.fails(&["peer", "show", "site-b"], "no peer site-b");
    b.fails(&["peer", "ping", "site-a"], "refused this daemon's certificate");
    assert!(!b.log().contains("panicked") && !a.log().contains("panicked"));
}

#[test]
fn bad_tokens_strangers_deleted_peers_and_changed_identities_are_refused() {
    let dir = temp_dir("peers-refuse");
    let (a, _) = daemon(&dir, "a", true);
    let (mut b, b_port) = daemon(&dir, "b", true);
    let (c, _) = daemon(&dir, "c", true);
    let b_addr = addr(b_port);

    // A client that connects and never speaks holds no more than its own thread, and only
    // until the handshake timeout (10 s): the listener serves everyone else meanwhile.
    let mut silent = std::net::TcpStream::connect(("127.0.0.1", b_port)).unwrap();
    let silent_since = Instant::now();

    // No listener, no invitation; an unknown pool cannot be granted.
    let (nolisten, _) = daemon(&dir, "d", false);
    nolisten.fails(&["peer", "invite"], "no replication listener");
    b.fails(&["peer", "invite", "--grant", "nope"], "pool nope");
    b.fails(&["peer", "invite", "--name", "bad/name"], "peer name");
    b.fails(&["peer", "invite", "--expires-seconds", "601"], "1 to 600");

    // Malformed and wrong tokens: one bad character of the secret is refused by B.
    let t = invite(&b, &[])["token"].as_str().unwrap().to_string();
    a.fails(&["peer", "add", "b", &b_addr, "--invitation", "hello"], "not a peer invitation token");
    let last = t.chars().last().unwrap();
    let wrong = format!("{}{}", &t[..t.len() - 1], if last == '0' { '1' } else { '0' });
    a.fails(&["peer", "add", "b", &b_addr, "--invitation", &wrong], "wrong token");
    // A token naming another daemon's fingerprint: the client refuses B before proving anything.
    let other_fp = invite(&c, &[])["fingerprint"].as_str().unwrap().to_string();
    let parts: Vec<&str> = t.split('-').collect();
    let forged = format!("strata-peer1-{}-{}-{}", parts[2], other_fp, parts[4]);
    a.fails(&["peer", "add", "b", &b_addr, "--invitation", &forged], "fingerprint mismatch");
    assert!(a.json(&["peer", "list"]).as_array().unwrap().is_empty(), "nothing recorded by failures");
    assert!(b.json(&["peer", "list"]).as_array().unwrap().is_empty(), "nothing recorded by failures");

    // The right token (still valid after the wrong tries) pairs A; a second use is refused.
    a.ok(&["peer", "add", "b", &b_addr, "--invitation", &t]);
    c.fails(&["peer", "add", "b", &b_addr, "--invitation", &t], "already used");

    // Expired.
    let short = invite(&b, &["--expires-seconds", "1"])["token"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(1500));
    c.fails(&["peer", "add", "b", &b_addr, "--invitation", &short], "expired");

    // C pairs properly; then a daemon that was never paired but knows B's address and
    // fingerprint (D, given A's record of B) is refused in the TLS handshake.
    let t2 = invite(&b, &["--name", "c"])["token"].as_str().unwrap().to_string();
    c.ok(&["peer", "add", "b", &b_addr, "--invitation", &t2]);
    c.ok(&["peer", "ping", "b"]);
    let a_state: Value =
        serde_json::from_str(&std::fs::read_to_string(a.dir.join("data/strata.json")).unwrap()).unwrap();
    let d_dir = dir.join("e");
    std::fs::create_dir_all(d_dir.join("data")).unwrap();
    let state = serde_json::json!({"pools": [], "mounts": [], "peers": a_state["peers"]});
    std::fs::write(d_dir.join("data/strata.json"), state.to_string()).unwrap();
    let mut stranger = Daemon { child: None, socket: d_dir.join("strata.sock"), dir: d_dir };
    stranger.spawn();
    stranger.fails(&["peer", "ping", "b"], "refused this daemon's certificate");
    assert!(b.log().contains("refused a client certificate that is no paired peer's"), "{}", b.log());

    // The silent client did not hold up anything above, and was closed by the timeout.
    silent.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = [0u8; 64];
    let r = silent.read(&mut buf);
    assert!(matches!(r, Ok(0)) || r.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset), "{r:?}");
    let held = silent_since.elapsed();
    assert!(held >= Duration::from_secs(9) && held < Duration::from_secs(15), "closed after {held:?}");

    // Deleted on the target: the source can no longer connect, and is told why.
    let b_name_for_a = a.json(&["peer", "show", "b", "--ping"])["ping"]["known_there_as"].as_str().unwrap().to_string();
    b.ok(&["peer", "delete", &b_name_for_a]);
    a.fails(&["peer", "ping", "b"], "refused this daemon's certificate");
    b.fails(&["peer", "show", &b_name_for_a], "no peer");
    // Deleted on the source: nothing to connect to.
    a.ok(&["peer", "delete", "b"]);
    a.fails(&["peer", "ping", "b"], "no peer b");

    // B's identity is regenerated: C, which pinned the old one, refuses it.
    b.stop();
    std::fs::remove_file(b.dir.join("data/peer-key.pem")).unwrap();
    std::fs::remove_file(b.dir.join("data/peer-cert.pem")).unwrap();
    b.spawn_with(&["--repl-port", &b_port.to_string()]);
    c.fails(&["peer", "ping", "b"], "fingerprint mismatch");
    for d in [&a, &b, &c, &stranger] {
        assert!(!d.log().contains("panicked"), "{}", d.log());
    }
}
