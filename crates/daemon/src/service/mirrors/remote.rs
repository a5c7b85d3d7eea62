//! Mirrors between daemons: the source daemon drives, the target daemon receives, over the
//! peer layer (peer_net/: paired daemons, mutual TLS with pinned fingerprints).
//!
//! The source's record names the target daemon (`dest_peer`) and the mirror is called
//! `PEER:DEST_POOL/VOLUME` there; the target keeps its own record (`source_peer`), named
//! `DEST_POOL/VOLUME`, which protects its volumes (no mount, no export, no delete) until it is
//! broken there. The target owns the resume point: it records, per volume, the last frame its
//! receiver committed, so a transfer cut by a crash of either side resumes where the target
//! got to.
//!
//! Messages (`PeerRequest::Mirror`, JSON `MirrorMsg`), each answered before the next:
//! - `create`: make the target volumes and the target's record (the peer must be granted
//!   the pool);
//! - `receive`: one volume of a transfer; answered with `resume_after`, then the source sends
//!   the send stream as raw bytes (stream.rs frames: authenticated end to end) and the target
//!   answers with the snapshot received — or an `error` it could still send;
//! - `commit`: every volume received: the snapshot becomes the common one on the target,
//!   which prunes its transferred snapshots beyond `keep`;
//! - `status`, `delete`.

