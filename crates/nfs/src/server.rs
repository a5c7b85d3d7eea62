//! The TCP server: listeners, connections and the worker pool.
//!
//! Threads: one acceptor per listener; per connection, one reader thread that cuts the
//! byte stream into records and queues them; a shared pool of workers that decode, run and
//! answer them. A record that arrives alone (nothing of its connection running, nothing
//! more buffered: a client at queue depth 1), unless it is a large WRITE, is answered by
//! the reader itself, which saves the hand-off to a worker and back. A worker writes its reply itself, under the connection's write lock, as
//! soon as it is done: replies go out in completion order, not arrival order (RPC matches
//! them by xid), so one slow COMMIT does not hold up the READs behind it.
//!
//! Bounds: a record is at most [`MAX_RECORD_BYTES`]; a connection has at most
//! `max_in_flight` records queued or running (its reader stops reading until one
//! finishes — TCP flow control then pushes back on the client); the queue between readers
//! and workers holds `4 × workers` records. Memory is therefore bounded by
//! connections × max_in_flight × (record + reply), whatever the clients send.
//!
//! Programs answered on every listener: NFS v3 (100003), MOUNT v3 (100005) and the
//! portmapper v2 (100000), so one port can serve everything (libnfs:
//! `nfs://host/POOL/VOL?nfsport=N&mountport=N`) and a portmapper on port 111 can make us
//! findable by clients that ask it.

use crate::export::ExportTable;
use crate::handle::HandleKey;
use crate::rpc::{self, AcceptStat, Call, Credential, ReadUninit, MAX_RECORD_BYTES};
use crate::xdr::{Decoder, Encoder, XdrError};
use crate::{mount, nfs3, portmap};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{self, BufReader, Write};
use std::mem::MaybeUninit;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex};

pub const PROG_PORTMAP: u32 = 100000;
pub const PROG_NFS: u32 = 100003;
pub const PROG_MOUNT: u32 = 100005;
pub const IPPROTO_TCP: u32 = 6;

#[derive(Clone)]
pub struct ServerConfig {
    /// NFS + MOUNT (+ portmapper) listener.
    pub bind: SocketAddr,
    /// An extra portmapper-only listener (port 111 for standard clients), if wanted.
    pub portmap_bind: Option<SocketAddr>,
    /// Worker threads. Requests block on the engine (reads of the device, intent-log
    /// flushes), so there are more workers than cores: 16 keeps a queue depth of 16 busy
    /// on one connection with two cores, and costs 16 idle threads otherwise.
    pub workers: usize,
    /// Records queued or running per connection. 64 is above what clients keep in flight
    /// (Linux: 64 slots per transport by default in recent kernels, libnfs: unbounded but
    /// paced by its caller) and bounds memory at ~70 MiB per hostile connection.
    pub max_in_flight: usize,
    pub handle_key: HandleKey,
    /// WRITE/COMMIT verifier: must differ at every start of the daemon, so that clients
    /// resend UNSTABLE writes a restart may have lost.
    pub write_verifier: [u8; 8],
}

impl ServerConfig {
    pub fn new(bind: SocketAddr, handle_key: HandleKey, write_verifier: [u8; 8]) -> ServerConfig {
        ServerConfig { bind, portmap_bind: None, workers: 16, max_in_flight: 64, handle_key, write_verifier }
    }
}

/// Failpoint `nfs.dispatch.panic`: the request with this xid panics inside the server
/// (0: off). For the tests of the failure policy; never set in production.
static FAILPOINT_PANIC_XID: AtomicU32 = AtomicU32::new(0);

#[doc(hidden)]
pub fn failpoint_panic_on_xid(xid: u32) {
    FAILPOINT_PANIC_XID.store(xid, Ordering::Relaxed);
}

/// Connections served at once; one more is closed at accept (each costs a reader thread
/// and up to `max_in_flight` records of memory). Far above what database hosts open.
pub const MAX_CONNECTIONS: usize = 1024;

