//! Exports: which volume a client may reach over NFS, from where, and as whom.
//!
//! An export names one volume (its MOUNT path is `/POOL/VOLUME`) and carries a policy: the
//! client networks allowed (CIDRs; none = nobody), read-only or read-write, and how
//! credentials are squashed (root squash, the default, maps uid 0 to the anonymous
//! user; all squash maps everyone). The daemon owns the table and changes it at run time;
//! the server reads it for every request, so a deleted export stops answering at once
//! (its handles become STALE) and a changed policy applies to the next request.
//!
//! Export ids are never reused (the daemon hands them out from a persistent counter): a
//! handle minted for a deleted export cannot reach whatever replaces it.

use crate::rpc::Credential;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use strata_fs::VolumeFs;
use strata_stats::ProtocolStats;

/// A client network: an address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    /// `10.0.0.0/8`, `192.168.1.7` (a single host), `::1/128`, `fd00::/8`.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a.trim().parse().map_err(|_| format!("{s:?} is not an IP address or CIDR network"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(|| format!("{s:?}: prefix length must be 0..={max}"))?,
            None => max,
        };
        Ok(Cidr { addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        // An IPv4 client reaching an IPv6 socket shows up as ::ffff:a.b.c.d.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        let (net, addr, bits) = match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => (u32::from(n) as u128, u32::from(a) as u128, 32u32),
            (IpAddr::V6(n), IpAddr::V6(a)) => (u128::from(n), u128::from(a), 128u32),
            _ => return false,
        };
        let p = self.prefix as u32;
        if p == 0 {
            return true;
        }
        let mask = if p >= bits { u128::MAX } else { !((1u128 << (bits - p)) - 1) };
        let mask = if bits == 32 { mask & 0xffff_ffff } else { mask };
        net & mask == addr & mask
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Squash {
    /// Credentials are taken as they come (trusted clients only).
    None,
    /// uid 0 and gid 0 become the anonymous user and group (the safe default, as knfsd's).
    Root,
    /// Everyone is the anonymous user.
    All,
}

impl Squash {
    pub fn name(self) -> &'static str {
        match self {
            Squash::None => "none",
            Squash::Root => "root",
            Squash::All => "all",
        }
    }

    pub fn parse(s: &str) -> Result<Squash, String> {
        match s {
            "none" => Ok(Squash::None),
            "root" => Ok(Squash::Root),
            "all" => Ok(Squash::All),
            _ => Err(format!("squash {s:?}: use none, root or all")),
        }
    }
}

/// The anonymous user of most systems (nobody / nogroup).
pub const ANON_ID: u32 = 65534;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportPolicy {
    pub clients: Vec<Cidr>,
    pub read_only: bool,
    pub squash: Squash,
    pub anon_uid: u32,
    pub anon_gid: u32,
}

impl ExportPolicy {
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.clients.iter().any(|c| c.contains(ip))
    }

    /// The identity a request acts as, after squashing. AUTH_NONE is the anonymous user.
    pub fn identity(&self, cred: &Credential) -> Identity {
        let anon = Identity { uid: self.anon_uid, gid: self.anon_gid, groups: Vec::new() };
        match cred {
            Credential::None => anon,
            Credential::Sys { .. } if self.squash == Squash::All => anon,
            Credential::Sys { uid, gid, groups, .. } => {
                let root = self.squash == Squash::Root;
                let map_uid = |u: u32| if root && u == 0 { self.anon_uid } else { u };
                let map_gid = |g: u32| if root && g == 0 { self.anon_gid } else { g };
                Identity {
                    uid: map_uid(*uid),
                    gid: map_gid(*gid),
                    groups: groups.iter().map(|&g| map_gid(g)).collect(),
                }
            }
        }
    }
}

/// Who a request acts as (after squashing): the subject of every permission check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl Identity {
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// One exported volume.
pub struct Export {
    /// Never reused; part of every file handle.
    pub id: u32,
    /// `/POOL/VOLUME`: what clients MOUNT.
    pub path: String,
    pub fs: Arc<VolumeFs>,
    /// Identifies the volume in file handles together with the volume id: a handle of a
    /// volume that was deleted and re-created (new id) is STALE.
    pub pool_guid: u64,
    pub policy: ExportPolicy,
    /// Where requests on the export are counted (the volume's NFS statistics), if anywhere.
    pub stats: Option<Arc<ProtocolStats>>,
}

impl Export {
    pub fn volume_id(&self) -> u64 {
        self.fs.volume().0
    }
}

/// The exports the server answers for, shared with the daemon that edits them.
#[derive(Default)]
pub struct ExportTable {
    exports: RwLock<BTreeMap<u32, Arc<Export>>>,
}

impl ExportTable {
    pub fn new() -> ExportTable {
        ExportTable::default()
    }

    pub fn insert(&self, e: Export) {
        self.exports.write().expect("export table").insert(e.id, Arc::new(e));
    }

    pub fn remove(&self, id: u32) -> Option<Arc<Export>> {
        self.exports.write().expect("export table").remove(&id)
    }

    pub fn get(&self, id: u32) -> Option<Arc<Export>> {
        self.exports.read().expect("export table").get(&id).cloned()
    }

    pub fn by_path(&self, path: &[u8]) -> Option<Arc<Export>> {
        // Clients send "/pool/vol" or "/pool/vol/"; both name the export.
        let path = if path.len() > 1 { path.strip_suffix(b"/").unwrap_or(path) } else { path };
        self.exports.read().expect("export table").values().find(|e| e.path.as_bytes() == path).cloned()
    }

    pub fn list(&self) -> Vec<Arc<Export>> {
        self.exports.read().expect("export table").values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_matching() {
        let net = Cidr::parse("10.1.0.0/16").expect("cidr");
        assert!(net.contains("10.1.200.3".parse().expect("ip")));
        assert!(!net.contains("10.2.0.1".parse().expect("ip")));
        assert!(net.contains("::ffff:10.1.0.9".parse().expect("ip")));
        let host = Cidr::parse("127.0.0.1").expect("cidr");
        assert_eq!(host.prefix, 32);
        assert!(host.contains("127.0.0.1".parse().expect("ip")));
        assert!(!host.contains("127.0.0.2".parse().expect("ip")));
        assert!(Cidr::parse("0.0.0.0/0").expect("cidr").contains("8.8.8.8".parse().expect("ip")));
        assert!(Cidr::parse("fd00::/8").expect("cidr").contains("fd12::1".parse().expect("ip")));
        assert!(!Cidr::parse("fd00::/8").expect("cidr").contains("10.0.0.1".parse().expect("ip")));
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("nonsense").is_err());
    }

    #[test]
    fn squashing() {
        let mut p =
            ExportPolicy { clients: vec![], read_only: false, squash: Squash::Root, anon_uid: 65534, anon_gid: 65533 };
        let root = Credential::Sys { uid: 0, gid: 0, groups: vec![0, 5], machine: "h".into() };
        let user = Credential::Sys { uid: 1000, gid: 1000, groups: vec![5], machine: "h".into() };
        assert_eq!(p.identity(&root), Identity { uid: 65534, gid: 65533, groups: vec![65533, 5] });
        assert_eq!(p.identity(&user).uid, 1000);
        assert_eq!(p.identity(&Credential::None).uid, 65534);
        p.squash = Squash::None;
        assert_eq!(p.identity(&root).uid, 0);
        p.squash = Squash::All;
        assert_eq!(p.identity(&user), Identity { uid: 65534, gid: 65533, groups: vec![] });
    }
}
