//! The destroy queue (pool/destroy.rs) as the checker sees it: every entry has its header
//! and all its trees; its blocks not freed yet — the walk of its trees less the first
//! `freed_data` data records — are referenced (each once, by no volume), and add up to
//! its `sectors_left`; its trees' deadlists are owned; the pool's labels carry the
//! feature.

use super::{Checker, Claim};
use crate::format::destroy::{DestroyPhys, DestroyTreePhys};
use crate::format::features::RO_COMPAT_ASYNC_DESTROY;
use crate::pool::destroy::walk_trees;
use std::collections::{BTreeMap, HashSet};

/// An entry as found in the catalog: header (if any) and trees by slot.
#[derive(Default)]
pub(super) struct DestroyEntry(pub(super) Option<DestroyPhys>, pub(super) BTreeMap<u32, DestroyTreePhys>);

impl Checker<'_> {
    /// Claims the queue's blocks; returns their sectors and the deadlists the queue owns.
    pub(super) fn destroy_queue(&mut self, queue: &BTreeMap<u64, DestroyEntry>, ro_compat: u64) -> (u64, HashSet<u64>) {
        let mut sectors = 0;
        let mut deadlists = HashSet::new();
        if !queue.is_empty() && ro_compat & RO_COMPAT_ASYNC_DESTROY == 0 {
            self.err("the catalog holds a destroy queue but the labels lack the async destroy feature".into());
        }
        for (id, DestroyEntry(header, trees)) in queue {
            let ctx = format!("destroy queue entry {id}");
            let Some(h) = header else {
                self.err(format!("{ctx}: trees without a header"));
                continue;
            };
            let slots: Vec<u32> = trees.keys().copied().collect();
            if slots != (1..=h.trees).collect::<Vec<u32>>() {
                self.err(format!("{ctx}: header names {} trees, the catalog holds slots {slots:?}", h.trees));
                continue;
            }
            let trees: Vec<DestroyTreePhys> = trees.values().copied().collect();
            deadlists.extend(trees.iter().map(|t| t.deadlist).filter(|d| *d != 0));
            let (data, meta) = match walk_trees(self.io, &trees, h.after_txg) {
                Ok(w) => w,
                Err(e) => {
                    self.err(format!("{ctx}: cannot walk its trees: {e}"));
                    continue;
                }
            };
            let Some(left) = usize::try_from(h.freed_data).ok().and_then(|n| data.get(n..)) else {
                self.err(format!("{ctx}: {} data records freed, the walk finds only {}", h.freed_data, data.len()));
                continue;
            };
            let mut mine = 0;
            for bp in left.iter().chain(&meta) {
                match self.claim(bp, &ctx) {
                    Claim::New => mine += bp.sectors(),
                    Claim::Shared => {
                        self.err(format!("{ctx}: block at {} is also held by a live volume or snapshot", bp.addr))
                    }
                    Claim::Bad => {}
                }
            }
            if mine != h.sectors_left {
                self.err(format!(
                    "{ctx}: its blocks not freed yet are {mine} sectors, the header says {}",
                    h.sectors_left
                ));
            }
            sectors += mine;
        }
        (sectors, deadlists)
    }
}
