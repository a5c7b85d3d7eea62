//! Pools: open at start, create (refusing devices that hold something), status, settings
//! (all fields or none), the checker, and the lifecycle: destroy, export, import.

use super::client_pace::{self, rebuild_rate_of, scrub_rate_of};
use super::jobs::JobSpec;
use super::state::{PoolRecord, RateBounds};
use super::{devset, logdev, open_device, pool_options, random_u64, ApiError, Daemon, PoolEntry};
use std::path::Path;
use std::sync::Arc;
use strata_api::{CheckReport, CommitFigures, CreatePool, JobInfo, PoolFigures, PoolInfo, PoolState, SetPool};
use strata_engine::{ChecksumAlgo, CreateOptions, Error, LogDeviceSpec, Pool, PoolOptions, PoolStatus};

/// Open a pool of the state file; Err is the reason it is UNAVAILABLE. Also returns the
/// log device it kept (None if it had none, or it was discarded).
pub(crate) fn open_recorded(d: &Daemon, p: &PoolRecord) -> Result<(Pool, Option<std::path::PathBuf>), String> {
    let (dev, set_notes) = devset::open_recorded_devices(&p.device, &p.members, &p.groups, false)?;
    for n in set_notes {
        tracing::warn!(pool = %p.name, "{n}");
    }
    let discard = d.opts.discard_missing_log.contains(&p.name);
    // A log device that cannot even be opened is missing: discardable, like one whose
    // label is gone.
    let log = match &p.log_device {
        None => None,
        Some(path) => match open_device(path, None) {
            Ok(l) => Some(l),
            Err(_) if discard => None,
            Err(e) => {
                return Err(format!(
                    "log device {}: {}; bring it back, or start with `--discard-missing-log {}` to open at \
                     the last commit, losing the sync writes acknowledged since",
                    path.display(),
                    e.message,
                    p.name
                ))
            }
        },
    };
    let opts = PoolOptions { discard_missing_log: discard, ..pool_options() };
    match Pool::open_with_log(dev, log, opts) {
        Ok(pool) => {
            for n in pool.status().open_notes {
                tracing::warn!(pool = %p.name, "{n}");
            }
            tracing::info!(pool = %p.name, txg = pool.status().txg, "pool opened");
            let kept = p.log_device.clone().filter(|_| pool.status().log_device.is_some());
            Ok((pool, kept))
        }
        Err(e) if p.log_device.is_some() && log_device_refused(&e) => Err(format!(
            "open on {} with log device {}: {e} (the daemon option is `--discard-missing-log {}`)",
            p.device.display(),
            p.log_device.as_deref().map_or("-".into(), |l| l.display().to_string()),
            p.name
        )),
        Err(e) => Err(format!("open on {}: {e}", p.device.display())),
    }
}

/// The engine refused a pool's log device (missing, another pool's, or a damaged label):
/// what `--discard-missing-log` is for.
fn log_device_refused(e: &Error) -> bool {
    match e {
        Error::InvalidArgument(_) => true,
        Error::Corruption(c) => c.what == "log device label",
        _ => false,
    }
}

/// logical / physical, rounded to 2 decimals; 1.0 for an empty pool or volume.
pub(crate) fn ratio(logical: u64, physical: u64) -> f64 {
    if physical == 0 {
        return 1.0;
    }
    (logical as f64 / physical as f64 * 100.0).round() / 100.0
}

