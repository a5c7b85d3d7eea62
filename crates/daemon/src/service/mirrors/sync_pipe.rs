//! How far a sync link's frames got ([`Acks`]), and the source side of a link to a paired
//! daemon ([`RemoteSink`]): appends pipelined on one session.
//!
//! A sync that finds an append in flight does not wait for its answer before sending its
//! own frames: the session is split (peer_net/split.rs), a sender writes each append as it
//! is asked for, and a receiver thread per session reads the answers (in order) and marks
//! frames durable. The target reads appends that arrived back to back as one batch and
//! writes them to its journal with one flush (sync_remote.rs), so concurrent syncs share
//! the target's log write as they share the source's.
//!
//! Frames sent and not yet answered stay in `unacked`: a session that ends (a cut, an idle
//! close by the target, a timeout) is made again and they are sent again whole — the target
//! skips those it already holds (by seq). Control requests (`sync_note`, `sync_retire`) go
//! through the same session, in order with the appends, and wait for their own answer.

use super::remote::MirrorMsg;
use crate::peer_net::{Answer, PeerClient, PeerConnection, PeerReceiver, PeerRequest, PeerResponse, PeerSender};
use crate::service::{ApiError, Daemon};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};
use strata_engine::pool::sync_tap::TapFrame;

/// How long an answer may take before the session is given up.
pub(super) const REMOTE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a link keeps making new sessions after a failed one before it falls back, and
/// the longest pause between two.
pub(super) const RECONNECT_WITHIN: Duration = Duration::from_secs(1);
const RECONNECT_PAUSE_MAX: Duration = Duration::from_millis(200);

/// Frame header on the wire: seq, txg, length.
pub(super) const WIRE_HEADER: usize = 20;

/// How far a link's frames got: durable on the target, and what its session is waiting for.
pub(crate) struct Acks {
    st: Mutex<AckState>,
    cv: Condvar,
    durable: AtomicU64,
    /// Frames and record bytes made durable on the target.
    pub(crate) frames: AtomicU64,
    pub(crate) bytes: AtomicU64,
    /// Syncs that waited for the target after their local write, and how long in all.
    pub(crate) waits: AtomicU64,
    pub(crate) waited_ns: AtomicU64,
}

#[derive(Default)]
struct AckState {
    /// The session answers are read from (a receiver of an older one stops).
    session: u64,
    /// Asked on that session and not yet answered, oldest first.
    asked: VecDeque<Asked>,
    /// That session ended: why.
    ended: Option<String>,
    /// The target refused frames (its journal could not take them): why.
    refused: Option<String>,
    /// The answer to the control request asked last.
    control: Option<Result<PeerResponse, ApiError>>,
    /// Bumped when the link changes state (a fall-back, a stop): waiters look again.
    interrupts: u64,
}

enum Asked {
    Append { last: u64, frames: u64, bytes: u64 },
    Control,
}

impl Acks {
    pub(crate) fn new() -> Acks {
        Acks {
            st: Mutex::new(AckState::default()),
            cv: Condvar::new(),
            durable: AtomicU64::new(0),
            frames: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            waited_ns: AtomicU64::new(0),
        }
    }

