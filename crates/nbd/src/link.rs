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
use std::os::unix::io::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    Plain(PlainReader),
    Tls(TlsReader),
}

/// A plain socket read through a buffer: one `recv` takes every request header (and small
/// payload) that has arrived, so a client at a queue depth of 16 costs a fraction of a
/// system call per request, and an empty buffer tells the reader a request came alone
/// without asking the kernel (`FIONREAD`) each time. Reads as large as the buffer go
/// straight into the caller's memory (a 1 MiB WRITE's payload is not copied twice).
pub(crate) struct PlainReader {
    sock: TcpStream,
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
    /// How long to poll the socket before sleeping in `recv` (`ServerConfig::poll`).
    poll: Duration,
    /// Whether the next read polls ([`LinkReader::poll_next`]).
    polling: bool,
}

/// Bytes a plain reader takes from the socket at a time.
const PLAIN_READ_BYTES: usize = 64 << 10;

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
    pub fn plain(sock: TcpStream, poll: Duration) -> LinkReader {
        LinkReader::Plain(PlainReader {
            sock,
            buf: vec![0; PLAIN_READ_BYTES].into_boxed_slice(),
            pos: 0,
            end: 0,
            poll,
            polling: true,
        })
    }

    /// Whether reads poll before sleeping: worth it when the client has every reply and
    /// its next request is imminent (queue depth 1); with requests still running, the
    /// CPU a poll takes is the workers' (on two cores, it slows the replies it waits for).
    pub fn poll_next(&mut self, on: bool) {
        if let LinkReader::Plain(p) = self {
            p.polling = on;
        }
    }

    /// Bytes read from the socket and not yet consumed. The TLS handshake runs on the
    /// socket itself, so a client that sent anything after STARTTLS before our answer
    /// (the protocol forbids it) is refused rather than having those bytes lost.
    pub fn buffered(&self) -> usize {
        match self {
            LinkReader::Plain(p) => p.end - p.pos,
            LinkReader::Tls(t) => t.plain.len() - t.pos,
        }
    }

    pub fn tls(sock: TcpStream, link: Arc<TlsLink>) -> LinkReader {
        LinkReader::Tls(TlsReader { sock, link, plain: Vec::new(), pos: 0, raw: vec![0; RAW_READ_BYTES] })
    }

    /// Nothing more has arrived (a plain reader's buffer is empty and so is the socket):
    /// the request just read is alone. The socket is asked only when the buffer is empty:
    /// a large WRITE's payload is read past the buffer, and the client's next requests
    /// may be waiting behind it (running it here would keep them waiting). Unknown for
    /// TLS (records are decrypted ahead): false.
    pub fn idle(&self) -> bool {
        match self {
            LinkReader::Plain(p) => {
                if p.pos != p.end {
                    return false;
                }
                let mut n: libc::c_int = 0;
                // SAFETY: FIONREAD on an open socket writes one int.
                let r = unsafe { libc::ioctl(p.sock.as_raw_fd(), libc::FIONREAD, &mut n) };
                r == 0 && n == 0
            }
            LinkReader::Tls(_) => false,
        }
    }
}

impl Read for LinkReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            LinkReader::Plain(p) => p.read(buf),
            LinkReader::Tls(t) => t.read(buf),
        }
    }
}

impl PlainReader {
    /// One `recv` into the buffer. With a poll time, the socket is first polled without
    /// sleeping for up to that long (non-blocking `recv`, then `sched_yield`): a client at
    /// queue depth 1 sends its next request a few tens of microseconds after our reply, and
    /// finding it awake saves the wake-up of a sleeping thread (an inter-processor
    /// interrupt: on a virtual machine, often the larger part of a request's time).
    fn fill(&mut self) -> io::Result<usize> {
        if self.polling && !self.poll.is_zero() {
            let start = std::time::Instant::now();
            loop {
                // SAFETY: `recv` writes at most `buf.len()` bytes into our own buffer.
                let n = unsafe {
                    libc::recv(self.sock.as_raw_fd(), self.buf.as_mut_ptr().cast(), self.buf.len(), libc::MSG_DONTWAIT)
                };
                if n >= 0 {
                    return Ok(n as usize);
                }
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => {}
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(e),
                }
                if start.elapsed() >= self.poll {
                    break;
                }
                // A runnable thread on this CPU (the client itself, perhaps) goes first, as
                // in the NFS server's poll.
                std::thread::yield_now();
            }
        }
        self.sock.read(&mut self.buf)
    }
}

impl Read for PlainReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.end {
            if buf.len() >= self.buf.len() {
                return self.sock.read(buf);
            }
            self.end = self.fill()?;
            self.pos = 0;
        }
        let n = buf.len().min(self.end - self.pos);
        buf[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair(poll: Duration) -> (TcpStream, LinkReader) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, LinkReader::plain(s, poll))
    }

    /// A request that comes while the reader polls, one that comes after it went to sleep,
    /// and the end of the stream are all read as such; several requests sent together are
    /// taken in one read and the reader then is not idle.
    #[test]
    fn a_polling_reader_reads_what_comes_early_late_and_together() {
        for poll in [Duration::ZERO, Duration::from_millis(5)] {
            let (mut c, mut r) = pair(poll);
            let mut b = [0u8; 4];
            for delay in [Duration::from_micros(500), Duration::from_millis(30)] {
                let mut w = c.try_clone().unwrap();
                let t = std::thread::spawn(move || {
                    std::thread::sleep(delay);
                    w.write_all(b"abcd").unwrap();
                });
                r.read_exact(&mut b).unwrap();
                assert_eq!(&b, b"abcd", "{poll:?} {delay:?}");
                assert!(r.idle());
                t.join().unwrap();
            }
            c.write_all(b"1234wxyz").unwrap();
            std::thread::sleep(Duration::from_millis(20));
            r.read_exact(&mut b).unwrap();
            assert_eq!(&b, b"1234");
            assert!(!r.idle(), "the second request is already buffered");
            assert_eq!(r.buffered(), 4);
            r.read_exact(&mut b).unwrap();
            assert_eq!(&b, b"wxyz");
            drop(c);
            assert_eq!(r.read(&mut b).unwrap(), 0, "end of stream");
        }
    }
}
