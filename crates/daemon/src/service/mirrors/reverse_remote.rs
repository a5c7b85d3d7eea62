//! `reverse` between daemons: the old source of a mirror to a peer becomes its target, the
//! peer (which broke the mirror, by hand or by taking it over in a failover) its source —
//! without a full resend: the next transfer sends what the new source changed since the
//! common snapshot.
//!
//! Run on the old source (`strata mirror reverse PEER:POOL/VOL`, or by the failover thread
//! once this daemon finds itself fenced): its volumes keep what they got since the common
//! snapshot as `reverse-…` and return to it; its record becomes a target's (from the peer,
//! which is granted the pool); then the `reverse` message makes the peer's record a
//! source's, and the peer arms (a sync mirror) or transfers as any source does. If the peer
//! refuses, this side's record and grants go back as they were (the volumes stay at the
//! common snapshot, the snapshot `reverse-…` holds what they had).

use super::remote::{request, MirrorMsg};
use super::{keep_and_restore, MirrorRecord};
use crate::peer_net::{PeerClient, PeerIdentity, PeerResponse, ServerConnection};
use crate::service::{ApiError, Daemon};
use std::sync::Arc;
use strata_api::ErrorKind;

impl Daemon {
    /// This side (the source of mirror `name` to a peer) becomes the target.
    pub(crate) fn reverse_remote(self: &Arc<Self>, name: &str, caller: &str) -> Result<String, ApiError> {
        let _g = self.admin.lock().expect("admin");
        let r = self.mirrors.get(name)?;
        let (Some(peer), None) = (r.dest_peer.clone(), &r.source_peer) else {
            return Err(ApiError::conflict(format!("mirror {name} does not go to a peer"), "-"));
        };
        let Some(common) = r.common.clone() else {
            return Err(ApiError::conflict(
                format!("mirror {name} has no common snapshot"),
                "a reverse sends only what changed since one; delete the mirror and create it from the other side",
            ));
        };
        if self.mirrors.running(name).is_some() {
            return Err(ApiError::conflict(format!("mirror {name} is transferring"), "pause it first"));
        }
        let pool_name = r.source_pool.clone();
        for v in &r.volumes {
            if let Some(p) = self.mounted_at(&pool_name, v) {
                return Err(ApiError::conflict(
                    format!("{pool_name}/{v} is mounted at {}", p.display()),
                    "unmount the volumes that become the target first",
                ));
            }
            if self.nfs.exported(&pool_name, v).or_else(|| self.blocks.exported(&pool_name, v)).is_some() && !r.fenced()
            {
                return Err(ApiError::conflict(
                    format!("{pool_name}/{v} is exported"),
                    "delete its exports (`strata export list`) first",
                ));
            }
        }
        let pool = self.pool(&pool_name)?;
        // The peer says yes before anything changes here.
        let target_name = format!("{}/{}", r.dest_pool, r.volumes[0]);
        let refused = |e: ApiError| {
            ApiError::new(
                e.kind,
                format!("peer {peer} will not take the mirror over as its source: {}", e.message),
                e.hint,
            )
        };
        let mut conn = PeerClient::connect(self, &peer)?;
        let check = MirrorMsg::Reverse {
            name: target_name.clone(),
            dest_pool: pool_name.clone(),
            every_seconds: r.every_seconds,
            limit_bytes_per_second: r.limit_bytes_per_second,
            check: true,
        };
        request(&mut conn, &check).map_err(refused)?;
        self.disarm_sync(name);
        let kept = keep_and_restore(&pool, &r.volumes, &common, "reverse")?;
        // This side's record as the target's; the peer may now write to the pool.
        let mut m = r.clone();
        std::mem::swap(&mut m.source_pool, &mut m.dest_pool);
        m.source_peer = Some(peer.clone());
        m.dest_peer = None;
        m.state = "mirrored".into();
        m.pending = None;
        m.source_volume_ids = Vec::new();
        // The source drives: its schedule and limit go with the message.
        m.every_seconds = None;
        m.limit_bytes_per_second = None;
        if let Some(f) = m.failover.as_mut() {
            f.fenced_by = None;
            f.took_over_ns = None;
        }
        let new_name = m.name();
        let granted = self.peers.grant(&peer, &pool_name)?;
        {
            let mut recs = self.mirrors.records.lock().expect("mirrors");
            recs.remove(name);
            recs.insert(new_name.clone(), m);
        }
        self.mirrors.jobs.lock().expect("mirror jobs").remove(name);
        self.drop_failover_lease(name);
        let msg = MirrorMsg::Reverse {
            name: target_name,
            dest_pool: pool_name.clone(),
            every_seconds: r.every_seconds,
            limit_bytes_per_second: r.limit_bytes_per_second,
            check: false,
        };
        let asked = self.save_state().and_then(|()| request(&mut conn, &msg));
        if let Err(e) = asked {
            let mut recs = self.mirrors.records.lock().expect("mirrors");
            recs.remove(&new_name);
            recs.insert(name.to_string(), r);
            drop(recs);
            if granted {
                self.peers.revoke(&peer, &pool_name);
            }
            let _ = self.save_state();
            return Err(refused(e));
        }
        tracing::info!(mirror = %new_name, from = name, peer = %peer, kept = ?kept, caller, "mirror reversed: this daemon is the target now");
        self.events.record(
            "info",
            "mirror.reverse",
            Some(&pool_name),
            Some(&new_name),
            format!(
                "reversed: {peer} is the source now, this pool its target from {common}{}",
                kept.map_or(String::new(), |s| format!("; what was written here since kept as {s}"))
            ),
        );
        Ok(new_name)
    }

