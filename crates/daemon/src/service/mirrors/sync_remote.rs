//! Synchronous mirrors to a paired daemon: the journal lives on the target daemon, and the
//! source's link (sync.rs, `Sink::Remote`) drives it over the peer connection with the
//! `Sync*` mirror messages (remote.rs):
//! - `sync_arm`: the target opens or makes `<first volume>.sync-journal` in its pool, marks
//!   a gap, and records the mode and the source's volume ids in its own record (what a break
//!   there needs to replay the journal without the source);
//! - `sync_append`: the frames follow the request at once as raw bytes — per frame `seq
//!   u64, txg u64, len u32` (little-endian) and `len` bytes of records — and the one answer
//!   comes once they are durable in the journal. The source does not wait for it before it
//!   sends the next append (sync_pipe.rs); appends that arrived back to back are written to
//!   the journal as one (one flush), then answered one by one, in order. The target reads
//!   every announced byte before it looks at the request, so a refusal leaves the session
//!   in step; an announcement over `APPEND_MAX_BYTES` is refused and ends it.
//! - `sync_note` / `sync_retire`: as the local link does (sync.rs).
//!
//! Only the peer a mirror comes from reaches its journal (`incoming`: the record names the
//! peer, the pool must be granted, the mirror must not be broken there). The connection is
//! TLS with pinned certificates on both sides (peer_net/); the journal adds its own BLAKE3
//! per frame.

use super::remote::MirrorMsg;
use super::sync::open_journal;
use super::sync_pipe::WIRE_HEADER;
use crate::peer_net::{PeerIdentity, PeerRequest, PeerResponse, ServerConnection};
use crate::service::{ApiError, Daemon};
use std::io::Read;
use std::sync::{Arc, Mutex};
use strata_api::ErrorKind;
use strata_engine::pool::sync_tap::TapFrame;

/// A journal kept for a peer's sync mirror: and the last tap frame it holds of the link
/// armed last (a link's frames count from 1).
pub(crate) struct RemoteJournal {
    pub(crate) journal: strata_engine::repl::journal::Journal,
    pub(crate) last_seq: u64,
    /// Appends answered, and journal writes they took (fewer when appends came back to
    /// back: `sync_append`).
    pub(crate) appends: u64,
    pub(crate) writes: u64,
}

/// Most bytes one append (or a batch of them) may carry (the link's queue falls back at
/// 256 MiB).
const APPEND_MAX_BYTES: u64 = 512 << 20;
/// Most appends written to the journal as one.
const BATCH_MAX: usize = 64;

/// Read `n` frames of `bytes` in all from the stream.
fn read_frames(r: &mut impl Read, n: u32, bytes: u64) -> Result<Vec<TapFrame>, ApiError> {
    let bad = |what: String| ApiError::bad_request(what, "the peers run different versions, or the stream was damaged");
    let io = |e: std::io::Error| ApiError::new(ErrorKind::Io, format!("reading sync frames: {e}"), "the link re-arms");
    let mut left = bytes;
    let mut frames = Vec::with_capacity(n.min(1 << 16) as usize);
    for _ in 0..n {
        let mut h = [0u8; WIRE_HEADER];
        if left < WIRE_HEADER as u64 {
            return Err(bad(format!("{n} frames announced in {bytes} bytes")));
        }
        r.read_exact(&mut h).map_err(io)?;
        let u64_at = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(h[16..20].try_into().expect("4 bytes")) as u64;
        left -= WIRE_HEADER as u64;
        if len > left {
            return Err(bad(format!("a frame of {len} bytes with {left} announced bytes left")));
        }
        let mut records = vec![0u8; len as usize];
        r.read_exact(&mut records).map_err(io)?;
        left -= len;
        frames.push(TapFrame { seq: u64_at(0), txg: u64_at(8), records });
    }
    if left != 0 {
        return Err(bad(format!("{left} announced bytes after the last frame")));
    }
    Ok(frames)
}

