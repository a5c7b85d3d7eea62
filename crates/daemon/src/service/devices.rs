//! The devices of mirror pools at run time: `pool replace|online|offline`, the rebuild
//! thread (copying at a bounded rate, so the database keeps its throughput), and the log
//! lines that say when a device changed state (what `zpool events` would show).

use super::client_pace::{rebuild_rate_of, scrub_rate_of, ClientPace, Step, Work};
use super::jobs::{Job, JobSpec, Jobs};
use super::{devcheck, devset, open_device, random_u64, ApiError, Daemon};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use strata_api::{DeviceChange, RebuildFigures};
use strata_engine::{MemberState, Pool};

/// Logical bytes one rebuild step looks at (it copies only what the pool uses of them).
const REBUILD_WINDOW: u64 = 8 << 20;

/// A rebuild's figures over time, for its rate and ETA.
#[derive(Default)]
pub(crate) struct RebuildTracks {
    tracks: Mutex<BTreeMap<String, Track>>,
    /// Set by `kick` (a rebuild was started): the devices thread, between its rounds,
    /// takes the first step at once instead of at its next round.
    kicked: Mutex<bool>,
    wake: Condvar,
}

struct Track {
    started: Instant,
    start_cursor: u64,
    copied: u64,
    /// The rate its last step was held to (clients were served), or `None` (full speed).
    limit: Option<u64>,
    /// Its job resource (jobs.rs): the cursor as its progress; not cancellable (a member
    /// being rebuilt is not redundant until it ends).
    job: Arc<Job>,
}

impl RebuildTracks {
    /// A rebuild was started, or its rate bounds changed: wake the devices thread.
    pub(crate) fn kick(&self) {
        *self.kicked.lock().expect("rebuild kick") = true;
        self.wake.notify_all();
    }

    /// The devices thread's pause between rounds: `pause`, or until `kick`.
    fn nap(&self, pause: Duration) {
        let mut kicked = self.kicked.lock().expect("rebuild kick");
        if !*kicked {
            kicked = self.wake.wait_timeout(kicked, pause).expect("rebuild kick").0;
        }
        *kicked = false;
    }

    /// A step that began at `step_started` made progress `p`.
    fn record(
        &self,
        jobs: &Jobs,
        pool: &str,
        p: &strata_engine::pool::rebuild::RebuildProgress,
        step_started: Instant,
        limit: Option<u64>,
    ) {
        let mut t = self.tracks.lock().expect("rebuild tracks");
        let e = t.entry(pool.to_string()).or_insert_with(|| Track {
            started: step_started,
            start_cursor: p.status.cursor,
            copied: 0,
            limit,
            job: jobs.start(JobSpec {
                kind: "rebuild",
                pool,
                target: Some(&p.status.device),
                caller: "device replaced or back online",
                cancellable: false,
            }),
        });
        e.copied += p.copied;
        e.limit = limit;
        e.job.set_total(p.status.end);
        e.job.done.store(p.status.cursor, Ordering::Relaxed);
    }

    /// The rebuild of `pool` ended (`done`), or is no longer there (the pool went away).
    /// Returns the bytes it copied and its seconds.
    fn forget(&self, jobs: &Jobs, pool: &str, done: bool) -> Option<(u64, f64)> {
        let t = self.tracks.lock().expect("rebuild tracks").remove(pool)?;
        let figures = (t.copied, t.started.elapsed().as_secs_f64());
        let r = if done {
            Ok(serde_json::json!({ "copied_bytes": t.copied, "seconds": t.started.elapsed().as_secs_f64() }))
        } else {
            Err(ApiError::unavailable(
                format!("the rebuild of pool {pool} stopped: the pool is gone or its rebuild was abandoned"),
                "see `strata pool status`",
            ))
        };
        jobs.end(&t.job, r);
        Some(figures)
    }