/// State shared by every connection and worker.
pub(crate) struct Shared {
    pub exports: Arc<ExportTable>,
    pub key: HandleKey,
    pub verifier: [u8; 8],
    /// MOUNT's list of (client, path), for DUMP; in memory (as knfsd's rmtab is advisory).
    pub mounts: Mutex<BTreeSet<(String, String)>>,
    /// Portmapper registrations: (program, version, protocol) → port.
    pub portmap: Mutex<BTreeMap<(u32, u32, u32), u32>>,
    /// (client, export) pairs already logged as refused: one warning each, not one per
    /// request (bounded: at most REFUSALS_LOGGED remembered).
    refusals: Mutex<HashSet<(IpAddr, u32)>>,
    stopping: AtomicBool,
    conns: Mutex<Vec<TcpStream>>,
    /// Replies of non-idempotent calls, for retransmissions (drc.rs).
    pub replies: crate::drc::ReplyCache,
    /// Connections whose reader runs (at most MAX_CONNECTIONS).
    live_conns: AtomicUsize,
}

const REFUSALS_LOGGED: usize = 4096;

impl Shared {
    /// Log a refused client, once per client and export.
    pub fn log_refusal(&self, peer: IpAddr, export_id: u32, what: &str) {
        let mut seen = self.refusals.lock().expect("refusal log");
        if seen.len() < REFUSALS_LOGGED && seen.insert((peer, export_id)) {
            tracing::warn!(client = %peer, export = export_id, "NFS client refused: {what} (not in the export's client networks)");
        }
    }
}

/// One decoded call, as the program handlers see it.
pub(crate) struct Request<'a> {
    pub xid: u32,
    pub proc_: u32,
    pub cred: Credential,
    pub args: Decoder<'a>,
    pub peer: IpAddr,
    pub shared: &'a Shared,
    /// The statistics of the export the request's (first) file handle resolved to, set by
    /// `nfs3::resolve_bytes`; the request is counted there (nfs3::dispatch).
    pub stats: std::cell::OnceCell<Arc<strata_stats::ProtocolStats>>,
    /// Data the request carried (READ, WRITE), for the statistics.
    pub io_bytes: u64,
}

impl Request<'_> {
    /// An accepted SUCCESS reply header, with room for `capacity` bytes of results.
    pub fn reply(&self, capacity: usize) -> Encoder {
        rpc::accepted_reply(self.xid, AcceptStat::Success, capacity)
    }
}

/// What a handler returns: a reply, or "the arguments did not decode" (GARBAGE_ARGS).
pub(crate) type Handled = Result<Encoder, XdrError>;

struct Conn {
    peer: SocketAddr,
    writer: Mutex<TcpStream>,
    /// Replies waiting for whoever holds `writer` (see [`send_reply`]).
    /// (reply, counted in `in_flight`).
    pending: Mutex<std::collections::VecDeque<(rpc::Reply, bool)>>,
    in_flight: Mutex<usize>,
    done: Condvar,
}

struct Job {
    conn: Arc<Conn>,
    record: Vec<u8>,
}

/// A running server. Dropping it does not stop it; call [`NfsServer::stop`].
pub struct NfsServer {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    portmap_addr: Option<SocketAddr>,
}

