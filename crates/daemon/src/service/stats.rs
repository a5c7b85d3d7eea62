//! I/O statistics of the volumes (strata-stats) and the figures of the pools, for
//! `GET /v1/stats` (here) and `GET /metrics` (metrics.rs).
//!
//! The registry keeps one `VolumeStats` per volume that has been mounted or exported since
//! the daemon started; each front end is handed its protocol's counters once, when it
//! mounts or exports the volume (mounts.rs, exports.rs, blockexports.rs), and records
//! into them without the registry. A snapshot's LUN export is counted as the volume
//! `VOLUME@SNAPSHOT`. Counters live until the daemon stops, or until their volume or pool
//! goes (delete, export, destroy): a volume mounted again goes on counting where it was,
//! as a Prometheus counter should.
//!
//! Lock: `StatsRegistry::volumes` is a leaf, held only to look up, insert or list.

use super::{devset, ApiError, Daemon};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use strata_api::{IoClassStats, IoStats, PoolIoStats, StatsQuery, VolumeIoStats};
use strata_engine::pool::counters::{DurationCounts, COMMIT_BOUNDS_US};
use strata_engine::Pool;
use strata_stats::{histogram, ClassSnapshot, OpClass, Protocol, ProtocolStats, VolumeStats, P50, P99, P999};

pub(crate) struct StatsRegistry {
    pub(crate) started: Instant,
    volumes: Arc<Mutex<BTreeMap<(String, String), Arc<VolumeStats>>>>,
}

impl Default for StatsRegistry {
    fn default() -> Self {
        StatsRegistry { started: Instant::now(), volumes: Arc::new(Mutex::new(BTreeMap::new())) }
    }
}

impl StatsRegistry {
    /// The counters of `pool/volume` through protocol `p`, for a front end to record into.
    pub(crate) fn protocol(&self, pool: &str, volume: &str, p: Protocol) -> Arc<ProtocolStats> {
        let mut v = self.volumes.lock().expect("volume stats");
        v.entry((pool.to_string(), volume.to_string())).or_default().protocol(p)
    }

    /// Forget the counters of `pool/volume` and of its snapshots' exports.
    pub(crate) fn forget_volume(&self, pool: &str, volume: &str) {
        let snap = format!("{volume}@");
        self.volumes
            .lock()
            .expect("volume stats")
            .retain(|(p, v), _| !(p == pool && (v == volume || v.starts_with(&snap))));
    }

    pub(crate) fn forget_pool(&self, pool: &str) {
        self.volumes.lock().expect("volume stats").retain(|(p, _), _| p != pool);
    }

    /// The volumes counted, by pool and name.
    /// Client operations on `pool`'s volumes so far, every protocol and class: what tells a
    /// pool serving a database from one that only commits or rebuilds in the background.
    pub(crate) fn pool_ops(&self, pool: &str) -> u64 {
        ops_of(&self.volumes, pool)
    }

    /// Client operations on `pool`'s volumes so far and their summed latency (ns): the
    /// clients' mean latency, which the pace of a rebuild or scrub follows (client_pace.rs).
    pub(crate) fn pool_ops_latency(&self, pool: &str) -> (u64, u64) {
        let v = self.volumes.lock().expect("volume stats");
        v.iter()
            .filter(|((p, _), _)| p == pool)
            .flat_map(|(_, s)| s.in_use().map(|(_, ps)| ps.ops_and_latency_ns()))
            .fold((0, 0), |(o, n), (o2, n2)| (o + o2, n.saturating_add(n2)))
    }

    /// `pool_ops` of `pool` as a function that outlives a borrow of the registry (a scrub's
    /// thread paces by it).
    pub(crate) fn pool_ops_fn(&self, pool: &str) -> Box<dyn Fn() -> u64 + Send + Sync> {
        let (volumes, pool) = (self.volumes.clone(), pool.to_string());
        Box::new(move || ops_of(&volumes, &pool))
    }

    pub(crate) fn list(&self) -> Vec<(String, String, Arc<VolumeStats>)> {
        self.volumes.lock().expect("volume stats").iter().map(|((p, v), s)| (p.clone(), v.clone(), s.clone())).collect()
    }
}

