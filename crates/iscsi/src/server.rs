//! The TCP server: the acceptor, a thread per connection (login, then the session's PDU
//! reader) and a shared pool of workers that run SCSI commands and send their responses
//! (session.rs) — the NFS server's shape.
//!
//! Secure by default: [`IscsiServer::start`] refuses a non-loopback address unless every
//! target has CHAP and discovery has CHAP, or `insecure_allow_no_auth` is set; a target
//! added later without CHAP is refused at login on such a server. A client whose address
//! no target allows is closed at accept.
//!
//! Bounds: at most [`MAX_CONNECTIONS`] connections; per session `window` commands (see
//! session.rs); a login phase that stalls for [`LOGIN_TIMEOUT`] is dropped, and so is a
//! session that leaves a response unread for `send_timeout`.

use crate::login::{LoginEnv, LoginState, Step};
use crate::pdu::{Pdu, PduError};
use crate::session::{Conn, Job, Reader};
use crate::targets::{Chap, Target, TargetTable};
use crate::text::LOGIN_MAX_RECV;
use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use strata_lun::work::{self, Receiver, Sender};

pub const MAX_CONNECTIONS: usize = 256;
pub const LOGIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of [`ServerConfig::send_timeout`]: far beyond any live initiator's pause,
/// short enough that a stalled one does not keep a worker from other sessions for long.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// How the server runs; [`ServerConfig::new`] gives the defaults below.
#[derive(Clone)]
pub struct ServerConfig {
    /// The listener (3260 is iSCSI's port).
    pub bind: SocketAddr,
    /// Worker threads. Commands block on the engine (device reads, intent-log flushes), so
    /// more workers than cores: 8 keeps a queue depth of 8 busy on two cores.
    pub workers: usize,
    /// Commands per session (MaxCmdSN − ExpCmdSN + 1). 32 covers Linux's default queue
    /// depth and bounds a hostile session at 32 × 4 MiB of write buffers.
    pub window: u32,
    /// CHAP for discovery sessions (SendTargets); `None`: discovery is open.
    pub discovery_chap: Option<Chap>,
    /// Allow targets without CHAP on a non-loopback address.
    pub insecure_allow_no_auth: bool,
    /// Longest a response may wait for the initiator to take it before the connection
    /// is dropped (workers send responses themselves).
    pub send_timeout: Duration,
}

impl ServerConfig {
    pub fn new(bind: SocketAddr) -> ServerConfig {
        ServerConfig {
            bind,
            workers: 8,
            window: 32,
            discovery_chap: None,
            insecure_allow_no_auth: false,
            send_timeout: SEND_TIMEOUT,
        }
    }
}