pub(crate) fn figures(s: &PoolStatus) -> PoolFigures {
    let (layout, devices, _) = devset::device_figures(s);
    PoolFigures {
        guid: format!("{:016x}", s.pool_guid),
        device_io: s.device.clone(),
        layout,
        devices,
        rebuild: None,
        scrub: None,
        txg: s.txg,
        size_bytes: s.size_bytes,
        allocated_bytes: s.allocated_bytes,
        free_bytes: s.free_bytes,
        held_bytes: s.held_bytes,
        trapped_bytes: s.trapped_bytes,
        destroying_bytes: s.space.destroying_bytes,
        volumes: s.volumes as u64,
        read_only: s.read_only,
        latched: s.latched.clone(),
        log_failover: s.log_failover.clone(),
        corruptions_detected: s.corruptions_detected,
        open_notes: s.open_notes.clone(),
        logical_bytes: s.space.logical_bytes,
        saved_bytes: s.space.saved_bytes,
        compress_ratio: ratio(s.space.logical_bytes, s.allocated_bytes),
        untracked_volumes: s.space.untracked_volumes as u64,
        reserved_bytes: s.space.reserved_bytes,
        available_bytes: s.space.available_bytes,
        capacity_alert_percent: s.space.capacity_alert_percent,
        warnings: s.space.warnings.clone(),
        compressed_blocks_written: s.space.compressed_blocks_written,
        compression_skipped: s.space.compression_skipped,
        zero_records_elided: s.space.zero_records_elided,
        packs: s.space.packs,
        packed_records_written: s.space.packed_records_written,
        dedup_blocks: s.space.dedup_blocks,
        dedup_saved_bytes: s.space.dedup_saved_bytes,
        dedup_table_max: s.space.dedup_table_max,
        log_blocks_written: s.log_blocks_written,
        log_bytes_written: s.log_bytes_written,
        log_bytes_by_reference: s.log_bytes_by_reference,
        log_full_commits: s.log_full_commits,
        log_memory_bytes: s.log_memory_bytes,
        data_cache_bytes: s.data_cache_bytes,
        data_cache_capacity_bytes: s.data_cache_capacity,
        data_cache_hits: s.data_cache_hits,
        data_cache_misses: s.data_cache_misses,
        metadata_cache_hits: s.metadata_cache_hits,
        metadata_cache_misses: s.metadata_cache_misses,
        commits: CommitFigures {
            count: s.commits.count,
            prewrite_us_total: s.commits.prewrite_us_total,
            locked_us_total: s.commits.locked_us_total,
            locked_us_max: s.commits.locked_us_max,
            locked_us_last: s.commits.locked_us_last,
            locked_blocks_read: s.commits.locked_blocks_read,
            early_passes_skipped: s.commits.early_passes_skipped,
        },
    }
}

pub(crate) fn check_report(r: &strata_engine::CheckReport) -> CheckReport {
    CheckReport {
        clean: r.is_clean(),
        txg: r.txg,
        volumes: r.volumes,
        snapshots: r.snapshots,
        objects: r.objects,
        metadata_blocks: r.metadata_blocks,
        data_blocks: r.data_blocks,
        referenced_bytes: r.referenced_units * 4096,
        allocated_bytes: r.allocated_units * 4096,
        data_bytes_verified: r.data_bytes_verified,
        compressed_blocks: r.compressed_blocks,
        saved_bytes: r.saved_bytes,
        errors: r.errors.clone(),
        notes: r.notes.clone(),
    }
}

impl Daemon {
    pub(crate) fn pool_info(&self, name: &str) -> Result<PoolInfo, ApiError> {
        if let Some(u) = self.unavailable.lock().expect("unavailable").get(name) {
            return Ok(PoolInfo {
                name: name.into(),
                state: PoolState::Unavailable,
                reason: Some(u.reason.clone()),
                device: u.record.device.clone(),
                log_device: u.record.log_device.clone(),
                members: u.record.members.clone(),
                groups: u.record.groups.clone(),
                spares: u.record.spares.clone(),
                scrub_every_seconds: u.record.scrub_schedule.map(|s| s.every_seconds),
                scrub_next_ns: u.record.scrub_schedule.map(|s| s.next_ns),
                rebuild_rate_min_bytes_per_second: rebuild_rate_of(u.record.rebuild_rate).0,
                rebuild_rate_max_bytes_per_second: rebuild_rate_of(u.record.rebuild_rate).1,
                scrub_rate_min_bytes_per_second: scrub_rate_of(u.record.scrub_rate).0,
                scrub_rate_max_bytes_per_second: scrub_rate_of(u.record.scrub_rate).1,
                status: None,
            });
        }
        let (pool, device, members, groups, log_device, spares, schedule, rates, scrub_rates) = {
            let pools = self.pools.lock().expect("pools");
            let e =
                pools.get(name).ok_or_else(|| ApiError::not_found(format!("pool {name}"), "see `strata pool list`"))?;
            (
                e.pool.clone(),
                e.device.clone(),
                e.members.clone(),
                e.groups.clone(),
                e.log_device.clone(),
                e.spares.clone(),
                e.scrub_schedule,
                rebuild_rate_of(e.rebuild_rate),
                scrub_rate_of(e.scrub_rate),
            )
        };
        let status = pool.status();
        let (_, _, state) = devset::device_figures(&status);
        let mut f = figures(&status);
        f.rebuild = super::devices::rebuild_figures(self, name, &status);
        f.scrub = self.scrubs.status(name);
        Ok(PoolInfo {
            name: name.into(),
            state,
            reason: None,
            device,
            log_device,
            members,
            groups,
            spares,
            scrub_every_seconds: schedule.map(|s| s.every_seconds),
            scrub_next_ns: schedule.map(|s| s.next_ns),
            rebuild_rate_min_bytes_per_second: rates.0,
            rebuild_rate_max_bytes_per_second: rates.1,
            scrub_rate_min_bytes_per_second: scrub_rates.0,
            scrub_rate_max_bytes_per_second: scrub_rates.1,
            status: Some(f),
        })
    }