impl Daemon {
    /// Target side: a `Sync*` mirror message from `peer`.
    pub(super) fn handle_sync_msg(
        &self,
        peer: &PeerIdentity,
        msg: MirrorMsg,
        conn: &mut ServerConnection,
    ) -> Result<(), ApiError> {
        match msg {
            MirrorMsg::SyncArm { name, mode, source_volume_ids, failover } => {
                let rec = self.incoming(peer, &name)?;
                if mode != "on" && mode != "strict" {
                    return Err(ApiError::bad_request(format!("sync mode {mode:?}"), "on or strict"));
                }
                if source_volume_ids.len() != rec.volumes.len() {
                    return Err(ApiError::bad_request(
                        format!("{} source volume ids for {} volumes", source_volume_ids.len(), rec.volumes.len()),
                        "-",
                    ));
                }
                let dst = self.pool(&rec.dest_pool)?;
                let journal = open_journal(&dst, &rec.volumes[0])?;
                journal.mark_gap(&dst)?;
                let j = RemoteJournal { journal, last_seq: 0, appends: 0, writes: 0 };
                self.mirrors.journals.lock().expect("sync journals").insert(name.clone(), Arc::new(Mutex::new(j)));
                self.mirrors.update(&name, |m| {
                    m.sync = Some(mode.clone());
                    m.source_volume_ids = source_volume_ids.clone();
                    // The settings from the source; what this side did stays.
                    m.failover = failover.clone().map(|mut f| {
                        if let Some(mine) = &m.failover {
                            f.took_over_ns = mine.took_over_ns;
                            f.fenced_by = mine.fenced_by.clone();
                        }
                        f
                    });
                });
                self.save_state()?;
                tracing::info!(mirror = %name, peer = %peer.name, mode = %mode, "sync mirror from a peer armed: journal open");
                conn.reply(&PeerResponse::Ok)
            }
            MirrorMsg::SyncAppend { name, frames, bytes } => self.sync_append(peer, name, frames, bytes, conn),
            MirrorMsg::SyncNote { name, snapshot, txg } => {
                let rec = self.incoming(peer, &name)?;
                let dst = self.pool(&rec.dest_pool)?;
                self.journals_of(&name)?.lock().expect("sync journal").journal.note_snapshot(&dst, &snapshot, txg)?;
                conn.reply(&PeerResponse::Ok)
            }
            MirrorMsg::SyncRetire { name, txg, clear_gap } => {
                let rec = self.incoming(peer, &name)?;
                let dst = self.pool(&rec.dest_pool)?;
                let journal = self.journals_of(&name)?;
                let mut j = journal.lock().expect("sync journal");
                j.journal.retire(&dst, txg)?;
                if clear_gap {
                    j.journal.clear_gap(&dst)?;
                }
                conn.reply(&PeerResponse::Ok)
            }
            _ => Err(ApiError::internal("a mirror message that is not a sync one, in the sync handler")),
        }
    }