    /// The figures of pool `pool`'s rebuild at `cursor` of `end`.
    pub(crate) fn figures(&self, pool: &str, device: String, cursor: u64, end: u64) -> RebuildFigures {
        let t = self.tracks.lock().expect("rebuild tracks");
        let (rate, copied, limit) = match t.get(pool) {
            Some(tr) => {
                let secs = tr.started.elapsed().as_secs_f64().max(0.001);
                ((cursor.saturating_sub(tr.start_cursor)) as f64 / secs, tr.copied, tr.limit)
            }
            None => (0.0, 0, None),
        };
        let eta = (rate > 0.0).then(|| (end.saturating_sub(cursor)) as f64 / rate);
        RebuildFigures {
            device,
            done_bytes: cursor,
            total_bytes: end,
            percent: if end > 0 { (cursor as f64 * 1000.0 / end as f64).round() / 10.0 } else { 100.0 },
            copied_bytes: copied,
            scan_bytes_per_second: rate as u64,
            eta_seconds: eta.map(|e| e.round() as u64),
            limit_bytes_per_second: limit,
        }
    }
}

impl Daemon {
    /// Which member of pool `pool`'s mirrors `device` names: its index ("0".."2", or
    /// "GROUP.INDEX" with several device groups), the path the daemon recorded, or the
    /// device as `pool status` shows it. Returns the pool, the member's group and index.
    fn member_index(&self, pool: &str, device: &str) -> Result<(Arc<Pool>, usize, usize), ApiError> {
        let (p, members, groups) = {
            let pools = self.pools.lock().expect("pools");
            let e =
                pools.get(pool).ok_or_else(|| ApiError::not_found(format!("pool {pool}"), "see `strata pool list`"))?;
            (e.pool.clone(), e.members.clone(), e.groups.clone())
        };
        let set = p.status().devices.ok_or_else(|| {
            ApiError::conflict(format!("pool {pool} is on one device"), "replace, online and offline are for mirrors")
        })?;
        let by_path = std::iter::once(&members)
            .chain(&groups)
            .enumerate()
            .find_map(|(g, paths)| paths.iter().position(|m| m.as_path() == Path::new(device)).map(|i| (g, i)));
        let by_status = set
            .members
            .iter()
            .find(|m| m.device == device || m.device.starts_with(&format!("{device} (")))
            .map(|m| (m.group, m.index));
        let (g, i) = device.split_once('.').map_or((Some("0"), device), |(g, i)| (Some(g), i));
        let by_index = g
            .and_then(|g| g.parse::<usize>().ok())
            .zip(i.parse::<usize>().ok())
            .filter(|&(g, i)| set.members.iter().any(|m| m.group == g && m.index == i));
        let (group, index) = by_path.or(by_status).or(by_index).ok_or_else(|| {
            ApiError::not_found(
                format!("device {device} in pool {pool}"),
                "give a device as `strata pool status` lists it, or its index (0, 1, 2; 1.0 for group 1)",
            )
        })?;
        Ok((p, group, index))
    }

    /// The mirror of pool `p`'s device group `group`.
    fn group_set(p: &Pool, group: usize) -> Result<Arc<dyn strata_engine::BlockDevice>, ApiError> {
        let dev = p.device();
        let set = match dev.as_groups() {
            Some(g) => g.groups().into_iter().nth(group).map(|(_, d)| d),
            None => (group == 0).then_some(dev.clone()),
        };
        set.filter(|d| d.as_mirror().is_some()).ok_or_else(|| ApiError::conflict("not a mirror", "-"))
    }

    /// A device about to become a hot spare: an absolute path, not in use, existing (or an
    /// image to create, with `size`), holding no data unless `force`. Created now if asked.
    pub(crate) fn check_new_spare(&self, path: &Path, size: Option<u64>, force: bool) -> Result<(), ApiError> {
        if !path.is_absolute() {
            return Err(ApiError::bad_request(
                format!("{} is not an absolute path", path.display()),
                "give the full path",
            ));
        }
        if self.device_in_use(path) {
            return Err(ApiError::conflict(
                format!("{} is a device or a spare of a pool already", path.display()),
                "choose a device no pool uses",
            ));
        }
        if path.exists() {
            devcheck::refuse_foreign_data(path, force)
        } else if size.is_some() {
            open_device(path, size).map(drop)
        } else {
            Err(ApiError::bad_request(
                format!("{} does not exist", path.display()),
                "give a size to create an image file (--size)",
            ))
        }
    }

