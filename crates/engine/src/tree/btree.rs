//! A copy-on-write B+tree with byte-string keys and values.
//!
//! Nodes are either on disk (`Link::Disk`, reached through a verified block pointer and a
//! shared decode cache) or in memory (`Link::Mem`) because this txg changed them. Reads
//! walk either kind without copying; a change turns the path it touches into memory nodes.
//! `write` stores every memory node bottom-up and turns the tree back into one `Disk` root.
//!
//! Invariants (checked by `strata check` on disk and by the property tests against a
//! `BTreeMap`): keys strictly increase within a node; child i of an internal node holds
//! keys in [key_i, key_{i+1}) (key_0 inherited from the parent); all leaves are at level 0
//! and every child is exactly one level below its parent; no node encodes to more than
//! NODE_MAX_BYTES. Nodes may be underfull: a node merges with a sibling when it drops
//! below a quarter and the two fit in one node, which bounds waste without the churn of
//! strict B+tree minimums.

use crate::alloc::Allocator;
use crate::error::{Corruption, Error, Result};
use crate::format::node::{
    encode_internal, encode_leaf, internal_entry_bytes, leaf_entry_bytes, BtreeNodePhys, KEY_MAX, NODE_HEADER,
    NODE_MAX_BYTES, VALUE_MAX,
};
use crate::format::{BlockKind, BlockPtr};
use crate::pipeline::BlockIo;

pub enum Link {
    Disk(BlockPtr),
    Mem(Box<MemNode>),
}

pub struct MemNode {
    level: u8,
    leaf: Vec<(Vec<u8>, Vec<u8>)>,
    inner: Vec<(Vec<u8>, Link)>,
    bytes: usize,
    /// The block this node was loaded from; released when the node is rewritten or removed.
    orig: Option<BlockPtr>,
}

impl MemNode {
    fn empty_leaf() -> MemNode {
        MemNode { level: 0, leaf: Vec::new(), inner: Vec::new(), bytes: NODE_HEADER, orig: None }
    }

    fn from_phys(phys: &BtreeNodePhys, bp: BlockPtr) -> MemNode {
        match phys {
            BtreeNodePhys::Leaf { entries } => MemNode {
                level: 0,
                leaf: entries.clone(),
                inner: Vec::new(),
                bytes: phys.encoded_bytes(),
                orig: Some(bp),
            },
            BtreeNodePhys::Internal { level, entries } => MemNode {
                level: *level,
                leaf: Vec::new(),
                inner: entries.iter().map(|(k, c)| (k.clone(), Link::Disk(*c))).collect(),
                bytes: phys.encoded_bytes(),
                orig: Some(bp),
            },
        }
    }

    fn len(&self) -> usize {
        if self.level == 0 {
            self.leaf.len()
        } else {
            self.inner.len()
        }
    }
}

/// Index of the child of an internal node whose range holds `key`.
fn child_index<T>(entries: &[(Vec<u8>, T)], key: &[u8]) -> usize {
    entries.get(1..).unwrap_or_default().partition_point(|(k, _)| k.as_slice() <= key)
}

/// The child of an internal node whose range holds `key`. Every internal node has children
/// (decoding refuses one without; an emptied one is removed by its parent at once), so a
/// miss is damage, reported.
fn child_for<'a, T>(entries: &'a [(Vec<u8>, T)], key: &[u8], orig: Option<BlockPtr>) -> Result<&'a T> {
    entries.get(child_index(entries, key)).map(|(_, c)| c).ok_or_else(|| childless(orig))
}

fn child_for_mut<'a, T>(entries: &'a mut [(Vec<u8>, T)], key: &[u8], orig: Option<BlockPtr>) -> Result<&'a mut T> {
    let i = child_index(entries, key);
    entries.get_mut(i).map(|(_, c)| c).ok_or_else(|| childless(orig))
}

fn childless(orig: Option<BlockPtr>) -> Error {
    Corruption::new("btree node", orig.map(|bp| bp.addr), "internal node without children").into()
}

/// The level a child of a node at `level` must have; a mismatch means a damaged pointer
/// (and is what bounds every descent on corrupt input).
fn expect_child_level(parent: u8, child: &BtreeNodePhys, bp: &BlockPtr) -> Result<()> {
    if parent == 0 || child.level() != parent - 1 {
        return Err(Corruption::new(
            "btree node",
            Some(bp.addr),
            format!("level {} under a node of level {}", child.level(), parent),
        )
        .into());
    }
    Ok(())
}

