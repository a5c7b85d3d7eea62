//! Snapshots, restores, clones and snapshot policies.

use crate::VolumeInfo;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SnapshotInfo {
    pub pool: String,
    pub volume: String,
    pub name: String,
    pub id: u64,
    pub txg: u64,
    pub created_ns: u64,
    /// Bytes its tree occupies (what reading it sees).
    pub referenced_bytes: u64,
    /// Bytes born between the previous snapshot and this one.
    pub written_bytes: u64,
    /// Bytes only it holds: what deleting it frees.
    pub unique_bytes: u64,
    /// Volumes cloned from it.
    pub clones: Vec<String>,
    /// Group snapshot id (0: taken alone).
    pub group: u64,
    /// Something the caller should know (the database could not be released).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// `POST /v1/pools/{pool}/volumes/{volume}/snapshots`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSnapshot {
    pub name: String,
    /// Connection URL of a database to quiesce around the snapshot.
    #[serde(default)]
    pub quiesce: Option<String>,
}

/// `POST /v1/pools/{pool}/snapshots`: one snapshot of several volumes in one txg.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateGroupSnapshot {
    pub name: String,
    /// Every volume of the group (names in the pool).
    pub volumes: Vec<String>,
    #[serde(default)]
    pub quiesce: Option<String>,
}

/// `POST /v1/pools/{pool}/volumes/{volume}/restore`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreRequest {
    pub snapshot: String,
    /// More volumes of a group snapshot, restored in the same txg.
    #[serde(default)]
    pub group: Vec<String>,
}

/// `POST /v1/pools/{pool}/volumes/{volume}/restore-file`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreFileRequest {
    pub snapshot: String,
    /// The file's path inside the volume (as under .snapshot/NAME/).
    pub file: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RestoredFile {
    /// POOL/VOLUME
    pub volume: String,
    pub snapshot: String,
    pub file: String,
    /// The file did not exist in the live volume and was created.
    pub created: bool,
    pub shared_bytes: u64,
    pub copied_bytes: u64,
    pub unchanged_bytes: u64,
}

/// `POST /v1/pools/{pool}/clones`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CloneRequest {
    /// VOLUME@SNAPSHOT in the same pool.
    pub origin: String,
    pub name: String,
    /// More clones made in the same txg (the other volumes of a group snapshot).
    #[serde(default)]
    pub group: Vec<CloneOne>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CloneOne {
    pub origin: String,
    pub name: String,
}

/// `POST /v1/pools/{pool}/volumes/{volume}/split`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SplitResult {
    pub volume: VolumeInfo,
    pub copied_bytes: u64,
    pub rewritten_keys: u64,
}

/// One schedule of a snapshot policy: every `every_seconds`, keep the newest `keep`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    pub name: String,
    pub every_seconds: u64,
    pub keep: u32,
}

/// `PUT /v1/pools/{pool}/volumes/{volume}/policy` and its answers.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetPolicy {
    pub schedules: Vec<Schedule>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PolicyInfo {
    /// POOL/VOLUME
    pub volume: String,
    pub schedules: Vec<Schedule>,
}
