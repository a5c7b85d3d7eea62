//! Devices: the bottom layer. A [`BlockDevice`] is a flat array of bytes with explicit
//! durability: a write is durable only after a `flush` that follows it returns Ok.
//!
//! The engine issues only unit-aligned, unit-sized I/O (4 KiB multiples), which is what
//! O_DIRECT needs and what a simulated disk tears at.

mod aligned;
mod file;
mod probe;

pub use aligned::AlignedBuf;
pub use file::{FileDevice, FileDeviceOptions};
pub use probe::{
    probe_foreign_data, probe_reader, probe_window, ForeignData, Signature, StrataLabel, PROBE_WINDOW_BYTES,
};

use std::io;

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
}
