//! Volumes.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VolumeInfo {
    pub pool: String,
    pub name: String,
    pub id: u64,
    pub record_size: u32,
    /// Physical: units allocated, data and metadata, plus unused reservation.
    pub used_bytes: u64,
    /// The size limit (0: none).
    pub size_bytes: u64,
    /// `standard`, `always` or `disabled`.
    pub sync: String,
    pub created_txg: u64,
    pub created_ns: u64,
    /// Bytes born since the latest snapshot.
    pub written_bytes: u64,
    /// Bytes born in this volume still allocated (live data plus what its snapshots keep).
    pub total_bytes: u64,
    pub snapshots: u64,
    /// `volume@snapshot` the live volume descends from.
    pub parent_snapshot: Option<String>,
    /// `volume@snapshot` this volume was cloned from.
    pub origin: Option<String>,
    #[schema(value_type = Option<String>)]
    pub mounted_at: Option<PathBuf>,
    pub compression: String,
    pub reservation_bytes: u64,
    /// None for volumes last written by a build that did not track savings.
    pub logical_bytes: Option<u64>,
    pub saved_bytes: Option<u64>,
    pub dedup: bool,
    pub compress_ratio: Option<f64>,
    /// Set when the volume is a block LUN (served over NBD or iSCSI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lun: Option<LunInfo>,
}

/// A block LUN: a volume holding one fixed-size file that the block front ends serve.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LunInfo {
    /// The size clients see.
    pub size_bytes: u64,
    /// The logical block size clients see: 512 or 4096.
    pub sector_bytes: u32,
}

/// `POST /v1/pools/{pool}/volumes`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateVolume {
    pub name: String,
    /// 4096 to 1 MiB, a power of two (default 16 KiB).
    #[serde(default)]
    pub record_size: Option<u32>,
    /// Size limit (thin: not reserved); default none.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// `standard` (default), `always`, `disabled`.
    #[serde(default)]
    pub sync: Option<String>,
    /// `off` (default), `lz4`, `zstd`, `zstd-N`.
    #[serde(default)]
    pub compression: Option<String>,
    #[serde(default)]
    pub reservation_bytes: Option<u64>,
    #[serde(default)]
    pub dedup: Option<bool>,
    /// Make the volume a block LUN of this size (a multiple of `lun_sector_bytes`); its
    /// record size defaults to 16 KiB, the LUN's block size.
    #[serde(default)]
    pub lun_bytes: Option<u64>,
    /// The LUN's logical block size: 512 (default) or 4096.
    #[serde(default)]
    pub lun_sector_bytes: Option<u32>,
}

/// `PATCH /v1/pools/{pool}/volumes/{volume}`: every field given is applied, or none is.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetVolume {
    /// New size limit (0: none); refused below what the volume uses.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    #[serde(default)]
    pub sync: Option<String>,
    #[serde(default)]
    pub compression: Option<String>,
    #[serde(default)]
    pub reservation_bytes: Option<u64>,
    #[serde(default)]
    pub dedup: Option<bool>,
    /// Grow the volume's LUN to this size (a LUN never shrinks).
    #[serde(default)]
    pub lun_bytes: Option<u64>,
}

/// Query of `DELETE /v1/pools/{pool}/volumes/{volume}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeleteVolumeQuery {
    /// Also delete its snapshots (required when it has any); clones of them must be
    /// deleted or split first.
    pub recursive: Option<bool>,
}
