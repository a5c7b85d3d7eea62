//! A separate intent-log device: the ZFS SLOG / ONTAP NVRAM role.
//!
//! A pool created with a log device keeps its intent log there instead of in the region of
//! its own device: `sync_log` then writes and flushes only the log device, so a small fast
//! device (NVMe, a battery-backed card) absorbs the fsync latency and the pool's devices see
//! only commits. The pool label names the device (`log_device_guid`, feature
//! `INCOMPAT_LOG_DEVICE`); the device's own label (`format::logdev`) names the pool back.
//! The in-pool region stays reserved, so the geometry is the same either way and a pool
//! whose log device is discarded goes back to it.
//!
//! Invariant: a pool whose label names a log device never opens read-write on any other
//! log — its acknowledged syncs since the last commit may be only there. Opening without
//! it (or with the wrong device) fails, unless the caller asks to discard it
//! (`PoolOptions::discard_missing_log`, like `zpool import -m`): then the pool opens at its
//! last commit, says which syncs may be lost, and (read-write) rewrites its labels to use
//! the in-pool region from then on.

use crate::device::BlockDevice;
use crate::error::{Corruption, Error, Result};
use crate::format::features::INCOMPAT_LOG_DEVICE;
use crate::format::label::LabelPhys;
use crate::format::logdev::{LogDeviceLabelPhys, LOG_DEVICE_LABEL_SIZE, MIN_LOG_DEVICE_SIZE};
use crate::pool::{Pool, PoolInner};
use crate::txg::intent_log::LogPlace;
use std::sync::Arc;

/// A log device for a new pool.
#[derive(Clone)]
pub struct LogDeviceSpec {
    pub dev: Arc<dyn BlockDevice>,
    /// Identity of the log device; the caller supplies it (no OS randomness in the engine).
    /// Must not be 0 (which means "in the pool").
    pub log_device_guid: u64,
}

/// Zero the log region of a new log device for pool `label`, then write its label and
/// flush it.
pub(crate) fn format_log_device(spec: &LogDeviceSpec, label: &LabelPhys) -> Result<LogPlace> {
    let ld = log_device_label(spec, label)?;
    let place = place_of(spec.dev.clone(), &ld);
    // Old contents of the region need no clearing for correctness (replay accepts only
    // blocks of this pool's guid, and it is new); the region is zeroed so that an image
    // file is allocated before the log's first lap (`LogPlace::prefill`).
    place.prefill()?;
    write_log_device_label(spec, &ld)?;
    Ok(place)
}

/// The label `spec`'s device gets for the pool of `label`; checks the device (guid, size)
/// and writes nothing.
fn log_device_label(spec: &LogDeviceSpec, label: &LabelPhys) -> Result<LogDeviceLabelPhys> {
    if spec.log_device_guid == 0 || spec.log_device_guid == label.device_guid {
        return Err(Error::invalid("log device guid must be non-zero and differ from the pool device's guid"));
    }
    let size = spec.dev.size_bytes();
    LogDeviceLabelPhys::for_device(label.pool_guid, spec.log_device_guid, size, label.created_ns, &label.pool_name)
        .ok_or_else(|| {
            Error::invalid(format!(
                "log device {} has {size} bytes; a log device needs at least {MIN_LOG_DEVICE_SIZE} ({} MiB): use a larger one",
                spec.dev.describe(),
                MIN_LOG_DEVICE_SIZE >> 20
            ))
        })
}

fn write_log_device_label(spec: &LogDeviceSpec, ld: &LogDeviceLabelPhys) -> Result<()> {
    spec.dev.write_at(&ld.encode(), 0).map_err(|e| Error::io("write log device label", e))?;
    spec.dev.flush().map_err(|e| Error::io("flush log device label", e))
}

fn place_of(dev: Arc<dyn BlockDevice>, ld: &LogDeviceLabelPhys) -> LogPlace {
    LogPlace { dev, offset: ld.region_offset, bytes: ld.region_bytes, log_device_guid: ld.log_device_guid }
}

/// Read and verify the label of a log device. Damage is a corruption naming the device.
pub fn read_log_device_label(dev: &dyn BlockDevice) -> Result<LogDeviceLabelPhys> {
    let mut buf = vec![0u8; LOG_DEVICE_LABEL_SIZE];
    dev.read_at(&mut buf, 0).map_err(|e| Error::io("read log device label", e))?;
    let ld = LogDeviceLabelPhys::decode(&buf)
        .map_err(|c| Corruption::new("log device label", Some(0), format!("on {}: {}", dev.describe(), c.detail)))?;
    if dev.size_bytes() < ld.device_size {
        return Err(Corruption::new(
            "log device label",
            Some(0),
            format!("{} has {} bytes but the log was made for {}", dev.describe(), dev.size_bytes(), ld.device_size),
        )
        .into());
    }
    Ok(ld)
}