    /// Every pool the daemon knows, open or not, by name.
    pub(crate) fn list_pools(&self) -> Vec<PoolInfo> {
        let mut names: Vec<String> = self.pools.lock().expect("pools").keys().cloned().collect();
        names.extend(self.unavailable.lock().expect("unavailable").keys().cloned());
        names.sort();
        names.iter().filter_map(|n| self.pool_info(n).ok()).collect()
    }

    fn name_taken(&self, name: &str) -> bool {
        self.pools.lock().expect("pools").contains_key(name)
            || self.unavailable.lock().expect("unavailable").contains_key(name)
    }

    /// Create a pool (`POST /v1/pools`). Refuses a device that holds a pool, a pool's log,
    /// or — unless `force` — anything else recognisable (super::devcheck).
    pub(crate) fn create_pool(&self, req: &CreatePool) -> Result<(), ApiError> {
        let checksum = match req.checksum.as_deref() {
            None | Some("blake3") => ChecksumAlgo::Blake3,
            Some("crc32c") => ChecksumAlgo::Crc32c,
            Some(o) => return Err(ApiError::bad_request(format!("checksum {o:?}"), "use blake3 or crc32c")),
        };
        let layout = devset::LayoutRequest::parse(req)?;
        let device = layout.paths()[0].clone();
        if self.name_taken(&req.name) {
            return Err(ApiError::new(
                strata_api::ErrorKind::AlreadyExists,
                format!("pool {} exists", req.name),
                "choose another name",
            ));
        }
        // A spare holds no label yet: the probe below would not see it is taken.
        for p in layout.paths().iter().chain(&req.log_device) {
            if let Some(owner) = self.spare_of(p) {
                return Err(ApiError::conflict(
                    format!("{} is a hot spare of pool {owner}", p.display()),
                    "choose another device, or take it out of the spares (`strata pool unspare`)",
                ));
            }
        }
        layout.refuse_foreign_data(req.force)?;
        if !req.spares.is_empty() {
            if !matches!(layout, devset::LayoutRequest::Set(..)) {
                return Err(ApiError::bad_request(
                    "hot spares are for a mirror or parity2 set",
                    "create the pool with --layout mirror or parity2, or without --spare",
                ));
            }
            for s in &req.spares {
                if layout.paths().contains(s) || req.log_device.as_ref() == Some(s) {
                    return Err(ApiError::bad_request(
                        format!("spare {} is also a device of the pool", s.display()),
                        "give a spare no other role",
                    ));
                }
                self.check_new_spare(s, req.size_bytes, req.force)?;
            }
        }
        // The log device first: its checks need nothing written (the pool's image files
        // are created by opening them).
        let log = match &req.log_device {
            None => None,
            Some(l) => {
                if layout.paths().iter().any(|d| d == l) {
                    return Err(ApiError::bad_request(
                        format!("log device {} is the pool's device (or one of its mirror's)", l.display()),
                        "use a different device for the log",
                    ));
                }
                Some(logdev::open_new_log_device(&device, l, req.force)?)
            }
        };
        let pool_guid = random_u64();
        let dev = layout.make(req.size_bytes, pool_guid)?;
        let create = CreateOptions { name: req.name.clone(), pool_guid, device_guid: random_u64(), checksum };
        let log = log.map(|dev| LogDeviceSpec { dev, log_device_guid: random_u64() });
        let pool = Pool::create_with_log(dev, create, log, pool_options()).map_err(ApiError::from)?;
        self.pools.lock().expect("pools").insert(
            req.name.clone(),
            PoolEntry {
                pool: Arc::new(pool),
                device: device.clone(),
                members: match &layout {
                    devset::LayoutRequest::Single(_) => Vec::new(),
                    devset::LayoutRequest::Set(_, m) => m.clone(),
                },
                groups: Vec::new(),
                log_device: req.log_device.clone(),
                spares: req.spares.clone(),
                scrub_schedule: None,
                rebuild_rate: None,
                scrub_rate: None,
            },
        );
        tracing::info!(pool = %req.name, devices = ?layout.paths(), spares = ?req.spares, "pool created");
        self.save_state()
    }