impl NfsServer {
    pub fn start(cfg: ServerConfig, exports: Arc<ExportTable>) -> io::Result<NfsServer> {
        assert!(cfg.workers > 0 && cfg.max_in_flight > 0, "at least one worker and one request in flight");
        let listener = TcpListener::bind(cfg.bind)?;
        let local_addr = listener.local_addr()?;
        let pm_listener = cfg.portmap_bind.map(TcpListener::bind).transpose()?;
        let portmap_addr = pm_listener.as_ref().map(|l| l.local_addr()).transpose()?;
        let port = local_addr.port() as u32;
        let mut table = BTreeMap::new();
        table.insert((PROG_NFS, 3, IPPROTO_TCP), port);
        table.insert((PROG_MOUNT, 3, IPPROTO_TCP), port);
        table.insert((PROG_PORTMAP, 2, IPPROTO_TCP), portmap_addr.map(|a| a.port() as u32).unwrap_or(port));
        let shared = Arc::new(Shared {
            exports,
            key: cfg.handle_key.clone(),
            verifier: cfg.write_verifier,
            mounts: Mutex::new(BTreeSet::new()),
            portmap: Mutex::new(table),
            refusals: Mutex::new(HashSet::new()),
            stopping: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
            replies: Default::default(),
            live_conns: AtomicUsize::new(0),
        });
        let (tx, rx) = sync_channel::<Job>(cfg.workers * 4);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..cfg.workers {
            let (rx, shared) = (rx.clone(), shared.clone());
            std::thread::Builder::new().name(format!("nfs-worker-{i}")).spawn(move || worker(rx, shared))?;
        }
        for l in std::iter::once(listener).chain(pm_listener) {
            let (tx, shared) = (tx.clone(), shared.clone());
            let max = cfg.max_in_flight;
            std::thread::Builder::new().name("nfs-accept".into()).spawn(move || acceptor(l, tx, shared, max))?;
        }
        tracing::info!(listen = %local_addr, portmap = ?portmap_addr, "NFSv3 server ready");
        Ok(NfsServer { shared, local_addr, portmap_addr })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn portmap_addr(&self) -> Option<SocketAddr> {
        self.portmap_addr
    }

    /// Stop accepting and close every connection. Workers end when their queue drains.
    pub fn stop(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        for c in self.shared.conns.lock().expect("connections").drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
        // Wake the acceptors blocked in accept().
        for a in std::iter::once(self.local_addr).chain(self.portmap_addr) {
            let _ = TcpStream::connect(a);
        }
    }
}

fn acceptor(l: TcpListener, tx: SyncSender<Job>, shared: Arc<Shared>, max_in_flight: usize) {
    for s in l.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let s = match s {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("NFS accept: {e}");
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
        };
        let (Ok(peer), Ok(read_half)) = (s.peer_addr(), s.try_clone()) else { continue };
        if shared.live_conns.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            shared.live_conns.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(client = %peer, "NFS connection refused: {MAX_CONNECTIONS} connections are open");
            let _ = s.shutdown(Shutdown::Both);
            continue;
        }
        let _ = s.set_nodelay(true);
        if let Ok(c) = s.try_clone() {
            let mut conns = shared.conns.lock().expect("connections");
            // Forget closed connections now and then, so the list stays as long as the live ones.
            if conns.len() > 64 {
                conns.retain(|c| c.peer_addr().is_ok());
            }
            conns.push(c);
        }
        let conn = Arc::new(Conn {
            peer,
            writer: Mutex::new(s),
            pending: Mutex::default(),
            in_flight: Mutex::new(0),
            done: Condvar::new(),
        });
        let (tx, for_reader) = (tx.clone(), shared.clone());
        let spawned = std::thread::Builder::new()
            .name("nfs-conn".into())
            .spawn(move || reader(read_half, conn, tx, for_reader, max_in_flight));
        if let Err(e) = spawned {
            // The reader never ran, so its guard never took the count back.
            shared.live_conns.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(client = %peer, "NFS connection dropped: cannot start its reader: {e}");
        }
    }
}

/// Largest record the reader answers itself (see `reader`): every request but a large WRITE.
const INLINE_RECORD_MAX: usize = 64 << 10;

/// Most a reader waits to gather before it reads (`SO_RCVLOWAT`).
const LOWAT_MAX: usize = 256 << 10;
/// Less than this still owed is read as it comes (the wait costs two system calls).
const LOWAT_MIN: usize = 32 << 10;

/// A connection's receiving side that, told how much of a fragment is still owed, waits
/// until that much (up to [`LOWAT_MAX`]) has arrived before it reads: a 1 MiB WRITE then
/// costs the reader a few wakeups instead of one per segment, each of which fought the
/// sender's softirq for the socket lock (perf: 12 % of a sequential write's samples spun in
/// `sk_wait_data`).
///
/// The wait is a `poll` on the low-water mark followed by a `recv` that never sleeps
/// (`MSG_DONTWAIT`); never a blocking `recv` with the mark set. The kernel reports the
/// socket readable *before* the mark is reached when its receive window has shrunk below
/// a segment (`tcp_epollin_ready`); a blocking `recv` then copies what is there and sleeps
/// for the rest of its target, but the wakeup for newly arrived data comes only once the
/// *uncopied* data reaches the mark (`tcp_data_ready`), which the fragment's tail may never
/// do. One `nfs-cp` in five hung that way on a daemon under test.
struct SocketIn {
    stream: TcpStream,
    /// Bytes of the current fragment not yet read from the socket (0: none expected).
    want: usize,
    /// `SO_RCVLOWAT` as last set.
    lowat: usize,
    /// Poll for the next request a little before sleeping (see [`SPIN`]).
    spin: bool,
}

/// How long a reader that just answered a request itself polls for the next one before it
/// sleeps. A client with one request in flight sends the next one a few tens of µs after
/// the reply; a reader asleep by then is woken by an inter-processor interrupt, which on a
/// VM costs more than the request (hand runs, 16 KiB QD 1: 25 µs p50 with client and
/// daemon on one vCPU, 84 µs on two). Each poll is a non-blocking `recv` and a
/// `sched_yield`, so a runnable thread on this CPU (the client itself, perhaps) goes first.
const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