use super::transfer::{empty_volume, prune, Pace};
use super::{now_ns, LastTransfer, MirrorRecord, PendingTransfer, TransferJob};
use crate::peer_net::{PeerClient, PeerConnection, PeerIdentity, PeerRequest, PeerResponse, ServerConnection};
use crate::service::{ApiError, Daemon};
use serde::{Deserialize, Serialize};
use std::io::BufWriter;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use strata_api::ErrorKind;
use strata_engine::repl::{Applied, SendOptions, SendRecord, StreamReader, StreamWriter};
use strata_engine::{CompressionPolicy, Pool, SyncPolicy, VolumeOptions};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct VolumeShape {
    pub name: String,
    pub record_size: u32,
    pub quota_bytes: u64,
    pub sync: String,
    pub compression: String,
    pub dedup: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum MirrorMsg {
    Create {
        source_pool: String,
        dest_pool: String,
        volumes: Vec<VolumeShape>,
        keep: u32,
    },
    Receive {
        name: String,
        volume: String,
        snapshot: String,
        base: Option<String>,
    },
    Commit {
        name: String,
        snapshot: String,
        created_ns: u64,
        bytes: u64,
        seconds: f64,
    },
    Status {
        name: String,
    },
    Delete {
        name: String,
    },
    /// A sync mirror's link is armed (sync.rs): the target opens or makes the journal,
    /// marks a gap, and records what a break there needs (sync_remote.rs).
    SyncArm {
        name: String,
        mode: String,
        source_volume_ids: Vec<u64>,
        /// Failover settings (failover.rs); absent from older sources.
        #[serde(default)]
        failover: Option<super::failover::FailoverRecord>,
    },
    /// `frames` tap frames follow as raw bytes (`bytes` in all) once the target answers
    /// `ready`; answered when they are durable in the journal.
    SyncAppend {
        name: String,
        frames: u32,
        bytes: u64,
    },
    /// Before a transfer: the snapshot's source txg.
    SyncNote {
        name: String,
        snapshot: String,
        txg: u64,
    },
    /// After a transfer: retire the frames it holds; end the gap if it caught up.
    SyncRetire {
        name: String,
        txg: u64,
        clear_gap: bool,
    },
    /// The mirror's source asks its target (which broke it) to become the source of a
    /// mirror into the asker's pool `dest_pool` (reverse_remote.rs).
    Reverse {
        name: String,
        dest_pool: String,
        /// The mirror's schedule and bandwidth limit, which the new source keeps.
        #[serde(default)]
        every_seconds: Option<u64>,
        #[serde(default)]
        limit_bytes_per_second: Option<u64>,
        /// Only say whether it would (before the asker changes anything).
        #[serde(default)]
        check: bool,
    },
}

pub(super) fn request(conn: &mut PeerConnection, msg: &MirrorMsg) -> Result<serde_json::Value, ApiError> {
    let v = serde_json::to_value(msg).expect("mirror messages serialise");
    match conn.request(&PeerRequest::Mirror(v))? {
        PeerResponse::Mirror(v) => Ok(v),
        PeerResponse::Ok => Ok(serde_json::Value::Null),
        other => Err(ApiError::internal(format!("peer {} answered {other:?} to a mirror request", conn.peer_name()))),
    }
}

/// `PEER:POOL` → (peer, pool).
pub(crate) fn split_remote(dest: &str) -> Option<(&str, &str)> {
    dest.split_once(':').filter(|(p, q)| !p.is_empty() && !q.is_empty())
}

impl Daemon {
    /// Source side of `mirror create POOL/VOL PEER:POOL`: the target makes its volumes and
    /// record, then this daemon records the mirror and starts the first transfer.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create_remote_mirror(
        self: &Arc<Self>,
        src_pool: &str,
        volumes: Vec<String>,
        peer: &str,
        dest_pool: &str,
        keep: u32,
        every_seconds: Option<u64>,
        limit: Option<u64>,
        sync: Option<String>,
        failover: Option<super::failover::FailoverRecord>,
    ) -> Result<String, ApiError> {
        let src = self.pool(src_pool)?;
        let mut shapes = Vec::new();
        for v in &volumes {
            let info = src.volume_info(src.volume_id(v)?)?;
            shapes.push(VolumeShape {
                name: v.clone(),
                record_size: info.record_size,
                quota_bytes: info.quota_bytes,
                sync: info.sync.name().to_string(),
                compression: info.space.compression.name(),
                dedup: info.space.dedup,
            });
        }
        let name = format!("{peer}:{dest_pool}/{}", volumes[0]);
        if self.mirrors.records.lock().expect("mirrors").contains_key(&name) {
            return Err(ApiError::conflict(format!("mirror {name} exists"), "see `strata mirror show`"));
        }
        let mut conn = PeerClient::connect(self, peer)?;
        request(
            &mut conn,
            &MirrorMsg::Create {
                source_pool: src_pool.to_string(),
                dest_pool: dest_pool.to_string(),
                volumes: shapes,
                keep,
            },
        )?;
        let rec = MirrorRecord {
            source_pool: src_pool.to_string(),
            volumes,
            dest_pool: dest_pool.to_string(),
            state: "uninitialized".into(),
            every_seconds,
            keep,
            limit_bytes_per_second: limit,
            common: None,
            common_created_ns: None,
            last: None,
            pending: None,
            dest_peer: Some(peer.to_string()),
            source_peer: None,
            sync,
            source_volume_ids: Vec::new(),
            failover,
        };
        self.mirrors.records.lock().expect("mirrors").insert(name.clone(), rec);
        self.save_state()?;
        tracing::info!(mirror = %name, "mirror to peer {peer} created");
        Ok(name)
    }

    /// Source side: send every volume not yet done of `pending` to the peer, then commit.
    pub(crate) fn run_remote_transfer(
        &self,
        name: &str,
        rec: &MirrorRecord,
        job: &TransferJob,
        src: &Arc<Pool>,
        pending: &PendingTransfer,
        todo: &[String],
    ) -> Result<(), ApiError> {
        let peer = rec.dest_peer.as_deref().expect("a remote mirror names its peer");
        let target_name = format!("{}/{}", rec.dest_pool, rec.volumes[0]);
        let mut conn = PeerClient::connect(self, peer)?;
        for v in todo {
            let answer = request(
                &mut conn,
                &MirrorMsg::Receive {
                    name: target_name.clone(),
                    volume: v.clone(),
                    snapshot: pending.snapshot.clone(),
                    base: pending.base.clone(),
                },
            );
            let answer = match answer {
                Ok(a) => a,
                Err(e) => {
                    // Refused before anything was sent (broken there, not granted, ...): this
                    // transfer is abandoned, so the next update snapshots afresh instead of
                    // resuming one that may be long out of date by then.
                    if pending.done.is_empty() && matches!(e.kind, ErrorKind::Conflict | ErrorKind::PermissionDenied) {
                        self.abandon_pending(name, src, rec, pending);
                    }
                    return Err(e);
                }
            };
            if answer["already"].as_bool() == Some(true) {
                continue;
            }
            let resume_after = answer["resume_after"].as_u64().unwrap_or(0);
            if resume_after > 0 {
                tracing::info!(mirror = name, volume = %v, resume_after, "the target resumes after frame {resume_after}");
            }
            let opts = SendOptions {
                volume: v.clone(),
                base: pending.base.clone(),
                snapshot: pending.snapshot.clone(),
                resume_after,
            };
            let mut pace = Pace::new(rec.limit_bytes_per_second);
            let sent = {
                let mut w = StreamWriter::new(BufWriter::with_capacity(1 << 20, conn.stream()));
                let r = src.send(&opts, &mut |i, f| {
                    if job.stopping() || self.stopping.load(Ordering::Relaxed) {
                        return Err(strata_engine::Error::Busy(
                            "the transfer was paused (the target resumes from its checkpoint)".into(),
                        ));
                    }
                    if let SendRecord::Data { data, .. } = f {
                        job.add_bytes(data.len() as u64);
                        pace.sent(data.len() as u64);
                    }
                    w.write(i, f)
                });
                r.and_then(|s| w.flush().map(|_| s))
            };
            if let Err(e) = sent {
                if !matches!(e, strata_engine::Error::Io { .. }) {
                    // Stopped on this side (a pause, the daemon stopping, a read error): the
                    // connection ends here; the target keeps what it committed.
                    return Err(ApiError::from(e));
                }
                // The write failed: the target may have said why it stopped reading.
                let _ = conn.set_timeout(Some(std::time::Duration::from_secs(5)));
                let why = match conn.read_response() {
                    Ok(PeerResponse::Mirror(v)) if v["error"].is_string() => {
                        format!("the target refused: {}", v["error"].as_str().unwrap_or_default())
                    }
                    _ => e.to_string(),
                };
                return Err(ApiError::new(
                    ErrorKind::Io,
                    format!("mirror {name}, volume {v}: {why}"),
                    "the next update resumes where the target got to",
                ));
            }
            match conn.read_response()? {
                PeerResponse::Mirror(v) if v["error"].is_string() => {
                    return Err(ApiError::new(
                        ErrorKind::Conflict,
                        format!("mirror {name}: the target refused: {}", v["error"].as_str().unwrap_or_default()),
                        v["hint"].as_str().unwrap_or("see the target daemon's log"),
                    ))
                }
                PeerResponse::Mirror(_) => {}
                other => return Err(ApiError::internal(format!("peer {peer} answered {other:?} after a stream"))),
            }
            self.mirrors.update(name, |m| {
                if let Some(p) = m.pending.as_mut() {
                    p.done.push(v.clone());
                }
            });
            self.save_state()?;
        }
        request(
            &mut conn,
            &MirrorMsg::Commit {
                name: target_name,
                snapshot: pending.snapshot.clone(),
                created_ns: pending.created_ns,
                bytes: job.bytes(),
                seconds: job.seconds(),
            },
        )?;
        Ok(())
    }

    /// Forget the transfer in progress and its snapshot on the source (kept if it became
    /// anything else's: the common snapshot, or one a clone needs).
    pub(super) fn abandon_pending(&self, name: &str, src: &Pool, rec: &MirrorRecord, pending: &PendingTransfer) {
        self.mirrors.update(name, |m| m.pending = None);
        if let Err(e) = self.save_state() {
            tracing::warn!(mirror = name, "recording an abandoned transfer: {}", e.message);
        }
        if rec.common.as_deref() != Some(pending.snapshot.as_str()) {
            for v in &rec.volumes {
                if let Err(e) = src.delete_snapshot(v, &pending.snapshot) {
                    tracing::info!(mirror = name, volume = %v, "abandoned transfer snapshot kept: {e}");
                }
            }
        }
    }

    /// Source side of `mirror delete` of a remote mirror: tell the target (best effort).
    pub(crate) fn delete_remote_target(&self, rec: &MirrorRecord) {
        let Some(peer) = rec.dest_peer.as_deref() else { return };
        let name = format!("{}/{}", rec.dest_pool, rec.volumes[0]);
        let r = PeerClient::connect(self, peer).and_then(|mut c| request(&mut c, &MirrorMsg::Delete { name }));
        if let Err(e) = r {
            tracing::warn!(peer, "the target's record of the mirror stays (delete it there): {}", e.message);
        }
    }

    /// Target side: a mirror message from `peer`.
    pub(crate) fn handle_mirror_msg(
        &self,
        peer: &PeerIdentity,
        msg: serde_json::Value,
        conn: &mut ServerConnection,
    ) -> Result<(), ApiError> {
        let msg: MirrorMsg = serde_json::from_value(msg).map_err(|e| {
            ApiError::bad_request(format!("mirror message: {e}"), "the peers run different versions: upgrade one")
        })?;
        match msg {
            MirrorMsg::SyncArm { .. }
            | MirrorMsg::SyncAppend { .. }
            | MirrorMsg::SyncNote { .. }
            | MirrorMsg::SyncRetire { .. } => self.handle_sync_msg(peer, msg, conn),
            MirrorMsg::Reverse { name, dest_pool, every_seconds, limit_bytes_per_second, check } => {
                self.handle_reverse(peer, &name, &dest_pool, (every_seconds, limit_bytes_per_second), check, conn)
            }
            MirrorMsg::Create { source_pool, dest_pool, volumes, keep } => {
                self.peer_granted(peer, &dest_pool)?;
                let _g = self.admin.lock().expect("admin");
                let dst = self.pool(&dest_pool)?;
                let name = format!("{dest_pool}/{}", volumes.first().map_or("", |v| v.name.as_str()));
                if volumes.is_empty() || self.mirrors.records.lock().expect("mirrors").contains_key(&name) {
                    return Err(ApiError::conflict(format!("mirror {name} exists on peer"), "delete it there first"));
                }
                for v in &volumes {
                    if dst.volume_id(&v.name).is_ok() {
                        return Err(ApiError::conflict(
                            format!("{dest_pool}/{} exists on the target", v.name),
                            "a mirror creates its target volumes: delete or rename that one, or mirror to another pool",
                        ));
                    }
                }
                let mut made: Vec<&str> = Vec::new();
                for v in &volumes {
                    let opts = VolumeOptions {
                        record_size: v.record_size,
                        quota_bytes: v.quota_bytes,
                        sync: SyncPolicy::parse(&v.sync)?,
                        compression: CompressionPolicy::parse(&v.compression)?,
                        reservation_bytes: 0,
                        dedup: v.dedup,
                    };
                    if let Err(e) = dst.create_volume(&v.name, &opts) {
                        for m in &made {
                            let _ = dst.delete_volume(m);
                        }
                        return Err(e.into());
                    }
                    made.push(&v.name);
                }
                dst.commit()?;
                let rec = MirrorRecord {
                    source_pool,
                    volumes: volumes.iter().map(|v| v.name.clone()).collect(),
                    dest_pool,
                    state: "uninitialized".into(),
                    every_seconds: None,
                    keep,
                    limit_bytes_per_second: None,
                    common: None,
                    common_created_ns: None,
                    last: None,
                    pending: None,
                    dest_peer: None,
                    source_peer: Some(peer.name.clone()),
                    sync: None,
                    source_volume_ids: Vec::new(),
                    failover: None,
                };
                self.mirrors.records.lock().expect("mirrors").insert(name.clone(), rec);
                self.save_state()?;
                tracing::info!(mirror = %name, peer = %peer.name, "mirror from a peer created");
                conn.reply(&PeerResponse::Ok)
            }
            MirrorMsg::Receive { name, volume, snapshot, base } => {
                let rec = self.incoming(peer, &name)?;
                if !rec.volumes.contains(&volume) {
                    return Err(ApiError::bad_request(format!("{volume} is not a volume of mirror {name}"), "-"));
                }
                let dst = self.pool(&rec.dest_pool)?;
                if dst.snapshot(&volume, &snapshot).is_ok() {
                    return conn.reply(&PeerResponse::Mirror(serde_json::json!({"already": true})));
                }
                let resume_after = match &rec.pending {
                    Some(p) if p.snapshot == snapshot && p.base == base => {
                        p.committed.get(&volume).copied().unwrap_or(0)
                    }
                    _ => 0,
                };
                if rec.pending.as_ref().is_none_or(|p| p.snapshot != snapshot) {
                    let p = PendingTransfer {
                        snapshot: snapshot.clone(),
                        base: base.clone(),
                        created_ns: 0,
                        done: Vec::new(),
                        committed: Default::default(),
                    };
                    self.mirrors.update(&name, |m| m.pending = Some(p));
                    self.save_state()?;
                }
                if base.is_none() && resume_after == 0 {
                    empty_volume(&dst, &volume)?;
                }
                conn.reply(&PeerResponse::Mirror(serde_json::json!({"resume_after": resume_after})))?;
                match self.receive_stream(&name, &dst, &volume, &snapshot, base.as_deref(), resume_after, conn) {
                    Ok(()) => conn.reply(&PeerResponse::Mirror(serde_json::json!({"snapshot": snapshot}))),
                    Err(e) => {
                        tracing::warn!(mirror = %name, volume = %volume, peer = %peer.name, "mirror receive failed: {} ({})", e.message, e.hint);
                        let _ =
                            conn.reply(&PeerResponse::Mirror(serde_json::json!({"error": e.message, "hint": e.hint})));
                        Err(e)
                    }
                }
            }
            MirrorMsg::Commit { name, snapshot, created_ns, bytes, seconds } => {
                let rec = self.incoming(peer, &name)?;
                let dst = self.pool(&rec.dest_pool)?;
                for v in &rec.volumes {
                    dst.snapshot(v, &snapshot).map_err(|_| {
                        ApiError::conflict(format!("{}/{v}@{snapshot} was not received", rec.dest_pool), "update again")
                    })?;
                }
                self.mirrors.update(&name, |m| {
                    m.common = Some(snapshot.clone());
                    m.common_created_ns = Some(created_ns);
                    if m.state == "uninitialized" {
                        m.state = "mirrored".into();
                    }
                    m.last = Some(LastTransfer {
                        snapshot: snapshot.clone(),
                        base: m.pending.as_ref().and_then(|p| p.base.clone()),
                        bytes,
                        seconds,
                        finished_ns: now_ns(),
                    });
                    m.pending = None;
                });
                self.save_state()?;
                for v in &rec.volumes {
                    if let Err(e) = prune(&dst, v, rec.keep, &snapshot) {
                        tracing::warn!(mirror = %name, volume = %v, "pruning transferred snapshots: {e}");
                    }
                }
                tracing::info!(mirror = %name, peer = %peer.name, snapshot = %snapshot, "mirror transfer from a peer done");
                self.events.record(
                    "info",
                    "mirror.received",
                    Some(&rec.dest_pool),
                    Some(&name),
                    format!("received {snapshot} from peer {} ({bytes} bytes in {seconds:.1} s)", peer.name),
                );
                conn.reply(&PeerResponse::Ok)
            }
            MirrorMsg::Status { name } => {
                self.incoming(peer, &name)?;
                let info = self.mirror_info(&name)?;
                conn.reply(&PeerResponse::Mirror(serde_json::to_value(info).expect("serialises")))
            }
            MirrorMsg::Delete { name } => {
                let rec = self.incoming(peer, &name)?;
                self.mirrors.records.lock().expect("mirrors").remove(&name);
                self.failover_delete(&name, &rec);
                if rec.sync.is_some() {
                    self.mirrors.journals.lock().expect("sync journals").remove(&name);
                    self.drop_sync_journal(&rec.dest_pool, &rec.volumes[0]);
                }
                self.save_state()?;
                tracing::info!(mirror = %name, peer = %peer.name, "mirror from a peer deleted: its volumes stay, writable");
                conn.reply(&PeerResponse::Ok)
            }
        }
    }

    fn peer_granted(&self, peer: &PeerIdentity, pool: &str) -> Result<(), ApiError> {
        if self.peer_may_write(peer, pool) {
            return Ok(());
        }
        Err(ApiError::new(
            ErrorKind::PermissionDenied,
            format!("peer {} may not write to pool {pool} of this daemon", peer.name),
            "invite it again with `strata peer invite --grant POOL` on the target",
        ))
    }

    /// The target's record of mirror `name` coming from `peer`, ready to receive.
    pub(super) fn incoming(&self, peer: &PeerIdentity, name: &str) -> Result<MirrorRecord, ApiError> {
        let rec = self.mirrors.get(name)?;
        if rec.source_peer.as_deref() != Some(peer.name.as_str()) {
            return Err(ApiError::new(
                ErrorKind::PermissionDenied,
                format!("mirror {name} of this daemon does not come from peer {}", peer.name),
                "each peer reaches only the mirrors it created",
            ));
        }
        self.peer_granted(peer, &rec.dest_pool)?;
        if rec.state == "broken" {
            return Err(ApiError::conflict(
                format!("mirror {name} is broken on the target"),
                "resync it there (`strata mirror resync` on the target daemon), then update",
            ));
        }
        Ok(rec)
    }

    #[allow(clippy::too_many_arguments)]
    fn receive_stream(
        &self,
        name: &str,
        dst: &Arc<Pool>,
        volume: &str,
        snapshot: &str,
        base: Option<&str>,
        resume_after: u64,
        conn: &mut ServerConnection,
    ) -> Result<(), ApiError> {
        let mut r = StreamReader::new(std::io::BufReader::with_capacity(1 << 20, conn.stream()));
        let header = match r.next_frame()? {
            Some((0, SendRecord::Begin(h))) => h,
            _ => return Err(ApiError::bad_request("the send stream does not start with its begin frame", "-")),
        };
        if header.volume != volume
            || header.snapshot.name != snapshot
            || header.base.as_ref().map(|b| b.name.as_str()) != base
        {
            return Err(ApiError::bad_request(
                format!(
                    "the stream carries {}@{} (base {:?}), not {volume}@{snapshot} (base {base:?})",
                    header.volume, header.snapshot.name, header.base
                ),
                "a stream is received only for the transfer it was announced for",
            ));
        }
        let mut rx = dst.receive_begin(volume, &header, resume_after)?;
        loop {
            let Some((i, rec)) = r.next_frame()? else {
                return Err(ApiError::new(
                    ErrorKind::Io,
                    "the send stream ended before its end frame (the connection was cut)",
                    "the next update resumes from the last checkpoint",
                ));
            };
            match rx.apply(i, &rec)? {
                Applied::Frame => {}
                Applied::Checkpoint(at) => {
                    self.mirrors.update(name, |m| {
                        if let Some(p) = m.pending.as_mut() {
                            p.committed.insert(volume.to_string(), at);
                        }
                    });
                    if let Err(e) = self.save_state() {
                        tracing::warn!(mirror = name, "recording a transfer checkpoint: {}", e.message);
                    }
                }
                Applied::Finished(_) => {
                    self.mirrors.update(name, |m| {
                        if let Some(p) = m.pending.as_mut() {
                            p.done.push(volume.to_string());
                            p.committed.remove(volume);
                        }
                    });
                    self.save_state()?;
                    return Ok(());
                }
            }
        }
    }
}
