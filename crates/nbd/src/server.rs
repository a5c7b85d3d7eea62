//! The TCP server: listener, connections and the worker pool (the shape of the NFS
//! server's, crates/nfs/src/server.rs).
//!
//! Threads: one acceptor; per connection, one thread that runs the handshake and then
//! reads requests (header, then a WRITE's whole payload) and queues them; a shared pool
//! of workers that run them on the LUN and send each reply, whole, as soon as it is
//! ready — replies that finish while another is being sent go out with the next `writev`,
//! sent by the thread already sending (`Conn::reply`). Replies go out in completion
//! order; the client matches them by cookie. A request that arrives alone (nothing of its
//! connection running, no more bytes waiting on a plain socket: a client at a queue
//! depth of one) is run by the reader itself, saving the hand-off to a worker and back;
//! the reader then polls its socket for the next request for up to `ServerConfig::poll`
//! before it sleeps (link.rs `PlainReader::fill`).
//!
//! Bounds: a connection has at most `max_in_flight` requests queued or running and at
//! most `max_in_flight_bytes` of their payloads and read data (one request is always let
//! through, up to the 32 MiB maximum payload); its reader stops reading until one
//! finishes, and TCP flow control pushes back on the client. At most
//! [`MAX_CONNECTIONS`] connections; the handshake must finish within
//! [`HANDSHAKE_TIMEOUT`].
//!
//! Locks: `Shared::conns` (the open sockets, for shutdown) and `Shared::conn_threads` are
//! leaves. Per connection: `Conn::outbox` is a leaf (never held while sending);
//! `Conn::writer` (reply bytes on the wire) then the TLS session lock inside it (link.rs);
//! `Conn::in_flight` is a leaf.
//!
//! Who may connect: a listener off loopback must authenticate its clients (TLS required
//! and client certificates verified) unless `insecure_allow_plaintext` says otherwise; on
//! top of that each export names its client networks (exports.rs).

use crate::exports::{ExportEntry, ExportTable};
use crate::handshake::{self, Ended, Negotiated, Outcome, TlsPolicy};
use crate::link::{LinkReader, LinkWriter, TlsLink};
use crate::proto::{RequestHeader, CMD_DISC, ESHUTDOWN};
use crate::tls::TlsConfig;
use crate::transmission::{self, Reply};
use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use strata_lun::work::{self, Receiver, Sender};

/// Connections served at once; one more is closed at accept (each costs a thread and up to
/// `max_in_flight_bytes` of memory).
pub const MAX_CONNECTIONS: usize = 1024;

/// A client has this long from connecting to entering transmission: a connection that
/// never negotiates does not hold a thread for ever.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);

/// [`ServerConfig::poll`]'s default.
pub const DEFAULT_POLL: Duration = Duration::from_micros(50);

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub bind: SocketAddr,
    /// Worker threads. Requests block on the engine (device reads, intent-log flushes), so
    /// there are more workers than cores: 8 keeps a queue depth of 8 busy on two cores (as
    /// the iSCSI target). In quick runs at queue depth 16 on two vCPUs, 8 did no worse than
    /// 16 and often better, inside a wide spread (docs/benchmarks/block-luns.md, "Eight
    /// workers and one wake-up per request").
    pub workers: usize,
    /// Requests queued or running per connection. 64 is above what clients keep in flight
    /// (qemu: 16 per connection, nbdcopy: 64) and bounds the work one client queues.
    pub max_in_flight: usize,
    /// Payload and read-data bytes in flight per connection: 64 MiB (two maximum-size
    /// requests) bounds a hostile connection's memory while letting a streaming client
    /// keep 1 MiB requests 64 deep.
    pub max_in_flight_bytes: usize,
    /// TLS, offered through NBD_OPT_STARTTLS.
    pub tls: Option<TlsConfig>,
    /// Refuse every option but STARTTLS until TLS is up (FORCEDTLS).
    pub require_tls: bool,
    /// Allow a listener off loopback without authenticated clients (TLS required with
    /// client certificates). Off: such a configuration does not start.
    pub insecure_allow_plaintext: bool,
    /// How long a connection's reader polls its (plain) socket for the next request before
    /// sleeping: 50 µs by default, which nearly doubles (1.75×) what a client at queue
    /// depth 1 gets on a virtual machine (docs/benchmarks/block-luns.md) for at most that
    /// much CPU time per request; zero never polls.
    pub poll: Duration,
}

