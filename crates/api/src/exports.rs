//! Mounts and NFS exports.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use utoipa::ToSchema;

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MountInfo {
    /// POOL/VOLUME
    pub volume: String,
    #[schema(value_type = String)]
    pub path: PathBuf,
    /// Served now (false: recorded, waiting for its pool).
    pub active: bool,
}

/// `POST /v1/mounts`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MountRequest {
    /// POOL/VOLUME
    pub volume: String,
    /// An empty directory (created if missing); absolute.
    #[schema(value_type = String)]
    pub path: PathBuf,
}

/// `DELETE /v1/mounts`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UnmountRequest {
    #[schema(value_type = String)]
    pub path: PathBuf,
}

/// `POST /v1/exports`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateExport {
    /// POOL/VOLUME
    pub volume: String,
    /// POOL/VOLUME (NBD and iSCSI also POOL/VOLUME@SNAPSHOT: the snapshot's LUN, read-only).
    /// `nfs` (the default), `nbd` or `iscsi` (LUN volumes).
    #[serde(default)]
    pub protocol: Option<String>,
    /// Client networks (CIDRs or addresses); default this host only.
    #[serde(default)]
    pub clients: Option<Vec<String>>,
    #[serde(default)]
    pub read_only: Option<bool>,
    /// `none`, `root` (default) or `all`.
    #[serde(default)]
    pub squash: Option<String>,
    #[serde(default)]
    pub anon_uid: Option<u32>,
    #[serde(default)]
    pub anon_gid: Option<u32>,
    /// NBD: the export name (default POOL/VOLUME); iSCSI: the target IQN (default
    /// iqn.2026-11.io.strata:POOL.VOLUME).
    #[serde(default)]
    pub name: Option<String>,
    /// iSCSI: initiator IQNs allowed to log in (default: any from the client networks).
    #[serde(default)]
    pub initiators: Option<Vec<String>>,
    /// iSCSI: CHAP user name and secret (12–255 characters) initiators must prove.
    #[serde(default)]
    pub chap_user: Option<String>,
    #[serde(default)]
    pub chap_secret: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExportInfo {
    pub id: u32,
    pub protocol: String,
    /// POOL/VOLUME
    pub volume: String,
    /// The path clients mount: /POOL/VOLUME.
    pub path: String,
    pub clients: Vec<String>,
    pub read_only: bool,
    pub squash: String,
    pub anon_uid: u32,
    pub anon_gid: u32,
    /// Served now.
    pub active: bool,
    /// The daemon's NFS port, if it serves NFS.
    pub nfs_port: Option<u16>,
    /// A mount command for a Linux client.
    pub mount: Option<String>,
    /// NBD / iSCSI: the server's port, if it serves the protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// NBD / iSCSI: the URI clients connect to (nbd://HOST:PORT/NAME, iscsi://HOST:PORT/IQN/0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// iSCSI: initiator IQNs allowed (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub initiators: Vec<String>,
    /// iSCSI: initiators must pass CHAP.
    #[serde(default)]
    pub chap: bool,
    /// Something the caller should know (e.g. the daemon serves no NFS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}