    /// `PATCH /v1/pools/{pool}`: check every field, then apply them all; a failure part way
    /// puts back what was applied.
    pub(crate) fn set_pool(&self, name: &str, req: &SetPool) -> Result<(), ApiError> {
        let pool = self.pool(name)?;
        if let Some(p) = req.capacity_alert_percent {
            if !(1..=99).contains(&p) {
                return Err(ApiError::bad_request(format!("capacity alert of {p}%"), "use 1 to 99"));
            }
        }
        let remove = req.remove_log_device == Some(true);
        if req.log_device.is_some() && remove {
            return Err(ApiError::bad_request(
                "log_device and remove_log_device together",
                "add a log device or remove one, not both",
            ));
        }
        if req.scrub_every_seconds.is_some_and(|s| s > 366 * 86400) {
            return Err(ApiError::bad_request(
                "a scrub schedule longer than a year",
                "scrub at least once a year (e.g. --scrub-every 30d); 0 stops the schedule",
            ));
        }
        let current = self.pools.lock().expect("pools").get(name).map(|e| (e.rebuild_rate, e.scrub_rate));
        let (rebuild_now, scrub_now) = current.unwrap_or_default();
        let rebuild_rate = new_rate_bounds(
            "rebuild",
            (req.rebuild_rate_min_bytes_per_second, req.rebuild_rate_max_bytes_per_second),
            rebuild_rate_of(rebuild_now),
            "slower leaves the pool without redundancy for days",
        )?;
        let scrub_rate = new_rate_bounds(
            "scrub",
            (req.scrub_rate_min_bytes_per_second, req.scrub_rate_max_bytes_per_second),
            scrub_rate_of(scrub_now),
            "slower leaves damage undetected for days",
        )?;
        if remove && pool.status().log_device.is_none() {
            return Err(ApiError::conflict(
                format!("pool {name} has no log device of its own"),
                "its intent log is in the pool: nothing to remove",
            ));
        }
        let old_percent = pool.status().space.capacity_alert_percent;
        if let Some(p) = req.capacity_alert_percent {
            pool.set_capacity_alert(p)?;
        }
        let log_change = match (&req.log_device, remove) {
            (Some(log), _) => self.add_log_device(name, log),
            (None, true) => self.remove_log_device(name),
            _ => Ok(()),
        };
        if let Err(e) = log_change {
            if req.capacity_alert_percent.is_some() {
                pool.set_capacity_alert(old_percent)?;
            }
            return Err(e);
        }
        pool.commit()?;
        if let Some(every) = req.scrub_every_seconds {
            let now = super::jobs::now_ns();
            let schedule = (every > 0)
                .then(|| super::state::ScrubSchedule { every_seconds: every, next_ns: now + every * 1_000_000_000 });
            if let Some(e) = self.pools.lock().expect("pools").get_mut(name) {
                e.scrub_schedule = schedule;
            }
            tracing::info!(pool = name, every_seconds = every, "scrub schedule set");
            self.save_state()?;
        }
        if let Some(rate) = rebuild_rate {
            self.store_rate(name, "rebuild", rate, |e| &mut e.rebuild_rate)?;
            // A rebuild waiting out its old rate takes the new one now.
            self.rebuilds.kick();
        }
        if let Some(rate) = scrub_rate {
            self.store_rate(name, "scrub", rate, |e| &mut e.scrub_rate)?;
            // A running scrub takes the new bounds now (the devices thread keeps it inside
            // them from its next round on).
            self.scrubs.bound_rate(name, rate.min_bytes_per_second, rate.max_bytes_per_second);
        }
        Ok(())
    }

