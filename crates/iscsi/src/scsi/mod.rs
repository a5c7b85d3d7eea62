//! The SCSI device server (SPC-4, SBC-3): a CDB and its Data-Out in, status, sense and
//! Data-In out. Transport-independent: the iSCSI session collects the Data-Out before
//! calling [`execute`] and cuts the returned data into Data-In PDUs.
//!
//! Every error is a CHECK CONDITION with fixed-format sense (sense.rs); nothing here
//! panics on a CDB or parameter list (every field is bounds-checked through [`Cdb`]).
//! Data is bounded: a transfer is at most [`MAX_TRANSFER_BYTES`], advertised in the
//! Block Limits VPD page, and longer requests are refused before any buffer is made.
//!
//! Statistics: a command addressed to a LUN with statistics (`LunSlot::stats`) and not
//! refused by a reservation is counted (strata-stats): the READs as read and the WRITEs
//! (WRITE AND VERIFY, COMPARE AND WRITE, ORWRITE) as write, with the data they moved when
//! GOOD; SYNCHRONIZE CACHE as sync; UNMAP and WRITE SAME as trim; every other command as
//! other. A status other than GOOD is an error.

pub mod inquiry;
pub mod mode;
pub mod pr;
pub mod rw;
#[cfg(test)]
mod tests;

use crate::sense::{self, Sense};
use crate::targets::{LunSlot, Target};
use strata_stats::OpClass;

/// Largest READ/WRITE/VERIFY buffer (32 MiB): bounds a command's memory; the Block Limits
/// page tells initiators (Linux caps its requests to it). libiscsi's conformance tests
/// write 65536 blocks in one command whatever the page says, hence not smaller.
pub const MAX_TRANSFER_BYTES: u64 = 32 << 20;

/// The I_T nexus a command arrived on: initiator name and ISID (the key persistent
/// reservations register under).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Nexus {
    pub initiator: String,
    pub isid: [u8; 6],
}

impl Nexus {
    pub fn id(&self) -> String {
        let mut s = self.initiator.to_ascii_lowercase();
        s.push_str(",i,0x");
        for b in self.isid {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }
}

/// One command as the device server sees it.
pub struct Request<'a> {
    pub cdb: &'a [u8],
    /// The Data-Out the initiator sent (at most the expected length).
    pub data_out: &'a [u8],
    /// The iSCSI Expected Data Transfer Length.
    pub edtl: u32,
    pub target: &'a Target,
    /// The addressed LUN number, `None` if the LUN field uses a format we do not serve.
    pub lun: Option<u16>,
    pub nexus: &'a Nexus,
}

/// A command's result.
#[derive(Debug, Default)]
pub struct Outcome {
    pub status: u8,
    pub sense: Option<Sense>,
    /// Data-In, already cut to the CDB's allocation length (the transport cuts it to the
    /// EDTL and reports the residual).
    pub data: Vec<u8>,
    /// Data-Out bytes the CDB called for (for the residual of writes).
    pub wanted_out: Option<u32>,
    /// Data-In bytes the CDB called for when more than `data` (a READ cut to the EDTL).
    pub wanted_in: Option<u32>,
}

impl Outcome {
    pub fn good() -> Outcome {
        Outcome::default()
    }
    pub fn data(mut data: Vec<u8>, alloc: usize) -> Outcome {
        data.truncate(alloc);
        Outcome { data, ..Default::default() }
    }
    pub fn check(s: Sense) -> Outcome {
        Outcome { status: sense::CHECK_CONDITION, sense: Some(s), ..Default::default() }
    }
    pub fn conflict() -> Outcome {
        Outcome { status: sense::RESERVATION_CONFLICT, ..Default::default() }
    }
}

pub type Cmd = Result<Outcome, Sense>;

/// Bounds-checked CDB field access: a short CDB reads as zeros past its end (the opcode
/// table's lengths are checked first, so this only matters for hostile input).
pub struct Cdb<'a>(pub &'a [u8]);

impl Cdb<'_> {
    pub fn b(&self, i: usize) -> u8 {
        self.0.get(i).copied().unwrap_or(0)
    }
    pub fn u16(&self, i: usize) -> u16 {
        u16::from_be_bytes([self.b(i), self.b(i + 1)])
    }
    pub fn u24(&self, i: usize) -> u32 {
        u32::from_be_bytes([0, self.b(i), self.b(i + 1), self.b(i + 2)])
    }
    pub fn u32(&self, i: usize) -> u32 {
        u32::from_be_bytes([self.b(i), self.b(i + 1), self.b(i + 2), self.b(i + 3)])
    }
    pub fn u64(&self, i: usize) -> u64 {
        (self.u32(i) as u64) << 32 | self.u32(i + 4) as u64
    }
}