#[derive(Default)]
pub struct BTree {
    root: Option<Link>,
    released: Vec<BlockPtr>,
}

impl BTree {
    pub fn new() -> BTree {
        BTree::default()
    }

    /// The tree whose root is `root` (a hole for an empty tree).
    pub fn open(root: BlockPtr) -> BTree {
        BTree { root: (!root.is_hole()).then_some(Link::Disk(root)), released: Vec::new() }
    }

    /// True when the tree has changes not yet written.
    pub fn is_dirty(&self) -> bool {
        matches!(self.root, Some(Link::Mem(_))) || !self.released.is_empty()
    }

    /// Blocks replaced or removed since the last call: the caller frees (or keeps) them.
    pub fn take_released(&mut self) -> Vec<BlockPtr> {
        std::mem::take(&mut self.released)
    }

    pub fn get(&self, io: &BlockIo, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut link = match &self.root {
            None => return Ok(None),
            Some(l) => l,
        };
        loop {
            match link {
                Link::Mem(n) if n.level == 0 => return Ok(leaf_get(&n.leaf, key)),
                Link::Mem(n) => link = child_for(&n.inner, key, n.orig)?,
                Link::Disk(bp) => return get_phys(io, *bp, None, key),
            }
        }
    }

    /// Insert or replace; returns the previous value.
    pub fn insert(&mut self, io: &BlockIo, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        if key.len() > KEY_MAX || value.len() > VALUE_MAX {
            return Err(Error::invalid(format!(
                "tree entry of {}-byte key and {}-byte value exceeds the limits ({KEY_MAX}, {VALUE_MAX})",
                key.len(),
                value.len()
            )));
        }
        let root = self.root.get_or_insert_with(|| Link::Mem(Box::new(MemNode::empty_leaf())));
        let (old, split) = insert_rec(io, root, key, value)?;
        if let Some((sep, right)) = split {
            let Some(left) = self.root.take() else { unreachable!("the root was inserted into") };
            let level = match &left {
                Link::Mem(n) => n.level + 1,
                Link::Disk(_) => unreachable!("a node that split is in memory"),
            };
            let bytes = NODE_HEADER + internal_entry_bytes(&[]) + internal_entry_bytes(&sep);
            self.root = Some(Link::Mem(Box::new(MemNode {
                level,
                leaf: Vec::new(),
                inner: vec![(Vec::new(), left), (sep, right)],
                bytes,
                orig: None,
            })));
        }
        Ok(old)
    }

    /// Remove `key`; returns its value. A miss changes nothing (no node is dirtied).
    pub fn remove(&mut self, io: &BlockIo, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if self.get(io, key)?.is_none() {
            return Ok(None);
        }
        let Some(root) = self.root.as_mut() else { unreachable!("key found, so the tree has a root") };
        let old = remove_rec(io, root, key, &mut self.released)?;
        // Shrink the root: an internal root with one child is replaced by that child; an
        // empty leaf root means an empty tree.
        while let Some(Link::Mem(n)) = &mut self.root {
            if n.len() == 0 {
                self.released.extend(n.orig);
                self.root = None;
            } else if let (true, [_]) = (n.level > 0, n.inner.as_slice()) {
                let Some((_, child)) = n.inner.pop() else { unreachable!("one child") };
                self.released.extend(n.orig);
                self.root = Some(child);
            } else {
                break;
            }
        }
        Ok(old)
    }

    /// Up to `limit` entries with `start <= key < end` (no end: to the last key), in order.
    pub fn range(
        &self,
        io: &BlockIo,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        if let Some(root) = &self.root {
            range_link(io, root, None, start, end, limit, &mut out)?;
        }
        Ok(out)
    }

    /// Write every changed node as a new block born in `txg`; returns the new root (a
    /// hole for an empty tree). Replaced blocks go to `take_released`.
    pub fn write(&mut self, io: &BlockIo, alloc: &mut Allocator, txg: u64) -> Result<BlockPtr> {
        match &mut self.root {
            None => Ok(BlockPtr::HOLE),
            Some(link) => write_rec(io, alloc, link, txg, &mut self.released),
        }
    }

    /// The root as last written (a hole if empty). Panics if the tree has unwritten changes.
    pub fn root_ptr(&self) -> BlockPtr {
        match &self.root {
            None => BlockPtr::HOLE,
            Some(Link::Disk(bp)) => *bp,
            Some(Link::Mem(_)) => panic!("root_ptr of a tree with unwritten changes"),
        }
    }
}