    /// `POST /v1/pools/{pool}/devices`: `replace`, `online`, `offline` a member; `spare`,
    /// `unspare` a hot spare.
    pub(crate) fn change_device(&self, pool: &str, req: &DeviceChange) -> Result<(), ApiError> {
        let _admin = self.admin.lock().expect("admin");
        if matches!(req.action.as_str(), "spare" | "unspare") {
            return self.change_spare(pool, req);
        }
        let (p, group, index) = self.member_index(pool, &req.device)?;
        let set = Self::group_set(&p, group)?;
        let mirror = set.as_mirror().ok_or_else(|| ApiError::conflict("not a mirror", "-"))?;
        match req.action.as_str() {
            "offline" => mirror.offline(index).map_err(ApiError::from)?,
            "online" => {
                mirror.online(index).map_err(ApiError::from)?;
                self.rebuilds.kick();
            }
            "replace" => {
                let new = req.new_device.as_ref().ok_or_else(|| {
                    ApiError::bad_request("replace without a new device", "give the new device (NEW)")
                })?;
                if !new.is_absolute() {
                    return Err(ApiError::bad_request(
                        format!("{} is not an absolute path", new.display()),
                        "give the full path",
                    ));
                }
                if !new.exists() && req.size_bytes.is_none() {
                    return Err(ApiError::bad_request(
                        format!("{} does not exist", new.display()),
                        "give size_bytes to create an image file",
                    ));
                }
                // One of this pool's own spares may be named (it leaves the spares).
                let own_spare = self
                    .pools
                    .lock()
                    .expect("pools")
                    .get(pool)
                    .is_some_and(|e| e.spares.iter().any(|s| devset::same_device(s, new)));
                if self.device_in_use(new) && !own_spare {
                    return Err(ApiError::conflict(
                        format!("{} is a device of a pool already", new.display()),
                        "choose a device no pool uses",
                    ));
                }
                if new.exists() {
                    devcheck::refuse_foreign_data(new, req.force)?;
                }
                self.replace_member(pool, &p, group, index, new, req.size_bytes)?;
                self.rebuilds.kick();
            }
            other => {
                return Err(ApiError::bad_request(
                    format!("device action {other:?}"),
                    "use replace, online, offline, spare or unspare",
                ))
            }
        }
        tracing::warn!(pool, device = %req.device, action = %req.action, new = ?req.new_device, "device changed");
        Ok(())
    }

    /// Put `new` in member `index`'s place and start its rebuild (the admin lock held).
    fn replace_member(
        &self,
        pool: &str,
        p: &Pool,
        group: usize,
        index: usize,
        new: &Path,
        size: Option<u64>,
    ) -> Result<(), ApiError> {
        let set = Self::group_set(p, group)?;
        let mirror = set.as_mirror().ok_or_else(|| ApiError::conflict("not a mirror", "-"))?;
        let d = open_device(new, size)?;
        mirror.replace(index, d, random_u64()).map_err(ApiError::from)?;
        if let Some(e) = self.pools.lock().expect("pools").get_mut(pool) {
            let paths = if group == 0 { Some(&mut e.members) } else { e.groups.get_mut(group - 1) };
            if let Some(slot) = paths.and_then(|m| m.get_mut(index)) {
                *slot = new.to_path_buf();
            }
            if group == 0 && index == 0 {
                e.device = new.to_path_buf();
            }
            e.spares.retain(|s| !devset::same_device(s, new));
        }
        self.save_state()
    }