fn ops_of(volumes: &Mutex<BTreeMap<(String, String), Arc<VolumeStats>>>, pool: &str) -> u64 {
    let v = volumes.lock().expect("volume stats");
    v.iter().filter(|((p, _), _)| p == pool).flat_map(|(_, s)| s.in_use().map(|(_, ps)| ps.ops_total())).sum()
}

/// One protocol of one volume, read once: what both /v1/stats and /metrics print.
pub(crate) struct VolumeSample {
    pub pool: String,
    pub volume: String,
    pub protocol: Protocol,
    pub classes: Vec<(OpClass, ClassSnapshot)>,
}

/// One open pool, read once.
pub(crate) struct PoolSample {
    pub name: String,
    pub status: strata_engine::PoolStatus,
    pub devices: Vec<strata_api::DeviceFigures>,
    pub counters: strata_engine::pool::counters::CounterValues,
}

impl Daemon {
    /// The counters of the volumes (of `pool`, of `pool/volume`), read now.
    pub(crate) fn volume_samples(&self, pool: Option<&str>, volume: Option<&str>) -> Vec<VolumeSample> {
        let mut out = Vec::new();
        for (p, v, stats) in self.stats.list() {
            if pool.is_some_and(|want| want != p) || volume.is_some_and(|want| want != v) {
                continue;
            }
            for (protocol, s) in stats.in_use() {
                let classes = OpClass::ALL.iter().map(|&c| (c, s.snapshot(c))).collect();
                out.push(VolumeSample { pool: p.clone(), volume: v.clone(), protocol, classes });
            }
        }
        out
    }

    /// The open pools (or `pool`), read now.
    pub(crate) fn pool_samples(&self, pool: Option<&str>) -> Vec<PoolSample> {
        let pools: Vec<(String, Arc<Pool>)> = self
            .pools
            .lock()
            .expect("pools")
            .iter()
            .filter(|(n, _)| pool.is_none_or(|want| want == n.as_str()))
            .map(|(n, e)| (n.clone(), e.pool.clone()))
            .collect();
        pools
            .into_iter()
            .map(|(name, p)| {
                let status = p.status();
                let (_, devices, _) = devset::device_figures(&status);
                PoolSample { name, status, devices, counters: p.counters() }
            })
            .collect()
    }

    /// `GET /v1/stats`.
    pub(crate) fn io_stats(&self, q: &StatsQuery) -> Result<IoStats, ApiError> {
        if q.volume.is_some() && q.pool.is_none() {
            return Err(ApiError::bad_request("a volume without its pool", "give pool= as well (or POOL/VOLUME)"));
        }
        if let Some(p) = &q.pool {
            let pool = self.pool(p)?;
            if let Some(v) = q.volume.as_deref().filter(|v| !v.contains('@')) {
                pool.volume_id(v).map_err(ApiError::from)?;
            }
        }
        let uptime_seconds = self.stats.started.elapsed().as_secs_f64();
        let volumes = self.volume_samples(q.pool.as_deref(), q.volume.as_deref()).iter().map(volume_io).collect();
        let pools = self.pool_samples(q.pool.as_deref()).iter().map(pool_io).collect();
        Ok(IoStats { uptime_seconds, pools, volumes })
    }
}

fn volume_io(s: &VolumeSample) -> VolumeIoStats {
    let get = |c: OpClass| s.classes.iter().find(|(k, _)| *k == c).map(|(_, v)| class_io(v)).unwrap_or_default();
    VolumeIoStats {
        pool: s.pool.clone(),
        volume: s.volume.clone(),
        protocol: s.protocol.name().into(),
        read: get(OpClass::Read),
        write: get(OpClass::Write),
        sync: get(OpClass::Sync),
        trim: get(OpClass::Trim),
        other: get(OpClass::Other),
    }
}

