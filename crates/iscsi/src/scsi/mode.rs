//! MODE SENSE and MODE SELECT (6 and 10) for the pages we report: caching (0x08: write
//! cache enabled, since a write is durable only after SYNCHRONIZE CACHE or FUA), control
//! (0x0A) and informational exceptions (0x1C). Nothing is changeable or savable: MODE
//! SELECT accepts a parameter list of our pages and keeps nothing.

use super::{geometry, Cdb, Cmd, Outcome, Request};
use crate::sense;
use crate::targets::LunSlot;

const PAGES: [u8; 3] = [0x08, 0x0a, 0x1c];

fn page(code: u8, changeable: bool) -> Vec<u8> {
    let mut p = match code {
        0x08 => vec![0u8; 20],
        _ => vec![0u8; 12],
    };
    p[0] = code;
    p[1] = (p.len() - 2) as u8;
    if changeable {
        return p;
    }
    match code {
        0x08 => p[2] = 0x04, // WCE
        0x0a => {
            p[3] = 0x10; // unrestricted reordering
            p[8..10].copy_from_slice(&0xffffu16.to_be_bytes()); // busy timeout: unlimited
        }
        _ => {}
    }
    p
}

pub fn sense(req: &Request, slot: &LunSlot) -> Cmd {
    let c = Cdb(req.cdb);
    let ten = c.b(0) == 0x5a;
    let dbd = c.b(1) & 0x08 != 0;
    let llbaa = ten && c.b(1) & 0x10 != 0;
    let (pc, code, sub) = (c.b(2) >> 6, c.b(2) & 0x3f, c.b(3));
    let alloc = if ten { c.u16(7) as usize } else { c.b(4) as usize };
    if pc == 3 {
        return Err(sense::SAVING_NOT_SUPPORTED);
    }
    if sub != 0 && sub != 0xff {
        return Err(sense::INVALID_FIELD_IN_CDB);
    }
    let mut pages = Vec::new();
    if code == 0x3f {
        for p in PAGES {
            pages.extend(page(p, pc == 1));
        }
    } else if PAGES.contains(&code) {
        pages.extend(page(code, pc == 1));
    } else {
        return Err(sense::INVALID_FIELD_IN_CDB);
    }
    let (blocks, bs) = geometry(slot);
    let mut desc = Vec::new();
    if !dbd {
        if llbaa {
            desc.extend_from_slice(&blocks.to_be_bytes());
            desc.extend_from_slice(&[0; 4]);
            desc.extend_from_slice(&bs.to_be_bytes());
        } else {
            desc.extend_from_slice(&(blocks.min(0xffff_ffff) as u32).to_be_bytes());
            desc.extend_from_slice(&bs.to_be_bytes());
            desc[4] = 0; // density code
        }
    }
    // Device-specific parameter: WP for a read-only LUN, DPOFUA supported.
    let dsp = if slot.lun.read_only() { 0x80 } else { 0 } | 0x10;
    let mut d = Vec::new();
    if ten {
        let total = 8 + desc.len() + pages.len();
        d.extend_from_slice(&((total - 2) as u16).to_be_bytes());
        d.extend_from_slice(&[0, dsp, if llbaa { 1 } else { 0 }, 0]);
        d.extend_from_slice(&(desc.len() as u16).to_be_bytes());
    } else {
        let total = 4 + desc.len() + pages.len();
        d.extend_from_slice(&[(total - 1).min(255) as u8, 0, dsp, desc.len() as u8]);
    }
    d.extend(desc);
    d.extend(pages);
    Ok(Outcome::data(d, alloc))
}

pub fn select(req: &Request, _slot: &LunSlot) -> Cmd {
    let c = Cdb(req.cdb);
    let ten = c.b(0) == 0x55;
    let (pf, sp) = (c.b(1) & 0x10 != 0, c.b(1) & 0x01 != 0);
    let plen = if ten { c.u16(7) as usize } else { c.b(4) as usize };
    if sp {
        return Err(sense::SAVING_NOT_SUPPORTED);
    }
    if plen == 0 {
        return Ok(Outcome::good());
    }
    if !pf || req.data_out.len() < plen {
        return Err(if pf { sense::PARAM_LIST_LENGTH_ERROR } else { sense::INVALID_FIELD_IN_CDB });
    }
    let p = &req.data_out[..plen];
    let hdr = if ten { 8 } else { 4 };
    if p.len() < hdr {
        return Err(sense::PARAM_LIST_LENGTH_ERROR);
    }
    let bdl = if ten { Cdb(p).u16(6) as usize } else { p[3] as usize };
    let mut at = hdr + bdl;
    while at < p.len() {
        if at + 2 > p.len() {
            return Err(sense::PARAM_LIST_LENGTH_ERROR);
        }
        let (code, len) = (p[at] & 0x3f, p[at + 1] as usize);
        if !PAGES.contains(&code) || p[at] & 0x40 != 0 || len + 2 != page(code, false).len() {
            return Err(sense::INVALID_FIELD_IN_PARAM);
        }
        at += 2 + len;
    }
    if at != p.len() {
        return Err(sense::PARAM_LIST_LENGTH_ERROR);
    }
    Ok(Outcome::good())
}