    /// Keep pool `name`'s new `work` rate bounds in its entry's field `field` (for the next
    /// start too) and say so in the log.
    fn store_rate(
        &self,
        name: &str,
        work: &str,
        rate: RateBounds,
        field: fn(&mut super::PoolEntry) -> &mut Option<RateBounds>,
    ) -> Result<(), ApiError> {
        if let Some(e) = self.pools.lock().expect("pools").get_mut(name) {
            *field(e) = Some(rate);
        }
        tracing::info!(
            pool = name,
            work,
            min_bytes_per_second = rate.min_bytes_per_second,
            max_bytes_per_second = rate.max_bytes_per_second,
            "{work} rate set"
        );
        self.save_state()
    }

    /// Give pool `name` the separate log device `log` (checked as at creation), and
    /// remember it for the next start.
    fn add_log_device(&self, name: &str, log: &Path) -> Result<(), ApiError> {
        let (pool, device) = {
            let pools = self.pools.lock().expect("pools");
            let e = pools.get(name).ok_or_else(|| ApiError::not_found(format!("pool {name}"), "strata pool list"))?;
            (e.pool.clone(), e.device.clone())
        };
        let dev = logdev::open_new_log_device(&device, log, false)?;
        pool.add_log_device(LogDeviceSpec { dev, log_device_guid: random_u64() }).map_err(ApiError::from)?;
        if let Some(e) = self.pools.lock().expect("pools").get_mut(name) {
            e.log_device = Some(log.to_path_buf());
        }
        tracing::info!(pool = name, log = %log.display(), "log device added");
        self.save_state()
    }

    /// Stop using pool `name`'s separate log device.
    fn remove_log_device(&self, name: &str) -> Result<(), ApiError> {
        let pool = self.pool(name)?;
        pool.remove_log_device().map_err(ApiError::from)?;
        if let Some(e) = self.pools.lock().expect("pools").get_mut(name) {
            e.log_device = None;
        }
        tracing::info!(pool = name, "log device removed; the intent log is back in the pool");
        self.save_state()
    }

    /// Start a check of pool `name` as a job (it holds the pool's lock while it walks: the
    /// pool's I/O waits; cancel stops it at the next block).
    pub(crate) fn start_check(&self, name: &str, verify_data: bool, caller: &str) -> Result<JobInfo, ApiError> {
        let pool = self.pool(name)?;
        if let Some(j) = self.jobs.running("check", name, None) {
            return Err(ApiError::conflict(
                format!("pool {name} is being checked already (job {})", j.id),
                "follow it with `strata job show ID`",
            ));
        }
        let spec = JobSpec { kind: "check", pool: name, target: None, caller, cancellable: true };
        self.jobs.spawn(spec, move |job| {
            let out = pool.check_observed(strata_engine::CheckOptions { verify_data, ..Default::default() }, job)?;
            Ok(serde_json::to_value(check_report(&out.report)).expect("reports serialise"))
        })
    }
}

/// The rate bounds (`kind`: rebuild or scrub) a `pool set` asks for — either bound alone
/// keeps the other of `current` — checked; `None` when it changes neither.
fn new_rate_bounds(
    kind: &str,
    (want_min, want_max): (Option<u64>, Option<u64>),
    current: (u64, u64),
    too_slow: &str,
) -> Result<Option<RateBounds>, ApiError> {
    if want_min.is_none() && want_max.is_none() {
        return Ok(None);
    }
    let (min, max) = (want_min.unwrap_or(current.0), want_max.unwrap_or(current.1));
    if min < client_pace::LEAST_MIN_BYTES_PER_SECOND {
        return Err(ApiError::bad_request(
            format!("a {kind} rate floor of {min} bytes/s"),
            &format!("use at least 1M: {too_slow}"),
        ));
    }
    if max < min {
        return Err(ApiError::bad_request(
            format!("a {kind} rate ceiling ({max} bytes/s) below its floor ({min} bytes/s)"),
            &format!("give a --{kind}-rate-max at least --{kind}-rate-min (set both together to lower both)"),
        ));
    }
    Ok(Some(RateBounds { min_bytes_per_second: min, max_bytes_per_second: max }))
}
