//! Strata's NBD server: serves [`strata_lun::Lun`]s to Network Block Device clients
//! (Linux nbd-client, qemu, libnbd tools) over TCP, optionally TLS.
//!
//! Layers, bottom up: `proto` (constants, bounded encoders and decoders) → `link` (plain
//! or TLS byte stream, split into a reading and a writing half) → `handshake` (fixed
//! newstyle option haggling) → `transmission` (requests on the LUN) → `server`
//! (listener, connection threads, worker pool). `exports` holds the export table and who
//! may use each export; `tls` loads certificates.
//!
//! Nothing here trusts a length from the wire: option data and payloads are capped
//! before they are read and every field is checked against the bytes present. Bad input
//! is answered with an NBD error or ends the connection; it never panics the server.

mod exports;
mod handshake;
mod link;
mod memlun;
pub mod proto;
mod server;
mod tls;
mod transmission;

pub use exports::{Cidr, Export, ExportEntry, ExportTable};
pub use handshake::MAX_OPTIONS;
pub use memlun::MemLun;
pub use server::{NbdServer, ServerConfig, DEFAULT_POLL, HANDSHAKE_TIMEOUT, MAX_CONNECTIONS};
pub use tls::TlsConfig;

/// Run one whole session over `input` against a fresh table of in-memory exports (""
/// writable, "ro" read-only), discarding the replies: the handshake, then requests one at
/// a time. For the fuzz target: no input may panic it. An odd first byte puts a canned
/// handshake (structured replies, base:allocation, GO "") before the rest, so that
/// arbitrary bytes reach the transmission phase too; an even one fuzzes the handshake.
#[doc(hidden)]
pub fn fuzz_session(input: &[u8]) {
    use std::sync::Arc;
    let Some((&mode, rest)) = input.split_first() else { return };
    let mut stream = Vec::new();
    if mode & 1 == 1 {
        stream.extend_from_slice(&(proto::FLAG_C_FIXED_NEWSTYLE | proto::FLAG_C_NO_ZEROES).to_be_bytes());
        let mut opt = |option: u32, data: &[u8]| {
            stream.extend_from_slice(&proto::IHAVEOPT.to_be_bytes());
            stream.extend_from_slice(&option.to_be_bytes());
            stream.extend_from_slice(&(data.len() as u32).to_be_bytes());
            stream.extend_from_slice(data);
        };
        opt(proto::OPT_STRUCTURED_REPLY, &[]);
        let mut meta = 0u32.to_be_bytes().to_vec();
        meta.extend_from_slice(&1u32.to_be_bytes());
        meta.extend_from_slice(&(proto::META_BASE_ALLOCATION.len() as u32).to_be_bytes());
        meta.extend_from_slice(proto::META_BASE_ALLOCATION.as_bytes());
        opt(proto::OPT_SET_META_CONTEXT, &meta);
        opt(proto::OPT_GO, &[0, 0, 0, 0, 0, 0]);
    }
    stream.extend_from_slice(rest);
    let exports = ExportTable::new();
    let lun: Arc<dyn strata_lun::Lun> = Arc::new(MemLun::new(1 << 20, 512));
    exports.add("", Export::new(lun.clone())).expect("a short name");
    exports.add("ro", Export { read_only: true, ..Export::new(lun) }).expect("a short name");
    let peer = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    let mut r = stream.as_slice();
    let mut w = std::io::sink();
    let policy = handshake::TlsPolicy { available: false, required: false };
    let Ok(mut s) = handshake::greet(&mut r, &mut w) else { return };
    if let Ok(handshake::Outcome::Transmit(n)) =
        handshake::haggle(&mut r, &mut w, &mut s, &exports, peer, policy, false)
    {
        let _ = transmission::serve_serially(&mut r, &mut w, &n);
    }
}
