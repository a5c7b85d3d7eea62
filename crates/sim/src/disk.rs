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
    /// The n-th write makes the device disappear: it and every later I/O fail with ENODEV
    /// (a pulled disk; only device-set members get it).
    Gone(u64),
    /// Writes n to n + k - 1 each land with one bit flipped, durably (silent corruption of
    /// what was just written: data, log or metadata; only device-set members get it).
    Rot(u64, u64),
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

    /// The fault this device was given.
    pub fn fault(&self) -> Fault {
        self.fault
    }

    /// Faults injected so far (errors, the disappearance, flipped bits).
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
        if fails && nth == Some(n) && self.armed() {
            self.injected.fetch_add(1, Ordering::SeqCst);
            return Err(io::Error::other(InjectedFault));
        }
        if let (Fault::Gone(k), b'w') = (self.fault, kind) {
            if n == k && self.armed() {
                self.injected.fetch_add(1, Ordering::SeqCst);
                self.disk.set_gone(true);
            }
        }
        Ok(())
    }

    /// Faults count from `arm`, and none is injected once the power is off.
    fn armed(&self) -> bool {
        self.armed.load(Ordering::SeqCst) && !self.disk.has_crashed()
    }

    /// After write `n` (counted from `arm`) of `len` bytes at `offset` landed: flip one of
    /// its bits if the run's fault says so. The bit is drawn from the I/O sequence's
    /// fingerprint (the same seed flips the same bit).
    fn after_write(&self, offset: u64, len: usize) {
        let Fault::Rot(first, count) = self.fault else { return };
        let n = self.writes.load(Ordering::SeqCst);
        if !(first..first + count).contains(&n) || !self.armed() || len == 0 {
            return;
        }
        let h = self.fingerprint.load(Ordering::SeqCst);
        self.disk.rot(offset + h % len as u64, (h >> 32) as u8 % 8);
        self.injected.fetch_add(1, Ordering::SeqCst);
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
        self.disk.write_at(buf, offset)?;
        self.after_write(offset, buf.len());
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.before(b'f', 0, 0, &self.flushes, true)?;
        self.disk.flush()
    }
    fn describe(&self) -> String {
        "simulated disk (scheduled)".into()
    }
}