impl ServerConfig {
    pub fn new(bind: SocketAddr) -> ServerConfig {
        ServerConfig {
            bind,
            workers: 8,
            max_in_flight: 64,
            max_in_flight_bytes: 64 << 20,
            tls: None,
            require_tls: false,
            insecure_allow_plaintext: false,
            poll: DEFAULT_POLL,
        }
    }
}

struct Shared {
    exports: Arc<ExportTable>,
    tls: Option<Arc<rustls::ServerConfig>>,
    policy: TlsPolicy,
    stopping: AtomicBool,
    conns: Mutex<HashMap<u64, TcpStream>>,
    /// The export each connection in transmission serves: the reaper closes the sockets
    /// of removed exports, so an idle client does not hold its LUN (and the pool under it).
    serving: Mutex<HashMap<u64, Arc<ExportEntry>>>,
    conn_threads: Mutex<Vec<JoinHandle<()>>>,
    live: AtomicUsize,
    next_id: AtomicU64,
    max_in_flight: usize,
    max_in_flight_bytes: usize,
    poll: Duration,
    spares: Arc<Spares>,
}

/// A connection in its transmission phase.
struct Conn {
    peer: SocketAddr,
    n: Negotiated,
    writer: Mutex<LinkWriter>,
    /// Replies finished and not yet on the wire (see [`Conn::reply`]).
    outbox: Mutex<Outbox>,
    in_flight: Mutex<InFlight>,
    /// Signalled when a request finishes and the reader waits for one.
    done: Condvar,
    /// WRITE payload buffers of finished requests, the server's (see [`Spares`]).
    spares: Arc<Spares>,
}

/// WRITE payload buffers of finished requests, kept for the next ones: a fresh buffer is
/// zeroed (a 1 MiB write paid a memset before its first byte was read: 3.5 % of the
/// daemon's CPU at 1 MiB writes) and, when the allocator hands out fresh memory, faulted in
/// page by page. At most `SPARE_BYTES` for
/// the whole server, whatever the number of connections.
#[derive(Default)]
struct Spares {
    bufs: Mutex<(Vec<Vec<u8>>, usize)>,
}

const SPARE_BYTES: usize = 16 << 20;

impl Spares {
    /// A buffer of at least `len` bytes (its contents are stale).
    fn take(&self, len: usize) -> Vec<u8> {
        if len == 0 {
            return Vec::new();
        }
        let mut g = self.bufs.lock().unwrap_or_else(|p| p.into_inner());
        let (bufs, bytes) = &mut *g;
        // The smallest that fits: a 4 KiB write does not take a 1 MiB write's buffer.
        let fit = bufs.iter().enumerate().filter(|(_, b)| b.len() >= len).min_by_key(|(_, b)| b.len()).map(|(i, _)| i);
        match fit {
            Some(i) => {
                let b = bufs.swap_remove(i);
                *bytes -= b.len();
                b
            }
            None => vec![0u8; len],
        }
    }

    fn give_back(&self, buf: Vec<u8>) {
        let mut g = self.bufs.lock().unwrap_or_else(|p| p.into_inner());
        let (bufs, bytes) = &mut *g;
        if !buf.is_empty() && *bytes + buf.len() <= SPARE_BYTES {
            *bytes += buf.len();
            bufs.push(buf);
        }
    }
}

/// Replies waiting for the wire, and whether a thread is sending: replies finished while
/// another is being sent go out together with the next `writev`, sent by whichever thread
/// is sending — the others go back to work instead of queueing for the socket.
#[derive(Default)]
struct Outbox {
    replies: Vec<(Reply, usize)>,
    sending: bool,
}

/// Requests queued or running on a connection, and whether its reader waits for one to
/// finish (a notify is a system call even with no one waiting: only then is it made).
#[derive(Default)]
struct InFlight {
    requests: usize,
    bytes: usize,
    waiting: bool,
}

