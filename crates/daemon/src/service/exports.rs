//! NFS exports of the daemon: the export records (kept in the state file), the live export
//! table the NFS server reads, the server itself, and the `/v1/exports` API.
//!
//! - The server starts with `strata serve --nfs-port N` (NFS and MOUNT on one TCP port;
//!   `--nfs-bind` chooses the address, 127.0.0.1 by default so nothing is reachable from
//!   the network until asked; `--nfs-portmap-port 111` adds a portmapper for clients that
//!   look ports up). Without `--nfs-port` exports are recorded but not served.
//! - File handles are signed with a key kept in `DATA_DIR/nfs-handle.key` (32 random
//!   bytes, made at the first start), so they stay valid across restarts.
//! - The write verifier is drawn at random at every start: clients resend UNSTABLE writes
//!   that were not committed before a restart.
//! - Export ids come from a counter kept in the state file and are never reused.
//! - An export uses the volume's shared file system (crate::volumes), the same one a FUSE
//!   mount of the volume uses.

use super::{random_u64, split_volume, ApiError, Daemon};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use strata_api::{CreateExport, Done, ExportInfo};
use strata_nfs::{Cidr, Export, ExportPolicy, ExportTable, HandleKey, NfsServer, ServerConfig, Squash, ANON_ID};

/// An export as the state file and the API keep it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExportRecord {
    pub id: u32,
    /// POOL/VOLUME
    pub volume: String,
    pub clients: Vec<String>,
    pub read_only: bool,
    /// none, root or all
    pub squash: String,
    pub anon_uid: u32,
    pub anon_gid: u32,
}

impl ExportRecord {
    fn path(&self) -> String {
        format!("/{}", self.volume)
    }

    fn policy(&self) -> Result<ExportPolicy, String> {
        Ok(ExportPolicy {
            clients: self.clients.iter().map(|c| Cidr::parse(c)).collect::<Result<_, _>>()?,
            read_only: self.read_only,
            squash: Squash::parse(&self.squash)?,
            anon_uid: self.anon_uid,
            anon_gid: self.anon_gid,
        })
    }
}

pub(crate) struct NfsService {
    table: Arc<ExportTable>,
    pub(crate) records: Mutex<Vec<ExportRecord>>,
    pub(crate) next_id: Mutex<u32>,
    server: Mutex<Option<NfsServer>>,
}

/// Where the NFS server listens (from `strata serve` flags).
#[derive(Debug, Clone)]
pub struct NfsOptions {
    pub bind: IpAddr,
    pub port: u16,
    pub portmap_port: Option<u16>,
}

