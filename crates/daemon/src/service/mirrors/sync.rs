//! Synchronous mirrors between pools of this daemon (`mirror create --sync [strict]`):
//! every operation on the source volumes goes, as a frame of the engine's sync tap
//! (engine pool/sync_tap.rs), into a journal on the target pool (engine repl/journal.rs,
//! in the volume `<first volume>.sync-journal`), and an fsync, O_DSYNC write, NFS COMMIT or
//! NBD/iSCSI flush of a source volume returns only once the frames it depends on are
//! durable there. A break restores the target volumes to the common snapshot and replays
//! the journal's frames after it: the target then holds every acknowledged write.
//!
//! Phases of a link (one per armed mirror, `SyncLink`):
//! - *catching up*: armed (at create, at daemon start, after a fall-back): the journal has
//!   a gap (frames before the tap went in are missing) until a transfer of a snapshot
//!   taken after the tap went in lands; syncs are not yet protected (strict mode fails
//!   them).
//! - *in sync*: every sync waits for the journal.
//! - *degraded*: writing the journal failed, or the target fell `QUEUE_MAX_BYTES` behind;
//!   frames are dropped, syncs return after the local write (strict: fail), and the
//!   mirror loop arms a new link, which catches up by itself.
//!
//! Frames queue in memory when they are recorded (under the source pool's lock: never
//! blocking); a syncer appends everything queued (group commit: the journal's lock
//! serialises appends, and a syncer whose frames a previous append covered returns at
//! once), and a flusher thread appends every 20 ms or past `FLUSH_BYTES`, so a sync waits
//! for little more than its own frames.

use super::remote::MirrorMsg;
use super::sync_pipe::{Acks, RemoteSink, REMOTE_TIMEOUT};
use crate::peer_net::PeerClient;
use crate::service::{ApiError, Daemon};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use strata_engine::pool::sync_tap::{SyncTap, TapFrame};
use strata_engine::repl::journal::Journal;
use strata_engine::{Error, Pool, VolumeOptions};

/// The journal volume of a sync mirror in its target pool: `<first volume>` + this.
pub(crate) const JOURNAL_SUFFIX: &str = ".sync-journal";
/// Queued frame bytes that wake the flusher.
const FLUSH_BYTES: u64 = 8 << 20;
/// Queued frame bytes beyond which the mirror falls back to asynchronous.
const QUEUE_MAX_BYTES: u64 = 256 << 20;

pub(crate) fn journal_volume(first: &str) -> String {
    format!("{first}{JOURNAL_SUFFIX}")
}

/// The journal of the mirror whose first volume is `first`, in the target pool `dst`:
/// opened, or made with its volume.
pub(crate) fn open_journal(dst: &Pool, first: &str) -> Result<Journal, ApiError> {
    let jname = journal_volume(first);
    Ok(match dst.volume_id(&jname) {
        Ok(id) => Journal::open(dst, id)?,
        Err(_) => {
            let id = dst.create_volume(&jname, &VolumeOptions::default())?;
            Journal::create(dst, id)?
        }
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    CatchingUp { from_txg: u64 },
    InSync,
    Degraded(String),
}

impl Phase {
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Phase::CatchingUp { .. } => "catching-up",
            Phase::InSync => "in-sync",
            Phase::Degraded(_) => "degraded",
        }
    }
}

struct Queue {
    frames: Vec<TapFrame>,
    bytes: u64,
    /// A sync is about to wait: append now (`SyncTap::prepare`).
    urgent: bool,
}

/// Where a link's frames go: the journal in a pool of this daemon, or the one a paired
/// daemon keeps for the mirror (sync_pipe.rs sends, sync_remote.rs there takes them).
pub(crate) enum Sink {
    Local { dst: Arc<Pool>, journal: Journal },
    Remote(RemoteSink),
}

