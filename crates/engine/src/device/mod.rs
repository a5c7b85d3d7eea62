//! Devices: the bottom layer. A [`BlockDevice`] is a flat array of bytes with explicit
//! durability: a write is durable only after a `flush` that follows it returns Ok.
//!
//! The engine issues only unit-aligned, unit-sized I/O (4 KiB multiples), which is what
//! O_DIRECT needs and what a simulated disk tears at.

mod aio;
mod aligned;
mod file;
pub mod groups;
pub mod mirror;
mod probe;
mod status;

pub use aligned::AlignedBuf;
pub use file::{FileDevice, FileDeviceOptions};
pub use groups::GroupedDevice;
pub use mirror::{read_member_identity, MemberIdentity, MirrorDevice, RebuildStatus, Rows, PARITY2_MEMBERS};
pub use probe::{
    probe_foreign_data, probe_reader, probe_window, ForeignData, Signature, StrataLabel, PROBE_WINDOW_BYTES,
};
pub use status::{MemberState, MemberStatus, SetHealth, SetStatus};

use std::io;
use std::ops::Range;

pub trait BlockDevice: Send + Sync {
    /// Usable bytes.
    fn size_bytes(&self) -> u64;
    /// Read exactly `buf.len()` bytes at `offset`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Write all of `buf` at `offset`. Not durable until a later `flush` returns Ok.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Make every write that returned before this call durable.
    fn flush(&self) -> io::Result<()>;
    /// Write `buf` at `offset` and return only once *it* is durable (not necessarily
    /// earlier writes): what the intent log needs for a self-contained block. The default
    /// writes then flushes; a file device uses one `pwritev2(RWF_DSYNC)` (FUA where the
    /// device has it) instead of a write and a full cache flush.
    fn write_durable(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_at(buf, offset)?;
        self.flush()
    }
    /// A human-readable name for messages ("/var/lib/strata/pool.img").
    fn describe(&self) -> String;

    /// The descriptor of a device opened for direct I/O (O_DIRECT), on which a set may
    /// submit its members' writes and flushes together from one thread (aio.rs) instead
    /// of calling `write_at`, `write_durable` and `flush`. None (the default): only
    /// through those calls — every device with behaviour of its own (simulated disks,
    /// sets, fault injection) keeps it.
    fn direct_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }

    /// Read `buf.len()` bytes at `offset` and check them with `verify` (a checksum the
    /// caller knows). Returns whether they verified; `buf` holds what was read either way.
    /// A device with redundancy (mirror.rs) tries its other copies until one verifies,
    /// returns that one, and rewrites the `heal` byte range of `buf` on the copies that
    /// failed (self-healing reads).
    fn read_verified(
        &self,
        buf: &mut [u8],
        offset: u64,
        heal: Range<usize>,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> io::Result<bool> {
        let _ = heal;
        self.read_at(buf, offset)?;
        Ok(verify(buf))
    }

    /// Verify every copy the device holds of `buf.len()` bytes at `offset` (a scrub):
    /// copies that fail `verify` are rewritten (their `heal` range) from one that passes.
    /// Returns whether a copy verified; `buf` holds it. A plain device has one copy.
    fn scrub_read(
        &self,
        buf: &mut [u8],
        offset: u64,
        heal: Range<usize>,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> io::Result<bool> {
        self.read_verified(buf, offset, heal, verify)
    }

    /// `scrub_read` of blocks that lie one after another in the `buf.len()` bytes at
    /// `offset`: `blocks[k]` is (its span: the aligned range read for it; the block's bytes,
    /// within the span), and `verify(k, bytes)` checks block k. A device with copies reads
    /// the run from each copy once (one request per record and copy held a scrub to
    /// ~200 MB/s on a mirror of loop devices). Per block: whether a copy verified, `buf`
    /// holding it (else the first copy read). By default, block by block.
    fn scrub_read_run(
        &self,
        buf: &mut [u8],
        offset: u64,
        blocks: &[(Range<usize>, Range<usize>)],
        verify: &(dyn Fn(usize, &[u8]) -> bool + Sync),
    ) -> Vec<io::Result<bool>> {
        scrub_blocks_one_by_one(self, buf, offset, blocks, verify)
    }

    /// Read `buf.len()` bytes at `offset`, choosing among the device's copies the one
    /// `score` ranks highest (`None`: unusable); returns that score. For self-checked
    /// structures of which a newer valid version is better than an older valid one
    /// (uberblock slots, space map slots, intent-log blocks after a crash that reached
    /// only some copies). A device with redundancy rewrites the copies that scored lower.
    fn read_best(&self, buf: &mut [u8], offset: u64, score: &dyn Fn(&[u8]) -> Option<u64>) -> io::Result<Option<u64>> {
        self.read_at(buf, offset)?;
        Ok(score(buf))
    }

    /// The pool's txg being written, for the set's record of when a member fell out of
    /// sync. Plain devices ignore it.
    fn note_txg(&self, txg: u64) {
        let _ = txg;
    }

    /// A parity2 set's rows: (logical offset of the first row, data units per row). The
    /// allocator keeps blocks that must survive a crash out of rows holding others
    /// (alloc/rows.rs). `None` for every other device.
    fn rows(&self) -> Option<(u64, u64)> {
        None
    }

    /// A device set's layout, health and members; `None` for a plain device.
    fn set_status(&self) -> Option<SetStatus> {
        None
    }

    /// The mirror this device is, for its administration (replace, online, offline,
    /// rebuild).
    fn as_mirror(&self) -> Option<&MirrorDevice> {
        None
    }

    /// The device groups this device is (a pool's device that can add groups).
    fn as_groups(&self) -> Option<&GroupedDevice> {
        None
    }
}

/// `BlockDevice::scrub_read_run` one block at a time (`scrub_read` of each span).
pub(crate) fn scrub_blocks_one_by_one<D: BlockDevice + ?Sized>(
    dev: &D,
    buf: &mut [u8],
    offset: u64,
    blocks: &[(Range<usize>, Range<usize>)],
    verify: &(dyn Fn(usize, &[u8]) -> bool + Sync),
) -> Vec<io::Result<bool>> {
    blocks
        .iter()
        .enumerate()
        .map(|(k, (span, block))| {
            let heal = block.start - span.start..block.end - span.start;
            let inner = heal.clone();
            let check = move |s: &[u8]| s.get(inner.clone()).is_some_and(|b| verify(k, b));
            match buf.get_mut(span.clone()) {
                Some(sub) => dev.scrub_read(sub, offset + span.start as u64, heal, &check),
                None => Err(io::Error::new(io::ErrorKind::InvalidInput, "a block's span lies outside the run")),
            }
        })
        .collect()
}
