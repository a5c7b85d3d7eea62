//! File handles: what an NFS client holds instead of a path.
//!
//! ```text
//!   0  version     u8     1
//!   1  reserved    3 B    zero
//!   4  export_id   u32    the export the handle was minted for (never reused)
//!   8  pool_guid   u64    \ the volume: a handle of a volume that was deleted and
//!  16  volume_id   u64    / re-created, or of another pool, is STALE
//!  24  ino         u64    inode number (engine object id)
//!  32  generation  u64    the inode's birth time (crtime, ns): an inode number reused after
//!                         a crash rolled the object counter back cannot be reached
//!  40  tag         16 B   keyed BLAKE3 of bytes 0..40 under the daemon's handle key
//! ```
//! (all integers big-endian). 56 bytes, under NFSv3's 64.
//!
//! Stable across restarts: nothing in it depends on the process; the key is stored in the
//! daemon's data directory. Unforgeable: a client that edits the export id, volume or inode
//! of a handle it was given cannot produce the tag, so it cannot reach another export's
//! volume (or a file outside its export) by guessing; such a handle is BADHANDLE.
//! The trade-off: every handle costs a 40-byte BLAKE3 (well under a microsecond).

/// Length of every handle we mint.
pub const HANDLE_BYTES: usize = 56;
const VERSION: u8 = 1;
const TAG_BYTES: usize = 16;

/// The fields of a handle whose tag checked out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandleFields {
    pub export_id: u32,
    pub pool_guid: u64,
    pub volume_id: u64,
    pub ino: u64,
    pub generation: u64,
}

/// Why a handle was refused: not one of ours (BADHANDLE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadHandle;

/// The secret that signs handles (32 bytes, kept in the daemon's data directory).
#[derive(Clone)]
pub struct HandleKey {
    key: [u8; 32],
}

impl HandleKey {
    pub fn new(key: [u8; 32]) -> HandleKey {
        HandleKey { key }
    }

    fn tag(&self, body: &[u8]) -> [u8; TAG_BYTES] {
        let h = blake3::keyed_hash(&self.key, body);
        let mut t = [0u8; TAG_BYTES];
        t.copy_from_slice(&h.as_bytes()[..TAG_BYTES]);
        t
    }

    pub fn mint(&self, f: &HandleFields) -> [u8; HANDLE_BYTES] {
        let mut h = [0u8; HANDLE_BYTES];
        h[0] = VERSION;
        h[4..8].copy_from_slice(&f.export_id.to_be_bytes());
        h[8..16].copy_from_slice(&f.pool_guid.to_be_bytes());
        h[16..24].copy_from_slice(&f.volume_id.to_be_bytes());
        h[24..32].copy_from_slice(&f.ino.to_be_bytes());
        h[32..40].copy_from_slice(&f.generation.to_be_bytes());
        let tag = self.tag(&h[..40]);
        h[40..].copy_from_slice(&tag);
        h
    }

    /// Check a handle a client sent. Constant-time tag comparison is not needed for
    /// unforgeability against guessing (2^128 tries), but costs nothing, so it is used.
    pub fn open(&self, h: &[u8]) -> Result<HandleFields, BadHandle> {
        if h.len() != HANDLE_BYTES || h[0] != VERSION || h[1..4] != [0, 0, 0] {
            return Err(BadHandle);
        }
        let tag = self.tag(&h[..40]);
        let diff = tag.iter().zip(&h[40..]).fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if diff != 0 {
            return Err(BadHandle);
        }
        let u64_at = |i: usize| u64::from_be_bytes(h[i..i + 8].try_into().expect("8 bytes"));
        Ok(HandleFields {
            export_id: u32::from_be_bytes(h[4..8].try_into().expect("4 bytes")),
            pool_guid: u64_at(8),
            volume_id: u64_at(16),
            ino: u64_at(24),
            generation: u64_at(32),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: HandleFields = HandleFields { export_id: 3, pool_guid: 0xabc, volume_id: 2, ino: 77, generation: 123 };

    #[test]
    fn round_trip_and_stable() {
        let k = HandleKey::new([7u8; 32]);
        let h = k.mint(&F);
        assert_eq!(k.open(&h), Ok(F));
        // Same key (a restarted daemon), same handle.
        assert_eq!(HandleKey::new([7u8; 32]).mint(&F), h);
    }

    #[test]
    fn edited_or_foreign_handles_are_refused() {
        let k = HandleKey::new([7u8; 32]);
        let h = k.mint(&F);
        for i in 0..HANDLE_BYTES {
            let mut bad = h;
            bad[i] ^= 1;
            assert_eq!(k.open(&bad), Err(BadHandle), "byte {i} flipped");
        }
        // Another export's id with the old tag.
        let mut other = h;
        other[4..8].copy_from_slice(&4u32.to_be_bytes());
        assert_eq!(k.open(&other), Err(BadHandle));
        // Another daemon's key.
        assert_eq!(HandleKey::new([8u8; 32]).open(&h), Err(BadHandle));
        assert_eq!(k.open(&h[..40]), Err(BadHandle));
        assert_eq!(k.open(&[]), Err(BadHandle));
    }
}
