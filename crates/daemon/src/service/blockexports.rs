//! Block exports: LUN volumes (luns.rs) served over NBD (strata-nbd) and iSCSI
//! (strata-iscsi). Records are kept in the state file next to the NFS exports and share
//! their id counter, so `strata export list|delete ID` covers every protocol.
//!
//! - The NBD server starts with `strata serve --nbd-port N` (`--nbd-bind`, 127.0.0.1 by
//!   default), the iSCSI target with `--iscsi-port N` (`--iscsi-bind`). Without the port,
//!   exports are recorded but not served.
//! - An export serves the live LUN (read-write, or read-only with `--ro`), or a snapshot's
//!   LUN (`POOL/VOL@SNAP`, always read-only; the snapshot cannot be deleted while exported).
//! - Access: client networks (CIDRs; this host only by default) for both protocols, plus
//!   initiator IQNs and CHAP for iSCSI. The servers refuse a non-loopback listener without
//!   authentication (NBD: TLS with client certificates; iSCSI: CHAP on every target).

use super::luns::lun_identity;
use super::{split_volume, ApiError, Daemon};
use crate::SystemClock;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use strata_api::{CreateExport, ExportInfo};
use strata_engine::{Pool, VolumeId};
use strata_fs::VolumeFs;
use strata_lun::{Lun, VolumeLun};

/// A block export as the state file and the API keep it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BlockExportRecord {
    pub id: u32,
    /// `nbd` or `iscsi`.
    pub protocol: String,
    /// POOL/VOLUME, or POOL/VOLUME@SNAPSHOT for a snapshot's LUN (read-only).
    pub volume: String,
    /// The NBD export name, or the iSCSI target's IQN.
    pub name: String,
    pub clients: Vec<String>,
    pub read_only: bool,
    /// iSCSI: initiator IQNs allowed to log in (empty: any).
    #[serde(default)]
    pub initiators: Vec<String>,
    /// iSCSI: CHAP user and secret (the state file is readable by root only).
    #[serde(default)]
    pub chap_user: Option<String>,
    #[serde(default)]
    pub chap_secret: Option<String>,
}

impl BlockExportRecord {
    /// (POOL, VOLUME, SNAPSHOT)
    fn parts(&self) -> Result<(&str, &str, Option<&str>), ApiError> {
        let (pool, rest) = split_volume(&self.volume)?;
        Ok(match rest.split_once('@') {
            Some((v, s)) => (pool, v, Some(s)),
            None => (pool, rest, None),
        })
    }
}

/// Where a block server listens (from `strata serve` flags).
#[derive(Debug, Clone)]
pub struct BlockListen {
    pub bind: IpAddr,
    pub port: u16,
    /// NBD: TLS (required of every client when given); with a client CA, clients are
    /// authenticated by certificate — what a listener off loopback needs.
    pub tls: Option<strata_nbd::TlsConfig>,
    /// iSCSI: CHAP (user, secret) for discovery sessions (SendTargets); needed off loopback.
    pub discovery_chap: Option<(String, String)>,
    /// NBD: how long a connection polls for its next request before sleeping
    /// (`strata_nbd::ServerConfig::poll`).
    pub poll: std::time::Duration,
}

/// What an active export holds: the LUN, and the snapshot view it reads (closed when the
/// export goes).
struct Served {
    _lun: Arc<dyn Lun>,
    view: Option<(Arc<Pool>, VolumeId)>,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some((pool, view)) = self.view.take() {
            pool.close_snapshot_view(view);
        }
    }
}

pub(crate) struct BlockService {
    nbd_table: Arc<strata_nbd::ExportTable>,
    iscsi_table: Arc<strata_iscsi::TargetTable>,
    pub(crate) records: Mutex<Vec<BlockExportRecord>>,
    served: Mutex<BTreeMap<u32, Served>>,
    nbd: Mutex<Option<strata_nbd::NbdServer>>,
    iscsi: Mutex<Option<strata_iscsi::IscsiServer>>,
}