pub(crate) fn class_io(c: &ClassSnapshot) -> IoClassStats {
    IoClassStats {
        ops: c.ops,
        bytes: c.bytes,
        errors: c.errors,
        latency_us_p50: c.latency.quantile(P50),
        latency_us_p99: c.latency.quantile(P99),
        latency_us_p999: c.latency.quantile(P999),
        latency_us_total: c.latency_ns / 1000,
        latency_us_buckets: c.latency.sparse().into_iter().map(|(us, n)| [us, n]).collect(),
    }
}

/// The `ppm` quantile of a fixed-bound histogram: the bound of the bucket the rank falls in
/// (the last bound for the overflow bucket); 0 when empty.
pub(crate) fn commit_quantile_us(d: &DurationCounts, ppm: u32) -> u64 {
    let n = d.count();
    if n == 0 {
        return 0;
    }
    let want = histogram::rank(n, ppm);
    let mut seen = 0;
    for (i, &c) in d.buckets.iter().enumerate() {
        seen += c;
        if seen >= want {
            return COMMIT_BOUNDS_US.get(i).copied().unwrap_or(COMMIT_BOUNDS_US[COMMIT_BOUNDS_US.len() - 1]);
        }
    }
    unreachable!("rank {want} is at most the count {n}")
}

fn pool_io(s: &PoolSample) -> PoolIoStats {
    let st = &s.status;
    let sum = |f: fn(&strata_api::DeviceFigures) -> u64| s.devices.iter().map(f).sum();
    PoolIoStats {
        pool: s.name.clone(),
        size_bytes: st.size_bytes,
        allocated_bytes: st.allocated_bytes,
        free_bytes: st.free_bytes,
        logical_bytes: st.space.logical_bytes,
        available_bytes: st.space.available_bytes,
        txg: st.txg,
        commits: st.commits.count,
        commit_seconds_total: s.counters.commit.sum_us as f64 / 1e6,
        commit_locked_seconds_total: st.commits.locked_us_total as f64 / 1e6,
        commit_bytes_total: s.counters.commit_bytes,
        last_commit_bytes: s.counters.last_commit_bytes,
        commit_latency_us_p50: commit_quantile_us(&s.counters.commit, P50),
        commit_latency_us_p99: commit_quantile_us(&s.counters.commit, P99),
        log_blocks_written: st.log_blocks_written,
        log_bytes_written: st.log_bytes_written,
        data_cache_hits: st.data_cache_hits,
        data_cache_misses: st.data_cache_misses,
        metadata_cache_hits: st.metadata_cache_hits,
        metadata_cache_misses: st.metadata_cache_misses,
        blocks_read: st.blocks_read,
        blocks_written: st.blocks_written,
        corruptions_detected: st.corruptions_detected,
        device_read_errors: sum(|d| d.read_errors),
        device_write_errors: sum(|d| d.write_errors),
        device_checksum_errors: sum(|d| d.checksum_errors),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_quantiles_are_bucket_bounds() {
        let mut d = DurationCounts::default();
        assert_eq!(commit_quantile_us(&d, P99), 0);
        d.buckets[0] = 98; // <= 1 ms
        d.buckets[3] = 1; // <= 10 ms
        d.buckets[COMMIT_BOUNDS_US.len()] = 1; // > 30 s
        assert_eq!(commit_quantile_us(&d, P50), 1_000);
        assert_eq!(commit_quantile_us(&d, P99), 10_000);
        assert_eq!(commit_quantile_us(&d, 1_000_000), 30_000_000);
    }

    #[test]
    fn forgetting_a_volume_takes_its_snapshot_exports_too() {
        let r = StatsRegistry::default();
        r.protocol("p", "v", Protocol::Fuse);
        r.protocol("p", "v@s1", Protocol::Nbd);
        r.protocol("p", "vv", Protocol::Nfs);
        r.protocol("q", "v", Protocol::Fuse);
        r.forget_volume("p", "v");
        let left: Vec<(String, String)> = r.list().into_iter().map(|(p, v, _)| (p, v)).collect();
        assert_eq!(left, vec![("p".into(), "vv".into()), ("q".into(), "v".into())]);
        r.forget_pool("q");
        assert_eq!(r.list().len(), 1);
    }
}