/// What opening does with the pool's intent log.
pub(crate) enum LogAtOpen {
    /// Replay from, and log to, this place.
    Use(LogPlace),
    /// The log device is missing or wrong and the caller asked to discard it: why.
    Discard(String),
}

/// Find the intent log of the pool `label` describes: the in-pool region, or the supplied
/// log device once its label is verified to be this pool's.
/// A device passed to a pool whose labels name none is refused, unless it is this pool's
/// former log device (it failed and the log moved into the pool, or it was removed) or
/// cannot be read at all: then it is not used, and `notes` says so — the labels are
/// rewritten only after a commit holds everything such a device had.
pub(crate) fn resolve(
    label: &LabelPhys,
    in_pool: LogPlace,
    log_dev: Option<Arc<dyn BlockDevice>>,
    discard_missing_log: bool,
    notes: &mut Vec<String>,
) -> Result<LogAtOpen> {
    let pool = &label.pool_name;
    if label.log_device_guid == 0 {
        let Some(d) = log_dev else { return Ok(LogAtOpen::Use(in_pool)) };
        return match read_log_device_label(d.as_ref()) {
            Ok(ld) if ld.pool_guid == label.pool_guid => {
                notes.push(format!(
                    "log device {} is no longer this pool's log (it failed or was removed; the log is in the \
                     pool): not used",
                    d.describe()
                ));
                Ok(LogAtOpen::Use(in_pool))
            }
            Err(e @ Error::Io { .. }) => {
                notes.push(format!(
                    "log device {}: {e}; the pool keeps its log in its own region: not used",
                    d.describe()
                ));
                Ok(LogAtOpen::Use(in_pool))
            }
            _ => Err(Error::invalid(format!(
                "pool {pool} keeps its intent log on its own device and has no log device; do not pass {}",
                d.describe()
            ))),
        };
    }
    let remedy = "supply that device, or, if it is lost for good, open with discard-missing-log \
                  (losing the sync writes acknowledged since the last commit)";
    let need = format!("pool {pool} keeps its intent log on log device {:#x}", label.log_device_guid);
    let missing = |why: String| {
        if discard_missing_log {
            Ok(LogAtOpen::Discard(why))
        } else {
            Err(Error::InvalidArgument(format!("{why}; {need}: {remedy}")))
        }
    };
    let Some(dev) = log_dev else {
        return missing("no log device was supplied".to_string());
    };
    let ld = match read_log_device_label(dev.as_ref()) {
        Ok(ld) => ld,
        Err(Error::Corruption(c)) if !discard_missing_log => {
            return Err(Corruption::new(c.what, c.addr, format!("{}; {need}: {remedy}", c.detail)).into());
        }
        Err(e @ Error::Io { .. }) if !discard_missing_log => return Err(e),
        Err(e) => return missing(format!("log device {}: {e}", dev.describe())),
    };
    if ld.pool_guid != label.pool_guid || ld.log_device_guid != label.log_device_guid {
        return missing(format!(
            "{} is log device {:#x} of pool {} ({:#x}), not of pool {pool} ({:#x})",
            dev.describe(),
            ld.log_device_guid,
            ld.pool_name,
            ld.pool_guid,
            label.pool_guid,
        ));
    }
    Ok(LogAtOpen::Use(place_of(dev, &ld)))
}

impl PoolInner {
    /// Forget the pool's log device (after a discard): both labels are rewritten without it,
    /// one at a time, each flushed, so a crash leaves at least one valid label; the log then
    /// uses the in-pool region. A failure latches the pool (DESIGN.md §3.8).
    pub(crate) fn forget_log_device(&mut self) -> Result<()> {
        let mut label = self.label.clone();
        label.log_device_guid = 0;
        label.features.incompat &= !INCOMPAT_LOG_DEVICE;
        self.rewrite_labels(label, "write pool label (discard log device)")
    }

    /// Problems with the log device's label as the checker sees them (empty: fine, or no
    /// log device).
    pub(crate) fn check_log_device(&self) -> Vec<String> {
        let place = self.ilog.place();
        if self.label.log_device_guid == 0 {
            return Vec::new();
        }
        if !place.is_separate() {
            return Vec::new(); // discarded at a read-only open; the open notes say so
        }
        match read_log_device_label(place.dev.as_ref()) {
            Err(e) => vec![format!("log device {}: {e}", place.dev.describe())],
            Ok(ld) => {
                let mut errs = Vec::new();
                if ld.pool_guid != self.label.pool_guid || ld.log_device_guid != self.label.log_device_guid {
                    errs.push(format!(
                        "log device {} belongs to pool {:#x} as {:#x}; the pool expects {:#x}",
                        place.dev.describe(),
                        ld.pool_guid,
                        ld.log_device_guid,
                        self.label.log_device_guid
                    ));
                }
                if ld.region_offset != place.offset || ld.region_bytes != place.bytes {
                    errs.push(format!("log device {}: label region changed while open", place.dev.describe()));
                }
                errs
            }
        }
    }
}

