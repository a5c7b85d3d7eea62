//! A consistency check of the file system on top of the engine's own checker: every
//! directory entry names a live inode of the entry's type; link counts equal the names
//! that point at an inode (directories: 2 + subdirectories); each directory has exactly one
//! name and its recorded parent is the directory holding that name; no inode is
//! unreachable unless it is recorded as an orphan (unlinked while open); symlinks have
//! targets. Used by the crash tests after every simulated power loss.
//!
//! It reads what is on disk, damage included: a malformed key or entry is a problem it
//! reports, never a panic (indexing, slicing, `unwrap` and `expect` are denied here,
//! docs/failure-policy.md).
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]

use crate::inode::InodePhys;
use crate::keys::{decode_entry, key_parts};
use crate::{FsResult, VolumeFs, ROOT_INO};
use std::collections::{BTreeMap, BTreeSet};
use strata_engine::ObjectId;

impl VolumeFs {
    /// Problems found; empty means consistent. Reads everything under one txn.
    pub fn fsck(&self) -> FsResult<Vec<String>> {
        let mut problems = Vec::new();
        let mut t = self.pool.guard();
        let vol = self.vol;
        // Every object that exists, with its inode record.
        let mut inodes: BTreeMap<u64, InodePhys> = BTreeMap::new();
        let mut after = None;
        loop {
            let ids = t.list_objects(vol, after, 1024)?;
            let Some(&last) = ids.last() else { break };
            for id in ids {
                match InodePhys::decode(&t.get_attr(vol, id)?) {
                    Some(i) => {
                        inodes.insert(id.0, i);
                    }
                    None => problems.push(format!("object {} has no valid inode record", id.0)),
                }
            }
            after = Some(last);
        }
        let mut names: BTreeMap<u64, u32> = BTreeMap::new();
        let mut subdirs: BTreeMap<u64, u32> = BTreeMap::new();
        let mut holder: BTreeMap<u64, u64> = BTreeMap::new();
        for (k, v) in t.kv_range(vol, b"D", Some(b"E"), usize::MAX)? {
            let Ok((parent, name)) = key_parts(&k) else {
                problems.push(format!("directory entry key {k:02x?} holds no parent inode"));
                continue;
            };
            let name = String::from_utf8_lossy(name).into_owned();
            let Ok((child, dtype)) = decode_entry(&v) else {
                problems.push(format!("entry {parent}/{name}: {} bytes are not a directory entry", v.len()));
                continue;
            };
            match inodes.get(&child) {
                None => problems.push(format!("entry {parent}/{name} names missing inode {child}")),
                Some(ci) => {
                    if ci.dtype() != dtype {
                        problems
                            .push(format!("entry {parent}/{name}: type {dtype} but inode {child} is {}", ci.dtype()));
                    }
                    if ci.is_dir() {
                        *subdirs.entry(parent).or_default() += 1;
                        if holder.insert(child, parent).is_some() {
                            problems.push(format!("directory {child} has more than one name"));
                        }
                    }
                }
            }
            if !inodes.get(&parent).is_some_and(|p| p.is_dir()) {
                problems.push(format!("entry {name} lives in {parent}, which is not a directory"));
            }
            *names.entry(child).or_default() += 1;
        }
        let mut orphans: BTreeSet<u64> = BTreeSet::new();
        for (k, _) in t.kv_range(vol, b"O", Some(b"P"), usize::MAX)? {
            match key_parts(&k) {
                Ok((ino, _)) => {
                    orphans.insert(ino);
                }
                Err(_) => problems.push(format!("orphan key {k:02x?} holds no inode")),
            }
        }
        for (&ino, i) in &inodes {
            let n = names.get(&ino).copied().unwrap_or(0);
            if ino == ROOT_INO {
                if !i.is_dir() || n != 0 {
                    problems.push("the root is not a directory with no name".into());
                }
            } else if n == 0 && !orphans.contains(&ino) {
                problems.push(format!("inode {ino} is unreachable (leaked)"));
            }
            if i.is_dir() {
                let want = if n == 0 && ino != ROOT_INO { 0 } else { 2 + subdirs.get(&ino).copied().unwrap_or(0) };
                if i.nlink != want {
                    problems.push(format!("directory {ino}: nlink {} but {want} expected", i.nlink));
                }
                if let Some(&h) = holder.get(&ino) {
                    if i.parent != h {
                        problems.push(format!("directory {ino}: parent {} but named in {h}", i.parent));
                    }
                }
            } else if i.nlink != n {
                problems.push(format!("inode {ino}: nlink {} but {n} names", i.nlink));
            }
            if i.is_symlink() && self.symlink_target(&mut t, ino).is_err() {
                problems.push(format!("symlink {ino} has no target"));
            }
            if !t.object_exists(vol, ObjectId(ino))? {
                problems.push(format!("inode {ino} vanished during the check"));
            }
        }
        Ok(problems)
    }
}
