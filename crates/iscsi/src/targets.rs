//! The targets the server offers: IQN → LUNs, who may log in, and from where.
//!
//! The table can gain and lose targets while the server runs; a session holds an
//! `Arc<Target>` from login on, and a removed target's sessions end at their next PDU
//! (`Target::removed`). Each LUN carries its shared SCSI state: the lock that makes
//! COMPARE AND WRITE atomic and the persistent reservations, which are kept in memory
//! (lost when the daemon restarts, which initiators see as a reset of the reservations).
//!
//! Locks: `TargetTable::targets` (RwLock) is taken alone; a LUN's `caw` mutex is taken
//! before nothing else; `pr` is taken alone and never across a LUN I/O.

use crate::scsi::pr::PrState;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use strata_lun::Lun;
use strata_stats::ProtocolStats;

/// A client network, `address/prefix`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Option<Cidr> {
        let (a, p) = s.split_once('/').unwrap_or((s, ""));
        let addr: IpAddr = a.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = if p.is_empty() { max } else { p.parse().ok()? };
        (prefix <= max).then_some(Cidr { addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V6(v6)) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            _ => ip,
        };
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = if self.prefix == 0 { 0 } else { u32::MAX << (32 - self.prefix as u32) };
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = if self.prefix == 0 { 0 } else { u128::MAX << (128 - self.prefix as u32) };
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }

    /// The default: loopback only.
    pub fn loopback() -> Vec<Cidr> {
        vec![
            Cidr { addr: IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 0)), prefix: 8 },
            Cidr { addr: IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), prefix: 128 },
        ]
    }
}

/// CHAP credentials: the initiator proves it knows `secret` for `user`. With `mutual`,
/// the target answers the initiator's challenge with the second pair.
#[derive(Clone, Debug)]
pub struct Chap {
    pub user: String,
    pub secret: Vec<u8>,
    pub mutual: Option<(String, Vec<u8>)>,
}

/// What a target is made of, as the daemon describes it.
#[derive(Clone)]
pub struct TargetConfig {
    /// The target's IQN (`iqn.2026-01.org.example:name`).
    pub name: String,
    /// LUN 0, 1, … in order.
    pub luns: Vec<Arc<dyn Lun>>,
    /// Initiator IQNs allowed to log in; empty: any.
    pub initiators: Vec<String>,
    /// Networks clients may connect from; `Cidr::loopback()` unless widened.
    pub networks: Vec<Cidr>,
    pub chap: Option<Chap>,
    /// Where commands on each LUN are counted (its volume's iSCSI statistics), in the
    /// order of `luns`; a LUN past the end of this list is not counted.
    pub stats: Vec<Arc<ProtocolStats>>,
}

impl TargetConfig {
    /// A target over `luns` for loopback clients, any initiator, no CHAP.
    pub fn new(name: impl Into<String>, luns: Vec<Arc<dyn Lun>>) -> TargetConfig {
        TargetConfig {
            name: name.into(),
            luns,
            initiators: Vec::new(),
            networks: Cidr::loopback(),
            chap: None,
            stats: Vec::new(),
        }
    }
}

/// A LUN and its shared SCSI state.
pub struct LunSlot {
    pub lun: Arc<dyn Lun>,
    /// Held over COMPARE AND WRITE's read, compare and write, and over every other write
    /// of the LUN only while a CAW runs (writes take it too, briefly, so none lands between
    /// a CAW's compare and its write).
    pub caw: RwLock<()>,
    pub pr: Mutex<PrState>,
    /// LUN resets so far: a session that has seen fewer gets a unit attention (each
    /// session remembers the count it last saw, so nothing here grows per session).
    pub resets: AtomicU64,
    /// Where its commands are counted (scsi::execute), if anywhere.
    pub stats: Option<Arc<ProtocolStats>>,
}

pub struct Target {
    pub config: TargetConfig,
    pub luns: Vec<Arc<LunSlot>>,
    removed: AtomicBool,
}

