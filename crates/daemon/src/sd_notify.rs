//! Telling systemd how the daemon is doing (`Type=notify`, sd_notify(3)).
//!
//! systemd passes the address of its notification socket in `$NOTIFY_SOCKET`: a file path,
//! or "@name" for a socket in the abstract namespace. A message is one datagram of
//! newline-separated `KEY=VALUE` assignments. Without `$NOTIFY_SOCKET` (run by hand,
//! scripts/run.sh, a container without systemd) every call is a no-op returning
//! `Ok(false)`, so callers need no "am I under systemd" branch.
//!
//! The protocol is a few lines over std's `UnixDatagram`: not worth a dependency, and
//! libsystemd is not on every machine the daemon runs on. The variable is left in the
//! environment (sd_notify's `unset_environment` is not offered): removing it would race
//! with other threads reading the environment, and nothing the daemon starts sends
//! notifications.
//!
//! What the daemon should send: `ready()` once the API socket listens and the pools and
//! mounts of the state file are back (systemd then starts units ordered after strata,
//! e.g. a database on a Strata mount); `status(..)` for a one-line summary in
//! `systemctl status`; `stopping()` on SIGTERM, and `extend_timeout(..)` while a long
//! shutdown commit runs so that `TimeoutStopSec` does not SIGKILL it.

use std::ffi::OsStr;
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::Path;
use std::time::Duration;

/// Sends `state` (e.g. "READY=1", or several lines "READY=1\nSTATUS=serving") to the
/// socket in `$NOTIFY_SOCKET`. `Ok(false)` when the variable is unset or empty (not run
/// by systemd); `Ok(true)` when the datagram was sent.
pub fn notify(state: &str) -> io::Result<bool> {
    notify_env(std::env::var_os("NOTIFY_SOCKET").as_deref(), state)
}

fn notify_env(socket: Option<&OsStr>, state: &str) -> io::Result<bool> {
    match socket {
        None => Ok(false),
        Some(s) if s.is_empty() => Ok(false),
        Some(s) => notify_to(s, state).map(|()| true),
    }
}

/// Sends `state` to the notification socket `socket`: an absolute path, or "@name" for an
/// abstract socket. The environment is not read (tests, and callers holding the address).
pub fn notify_to(socket: &OsStr, state: &str) -> io::Result<()> {
    let addr = socket_addr(socket)?;
    let sender = UnixDatagram::unbound()?;
    let sent = sender.send_to_addr(state.as_bytes(), &addr)?;
    if sent != state.len() {
        // A datagram is sent whole or not at all; this would be a kernel surprise.
        return Err(io::Error::other(format!("sent {sent} of {} bytes to {}", state.len(), socket.to_string_lossy())));
    }
    Ok(())
}

fn socket_addr(socket: &OsStr) -> io::Result<SocketAddr> {
    let bytes = socket.as_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        return SocketAddr::from_abstract_name(name);
    }
    if bytes.first() == Some(&b'/') {
        return SocketAddr::from_pathname(Path::new(socket));
    }
    // systemd 253+ may also pass "vsock:CID:PORT" (for virtual machines); the daemon does
    // not run in that setting.
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("NOTIFY_SOCKET {:?}: expected an absolute path or an abstract \"@name\"", socket.to_string_lossy()),
    ))
}

/// Start-up is complete: the API answers and the state file's pools, mounts and exports
/// are back.
pub fn ready() -> io::Result<bool> {
    notify("READY=1")
}

/// Shutdown has begun (SIGTERM received): systemd shows "deactivating".
pub fn stopping() -> io::Result<bool> {
    notify("STOPPING=1")
}

/// A one-line status shown by `systemctl status strata`. Newlines would start new
/// assignments, so they are replaced by spaces.
pub fn status(message: &str) -> io::Result<bool> {
    notify(&status_line(message))
}

fn status_line(message: &str) -> String {
    format!("STATUS={}", message.replace(['\n', '\r'], " "))
}

/// Asks systemd for `extra` more time from now before the start or stop timeout fires
/// (`EXTEND_TIMEOUT_USEC`, systemd 236+): for a shutdown commit of a large dirty set, or a
/// long intent-log replay at start. Send it again before `extra` runs out.
pub fn extend_timeout(extra: Duration) -> io::Result<bool> {
    notify(&format!("EXTEND_TIMEOUT_USEC={}", extra.as_micros()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn temp_dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("strata-sd-notify-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("make temp dir");
        dir
    }

    fn receive(socket: &UnixDatagram) -> String {
        socket.set_read_timeout(Some(Duration::from_secs(5))).expect("set timeout");
        let mut buf = [0u8; 256];
        let n = socket.recv(&mut buf).expect("a datagram arrives");
        String::from_utf8(buf[..n].to_vec()).expect("UTF-8")
    }

    #[test]
    fn sends_ready_to_a_path_socket() {
        let dir = temp_dir("path");
        let path = dir.join("notify.sock");
        let systemd = UnixDatagram::bind(&path).expect("bind");
        notify_to(path.as_os_str(), "READY=1").expect("send");
        assert_eq!(receive(&systemd), "READY=1");
        // Through the environment-shaped entry point too (without touching the real,
        // process-global environment).
        assert!(notify_env(Some(path.as_os_str()), "STOPPING=1").expect("send"));
        assert_eq!(receive(&systemd), "STOPPING=1");
        std::fs::remove_dir_all(&dir).expect("remove temp dir");
    }

    #[test]
    fn sends_to_an_abstract_socket() {
        let name = format!("strata-sd-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract address");
        let systemd = UnixDatagram::bind_addr(&addr).expect("bind abstract");
        let env = OsString::from(format!("@{name}"));
        notify_to(&env, &status_line("serving 2 pools\n3 mounts")).expect("send");
        assert_eq!(receive(&systemd), "STATUS=serving 2 pools 3 mounts");
    }

    #[test]
    fn without_a_socket_nothing_is_sent() {
        assert!(!notify_env(None, "READY=1").expect("no-op"));
        assert!(!notify_env(Some(OsStr::new("")), "READY=1").expect("no-op"));
    }

    #[test]
    fn bad_addresses_are_errors() {
        let e = notify_to(OsStr::new("relative/notify.sock"), "READY=1").expect_err("relative");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("expected an absolute path"), "{e}");
        assert!(notify_to(OsStr::new("vsock:2:1234"), "READY=1").is_err());
        // Nobody listening: the caller learns it (and should log it, not fail the start).
        let dir = temp_dir("absent");
        let e = notify_to(dir.join("absent.sock").as_os_str(), "READY=1").expect_err("no listener");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        std::fs::remove_dir_all(&dir).expect("remove temp dir");
    }
}
