//! Frames and the TLS handshake under a deadline, shared by the client and the listener.
//!
//! A frame is a u32 big-endian length and that many bytes of JSON. A length over the
//! reader's bound is refused before anything is allocated. Each frame is written with one
//! `write_all`, so it leaves in as few TLS records as its size allows.

use crate::service::ApiError;
use rustls::{ConnectionCommon, SideData};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;
use strata_api::{ErrorInfo, ErrorKind};

/// The first frame of a peer session, from the listener.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Hello {
    pub version: String,
    /// The name the listener gave the client when they paired.
    pub your_name: String,
}

/// One answer: the response or the error.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Reply<T> {
    Ok(T),
    Error(ErrorInfo),
}

impl<T> Reply<T> {
    pub fn into_result(self) -> Result<T, ApiError> {
        match self {
            Reply::Ok(v) => Ok(v),
            Reply::Error(e) => Err(ApiError::new(e.kind, e.message, e.hint)),
        }
    }
}

impl<T> From<&ApiError> for Reply<T> {
    fn from(e: &ApiError) -> Reply<T> {
        Reply::Error(ErrorInfo { kind: e.kind, message: e.message.clone(), hint: e.hint.clone() })
    }
}

/// The only frame of a pairing session from the client.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PairRequest {
    /// The invitation's id, from the token.
    pub invitation: String,
    /// HMAC-SHA256 of the pairing transcript with the token's secret, hex (token.rs).
    pub proof: String,
    /// A name the inviting daemon may give the client if the invitation named none.
    pub name_hint: String,
    /// The port of the client's replication listener, if it has one: the inviting daemon
    /// records the client's address as the connection's IP and this port.
    pub listen_port: Option<u16>,
    pub version: String,
}

/// The inviting daemon's answer to a pairing that succeeded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PairAccepted {
    /// The name the inviting daemon gave the client.
    pub name: String,
    /// The pools the client may write to there.
    pub grants: Vec<String>,
    pub version: String,
}

/// Why a frame could not be read.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// The stream ended cleanly before a frame began.
    Closed,
    Io(io::Error),
    TooLarge(u64),
    Malformed(serde_json::Error),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Closed => write!(f, "the connection was closed"),
            FrameError::Io(e) => write!(f, "{e}"),
            FrameError::TooLarge(n) => write!(f, "a frame of {n} bytes (over the limit)"),
            FrameError::Malformed(e) => write!(f, "a malformed frame: {e}"),
        }
    }
}

pub(crate) fn write_frame<W: Write + ?Sized, T: Serialize>(w: &mut W, v: &T) -> io::Result<()> {
    let body = serde_json::to_vec(v).expect("protocol messages serialise");
    assert!(body.len() <= super::MAX_FRAME_BYTES, "a control frame of {} bytes: send bulk data raw", body.len());
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)?;
    w.flush()
}

/// Read one frame of at most `max` bytes. A frame too large is refused before its body is
/// read (the stream is then out of step: end the connection).
pub(crate) fn read_frame<R: Read + ?Sized, T: DeserializeOwned>(r: &mut R, max: usize) -> Result<T, FrameError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(FrameError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // A TLS peer that closed without close_notify, between frames.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && got == 0 => return Err(FrameError::Closed),
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    let n = u32::from_be_bytes(len) as usize;
    if n > max {
        return Err(FrameError::TooLarge(n as u64));
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body).map_err(FrameError::Io)?;
    serde_json::from_slice(&body).map_err(FrameError::Malformed)
}

/// Why a handshake failed.
#[derive(Debug)]
pub(crate) enum HandshakeError {
    TimedOut,
    Io(io::Error),
    Tls(rustls::Error),
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::TimedOut => write!(f, "the TLS handshake did not finish in time"),
            HandshakeError::Io(e) => write!(f, "{e}"),
            HandshakeError::Tls(e) => write!(f, "TLS: {e}"),
        }
    }
}

/// Set `sock`'s read and write timeouts to what is left until `deadline` (an error once it
/// has passed), so that no single read can outlast it.
pub(crate) fn bound_by(sock: &TcpStream, deadline: Instant) -> Result<(), HandshakeError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(HandshakeError::TimedOut);
    }
    sock.set_read_timeout(Some(left)).map_err(HandshakeError::Io)?;
    sock.set_write_timeout(Some(left)).map_err(HandshakeError::Io)?;
    Ok(())
}

