//! The catalog layer: volumes (their records, object sets and dirty state), snapshots,
//! clones, deadlists and space accounting.

pub mod volume;