fn get_phys(io: &BlockIo, mut bp: BlockPtr, mut parent_level: Option<u8>, key: &[u8]) -> Result<Option<Vec<u8>>> {
    loop {
        let node = io.read_node(&bp)?;
        if let Some(p) = parent_level {
            expect_child_level(p, &node, &bp)?;
        }
        match &*node {
            BtreeNodePhys::Leaf { entries } => return Ok(leaf_get(entries, key)),
            BtreeNodePhys::Internal { level, entries } => {
                parent_level = Some(*level);
                bp = *child_for(entries, key, Some(bp))?;
            }
        }
    }
}

/// The value of `key` in a leaf's sorted entries.
fn leaf_get(entries: &[(Vec<u8>, Vec<u8>)], key: &[u8]) -> Option<Vec<u8>> {
    let i = entries.binary_search_by(|(k, _)| k.as_slice().cmp(key)).ok()?;
    entries.get(i).map(|(_, v)| v.clone())
}

fn make_mut<'a>(io: &BlockIo, link: &'a mut Link, parent_level: Option<u8>) -> Result<&'a mut MemNode> {
    if let Link::Disk(bp) = *link {
        let phys = io.read_node(&bp)?;
        if let Some(p) = parent_level {
            expect_child_level(p, &phys, &bp)?;
        }
        *link = Link::Mem(Box::new(MemNode::from_phys(&phys, bp)));
    }
    match link {
        Link::Mem(n) => Ok(n),
        Link::Disk(_) => unreachable!("just loaded"),
    }
}

type Split = Option<(Vec<u8>, Link)>;

fn insert_rec(io: &BlockIo, link: &mut Link, key: &[u8], value: &[u8]) -> Result<(Option<Vec<u8>>, Split)> {
    // The root has no parent level to check against; children are checked on load.
    insert_at(io, link, None, key, value)
}

fn insert_at(
    io: &BlockIo,
    link: &mut Link,
    parent: Option<u8>,
    key: &[u8],
    value: &[u8],
) -> Result<(Option<Vec<u8>>, Split)> {
    let node = make_mut(io, link, parent)?;
    let old = if node.level == 0 {
        match node.leaf.binary_search_by(|(k, _)| k.as_slice().cmp(key)) {
            Ok(i) => {
                let Some((_, v)) = node.leaf.get_mut(i) else { unreachable!("found at {i}") };
                let old = std::mem::replace(v, value.to_vec());
                node.bytes = node.bytes - old.len() + value.len();
                Some(old)
            }
            Err(i) => {
                node.leaf.insert(i, (key.to_vec(), value.to_vec()));
                node.bytes += leaf_entry_bytes(key, value);
                None
            }
        }
    } else {
        let idx = child_index(&node.inner, key);
        let level = node.level;
        let child = child_for_mut(&mut node.inner, key, node.orig)?;
        let (old, split) = insert_at(io, child, Some(level), key, value)?;
        if let Some((sep, right)) = split {
            node.bytes += internal_entry_bytes(&sep);
            node.inner.insert(idx + 1, (sep, right));
        }
        old
    };
    let split = if node.bytes > NODE_MAX_BYTES { Some(split_node(node)) } else { None };
    Ok((old, split))
}

/// Split an oversized node in two of about equal encoded size; returns the right half and
/// its lower-bound key.
fn split_node(node: &mut MemNode) -> (Vec<u8>, Link) {
    let half = (node.bytes - NODE_HEADER) / 2;
    let mut acc = 0;
    let mut right = MemNode { level: node.level, leaf: Vec::new(), inner: Vec::new(), bytes: NODE_HEADER, orig: None };
    if node.level == 0 {
        let mut at = node.leaf.len() - 1;
        for (i, (k, v)) in node.leaf.iter().enumerate() {
            acc += leaf_entry_bytes(k, v);
            if acc > half {
                at = i.max(1);
                break;
            }
        }
        right.leaf = node.leaf.split_off(at);
        right.bytes += right.leaf.iter().map(|(k, v)| leaf_entry_bytes(k, v)).sum::<usize>();
        node.bytes -= right.bytes - NODE_HEADER;
        let Some((sep, _)) = right.leaf.first() else { unreachable!("a split leaf keeps entries right") };
        (sep.clone(), Link::Mem(Box::new(right)))
    } else {
        let mut at = node.inner.len() - 1;
        for (i, (k, _)) in node.inner.iter().enumerate() {
            acc += internal_entry_bytes(k);
            if acc > half {
                at = i.max(1);
                break;
            }
        }
        right.inner = node.inner.split_off(at);
        right.bytes += right.inner.iter().map(|(k, _)| internal_entry_bytes(k)).sum::<usize>();
        node.bytes -= right.bytes - NODE_HEADER;
        let Some((sep, _)) = right.inner.first() else { unreachable!("a split node keeps children right") };
        (sep.clone(), Link::Mem(Box::new(right)))
    }
}