fn parse_cidrs<T>(list: &[String], parse: impl Fn(&str) -> Option<T>) -> Result<Vec<T>, ApiError> {
    list.iter()
        .map(|c| {
            parse(c).ok_or_else(|| {
                ApiError::bad_request(
                    format!("client network {c:?}"),
                    "give CIDRs or addresses, e.g. 10.0.0.0/8, 192.168.1.5",
                )
            })
        })
        .collect()
}

impl BlockService {
    pub(crate) fn new() -> BlockService {
        BlockService {
            nbd_table: Arc::new(strata_nbd::ExportTable::new()),
            iscsi_table: Arc::new(strata_iscsi::TargetTable::new()),
            records: Mutex::new(Vec::new()),
            served: Mutex::new(BTreeMap::new()),
            nbd: Mutex::new(None),
            iscsi: Mutex::new(None),
        }
    }

    /// Bring up the exports of the state file, then the servers asked for.
    pub(crate) fn start(d: &Daemon, records: Vec<BlockExportRecord>) -> Result<(), String> {
        for r in &records {
            if let Err(e) = activate(d, r) {
                tracing::warn!(export = r.id, volume = %r.volume, protocol = %r.protocol, "block export not served: {}", e.message);
            }
        }
        *d.blocks.records.lock().expect("block export records") = records;
        if let Some(o) = d.opts.nbd.clone() {
            let mut cfg = strata_nbd::ServerConfig::new(std::net::SocketAddr::new(o.bind, o.port));
            cfg.require_tls = o.tls.is_some();
            cfg.tls = o.tls.clone();
            cfg.poll = o.poll;
            let server = strata_nbd::NbdServer::start(cfg, d.blocks.nbd_table.clone())
                .map_err(|e| format!("start the NBD server on {}:{}: {e}", o.bind, o.port))?;
            tracing::info!(addr = %server.local_addr(), "NBD server listening");
            *d.blocks.nbd.lock().expect("nbd server") = Some(server);
        }
        if let Some(o) = d.opts.iscsi.clone() {
            let mut cfg = strata_iscsi::ServerConfig::new(std::net::SocketAddr::new(o.bind, o.port));
            cfg.discovery_chap = o.discovery_chap.as_ref().map(|(user, secret)| strata_iscsi::Chap {
                user: user.clone(),
                secret: secret.as_bytes().to_vec(),
                mutual: None,
            });
            let server = strata_iscsi::IscsiServer::start(cfg, d.blocks.iscsi_table.clone())
                .map_err(|e| format!("start the iSCSI target on {}:{}: {e}", o.bind, o.port))?;
            tracing::info!(addr = %server.local_addr(), "iSCSI target listening");
            *d.blocks.iscsi.lock().expect("iscsi server") = Some(server);
        }
        Ok(())
    }

    pub(crate) fn stop(&self) {
        if let Some(s) = self.nbd.lock().expect("nbd server").take() {
            s.shutdown();
        }
        if let Some(s) = self.iscsi.lock().expect("iscsi server").take() {
            s.shutdown();
        }
        self.served.lock().expect("served").clear();
    }

    fn port(&self, protocol: &str) -> Option<u16> {
        match protocol {
            "nbd" => self.nbd.lock().expect("nbd server").as_ref().map(|s| s.local_addr().port()),
            _ => self.iscsi.lock().expect("iscsi server").as_ref().map(|s| s.local_addr().port()),
        }
    }

    pub(crate) fn records(&self) -> Vec<BlockExportRecord> {
        self.records.lock().expect("block export records").clone()
    }

    /// The block export of POOL/VOLUME (live or one of its snapshots), if any.
    pub(crate) fn exported(&self, pool: &str, vol: &str) -> Option<u32> {
        let live = format!("{pool}/{vol}");
        let snap = format!("{pool}/{vol}@");
        self.records().iter().find(|r| r.volume == live || r.volume.starts_with(&snap)).map(|r| r.id)
    }

    /// The block export of POOL/VOLUME@SNAPSHOT, if any.
    pub(crate) fn snapshot_exported(&self, pool: &str, vol: &str, snap: &str) -> Option<u32> {
        let spec = format!("{pool}/{vol}@{snap}");
        self.records().iter().find(|r| r.volume == spec).map(|r| r.id)
    }
}