impl Conn {
    /// Send `reply` to a request of `cost` and count the request finished — now, or, when
    /// another thread is sending, by that thread with its next batch (a request stays in
    /// flight until its reply is on the wire, so a closing connection waits for it).
    fn reply(&self, reply: Reply, cost: usize) {
        {
            let mut o = self.outbox.lock().unwrap_or_else(|p| p.into_inner());
            o.replies.push((reply, cost));
            if o.sending {
                return;
            }
            o.sending = true;
        }
        loop {
            let batch = {
                let mut o = self.outbox.lock().unwrap_or_else(|p| p.into_inner());
                if o.replies.is_empty() {
                    o.sending = false;
                    return;
                }
                std::mem::take(&mut o.replies)
            };
            {
                let parts: Vec<&[u8]> = batch.iter().flat_map(|(r, _)| r.parts()).collect();
                let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
                if let Err(e) = w.send(&parts) {
                    tracing::debug!(client = %self.peer, "NBD replies not sent: {e}");
                    // The stream may hold half a reply: nothing after it could be framed.
                    w.close();
                }
            }
            let (requests, cost) = (batch.len(), batch.iter().map(|(_, c)| c).sum());
            drop(batch);
            self.finish_many(requests, cost);
        }
    }

    fn finish(&self, cost: usize) {
        self.finish_many(1, cost);
    }

    fn finish_many(&self, requests: usize, cost: usize) {
        let mut g = self.in_flight.lock().expect("in-flight count");
        g.requests -= requests;
        g.bytes -= cost;
        if g.waiting {
            self.done.notify_all();
        }
    }

    /// Wait until `ready` holds of the requests in flight.
    fn wait_until<'a>(
        &'a self,
        mut g: std::sync::MutexGuard<'a, InFlight>,
        ready: impl Fn(&InFlight) -> bool,
    ) -> std::sync::MutexGuard<'a, InFlight> {
        while !ready(&g) {
            g.waiting = true;
            g = self.done.wait(g).expect("in-flight count");
            g.waiting = false;
        }
        g
    }
}

struct Job {
    conn: Arc<Conn>,
    header: RequestHeader,
    /// The payload is `buf[..len]` (a reused buffer may be longer).
    buf: Vec<u8>,
    len: usize,
    cost: usize,
}