fn link_bytes(io: &BlockIo, link: &Link) -> Result<usize> {
    Ok(match link {
        Link::Mem(n) => n.bytes,
        Link::Disk(bp) => io.read_node(bp)?.encoded_bytes(),
    })
}

fn remove_rec(io: &BlockIo, link: &mut Link, key: &[u8], released: &mut Vec<BlockPtr>) -> Result<Option<Vec<u8>>> {
    remove_at(io, link, None, key, released)
}

fn remove_at(
    io: &BlockIo,
    link: &mut Link,
    parent: Option<u8>,
    key: &[u8],
    released: &mut Vec<BlockPtr>,
) -> Result<Option<Vec<u8>>> {
    let node = make_mut(io, link, parent)?;
    if node.level == 0 {
        return Ok(match node.leaf.binary_search_by(|(k, _)| k.as_slice().cmp(key)) {
            Ok(i) => {
                let (k, v) = node.leaf.remove(i);
                node.bytes -= leaf_entry_bytes(&k, &v);
                Some(v)
            }
            Err(_) => None,
        });
    }
    let level = node.level;
    let idx = child_index(&node.inner, key);
    let old = remove_at(io, child_for_mut(&mut node.inner, key, node.orig)?, Some(level), key, released)?;
    let Some((_, Link::Mem(child))) = node.inner.get(idx) else { unreachable!("just changed") };
    if child.len() == 0 {
        let (k, gone) = node.inner.remove(idx);
        node.bytes -= internal_entry_bytes(&k);
        if let Link::Mem(g) = gone {
            released.extend(g.orig);
        }
        // If it was child 0, the new first child inherits this node's lower bound; its
        // stored key stays (entry 0's key is never consulted).
        return Ok(old);
    }
    if child.bytes < NODE_MAX_BYTES / 4 && node.inner.len() > 1 {
        let (l, r) = if idx + 1 < node.inner.len() { (idx, idx + 1) } else { (idx - 1, idx) };
        let (Some((_, left)), Some((sep, right))) = (node.inner.get(l), node.inner.get(r)) else {
            unreachable!("two children: {l} and {r}")
        };
        let (lb, rb, sep) = (link_bytes(io, left)?, link_bytes(io, right)?, sep.clone());
        // An internal right node's first key becomes the parent's separator when merged.
        let extra = if level > 1 { sep.len() } else { 0 };
        if lb + rb - NODE_HEADER + extra <= NODE_MAX_BYTES {
            let (sep_key, right_link) = node.inner.remove(r);
            node.bytes -= internal_entry_bytes(&sep_key);
            let mut right_link = right_link;
            let right = make_mut(io, &mut right_link, Some(level))?;
            let right_orig = right.orig.take();
            released.extend(right_orig);
            let right_leaf = std::mem::take(&mut right.leaf);
            let mut right_inner = std::mem::take(&mut right.inner);
            let Some((_, left)) = node.inner.get_mut(l) else { unreachable!("left of {r}") };
            let left = make_mut(io, left, Some(level))?;
            if left.level == 0 {
                left.bytes += right_leaf.iter().map(|(k, v)| leaf_entry_bytes(k, v)).sum::<usize>();
                left.leaf.extend(right_leaf);
            } else {
                // Decoding refuses internal nodes without children, so the right one has some.
                let Some((first, _)) = right_inner.first_mut() else { return Err(childless(right_orig)) };
                *first = sep_key;
                left.bytes += right_inner.iter().map(|(k, _)| internal_entry_bytes(k)).sum::<usize>();
                left.inner.extend(right_inner);
            }
            debug_assert!(left.bytes <= NODE_MAX_BYTES);
        }
    }
    Ok(old)
}