impl Sink {
    /// Local: append `frames` to the journal and flush. Remote: send them (the receiver
    /// marks them durable when the target answers).
    fn append(&mut self, frames: Vec<TapFrame>, acks: &Acks) -> Result<(), ApiError> {
        match self {
            Sink::Local { dst, journal } => {
                let Some(last) = frames.last().map(|f| f.seq) else { return Ok(()) };
                journal.append(dst, &frames)?;
                acks.advance(last, frames.len() as u64, frames.iter().map(|f| f.records.len() as u64).sum());
                Ok(())
            }
            Sink::Remote(r) => r.send(frames),
        }
    }

    fn note_snapshot(&mut self, snapshot: &str, txg: u64) -> Result<(), ApiError> {
        match self {
            Sink::Local { dst, journal } => Ok(journal.note_snapshot(dst, snapshot, txg)?),
            Sink::Remote(r) => {
                let name = r.target().to_string();
                r.control(&MirrorMsg::SyncNote { name, snapshot: snapshot.into(), txg }).map(|_| ())
            }
        }
    }

    fn retire(&mut self, txg: u64, clear_gap: bool) -> Result<(), ApiError> {
        match self {
            Sink::Local { dst, journal } => {
                journal.retire(dst, txg)?;
                if clear_gap {
                    journal.clear_gap(dst)?;
                }
                Ok(())
            }
            Sink::Remote(r) => {
                let name = r.target().to_string();
                r.control(&MirrorMsg::SyncRetire { name, txg, clear_gap }).map(|_| ())
            }
        }
    }

    /// Wait for what is in flight to the target, then let go of it (a disarm).
    fn close(&mut self) {
        if let Sink::Remote(r) = self {
            r.close();
        }
    }
}

/// One armed sync mirror: the source pool's tap.
pub(crate) struct SyncLink {
    strict: bool,
    /// The failover lease of the volumes (failover.rs): told when the link is lost.
    lease: Option<Arc<super::failover::Lease>>,
    vols: Vec<u64>,
    /// The journal's lock: one append (or note, or retire) sent at a time, in order.
    pub(super) sink: Mutex<Sink>,
    queue: Mutex<Queue>,
    kick: Condvar,
    /// The tap's last frame handed to the sink.
    sent: AtomicU64,
    /// What the target made durable.
    pub(crate) acks: Arc<Acks>,
    phase: Mutex<Phase>,
    stop: AtomicBool,
    /// The fall-back was reported (by the mirror loop).
    pub(crate) reported: AtomicBool,
}

impl SyncLink {
    pub(crate) fn phase(&self) -> Phase {
        self.phase.lock().expect("sync phase").clone()
    }

    fn degrade(&self, why: String) {
        // Before any sync can return without the target: the failover gate holds syncs
        // until etcd knows the target may lack them.
        if let Some(l) = &self.lease {
            l.link_lost();
        }
        let mut p = self.phase.lock().expect("sync phase");
        if !matches!(*p, Phase::Degraded(_)) {
            *p = Phase::Degraded(why);
        }
        drop(p);
        self.acks.interrupt();
    }

    /// Hand everything queued to the sink (local: appended and flushed; remote: sent, and
    /// frames of a session that ended sent again). Errors degrade the link.
    fn flush(&self) -> Result<(), String> {
        let mut sink = self.sink.lock().expect("sync journal");
        self.flush_into(&mut sink)
    }

    /// `flush`, the journal's lock held.
    fn flush_into(&self, sink: &mut Sink) -> Result<(), String> {
        let frames = {
            let mut q = self.queue.lock().expect("sync queue");
            q.bytes = 0;
            q.urgent = false;
            std::mem::take(&mut q.frames)
        };
        if self.stop.load(Ordering::Relaxed) || matches!(self.phase(), Phase::Degraded(_)) {
            return Ok(());
        }
        if frames.is_empty() && !self.acks.ended_unanswered() {
            return Ok(());
        }
        let last = frames.last().map(|f| f.seq);
        match sink.append(frames, &self.acks) {
            Ok(()) => {
                if let Some(last) = last {
                    self.sent.fetch_max(last, Ordering::Release);
                }
                Ok(())
            }
            Err(e) => {
                let why = format!("writing the target's journal failed: {}", e.message);
                self.degrade(why.clone());
                Err(why)
            }
        }
    }

