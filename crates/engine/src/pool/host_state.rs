//! Which host has the pool open: the engine's half of `strata pool export` / `import`
//! (ZFS's `hostid` and `POOL_STATE_ACTIVE` / `POOL_STATE_EXPORTED`).
//!
//! Every root records `(host_id, pool_state)` (`format::uberblock`). An opener with a host
//! id (`PoolOptions::host_id`) stamps every root it commits "active, host H"; a read-write
//! open whose newest root says anything else commits a root at once, so the device says
//! "active, H" before `open` returns — an import elsewhere then sees the pool is taken
//! without waiting for the first write. [`Pool::export`] commits a last root that says
//! "exported, H". [`read_pool_identity`] reads the newest root's stamp without opening the
//! pool (no replay, no writes), which is what an import checks before it opens anything.
//!
//! An opener without a host id (0) stamps "unknown, 0", exactly what builds before host
//! states wrote. It too commits at open when the newest root says something else, so a pool
//! open read-write never says "exported". Read-only opens never write: the device keeps
//! whatever it said.
//!
//! Trade-offs. The stamp is advisory, as in ZFS: it keeps an operator from importing by
//! mistake a pool another host still has open, and the daemon decides (with `force`); it is
//! no lock — two hosts that both force an import still destroy the pool (DESIGN.md §8:
//! fencing belongs to a lease in an existing consensus store). A crash leaves the pool
//! "active" on the host that crashed, which is how an import tells "not closed cleanly".
//! The stamp is that of the newest root that verifies by its own checksum; opening may
//! still fall back past that root if what it points to is damaged.

use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::features::COMPAT_HOST_STATE;
use crate::format::label::{LabelPhys, LABEL_MAGIC};
use crate::format::logdev::LOG_DEVICE_MAGIC;
use crate::format::uberblock::HostState;
use crate::format::{LABEL_SIZE, UNIT_SIZE};
use crate::pool::{Pool, PoolInner};
use crate::txg;

/// Who a device's pool is and who last had it, as its labels and newest root say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolIdentity {
    pub name: String,
    pub pool_guid: u64,
    /// The separate intent-log device the pool needs to open; 0 = none.
    pub log_device_guid: u64,
    /// The newest root's txg.
    pub txg: u64,
    /// The host that wrote the newest root; 0 = none recorded.
    pub host_id: u64,
    pub state: HostState,
}

/// Read the identity and host state of the pool on `dev` without opening it: a label
/// that verifies (copy 0, else copy 1) and the newest root of the rings that verifies.
/// Nothing is written, the intent log is not replayed, nothing the root points to is read.
///
/// Errors: `NotFound` when the device holds no Strata pool (too small for one, or neither
/// label carries the label magic: blank, another file system, a log device); `Corruption`
/// when a label is there but neither copy verifies, or no root of the pool verifies;
/// `Io` when the device cannot be read.
pub fn read_pool_identity(dev: &dyn BlockDevice) -> Result<PoolIdentity> {
    let size = dev.size_bytes();
    if size < 2 * LABEL_SIZE {
        return Err(Error::NotFound(format!(
            "no Strata pool on {}: {size} bytes is too small to hold one",
            dev.describe()
        )));
    }
    let label = read_label_for_identity(dev)?;
    let (roots, problems) = txg::scan_ring(dev, label.pool_guid)?;
    let Some(root) = roots.first() else {
        return Err(txg::no_valid_root(&label.pool_name, dev, &problems));
    };
    Ok(PoolIdentity {
        name: label.pool_name,
        pool_guid: label.pool_guid,
        log_device_guid: label.log_device_guid,
        txg: root.txg,
        host_id: root.host_id,
        state: root.pool_state,
    })
}

/// A verified label, or NotFound when neither copy even has the magic (not a pool at all)
/// and Corruption when one does but does not verify.
fn read_label_for_identity(dev: &dyn BlockDevice) -> Result<LabelPhys> {
    match crate::pool::read_label(dev) {
        Ok((label, _notes)) => Ok(label),
        Err(Error::Corruption(c)) => {
            // Whole units, as the engine always reads (O_DIRECT).
            let mut magics = [[0u8; 8]; 2];
            let mut unit = vec![0u8; UNIT_SIZE as usize];
            for (idx, magic) in magics.iter_mut().enumerate() {
                dev.read_at(&mut unit, idx as u64 * LABEL_SIZE).map_err(|e| Error::io("read pool label", e))?;
                magic.copy_from_slice(&unit[..8]);
            }
            if magics.contains(&LABEL_MAGIC) {
                return Err(Error::Corruption(c));
            }
            let what = if magics[0] == LOG_DEVICE_MAGIC {
                " (it is a Strata intent-log device; name the pool's device)"
            } else {
                ""
            };
            Err(Error::NotFound(format!("no Strata pool on {}: no pool label{what}", dev.describe())))
        }
        Err(e) => Err(e),
    }
}

impl PoolInner {
    /// What the next root records: `(host_id, state)`.
    pub(crate) fn host_stamp(&self) -> (u64, HostState) {
        if self.health.exporting {
            (self.host_id, HostState::Exported)
        } else if self.host_id != 0 {
            (self.host_id, HostState::Active)
        } else {
            (0, HostState::Unknown)
        }
    }

    /// Name the host-state feature in the labels (once per pool), before a root uses it.
    pub(crate) fn enable_host_state_feature(&mut self) -> Result<()> {
        if self.label.features.compat & COMPAT_HOST_STATE != 0 {
            return Ok(());
        }
        let mut label = self.label.clone();
        label.features.compat |= COMPAT_HOST_STATE;
        self.rewrite_labels(label, "write pool label (enable host state)")
    }
}

impl Pool {
    /// The last step of a read-write open: if the newest root's stamp is not what this
    /// opener's commits write, commit a root now (nothing else in it: no block the previous
    /// root references is touched, Invariant 1), so the device says who has the pool before
    /// `open` returns. Read-only opens write nothing.
    pub(crate) fn record_host_at_open(&self) -> Result<()> {
        let mut p = self.lock();
        if p.health.read_only {
            return Ok(());
        }
        let (host_id, state) = p.host_stamp();
        let root = p.txg.root;
        if (root.host_id, root.pool_state) == (host_id, state) {
            return Ok(());
        }
        if root.pool_state == HostState::Active && root.host_id != host_id {
            p.health.open_notes.push(format!(
                "pool was last active on host {:#x} and not exported (a crash, or opened without import \
                 checks); now {}",
                root.host_id,
                if host_id == 0 {
                    "open without a host id".to_string()
                } else {
                    format!("active on host {host_id:#x}")
                }
            ));
        }
        p.commit_always()?;
        Ok(())
    }

    /// Commit everything with a root that says "exported by this host", then close the
    /// pool (as [`Pool::close`]). Afterwards the device opens anywhere, read-only or
    /// read-write, and [`read_pool_identity`] says `Exported`.
    ///
    /// A pool opened read-only (or latched after an I/O error) cannot write that root: it
    /// is closed all the same, and the error says the device is unchanged.
    pub fn export(self) -> Result<()> {
        let mut p = self.lock();
        if let Err(e) = p.writable() {
            return Err(Error::ReadOnly(format!(
                "pool {} cannot be marked exported, the device is unchanged (its newest root says {} by host \
                 {:#x}): {e}",
                p.label.pool_name, p.txg.root.pool_state, p.txg.root.host_id
            )));
        }
        // Every root from here on says exported (also one `Drop` might still write).
        p.health.exporting = true;
        p.commit_always()?;
        debug_assert_eq!(p.txg.root.pool_state, HostState::Exported);
        Ok(())
    }
}