    /// The last frame durable on the target.
    pub(crate) fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// Frames up to `last` are durable on the target (`frames` of them, `bytes` of records).
    pub(crate) fn advance(&self, last: u64, frames: u64, bytes: u64) {
        let _st = self.st.lock().expect("sync acks");
        self.frames.fetch_add(frames, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.durable.fetch_max(last, Ordering::Release);
        self.cv.notify_all();
    }

    /// Why the target refused frames, if it did.
    pub(crate) fn refused(&self) -> Option<String> {
        self.st.lock().expect("sync acks").refused.clone()
    }

    /// The current session ended with requests unanswered: a flush sends them again.
    pub(crate) fn ended_unanswered(&self) -> bool {
        let st = self.st.lock().expect("sync acks");
        st.ended.is_some() && !st.asked.is_empty()
    }

    /// How many times the link changed state so far (for `wait`).
    pub(crate) fn interrupts(&self) -> u64 {
        self.st.lock().expect("sync acks").interrupts
    }

    /// Wait until frame `seq` is durable, the target refused frames, the session ended
    /// with requests unanswered, the link changed state since it had `seen` interrupts,
    /// or `deadline`: the caller looks again.
    pub(crate) fn wait(&self, seq: u64, deadline: Instant, seen: u64) {
        let mut st = self.st.lock().expect("sync acks");
        loop {
            // (An ended session matters only with requests unanswered: they go again.)
            if self.durable() >= seq
                || st.ended.is_some() && !st.asked.is_empty()
                || st.refused.is_some()
                || st.interrupts != seen
            {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            st = self.cv.wait_timeout(st, left).expect("sync acks").0;
        }
    }

    /// Wake every waiter: the link changed state (a fall-back, a stop).
    pub(crate) fn interrupt(&self) {
        let mut st = self.st.lock().expect("sync acks");
        st.interrupts += 1;
        self.cv.notify_all();
    }

    /// The receiver of session `n`: answers in order until the session ends.
    fn receive(&self, n: u64, mut rx: PeerReceiver) {
        loop {
            let answer = rx.answer();
            let mut st = self.st.lock().expect("sync acks");
            if st.session != n {
                return;
            }
            let reply = match answer {
                Answer::Ended(why) => {
                    st.ended = Some(why);
                    self.cv.notify_all();
                    return;
                }
                Answer::Reply(r) => r,
            };
            match st.asked.pop_front() {
                None => {
                    st.ended = Some("the target answered a request nobody sent".into());
                    self.cv.notify_all();
                    return;
                }
                Some(Asked::Control) => st.control = Some(reply),
                Some(Asked::Append { last, frames, bytes }) => match reply {
                    Ok(PeerResponse::Mirror(v)) if v["error"].is_string() => {
                        let msg = v["error"].as_str().unwrap_or_default();
                        let hint = v["hint"].as_str().unwrap_or("see the target daemon's log");
                        st.refused = Some(format!("the target's journal refused the frames: {msg} ({hint})"));
                    }
                    Ok(_) => {
                        // Frames sent again on a new session count once: only those past
                        // what was durable (their bytes in proportion: frames of one append
                        // are alike in size on average).
                        let before = self.durable.fetch_max(last, Ordering::Release);
                        let new = last.saturating_sub(before).min(frames);
                        self.frames.fetch_add(new, Ordering::Relaxed);
                        self.bytes.fetch_add(bytes * new / frames.max(1), Ordering::Relaxed);
                    }
                    Err(e) => st.refused = Some(format!("the target refused the frames: {} ({})", e.message, e.hint)),
                },
            }
            self.cv.notify_all();
        }
    }
}

/// The source side of a sync mirror to a peer's journal (see the module comment).
pub(crate) struct RemoteSink {
    daemon: Weak<Daemon>,
    peer: String,
    /// The mirror's name on the target (`POOL/VOL`).
    target: String,
    /// The session's sending half and its number.
    session: Option<(u64, PeerSender)>,
    sessions: u64,
    /// Frames sent and not known durable yet, oldest first.
    unacked: VecDeque<TapFrame>,
    acks: Arc<Acks>,
}

impl RemoteSink {
    /// A sink on `conn` (the session the link was armed on).
    pub(crate) fn new(
        daemon: Weak<Daemon>,
        peer: String,
        target: String,
        conn: PeerConnection,
        acks: Arc<Acks>,
    ) -> Result<RemoteSink, ApiError> {
        let mut s = RemoteSink { daemon, peer, target, session: None, sessions: 0, unacked: VecDeque::new(), acks };
        s.open(Some(conn))?;
        Ok(s)
    }

    /// The mirror's name on the target.
    pub(crate) fn target(&self) -> &str {
        &self.target
    }

    /// Start a session (on `conn`, or a new connection) and its receiver.
    fn open(&mut self, conn: Option<PeerConnection>) -> Result<(), ApiError> {
        self.end_session();
        let conn = match conn {
            Some(c) => c,
            None => {
                let d = self.daemon.upgrade().ok_or_else(|| ApiError::unavailable("the daemon is stopping", "-"))?;
                PeerClient::connect(&d, &self.peer)?
            }
        };
        let (tx, rx) = conn.into_split()?;
        tx.set_write_timeout(Some(REMOTE_TIMEOUT))?;
        self.sessions += 1;
        let n = self.sessions;
        {
            let mut st = self.acks.st.lock().expect("sync acks");
            st.session = n;
            st.asked.clear();
            st.ended = None;
            st.control = None;
        }
        let acks = self.acks.clone();
        std::thread::Builder::new()
            .name("sync-mirror-acks".into())
            .spawn(move || acks.receive(n, rx))
            .map_err(|e| ApiError::internal(format!("start a sync mirror's receiver: {e}")))?;
        self.session = Some((n, tx));
        Ok(())
    }

    /// Whether the session is open and its receiver still reading.
    pub(crate) fn live(&self) -> bool {
        let Some((n, _)) = &self.session else { return false };
        let st = self.acks.st.lock().expect("sync acks");
        st.session == *n && st.ended.is_none()
    }

    fn end_session(&mut self) {
        if let Some((n, tx)) = self.session.take() {
            let mut st = self.acks.st.lock().expect("sync acks");
            if st.session == n && st.ended.is_none() {
                st.ended = Some("the session was given up".into());
                self.acks.cv.notify_all();
            }
            drop(st);
            drop(tx);
        }
    }

    /// Send `frames` without waiting for the target (on a new session, every frame not
    /// known durable goes again first).
    pub(crate) fn send(&mut self, frames: Vec<TapFrame>) -> Result<(), ApiError> {
        let durable = self.acks.durable();
        while self.unacked.front().is_some_and(|f| f.seq <= durable) {
            self.unacked.pop_front();
        }
        let new_from = self.unacked.len();
        self.unacked.extend(frames);
        if self.unacked.is_empty() {
            return Ok(());
        }
        // A new session sent them all already.
        self.retrying(|s, new| if new || new_from == s.unacked.len() { Ok(()) } else { s.send_append(new_from) })
    }

    /// A live session: the open one, or a new one on which every frame not known durable
    /// went again. Whether it is new.
    fn session_with_unacked(&mut self) -> Result<bool, ApiError> {
        if self.live() {
            return Ok(false);
        }
        self.open(None)?;
        if !self.unacked.is_empty() {
            self.send_append(0)?;
        }
        Ok(true)
    }

    /// `attempt` on a live session (and whether it is new) until it succeeds. A failed
    /// attempt ends its session; the next goes on a new one — at once after a session
    /// that was open before (it may have died idle), else after a pause that grows to
    /// `RECONNECT_PAUSE_MAX` — until `RECONNECT_WITHIN` has passed: a cut of the network
    /// or the peer's restart within it does not make the link fall back.
    fn retrying<T>(&mut self, mut attempt: impl FnMut(&mut Self, bool) -> Result<T, ApiError>) -> Result<T, ApiError> {
        let deadline = Instant::now() + RECONNECT_WITHIN;
        let mut pause = Duration::from_millis(10);
        loop {
            let r = match self.session_with_unacked() {
                Ok(new) => attempt(self, new).map_err(|e| (e, new)),
                Err(e) => Err((e, true)),
            };
            let (e, new) = match r {
                Ok(v) => return Ok(v),
                Err(failed) => failed,
            };
            self.end_session();
            if new {
                if Instant::now() + pause >= deadline {
                    return Err(e);
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(RECONNECT_PAUSE_MAX);
            }
        }
    }

    /// One `sync_append` of `unacked[from..]`.
    fn send_append(&mut self, from: usize) -> Result<(), ApiError> {
        let frames: Vec<&TapFrame> = self.unacked.range(from..).collect();
        let records: u64 = frames.iter().map(|f| f.records.len() as u64).sum();
        let bytes = records + (WIRE_HEADER * frames.len()) as u64;
        let mut buf = Vec::with_capacity(bytes as usize);
        for f in &frames {
            buf.extend_from_slice(&f.seq.to_le_bytes());
            buf.extend_from_slice(&f.txg.to_le_bytes());
            buf.extend_from_slice(&(f.records.len() as u32).to_le_bytes());
            buf.extend_from_slice(&f.records);
        }
        let last = frames.last().expect("a non-empty append").seq;
        let n = frames.len() as u64;
        let msg = MirrorMsg::SyncAppend { name: self.target.clone(), frames: n as u32, bytes };
        let (_, tx) = self.session.as_mut().expect("a live session");
        // Asked before it is sent: the answer may come before `send` returns.
        self.acks.st.lock().expect("sync acks").asked.push_back(Asked::Append { last, frames: n, bytes: records });
        let v = serde_json::to_value(&msg).expect("mirror messages serialise");
        tx.send(&PeerRequest::Mirror(v), &buf)
    }

    /// A control request on the session, in order with the appends; its answer.
    pub(crate) fn control(&mut self, msg: &MirrorMsg) -> Result<serde_json::Value, ApiError> {
        let v = serde_json::to_value(msg).expect("mirror messages serialise");
        self.retrying(|s, _| s.ask(&v))?
    }

    /// `control` on the live session: the target's answer, or why the session failed (a
    /// refusal is an answer: it is not asked again).
    fn ask(&mut self, v: &serde_json::Value) -> Result<Result<serde_json::Value, ApiError>, ApiError> {
        let (n, tx) = self.session.as_mut().expect("a live session");
        let n = *n;
        {
            let mut st = self.acks.st.lock().expect("sync acks");
            st.asked.push_back(Asked::Control);
            st.control = None;
        }
        tx.send(&PeerRequest::Mirror(v.clone()), &[])?;
        let deadline = Instant::now() + REMOTE_TIMEOUT;
        let mut st = self.acks.st.lock().expect("sync acks");
        loop {
            if let Some(r) = st.control.take() {
                return Ok(match r {
                    Ok(PeerResponse::Mirror(v)) => Ok(v),
                    Ok(PeerResponse::Ok) => Ok(serde_json::Value::Null),
                    Ok(other) => Err(ApiError::internal(format!("the target answered {other:?} to a sync request"))),
                    Err(e) => Err(e),
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if st.session != n || st.ended.is_some() || left.is_zero() {
                break;
            }
            st = self.acks.cv.wait_timeout(st, left).expect("sync acks").0;
        }
        let why = st.ended.clone().unwrap_or_else(|| format!("no answer within {} s", REMOTE_TIMEOUT.as_secs()));
        Err(ApiError::unavailable(format!("the journal of {}: {why}", self.target), "the link re-arms"))
    }

    /// Wait until every append sent has been answered (or `REMOTE_TIMEOUT`), then end the
    /// session: nothing of this link is still being written to the target's journal when
    /// a new link opens it.
    pub(crate) fn close(&mut self) {
        let deadline = Instant::now() + REMOTE_TIMEOUT;
        if let Some((n, _)) = &self.session {
            let mut st = self.acks.st.lock().expect("sync acks");
            while st.session == *n && st.ended.is_none() && !st.asked.is_empty() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                st = self.acks.cv.wait_timeout(st, left).expect("sync acks").0;
            }
        }
        self.end_session();
    }
}

impl Drop for RemoteSink {
    fn drop(&mut self) {
        self.end_session();
    }
}

#[cfg(test)]
#[path = "sync_pipe_tests.rs"]
mod tests;