    fn flusher(self: Arc<Self>) {
        while !self.stop.load(Ordering::Relaxed) {
            {
                let q = self.queue.lock().expect("sync queue");
                let (_q, _) = self
                    .kick
                    .wait_timeout_while(q, Duration::from_millis(20), |q| q.bytes < FLUSH_BYTES && !q.urgent)
                    .expect("sync queue");
            }
            let _ = self.flush();
        }
    }

    /// Append what is queued and wait until the target holds it, then stop (a break with
    /// the source alive).
    pub(crate) fn finish(&self) -> Result<(), String> {
        let r = self.flush().and_then(|()| {
            let sent = self.sent.load(Ordering::Acquire);
            let deadline = Instant::now() + REMOTE_TIMEOUT;
            loop {
                let seen = self.acks.interrupts();
                if self.acks.durable() >= sent {
                    return Ok(());
                }
                if let Some(why) = self.acks.refused() {
                    return Err(why);
                }
                if Instant::now() >= deadline {
                    return Err(format!("the target did not answer within {} s", REMOTE_TIMEOUT.as_secs()));
                }
                if self.acks.ended_unanswered() {
                    self.flush()?;
                }
                self.acks.wait(sent, deadline, seen);
            }
        });
        self.stop();
        r
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.kick.notify_all();
        self.acks.interrupt();
    }
}

fn strict_error(what: String) -> Error {
    Error::Io {
        context: "make the write durable on the synchronous mirror",
        source: std::io::Error::other(format!("{what} (the mirror is strict: writes fail rather than go unmirrored)")),
    }
}

impl SyncTap for SyncLink {
    fn wants(&self, vol: u64) -> bool {
        self.vols.contains(&vol)
    }

    fn push(&self, frame: TapFrame) {
        if self.stop.load(Ordering::Relaxed) || matches!(self.phase(), Phase::Degraded(_)) {
            return;
        }
        let mut q = self.queue.lock().expect("sync queue");
        q.bytes += frame.records.len() as u64;
        q.frames.push(frame);
        if q.bytes > QUEUE_MAX_BYTES {
            let mb = q.bytes >> 20;
            q.frames.clear();
            q.bytes = 0;
            drop(q);
            self.degrade(format!("the target fell {mb} MiB behind"));
        } else if q.bytes >= FLUSH_BYTES {
            self.kick.notify_one();
        }
    }

    fn prepare(&self, seq: u64) {
        if self.sent.load(Ordering::Acquire) >= seq {
            return;
        }
        // To a peer, on a live session, with nobody else sending: send now, in this thread
        // (a socket write; waking the flusher would cost a thread switch before it).
        if let Ok(mut sink) = self.sink.try_lock() {
            if matches!(&*sink, Sink::Remote(r) if r.live()) {
                let _ = self.flush_into(&mut sink);
                return;
            }
        }
        let mut q = self.queue.lock().expect("sync queue");
        if !q.frames.is_empty() {
            q.urgent = true;
            self.kick.notify_one();
        }
    }

    fn wait(&self, seq: u64) -> strata_engine::Result<()> {
        if self.acks.durable() >= seq {
            return Ok(());
        }
        let start = Instant::now();
        let r = self.wait_for(seq, start + REMOTE_TIMEOUT);
        self.acks.waits.fetch_add(1, Ordering::Relaxed);
        self.acks.waited_ns.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }
}

