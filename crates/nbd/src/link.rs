//! A connection's byte stream, plain TCP or TLS, split into a reading half (the
//! connection's reader thread) and a writing half (whichever worker holds the
//! connection's write lock).
//!
//! Plain TCP splits with `try_clone`. A TLS session is one state machine for both
//! directions, so its halves share it under a mutex (`TlsLink::session`): the reader
//! reads ciphertext from the socket *without* the lock, then takes it to decrypt what it
//! read; a writer takes it to encrypt a reply and write the records out. Lock order: a
//! connection's write lock, then `TlsLink::session`; the reader takes only the latter.
//! The trade-off: a writer blocked on a full socket delays the reader's decryption (not
//! its socket reads); a client that does not read its replies stalls its own connection,
//! as it does over plain TCP.

use rustls::ServerConnection;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};

pub(crate) struct TlsLink {
    session: Mutex<ServerConnection>,
}

impl TlsLink {
    /// Run the TLS handshake on `sock` (the client speaks first, after our STARTTLS ACK).
    pub fn accept(config: Arc<rustls::ServerConfig>, sock: &mut TcpStream) -> io::Result<Arc<TlsLink>> {
        let mut session = ServerConnection::new(config).map_err(io::Error::other)?;
        while session.is_handshaking() {
            session.complete_io(sock)?;
        }
        // Flush what the handshake left queued (session tickets, for TLS 1.3).
        while session.wants_write() {
            session.write_tls(sock)?;
        }
        Ok(Arc::new(TlsLink { session: Mutex::new(session) }))
    }
}

/// The reading half.
pub(crate) enum LinkReader {
    Plain(TcpStream),
    Tls(TlsReader),
}

pub(crate) struct TlsReader {
    sock: TcpStream,
    link: Arc<TlsLink>,
    plain: Vec<u8>,
    pos: usize,
    raw: Vec<u8>,
}

/// Ciphertext read from the socket at a time.
const RAW_READ_BYTES: usize = 64 << 10;

impl LinkReader {
    pub fn tls(sock: TcpStream, link: Arc<TlsLink>) -> LinkReader {
        LinkReader::Tls(TlsReader { sock, link, plain: Vec::new(), pos: 0, raw: vec![0; RAW_READ_BYTES] })
    }

    /// Nothing more has arrived yet (a plain socket with no bytes waiting): the request
    /// just read is alone. Unknown for TLS (records are decrypted ahead): false.
    pub fn idle(&self) -> bool {
        match self {
            LinkReader::Plain(s) => {
                let mut n: libc::c_int = 0;
                // SAFETY: FIONREAD on an open socket writes one int.
                let r = unsafe { libc::ioctl(std::os::unix::io::AsRawFd::as_raw_fd(s), libc::FIONREAD, &mut n) };
                r == 0 && n == 0
            }
            LinkReader::Tls(_) => false,
        }
    }
}

impl Read for LinkReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            LinkReader::Plain(s) => s.read(buf),
            LinkReader::Tls(t) => t.read(buf),
        }
    }
}

impl Read for TlsReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while self.pos == self.plain.len() {
            self.plain.clear();
            self.pos = 0;
            {
                // Plaintext the session already holds: what arrived with the end of the
                // TLS handshake (a client's first option rides with its Finished).
                let mut session = self.link.session.lock().unwrap_or_else(|p| p.into_inner());
                let state = session.process_new_packets().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                take_plaintext(&mut session, state.plaintext_bytes_to_read(), &mut self.plain)?;
                if !self.plain.is_empty() {
                    break;
                }
            }
            let n = self.sock.read(&mut self.raw)?;
            if n == 0 {
                return Ok(0);
            }
            let mut session = self.link.session.lock().unwrap_or_else(|p| p.into_inner());
            let mut ciphertext = &self.raw[..n];
            let mut closed = false;
            while !ciphertext.is_empty() {
                session.read_tls(&mut ciphertext)?;
                let state = session.process_new_packets().map_err(|e| {
                    // Tell the peer why, as far as the session can.
                    let _ = session.write_tls(&mut self.sock);
                    io::Error::new(io::ErrorKind::InvalidData, e)
                })?;
                take_plaintext(&mut session, state.plaintext_bytes_to_read(), &mut self.plain)?;
                closed |= state.peer_has_closed();
            }
            // Whatever the session owes the peer (alerts, key updates).
            while session.wants_write() {
                session.write_tls(&mut self.sock)?;
            }
            if closed && self.plain.is_empty() {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.plain.len() - self.pos);
        buf[..n].copy_from_slice(&self.plain[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Move `want` bytes of decrypted data from the session to `plain`.
fn take_plaintext(session: &mut ServerConnection, want: usize, plain: &mut Vec<u8>) -> io::Result<()> {
    if want > 0 {
        let at = plain.len();
        plain.resize(at + want, 0);
        session.reader().read_exact(&mut plain[at..])?;
    }
    Ok(())
}

/// The writing half.
pub(crate) enum LinkWriter {
    Plain(TcpStream),
    Tls { sock: TcpStream, link: Arc<TlsLink> },
}

impl LinkWriter {
    /// Write all of `parts`, in order.
    pub fn send(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        match self {
            LinkWriter::Plain(s) => {
                let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
                write_all_vectored(s, &mut slices)
            }
            LinkWriter::Tls { sock, link } => {
                let mut session = link.session.lock().unwrap_or_else(|p| p.into_inner());
                for part in parts {
                    let mut rest: &[u8] = part;
                    while !rest.is_empty() {
                        // The session buffers a bounded amount of plaintext (64 KiB by
                        // default): encrypt, send, repeat.
                        let n = session.writer().write(rest)?;
                        if n == 0 && !session.wants_write() {
                            return Err(io::Error::new(io::ErrorKind::WriteZero, "TLS session takes no more data"));
                        }
                        rest = &rest[n..];
                        while session.wants_write() {
                            session.write_tls(sock)?;
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// Close the connection (both directions), so its reader wakes up.
    pub fn close(&self) {
        let s = match self {
            LinkWriter::Plain(s) => s,
            LinkWriter::Tls { sock, .. } => sock,
        };
        let _ = s.shutdown(Shutdown::Both);
    }
}

impl Write for LinkWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send(&[buf])?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Write all of `bufs` (a READ's data goes from its buffer to the socket in one `writev`).
fn write_all_vectored(w: &mut impl Write, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    // The kernel takes at most IOV_MAX (1024) pieces per call.
    const IOV_MAX: usize = 1024;
    while !bufs.is_empty() {
        match w.write_vectored(&bufs[..bufs.len().min(IOV_MAX)]) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "connection closed mid-reply")),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