    /// Add or remove a hot spare (the admin lock held).
    fn change_spare(&self, pool: &str, req: &DeviceChange) -> Result<(), ApiError> {
        let p = self.pool(pool)?;
        if p.device().set_status().is_none() {
            return Err(ApiError::conflict(format!("pool {pool} is on one device"), "hot spares are for mirrors"));
        }
        let path = Path::new(&req.device);
        if req.action == "spare" {
            self.check_new_spare(path, req.size_bytes, req.force)?;
            if let Some(e) = self.pools.lock().expect("pools").get_mut(pool) {
                e.spares.push(path.to_path_buf());
            }
        } else {
            let mut pools = self.pools.lock().expect("pools");
            let e = pools.get_mut(pool).ok_or_else(|| ApiError::not_found(format!("pool {pool}"), "-"))?;
            let before = e.spares.len();
            e.spares.retain(|s| !devset::same_device(s, path));
            if e.spares.len() == before {
                return Err(ApiError::not_found(
                    format!("pool {pool} has no spare {}", path.display()),
                    "see the spares in `strata pool status`",
                ));
            }
        }
        tracing::info!(pool, device = %req.device, action = %req.action, "hot spares changed");
        self.save_state()
    }

    /// A spare in the place of the first member that faulted, disappeared or was missing at
    /// open, when the pool has a spare and no rebuild is running (one at a time).
    fn use_spare(&self, name: &str, pool: &Pool, set: &strata_engine::device::SetStatus) {
        if set.rebuild.is_some() {
            return;
        }
        let Some(m) = set
            .members
            .iter()
            .find(|m| matches!(m.state, MemberState::Faulted | MemberState::Removed | MemberState::Unavailable))
        else {
            return;
        };
        let _admin = self.admin.lock().expect("admin");
        let Some(spare) = self.pools.lock().expect("pools").get(name).and_then(|e| e.spares.first().cloned()) else {
            return;
        };
        match self.replace_member(name, pool, m.group, m.index, &spare, None) {
            Ok(()) => {
                let text = format!("hot spare {} replaced {} ({}); rebuilding", spare.display(), m.device, m.state);
                tracing::warn!(pool = name, "{text}");
                self.events.record("warning", "device.spare", Some(name), Some(&m.device), text);
            }
            Err(e) => {
                // Not tried again: it leaves the list (the operator sees why in the events).
                if let Some(en) = self.pools.lock().expect("pools").get_mut(name) {
                    en.spares.retain(|s| s != &spare);
                }
                let _ = self.save_state();
                let text =
                    format!("hot spare {} could not replace {}: {} ({})", spare.display(), m.device, e.message, e.hint);
                tracing::error!(pool = name, "{text}");
                self.events.record("error", "device.spare", Some(name), Some(&m.device), text);
            }
        }
    }

    /// A pool whose separate log device failed went on with its log in the pool (the
    /// engine's `fail_over_log`): the daemon forgets the device (a restart opens without it)
    /// and says so once.
    fn note_log_failover(&self, name: &str, pool: &Pool) {
        let Some(why) = pool.log_failover() else { return };
        let forgotten = {
            let mut pools = self.pools.lock().expect("pools");
            pools.get_mut(name).and_then(|e| e.log_device.take())
        };
        let Some(path) = forgotten else { return };
        tracing::error!(pool = %name, log = %path.display(), "{why}");
        let text = format!(
            "{why}; the pool goes on without it. Replace the device, then `strata pool set {name} --log-device DEV`"
        );
        self.events.record("error", "pool.log_device", Some(name), Some(&path.display().to_string()), text);
        if let Err(e) = self.save_state() {
            tracing::error!(pool = %name, "could not record that the log device is gone: {}", e.message);
        }
    }

    /// The pool `path` is a hot spare of, if any.
    pub(crate) fn spare_of(&self, path: &Path) -> Option<String> {
        let pools = self.pools.lock().expect("pools");
        pools.iter().find(|(_, e)| e.spares.iter().any(|s| devset::same_device(s, path))).map(|(n, _)| n.clone())
    }