impl SyncLink {
    /// `wait`, until `deadline`.
    fn wait_for(&self, seq: u64, deadline: Instant) -> strata_engine::Result<()> {
        let fail = |why: String| if self.strict { Err(strict_error(why)) } else { Ok(()) };
        // A flush hands every queued frame to the sink: after one, this sync's frames are
        // sent, or were dropped by a fall-back or a stop (said by the phase).
        let mut flushes = 0;
        loop {
            let seen = self.acks.interrupts();
            if self.acks.durable() >= seq {
                return Ok(());
            }
            if let Some(why) = self.acks.refused() {
                self.degrade(why);
            }
            let why = match self.phase() {
                Phase::Degraded(why) => Some(why),
                Phase::CatchingUp { .. } if self.strict => {
                    Some("the mirror is catching up (a transfer brings its journal back to complete)".into())
                }
                _ if self.stop.load(Ordering::Relaxed) => Some("the mirror was stopped".into()),
                _ => None,
            };
            if let Some(why) = why {
                return fail(why);
            }
            let unsent = self.sent.load(Ordering::Acquire) < seq;
            if unsent && flushes == 3 || Instant::now() >= deadline {
                break;
            }
            if unsent || self.acks.ended_unanswered() {
                // (A session that ended with frames unanswered: they go again on a new one.)
                flushes += usize::from(unsent);
                if let Err(why) = self.flush() {
                    return fail(why);
                }
                continue;
            }
            self.acks.wait(seq, deadline, seen);
        }
        let why = match self.sent.load(Ordering::Acquire) < seq {
            true => format!("frames up to {seq} were neither queued nor sent"),
            false => format!("the target did not make the frames durable within {} s", REMOTE_TIMEOUT.as_secs()),
        };
        self.degrade(why.clone());
        fail(why)
    }
}

impl Daemon {
    /// Arm sync mirror `name`: its journal (made if missing, a gap marked), a new link as
    /// the source pool's tap, and a transfer to catch up.
    pub(crate) fn arm_sync(self: &Arc<Self>, name: &str, caller: &str) -> Result<(), ApiError> {
        let _arming = self.mirrors.arming.lock().expect("sync arming");
        let rec = self.mirrors.get(name)?;
        let Some(mode) = rec.sync.clone() else { return Ok(()) };
        // The source daemon arms; a target's record only keeps the journal (sync_remote.rs).
        if rec.state == "broken" || rec.state == "paused" || rec.source_peer.is_some() || rec.fenced() {
            return Ok(());
        }
        self.disarm_sync(name);
        let lease = match super::failover::role(&rec) {
            super::failover::Role::Holder { pool } => self.failover_lease(name, &rec, &pool),
            _ => None,
        };
        let src = self.pool(&rec.source_pool)?;
        let mut vols = Vec::new();
        for v in &rec.volumes {
            vols.push(src.volume_id(v)?.0);
        }
        if rec.source_volume_ids != vols {
            let ids = vols.clone();
            self.mirrors.update(name, |m| m.source_volume_ids = ids);
            self.save_state()?;
        }
        let acks = Arc::new(Acks::new());
        let sink = match &rec.dest_peer {
            None => {
                let dst = self.pool(&rec.dest_pool)?;
                let journal = open_journal(&dst, &rec.volumes[0])?;
                journal.mark_gap(&dst)?;
                Sink::Local { dst, journal }
            }
            Some(peer) => {
                // The target daemon opens (or makes) the journal and marks the gap.
                let target = format!("{}/{}", rec.dest_pool, rec.volumes[0]);
                let mut conn = PeerClient::connect(self, peer)?;
                conn.set_timeout(Some(REMOTE_TIMEOUT))?;
                // The target learns the failover settings (not this side's history).
                let failover = rec.failover.clone().map(|mut f| {
                    f.took_over_ns = None;
                    f.fenced_by = None;
                    f
                });
                let arm = MirrorMsg::SyncArm {
                    name: target.clone(),
                    mode: mode.clone(),
                    source_volume_ids: vols.clone(),
                    failover,
                };
                super::remote::request(&mut conn, &arm)?;
                Sink::Remote(RemoteSink::new(Arc::downgrade(self), peer.clone(), target, conn, acks.clone())?)
            }
        };
        let link = Arc::new(SyncLink {
            strict: mode == "strict",
            lease: lease.clone(),
            vols,
            sink: Mutex::new(sink),
            queue: Mutex::new(Queue { frames: Vec::new(), bytes: 0, urgent: false }),
            kick: Condvar::new(),
            sent: AtomicU64::new(0),
            acks,
            phase: Mutex::new(Phase::CatchingUp { from_txg: u64::MAX }),
            stop: AtomicBool::new(false),
            reported: AtomicBool::new(false),
        });
        let from_txg = src.set_sync_tap(Some(link.clone()));
        *link.phase.lock().expect("sync phase") = Phase::CatchingUp { from_txg };
        if let Some(l) = &lease {
            l.link_armed();
        }
        let l = link.clone();
        std::thread::Builder::new()
            .name("sync-mirror".into())
            .spawn(move || l.flusher())
            .map_err(|e| ApiError::internal(format!("start a sync mirror's flusher: {e}")))?;
        self.mirrors.links.lock().expect("sync links").insert(name.to_string(), link);
        tracing::info!(mirror = name, from_txg, caller, "sync mirror armed: catching up");
        // A transfer in flight was snapshotted before the tap went in: the one after it
        // brings the journal back to complete.
        match self.mirrors.running(name) {
            Some(j) if j.update_requested() => Ok(()),
            _ => self.start_transfer(name, caller),
        }
    }

