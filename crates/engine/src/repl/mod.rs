//! Replication: a snapshot of a volume as a stream of frames (send), applied to a volume
//! of another pool (receive) — the engine's part of a mirror (DESIGN.md §1, "mirror").
//!
//! - stream.rs: the frame format (versioned, each frame authenticated end to end);
//! - diff.rs: what differs between two snapshots, found by comparing block pointers so
//!   that unchanged subtrees are skipped whole;
//! - send.rs: `Pool::send`, a snapshot (incremental from a base) as frames, resumable;
//! - receive.rs: `Pool::receive_begin` / `Receiver::apply`, frames into a volume, with
//!   checkpoints to resume from and a snapshot at the end.
//!
//! Above the pool in the layers: it uses only the pool's public face and its transfer
//! operations (pool/transfer.rs).

mod diff;
pub mod journal;
pub mod receive;
pub mod send;
pub mod stream;

pub use receive::{checkpoint_for, Applied, Receiver, CHECKPOINT_BYTES, CHECKPOINT_MIN_BYTES};
pub use send::{SendOptions, SendSummary};
pub use stream::{SendRecord, SnapRef, StreamHeader, StreamReader, StreamWriter};
