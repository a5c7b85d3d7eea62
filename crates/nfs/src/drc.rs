//! The duplicate-request cache (knfsd's reply cache, RFC 1813 §4.3 "retransmissions").
//!
//! A client that loses its connection resends the calls it had not seen answered, with
//! the same xid. For an idempotent call that is harmless; a non-idempotent one that had in
//! fact been done — REMOVE, RENAME, CREATE in exclusive mode, LINK, MKDIR, SETATTR with a
//! guard — would now fail (NOENT, EXIST, NOT_SYNC) although it succeeded, and the
//! application would see the error. So the replies of those procedures are kept, by
//! (client address, xid, procedure, digest of the arguments), and a retransmission gets
//! the very reply the first call got. One that arrives while the first is still running
//! gets nothing: the client resends again later and then finds the reply.
//!
//! Bounded: at most `ENTRIES_MAX` entries and `BYTES_MAX` bytes of replies, oldest
//! evicted first — a retransmission comes within seconds of the connection's loss. WRITE
//! and COMMIT are not cached (idempotent, and the bulk of the traffic), nor READ-side
//! procedures. In memory only: a daemon restart forgets it, as knfsd's does.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

const ENTRIES_MAX: usize = 8192;
const BYTES_MAX: usize = 16 << 20;

/// NFSv3 procedures whose replies are kept: SETATTR, CREATE, MKDIR, SYMLINK, MKNOD,
/// REMOVE, RMDIR, RENAME, LINK.
pub(crate) fn cached_procedure(prog: u32, vers: u32, proc_: u32) -> bool {
    prog == crate::server::PROG_NFS && vers == 3 && matches!(proc_, 2 | 8..=15)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    peer: IpAddr,
    xid: u32,
    proc_: u32,
    args: u64,
}

impl Key {
    pub(crate) fn new(peer: IpAddr, xid: u32, proc_: u32, args: &[u8]) -> Key {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        args.hash(&mut h);
        Key { peer, xid, proc_, args: h.finish() }
    }
}

enum Entry {
    Running,
    Done(Arc<Vec<u8>>),
}

/// What to do with a call.
pub(crate) enum Seen {
    /// First time: run it, then `finish`.
    New,
    /// The same call is running now: drop this copy.
    Running,
    /// Done before: send this reply again.
    Replay(Arc<Vec<u8>>),
}

#[derive(Default)]
pub(crate) struct ReplyCache {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Key, Entry>,
    order: VecDeque<Key>,
    bytes: usize,
    replays: u64,
}

impl ReplyCache {
    pub(crate) fn begin(&self, key: Key) -> Seen {
        let mut c = self.inner.lock().expect("reply cache");
        match c.entries.get(&key) {
            Some(Entry::Running) => return Seen::Running,
            Some(Entry::Done(r)) => {
                let r = r.clone();
                c.replays += 1;
                return Seen::Replay(r);
            }
            None => {}
        }
        c.entries.insert(key, Entry::Running);
        c.order.push_back(key);
        c.evict();
        Seen::New
    }

    pub(crate) fn finish(&self, key: Key, reply: &[u8]) {
        let mut c = self.inner.lock().expect("reply cache");
        if let Some(e) = c.entries.get_mut(&key) {
            *e = Entry::Done(Arc::new(reply.to_vec()));
            c.bytes += reply.len();
            c.evict();
        }
    }

    /// The call ran into a fault and has no reply to keep: a retransmission runs it again.
    pub(crate) fn abandon(&self, key: Key) {
        let mut c = self.inner.lock().expect("reply cache");
        if matches!(c.entries.get(&key), Some(Entry::Running)) {
            c.entries.remove(&key);
        }
    }

    /// Retransmissions answered from the cache so far.
    #[cfg(test)]
    pub(crate) fn replays(&self) -> u64 {
        self.inner.lock().expect("reply cache").replays
    }
}

impl Inner {
    fn evict(&mut self) {
        while self.order.len() > ENTRIES_MAX || self.bytes > BYTES_MAX {
            let Some(k) = self.order.pop_front() else { break };
            if let Some(Entry::Done(r)) = self.entries.remove(&k) {
                self.bytes -= r.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(xid: u32) -> Key {
        Key::new("10.0.0.1".parse().unwrap(), xid, 12, b"args")
    }

    #[test]
    fn a_retransmission_gets_the_first_reply_and_a_running_one_nothing() {
        let c = ReplyCache::default();
        assert!(matches!(c.begin(key(1)), Seen::New));
        assert!(matches!(c.begin(key(1)), Seen::Running));
        c.finish(key(1), b"reply");
        assert!(matches!(c.begin(key(1)), Seen::Replay(r) if r.as_slice() == b"reply"));
        assert_eq!(c.replays(), 1);
        // Another xid, another client or other arguments: a new call.
        assert!(matches!(c.begin(key(2)), Seen::New));
        assert!(matches!(c.begin(Key::new("10.0.0.2".parse().unwrap(), 1, 12, b"args")), Seen::New));
        assert!(matches!(c.begin(Key::new("10.0.0.1".parse().unwrap(), 1, 12, b"other")), Seen::New));
    }

    #[test]
    fn it_stays_bounded() {
        let c = ReplyCache::default();
        for xid in 0..(ENTRIES_MAX as u32 + 100) {
            assert!(matches!(c.begin(key(xid)), Seen::New));
            c.finish(key(xid), &[0u8; 100]);
        }
        let inner = c.inner.lock().unwrap();
        assert_eq!(inner.entries.len(), ENTRIES_MAX);
        assert_eq!(inner.bytes, ENTRIES_MAX * 100);
        drop(inner);
        assert!(matches!(c.begin(key(0)), Seen::New), "the oldest went first");
    }
}