/// Open the record's LUN and put it in its server's table.
fn activate(d: &Daemon, r: &BlockExportRecord) -> Result<(), ApiError> {
    let (pool_name, vol_name, snap) = r.parts()?;
    if snap.is_none() {
        d.refuse_fenced(pool_name, vol_name, "serving its export")?;
    }
    let (lun, view): (Arc<dyn Lun>, _) = match snap {
        None => {
            let lun: Arc<dyn Lun> = d.open_lun(pool_name, vol_name)?;
            (lun, None)
        }
        Some(s) => {
            let pool = d.pool(pool_name)?;
            let snapshot = pool.snapshot(vol_name, s)?;
            let live = pool.volume_id(vol_name)?;
            let view = pool.open_snapshot_view(vol_name, s)?;
            let opened = VolumeFs::mount_read_only(pool.clone(), view, Arc::new(SystemClock))
                .map_err(|e| ApiError::internal(format!("open the file system of {}: {e}", r.volume)))
                .and_then(|fs| {
                    let id = lun_identity(pool.guid() ^ snapshot.id.rotate_left(32), live.0);
                    VolumeLun::open(Arc::new(fs), id, true).map_err(|e| {
                        ApiError::bad_request(format!("{}: {}", r.volume, e.message), "export a LUN volume's snapshot")
                    })
                });
            match opened {
                Ok(l) => (Arc::new(l) as Arc<dyn Lun>, Some((pool, view))),
                Err(e) => {
                    pool.close_snapshot_view(view);
                    return Err(e);
                }
            }
        }
    };
    let served = Served { _lun: lun.clone(), view };
    // A snapshot's export is counted apart from its volume (stats.rs).
    let counted = match snap {
        Some(s) => format!("{vol_name}@{s}"),
        None => vol_name.to_string(),
    };
    match r.protocol.as_str() {
        "nbd" => {
            let mut e = strata_nbd::Export::new(lun);
            e.stats = Some(d.stats.protocol(pool_name, &counted, strata_stats::Protocol::Nbd));
            e.description = format!("Strata LUN {}", r.volume);
            e.read_only = r.read_only;
            e.clients = parse_cidrs(&r.clients, |c| strata_nbd::Cidr::parse(c).ok())?;
            d.blocks.nbd_table.add(&r.name, e).map_err(|e| ApiError::bad_request(e, "choose another export name"))?;
        }
        "iscsi" => {
            let lun: Arc<dyn Lun> = if r.read_only && !lun.read_only() { Arc::new(ReadOnly(lun)) } else { lun };
            let mut t = strata_iscsi::TargetConfig::new(r.name.clone(), vec![lun]);
            t.initiators = r.initiators.clone();
            t.stats = vec![d.stats.protocol(pool_name, &counted, strata_stats::Protocol::Iscsi)];
            t.networks = parse_cidrs(&r.clients, strata_iscsi::Cidr::parse)?;
            t.chap = match (&r.chap_user, &r.chap_secret) {
                (Some(u), Some(s)) => {
                    Some(strata_iscsi::Chap { user: u.clone(), secret: s.as_bytes().to_vec(), mutual: None })
                }
                _ => None,
            };
            d.blocks.iscsi_table.add(t).map_err(|e| ApiError::bad_request(e.to_string(), "choose another IQN"))?;
        }
        p => return Err(ApiError::bad_request(format!("protocol {p:?}"), "nbd or iscsi")),
    }
    d.blocks.served.lock().expect("served").insert(r.id, served);
    Ok(())
}

/// A LUN served read-only (an iSCSI export with `--ro`): writes answer DATA PROTECT.
struct ReadOnly(Arc<dyn Lun>);

