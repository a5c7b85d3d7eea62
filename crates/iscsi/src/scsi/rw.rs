//! Block commands (SBC-3): READ, WRITE, WRITE AND VERIFY, VERIFY (6/10/12/16), WRITE SAME
//! (10/16), UNMAP, COMPARE AND WRITE, ORWRITE, GET LBA STATUS and PRE-FETCH.
//!
//! COMPARE AND WRITE is atomic per LUN: it holds the LUN's `caw` lock exclusively over
//! its read, compare and write, and every other write path holds it shared, so no write
//! lands between a CAW's compare and its write. Reads do not take it (a read racing a
//! CAW sees either side, as it would racing a plain write).

use super::{geometry, Cdb, Cmd, Outcome, Request, MAX_TRANSFER_BYTES};
use crate::sense::{self, Sense};
use crate::targets::LunSlot;

/// LBA, block count and FUA bit of a READ/WRITE/VERIFY CDB of any size.
fn lba_len(c: &Cdb) -> (u64, u64, bool) {
    match c.b(0) {
        0x08 | 0x0a => {
            let n = c.b(4) as u64;
            // READ(6)/WRITE(6): 0 means 256 blocks.
            ((c.u24(1) & 0x1f_ffff) as u64, if n == 0 { 256 } else { n }, false)
        }
        0x28 | 0x2a | 0x2f | 0x2e | 0x34 => (c.u32(2) as u64, c.u16(7) as u64, c.b(1) & 0x08 != 0),
        0xa8 | 0xaa | 0xaf | 0xae => (c.u32(2) as u64, c.u32(6) as u64, c.b(1) & 0x08 != 0),
        _ => (c.u64(2), c.u32(10) as u64, c.b(1) & 0x08 != 0),
    }
}

/// Check `lba..lba+n` against the LUN and the transfer limit; the byte offset and length.
fn range(slot: &LunSlot, lba: u64, n: u64) -> Result<(u64, u64), Sense> {
    let (blocks, bs) = geometry(slot);
    if lba > blocks || n > blocks - lba {
        return Err(sense::LBA_OUT_OF_RANGE);
    }
    Ok((lba * bs as u64, n * bs as u64))
}

fn check_transfer(bytes: u64) -> Result<(), Sense> {
    if bytes > MAX_TRANSFER_BYTES {
        return Err(sense::INVALID_FIELD_IN_CDB);
    }
    Ok(())
}

/// RDPROTECT/WRPROTECT/VRPROTECT: we have no protection information.
fn no_protect(c: &Cdb) -> Result<(), Sense> {
    if !matches!(c.b(0), 0x08 | 0x0a) && c.b(1) >> 5 != 0 {
        return Err(sense::INVALID_FIELD_IN_CDB);
    }
    Ok(())
}

fn writable(slot: &LunSlot) -> Result<(), Sense> {
    if slot.lun.read_only() {
        return Err(sense::WRITE_PROTECTED);
    }
    Ok(())
}

pub fn read(req: &Request, slot: &LunSlot) -> Cmd {
    let c = Cdb(req.cdb);
    no_protect(&c)?;
    let (lba, n, _fua) = lba_len(&c);
    let (off, len) = range(slot, lba, n)?;
    check_transfer(len)?;
    // Read no more than the initiator will take (the rest would be overflow residual).
    let mut buf = vec![0u8; len.min(req.edtl as u64) as usize];
    slot.lun.read(off, &mut buf).map_err(|e| sense::from_lun(&e, false))?;
    // The transport reports an EDTL shorter than the CDB's length as overflow residual.
    Ok(Outcome { wanted_in: Some(len.min(u32::MAX as u64) as u32), ..Outcome::data(buf, usize::MAX) })
}

/// The Data-Out must match the CDB's transfer length exactly; otherwise refuse without
/// writing (libiscsi's residual tests accept this, and a partial write is worse).
fn data_matches(req: &Request, want: u64) -> Result<(), Outcome> {
    if req.edtl as u64 != want || req.data_out.len() as u64 != want {
        let mut o = Outcome::check(sense::INVALID_FIELD_IN_IU);
        o.wanted_out = Some(want.min(u32::MAX as u64) as u32);
        return Err(o);
    }
    Ok(())
}

pub fn write(req: &Request, slot: &LunSlot) -> Cmd {
    let c = Cdb(req.cdb);
    no_protect(&c)?;
    let (lba, n, fua) = lba_len(&c);
    writable(slot)?;
    let (off, len) = range(slot, lba, n)?;
    check_transfer(len)?;
    // An EDTL that differs from the CDB's length (SAM-5 §5.4.4: overflow/underflow): write
    // what both allow and report the residual, as libiscsi's residual tests expect.
    let n_bytes = len.min(req.edtl as u64).min(req.data_out.len() as u64) as usize;
    let done = Outcome { wanted_out: Some(len as u32), ..Outcome::good() };
    if n_bytes == 0 {
        return Ok(done);
    }
    let _w = slot.caw.read().expect("caw lock");
    slot.lun.write(off, &req.data_out[..n_bytes], fua).map_err(|e| sense::from_lun(&e, true))?;
    Ok(done)
}