    /// Take the link of mirror `name` off its source pool.
    pub(crate) fn disarm_sync(&self, name: &str) -> Option<Arc<SyncLink>> {
        let link = self.mirrors.links.lock().expect("sync links").remove(name)?;
        if let Some(l) = &link.lease {
            l.link_lost();
        }
        if let Ok(rec) = self.mirrors.get(name) {
            if let Ok(src) = self.pool(&rec.source_pool) {
                src.set_sync_tap(None);
            }
        }
        link.stop();
        let (waits, ns) = (link.acks.waits.load(Ordering::Relaxed), link.acks.waited_ns.load(Ordering::Relaxed));
        tracing::info!(
            mirror = name,
            frames = link.acks.frames.load(Ordering::Relaxed),
            waits,
            wait_mean_us = ns / waits.max(1) / 1000,
            "sync link off: syncs that waited for the target after their local write, and how long on average"
        );
        // Appends in flight finish before anyone opens the journal again (a flush checks
        // `stop` under the journal's lock, so none starts after this).
        link.sink.lock().expect("sync journal").close();
        Some(link)
    }

    /// Take every link from or to `pool` off (an export, a destroy).
    pub(crate) fn disarm_sync_for_pool(&self, pool: &str) {
        for r in self.mirrors.records() {
            let here_source = r.source_peer.is_none() && r.source_pool == pool;
            let here_target = r.dest_peer.is_none() && r.dest_pool == pool;
            if r.sync.is_some() && (here_source || here_target) {
                self.disarm_sync(&r.name());
                self.mirrors.journals.lock().expect("sync journals").remove(&r.name());
            }
        }
    }

    /// Source volumes of `pool` changed outside the tap (a restore): their sync mirror's
    /// journal no longer follows on; its link falls back and is armed again.
    pub(crate) fn sync_source_changed(&self, pool: &str, volumes: &[String]) {
        for r in self.mirrors.records() {
            if r.sync.is_some() && r.source_pool == pool && r.volumes.iter().any(|v| volumes.contains(v)) {
                if let Some(link) = self.sync_link(&r.name()) {
                    link.degrade("a source volume was restored: the journal starts again after a transfer".into());
                }
            }
        }
    }