impl Lun for ReadOnly {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn block_size(&self) -> u32 {
        self.0.block_size()
    }
    fn preferred_block_size(&self) -> u32 {
        self.0.preferred_block_size()
    }
    fn read_only(&self) -> bool {
        true
    }
    fn identity(&self) -> [u8; 16] {
        self.0.identity()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> strata_lun::LunResult<()> {
        self.0.read(offset, buf)
    }
    fn write(&self, _: u64, _: &[u8], _: bool) -> strata_lun::LunResult<()> {
        Err(refused())
    }
    fn flush(&self) -> strata_lun::LunResult<()> {
        Ok(())
    }
    fn trim(&self, _: u64, _: u64, _: bool) -> strata_lun::LunResult<()> {
        Err(refused())
    }
    fn write_zeroes(&self, _: u64, _: u64, _: bool, _: bool) -> strata_lun::LunResult<()> {
        Err(refused())
    }
    fn extents(&self, offset: u64, len: u64) -> strata_lun::LunResult<Vec<strata_lun::Extent>> {
        self.0.extents(offset, len)
    }
}

fn refused() -> strata_lun::LunError {
    strata_lun::LunError::new(strata_lun::LunErrorKind::ReadOnly, "the export is read-only")
}

fn deactivate(d: &Daemon, r: &BlockExportRecord) {
    match r.protocol.as_str() {
        "nbd" => {
            d.blocks.nbd_table.remove(&r.name);
        }
        _ => {
            d.blocks.iscsi_table.remove(&r.name);
        }
    }
    d.blocks.served.lock().expect("served").remove(&r.id);
}

pub(crate) fn export_info(d: &Daemon, r: &BlockExportRecord) -> ExportInfo {
    let port = d.blocks.port(&r.protocol);
    let bind = match r.protocol.as_str() {
        "nbd" => d.opts.nbd.as_ref().map(|o| o.bind),
        _ => d.opts.iscsi.as_ref().map(|o| o.bind),
    };
    let host = bind.map(|b| if b.is_unspecified() { "HOST".to_string() } else { b.to_string() });
    let uri = port.zip(host).map(|(p, h)| match r.protocol.as_str() {
        "nbd" => format!("nbd://{h}:{p}/{}", r.name),
        _ => format!("iscsi://{h}:{p}/{}/0", r.name),
    });
    ExportInfo {
        id: r.id,
        protocol: r.protocol.clone(),
        volume: r.volume.clone(),
        path: r.name.clone(),
        clients: r.clients.clone(),
        read_only: r.read_only || r.volume.contains('@'),
        squash: "-".into(),
        anon_uid: 0,
        anon_gid: 0,
        active: d.blocks.served.lock().expect("served").contains_key(&r.id),
        nfs_port: None,
        mount: None,
        port,
        uri,
        initiators: r.initiators.clone(),
        chap: r.chap_user.is_some(),
        note: None,
    }
}

impl Daemon {
    pub(crate) fn create_block_export(&self, b: CreateExport, protocol: &str) -> Result<ExportInfo, ApiError> {
        let (pool_name, rest) = split_volume(&b.volume)?;
        let (vol_name, snap) = match rest.split_once('@') {
            Some((v, s)) => (v, Some(s)),
            None => (rest, None),
        };
        let pool = self.pool(pool_name)?;
        pool.volume_id(vol_name)?;
        match snap {
            Some(s) => drop(pool.snapshot(vol_name, s)?),
            None => {
                self.refuse_mirror_target(pool_name, vol_name, "an export")?;
                self.refuse_fenced(pool_name, vol_name, "an export")?;
            }
        }
        if self.lun_info(pool_name, &pool, vol_name).is_none() {
            return Err(ApiError::bad_request(
                format!("{pool_name}/{vol_name} is not a LUN"),
                "block exports serve LUN volumes: create one with `strata volume create POOL/VOL --lun SIZE`",
            ));
        }
        if b.squash.is_some() || b.anon_uid.is_some() || b.anon_gid.is_some() {
            return Err(ApiError::bad_request("squash and anonymous ids are NFS options", "leave them out"));
        }
        let clients = b.clients.unwrap_or_else(|| vec!["127.0.0.1/32".into(), "::1/128".into()]);
        if clients.is_empty() {
            return Err(ApiError::bad_request("an export with no client networks", "give at least one CIDR"));
        }
        if protocol == "iscsi"
            && b.chap_user.is_none()
            && self.opts.iscsi.as_ref().is_some_and(|o| !o.bind.is_loopback())
        {
            return Err(ApiError::bad_request(
                "an iSCSI export without CHAP on a listener reachable from the network",
                "give --chap-user and --chap-secret (the target listens off loopback)",
            ));
        }
        let name = match protocol {
            "nbd" => {
                if b.initiators.is_some() || b.chap_user.is_some() || b.chap_secret.is_some() {
                    return Err(ApiError::bad_request(
                        "initiators and CHAP are iSCSI options",
                        "NBD clients are limited by --clients (and TLS client certificates)",
                    ));
                }
                b.name.clone().unwrap_or_else(|| b.volume.clone())
            }
            _ => b.name.clone().unwrap_or_else(|| default_iqn(&b.volume)),
        };
        if b.chap_user.is_some() != b.chap_secret.is_some() {
            return Err(ApiError::bad_request(
                "CHAP needs both a user and a secret",
                "give --chap-user and --chap-secret",
            ));
        }
        if let Some(s) = &b.chap_secret {
            if !(12..=255).contains(&s.len()) {
                return Err(ApiError::bad_request(
                    "a CHAP secret of fewer than 12 or more than 255 characters",
                    "RFC 7143 asks for at least 12 (96 bits); use a random string",
                ));
            }
        }
        let mut r = BlockExportRecord {
            id: 0,
            protocol: protocol.into(),
            volume: b.volume.clone(),
            name,
            clients,
            read_only: b.read_only.unwrap_or(false) || snap.is_some(),
            initiators: b.initiators.unwrap_or_default(),
            chap_user: b.chap_user,
            chap_secret: b.chap_secret,
        };
        let _g = self.admin.lock().expect("admin");
        if let Some(other) =
            self.blocks.records().iter().find(|o| o.protocol == protocol && o.name.eq_ignore_ascii_case(&r.name))
        {
            return Err(ApiError::conflict(
                format!("{protocol} export name {:?} is taken by export {} ({})", r.name, other.id, other.volume),
                "give another --name",
            ));
        }
        if let Some(id) = self.nfs.exported(pool_name, vol_name) {
            return Err(ApiError::conflict(
                format!("volume {pool_name}/{vol_name} is exported over NFS (export {id})"),
                "a LUN is served over NBD or iSCSI, not NFS: delete that export first",
            ));
        }
        r.id = {
            let mut next = self.nfs.next_id.lock().expect("export ids");
            let id = *next;
            *next += 1;
            id
        };
        activate(self, &r)?;
        self.blocks.records.lock().expect("block export records").push(r.clone());
        self.save_state()?;
        tracing::info!(export = r.id, protocol, volume = %r.volume, name = %r.name, clients = ?r.clients, read_only = r.read_only, "block export created");
        let mut v = export_info(self, &r);
        if v.port.is_none() {
            v.note = Some(format!(
                "the daemon serves no {protocol}: restart it with --{protocol}-port N to serve this export"
            ));
        }
        Ok(v)
    }

