//! iSCSI PDUs (RFC 7143 §11): the 48-byte basic header segment, additional header
//! segments, the data segment with its padding, and the optional CRC32C digests.
//!
//! Decoding never trusts a length: the AHS is at most 1020 bytes by construction (one
//! byte of 4-byte words), and the data segment is refused before it is read when it is
//! longer than the limit the caller passes (the negotiated MaxRecvDataSegmentLength, or
//! the login-phase default). A refused length ends the connection: after it the stream
//! cannot be re-synchronised.

use std::io::{self, Read, Write};

pub const BHS_LEN: usize = 48;

/// Initiator opcodes.
pub const OP_NOP_OUT: u8 = 0x00;
pub const OP_SCSI_CMD: u8 = 0x01;
pub const OP_TMF_REQ: u8 = 0x02;
pub const OP_LOGIN_REQ: u8 = 0x03;
pub const OP_TEXT_REQ: u8 = 0x04;
pub const OP_DATA_OUT: u8 = 0x05;
pub const OP_LOGOUT_REQ: u8 = 0x06;
pub const OP_SNACK: u8 = 0x10;
/// Target opcodes.
pub const OP_NOP_IN: u8 = 0x20;
pub const OP_SCSI_RESP: u8 = 0x21;
pub const OP_TMF_RESP: u8 = 0x22;
pub const OP_LOGIN_RESP: u8 = 0x23;
pub const OP_TEXT_RESP: u8 = 0x24;
pub const OP_DATA_IN: u8 = 0x25;
pub const OP_LOGOUT_RESP: u8 = 0x26;
pub const OP_R2T: u8 = 0x31;
pub const OP_REJECT: u8 = 0x3f;

/// Reject reasons (§11.17.1).
pub const REJECT_DATA_DIGEST: u8 = 0x02;
pub const REJECT_PROTOCOL_ERROR: u8 = 0x04;
pub const REJECT_NOT_SUPPORTED: u8 = 0x05;
pub const REJECT_INVALID_FIELD: u8 = 0x09;

/// The reserved tag: "no task" / "no transfer".
pub const RESERVED_TAG: u32 = 0xffff_ffff;

/// A PDU: its header (BHS), AHS and data segment (without padding or digests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pdu {
    pub bhs: [u8; BHS_LEN],
    pub ahs: Vec<u8>,
    pub data: Vec<u8>,
}

#[derive(Debug)]
pub enum PduError {
    Io(io::Error),
    /// The data segment is longer than the receiver accepts (a hostile or broken peer).
    TooLong {
        len: usize,
        max: usize,
    },
    HeaderDigest,
    /// The data digest failed: the header is good, so the PDU can be rejected and the
    /// connection kept (at ERL 0 we close it anyway).
    DataDigest(Box<Pdu>),
}

impl From<io::Error> for PduError {
    fn from(e: io::Error) -> Self {
        PduError::Io(e)
    }
}

impl std::fmt::Display for PduError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PduError::Io(e) => write!(f, "{e}"),
            PduError::TooLong { len, max } => write!(f, "data segment of {len} bytes, more than {max}"),
            PduError::HeaderDigest => write!(f, "header digest mismatch"),
            PduError::DataDigest(_) => write!(f, "data digest mismatch"),
        }
    }
}

pub fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
pub fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
pub fn be64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}
pub fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
pub fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
pub fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

fn pad4(n: usize) -> usize {
    (4 - n % 4) % 4
}

/// The iSCSI CRC32C digest of `parts`, in the little-endian byte order the wire uses.
pub fn digest(parts: &[&[u8]]) -> [u8; 4] {
    let mut crc = 0u32;
    for p in parts {
        crc = crc32c::crc32c_append(crc, p);
    }
    crc.to_le_bytes()
}

impl Pdu {
    pub fn new(opcode: u8) -> Pdu {
        let mut bhs = [0u8; BHS_LEN];
        bhs[0] = opcode & 0x3f;
        Pdu { bhs, ahs: Vec::new(), data: Vec::new() }
    }

    pub fn opcode(&self) -> u8 {
        self.bhs[0] & 0x3f
    }
    pub fn immediate(&self) -> bool {
        self.bhs[0] & 0x40 != 0
    }
    pub fn flags(&self) -> u8 {
        self.bhs[1]
    }
    pub fn final_bit(&self) -> bool {
        self.bhs[1] & 0x80 != 0
    }
    pub fn lun(&self) -> u64 {
        be64(&self.bhs, 8)
    }
    pub fn itt(&self) -> u32 {
        be32(&self.bhs, 16)
    }
    pub fn field32(&self, at: usize) -> u32 {
        be32(&self.bhs, at)
    }
    pub fn set32(&mut self, at: usize, v: u32) {
        put32(&mut self.bhs, at, v)
    }
    /// The data segment length the header declares.
    pub fn declared_data_len(bhs: &[u8; BHS_LEN]) -> usize {
        (bhs[5] as usize) << 16 | (bhs[6] as usize) << 8 | bhs[7] as usize
    }

