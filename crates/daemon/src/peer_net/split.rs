//! A peer session in two halves, for pipelined requests: one thread sends requests without
//! waiting for their answers ([`PeerSender`]), another reads the answers as they come
//! ([`PeerReceiver`]). Used by synchronous mirrors (service/mirrors/sync_pipe.rs): a commit
//! on the source sends its frames at once instead of waiting for the append before it.
//!
//! Both halves share the one TLS state machine behind a mutex and own a clone of the socket.
//! The mutex is held while bytes are encrypted and written (the sender) or fed to TLS and
//! decrypted (the receiver), never while the receiver waits for the socket: a blocked reader
//! does not stop the sender, and a sender blocked on a full socket holds the receiver only
//! until the peer reads (the peer reads requests and writes small answers, so it always
//! does).

use super::wire::{self, FrameError, Reply};
use super::{PeerConnection, PeerRequest, PeerResponse, MAX_FRAME_BYTES};
use crate::service::ApiError;
use rustls::ClientConnection;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The sending half of a split session.
pub struct PeerSender {
    conn: Arc<Mutex<ClientConnection>>,
    sock: TcpStream,
    what: String,
}

/// The receiving half of a split session.
pub struct PeerReceiver {
    conn: Arc<Mutex<ClientConnection>>,
    sock: TcpStream,
    /// Bytes read from the socket, not yet given to TLS: `raw[at..end]`.
    raw: Box<[u8]>,
    at: usize,
    end: usize,
}

/// How an answer could not be had.
#[derive(Debug)]
pub enum Answer {
    /// The peer answered (a response, or an error reply: the session stays in step).
    Reply(Result<PeerResponse, ApiError>),
    /// The session ended (closed, cut, damaged): why.
    Ended(String),
}

impl PeerConnection {
    /// Split the session for pipelined requests (see the module comment). Answers come in
    /// the order of the requests.
    pub fn into_split(self) -> Result<(PeerSender, PeerReceiver), ApiError> {
        let what = format!("peer {}", self.peer_name());
        let tls = self.into_stream();
        let io = |e: io::Error| ApiError::internal(format!("split a session with {what}: {e}"));
        let rsock = tls.sock.try_clone().map_err(io)?;
        // The receiver waits as long as it takes: the sender's owner bounds how long an
        // answer may take and shuts the socket down when it gives up.
        rsock.set_read_timeout(None).map_err(io)?;
        let conn = Arc::new(Mutex::new(tls.conn));
        let sender = PeerSender { conn: conn.clone(), sock: tls.sock, what: what.clone() };
        let receiver = PeerReceiver { conn, sock: rsock, raw: vec![0; 16 << 10].into_boxed_slice(), at: 0, end: 0 };
        Ok((sender, receiver))
    }
}

impl PeerSender {
    /// Send `req` and then `raw` bytes (a request whose protocol carries bytes after it),
    /// as one write: nothing waits for an answer.
    pub fn send(&mut self, req: &PeerRequest, raw: &[u8]) -> Result<(), ApiError> {
        let mut buf = Vec::with_capacity(256 + raw.len());
        wire::write_frame(&mut buf, req).expect("a Vec takes every write");
        buf.extend_from_slice(raw);
        self.write_all(&buf)
            .map_err(|e| ApiError::unavailable(format!("sending to {}: {e}", self.what), "the session is made again"))
    }

    /// How long a write may wait for the peer to read.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> Result<(), ApiError> {
        self.sock.set_write_timeout(t).map_err(|e| ApiError::internal(format!("set a socket's timeout: {e}")))
    }

    /// End the session at once: the receiver's read returns.
    pub fn shutdown(&self) {
        let _ = self.sock.shutdown(Shutdown::Both);
    }
}

impl Write for PeerSender {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut c = self.conn.lock().map_err(|_| io::Error::other("the receiver panicked"))?;
        // The buffer is empty on entry (every write drains it): this takes up to the TLS
        // buffer limit, at least one byte of a non-empty `buf`.
        let n = c.writer().write(buf)?;
        while c.wants_write() {
            c.write_tls(&mut self.sock)?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for PeerSender {
    /// Say goodbye (close_notify), then end the session: the receiver sees it.
    fn drop(&mut self) {
        if let Ok(mut c) = self.conn.lock() {
            c.send_close_notify();
            let _ = self.sock.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = c.write_tls(&mut self.sock);
        }
        self.shutdown();
    }
}

impl PeerReceiver {
    /// The next answer, waiting as long as it takes (until the session ends).
    pub fn answer(&mut self) -> Answer {
        match wire::read_frame::<_, Reply<PeerResponse>>(self, MAX_FRAME_BYTES) {
            Ok(r) => Answer::Reply(r.into_result()),
            Err(FrameError::Closed) => Answer::Ended("the peer closed the session".into()),
            Err(FrameError::Malformed(e)) => {
                // The frame was read whole, but nobody knows which request it answers.
                Answer::Ended(format!("a malformed answer: {e}"))
            }
            Err(e) => Answer::Ended(e.to_string()),
        }
    }
}

impl Read for PeerReceiver {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            {
                let mut c = self.conn.lock().map_err(|_| io::Error::other("the sender panicked"))?;
                // Plaintext first; more bytes go to TLS only when it has none (so what it
                // holds stays within one socket read).
                loop {
                    match c.reader().read(out) {
                        Ok(n) => return Ok(n),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                    if self.at == self.end {
                        break;
                    }
                    let n = c.read_tls(&mut &self.raw[self.at..self.end])?;
                    self.at += n;
                    c.process_new_packets().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                }
            }
            // Outside the lock: the sender goes on while this waits.
            let n = loop {
                match self.sock.read(&mut self.raw) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    r => break r?,
                }
            };
            if n == 0 {
                // Cut without close_notify (or shut down by the sender): the end.
                return Ok(0);
            }
            (self.at, self.end) = (0, n);
        }
    }
}