    /// Take block export `id` out of service and out of the records; false if there is none
    /// (the caller saves the state).
    /// Stop serving the block exports of `pool/vol` (it was taken over by another daemon:
    /// mirrors/failover_run.rs); their records stay. How many.
    pub(crate) fn withdraw_block_exports(&self, pool: &str, vol: &str) -> usize {
        let spec = format!("{pool}/{vol}");
        let records: Vec<BlockExportRecord> = self
            .blocks
            .records
            .lock()
            .expect("block export records")
            .iter()
            .filter(|r| r.volume == spec)
            .cloned()
            .collect();
        for r in &records {
            deactivate(self, r);
        }
        records.len()
    }

    pub(crate) fn remove_block_export(&self, id: u32) -> bool {
        let removed = {
            let mut records = self.blocks.records.lock().expect("block export records");
            let at = records.iter().position(|r| r.id == id);
            at.map(|i| records.remove(i))
        };
        match removed {
            Some(r) => {
                deactivate(self, &r);
                tracing::info!(export = id, protocol = %r.protocol, volume = %r.volume, "block export deleted");
                true
            }
            None => false,
        }
    }
}

/// The default IQN of a LUN: `iqn.2026-11.io.strata:POOL.VOLUME` (lower case; `/` and `@`
/// become `.` and `-`, which IQNs allow).
fn default_iqn(volume: &str) -> String {
    let tail: String = volume
        .chars()
        .map(|c| match c {
            '/' => '.',
            '@' => '-',
            '_' => '-',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    format!("iqn.2026-11.io.strata:{tail}")
}