    /// Encode for the wire: lengths filled in from `ahs`/`data`, padding and digests added.
    pub fn encode(&self, header_digest: bool, data_digest: bool) -> Vec<u8> {
        assert!(self.ahs.len().is_multiple_of(4) && self.ahs.len() <= 255 * 4, "AHS is whole words, at most 255");
        assert!(self.data.len() < 1 << 24, "data segment length fits 24 bits");
        let mut bhs = self.bhs;
        bhs[4] = (self.ahs.len() / 4) as u8;
        let dl = self.data.len();
        bhs[5] = (dl >> 16) as u8;
        bhs[6] = (dl >> 8) as u8;
        bhs[7] = dl as u8;
        let mut out = Vec::with_capacity(BHS_LEN + self.ahs.len() + dl + 12);
        out.extend_from_slice(&bhs);
        out.extend_from_slice(&self.ahs);
        if header_digest {
            let d = digest(&[&out]);
            out.extend_from_slice(&d);
        }
        if dl > 0 {
            let start = out.len();
            out.extend_from_slice(&self.data);
            out.resize(out.len() + pad4(dl), 0);
            if data_digest {
                let d = digest(&[&out[start..]]);
                out.extend_from_slice(&d);
            }
        }
        out
    }

    /// Decode one PDU from a complete buffer (the fuzz target's entry; `read` is the
    /// stream's). Returns the PDU and the bytes it took.
    pub fn decode(
        buf: &[u8],
        header_digest: bool,
        data_digest: bool,
        max_data: usize,
    ) -> Result<(Pdu, usize), PduError> {
        let mut r = buf;
        let pdu = Pdu::read(&mut r, header_digest, data_digest, max_data)?;
        Ok((pdu, buf.len() - r.len()))
    }

    /// Read one PDU, refusing a data segment longer than `max_data` before reading it.
    pub fn read(r: &mut impl Read, header_digest: bool, data_digest: bool, max_data: usize) -> Result<Pdu, PduError> {
        let mut bhs = [0u8; BHS_LEN];
        r.read_exact(&mut bhs)?;
        let ahs_len = bhs[4] as usize * 4;
        let mut ahs = vec![0u8; ahs_len];
        r.read_exact(&mut ahs)?;
        if header_digest {
            let mut d = [0u8; 4];
            r.read_exact(&mut d)?;
            if d != digest(&[&bhs, &ahs]) {
                return Err(PduError::HeaderDigest);
            }
        }
        let dl = Pdu::declared_data_len(&bhs);
        if dl > max_data {
            return Err(PduError::TooLong { len: dl, max: max_data });
        }
        let mut data = vec![0u8; dl + pad4(dl)];
        r.read_exact(&mut data)?;
        let mut bad_data = false;
        if data_digest && dl > 0 {
            let mut d = [0u8; 4];
            r.read_exact(&mut d)?;
            bad_data = d != digest(&[&data]);
        }
        data.truncate(dl);
        let pdu = Pdu { bhs, ahs, data };
        if bad_data {
            return Err(PduError::DataDigest(Box::new(pdu)));
        }
        Ok(pdu)
    }

    pub fn write(&self, w: &mut impl Write, header_digest: bool, data_digest: bool) -> io::Result<()> {
        w.write_all(&self.encode(header_digest, data_digest))
    }
}

/// The fields of a SCSI Command PDU (§11.3).
#[derive(Clone, Debug)]
pub struct ScsiCommand {
    pub immediate: bool,
    pub final_bit: bool,
    pub read: bool,
    pub write: bool,
    pub attr: u8,
    pub lun: u64,
    pub itt: u32,
    pub edtl: u32,
    pub cmdsn: u32,
    pub exp_statsn: u32,
    /// The CDB: 16 bytes of the BHS, extended by an Extended-CDB AHS when present.
    pub cdb: Vec<u8>,
}