impl SocketIn {
    fn fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.stream)
    }

    /// Set the low-water mark to `bytes`; false if the kernel refused (then wait no more).
    fn set_lowat(&mut self, bytes: usize) -> bool {
        if bytes == self.lowat {
            return true;
        }
        let v = bytes as libc::c_int;
        // SAFETY: a valid socket descriptor and a c_int option value of the size passed.
        let rc = unsafe {
            libc::setsockopt(
                self.fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        self.lowat = if rc == 0 { bytes } else { 0 };
        rc == 0
    }

    /// Block until `bytes` can be read at once, the peer closes, or the socket fails
    /// (the `recv` that follows then reports which) — or until the kernel says it is
    /// readable sooner (see the type's comment). False if the mark could not be set: then
    /// nothing was waited for and the mark is 1.
    fn wait_for(&mut self, bytes: usize) -> bool {
        if !self.set_lowat(bytes) {
            self.set_lowat(1);
            return false;
        }
        let mut p = libc::pollfd { fd: self.fd(), events: libc::POLLIN, revents: 0 };
        loop {
            // SAFETY: one valid pollfd.
            let rc = unsafe { libc::poll(&mut p, 1, -1) };
            if rc >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return true;
            }
        }
    }

    /// `recv` into `buf` what is there now (`MSG_DONTWAIT`: `WouldBlock` if nothing is) or
    /// sleeping until something is (flags 0).
    fn recv(&mut self, buf: &mut [MaybeUninit<u8>], flags: libc::c_int) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of its length for the duration of the call;
        // recv writes at most that many bytes and returns how many.
        let n = unsafe { libc::recv(self.fd(), buf.as_mut_ptr().cast(), buf.len(), flags) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((n as usize).min(buf.len()))
    }

    fn recv_now(&mut self, buf: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
        self.recv(buf, libc::MSG_DONTWAIT)
    }
}

impl SocketIn {
    /// What arrives within [`SPIN`], if the reader asked to poll; `None`: sleep for it.
    fn spin_for_next(&mut self, buf: &mut [MaybeUninit<u8>]) -> io::Result<Option<usize>> {
        if !std::mem::take(&mut self.spin) {
            return Ok(None);
        }
        let start = std::time::Instant::now();
        loop {
            match self.recv_now(buf) {
                Ok(n) => return Ok(Some(n)),
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                Err(e) => return Err(e),
            }
            if start.elapsed() >= SPIN {
                return Ok(None);
            }
            // SAFETY: no arguments; yields this thread's CPU to any runnable thread.
            unsafe { libc::sched_yield() };
        }
    }
}

impl io::Read for SocketIn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: initialized bytes are valid MaybeUninit<u8>s; read_uninit only writes
        // initialized bytes into them.
        let buf = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<MaybeUninit<u8>>(), buf.len()) };
        self.read_uninit(buf)
    }
}

// SAFETY: every path ends in `recv`, which writes the n <= buf.len() bytes it returns.
unsafe impl ReadUninit for SocketIn {
    fn read_uninit(&mut self, buf: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
        // Never more than the fragment still owes: what follows may be the next request,
        // which the client sends only after this one's reply.
        let gather = self.want.min(buf.len()).min(LOWAT_MAX);
        let n = if gather >= LOWAT_MIN && self.wait_for(gather) {
            loop {
                match self.recv_now(buf) {
                    // Readable said something is there (or the end, or an error), so this
                    // is rare: wait again.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.wait_for(gather);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    r => break r?,
                }
            }
        } else {
            // A blocking recv must not see a mark left from the last fragment.
            if self.lowat != 1 {
                self.set_lowat(1);
            }
            match self.spin_for_next(buf)? {
                Some(n) => n,
                None => self.recv(buf, 0)?,
            }
        };
        self.want = self.want.saturating_sub(n);
        Ok(n)
    }
}

// SAFETY: bytes come from the buffer (copied, initialized) or from SocketIn's read_uninit.
unsafe impl ReadUninit for BufReader<SocketIn> {
    fn read_uninit(&mut self, buf: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
        // As BufReader::read: a read as large as the buffer bypasses it when it is empty.
        if self.buffer().is_empty() && buf.len() >= self.capacity() {
            return self.get_mut().read_uninit(buf);
        }
        let have = io::BufRead::fill_buf(self)?;
        let n = have.len().min(buf.len());
        for (d, s) in buf[..n].iter_mut().zip(have) {
            *d = MaybeUninit::new(*s);
        }
        io::BufRead::consume(self, n);
        Ok(n)
    }
}

