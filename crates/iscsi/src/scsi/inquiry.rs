//! INQUIRY (standard data and the VPD pages 0x00, 0x80, 0x83, 0xB0, 0xB1, 0xB2) and
//! REPORT SUPPORTED OPERATION CODES.

use super::rw::{MAX_CAW_BLOCKS, MAX_UNMAP_BLOCKS, MAX_UNMAP_DESCRIPTORS};
use super::{geometry, Cdb, Cmd, Outcome, Request, MAX_TRANSFER_BYTES};
use crate::sense;
use crate::targets::LunSlot;

pub const VENDOR: &[u8; 8] = b"STRATA  ";
pub const PRODUCT: &[u8; 16] = b"Strata LUN      ";
pub const REVISION: &[u8; 4] = b"0001";

pub fn inquiry(req: &Request, slot: Option<&LunSlot>) -> Cmd {
    let c = Cdb(req.cdb);
    let (evpd, page, alloc) = (c.b(1) & 0x01 != 0, c.b(2), c.u16(3) as usize);
    if c.b(1) & 0x02 != 0 || (!evpd && page != 0) {
        return Err(sense::INVALID_FIELD_IN_CDB);
    }
    let Some(slot) = slot else {
        if evpd {
            return Err(sense::LUN_NOT_SUPPORTED);
        }
        // Peripheral qualifier 3: no logical unit at this address.
        let mut d = vec![0u8; 36];
        d[0] = 0x7f;
        d[2] = 0x06;
        d[3] = 0x12;
        d[4] = 31;
        return Ok(Outcome::data(d, alloc));
    };
    let d = if evpd { vpd(req, slot, page)? } else { standard() };
    Ok(Outcome::data(d, alloc))
}

fn standard() -> Vec<u8> {
    let mut d = vec![0u8; 96];
    d[0] = 0x00; // direct-access block device
    d[2] = 0x06; // SPC-4
    d[3] = 0x10 | 0x02; // HISUP, response data format 2
    d[4] = (d.len() - 5) as u8;
    d[7] = 0x02; // CMDQUE
    d[8..16].copy_from_slice(VENDOR);
    d[16..32].copy_from_slice(PRODUCT);
    d[32..36].copy_from_slice(REVISION);
    // Version descriptors: SAM-5, iSCSI, SPC-4, SBC-3.
    for (i, v) in [0x00a0u16, 0x0960, 0x0460, 0x04c0].iter().enumerate() {
        d[58 + 2 * i..60 + 2 * i].copy_from_slice(&v.to_be_bytes());
    }
    d
}

fn page(code: u8, body: &[u8]) -> Vec<u8> {
    let mut d = vec![0u8, code];
    d.extend_from_slice(&(body.len() as u16).to_be_bytes());
    d.extend_from_slice(body);
    d
}

