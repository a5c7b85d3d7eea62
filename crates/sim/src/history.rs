//! What was acknowledged: the history a run records and the rule a recovered pool must
//! satisfy.
//!
//! The pool's state is split into *lines*, each changed by one thread only, so that each
//! goes through a sequence of states S0, S1, ... (one per operation of its thread): an
//! object of a writer, a writer's key, the admin's volumes and snapshots. Every operation
//! takes a tick of a shared logical clock just before it is called and just after it
//! returns. After the crash, each line must show a state Sj with lo <= j <= hi, where
//! - hi is the last operation started (one that failed, or was in flight, may or may not
//!   have happened), and
//! - lo is the last operation known durable: the line's own acknowledged syncs (fsync of
//!   its object; the admin's snapshot, restore, clone, delete), every operation that ended
//!   before the start of a *pool-wide* durable point that returned Ok (a commit, `sync_log`,
//!   or an operation that commits the whole pool), and for lines of shared intent-log
//!   groups (keys) those that ended before the start of any acknowledged object sync.
//!
//! Nothing else may appear: an object, key or volume no line owns fails the check, and so
//! does a state no operation produced. States are kept as BLAKE3 digests.

use strata_engine::sync::atomic::{AtomicU64, Ordering};
use strata_testkit::model::{ObjectModel, VolumeModel};

pub type Digest = [u8; 32];

/// The shared logical clock and the durable points seen so far.
#[derive(Default)]
pub struct Clock {
    now: AtomicU64,
    /// The latest start of a pool-wide durable point that returned Ok.
    pool_durable: AtomicU64,
    /// The latest start of an acknowledged object sync (it carries every shared group).
    shared_durable: AtomicU64,
}

impl Clock {
    pub fn tick(&self) -> u64 {
        self.now.fetch_add(1, Ordering::SeqCst) + 1
    }
    /// A pool-wide durable point that started at `start` returned Ok.
    pub fn pool_durable(&self, start: u64) {
        self.pool_durable.fetch_max(start, Ordering::SeqCst);
    }
    /// An object sync that started at `start` returned Ok.
    pub fn shared_durable(&self, start: u64) {
        self.shared_durable.fetch_max(start, Ordering::SeqCst);
    }
    pub fn durable_points(&self) -> (u64, u64) {
        (self.pool_durable.load(Ordering::SeqCst), self.shared_durable.load(Ordering::SeqCst))
    }
}

/// One line's history.
#[derive(Clone, Debug)]
pub struct Line {
    pub name: String,
    /// Whether its operations are shared intent-log groups (keys: every object sync
    /// carries them).
    pub shared: bool,
    /// states[0] is durable at the start; states[k] follows operation k.
    states: Vec<Digest>,
    /// ends[k]: the tick after operation k returned Ok (None: it failed or never returned).
    ends: Vec<Option<u64>>,
    /// Highest state its own acknowledged syncs made durable.
    own_durable: usize,
}

impl Line {
    pub fn new(name: impl Into<String>, shared: bool, initial: Digest) -> Line {
        Line { name: name.into(), shared, states: vec![initial], ends: vec![Some(0)], own_durable: 0 }
    }

    /// Operation leading to `state` returned Ok at tick `end`.
    pub fn done(&mut self, state: Digest, end: u64) {
        self.states.push(state);
        self.ends.push(Some(end));
    }

    /// Operation leading to `state` failed or never returned: it may or may not have
    /// happened. No operation follows it.
    pub fn uncertain(&mut self, state: Digest) {
        self.states.push(state);
        self.ends.push(None);
    }

    /// An acknowledged sync of this line alone (fsync of its object; an operation that
    /// commits): everything so far is durable.
    pub fn synced(&mut self) {
        self.own_durable = self.last_certain();
    }

    fn last_certain(&self) -> usize {
        self.ends.iter().rposition(|e| e.is_some()).expect("state 0 is certain")
    }

    /// The range of states a recovered pool may show, given the durable points.
    pub fn allowed(&self, (pool, shared): (u64, u64)) -> (usize, usize) {
        let cover = if self.shared { pool.max(shared) } else { pool };
        let by_points = self.ends.iter().rposition(|e| e.is_some_and(|t| t < cover)).unwrap_or(0);
        (self.own_durable.max(by_points), self.states.len() - 1)
    }

    /// Whether `found` is allowed; else a description of what went wrong.
    pub fn check(&self, found: &Digest, points: (u64, u64)) -> Result<usize, String> {
        let (lo, hi) = self.allowed(points);
        if let Some(j) = (lo..=hi).rev().find(|&j| self.states[j] == *found) {
            return Ok(j);
        }
        let seen: Vec<usize> = (0..self.states.len()).filter(|&j| self.states[j] == *found).collect();
        Err(format!(
            "{}: shows {}, but only states {lo}..={hi} of {} are allowed (state {lo} was acknowledged)",
            self.name,
            match seen.last() {
                Some(j) => format!("the state after its operation {j}"),
                None => "a state none of its operations produced".to_string(),
            },
            self.states.len() - 1,
        ))
    }
}

pub fn digest_absent() -> Digest {
    *blake3::hash(b"absent").as_bytes()
}

/// Per 16 KiB: a short digest of each piece (for traces).
pub fn sketch(o: Option<&ObjectModel>) -> String {
    let Some(o) = o else { return "absent".into() };
    let parts: Vec<String> =
        o.data
            .chunks(16384)
            .map(|c| {
                if c.iter().all(|b| *b == 0) {
                    "0".to_string()
                } else {
                    format!("{:02x}", blake3::hash(c).as_bytes()[0])
                }
            })
            .collect();
    format!("len {} attr {} [{}]", o.data.len(), o.attr.len(), parts.join(" "))
}

pub fn digest_object(o: Option<&ObjectModel>) -> Digest {
    let Some(o) = o else { return digest_absent() };
    let mut h = blake3::Hasher::new();
    h.update(b"object");
    bytes(&mut h, &o.data);
    bytes(&mut h, &o.attr);
    *h.finalize().as_bytes()
}

pub fn digest_value(v: Option<&[u8]>) -> Digest {
    let Some(v) = v else { return digest_absent() };
    let mut h = blake3::Hasher::new();
    h.update(b"value");
    bytes(&mut h, v);
    *h.finalize().as_bytes()
}

/// A volume's objects and keys (its record size is left out: a snapshot view reports its
/// own).
pub fn hash_volume(h: &mut blake3::Hasher, v: &VolumeModel) {
    h.update(&(v.objects.len() as u64).to_le_bytes());
    for (id, o) in &v.objects {
        h.update(&id.to_le_bytes());
        bytes(h, &o.data);
        bytes(h, &o.attr);
    }
    h.update(&(v.kv.len() as u64).to_le_bytes());
    for (k, val) in &v.kv {
        bytes(h, k);
        bytes(h, val);
    }
}

fn bytes(h: &mut blake3::Hasher, b: &[u8]) {
    h.update(&(b.len() as u64).to_le_bytes());
    h.update(b);
}
