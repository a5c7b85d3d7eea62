//! Copy-on-write trees: the keyed B+tree (catalog, volume trees) and the per-object block
//! tree (a radix tree of block pointers, ZFS indirect blocks).
//!
//! Both follow one rule: a block once written is never changed. A change loads the path
//! from the root into memory, edits it there, and the txg writes the edited nodes as new
//! blocks bottom-up; the blocks they replace are handed back as *released* so that space
//! accounting (and later snapshots' deadlists) decide what becomes free.
//!
//! Both walk nodes read from disk, so indexing, slicing, `unwrap` and `expect` are denied
//! here as in `format` (docs/failure-policy.md): a node or pointer that does not fit is a
//! typed corruption error; what only this code builds is stated with `let ... else
//! unreachable!` where it cannot fail.

#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]
pub mod blocktree;
pub mod btree;
