//! The iSCSI target (RFC 7143) of Strata: block LUNs ([`strata_lun::Lun`]) served to
//! initiators over TCP.
//!
//! Layers, bottom up: `pdu` (wire format, digests), `text` (key=value negotiation),
//! `chap`, `login` (the login state machine), `session` (full-feature phase: command
//! window, Data-Out/R2T, Data-In, task management), `scsi` (the SBC-3/SPC-4 device
//! server, with `sense`), `targets` (what is served to whom) and `server` (threads).
//!
//! Scope and trade-offs: one connection per session (MaxConnections=1) and error recovery
//! level 0 — a digest error or protocol violation ends the connection and the initiator
//! logs in again. Persistent reservations are kept in memory per LUN. No unit attentions
//! are generated.

pub mod chap;
pub mod login;
pub mod pdu;
pub mod scsi;
pub mod sense;
pub mod server;
pub mod session;
pub mod targets;
pub mod text;

pub use server::{IscsiServer, ServerConfig};
pub use targets::{Chap, Cidr, Target, TargetConfig, TargetError, TargetTable};