    /// Target side of `sync_append`: the announced frames, and those of the appends for
    /// the same mirror the source sent right behind it (it pipelines them: sync_pipe.rs),
    /// written to the journal with one write and one flush — group commit across the
    /// source's syncs — then one answer per append, in order.
    fn sync_append(
        &self,
        peer: &PeerIdentity,
        name: String,
        frames: u32,
        bytes: u64,
        conn: &mut ServerConnection,
    ) -> Result<(), ApiError> {
        if bytes > APPEND_MAX_BYTES {
            // The bytes are not read: the session cannot go on (Err after a reply).
            let e = ApiError::bad_request(format!("an append of {bytes} bytes"), "at most 512 MiB per append");
            conn.reply(&PeerResponse::Mirror(serde_json::json!({"error": e.message, "hint": e.hint})))?;
            return Err(e);
        }
        // (frames announced, what was read) per append of the batch; a read that failed
        // (the stream is out of step) is the batch's last.
        let mut batch = vec![(frames, read_frames(conn.stream(), frames, bytes))];
        let mut total = bytes;
        let mut ahead = Ok(());
        while batch.len() < BATCH_MAX && batch.last().is_some_and(|(_, f)| f.is_ok()) {
            let req = match conn.ready_request() {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => {
                    ahead = Err(e);
                    break;
                }
            };
            let next = match &req {
                PeerRequest::Mirror(v) => serde_json::from_value::<MirrorMsg>(v.clone()).ok(),
                _ => None,
            };
            match next {
                Some(MirrorMsg::SyncAppend { name: n, frames, bytes })
                    if n == name && total.saturating_add(bytes) <= APPEND_MAX_BYTES =>
                {
                    total += bytes;
                    batch.push((frames, read_frames(conn.stream(), frames, bytes)));
                }
                _ => {
                    conn.push_back(req);
                    break;
                }
            }
        }
        let in_step = batch.iter().all(|(_, f)| f.is_ok());
        let read: Vec<TapFrame> =
            batch.iter_mut().filter_map(|(_, f)| f.as_mut().ok()).flat_map(std::mem::take).collect();
        let r = self.incoming(peer, &name).and_then(|rec| {
            let journal = self.journals_of(&name)?;
            let dst = self.pool(&rec.dest_pool)?;
            let mut j = journal.lock().expect("sync journal");
            j.appends += batch.len() as u64;
            // Frames sent again after a lost answer: the ones already durable are skipped.
            let new: Vec<TapFrame> = read.into_iter().filter(|f| f.seq > j.last_seq).collect();
            let Some(last) = new.last().map(|f| f.seq) else { return Ok(()) };
            // A frame missing would be an acknowledged write a break cannot replay.
            if let Some((i, f)) = new.iter().enumerate().find(|(i, f)| f.seq != j.last_seq + 1 + *i as u64) {
                return Err(ApiError::conflict(
                    format!(
                        "sync frame {} arrived where frame {} was due: frames are missing",
                        f.seq,
                        j.last_seq + 1 + i as u64
                    ),
                    "the source re-arms the link and catches up with a transfer",
                ));
            }
            j.journal.append(&dst, &new).map_err(ApiError::from)?;
            j.writes += 1;
            j.last_seq = last;
            Ok(())
        });
        if let Err(e) = &r {
            tracing::warn!(mirror = %name, peer = %peer.name, "sync frames not journaled: {} ({})", e.message, e.hint);
        }
        let answers: Vec<PeerResponse> = batch
            .iter()
            .map(|(frames, f)| {
                PeerResponse::Mirror(match (&r, f) {
                    (Ok(()), Ok(_)) => serde_json::json!({ "durable": frames }),
                    (Err(e), _) | (_, Err(e)) => serde_json::json!({"error": e.message, "hint": e.hint}),
                })
            })
            .collect();
        conn.reply_all(&answers)?;
        if !in_step {
            let (_, last) = batch.pop().expect("a batch has an append");
            return last.map(|_| ());
        }
        ahead
    }

    /// The journal a `sync_arm` opened for mirror `name`.
    fn journals_of(&self, name: &str) -> Result<Arc<Mutex<RemoteJournal>>, ApiError> {
        self.mirrors.journals.lock().expect("sync journals").get(name).cloned().ok_or_else(|| {
            ApiError::conflict(
                format!("the sync journal of mirror {name} is not open on the target"),
                "the source re-arms the link (it does so by itself within seconds)",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(frames: &[(u64, u64, &[u8])]) -> Vec<u8> {
        let mut b = Vec::new();
        for (seq, txg, r) in frames {
            b.extend_from_slice(&seq.to_le_bytes());
            b.extend_from_slice(&txg.to_le_bytes());
            b.extend_from_slice(&(r.len() as u32).to_le_bytes());
            b.extend_from_slice(r);
        }
        b
    }

    #[test]
    fn frames_are_read_as_announced_and_lies_are_refused() {
        let b = wire(&[(1, 7, b"abc"), (2, 8, b"")]);
        let f = read_frames(&mut &b[..], 2, b.len() as u64).unwrap();
        assert_eq!(
            f,
            vec![
                TapFrame { seq: 1, txg: 7, records: b"abc".to_vec() },
                TapFrame { seq: 2, txg: 8, records: Vec::new() }
            ]
        );
        // More bytes announced than the frames hold, fewer, a frame longer than what is
        // left, more frames than bytes: each refused before anything is appended.
        for (n, bytes) in [(2, b.len() as u64 + 1), (2, b.len() as u64 - 1), (3, b.len() as u64), (1, 10)] {
            let e = read_frames(&mut &b[..], n, bytes).expect_err("a lie about the frames");
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{n} frames in {bytes} bytes: {e:?}");
        }
        // A frame whose length runs past the stream's end: an I/O error, no panic.
        let mut short = wire(&[(1, 1, b"abcdef")]);
        short.truncate(WIRE_HEADER + 2);
        let e = read_frames(&mut &short[..], 1, (WIRE_HEADER + 6) as u64).expect_err("a cut stream");
        assert_eq!(e.kind, ErrorKind::Io);
    }
}