fn timed_out(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// Drive a TLS handshake to its end, or fail by `deadline` — whatever the peer does: each
/// read is bounded by the time left, not only the whole exchange. A TLS error is sent to the
/// peer as its alert before returning (so the other side learns why).
pub(crate) fn handshake<D: SideData>(
    conn: &mut ConnectionCommon<D>,
    sock: &mut TcpStream,
    deadline: Instant,
) -> Result<(), HandshakeError> {
    loop {
        while conn.wants_write() {
            bound_by(sock, deadline)?;
            conn.write_tls(sock).map_err(|e| {
                if timed_out(&e) {
                    HandshakeError::TimedOut
                } else {
                    HandshakeError::Io(e)
                }
            })?;
        }
        if !conn.is_handshaking() {
            return Ok(());
        }
        bound_by(sock, deadline)?;
        match conn.read_tls(sock) {
            Ok(0) => return Err(HandshakeError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if timed_out(&e) => return Err(HandshakeError::TimedOut),
            Err(e) => return Err(HandshakeError::Io(e)),
        }
        if let Err(e) = conn.process_new_packets() {
            // The alert rustls queued for this error: best effort, the peer may be gone.
            let _ = bound_by(sock, deadline);
            while conn.wants_write() {
                if conn.write_tls(sock).is_err() {
                    break;
                }
            }
            return Err(HandshakeError::Tls(e));
        }
    }
}

/// The TLS error inside an I/O error from a rustls stream, if that is what it is.
pub(crate) fn tls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

/// An error for a frame the other side sent that this side cannot take.
pub(crate) fn bad_frame(what: &str, e: &FrameError) -> ApiError {
    ApiError::new(ErrorKind::InvalidArgument, format!("{what}: {e}"), "both daemons must run compatible versions")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_oversized_ones_are_refused_unread() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &Reply::Ok(super::super::PeerResponse::Ok)).unwrap();
        write_frame(&mut buf, &Hello { version: "1".into(), your_name: "a".into() }).unwrap();
        let mut r = &buf[..];
        let a: Reply<super::super::PeerResponse> = read_frame(&mut r, 1024).unwrap();
        assert!(matches!(a, Reply::Ok(super::super::PeerResponse::Ok)));
        let h: Hello = read_frame(&mut r, 1024).unwrap();
        assert_eq!(h.your_name, "a");
        assert!(matches!(read_frame::<_, Hello>(&mut r, 1024), Err(FrameError::Closed)));

        // A length over the bound: refused before a byte of the body is read.
        let mut big = (10_000u32).to_be_bytes().to_vec();
        big.extend_from_slice(b"{}");
        let mut r = &big[..];
        assert!(matches!(read_frame::<_, Hello>(&mut r, 1024), Err(FrameError::TooLarge(10_000))));
        assert_eq!(r.len(), 2, "the body was not read");

        // Truncated, and not JSON of the expected shape.
        let mut r = &buf[..6];
        assert!(matches!(read_frame::<_, Hello>(&mut r, 1024), Err(FrameError::Io(_))));
        let mut bad = 2u32.to_be_bytes().to_vec();
        bad.extend_from_slice(b"[]");
        assert!(matches!(read_frame::<_, Hello>(&mut &bad[..], 1024), Err(FrameError::Malformed(_))));
    }

    /// What a stranger (the pairing frame) or a peer can send, as random and mutated bytes:
    /// errors, never a panic, never an allocation past the bound. (A seeded loop rather
    /// than a cargo-fuzz target: the decoders are serde_json behind a length check, and a
    /// fuzz target would pull the whole daemon into the fuzz build.)
    #[test]
    fn random_and_mutated_frames_and_tokens_are_errors_not_panics() {
        use super::super::token::Token;
        use super::super::PeerRequest;
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut valid = Vec::new();
        write_frame(&mut valid, &PeerRequest::Ping { version: "0.1.0".into() }).unwrap();
        write_frame(
            &mut valid,
            &PairRequest {
                invitation: "00".repeat(8),
                proof: "ab".repeat(32),
                name_hint: "db1".into(),
                listen_port: Some(7420),
                version: "0.1.0".into(),
            },
        )
        .unwrap();
        let token = Token::new(&"cd".repeat(32)).unwrap().encode();
        for round in 0..20_000 {
            let mut bytes = if round % 2 == 0 {
                (0..next() % 96).map(|_| next() as u8).collect::<Vec<u8>>()
            } else {
                let mut v = valid.clone();
                for _ in 0..1 + next() % 4 {
                    let i = (next() as usize) % v.len();
                    v[i] = next() as u8;
                }
                v
            };
            if round % 3 == 0 {
                bytes.truncate((next() as usize) % (bytes.len() + 1));
            }
            let mut r = &bytes[..];
            while read_frame::<_, PeerRequest>(&mut r, 4096).is_ok() {}
            let mut r = &bytes[..];
            let _ = read_frame::<_, PairRequest>(&mut r, 4096);
            let mut t = token.clone().into_bytes();
            let i = (next() as usize) % t.len();
            t[i] = next() as u8;
            let _ = Token::parse(&String::from_utf8_lossy(&t));
            let _ = Token::parse(&String::from_utf8_lossy(&bytes));
        }
    }
}
