//! The simulator's device: a [`SimDisk`] (power loss, crash images) seen through a wrapper
//! that makes every I/O a scheduling point, injects the run's I/O errors, and keeps a
//! fingerprint of the I/O sequence (two runs of one seed must produce the same).

use std::io;
use std::sync::Arc;
use strata_engine::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use strata_engine::sync::thread::yield_now;
use strata_engine::BlockDevice;
use strata_testkit::SimDisk;

/// The source of an I/O error the simulator injects (not a power failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InjectedFault;

impl std::fmt::Display for InjectedFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("I/O error injected by the simulator")
    }
}

impl std::error::Error for InjectedFault {}

/// Which I/O of a run fails with an [`InjectedFault`], counted from [`SimDevice::arm`] (the
/// end of the run's setup: a fault while the pool is created is not what a run tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// The n-th write fails.
    Write(u64),
    /// The n-th flush fails (and guarantees nothing).
    Flush(u64),
    /// The n-th read fails.
    Read(u64),
}

pub struct SimDevice {
    pub disk: Arc<SimDisk>,
    fault: Fault,
    writes: AtomicU64,
    flushes: AtomicU64,
    reads: AtomicU64,
    injected: AtomicU64,
    /// Faults are injected only once armed.
    armed: AtomicBool,
    /// FNV-1a over (kind, offset, length) of every I/O, in order.
    fingerprint: AtomicU64,
}

impl SimDevice {
    pub fn new(disk: Arc<SimDisk>, fault: Fault) -> SimDevice {
        SimDevice {
            disk,
            fault,
            writes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            injected: AtomicU64::new(0),
            armed: AtomicBool::new(false),
            fingerprint: AtomicU64::new(0xcbf2_9ce4_8422_2325),
        }
    }

    /// Count I/Os from now on for the run's fault, and inject it when its turn comes.
    pub fn arm(&self) {
        for c in [&self.writes, &self.flushes, &self.reads] {
            c.store(0, Ordering::SeqCst);
        }
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Errors injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    pub fn fingerprint(&self) -> u64 {
        self.fingerprint.load(Ordering::SeqCst)
    }

    /// A scheduling point, then the fingerprint and the fault of this I/O.
    fn before(&self, kind: u8, offset: u64, len: usize, counter: &AtomicU64, fails: bool) -> io::Result<()> {
        yield_now();
        let mut h = self.fingerprint.load(Ordering::SeqCst);
        for b in [kind as u64, offset, len as u64] {
            h = (h ^ b).wrapping_mul(0x100_0000_01b3);
        }
        self.fingerprint.store(h, Ordering::SeqCst);
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        let nth = match (self.fault, kind) {
            (Fault::Write(k), b'w') | (Fault::Flush(k), b'f') | (Fault::Read(k), b'r') => Some(k),
            _ => None,
        };
        if fails && nth == Some(n) && self.armed.load(Ordering::SeqCst) && !self.disk.has_crashed() {
            self.injected.fetch_add(1, Ordering::SeqCst);
            return Err(io::Error::other(InjectedFault));
        }
        Ok(())
    }
}

impl BlockDevice for SimDevice {
    fn size_bytes(&self) -> u64 {
        self.disk.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.before(b'r', offset, buf.len(), &self.reads, true)?;
        self.disk.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.before(b'w', offset, buf.len(), &self.writes, true)?;
        self.disk.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.before(b'f', 0, 0, &self.flushes, true)?;
        self.disk.flush()
    }
    fn describe(&self) -> String {
        "simulated disk (scheduled)".into()
    }
}