fn write_rec(
    io: &BlockIo,
    alloc: &mut Allocator,
    link: &mut Link,
    txg: u64,
    released: &mut Vec<BlockPtr>,
) -> Result<BlockPtr> {
    let node = match link {
        Link::Disk(bp) => return Ok(*bp),
        Link::Mem(n) => n,
    };
    // Keys out of order cannot come from this code, only from damage read earlier (a
    // separator that misrouted inserts, siblings that overlap): refuse to write them, so the
    // commit fails instead of storing a node nothing would verify again until it is read.
    let ordered = match node.level {
        0 => node.leaf.is_sorted_by(|a, b| a.0 < b.0),
        _ => node.inner.is_sorted_by(|a, b| a.0 < b.0),
    };
    if !ordered {
        return Err(Corruption::new(
            "btree node",
            node.orig.map(|bp| bp.addr),
            format!("a level {} node to be written has keys out of order (damage met earlier)", node.level),
        )
        .into());
    }
    let payload = if node.level == 0 {
        encode_leaf(node.leaf.len(), node.leaf.iter().map(|(k, v)| (k.as_slice(), v.as_slice())))
    } else {
        let mut children = Vec::with_capacity(node.inner.len());
        for (_, child) in node.inner.iter_mut() {
            let bp = write_rec(io, alloc, child, txg, released)?;
            *child = Link::Disk(bp);
            children.push(bp);
        }
        encode_internal(node.level, node.inner.len(), node.inner.iter().map(|(k, _)| k.as_slice()).zip(children))
    };
    debug_assert_eq!(payload.len(), node.bytes, "tracked node size matches its encoding");
    #[cfg(feature = "verify")]
    #[expect(clippy::expect_used, reason = "a pair assertion on bytes just encoded here, not read from disk")]
    {
        // Pair assertion: what goes to disk decodes back to the same node, in order.
        let back = BtreeNodePhys::decode(&payload, None).expect("an encoded node decodes");
        assert_eq!(back.level(), node.level);
        assert_eq!(back.encoded_bytes(), node.bytes);
    }
    let bp = io.write_block(alloc, BlockKind::BtreeNode, &payload, txg)?;
    io.cache_node(&bp, &payload);
    released.extend(node.orig);
    *link = Link::Disk(bp);
    Ok(bp)
}

fn in_range(key: &[u8], start: &[u8], end: Option<&[u8]>) -> bool {
    key >= start && end.is_none_or(|e| key < e)
}

fn range_link(
    io: &BlockIo,
    link: &Link,
    parent: Option<u8>,
    start: &[u8],
    end: Option<&[u8]>,
    limit: usize,
    out: &mut Vec<(Vec<u8>, Vec<u8>)>,
) -> Result<()> {
    match link {
        Link::Mem(n) if n.level == 0 => {
            let from = n.leaf.partition_point(|(k, _)| k.as_slice() < start);
            for (k, v) in n.leaf.get(from..).unwrap_or_default() {
                if out.len() >= limit || !in_range(k, start, end) {
                    break;
                }
                out.push((k.clone(), v.clone()));
            }
        }
        Link::Mem(n) => {
            for (i, (k, child)) in n.inner.iter().enumerate().skip(child_index(&n.inner, start)) {
                if out.len() >= limit || (i > 0 && end.is_some_and(|e| k.as_slice() >= e)) {
                    break;
                }
                range_link(io, child, Some(n.level), start, end, limit, out)?;
            }
        }
        Link::Disk(bp) => {
            let node = io.read_node(bp)?;
            if let Some(p) = parent {
                expect_child_level(p, &node, bp)?;
            }
            match &*node {
                BtreeNodePhys::Leaf { entries } => {
                    let from = entries.partition_point(|(k, _)| k.as_slice() < start);
                    for (k, v) in entries.get(from..).unwrap_or_default() {
                        if out.len() >= limit || !in_range(k, start, end) {
                            break;
                        }
                        out.push((k.clone(), v.clone()));
                    }
                }
                BtreeNodePhys::Internal { level, entries } => {
                    for (i, (k, child)) in entries.iter().enumerate().skip(child_index(entries, start)) {
                        if out.len() >= limit || (i > 0 && end.is_some_and(|e| k.as_slice() >= e)) {
                            break;
                        }
                        range_link(io, &Link::Disk(*child), Some(*level), start, end, limit, out)?;
                    }
                }
            }
        }
    }
    Ok(())
}
