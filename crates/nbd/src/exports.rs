//! The export table: name → LUN, with who may see and open each export.
//!
//! Exports come and go while the server runs. A connection holds its export's entry (an
//! `Arc`) for its life; removing the export marks the entry removed, and each connection
//! serving it answers its next request with NBD_ESHUTDOWN and ends (the LUN is let go of
//! when the last such connection has). One `RwLock` over the map, held only to look up,
//! add or remove: never across I/O.
//!
//! Access is by client network (CIDR, IPv4 and IPv6). The default is this host only
//! (loopback): exporting to the network is a decision the operator writes down. A client
//! outside an export's networks is told the export does not exist (LIST omits it, INFO/GO
//! answer NBD_REP_ERR_UNKNOWN), so the table does not reveal names to strangers.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use strata_lun::Lun;
use strata_stats::ProtocolStats;

/// A client network: `10.0.0.0/8`, `192.168.1.7` (one host), `::1/128`, `fd00::/8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
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

    /// This host: 127.0.0.0/8 and ::1.
    pub fn loopback() -> Vec<Cidr> {
        vec![
            Cidr { addr: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), prefix: 8 },
            Cidr { addr: IpAddr::V6(Ipv6Addr::LOCALHOST), prefix: 128 },
        ]
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        // An IPv4 client reaching an IPv6 socket shows up as ::ffff:a.b.c.d.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        let (net, addr, bits) = match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => (u128::from(u32::from(n)), u128::from(u32::from(a)), 32u32),
            (IpAddr::V6(n), IpAddr::V6(a)) => (u128::from(n), u128::from(a), 128u32),
            _ => return false,
        };
        let p = u32::from(self.prefix).min(bits);
        if p == 0 {
            return true;
        }
        let shift = bits - p;
        (net >> shift) == (addr >> shift)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// One export as configured.
#[derive(Clone)]
pub struct Export {
    pub lun: Arc<dyn Lun>,
    /// Shown by `NBD_OPT_LIST` and `NBD_INFO_DESCRIPTION` (may be empty).
    pub description: String,
    /// Served read-only even if the LUN is writable.
    pub read_only: bool,
    /// Client networks that may see and open the export.
    pub clients: Vec<Cidr>,
    /// Where requests on the export are counted (the volume's NBD statistics), if anywhere.
    pub stats: Option<Arc<ProtocolStats>>,
}

impl Export {
    /// A writable export for this host only.
    pub fn new(lun: Arc<dyn Lun>) -> Export {
        Export { lun, description: String::new(), read_only: false, clients: Cidr::loopback(), stats: None }
    }

    pub fn allows(&self, peer: IpAddr) -> bool {
        self.clients.iter().any(|c| c.contains(peer))
    }

    /// Read-only as served: by configuration or because the LUN is.
    pub fn effective_read_only(&self) -> bool {
        self.read_only || self.lun.read_only()
    }
}

/// An export as a connection holds it.
pub struct ExportEntry {
    pub name: String,
    pub export: Export,
    removed: AtomicBool,
}

impl ExportEntry {
    /// True once the export was removed from the table (or replaced).
    pub fn removed(&self) -> bool {
        self.removed.load(Ordering::SeqCst)
    }
}

#[derive(Default)]
pub struct ExportTable {
    map: RwLock<BTreeMap<String, Arc<ExportEntry>>>,
}

impl ExportTable {
    pub fn new() -> ExportTable {
        ExportTable::default()
    }

    /// Add (or replace) the export `name`. Names are at most 4096 bytes (the protocol's
    /// string limit); the empty name is the default export. A replaced export's
    /// connections end as if it had been removed.
    pub fn add(&self, name: &str, export: Export) -> Result<(), String> {
        if name.len() > crate::proto::MAX_STRING {
            return Err(format!("export name of {} bytes: at most 4096", name.len()));
        }
        let entry = Arc::new(ExportEntry { name: name.to_string(), export, removed: AtomicBool::new(false) });
        let old = self.map.write().expect("export table").insert(name.to_string(), entry);
        if let Some(old) = old {
            old.removed.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Remove `name`; false if there was no such export.
    pub fn remove(&self, name: &str) -> bool {
        match self.map.write().expect("export table").remove(name) {
            Some(e) => {
                e.removed.store(true, Ordering::SeqCst);
                true
            }
            None => false,
        }
    }

    /// The export `name` if `peer` may open it.
    pub fn lookup(&self, name: &str, peer: IpAddr) -> Option<Arc<ExportEntry>> {
        let map = self.map.read().expect("export table");
        map.get(name).filter(|e| e.export.allows(peer)).cloned()
    }

    /// The exports `peer` may see, by name.
    pub fn visible(&self, peer: IpAddr) -> Vec<Arc<ExportEntry>> {
        let map = self.map.read().expect("export table");
        map.values().filter(|e| e.export.allows(peer)).cloned().collect()
    }

    pub fn names(&self) -> Vec<String> {
        self.map.read().expect("export table").keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_matching() {
        let net = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(net.contains("10.1.200.3".parse().unwrap()));
        assert!(!net.contains("10.2.0.1".parse().unwrap()));
        assert!(net.contains("::ffff:10.1.0.9".parse().unwrap()), "v4-mapped clients match v4 networks");
        let v6 = Cidr::parse("fd00::/8").unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("fe80::1".parse().unwrap()));
        assert!(!v6.contains("10.1.0.1".parse().unwrap()));
        let host = Cidr::parse("192.168.1.7").unwrap();
        assert_eq!(host.prefix, 32);
        assert!(host.contains("192.168.1.7".parse().unwrap()));
        assert!(!host.contains("192.168.1.8".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains("8.8.8.8".parse().unwrap()));
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("nonsense").is_err());
        let lo = Cidr::loopback();
        assert!(lo.iter().any(|c| c.contains("127.0.0.1".parse().unwrap())));
        assert!(lo.iter().any(|c| c.contains("::1".parse().unwrap())));
        assert!(!lo.iter().any(|c| c.contains("192.168.0.1".parse().unwrap())));
    }
}