/// The CDB length an opcode's group implies (SPC-4 §4.2.5.1), for the short-CDB check.
pub fn cdb_len(opcode: u8) -> usize {
    match opcode >> 5 {
        0 => 6,
        1 | 2 => 10,
        4 => 16,
        5 => 12,
        _ => 6,
    }
}

/// Run one command.
pub fn execute(req: &Request) -> Outcome {
    let Some(&op) = req.cdb.first() else { return Outcome::check(sense::INVALID_OPCODE) };
    if req.cdb.len() < cdb_len(op) {
        return Outcome::check(sense::INVALID_FIELD_IN_CDB);
    }
    let slot = req.lun.and_then(|n| req.target.lun(n));
    // Commands that work without a LUN behind the address.
    match op {
        0x12 => return wrap(inquiry::inquiry(req, slot.map(|s| &**s))),
        0xa0 => return wrap(report_luns(req)),
        0x03 => return wrap(request_sense(req, slot.is_some())),
        _ => {}
    }
    let Some(slot) = slot else { return Outcome::check(sense::LUN_NOT_SUPPORTED) };
    if let Some(o) = pr::check_access(req, slot) {
        return o;
    }
    let t = std::time::Instant::now();
    let out = wrap(dispatch(op, req, slot));
    if let Some(s) = &slot.stats {
        let good = out.status == sense::GOOD;
        let (class, bytes) = match op {
            0x08 | 0x28 | 0xa8 | 0x88 => (OpClass::Read, out.data.len()),
            0x0a | 0x2a | 0xaa | 0x8a | 0x2e | 0xae | 0x8e | 0x8b => (OpClass::Write, req.data_out.len()),
            // The Data-Out holds the data to compare, then the data to write.
            0x89 => (OpClass::Write, req.data_out.len() / 2),
            0x35 | 0x91 => (OpClass::Sync, 0),
            0x42 | 0x41 | 0x93 => (OpClass::Trim, 0),
            _ => (OpClass::Other, 0),
        };
        s.record(class, if good { bytes as u64 } else { 0 }, t.elapsed(), good);
    }
    out
}

fn wrap(r: Cmd) -> Outcome {
    r.unwrap_or_else(Outcome::check)
}

fn dispatch(op: u8, req: &Request, slot: &LunSlot) -> Cmd {
    let c = Cdb(req.cdb);
    match op {
        0x00 => Ok(Outcome::good()),
        0x08 | 0x28 | 0xa8 | 0x88 => rw::read(req, slot),
        0x0a | 0x2a | 0xaa | 0x8a | 0x2e | 0xae | 0x8e => rw::write(req, slot),
        0x2f | 0xaf | 0x8f => rw::verify(req, slot),
        0x25 => read_capacity10(slot),
        0x9e if c.b(1) & 0x1f == 0x10 => read_capacity16(req, slot),
        0x9e if c.b(1) & 0x1f == 0x12 => rw::get_lba_status(req, slot),
        0x35 | 0x91 => sync_cache(req, slot),
        0x42 => rw::unmap(req, slot),
        0x41 | 0x93 => rw::write_same(req, slot),
        0x89 => rw::compare_and_write(req, slot),
        0x8b => rw::or_write(req, slot),
        0x34 | 0x90 => rw::prefetch(req, slot),
        0x1a | 0x5a => mode::sense(req, slot),
        0x15 | 0x55 => mode::select(req, slot),
        0xa3 if c.b(1) & 0x1f == 0x0c => inquiry::report_opcodes(req),
        0x1b => start_stop(req),
        0x1e => Ok(Outcome::good()),
        0x5e => pr::pr_in(req, slot),
        0x5f => pr::pr_out(req, slot),
        0x16 | 0x17 | 0x56 | 0x57 => pr::reserve_release(req, slot),
        _ => Err(sense::INVALID_OPCODE),
    }
}

/// The LUN's size in blocks and its block size.
pub fn geometry(slot: &LunSlot) -> (u64, u32) {
    let bs = slot.lun.block_size().max(1);
    (slot.lun.size() / bs as u64, bs)
}