pub fn verify(req: &Request, slot: &LunSlot) -> Cmd {
    let c = Cdb(req.cdb);
    no_protect(&c)?;
    let (lba, n, _) = lba_len(&c);
    let bytchk = (c.b(1) >> 1) & 3;
    let (off, len) = range(slot, lba, n)?;
    check_transfer(len)?;
    let mut buf = vec![0u8; len as usize];
    slot.lun.read(off, &mut buf).map_err(|e| sense::from_lun(&e, false))?;
    let want = match bytchk {
        0 => return Ok(Outcome::good()),
        1 => len,
        3 => len.min(geometry(slot).1 as u64),
        _ => return Err(sense::INVALID_FIELD_IN_CDB),
    };
    if let Err(o) = data_matches(req, want) {
        return Ok(o);
    }
    let bs = geometry(slot).1 as usize;
    for (i, b) in buf.iter().enumerate() {
        let expect = if bytchk == 3 { req.data_out[i % bs] } else { req.data_out[i] };
        if *b != expect {
            return Err(Sense { info: Some(i as u32), ..sense::MISCOMPARE_DURING_VERIFY });
        }
    }
    Ok(Outcome::good())
}

pub fn prefetch(req: &Request, slot: &LunSlot) -> Cmd {
    let (lba, n, _) = lba_len(&Cdb(req.cdb));
    range(slot, lba, n)?;
    Ok(Outcome::good())
}

pub fn compare_and_write(req: &Request, slot: &LunSlot) -> Cmd {
    let c = Cdb(req.cdb);
    no_protect(&c)?;
    let (lba, n, fua) = (c.u64(2), c.b(13) as u64, c.b(1) & 0x08 != 0);
    writable(slot)?;
    if n > MAX_CAW_BLOCKS {
        return Err(sense::INVALID_FIELD_IN_CDB);
    }
    let (off, len) = range(slot, lba, n)?;
    if req.edtl as u64 != 2 * len || req.data_out.len() as u64 != 2 * len {
        return Err(sense::INVALID_FIELD_IN_CDB);
    }
    if n == 0 {
        return Ok(Outcome::good());
    }
    let (verify, data) = req.data_out.split_at(len as usize);
    let _w = slot.caw.write().expect("caw lock");
    let mut cur = vec![0u8; len as usize];
    slot.lun.read(off, &mut cur).map_err(|e| sense::from_lun(&e, false))?;
    if let Some(i) = cur.iter().zip(verify).position(|(a, b)| a != b) {
        return Err(Sense { info: Some(i as u32), ..sense::MISCOMPARE_DURING_VERIFY });
    }
    slot.lun.write(off, data, fua).map_err(|e| sense::from_lun(&e, true))?;
    Ok(Outcome::good())
}

/// ORWRITE (16): the blocks become `old | data`, atomically like COMPARE AND WRITE.
pub fn or_write(req: &Request, slot: &LunSlot) -> Cmd {
    let c = Cdb(req.cdb);
    no_protect(&c)?;
    let (lba, n, fua) = (c.u64(2), c.u32(10) as u64, c.b(1) & 0x08 != 0);
    writable(slot)?;
    let (off, len) = range(slot, lba, n)?;
    check_transfer(len)?;
    if let Err(o) = data_matches(req, len) {
        return Ok(o);
    }
    if len == 0 {
        return Ok(Outcome::good());
    }
    let _w = slot.caw.write().expect("caw lock");
    let mut cur = vec![0u8; len as usize];
    slot.lun.read(off, &mut cur).map_err(|e| sense::from_lun(&e, false))?;
    for (a, b) in cur.iter_mut().zip(req.data_out) {
        *a |= b;
    }
    slot.lun.write(off, &cur, fua).map_err(|e| sense::from_lun(&e, true))?;
    Ok(Outcome::good())
}

/// COMPARE AND WRITE's limit in blocks (Block Limits page byte 5).
pub const MAX_CAW_BLOCKS: u64 = 255;
/// WRITE SAME and UNMAP limit in blocks per command: 1 Mi blocks (512 MiB at 512-byte
/// blocks), what libiscsi's conformance suite expects at most.
pub const MAX_UNMAP_BLOCKS: u32 = 1 << 20;
pub const MAX_UNMAP_DESCRIPTORS: u32 = 256;