fn load_or_make_key(path: &Path) -> Result<HandleKey, String> {
    match std::fs::read(path) {
        Ok(b) if b.len() == 32 => Ok(HandleKey::new(b.try_into().expect("32 bytes"))),
        Ok(b) => Err(format!(
            "{} holds {} bytes, not 32: it is damaged (removing it makes every NFS client's handles STALE)",
            path.display(),
            b.len()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut key = [0u8; 32];
            for c in key.chunks_mut(8) {
                c.copy_from_slice(&random_u64().to_le_bytes());
            }
            let tmp = path.with_extension("tmp");
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(|e| format!("create {}: {e}", tmp.display()))?;
            f.write_all(&key).and_then(|_| f.sync_all()).map_err(|e| format!("write {}: {e}", tmp.display()))?;
            std::fs::rename(&tmp, path).map_err(|e| format!("rename {}: {e}", path.display()))?;
            Ok(HandleKey::new(key))
        }
        Err(e) => Err(format!("read {}: {e}", path.display())),
    }
}

impl NfsService {
    pub(crate) fn new() -> NfsService {
        NfsService {
            table: Arc::new(ExportTable::new()),
            records: Mutex::new(Vec::new()),
            next_id: Mutex::new(1),
            server: Mutex::new(None),
        }
    }

    /// Bring up the exports of the state file, then the server if one was asked for.
    pub(crate) fn start(d: &Daemon, records: Vec<ExportRecord>, next_id: u32) -> Result<(), String> {
        let nfs = &d.nfs;
        *nfs.next_id.lock().expect("export ids") = next_id.max(records.iter().map(|r| r.id + 1).max().unwrap_or(1));
        for r in &records {
            if let Err(e) = activate(d, r) {
                tracing::warn!(export = r.id, volume = %r.volume, "NFS export not served: {}", e.message);
            }
        }
        *nfs.records.lock().expect("export records") = records;
        let Some(o) = d.opts.nfs.clone() else { return Ok(()) };
        let key = load_or_make_key(&d.opts.data_dir.join("nfs-handle.key"))?;
        let mut verifier = random_u64().to_be_bytes();
        verifier[0] ^= (std::process::id() & 0xff) as u8;
        let mut cfg = ServerConfig::new(SocketAddr::new(o.bind, o.port), key, verifier);
        cfg.portmap_bind = o.portmap_port.map(|p| SocketAddr::new(o.bind, p));
        let server = NfsServer::start(cfg, nfs.table.clone())
            .map_err(|e| format!("start the NFS server on {}:{}: {e}", o.bind, o.port))?;
        *nfs.server.lock().expect("nfs server") = Some(server);
        Ok(())
    }

    pub(crate) fn stop(&self) {
        if let Some(s) = self.server.lock().expect("nfs server").take() {
            s.stop();
        }
    }

    fn port(&self) -> Option<u16> {
        self.server.lock().expect("nfs server").as_ref().map(|s| s.local_addr().port())
    }

    /// Stop serving the NFS exports of `pool/vol` (taken over by another daemon:
    /// mirrors/failover_run.rs); their records stay. How many.
    pub(crate) fn withdraw(&self, pool: &str, vol: &str) -> usize {
        let spec = format!("{pool}/{vol}");
        let ids: Vec<u32> =
            self.records.lock().expect("export records").iter().filter(|r| r.volume == spec).map(|r| r.id).collect();
        for id in &ids {
            self.table.remove(*id);
        }
        ids.len()
    }

    /// Is POOL/VOLUME exported? (A volume must not be deleted under its export.)
    pub(crate) fn exported(&self, pool: &str, vol: &str) -> Option<u32> {
        let spec = format!("{pool}/{vol}");
        self.records.lock().expect("export records").iter().find(|r| r.volume == spec).map(|r| r.id)
    }

    pub(crate) fn records(&self) -> Vec<ExportRecord> {
        self.records.lock().expect("export records").clone()
    }
}

/// Put an export record into the live table.
fn activate(d: &Daemon, r: &ExportRecord) -> Result<(), ApiError> {
    let (pool_name, vol_name) = split_volume(&r.volume)?;
    d.refuse_fenced(pool_name, vol_name, "serving its export")?;
    let pool = d.pool(pool_name)?;
    let policy = r.policy().map_err(|e| ApiError::bad_request(e, "fix the export's policy"))?;
    let fs = d.filesystems.get(pool_name, vol_name, pool.clone())?;
    d.nfs.table.insert(Export {
        id: r.id,
        path: r.path(),
        fs,
        pool_guid: pool.status().pool_guid,
        policy,
        stats: Some(d.stats.protocol(pool_name, vol_name, strata_stats::Protocol::Nfs)),
    });
    Ok(())
}

fn export_info(d: &Daemon, r: &ExportRecord) -> ExportInfo {
    let port = d.nfs.port();
    let host = d.opts.nfs.as_ref().map(|o| o.bind.to_string()).unwrap_or_else(|| "HOST".into());
    ExportInfo {
        id: r.id,
        protocol: "nfs".into(),
        volume: r.volume.clone(),
        path: r.path(),
        clients: r.clients.clone(),
        read_only: r.read_only,
        squash: r.squash.clone(),
        anon_uid: r.anon_uid,
        anon_gid: r.anon_gid,
        active: d.nfs.table.get(r.id).is_some(),
        nfs_port: port,
        mount: port
            .map(|p| format!("mount -t nfs -o vers=3,proto=tcp,port={p},mountport={p},nolock {host}:{} DIR", r.path())),
        port: None,
        uri: None,
        initiators: Vec::new(),
        chap: false,
        note: None,
    }
}

fn not_found(id: u32) -> ApiError {
    ApiError::not_found(format!("export {id}"), "see `strata export list`")
}

impl Daemon {
    pub(crate) fn list_exports(&self) -> Vec<ExportInfo> {
        let mut all: Vec<ExportInfo> = self.nfs.records().iter().map(|r| export_info(self, r)).collect();
        all.extend(self.blocks.records().iter().map(|r| super::blockexports::export_info(self, r)));
        all.sort_by_key(|e| e.id);
        all
    }

    pub(crate) fn export(&self, id: u32) -> Result<ExportInfo, ApiError> {
        if let Some(r) = self.blocks.records().into_iter().find(|r| r.id == id) {
            return Ok(super::blockexports::export_info(self, &r));
        }
        let r = self.nfs.records().into_iter().find(|r| r.id == id).ok_or_else(|| not_found(id))?;
        Ok(export_info(self, &r))
    }

    pub(crate) fn delete_export(&self, id: u32) -> Result<Done, ApiError> {
        let _g = self.admin.lock().expect("admin");
        self.remove_export(id)?;
        self.save_state()?;
        Ok(Done { target: format!("export {id}"), also: Vec::new() })
    }

    /// Take export `id` out of service and out of the records (the caller saves the state).
    pub(crate) fn remove_export(&self, id: u32) -> Result<(), ApiError> {
        if self.remove_block_export(id) {
            return Ok(());
        }
        let removed = {
            let mut records = self.nfs.records.lock().expect("export records");
            let before = records.len();
            records.retain(|r| r.id != id);
            before != records.len()
        };
        if !removed {
            return Err(not_found(id));
        }
        self.nfs.table.remove(id);
        tracing::info!(export = id, "NFS export deleted");
        Ok(())
    }

    pub(crate) fn create_export(&self, b: CreateExport) -> Result<ExportInfo, ApiError> {
        match b.protocol.as_deref() {
            None | Some("nfs") => {}
            Some(p @ ("nbd" | "iscsi")) => {
                let p = p.to_string();
                return self.create_block_export(b, &p);
            }
            Some(p) => return Err(ApiError::bad_request(format!("protocol {p:?}"), "nfs, nbd or iscsi")),
        }
        if b.name.is_some() || b.initiators.is_some() || b.chap_user.is_some() || b.chap_secret.is_some() {
            return Err(ApiError::bad_request(
                "name, initiators and CHAP are options of block exports",
                "an NFS export is named by its path /POOL/VOLUME; leave them out",
            ));
        }
        if b.volume.contains('@') {
            return Err(ApiError::bad_request(
                format!("{}: NFS exports serve live volumes", b.volume),
                "a snapshot is readable under .snapshot/ of its volume's export",
            ));
        }
        let (pool_name, vol_name) = split_volume(&b.volume)?;
        self.pool(pool_name)?.volume_id(vol_name).map_err(ApiError::from)?;
        self.refuse_mirror_target(pool_name, vol_name, "an export")?;
        self.refuse_fenced(pool_name, vol_name, "an export")?;
        let clients = b.clients.unwrap_or_else(|| vec!["127.0.0.1/32".into(), "::1/128".into()]);
        if clients.is_empty() {
            return Err(ApiError::bad_request(
                "an export with no client networks",
                "give at least one CIDR, e.g. 10.0.0.0/8",
            ));
        }
        let mut r = ExportRecord {
            id: 0,
            volume: b.volume.clone(),
            clients,
            read_only: b.read_only.unwrap_or(false),
            squash: b.squash.unwrap_or_else(|| "root".into()),
            anon_uid: b.anon_uid.unwrap_or(ANON_ID),
            anon_gid: b.anon_gid.unwrap_or(ANON_ID),
        };
        r.policy().map_err(|e| {
            ApiError::bad_request(e, "clients are CIDRs (10.0.0.0/8, 192.168.1.5); squash is none, root or all")
        })?;
        let _g = self.admin.lock().expect("admin");
        if let Some(id) = self.blocks.exported(pool_name, vol_name) {
            return Err(ApiError::conflict(
                format!("volume {} is a LUN served as export {id}", b.volume),
                "a LUN is served over NBD or iSCSI, not NFS",
            ));
        }
        if let Some(id) = self.nfs.exported(pool_name, vol_name) {
            return Err(ApiError::conflict(
                format!("volume {} is already exported (export {id})", b.volume),
                "delete that export first, or change it by deleting and exporting again",
            ));
        }
        r.id = {
            let mut next = self.nfs.next_id.lock().expect("export ids");
            let id = *next;
            *next += 1;
            id
        };
        activate(self, &r)?;
        self.nfs.records.lock().expect("export records").push(r.clone());
        self.save_state()?;
        tracing::info!(export = r.id, volume = %r.volume, clients = ?r.clients, read_only = r.read_only, squash = %r.squash, "NFS export created");
        let mut v = export_info(self, &r);
        if self.nfs.port().is_none() {
            v.note = Some("the daemon serves no NFS: restart it with --nfs-port N to serve this export".into());
        }
        Ok(v)
    }
}