impl ScsiCommand {
    /// Decode a SCSI Command header; `None` if its AHS is malformed.
    pub fn parse(p: &Pdu) -> Option<ScsiCommand> {
        let mut cdb = p.bhs[32..48].to_vec();
        // AHS: 2-byte length, 1-byte type, then the specific bytes.
        let mut at = 0;
        while at + 4 <= p.ahs.len() {
            let len = be16(&p.ahs, at) as usize;
            let ty = p.ahs[at + 2];
            let end = at.checked_add(3 + len)?;
            if end > p.ahs.len() {
                return None;
            }
            if ty == 1 {
                // Extended CDB: one reserved byte then the CDB bytes past the first 16.
                if len < 1 {
                    return None;
                }
                cdb.extend_from_slice(&p.ahs[at + 4..end]);
            }
            at = end + pad4(3 + len);
        }
        Some(ScsiCommand {
            immediate: p.immediate(),
            final_bit: p.bhs[1] & 0x80 != 0,
            read: p.bhs[1] & 0x40 != 0,
            write: p.bhs[1] & 0x20 != 0,
            attr: p.bhs[1] & 0x07,
            lun: p.lun(),
            itt: p.itt(),
            edtl: p.field32(20),
            cmdsn: p.field32(24),
            exp_statsn: p.field32(28),
            cdb,
        })
    }
}

/// The LUN number from the 8-byte LUN field (SAM-5 single-level: peripheral or flat
/// addressing); `None` for formats we do not serve.
pub fn lun_number(field: u64) -> Option<u16> {
    let b0 = (field >> 56) as u8;
    let b1 = (field >> 48) as u8;
    if field & 0x0000_ffff_ffff_ffff != 0 {
        return None;
    }
    match b0 >> 6 {
        0 => Some(((b0 as u16 & 0x3f) << 8) | b1 as u16),
        1 => Some(((b0 as u16 & 0x3f) << 8) | b1 as u16),
        _ => None,
    }
}

/// The 8-byte LUN field for LUN `n` (peripheral addressing below 256, flat above).
pub fn lun_field(n: u16) -> u64 {
    if n < 256 {
        (n as u64) << 48
    } else {
        ((0x4000 | (n & 0x3fff)) as u64) << 48
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_digests_and_padding() {
        for (hd, dd) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut p = Pdu::new(OP_SCSI_CMD);
            p.bhs[1] = 0xa0;
            p.set32(16, 0x1234_5678);
            p.data = b"hello".to_vec();
            let wire = p.encode(hd, dd);
            assert_eq!(wire.len(), 48 + 8 + if hd { 4 } else { 0 } + if dd { 4 } else { 0 });
            let (q, used) = Pdu::decode(&wire, hd, dd, 8192).unwrap();
            assert_eq!(used, wire.len());
            assert_eq!(q.data, b"hello");
            assert_eq!(q.itt(), 0x1234_5678);
            assert_eq!(q.opcode(), OP_SCSI_CMD);
        }
    }

    #[test]
    fn digest_is_the_rfc_crc32c() {
        // RFC 3720 B.4: 32 bytes of zeros have CRC aa 36 91 8a (as written on the wire).
        assert_eq!(digest(&[&[0u8; 32]]), [0xaa, 0x36, 0x91, 0x8a]);
    }

    #[test]
    fn damaged_digests_and_long_segments_are_refused() {
        let mut p = Pdu::new(OP_NOP_OUT);
        p.data = vec![7; 100];
        let mut wire = p.encode(true, true);
        assert!(matches!(Pdu::decode(&wire, true, true, 99), Err(PduError::TooLong { len: 100, max: 99 })));
        let n = wire.len();
        wire[n - 5] ^= 1;
        assert!(matches!(Pdu::decode(&wire, true, true, 8192), Err(PduError::DataDigest(_))));
        wire[3] ^= 1;
        assert!(matches!(Pdu::decode(&wire, true, true, 8192), Err(PduError::HeaderDigest)));
    }

    #[test]
    fn extended_cdb_and_lun_fields() {
        let mut p = Pdu::new(OP_SCSI_CMD);
        p.bhs[32] = 0x7f;
        p.ahs = vec![0, 17, 1, 0];
        p.ahs.extend_from_slice(&[9u8; 16]);
        p.ahs.resize(20, 0);
        p.ahs.resize(24, 0);
        let c = ScsiCommand::parse(&p).unwrap();
        assert_eq!(c.cdb.len(), 32);
        assert_eq!(c.cdb[16], 9);
        p.ahs = vec![0, 200, 1, 0];
        assert!(ScsiCommand::parse(&p).is_none(), "an AHS longer than the segment");
        assert_eq!(lun_number(lun_field(3)), Some(3));
        assert_eq!(lun_number(lun_field(300)), Some(300));
        assert_eq!(lun_number(1), None);
    }
}