impl Pool {
    /// Give the pool a separate log device from now on (`zpool add POOL log DEV`). The pool
    /// commits first, under its lock, so the log it leaves is empty; then the device gets
    /// its label and the pool labels name it. A crash anywhere in between leaves a pool that
    /// opens with either log — both empty.
    pub fn add_log_device(&self, spec: LogDeviceSpec) -> Result<()> {
        // The region is zeroed first, without the pool's lock (up to 256 MiB of writes):
        // the pool goes on meanwhile. Nothing names the device until its label is written.
        let label = self.lock().label.clone();
        place_of(spec.dev.clone(), &log_device_label(&spec, &label)?).prefill()?;
        let mut p = self.drained_log()?;
        if p.label.log_device_guid != 0 {
            return Err(Error::AlreadyExists(format!(
                "pool {} already has a log device ({}): remove it first",
                p.label.pool_name,
                p.ilog.place().dev.describe()
            )));
        }
        let mut label = p.label.clone();
        let ld = log_device_label(&spec, &label)?;
        let place = place_of(spec.dev.clone(), &ld);
        write_log_device_label(&spec, &ld)?;
        label.log_device_guid = spec.log_device_guid;
        label.features.incompat |= INCOMPAT_LOG_DEVICE;
        p.rewrite_labels(label, "write pool label (add log device)")?;
        p.ilog.move_to(place);
        Ok(())
    }

    /// Stop using the separate log device: commit (the log empties), rewrite the labels
    /// without it, and log in the pool's own region from now on. The device is not
    /// written: its old label names this pool until it is reused.
    pub fn remove_log_device(&self) -> Result<()> {
        let mut p = self.drained_log()?;
        if p.label.log_device_guid == 0 {
            return Err(Error::NotFound(format!("pool {} has no log device", p.label.pool_name)));
        }
        p.forget_log_device()?;
        let place = LogPlace::in_pool(p.dev.clone(), &p.alloc.geometry());
        p.ilog.move_to(place);
        Ok(())
    }

    /// The separate log device failed the write of the block in flight (`sync_target`): the
    /// pool goes on without it — vSAN's cache-disk failure; ZFS waits for the txg instead.
    /// A commit makes durable every operation the log recorded (the log only ever holds
    /// copies of what the open txg has), then the labels stop naming the device and the
    /// log moves into the pool's own region (which stays reserved for this). A crash
    /// before the labels are rewritten opens with the device or discards it — the commit
    /// holds everything either way; after, the pool opens without it. A failed commit or
    /// label write latches the pool, as any. Ok: the syncs of the failed block are durable.
    pub(crate) fn fail_over_log(&self, cause: Error) -> Result<()> {
        self.commit_then(|p| {
            let device = p.ilog.place().dev.describe();
            p.forget_log_device()?;
            let place = LogPlace::in_pool(p.dev.clone(), &p.alloc.geometry());
            if !p.ilog.fail_over_to(place) {
                return Err(Error::io(
                    "move the intent log into the pool",
                    std::io::Error::other("the log was written to after the commit"),
                ));
            }
            let why = format!(
                "log device {device} failed ({cause}); the intent log is in the pool since txg {}",
                p.txg.synced
            );
            p.health.log_failover = Some(why);
            Ok(())
        })
    }

    /// The pool's lock, with nothing in flight in the log and everything committed.
    fn drained_log(&self) -> Result<crate::sync::MutexGuard<'_, PoolInner>> {
        let mut p = self.lock();
        p.writable()?;
        while p.ilog.in_flight {
            p = self.wait_log_done(p);
        }
        p.writable()?;
        p.commit_always()?;
        Ok(p)
    }

    /// The log device is missing and the caller asked to go on without it: stay at the
    /// opened root (its log cannot be read), say what may be lost, and — read-write — stop
    /// naming the device in the labels, so later syncs go to the in-pool region.
    pub(crate) fn discard_log_device(&self, why: &str) -> Result<()> {
        let mut p = self.lock();
        let txg = p.txg.root.txg;
        p.health
            .open_notes
            .push(format!("intent log device discarded ({why}): sync writes acknowledged after txg {txg} may be lost"));
        if p.health.read_only {
            p.health.open_notes.push("opened read-only: the labels still name the log device".to_string());
            return Ok(());
        }
        p.forget_log_device()?;
        p.health.open_notes.push("the pool now keeps its intent log in its own region".to_string());
        Ok(())
    }
}