fn hex_serial(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

fn designator(code_set: u8, assoc_type: u8, value: &[u8]) -> Vec<u8> {
    let mut d = vec![code_set, assoc_type, 0, value.len() as u8];
    d.extend_from_slice(value);
    d
}

fn vpd(req: &Request, slot: &LunSlot, code: u8) -> Result<Vec<u8>, sense::Sense> {
    let (_, bs) = geometry(slot);
    let id = slot.lun.identity();
    Ok(match code {
        0x00 => page(0x00, &[0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2]),
        0x80 => page(0x80, hex_serial(&id).as_bytes()),
        0x83 => {
            let mut body = Vec::new();
            // NAA 6 (IEEE registered extended), company ID 0, 100 bits from the identity.
            let mut naa = [0u8; 16];
            naa[0] = 0x60;
            naa[3] = id[0] & 0x0f;
            naa[4..16].copy_from_slice(&id[1..13]);
            body.extend(designator(0x01, 0x03, &naa));
            // T10 vendor ID: vendor + serial.
            let mut t10 = VENDOR.to_vec();
            t10.extend_from_slice(hex_serial(&id).as_bytes());
            body.extend(designator(0x02, 0x01, &t10));
            // Relative target port 1 (iSCSI, target port association).
            body.extend(designator(0x51, 0x94, &[0, 0, 0, 1]));
            // SCSI name string of the target device, NUL-padded to a multiple of 4.
            let mut name = req.target.config.name.as_bytes().to_vec();
            name.push(0);
            while !name.len().is_multiple_of(4) {
                name.push(0);
            }
            name.truncate(252);
            body.extend(designator(0x53, 0xa8, &name));
            page(0x83, &body)
        }
        0xb0 => {
            let mut b = vec![0u8; 60];
            b[0] = 0x01; // WSNZ
            b[1] = MAX_CAW_BLOCKS as u8;
            let gran = (slot.lun.preferred_block_size() / bs).max(1);
            b[2..4].copy_from_slice(&(gran.min(0xffff) as u16).to_be_bytes());
            let max_blocks = (MAX_TRANSFER_BYTES / bs as u64) as u32;
            b[4..8].copy_from_slice(&max_blocks.to_be_bytes());
            b[8..12].copy_from_slice(&max_blocks.to_be_bytes());
            b[16..20].copy_from_slice(&MAX_UNMAP_BLOCKS.to_be_bytes());
            b[20..24].copy_from_slice(&MAX_UNMAP_DESCRIPTORS.to_be_bytes());
            b[24..28].copy_from_slice(&gran.to_be_bytes());
            b[28..32].copy_from_slice(&0x8000_0000u32.to_be_bytes()); // UGAVALID, alignment 0
            b[32..40].copy_from_slice(&(MAX_UNMAP_BLOCKS as u64).to_be_bytes());
            page(0xb0, &b)
        }
        0xb1 => {
            let mut b = vec![0u8; 60];
            b[1] = 1; // non-rotating medium
            page(0xb1, &b)
        }
        0xb2 => {
            // LBPU, LBPWS, LBPWS10, LBPRZ; provisioning type 2: thin.
            page(0xb2, &[0, 0x80 | 0x40 | 0x20 | 0x04, 0x02, 0])
        }
        _ => return Err(sense::INVALID_FIELD_IN_CDB),
    })
}

/// (opcode, service action, CDB length) of every command we serve.
const SUPPORTED: &[(u8, Option<u16>, u16)] = &[
    (0x00, None, 6),
    (0x03, None, 6),
    (0x08, None, 6),
    (0x0a, None, 6),
    (0x12, None, 6),
    (0x15, None, 6),
    (0x16, None, 6),
    (0x17, None, 6),
    (0x1a, None, 6),
    (0x1b, None, 6),
    (0x1e, None, 6),
    (0x25, None, 10),
    (0x28, None, 10),
    (0x2a, None, 10),
    (0x2e, None, 10),
    (0x2f, None, 10),
    (0x34, None, 10),
    (0x35, None, 10),
    (0x41, None, 10),
    (0x42, None, 10),
    (0x55, None, 10),
    (0x56, None, 10),
    (0x57, None, 10),
    (0x5a, None, 10),
    (0x5e, Some(0), 10),
    (0x5e, Some(1), 10),
    (0x5e, Some(2), 10),
    (0x5f, Some(0), 10),
    (0x5f, Some(1), 10),
    (0x5f, Some(2), 10),
    (0x5f, Some(3), 10),
    (0x5f, Some(4), 10),
    (0x5f, Some(6), 10),
    (0x88, None, 16),
    (0x89, None, 16),
    (0x8a, None, 16),
    (0x8b, None, 16),
    (0x8e, None, 16),
    (0x8f, None, 16),
    (0x90, None, 16),
    (0x91, None, 16),
    (0x93, None, 16),
    (0x9e, Some(0x10), 16),
    (0x9e, Some(0x12), 16),
    (0xa0, None, 12),
    (0xa3, Some(0x0c), 12),
    (0xa8, None, 12),
    (0xaa, None, 12),
    (0xae, None, 12),
    (0xaf, None, 12),
];

fn usage(op: u8, sa: Option<u16>, len: u16) -> Vec<u8> {
    let mut u = vec![0xffu8; len as usize];
    u[0] = op;
    if let Some(sa) = sa {
        u[1] = 0xe0 | sa as u8;
    }
    if let Some(last) = u.last_mut() {
        *last = 0x07;
    }
    u
}

const TIMEOUTS: [u8; 12] = [0, 10, 0, 0, 0, 0, 0, 30, 0, 0, 0, 30];

pub fn report_opcodes(req: &Request) -> Cmd {
    let c = Cdb(req.cdb);
    let (rctd, opts, op, sa, alloc) = (c.b(2) & 0x80 != 0, c.b(2) & 0x07, c.b(3), c.u16(4), c.u32(6) as usize);
    let mut d = Vec::new();
    match opts {
        0 => {
            d.extend_from_slice(&[0; 4]);
            for &(o, s, len) in SUPPORTED {
                let mut e = [0u8; 8];
                e[0] = o;
                e[2..4].copy_from_slice(&s.unwrap_or(0).to_be_bytes());
                e[5] = if s.is_some() { 0x01 } else { 0 } | if rctd { 0x02 } else { 0 };
                e[6..8].copy_from_slice(&len.to_be_bytes());
                d.extend_from_slice(&e);
                if rctd {
                    d.extend_from_slice(&TIMEOUTS);
                }
            }
            let n = (d.len() - 4) as u32;
            d[..4].copy_from_slice(&n.to_be_bytes());
        }
        1..=3 => {
            let has_sa = SUPPORTED.iter().any(|&(o, s, _)| o == op && s.is_some());
            // Option 1 names a command without service actions; 2 one with.
            if (opts == 1 && has_sa) || (opts == 2 && !has_sa && SUPPORTED.iter().any(|&(o, _, _)| o == op)) {
                return Err(sense::invalid_cdb_field(2));
            }
            let found = SUPPORTED
                .iter()
                .find(|&&(o, s, _)| o == op && (opts == 1 || s == Some(sa) || (opts == 3 && s.is_none() && sa == 0)));
            match found {
                Some(&(o, s, len)) => {
                    d.extend_from_slice(&[0, 0x03 | if rctd { 0x80 } else { 0 }]);
                    d.extend_from_slice(&len.to_be_bytes());
                    d.extend(usage(o, s, len));
                    if rctd {
                        d.extend_from_slice(&TIMEOUTS);
                    }
                }
                None => d.extend_from_slice(&[0, 0x01, 0, 0]),
            }
        }
        _ => return Err(sense::invalid_cdb_field(2)),
    }
    Ok(Outcome::data(d, alloc))
}
