//! Strata's NFS server: NFSv3 (RFC 1813) and MOUNT v3 over ONC RPC (RFC 5531) on TCP, with
//! a portmapper (RFC 1833) so standard clients find it, serving volumes through
//! [`strata_fs::VolumeFs`] — the same file system object a FUSE mount of the volume uses.
//!
//! Layers, bottom up: `xdr` (encoding, bounded decoding) → `rpc` (record marking, call and
//! reply headers, AUTH_SYS) → `server` (listeners, connections, worker pool) → programs:
//! `portmap`, `mount`, `nfs3`. `handle` mints and checks file handles; `export` holds the
//! export table and its policies. Design notes: docs/nfs.md.
//!
//! Nothing here trusts a length from the wire: records are capped before they are read,
//! and every variable-length field is checked against its maximum and the bytes present
//! before use. Bad input is answered (GARBAGE_ARGS, an NFS error) or the connection is
//! closed; it never panics the server.

mod drc;
pub mod export;
pub mod handle;
mod mount;
mod nfs3;
mod portmap;
pub mod rpc;
mod server;
pub mod xdr;

pub use export::{Cidr, Export, ExportPolicy, ExportTable, Identity, Squash, ANON_ID};
pub use handle::{HandleKey, HANDLE_BYTES};
pub use nfs3::MAX_IO_BYTES;
pub use server::{
    failpoint_panic_on_xid, NfsServer, ServerConfig, MAX_CONNECTIONS, PROG_MOUNT, PROG_NFS, PROG_PORTMAP,
};

use std::net::IpAddr;
use std::sync::Arc;

/// The request path without sockets: decode one record, run it, return the reply record.
/// For tests and fuzzing (tests/fuzz_decode.rs feeds it random and mutated records).
pub struct Processor {
    shared: server::Shared,
}

impl Processor {
    pub fn new(exports: Arc<ExportTable>, key: HandleKey) -> Processor {
        Processor { shared: server::test_shared(exports, key) }
    }

    /// The reply to `record` from a client at `peer`, or `None` if it cannot be answered
    /// (not a call).
    pub fn process(&self, peer: IpAddr, record: &[u8]) -> Option<Vec<u8>> {
        server::process(&self.shared, peer, record).map(|r| r.to_vec())
    }
}