    pub(crate) fn device_in_use(&self, path: &Path) -> bool {
        let pools = self.pools.lock().expect("pools");
        pools.values().any(|e| {
            std::iter::once(&e.device)
                .chain(&e.members)
                .chain(e.groups.iter().flatten())
                .chain(&e.log_device)
                .chain(&e.spares)
                .any(|d| devset::same_device(d, path))
        })
    }

    /// The devices thread: every pool's member states (a change is logged), the rebuild of
    /// a mirror member, window by window: at full speed on an idle pool, at the rate its
    /// pace allows while the pool serves clients (client_pace.rs); and the rate a running
    /// scrub may go at beside clients (its own pace, set on the scrub every round).
    pub(crate) fn device_loop(self: Arc<Self>) {
        let mut seen: BTreeMap<(String, usize, usize), (MemberState, String)> = BTreeMap::new();
        let mut activity: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        // Per pool: the rebuild's pace and the scrub's.
        let mut paces: BTreeMap<String, (ClientPace, ClientPace)> = BTreeMap::new();
        while !self.stopping.load(Ordering::Relaxed) {
            type Bounds = ((u64, u64), (u64, u64));
            let pools: Vec<(String, Arc<Pool>, Bounds)> = self
                .pools
                .lock()
                .expect("pools")
                .iter()
                .map(|(n, e)| {
                    (n.clone(), e.pool.clone(), (rebuild_rate_of(e.rebuild_rate), scrub_rate_of(e.scrub_rate)))
                })
                .collect();
            paces.retain(|n, _| pools.iter().any(|(p, _, _)| p == n));
            let mut busy = false;
            for (name, pool, bounds) in pools {
                let scrubbing = self.scrubs.is_active(&name);
                // Clients served since the last round (FUSE, NFS, NBD, iSCSI operations, and
                // intent-log writes): only then are a rebuild and a scrub paced. Not the
                // pool's own block counters: the commits that follow a database's last
                // writes would count, and pace a rebuild of an idle pool for seconds. Sampled
                // every round, so that a rebuild's first step (and a scrub's) knows too.
                let (ops, latency_ns) = self.stats.pool_ops_latency(&name);
                let io = (ops, pool.io_activity().2);
                let foreground = activity.insert(name.clone(), io).is_some_and(|before| before != io);
                self.scrubs.note_clients(&name, foreground);
                let scrub_pace = &mut paces.entry(name.clone()).or_insert_with(|| new_paces(bounds)).1;
                scrub_pace.set_limits(bounds.1 .0, bounds.1 .1);
                let work = if scrubbing { Work::Mine } else { Work::Idle };
                // A rebuild under way is `Other` for the scrub's pace; a single-device pool
                // has none (and no set status).
                let set = pool.device().set_status();
                let rebuilding = set.as_ref().is_some_and(|s| s.rebuild.is_some());
                let work = if rebuilding && !scrubbing { Work::Other } else { work };
                log_step("scrub", &name, scrub_pace.observe(ops, latency_ns, work, Instant::now()));
                if scrubbing {
                    self.scrubs.set_rate(&name, scrub_pace.rate());
                }
                self.note_log_failover(&name, &pool);
                let Some(set) = set else { continue };
                for m in &set.members {
                    let now = (m.state, m.device.clone());
                    let before = seen.insert((name.clone(), m.group, m.index), now.clone());
                    if before.as_ref().is_some_and(|b| *b != now) || (before.is_none() && !m.state.in_use()) {
                        let note = m.note.clone().unwrap_or_default();
                        match m.state {
                            MemberState::Online => tracing::info!(pool = %name, device = %m.device, "device ONLINE"),
                            s => tracing::warn!(pool = %name, device = %m.device, "device {s}: {note}"),
                        }
                        let severity = if m.state == MemberState::Online { "info" } else { "warning" };
                        let text = if note.is_empty() {
                            format!("device {}", m.state)
                        } else {
                            format!("device {}: {note}", m.state)
                        };
                        self.events.record(severity, "device.state", Some(&name), Some(&m.device), text);
                    }
                }
                self.use_spare(&name, &pool, &set);
                // Again: a spare taken in may have started a rebuild.
                let Some(set) = pool.device().set_status() else { continue };
                let pace = &mut paces.entry(name.clone()).or_insert_with(|| new_paces(bounds)).0;
                pace.set_limits(bounds.0 .0, bounds.0 .1);
                let work = match (set.rebuild.is_some(), scrubbing) {
                    (true, _) => Work::Mine,
                    (false, true) => Work::Other,
                    (false, false) => Work::Idle,
                };
                log_step("rebuild", &name, pace.observe(ops, latency_ns, work, Instant::now()));
                if set.rebuild.is_some() {
                    busy = true;
                    let start = Instant::now();
                    // Larger windows when idle: fewer steps over unused space.
                    let window = if foreground { REBUILD_WINDOW } else { REBUILD_WINDOW * 8 };
                    // Two chunks in flight beside clients (as many as the copy had before
                    // 2026-11-27: their TPS during a rebuild fell from 0.85 to 0.71 with
                    // four), sixteen when idle (rebuild.rs IDLE_COPY_LANES).
                    let lanes = if foreground { 2 } else { strata_engine::device::mirror::IDLE_COPY_LANES };
                    match pool.rebuild_step_lanes(window, lanes) {
                        Ok(Some(p)) => {
                            let rate = pace.rate();
                            self.rebuilds.record(&self.jobs, &name, &p, start, foreground.then_some(rate));
                            if p.done {
                                let (copied, secs) = self.rebuilds.forget(&self.jobs, &name, true).unwrap_or_default();
                                tracing::info!(pool = %name, device = %p.status.device, copied, secs, "rebuild complete");
                            }
                            // Pace while the pool serves I/O: the bytes copied at the allowed
                            // rate. An idle pool is rebuilt as fast as the devices go.
                            let want = Duration::from_secs_f64(p.copied as f64 / rate.max(1) as f64);
                            // A new rate (`pool set`) or rebuild ends the wait early.
                            if let Some(rest) = want.checked_sub(start.elapsed()).filter(|_| foreground) {
                                self.rebuilds.nap(rest);
                            }
                        }
                        Ok(None) => {
                            self.rebuilds.forget(&self.jobs, &name, false);
                        }
                        Err(e) => {
                            tracing::error!(pool = %name, "rebuild step failed: {e}");
                            std::thread::sleep(Duration::from_secs(1));
                        }
                    }
                }
            }
            if !busy {
                self.rebuilds.nap(Duration::from_millis(200));
            }
        }
    }
}

/// A pool's (rebuild, scrub) paces at their bounds.
fn new_paces((rebuild, scrub): ((u64, u64), (u64, u64))) -> (ClientPace, ClientPace) {
    (ClientPace::new(rebuild.0, rebuild.1), ClientPace::new(scrub.0, scrub.1))
}

/// A pace's step in the log: a new reference at the floor at info, the rest at debug.
fn log_step(kind: &str, pool: &str, step: Step) {
    match step {
        Step::Rebase(us) => tracing::info!(
            pool,
            latency_us = us as u64,
            "{kind} pace: the clients' latency at the floor rate is the new reference"
        ),
        Step::Up(r) | Step::Down(r) => tracing::debug!(pool, rate = r, "{kind} pace"),
        Step::Wait | Step::Reference(_) => {}
    }
}

/// The rebuild figures of a pool's status, if it has a rebuild in progress.
pub(crate) fn rebuild_figures(d: &Daemon, pool: &str, s: &strata_engine::PoolStatus) -> Option<RebuildFigures> {
    let r = s.devices.as_ref()?.rebuild.as_ref()?;
    Some(d.rebuilds.figures(pool, r.device.clone(), r.cursor, r.end))
}