    pub(crate) fn sync_link(&self, name: &str) -> Option<Arc<SyncLink>> {
        self.mirrors.links.lock().expect("sync links").get(name).cloned()
    }

    /// A new common snapshot of source txg `txg` landed: retire what it holds; out of
    /// catching up if it was taken after the link's tap went in.
    pub(crate) fn sync_transferred(&self, name: &str, txg: u64) -> Result<(), ApiError> {
        let Some(link) = self.sync_link(name) else { return Ok(()) };
        let mut sink = link.sink.lock().expect("sync journal");
        let caught_up = matches!(link.phase(), Phase::CatchingUp { from_txg } if txg + 1 >= from_txg);
        if let Err(e) = sink.retire(txg, caught_up) {
            drop(sink);
            link.degrade(format!("retiring the journal's transferred frames failed: {}", e.message));
            return Err(e);
        }
        if caught_up {
            *link.phase.lock().expect("sync phase") = Phase::InSync;
            drop(sink);
            tracing::info!(mirror = name, "sync mirror in sync");
            let rec = self.mirrors.get(name)?;
            self.events.record(
                "info",
                "mirror.sync",
                Some(&rec.source_pool),
                Some(name),
                "in sync: every fsync of the source volumes now waits for the target's journal".into(),
            );
        }
        Ok(())
    }

    /// Before a transfer of snapshot `snap` (source txg `txg`): note it in the journal.
    pub(crate) fn sync_note_snapshot(&self, name: &str, snap: &str, txg: u64) -> Result<(), ApiError> {
        let Some(link) = self.sync_link(name) else { return Ok(()) };
        let mut sink = link.sink.lock().expect("sync journal");
        sink.note_snapshot(snap, txg)
    }

    /// At a break: the journal's frames after the common snapshot, applied to the target
    /// volumes (already restored to it). Returns what it says in the event.
    pub(crate) fn sync_replay(&self, name: &str, common: &str) -> Result<Option<String>, ApiError> {
        let rec = self.mirrors.get(name)?;
        if rec.sync.is_none() {
            return Ok(None);
        }
        // What the source queued goes to the journal first (with the source alive), then
        // the link comes off.
        if let Some(link) = self.sync_link(name) {
            if let Err(why) = link.finish() {
                tracing::warn!(mirror = name, "last frames before the break not journaled: {why}");
            }
        }
        self.disarm_sync(name);
        // On the target of a mirror from a peer: its journal stops taking frames.
        self.mirrors.journals.lock().expect("sync journals").remove(name);
        let dst = self.pool(&rec.dest_pool)?;
        let Ok(jvol) = dst.volume_id(&journal_volume(&rec.volumes[0])) else {
            return Ok(Some("no sync journal on the target: nothing replayed".into()));
        };
        let journal = Journal::open(&dst, jvol)?;
        let Some(txg) = journal.snapshot_txg(&dst, common)? else {
            return Ok(Some(format!("the journal has no record of {common}: nothing replayed")));
        };
        let mut map = Vec::new();
        for (v, src_id) in rec.volumes.iter().zip(&rec.source_volume_ids) {
            map.push((*src_id, dst.volume_id(v)?));
        }
        let gap = journal.gap(&dst)?;
        let done = journal.replay(&dst, txg, &|v| map.iter().find(|(s, _)| *s == v).map(|(_, d)| *d))?;
        tracing::info!(
            mirror = name,
            common,
            frames = done.frames,
            operations = done.operations,
            gap = ?gap,
            "sync journal replayed"
        );
        Ok(Some(format!(
            "{} frames ({} operations) of synchronous writes replayed on top of {common}{}",
            done.frames,
            done.operations,
            if gap.is_some() {
                " (the mirror was catching up: writes after its fall-back were not replayed)"
            } else {
                ""
            }
        )))
    }