    /// The peer that was this mirror's source asks this side (which broke it) to be the
    /// source now, of a mirror into its pool `dest_pool`.
    pub(crate) fn handle_reverse(
        &self,
        peer: &PeerIdentity,
        name: &str,
        dest_pool: &str,
        (every_seconds, limit_bytes_per_second): (Option<u64>, Option<u64>),
        check: bool,
        conn: &mut ServerConnection,
    ) -> Result<(), ApiError> {
        let _g = self.admin.lock().expect("admin");
        let r = self.mirrors.get(name)?;
        if r.source_peer.as_deref() != Some(peer.name.as_str()) {
            return Err(ApiError::new(
                ErrorKind::PermissionDenied,
                format!("mirror {name} of this daemon does not come from peer {}", peer.name),
                "each peer reaches only the mirrors it created",
            ));
        }
        if r.state != "broken" {
            return Err(ApiError::conflict(
                format!("mirror {name} is {} on {}, not broken", r.state, "this daemon"),
                "break it there first (a reverse makes the side that took over the source)",
            ));
        }
        if self.peers.get(&peer.name)?.address.is_none() {
            return Err(ApiError::conflict(
                format!("this daemon has no address for peer {}", peer.name),
                "that daemon needs a replication listener (--repl-port) known here: pair again",
            ));
        }
        if check {
            return conn.reply(&PeerResponse::Ok);
        }
        let mut m: MirrorRecord = r.clone();
        m.source_pool = r.dest_pool.clone();
        m.dest_pool = dest_pool.to_string();
        m.source_peer = None;
        m.dest_peer = Some(peer.name.clone());
        m.every_seconds = every_seconds;
        m.limit_bytes_per_second = limit_bytes_per_second;
        m.state = "mirrored".into();
        m.pending = None;
        m.source_volume_ids = Vec::new();
        let new_name = m.name();
        if r.sync.is_some() {
            self.mirrors.journals.lock().expect("sync journals").remove(name);
            self.drop_sync_journal(&r.dest_pool, &r.volumes[0]);
        }
        {
            let mut recs = self.mirrors.records.lock().expect("mirrors");
            recs.remove(name);
            recs.insert(new_name.clone(), m);
        }
        self.rename_failover(name, &new_name);
        self.save_state()?;
        tracing::info!(mirror = %new_name, from = name, peer = %peer.name, "mirror reversed: this daemon is the source now");
        self.events.record(
            "info",
            "mirror.reverse",
            Some(&r.dest_pool),
            Some(&new_name),
            format!("reversed: this pool is the source now, {} its target", peer.name),
        );
        // The mirror loop arms the link (sync) or the schedule transfers.
        conn.reply(&PeerResponse::Ok)
    }
}