/// A running server; [`NbdServer::shutdown`] stops it.
pub struct NbdServer {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    acceptor: Mutex<Option<JoinHandle<()>>>,
    reaper: Mutex<Option<JoinHandle<()>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl NbdServer {
    pub fn start(config: ServerConfig, exports: Arc<ExportTable>) -> io::Result<NbdServer> {
        let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if config.workers == 0 || config.max_in_flight == 0 {
            return Err(invalid("NBD server: at least one worker and one request in flight".into()));
        }
        if config.require_tls && config.tls.is_none() {
            return Err(invalid("NBD server: TLS required but no TLS configuration given".into()));
        }
        let authenticated = config.require_tls && config.tls.as_ref().is_some_and(|t| t.verifies_clients());
        if !config.bind.ip().is_loopback() && !authenticated && !config.insecure_allow_plaintext {
            return Err(invalid(format!(
                "NBD server: refusing to listen on {} without authenticating clients: require TLS with client \
                 certificates (a client CA), or set insecure_allow_plaintext",
                config.bind
            )));
        }
        let tls = config.tls.as_ref().map(|t| t.build()).transpose().map_err(invalid)?;
        let listener = TcpListener::bind(config.bind)?;
        let local_addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            exports,
            policy: TlsPolicy { available: tls.is_some(), required: config.require_tls },
            tls,
            stopping: AtomicBool::new(false),
            conns: Mutex::default(),
            serving: Mutex::default(),
            conn_threads: Mutex::default(),
            live: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            max_in_flight: config.max_in_flight,
            max_in_flight_bytes: config.max_in_flight_bytes,
            poll: config.poll,
            spares: Arc::default(),
        });
        let (tx, rx) = work::queue::<Job>(config.workers * 4);
        let mut workers = Vec::new();
        for i in 0..config.workers {
            let rx = rx.clone();
            workers.push(std::thread::Builder::new().name(format!("nbd-worker-{i}")).spawn(move || worker(rx))?);
        }
        let s = shared.clone();
        let acceptor = std::thread::Builder::new().name("nbd-accept".into()).spawn(move || accept(listener, tx, s))?;
        let s = shared.clone();
        let reaper = std::thread::Builder::new().name("nbd-reaper".into()).spawn(move || reap(&s))?;
        tracing::info!(listen = %local_addr, tls = shared.policy.available, "NBD server ready");
        Ok(NbdServer {
            shared,
            local_addr,
            acceptor: Mutex::new(Some(acceptor)),
            reaper: Mutex::new(Some(reaper)),
            workers: Mutex::new(workers),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Close the listener and every connection, and wait for all threads to end.
    /// Requests running finish first (their replies may not reach the client).
    pub fn shutdown(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the acceptor blocked in accept().
        let mut wake = self.local_addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake.ip() {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        if let Some(a) = self.acceptor.lock().expect("acceptor").take() {
            let _ = a.join();
        }
        if let Some(r) = self.reaper.lock().expect("reaper").take() {
            let _ = r.join();
        }
        for c in self.shared.conns.lock().expect("connections").values() {
            let _ = c.shutdown(Shutdown::Both);
        }
        let threads = std::mem::take(&mut *self.shared.conn_threads.lock().expect("connection threads"));
        for t in threads {
            let _ = t.join();
        }
        // Every sender is gone with the acceptor and the connections: workers end.
        for w in self.workers.lock().expect("workers").drain(..) {
            let _ = w.join();
        }
        tracing::info!(listen = %self.local_addr, "NBD server stopped");
    }
}

fn accept(listener: TcpListener, tx: Sender<Job>, shared: Arc<Shared>) {
    for s in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let s = match s {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("NBD accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let Ok(peer) = s.peer_addr() else { continue };
        if shared.live.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            shared.live.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(client = %peer, "NBD connection refused: {MAX_CONNECTIONS} connections are open");
            continue;
        }
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let _ = s.set_nodelay(true);
        if let Ok(c) = s.try_clone() {
            shared.conns.lock().expect("connections").insert(id, c);
        }
        let (tx, sh) = (tx.clone(), shared.clone());
        let spawned = std::thread::Builder::new().name("nbd-conn".into()).spawn(move || {
            tracing::debug!(client = %peer, "NBD connection opened");
            let why = connection(&sh, s, peer, tx, id);
            match why {
                Ended::Protocol(m) => tracing::warn!(client = %peer, "NBD connection closed: {m}"),
                Ended::Io(e) if e.kind() != io::ErrorKind::UnexpectedEof => {
                    tracing::debug!(client = %peer, "NBD connection closed: {e}")
                }
                _ => tracing::debug!(client = %peer, "NBD connection closed"),
            }
            sh.conns.lock().expect("connections").remove(&id);
            sh.serving.lock().expect("serving").remove(&id);
            sh.live.fetch_sub(1, Ordering::SeqCst);
        });
        match spawned {
            Ok(t) => {
                let mut threads = shared.conn_threads.lock().expect("connection threads");
                threads.retain(|t| !t.is_finished());
                threads.push(t);
            }
            Err(e) => {
                shared.conns.lock().expect("connections").remove(&id);
                shared.live.fetch_sub(1, Ordering::SeqCst);
                tracing::warn!(client = %peer, "NBD connection dropped: cannot start its thread: {e}");
            }
        }
    }
}

/// Negotiate, then read requests until the connection ends; why it ended.
/// Every 200 ms: close the connections whose export was removed (an idle client would
/// otherwise keep it until its next request). Ends when the server stops.
fn reap(shared: &Shared) {
    while !shared.stopping.load(Ordering::SeqCst) {
        std::thread::sleep(REAP_INTERVAL);
        let gone: Vec<u64> =
            shared.serving.lock().expect("serving").iter().filter(|(_, e)| e.removed()).map(|(id, _)| *id).collect();
        if gone.is_empty() {
            continue;
        }
        let conns = shared.conns.lock().expect("connections");
        for id in gone {
            if let Some(c) = conns.get(&id) {
                tracing::debug!(connection = id, "NBD connection closed: its export was removed");
                let _ = c.shutdown(Shutdown::Both);
            }
        }
    }
}

/// How often the reaper looks for connections of removed exports.
const REAP_INTERVAL: Duration = Duration::from_millis(200);

fn connection(shared: &Shared, stream: TcpStream, peer: SocketAddr, tx: Sender<Job>, id: u64) -> Ended {
    let split = || -> io::Result<(LinkReader, LinkWriter)> {
        Ok((LinkReader::plain(stream.try_clone()?, shared.poll), LinkWriter::Plain(stream.try_clone()?)))
    };
    let (mut r, mut w) = match split() {
        Ok(rw) => rw,
        Err(e) => return Ended::Io(e),
    };
    let _ = stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
    let mut session = match handshake::greet(&mut r, &mut w) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let mut tls_active = false;
    let n = loop {
        match handshake::haggle(&mut r, &mut w, &mut session, &shared.exports, peer.ip(), shared.policy, tls_active) {
            Ok(Outcome::Transmit(n)) => {
                shared.serving.lock().expect("serving").insert(id, n.entry.clone());
                break n;
            }
            Ok(Outcome::StartTls) => {
                let Some(config) = shared.tls.clone() else { return Ended::Protocol("STARTTLS without TLS".into()) };
                if r.buffered() > 0 {
                    return Ended::Protocol("bytes sent after NBD_OPT_STARTTLS before its reply".into());
                }
                let upgraded = stream.try_clone().and_then(|mut s| {
                    let link = TlsLink::accept(config, &mut s)?;
                    Ok((LinkReader::tls(s.try_clone()?, link.clone()), LinkWriter::Tls { sock: s, link }))
                });
                match upgraded {
                    Ok((tr, tw)) => (r, w) = (tr, tw),
                    Err(e) => return Ended::Protocol(format!("TLS handshake failed: {e}")),
                }
                tls_active = true;
                session.reset_for_tls();
            }
            Err(e) => return e,
        }
    };
    let _ = stream.set_read_timeout(None);
    tracing::debug!(client = %peer, export = %n.entry.name, tls = tls_active, structured = n.structured, flags = n.flags,
        "NBD connection entered transmission");
    let conn = Arc::new(Conn {
        peer,
        n,
        writer: Mutex::new(w),
        outbox: Mutex::default(),
        in_flight: Mutex::default(),
        done: Condvar::new(),
        spares: shared.spares.clone(),
    });
    let why = read_requests(shared, &conn, &mut r, &tx);
    // Answer everything queued before closing (DISC: "handle all outstanding requests").
    drop(conn.wait_until(conn.in_flight.lock().expect("in-flight count"), |f| f.requests == 0));
    conn.writer.lock().unwrap_or_else(|p| p.into_inner()).close();
    why
}

fn read_requests(shared: &Shared, conn: &Arc<Conn>, r: &mut LinkReader, tx: &Sender<Job>) -> Ended {
    loop {
        let header = match transmission::read_header(r) {
            Ok(h) => h,
            Err(e) => return e,
        };
        let len = match transmission::payload_len(&header) {
            Ok(l) => l,
            Err(e) => return e,
        };
        if header.kind == CMD_DISC {
            return Ended::Client;
        }
        let cost = transmission::request_cost(&header);
        let first = {
            let g = conn.in_flight.lock().expect("in-flight count");
            let mut g = conn.wait_until(g, |f| {
                f.requests == 0 || (f.requests < shared.max_in_flight && f.bytes + cost <= shared.max_in_flight_bytes)
            });
            g.requests += 1;
            g.bytes += cost;
            g.requests == 1
        };
        // The whole payload before anything runs: a client gone mid-WRITE changes nothing.
        let mut buf = conn.spares.take(len);
        if let Err(e) = r.read_exact(&mut buf[..len]) {
            conn.finish(cost);
            return Ended::Io(e);
        }
        if conn.n.entry.removed() || shared.stopping.load(Ordering::SeqCst) {
            conn.reply(
                Reply::error(&conn.n, &header, ESHUTDOWN, "the export was removed or the server is stopping"),
                cost,
            );
            tracing::info!(client = %conn.peer, export = %conn.n.entry.name, "NBD connection ended: export removed or server stopping");
            return Ended::Client;
        }
        let job = Job { conn: conn.clone(), header, buf, len, cost };
        // A request that arrived alone (nothing of this connection running, nothing more
        // waiting on the socket: a client at queue depth 1) is run here, saving the hand-off
        // to a worker and back (the NFS server does the same).
        let alone = first && r.idle();
        // Poll for the next request only when this one ran alone (see `poll_next`).
        r.poll_next(alone);
        if alone {
            run(job);
            continue;
        }
        if tx.send(job).is_err() {
            conn.finish(cost);
            return Ended::Client;
        }
    }
}

/// Run one request and send its reply. A panic ends this request (answered EIO), not the
/// thread: DESIGN.md's failure policy.
fn run(job: Job) {
    let Job { conn, header, buf, len, cost } = job;
    let reply =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| transmission::execute(&conn.n, &header, &buf[..len])))
            .unwrap_or_else(|_| {
                tracing::error!(client = %conn.peer, kind = header.kind, "NBD request panicked; answered EIO");
                Reply::error(&conn.n, &header, crate::proto::EIO, "internal error")
            });
    conn.spares.give_back(buf);
    conn.reply(reply, cost);
}

fn worker(rx: Receiver<Job>) {
    while let Some(job) = rx.recv() {
        run(job);
    }
}