fn read_capacity10(slot: &LunSlot) -> Cmd {
    let (blocks, bs) = geometry(slot);
    let last = blocks.saturating_sub(1).min(0xffff_ffff) as u32;
    let mut d = Vec::with_capacity(8);
    d.extend_from_slice(&last.to_be_bytes());
    d.extend_from_slice(&bs.to_be_bytes());
    Ok(Outcome::data(d, 8))
}

fn read_capacity16(req: &Request, slot: &LunSlot) -> Cmd {
    let c = Cdb(req.cdb);
    let (blocks, bs) = geometry(slot);
    let mut d = vec![0u8; 32];
    d[..8].copy_from_slice(&blocks.saturating_sub(1).to_be_bytes());
    d[8..12].copy_from_slice(&bs.to_be_bytes());
    // Logical blocks per physical block: one. The record size is announced as the optimal
    // transfer granularity (VPD 0xB0), which is what initiators align I/O to; a physical
    // exponent above 0 made libiscsi's GetLBAStatus.UnmapSingle fail (it assumes GET LBA
    // STATUS descriptors start on physical block boundaries) and gains nothing here: a
    // write below the record size is a read-modify-write in memory, never on disk.
    d[13] = 0;
    // LBPME: thin provisioned (UNMAP works); LBPRZ: unmapped blocks read as zeros.
    d[14] = 0x80 | 0x40;
    Ok(Outcome::data(d, c.u32(10) as usize))
}

fn sync_cache(req: &Request, slot: &LunSlot) -> Cmd {
    let c = Cdb(req.cdb);
    let (lba, n) = if c.b(0) == 0x35 { (c.u32(2) as u64, c.u16(7) as u64) } else { (c.u64(2), c.u32(10) as u64) };
    let (blocks, _) = geometry(slot);
    if lba > blocks || lba + n > blocks {
        return Err(sense::LBA_OUT_OF_RANGE);
    }
    slot.lun.flush().map_err(|e| sense::from_lun(&e, true))?;
    Ok(Outcome::good())
}

fn start_stop(req: &Request) -> Cmd {
    // No medium to load or eject and no power states: every valid request succeeds.
    let c = Cdb(req.cdb);
    if c.b(4) >> 4 > 0x0b {
        return Err(sense::INVALID_FIELD_IN_CDB);
    }
    Ok(Outcome::good())
}

fn report_luns(req: &Request) -> Cmd {
    let c = Cdb(req.cdb);
    let alloc = c.u32(6) as usize;
    if alloc < 16 {
        return Err(sense::INVALID_FIELD_IN_CDB);
    }
    let select = c.b(2);
    let luns: Vec<u16> = match select {
        0 | 2 => (0..req.target.luns.len().min(16384) as u16).collect(),
        1 => Vec::new(),
        0x10..=0x12 => Vec::new(),
        _ => return Err(sense::INVALID_FIELD_IN_CDB),
    };
    let mut d = Vec::with_capacity(8 + luns.len() * 8);
    d.extend_from_slice(&((luns.len() * 8) as u32).to_be_bytes());
    d.extend_from_slice(&[0; 4]);
    for n in luns {
        d.extend_from_slice(&crate::pdu::lun_field(n).to_be_bytes());
    }
    Ok(Outcome::data(d, alloc))
}

fn request_sense(req: &Request, lun_present: bool) -> Cmd {
    let c = Cdb(req.cdb);
    let alloc = c.b(4) as usize;
    // Sense is reported with each command (autosense); none is ever pending here.
    let s = if lun_present { Sense::new(sense::NO_SENSE, 0, 0) } else { sense::LUN_NOT_SUPPORTED };
    let d = if c.b(1) & 1 != 0 {
        // Descriptor format, no descriptors.
        vec![0x72, s.key, s.asc, s.ascq, 0, 0, 0, 0]
    } else {
        s.encode()
    };
    Ok(Outcome::data(d, alloc))
}

#[cfg(test)]
mod cdb_tests {
    use super::*;

    #[test]
    fn cdb_fields_and_lengths() {
        let c = Cdb(&[0x88, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 8, 0, 0]);
        assert_eq!(c.u64(2), 0x102);
        assert_eq!(c.u32(10), 8);
        assert_eq!(c.b(40), 0, "past the end reads as zero");
        assert_eq!(cdb_len(0x28), 10);
        assert_eq!(cdb_len(0x88), 16);
        assert_eq!(cdb_len(0xa8), 12);
        assert_eq!(cdb_len(0x08), 6);
    }
}