impl Target {
    pub fn removed(&self) -> bool {
        self.removed.load(Ordering::Relaxed)
    }
    pub fn lun(&self, n: u16) -> Option<&Arc<LunSlot>> {
        self.luns.get(n as usize)
    }
    pub fn initiator_allowed(&self, iqn: &str) -> bool {
        self.config.initiators.is_empty() || self.config.initiators.iter().any(|i| i.eq_ignore_ascii_case(iqn))
    }
    pub fn client_allowed(&self, ip: IpAddr) -> bool {
        self.config.networks.iter().any(|n| n.contains(ip))
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum TargetError {
    Exists,
    BadName,
    TooManyLuns,
}

impl std::fmt::Display for TargetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TargetError::Exists => "a target of that name exists",
            TargetError::BadName => "a target name is an iqn./eui./naa. name of at most 223 bytes",
            TargetError::TooManyLuns => "at most 16384 LUNs per target",
        })
    }
}

impl std::error::Error for TargetError {}

/// The targets offered; shared with the server, changed while it runs.
#[derive(Default)]
pub struct TargetTable {
    targets: RwLock<BTreeMap<String, Arc<Target>>>,
}

impl TargetTable {
    pub fn new() -> TargetTable {
        TargetTable::default()
    }

    /// Offer a new target; its LUNs are numbered from 0 in the order given.
    pub fn add(&self, config: TargetConfig) -> Result<(), TargetError> {
        let n = &config.name.to_ascii_lowercase();
        let ok_prefix = ["iqn.", "eui.", "naa."].iter().any(|p| n.starts_with(p));
        if !ok_prefix || n.len() > 223 || n.bytes().any(|b| b <= b' ' || b == b'=' || b >= 0x7f) {
            return Err(TargetError::BadName);
        }
        if config.luns.len() > 16384 {
            return Err(TargetError::TooManyLuns);
        }
        let mut t = self.targets.write().expect("target table");
        let key = config.name.to_ascii_lowercase();
        if t.contains_key(&key) {
            return Err(TargetError::Exists);
        }
        let luns = config
            .luns
            .iter()
            .enumerate()
            .map(|(i, l)| {
                Arc::new(LunSlot {
                    lun: l.clone(),
                    caw: RwLock::new(()),
                    pr: Mutex::new(PrState::default()),
                    resets: AtomicU64::new(0),
                    stats: config.stats.get(i).cloned(),
                })
            })
            .collect();
        t.insert(key, Arc::new(Target { config, luns, removed: AtomicBool::new(false) }));
        Ok(())
    }

    /// Remove a target; its sessions end at their next PDU. False if it was not there.
    pub fn remove(&self, name: &str) -> bool {
        match self.targets.write().expect("target table").remove(&name.to_ascii_lowercase()) {
            Some(t) => {
                t.removed.store(true, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// iSCSI names compare case-insensitively (RFC 3722 normalises them to lower case).
    pub fn get(&self, name: &str) -> Option<Arc<Target>> {
        self.targets.read().expect("target table").get(&name.to_ascii_lowercase()).cloned()
    }

    /// Every target, in name order.
    pub fn all(&self) -> Vec<Arc<Target>> {
        self.targets.read().expect("target table").values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs() {
        let c = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(c.contains("10.1.200.3".parse().unwrap()));
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.0.9".parse().unwrap()));
        assert!(Cidr::parse("10.0.0.0/33").is_none());
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains("8.8.8.8".parse().unwrap()));
        assert!(Cidr::loopback().iter().any(|c| c.contains("127.0.0.1".parse().unwrap())));
        assert!(!Cidr::loopback().iter().any(|c| c.contains("192.168.1.1".parse().unwrap())));
    }

    #[test]
    fn add_get_remove() {
        let t = TargetTable::new();
        t.add(TargetConfig::new("iqn.2026-01.test:a", vec![])).unwrap();
        assert_eq!(t.add(TargetConfig::new("IQN.2026-01.test:A", vec![])), Err(TargetError::Exists));
        assert_eq!(t.add(TargetConfig::new("bad name", vec![])), Err(TargetError::BadName));
        let a = t.get("iqn.2026-01.test:A").unwrap();
        assert!(t.remove("iqn.2026-01.test:a"));
        assert!(a.removed());
        assert!(t.get("iqn.2026-01.test:a").is_none());
    }
}