    /// Drop mirror `name`'s journal volume (resync, reverse, delete): a new one starts
    /// with the next arm.
    pub(crate) fn drop_sync_journal(&self, pool: &str, first: &str) {
        if let Ok(p) = self.pool(pool) {
            let j = journal_volume(first);
            if p.volume_id(&j).is_ok() {
                if let Err(e) = p.delete_volume(&j) {
                    tracing::warn!(pool, volume = %j, "deleting a sync journal: {e}");
                }
            }
        }
    }

    /// From the mirror loop: report fall-backs and arm their mirrors again once no
    /// transfer runs.
    pub(crate) fn sync_watch(self: &Arc<Self>) {
        let links: Vec<(String, Arc<SyncLink>)> =
            self.mirrors.links.lock().expect("sync links").iter().map(|(n, l)| (n.clone(), l.clone())).collect();
        for (name, link) in links {
            let Phase::Degraded(why) = link.phase() else { continue };
            if !link.reported.swap(true, Ordering::Relaxed) {
                tracing::warn!(mirror = %name, "sync mirror fell back to asynchronous: {why}");
                if let Ok(rec) = self.mirrors.get(&name) {
                    self.events.record(
                        "warning",
                        "mirror.sync_degraded",
                        Some(&rec.source_pool),
                        Some(&name),
                        format!(
                            "{why}; syncs no longer wait for the target{} until it catches up",
                            match link.strict {
                                true => " (strict: they fail)",
                                false => "",
                            }
                        ),
                    );
                }
            }
            if self.mirrors.running(&name).is_none() {
                if let Err(e) = self.arm_sync(&name, "sync fall-back") {
                    tracing::warn!(mirror = %name, "sync mirror not armed again: {}", e.message);
                }
            }
        }
        // Mirrors left without a link (a pool exported and imported again, an arm that
        // failed): armed once both pools are served, at most every 30 s per mirror.
        for r in self.mirrors.records() {
            let name = r.name();
            if r.sync.is_none()
                || r.source_peer.is_some()
                || r.fenced()
                || matches!(r.state.as_str(), "broken" | "paused")
                || self.sync_link(&name).is_some()
                || self.mirrors.running(&name).is_some()
                || self.pool(&r.source_pool).is_err()
                || r.dest_peer.is_none() && self.pool(&r.dest_pool).is_err()
            {
                continue;
            }
            {
                let retry = self.mirrors.arm_retry.lock().expect("sync retry");
                if retry.get(&name).is_some_and(|t| t.elapsed() < Duration::from_secs(30)) {
                    continue;
                }
            }
            match self.arm_sync(&name, "sync re-arm") {
                Ok(()) => {
                    self.mirrors.arm_retry.lock().expect("sync retry").remove(&name);
                }
                Err(e) => {
                    tracing::warn!(mirror = %name, "sync mirror not armed: {} ({}); retried in 30 s", e.message, e.hint);
                    self.mirrors.arm_retry.lock().expect("sync retry").insert(name, std::time::Instant::now());
                }
            }
        }
    }

