//! A simulated disk for crash and fault tests.
//!
//! It keeps two images: `durable` (what is guaranteed to survive power loss: everything
//! written before the last successful flush) and `current` (what reads see). Writes since
//! the last flush are remembered in order. A crash image starts from `durable` and, per
//! sector touched by unflushed writes, keeps either the durable contents or the contents
//! after one of those writes — so unflushed writes may be dropped, applied out of order, or
//! torn at sector granularity, as a real disk with a volatile cache may do.
//!
//! Power loss mid-run: `set_crash_after(n)` lets `n` more write/flush operations succeed,
//! then fails every later I/O, as if the machine died there; the crash image is then taken
//! of the state at that instant. Those I/Os fail with an error that carries [`PowerLost`],
//! so tests tell the power failure apart from every other error
//! ([`crate::is_power_failure`]), and the disk counts them ([`SimDisk::refused_ios`]).
//!
//! Faults: `fail_writes`/`fail_flushes` fail the next n operations (EIO) without crashing;
//! `fail_reads_in` fails reads overlapping a range; `rot` flips a bit in both images;
//! `set_gone` makes every I/O fail with ENODEV (the device disappeared).

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex};
use strata_engine::BlockDevice;

use crate::SimRng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Only what was flushed survives.
    DropUnflushed,
    /// Every write reached the media (a crash right after the last write).
    KeepAll,
    /// Per sector: durable contents or any one unflushed version, at random.
    Random,
}

struct State {
    durable: Vec<u8>,
    current: Vec<u8>,
    pending: Vec<(u64, Vec<u8>)>,
    ops: u64,
    crash_at: Option<u64>,
    fail_writes: u32,
    fail_flushes: u32,
    flushes_before_failing: u32,
    read_fail: Option<(u64, u64)>,
    flushes: u64,
    writes: u64,
    /// Reads served (a test counts a scrub's requests).
    reads: u64,
    /// I/Os refused because the power was off.
    refused: u64,
    /// The device is gone (unplugged, image deleted): every I/O fails with ENODEV.
    gone: bool,
    /// A power supply shared with other disks (`SimDisk::share_power`): its operation
    /// count and crash point replace this disk's own.
    power: Option<Arc<SimPower>>,
}

/// A power supply several simulated disks share: one failure takes them all down at the
/// same instant (the members of a mirror in one machine). Each disk still loses its own
/// unflushed writes in its own way (`crash_image`).
#[derive(Default)]
pub struct SimPower {
    /// (write/flush operations on any of its disks, the count at which power fails)
    state: Mutex<(u64, Option<u64>)>,
}

impl SimPower {
    fn st(&self) -> std::sync::MutexGuard<'_, (u64, Option<u64>)> {
        self.state.lock().expect("sim power lock")
    }

    fn off(&self) -> bool {
        let s = self.st();
        s.1.is_some_and(|c| s.0 >= c)
    }

    /// Let `n` more write/flush operations (on any disk) succeed, then lose power.
    pub fn set_crash_after(&self, n: u64) {
        let mut s = self.st();
        s.1 = Some(s.0 + n);
    }

    /// Whether the power is off.
    pub fn has_crashed(&self) -> bool {
        self.off()
    }
}

pub struct SimDisk {
    sector: usize,
    state: Mutex<State>,
}

fn eio(what: &str) -> io::Error {
    io::Error::other(format!("simulated I/O error: {what}"))
}

/// The source of every I/O error a [`SimDisk`] returns once its power is off (and of no
/// other): what [`crate::is_power_failure`] looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerLost;

impl fmt::Display for PowerLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("simulated I/O error: device lost power")
    }
}

impl std::error::Error for PowerLost {}

/// Whether `e` is the error a [`SimDisk`] returns after losing power.
pub fn is_power_lost(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<PowerLost>())
}

impl State {
    fn powered_off(&self) -> bool {
        match &self.power {
            Some(p) => p.off(),
            None => self.crash_at.is_some_and(|c| self.ops >= c),
        }
    }

    /// Count a write or flush (here and on the shared power supply).
    fn count_op(&mut self) {
        self.ops += 1;
        if let Some(p) = &self.power {
            p.st().0 += 1;
        }
    }

    /// Refuse an I/O if the power is off (and count it), or the device is gone.
    fn check_power(&mut self) -> io::Result<()> {
        if self.gone {
            return Err(io::Error::from_raw_os_error(libc::ENODEV));
        }
        if self.powered_off() {
            self.refused += 1;
            return Err(io::Error::other(PowerLost));
        }
        Ok(())
    }
}

impl SimDisk {
    pub fn new(size: u64, sector: usize) -> SimDisk {
        SimDisk::from_image(vec![0; size as usize], sector)
    }

    pub fn from_image(image: Vec<u8>, sector: usize) -> SimDisk {
        assert!(sector.is_power_of_two() && image.len().is_multiple_of(sector));
        SimDisk {
            sector,
            state: Mutex::new(State {
                durable: image.clone(),
                current: image,
                pending: Vec::new(),
                ops: 0,
                crash_at: None,
                fail_writes: 0,
                fail_flushes: 0,
                flushes_before_failing: 0,
                read_fail: None,
                flushes: 0,
                writes: 0,
                reads: 0,
                refused: 0,
                gone: false,
                power: None,
            }),
        }
    }

    fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("sim disk lock")
    }

    /// Write and flush operations so far.
    pub fn op_count(&self) -> u64 {
        self.st().ops
    }
    pub fn flush_count(&self) -> u64 {
        self.st().flushes
    }
    pub fn write_count(&self) -> u64 {
        self.st().writes
    }

    /// Let `n` more write/flush operations succeed, then lose power (of the shared supply,
    /// if the disk has one: then counting every disk's operations).
    pub fn set_crash_after(&self, n: u64) {
        let mut s = self.st();
        match &s.power {
            Some(p) => p.set_crash_after(n),
            None => s.crash_at = Some(s.ops + n),
        }
    }

    /// Draw power from `power` from now on, with the other disks that share it.
    pub fn share_power(&self, power: Arc<SimPower>) {
        self.st().power = Some(power);
    }

    /// Whether the power is off: the operations `set_crash_after` allowed have all been
    /// used (the next I/O, if any, fails).
    pub fn has_crashed(&self) -> bool {
        self.st().powered_off()
    }

    /// I/Os (reads, writes, flushes) refused because the power was off: more than zero
    /// means the engine really hit the power failure, not just that the power is off.
    pub fn refused_ios(&self) -> u64 {
        self.st().refused
    }

    pub fn fail_writes(&self, n: u32) {
        self.st().fail_writes = n;
    }
    pub fn fail_flushes(&self, n: u32) {
        self.fail_flushes_after(0, n);
    }
    /// Let `ok` flushes succeed, then fail the next `n`.
    pub fn fail_flushes_after(&self, ok: u32, n: u32) {
        let mut s = self.st();
        s.flushes_before_failing = ok;
        s.fail_flushes = n;
    }
    /// Fail every read overlapping [offset, offset + len); `None` clears.
    pub fn fail_reads_in(&self, range: Option<(u64, u64)>) {
        self.st().read_fail = range;
    }

    /// Make the device disappear (`true`: every I/O fails with ENODEV) or come back.
    pub fn set_gone(&self, gone: bool) {
        self.st().gone = gone;
    }

    /// Reads served so far.
    pub fn reads(&self) -> u64 {
        self.st().reads
    }

    /// Flip bit `bit` of the byte at `offset`, durably.
    pub fn rot(&self, offset: u64, bit: u8) {
        let mut s = self.st();
        s.durable[offset as usize] ^= 1 << bit;
        s.current[offset as usize] ^= 1 << bit;
    }

    /// The image a reader sees now.
    pub fn current_image(&self) -> Vec<u8> {
        self.st().current.clone()
    }

    /// What the media might hold after power loss now.
    pub fn crash_image(&self, mode: CrashMode, rng: &mut SimRng) -> Vec<u8> {
        let s = self.st();
        match mode {
            CrashMode::DropUnflushed => s.durable.clone(),
            CrashMode::KeepAll => s.current.clone(),
            CrashMode::Random => {
                let mut img = s.durable.clone();
                let sec = self.sector as u64;
                // For each sector, the versions it could hold: durable, or after write i.
                let mut touched: std::collections::BTreeMap<u64, Vec<usize>> = Default::default();
                for (i, (off, data)) in s.pending.iter().enumerate() {
                    let first = off / sec;
                    let last = (off + data.len() as u64 - 1) / sec;
                    for sector in first..=last {
                        touched.entry(sector).or_default().push(i);
                    }
                }
                for (sector, writers) in touched {
                    let choice = rng.below(writers.len() as u64 + 1) as usize;
                    if choice == 0 {
                        continue; // the write never reached this sector
                    }
                    let (off, data) = &s.pending[writers[choice - 1]];
                    let start = sector * sec;
                    let from = (start - off) as usize;
                    img[start as usize..(start + sec) as usize].copy_from_slice(&data[from..from + self.sector]);
                }
                img
            }
        }
    }
}

impl BlockDevice for SimDisk {
    fn size_bytes(&self) -> u64 {
        self.st().current.len() as u64
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut s = self.st();
        s.check_power()?;
        let end = offset.checked_add(buf.len() as u64).filter(|&e| e <= s.current.len() as u64);
        let Some(end) = end else {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of the simulated disk"));
        };
        if let Some((fo, fl)) = s.read_fail {
            if offset < fo + fl && fo < end {
                return Err(eio("read error injected"));
            }
        }
        buf.copy_from_slice(&s.current[offset as usize..end as usize]);
        s.reads += 1;
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut s = self.st();
        s.check_power()?;
        assert!(
            offset.is_multiple_of(self.sector as u64) && buf.len().is_multiple_of(self.sector),
            "the engine issues sector-aligned writes only"
        );
        let end = offset as usize + buf.len();
        if end > s.current.len() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "write past the end of the simulated disk"));
        }
        s.count_op();
        if s.fail_writes > 0 {
            s.fail_writes -= 1;
            return Err(eio("write error injected"));
        }
        s.writes += 1;
        s.current[offset as usize..end].copy_from_slice(buf);
        s.pending.push((offset, buf.to_vec()));
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        let mut s = self.st();
        s.check_power()?;
        s.count_op();
        if s.fail_flushes > 0 && s.flushes_before_failing > 0 {
            s.flushes_before_failing -= 1;
        } else if s.fail_flushes > 0 {
            s.fail_flushes -= 1;
            // A failed flush guarantees nothing: pending writes stay pending.
            return Err(eio("flush error injected"));
        }
        s.flushes += 1;
        let s = &mut *s;
        for (off, data) in s.pending.drain(..) {
            s.durable[off as usize..off as usize + data.len()].copy_from_slice(&data);
        }
        Ok(())
    }

    fn describe(&self) -> String {
        "simulated disk".into()
    }
}