fn reader(stream: TcpStream, conn: Arc<Conn>, tx: SyncSender<Job>, shared: Arc<Shared>, max_in_flight: usize) {
    /// The connection counts against MAX_CONNECTIONS until its reader ends, however it ends.
    struct Live(Arc<Shared>);
    impl Drop for Live {
        fn drop(&mut self) {
            self.0.live_conns.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let _live = Live(shared.clone());
    let mut r = BufReader::with_capacity(64 << 10, SocketIn { stream, want: 0, lowat: 1, spin: false });
    // What the socket still owes of a fragment: its length less what the buffer holds.
    let expect = |r: &mut BufReader<SocketIn>, len: usize| {
        let owed = len.saturating_sub(r.buffer().len());
        r.get_mut().want = owed;
    };
    loop {
        let record = match rpc::read_record_expecting(&mut r, MAX_RECORD_BYTES, expect) {
            Ok(Some(rec)) => rec,
            Ok(None) => break,
            Err(e) => {
                if e.kind() == io::ErrorKind::InvalidData {
                    tracing::warn!(client = %conn.peer, "NFS connection closed: {e}");
                }
                break;
            }
        };
        {
            let mut n = conn.in_flight.lock().expect("in-flight count");
            if *n == 0 && r.buffer().is_empty() && record.len() <= INLINE_RECORD_MAX {
                // Nothing else of this connection is running and nothing more has arrived:
                // the client waits for this one reply (queue depth 1). Answer it here rather
                // than wake a worker: two context switches fewer per request. Not a large
                // WRITE: its successor is likely still arriving, and reading it while a
                // worker runs this one is what keeps a streaming client's pipeline full
                // (inline, 1 MiB writes at QD 4 ran at half the speed).
                drop(n);
                answer(&shared, &conn, &record, false);
                r.get_mut().spin = true;
                continue;
            }
            while *n >= max_in_flight {
                n = conn.done.wait(n).expect("in-flight count");
            }
            *n += 1;
        }
        if tx.send(Job { conn: conn.clone(), record }).is_err() {
            break;
        }
    }
    let _ = r.get_ref().stream.shutdown(Shutdown::Both);
}

fn worker(rx: Arc<Mutex<Receiver<Job>>>, shared: Arc<Shared>) {
    loop {
        let job = match rx.lock().expect("job queue").recv() {
            Ok(j) => j,
            Err(_) => return,
        };
        answer(&shared, &job.conn, &job.record, true);
    }
}

/// Process a record and send its reply (if any) on its connection. A `counted` record
/// (in the connection's `in_flight`) stays counted until its reply has gone out: a client
/// that stops reading its replies stops its reader at `max_in_flight`, however many
/// replies wait to be sent.
fn answer(shared: &Shared, conn: &Conn, record: &[u8], counted: bool) {
    match process(shared, conn.peer.ip(), record) {
        Some(reply) => send_reply(conn, reply, counted),
        None if counted => conn.finish_one(),
        None => {}
    }
}

impl Conn {
    /// A record counted in `in_flight` is done: its reply is sent (or there is none).
    fn finish_one(&self) {
        let mut n = self.in_flight.lock().expect("in-flight count");
        *n -= 1;
        self.done.notify_one();
    }
}

/// Send `reply` on its connection — or leave it to the worker sending there now, which
/// sends every reply queued before it lets go. A worker never sleeps waiting for another's
/// 1 MiB READ reply to go out, only to be woken to send its own: each such hand-over is a
/// wakeup, and under load a wakeup waits for a CPU (the tail of a QD 4 sequential read).
fn send_reply(conn: &Conn, reply: rpc::Reply, counted: bool) {
    conn.pending.lock().expect("pending replies").push_back((reply, counted));
    loop {
        let mut w = match conn.writer.try_lock() {
            Ok(w) => w,
            // The holder sends ours: it looks at the queue again after letting go.
            Err(std::sync::TryLockError::WouldBlock) => return,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        };
        loop {
            let Some((r, counted)) = conn.pending.lock().expect("pending replies").pop_front() else { break };
            if let Err(e) = write_all_vectored(&mut *w, &mut r.io_slices()) {
                tracing::debug!(client = %conn.peer, "NFS reply not sent: {e}");
            }
            if counted {
                conn.finish_one();
            }
        }
        drop(w);
        // A reply queued after the queue looked empty, whose worker found the writer
        // still held: ours to send.
        if conn.pending.lock().expect("pending replies").is_empty() {
            return;
        }
    }
}

/// Write all of `bufs` (a READ's data goes from the engine's records to the socket: one
/// `writev`, no copy into the reply first).
fn write_all_vectored(w: &mut impl Write, mut bufs: &mut [io::IoSlice<'_>]) -> io::Result<()> {
    // The kernel takes at most IOV_MAX (1024) pieces per call.
    const IOV_MAX: usize = 1024;
    while !bufs.is_empty() {
        match w.write_vectored(&bufs[..bufs.len().min(IOV_MAX)]) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "connection closed mid-reply")),
            Ok(n) => io::IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Answer one record: the reply record to send, or `None` when nothing can be answered.
/// Public to the crate's fuzz test through [`crate::process_record`].
pub(crate) fn process(shared: &Shared, peer: IpAddr, record: &[u8]) -> Option<rpc::Reply> {
    let call: Call<'_> = match rpc::parse_call(record) {
        Ok(c) => c,
        Err(e) => return rpc::denied_reply(&e).map(rpc::finish_record),
    };
    let (xid, prog, vers) = (call.xid, call.prog, call.vers);
    let cache_key = crate::drc::cached_procedure(prog, vers, call.proc_)
        .then(|| crate::drc::Key::new(peer, xid, call.proc_, call.args.rest()));
    if let Some(key) = cache_key {
        match shared.replies.begin(key) {
            crate::drc::Seen::New => {}
            crate::drc::Seen::Running => return None,
            crate::drc::Seen::Replay(r) => {
                tracing::debug!(client = %peer, xid, "NFS retransmission answered from the reply cache");
                return Some(r.as_ref().clone().into());
            }
        }
    }
    let proc_ = call.proc_;
    let mut req = Request {
        xid,
        proc_,
        cred: call.cred,
        args: call.args,
        peer,
        shared,
        stats: std::cell::OnceCell::new(),
        io_bytes: 0,
    };
    // A panic in a handler ends this request with SYSTEM_ERR, not the worker (which would
    // be gone for good) nor the daemon. DESIGN.md's failure policy: a request handler's
    // panic ends that request.
    let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if FAILPOINT_PANIC_XID.load(Ordering::Relaxed) == xid && xid != 0 {
            panic!("failpoint nfs.dispatch.panic (xid {xid})");
        }
        match (prog, vers) {
            (PROG_NFS, 3) => nfs3::dispatch(&mut req),
            (PROG_MOUNT, 3) => mount::dispatch(&mut req),
            (PROG_PORTMAP, 2) => portmap::dispatch(&mut req),
            (PROG_NFS, _) | (PROG_MOUNT, _) => Ok(rpc::prog_mismatch(xid, 3, 3)),
            (PROG_PORTMAP, _) => Ok(rpc::prog_mismatch(xid, 2, 2)),
            _ => Ok(rpc::accepted_reply(xid, AcceptStat::ProgUnavail, 0)),
        }
    }));
    let handled = match handled {
        Ok(h) => h,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            tracing::error!(client = %peer, prog, proc_, xid, "NFS request failed inside the server: {what}; answered SYSTEM_ERR");
            if let Some(key) = cache_key {
                shared.replies.abandon(key);
            }
            return Some(rpc::finish_record(rpc::accepted_reply(xid, AcceptStat::SystemErr, 0)));
        }
    };
    let reply = handled.unwrap_or_else(|_| rpc::accepted_reply(xid, AcceptStat::GarbageArgs, 0));
    let record = rpc::finish_record(reply);
    if let Some(key) = cache_key {
        // Replies kept are never READs: all in `head`.
        shared.replies.finish(key, &record.to_vec());
    }
    Some(record)
}

/// A server state for tests that drive [`process`] without sockets.
pub(crate) fn test_shared(exports: Arc<ExportTable>, key: HandleKey) -> Shared {
    Shared {
        exports,
        key,
        verifier: [1, 2, 3, 4, 5, 6, 7, 8],
        mounts: Mutex::new(BTreeSet::new()),
        portmap: Mutex::new(BTreeMap::new()),
        refusals: Mutex::new(HashSet::new()),
        stopping: AtomicBool::new(false),
        conns: Mutex::new(Vec::new()),
        replies: Default::default(),
        live_conns: AtomicUsize::new(0),
    }
}