pub fn write_same(req: &Request, slot: &LunSlot) -> Cmd {
    let c = Cdb(req.cdb);
    let ws16 = c.b(0) == 0x93;
    let flags = c.b(1);
    let (lba, n) = if ws16 { (c.u64(2), c.u32(10) as u64) } else { (c.u32(2) as u64, c.u16(7) as u64) };
    let (unmap, anchor, ndob) = (flags & 0x08 != 0, flags & 0x10 != 0, ws16 && flags & 0x01 != 0);
    // WRPROTECT, PBDATA, LBDATA: no protection information, no LBA stamping.
    if flags >> 5 != 0 || flags & 0x06 != 0 || anchor {
        return Err(sense::INVALID_FIELD_IN_CDB);
    }
    writable(slot)?;
    let bs = geometry(slot).1 as u64;
    // WSNZ: a count of 0 ("to the end of the LUN") is refused, as the Block Limits page says.
    if n == 0 || n > MAX_UNMAP_BLOCKS as u64 {
        return Err(sense::INVALID_FIELD_IN_CDB);
    }
    let (off, len) = range(slot, lba, n)?;
    let block: Vec<u8> = if ndob {
        vec![0u8; bs as usize]
    } else {
        if let Err(o) = data_matches(req, bs) {
            return Ok(o);
        }
        req.data_out.to_vec()
    };
    let _w = slot.caw.read().expect("caw lock");
    let err = |e| sense::from_lun(&e, true);
    if block.iter().all(|&b| b == 0) {
        slot.lun.write_zeroes(off, len, unmap, false).map_err(err)?;
        return Ok(Outcome::good());
    }
    // Repeat the block in buffers of at most 1 MiB.
    let per = ((1u64 << 20) / bs).max(1);
    let mut buf = Vec::with_capacity((per.min(n) * bs) as usize);
    for _ in 0..per.min(n) {
        buf.extend_from_slice(&block);
    }
    let mut done = 0;
    while done < n {
        let k = per.min(n - done);
        slot.lun.write(off + done * bs, &buf[..(k * bs) as usize], false).map_err(err)?;
        done += k;
    }
    Ok(Outcome::good())
}

pub fn unmap(req: &Request, slot: &LunSlot) -> Cmd {
    let c = Cdb(req.cdb);
    if c.b(1) & 0x01 != 0 {
        return Err(sense::INVALID_FIELD_IN_CDB); // ANCHOR
    }
    writable(slot)?;
    let plen = c.u16(7) as usize;
    let p = &req.data_out[..plen.min(req.data_out.len())];
    if plen == 0 {
        return Ok(Outcome::good());
    }
    if p.len() < 8 {
        return Err(sense::PARAM_LIST_LENGTH_ERROR);
    }
    let pc = Cdb(p);
    let desc_len = (pc.u16(2) as usize).min(p.len() - 8);
    let count = desc_len / 16;
    if count as u32 > MAX_UNMAP_DESCRIPTORS {
        return Err(sense::INVALID_FIELD_IN_PARAM);
    }
    let mut ranges = Vec::with_capacity(count);
    for i in 0..count {
        let d = Cdb(&p[8 + i * 16..8 + i * 16 + 16]);
        let (lba, n) = (d.u64(0), d.u32(8) as u64);
        if n > MAX_UNMAP_BLOCKS as u64 {
            return Err(sense::INVALID_FIELD_IN_PARAM);
        }
        ranges.push(range(slot, lba, n)?);
    }
    let _w = slot.caw.read().expect("caw lock");
    for (off, len) in ranges {
        if len > 0 {
            slot.lun.trim(off, len, false).map_err(|e| sense::from_lun(&e, true))?;
        }
    }
    Ok(Outcome::good())
}

pub fn get_lba_status(req: &Request, slot: &LunSlot) -> Cmd {
    let c = Cdb(req.cdb);
    let (lba, alloc) = (c.u64(2), c.u32(10) as usize);
    let (blocks, bs) = geometry(slot);
    if lba >= blocks {
        return Err(sense::LBA_OUT_OF_RANGE);
    }
    let bs = bs as u64;
    // Describe up to 64 runs, or 1 GiB of the LUN, whichever ends first.
    let start = lba * bs;
    let span = (blocks * bs - start).min(1 << 30);
    let mut runs: Vec<(u64, u64, bool)> = Vec::new();
    let mut at = start;
    while at < start + span && runs.len() < 64 {
        let ext = slot.lun.extents(at, start + span - at).map_err(|e| sense::from_lun(&e, false))?;
        if ext.iter().all(|e| e.len == 0) {
            // No progress: end the listing rather than ask again forever.
            break;
        }
        for e in ext {
            let len = e.len.min(start + span - at);
            if len == 0 {
                continue;
            }
            match runs.last_mut() {
                Some(r) if r.2 == e.hole => r.1 += len,
                _ => runs.push((at, len, e.hole)),
            }
            at += len;
        }
    }
    let mut d = vec![0u8; 8];
    for (off, len, hole) in runs.iter().take(64) {
        let first = off / bs;
        let last = (off + len).div_ceil(bs);
        let mut e = [0u8; 16];
        e[..8].copy_from_slice(&first.to_be_bytes());
        e[8..12].copy_from_slice(&((last - first).min(u32::MAX as u64) as u32).to_be_bytes());
        e[12] = if *hole { 1 } else { 0 };
        d.extend_from_slice(&e);
    }
    let n = (d.len() - 4) as u32;
    d[..4].copy_from_slice(&n.to_be_bytes());
    Ok(Outcome::data(d, alloc))
}