    /// Arm after an action that made the mirror a mirror again; a failure is logged (the
    /// mirror loop tries again) rather than failing the action that succeeded.
    pub(crate) fn arm_sync_or_later(self: &Arc<Self>, name: &str, caller: &str) {
        if let Err(e) = self.arm_sync(name, caller) {
            tracing::warn!(mirror = name, "sync mirror not armed yet: {} ({})", e.message, e.hint);
            self.mirrors.arm_retry.lock().expect("sync retry").insert(name.to_string(), std::time::Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    //! The link against two real pools on image files: frames journaled by syncs replay
    //! onto the target; a target whose log write fails makes a strict link fail the sync
    //! and an `on` link fall back (the sync returns, the link says why).

    use super::*;
    use strata_engine::failpoint::LOG_WRITE_UNLOCKED;
    use strata_engine::{ChecksumAlgo, CreateOptions, ObjectId, PoolOptions};
    use strata_engine::{FileDevice, FileDeviceOptions};

    fn pool(dir: &std::path::Path, name: &str, guid: u64) -> Arc<Pool> {
        let opts = FileDeviceOptions { direct: false, create_size: Some(64 << 20) };
        let dev = Arc::new(FileDevice::open(&dir.join(format!("{name}.img")), &opts).unwrap());
        let create =
            CreateOptions { name: name.into(), pool_guid: guid, device_guid: guid + 1, checksum: ChecksumAlgo::Blake3 };
        Arc::new(Pool::create(dev, create, PoolOptions::new(Arc::new(crate::SystemClock))).unwrap())
    }

    fn link(src: &Pool, dst: &Arc<Pool>, vol: u64, strict: bool) -> Arc<SyncLink> {
        let jvol = dst.create_volume("j", &VolumeOptions::default()).unwrap();
        let link = Arc::new(SyncLink {
            strict,
            lease: None,
            vols: vec![vol],
            sink: Mutex::new(Sink::Local { dst: dst.clone(), journal: Journal::create(dst, jvol).unwrap() }),
            queue: Mutex::new(Queue { frames: Vec::new(), bytes: 0, urgent: false }),
            kick: Condvar::new(),
            sent: AtomicU64::new(0),
            acks: Arc::new(Acks::new()),
            phase: Mutex::new(Phase::InSync),
            stop: AtomicBool::new(false),
            reported: AtomicBool::new(false),
        });
        src.set_sync_tap(Some(link.clone()));
        link
    }

    fn dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("strata-sync-link-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn synced_writes_are_journaled_and_replay_onto_the_target() {
        let d = dir("replay");
        let (src, dst) = (pool(&d, "src", 10), pool(&d, "dst", 20));
        let vol = src.create_volume("db", &VolumeOptions::default()).unwrap();
        let target = dst.create_volume("db", &VolumeOptions::default()).unwrap();
        let link = link(&src, &dst, vol.0, true);
        let obj = src.create_object(vol, b"f").unwrap();
        src.write(vol, obj, 0, b"acknowledged").unwrap();
        src.sync_object(vol, obj).unwrap();
        assert_eq!(link.acks.frames.load(Ordering::Relaxed), 2, "the create and the write");
        let Sink::Local { journal, .. } = &*link.sink.lock().unwrap() else { unreachable!() };
        let journal = journal.clone();
        let done = journal.replay(&dst, 0, &|v| (v == vol.0).then_some(target)).unwrap();
        assert_eq!(done.operations, 2);
        assert_eq!(dst.read(target, ObjectId(obj.0), 0, 64).unwrap(), b"acknowledged");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_failing_target_fails_a_strict_sync_and_degrades_an_on_link() {
        let d = dir("fail");
        for strict in [true, false] {
            let (src, dst) = (pool(&d, &format!("src{strict}"), 30), pool(&d, &format!("dst{strict}"), 40));
            let vol = src.create_volume("db", &VolumeOptions::default()).unwrap();
            let link = link(&src, &dst, vol.0, strict);
            let obj = src.create_object(vol, b"f").unwrap();
            src.write(vol, obj, 0, b"x").unwrap();
            dst.failpoints().fail(LOG_WRITE_UNLOCKED, 0, 1);
            let r = src.sync_object(vol, obj);
            match strict {
                true => {
                    let e = r.expect_err("a strict sync fails when the target cannot journal it");
                    assert!(e.to_string().contains("strict"), "{e}");
                }
                false => r.expect("an `on` sync returns after the local write"),
            }
            let Phase::Degraded(why) = link.phase() else { panic!("the link did not fall back: {:?}", link.phase()) };
            assert!(why.contains("journal"), "{why}");
            // Later syncs: strict ones keep failing, others return at once.
            src.write(vol, obj, 0, b"y").unwrap();
            assert_eq!(src.sync_object(vol, obj).is_err(), strict);
            src.set_sync_tap(None);
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}