/// State shared by the acceptor, connections and workers.
pub struct Shared {
    pub targets: Arc<TargetTable>,
    config: ServerConfig,
    stopping: AtomicBool,
    /// Open connections by id (to close them at shutdown or on reinstatement), and the
    /// session key (nexus + target) each serves.
    conns: Mutex<HashMap<u64, (TcpStream, Option<String>)>>,
    /// The target each normal session serves: the reaper closes the sessions of removed
    /// targets, so an idle initiator does not hold its LUNs (and the pool under them).
    serving: Mutex<HashMap<u64, Arc<Target>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    next_conn: AtomicU64,
    next_tsih: AtomicU16,
    /// Whether the server listens beyond loopback (auth then required).
    exposed: bool,
    /// (client, reason) pairs already logged as refused logins.
    refusals: Mutex<HashSet<(IpAddr, &'static str)>>,
}

impl Shared {
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Log a refused login: a warning the first time for a client and reason, then at
    /// debug level, so a client retrying in a loop does not flood the log (at most
    /// [`REFUSALS_LOGGED`] pairs are remembered).
    fn log_refusal(&self, client: IpAddr, why: &'static str, initiator: Option<&str>) {
        let mut seen = self.refusals.lock().expect("refusal log");
        if seen.len() < REFUSALS_LOGGED && seen.insert((client, why)) {
            tracing::warn!(%client, ?initiator, "iSCSI login refused: {why}");
        } else {
            tracing::debug!(%client, ?initiator, "iSCSI login refused: {why}");
        }
    }
}

const REFUSALS_LOGGED: usize = 4096;

/// A running iSCSI target server.
pub struct IscsiServer {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    acceptor: Option<JoinHandle<()>>,
    reaper: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

impl IscsiServer {
    /// Bind `config.bind` and serve `targets` (which may change while the server runs).
    /// Errors: the bind's, or `PermissionDenied` for a non-loopback address while a target
    /// or discovery lacks CHAP and `insecure_allow_no_auth` is not set.
    pub fn start(config: ServerConfig, targets: Arc<TargetTable>) -> io::Result<IscsiServer> {
        assert!(config.workers > 0 && config.window > 0, "at least one worker and a window of one");
        let exposed = !config.bind.ip().is_loopback();
        if exposed && !config.insecure_allow_no_auth {
            let open: Vec<String> =
                targets.all().iter().filter(|t| t.config.chap.is_none()).map(|t| t.config.name.clone()).collect();
            if !open.is_empty() || config.discovery_chap.is_none() {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "refusing to serve iSCSI on {} without CHAP (targets without CHAP: {open:?}, discovery CHAP: {}); set insecure_allow_no_auth to override",
                        config.bind,
                        config.discovery_chap.is_some()
                    ),
                ));
            }
        }
        let listener = TcpListener::bind(config.bind)?;
        let local_addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            targets,
            config: config.clone(),
            stopping: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            threads: Mutex::new(Vec::new()),
            next_conn: AtomicU64::new(1),
            next_tsih: AtomicU16::new(1),
            exposed,
            refusals: Mutex::new(HashSet::new()),
            serving: Mutex::new(HashMap::new()),
        });
        let (tx, rx) = work::queue::<Job>(config.workers * 4);
        let mut workers = Vec::new();
        for i in 0..config.workers {
            let rx = rx.clone();
            workers.push(std::thread::Builder::new().name(format!("iscsi-worker-{i}")).spawn(move || worker(rx))?);
        }
        let s = shared.clone();
        let acceptor =
            std::thread::Builder::new().name("iscsi-accept".into()).spawn(move || acceptor(listener, tx, s))?;
        tracing::info!(listen = %local_addr, "iSCSI target ready");
        let s = shared.clone();
        let reaper = std::thread::Builder::new().name("iscsi-reaper".into()).spawn(move || reap(&s))?;
        Ok(IscsiServer { shared, local_addr, acceptor: Some(acceptor), reaper: Some(reaper), workers })
    }

    /// The address the listener is bound to (the port, when `bind` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Close the listener and every session, and join every thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.local_addr);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        if let Some(r) = self.reaper.take() {
            let _ = r.join();
        }
        for (_, (c, _)) in self.shared.conns.lock().expect("connections").drain() {
            let _ = c.shutdown(Shutdown::Both);
        }
        let threads: Vec<_> = self.shared.threads.lock().expect("threads").drain(..).collect();
        for t in threads {
            let _ = t.join();
        }
        // Every job sender is gone with the acceptor and the connections: workers end.
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        tracing::info!(listen = %self.local_addr, "iSCSI target stopped");
    }
}

impl Drop for IscsiServer {
    fn drop(&mut self) {
        if self.acceptor.is_some() {
            self.stop();
        }
    }
}

fn worker(rx: Receiver<Job>) {
    while let Some(job) = rx.recv() {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.conn.run(&job.cmd, &job.data_out)));
        if r.is_err() {
            // The failure policy: the command's panic ends its connection, not the server.
            tracing::error!(initiator = %job.conn.nexus.initiator, cdb = ?job.cmd.cdb, "iSCSI command panicked; closing its connection");
            job.conn.failed();
        }
    }
}

fn acceptor(l: TcpListener, tx: Sender<Job>, shared: Arc<Shared>) {
    for s in l.incoming() {
        if shared.stopping() {
            return;
        }
        let s = match s {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("iSCSI accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let Ok(peer) = s.peer_addr() else { continue };
        if !shared.targets.all().iter().any(|t| t.client_allowed(peer.ip())) && !peer.ip().is_loopback() {
            shared.log_refusal(peer.ip(), "no target allows this client", None);
            continue;
        }
        let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
        {
            let mut conns = shared.conns.lock().expect("connections");
            if conns.len() >= MAX_CONNECTIONS {
                tracing::warn!(client = %peer, "iSCSI connection refused: {MAX_CONNECTIONS} connections are open");
                continue;
            }
            let Ok(c) = s.try_clone() else { continue };
            conns.insert(id, (c, None));
        }
        let (tx, sh) = (tx.clone(), shared.clone());
        match std::thread::Builder::new().name("iscsi-conn".into()).spawn(move || connection(s, peer, id, tx, sh)) {
            Ok(h) => {
                let mut threads = shared.threads.lock().expect("threads");
                threads.retain(|t| !t.is_finished());
                threads.push(h);
            }
            Err(e) => {
                shared.conns.lock().expect("connections").remove(&id);
                tracing::warn!(client = %peer, "iSCSI connection dropped: cannot start its thread: {e}");
            }
        }
    }
}

/// TCP keepalive: a session idles between commands for as long as it likes, so a dead
/// initiator (power loss, no FIN) is found by the kernel's probes — after 60 s idle,
/// 6 probes 10 s apart — and its connection, threads and reservations are released.
fn keepalive(s: &TcpStream) {
    let fd = std::os::fd::AsRawFd::as_raw_fd(s);
    for (level, name, value) in [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 60),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 10),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 6),
    ] {
        let v: libc::c_int = value;
        // SAFETY: a valid socket descriptor and a c_int option value of the size passed.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            tracing::debug!("iSCSI keepalive option {name}: {}", io::Error::last_os_error());
        }
    }
}

