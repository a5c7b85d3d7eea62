//! Copy-on-write trees: the keyed B+tree (catalog, volume trees) and the per-object block
//! tree (a radix tree of block pointers, ZFS indirect blocks).
//!
//! Both follow one rule: a block once written is never changed. A change loads the path
//! from the root into memory, edits it there, and the txg writes the edited nodes as new
//! blocks bottom-up; the blocks they replace are handed back as *released* so that space
//! accounting (and later snapshots' deadlists) decide what becomes free.

pub mod blocktree;
pub mod btree;