fn connection(mut s: TcpStream, peer: SocketAddr, id: u64, tx: Sender<Job>, shared: Arc<Shared>) {
    let _ = s.set_nodelay(true);
    keepalive(&s);
    let _ = s.set_read_timeout(Some(LOGIN_TIMEOUT));
    let discovery_chap = shared.config.discovery_chap.clone();
    let tsih = loop {
        let t = shared.next_tsih.fetch_add(1, Ordering::Relaxed);
        if t != 0 {
            break t;
        }
    };
    let env = LoginEnv {
        targets: &shared.targets,
        discovery_chap: discovery_chap.as_ref(),
        peer: peer.ip(),
        window: shared.config.window,
        tsih,
    };
    let mut login = LoginState::default();
    let outcome = loop {
        let pdu = match Pdu::read(&mut s, false, false, LOGIN_MAX_RECV as usize) {
            Ok(p) => p,
            Err(PduError::Io(_)) => return forget(&shared, id),
            Err(e) => {
                tracing::warn!(client = %peer, "iSCSI login: {e}");
                return forget(&shared, id);
            }
        };
        match login.handle(&pdu, &env) {
            Step::Reply(r) => {
                if r.write(&mut s, false, false).is_err() {
                    return forget(&shared, id);
                }
            }
            Step::Fail(r) => {
                let (why, initiator) = login.refusal().unwrap_or(("refused", None));
                shared.log_refusal(peer.ip(), why, initiator);
                let _ = r.write(&mut s, false, false);
                let _ = s.flush();
                return forget(&shared, id);
            }
            Step::Done(r, outcome) => {
                if let crate::login::SessionKind::Normal(t) = &outcome.kind {
                    if shared.exposed && !shared.config.insecure_allow_no_auth && t.config.chap.is_none() {
                        shared.log_refusal(peer.ip(), "target without CHAP on a non-loopback server", None);
                        return forget(&shared, id);
                    }
                }
                if r.write(&mut s, false, false).is_err() {
                    return forget(&shared, id);
                }
                break outcome;
            }
        }
    };
    let _ = s.set_read_timeout(None);
    // A worker sends responses itself: an initiator that stops reading must not hold it
    // (and with it every session's commands) for longer than this.
    let _ = s.set_write_timeout(Some(shared.config.send_timeout));
    let key = match &outcome.kind {
        crate::login::SessionKind::Normal(t) => {
            shared.serving.lock().expect("serving").insert(id, t.clone());
            Some(format!("{}|{}", outcome.nexus.id(), t.config.name.to_ascii_lowercase()))
        }
        crate::login::SessionKind::Discovery => None,
    };
    if let Some(key) = &key {
        // Session reinstatement: an older connection of the same nexus and target ends.
        let mut conns = shared.conns.lock().expect("connections");
        for (other, (c, k)) in conns.iter() {
            if *other != id && k.as_deref() == Some(key.as_str()) {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
        if let Some(e) = conns.get_mut(&id) {
            e.1 = Some(key.clone());
        }
    }
    tracing::info!(client = %peer, initiator = %outcome.nexus.initiator, discovery = key.is_none(), "iSCSI session started");
    let Ok(w) = s.try_clone() else { return forget(&shared, id) };
    let o = *outcome;
    let conn = Arc::new(Conn::new(w, o.params, o.statsn, o.exp_cmdsn, shared.config.window, o.kind, o.nexus));
    Reader::new(conn, &shared, tx).run(s);
    forget(&shared, id);
    tracing::info!(client = %peer, "iSCSI session ended");
}

fn forget(shared: &Shared, id: u64) {
    shared.serving.lock().expect("serving").remove(&id);
    if let Some((c, _)) = shared.conns.lock().expect("connections").remove(&id) {
        let _ = c.shutdown(Shutdown::Both);
    }
}

/// How often the reaper looks for sessions of removed targets.
const REAP_INTERVAL: Duration = Duration::from_millis(200);

/// Every 200 ms: close the sessions whose target was removed (an idle initiator would keep
/// it, and its LUNs, until its next PDU). Ends when the server stops.
fn reap(shared: &Shared) {
    while !shared.stopping() {
        std::thread::sleep(REAP_INTERVAL);
        let gone: Vec<u64> =
            shared.serving.lock().expect("serving").iter().filter(|(_, t)| t.removed()).map(|(id, _)| *id).collect();
        if gone.is_empty() {
            continue;
        }
        let conns = shared.conns.lock().expect("connections");
        for id in gone {
            if let Some((c, _)) = conns.get(&id) {
                tracing::info!(connection = id, "iSCSI session closed: its target was removed");
                let _ = c.shutdown(Shutdown::Both);
            }
        }
    }
}
