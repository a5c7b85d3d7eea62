//! SCSI status and fixed-format sense data (SPC-4 §4.5.3), and the mapping of LUN errors
//! to sense keys and additional sense codes.

use strata_lun::{LunError, LunErrorKind};

pub const GOOD: u8 = 0x00;
pub const CHECK_CONDITION: u8 = 0x02;
pub const CONDITION_MET: u8 = 0x04;
pub const RESERVATION_CONFLICT: u8 = 0x18;

pub const NO_SENSE: u8 = 0x0;
pub const NOT_READY: u8 = 0x2;
pub const MEDIUM_ERROR: u8 = 0x3;
pub const ILLEGAL_REQUEST: u8 = 0x5;
pub const UNIT_ATTENTION: u8 = 0x6;
pub const DATA_PROTECT: u8 = 0x7;
pub const ABORTED_COMMAND: u8 = 0xb;
pub const MISCOMPARE: u8 = 0xe;

/// A sense key with its additional sense code and qualifier, and the INFORMATION field
/// when one applies (MISCOMPARE's offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sense {
    pub key: u8,
    pub asc: u8,
    pub ascq: u8,
    pub info: Option<u32>,
    /// The CDB byte in error (sense-key specific field pointer, SKSV and C/D set).
    pub cdb_field: Option<u16>,
}

impl Sense {
    pub const fn new(key: u8, asc: u8, ascq: u8) -> Sense {
        Sense { key, asc, ascq, info: None, cdb_field: None }
    }

    /// Fixed-format sense data, 18 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = vec![0u8; 18];
        s[0] = 0x70;
        if let Some(info) = self.info {
            s[0] |= 0x80;
            s[3..7].copy_from_slice(&info.to_be_bytes());
        }
        s[2] = self.key & 0x0f;
        s[7] = 10;
        if let Some(f) = self.cdb_field {
            s[15] = 0x80 | 0x40;
            s[16..18].copy_from_slice(&f.to_be_bytes());
        }
        s[12] = self.asc;
        s[13] = self.ascq;
        s
    }
}

pub const INVALID_OPCODE: Sense = Sense::new(ILLEGAL_REQUEST, 0x20, 0x00);
/// INVALID FIELD IN CDB pointing at CDB byte `byte`.
pub const fn invalid_cdb_field(byte: u16) -> Sense {
    Sense { cdb_field: Some(byte), ..INVALID_FIELD_IN_CDB }
}

pub const LBA_OUT_OF_RANGE: Sense = Sense::new(ILLEGAL_REQUEST, 0x21, 0x00);
pub const INVALID_FIELD_IN_CDB: Sense = Sense::new(ILLEGAL_REQUEST, 0x24, 0x00);
pub const LUN_NOT_SUPPORTED: Sense = Sense::new(ILLEGAL_REQUEST, 0x25, 0x00);
pub const INVALID_FIELD_IN_PARAM: Sense = Sense::new(ILLEGAL_REQUEST, 0x26, 0x00);
pub const PARAM_LIST_LENGTH_ERROR: Sense = Sense::new(ILLEGAL_REQUEST, 0x1a, 0x00);
pub const INVALID_FIELD_IN_IU: Sense = Sense::new(ILLEGAL_REQUEST, 0x0e, 0x03);
pub const SAVING_NOT_SUPPORTED: Sense = Sense::new(ILLEGAL_REQUEST, 0x39, 0x00);
pub const INVALID_RELEASE: Sense = Sense::new(ILLEGAL_REQUEST, 0x26, 0x04);
pub const WRITE_PROTECTED: Sense = Sense::new(DATA_PROTECT, 0x27, 0x00);
pub const SPACE_ALLOCATION_FAILED: Sense = Sense::new(DATA_PROTECT, 0x27, 0x07);
pub const UNRECOVERED_READ_ERROR: Sense = Sense::new(MEDIUM_ERROR, 0x11, 0x00);
pub const WRITE_ERROR: Sense = Sense::new(MEDIUM_ERROR, 0x0c, 0x00);
pub const MISCOMPARE_DURING_VERIFY: Sense = Sense::new(MISCOMPARE, 0x1d, 0x00);
pub const DATA_PHASE_ERROR: Sense = Sense::new(ABORTED_COMMAND, 0x4b, 0x00);
pub const RESET_OCCURRED: Sense = Sense::new(UNIT_ATTENTION, 0x29, 0x00);
pub const CAPACITY_CHANGED: Sense = Sense::new(UNIT_ATTENTION, 0x2a, 0x09);
pub const INTERNAL_TARGET_FAILURE: Sense = Sense::new(ABORTED_COMMAND, 0x44, 0x00);

/// The sense for a LUN error; `write` picks WRITE ERROR over UNRECOVERED READ ERROR.
pub fn from_lun(e: &LunError, write: bool) -> Sense {
    match e.kind {
        LunErrorKind::Io if write => WRITE_ERROR,
        LunErrorKind::Io => UNRECOVERED_READ_ERROR,
        LunErrorKind::NoSpace => SPACE_ALLOCATION_FAILED,
        LunErrorKind::ReadOnly => WRITE_PROTECTED,
        LunErrorKind::OutOfRange => LBA_OUT_OF_RANGE,
        LunErrorKind::Invalid => INVALID_FIELD_IN_CDB,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_format() {
        let s = LBA_OUT_OF_RANGE.encode();
        assert_eq!(s.len(), 18);
        assert_eq!((s[0], s[2], s[7], s[12], s[13]), (0x70, 5, 10, 0x21, 0));
        let m = Sense { info: Some(513), ..MISCOMPARE_DURING_VERIFY }.encode();
        assert_eq!((m[0], m[2], &m[3..7]), (0xf0, 0xe, &513u32.to_be_bytes()[..]));
        let nospace = from_lun(&LunError::new(LunErrorKind::NoSpace, "full"), true);
        assert_eq!((nospace.key, nospace.asc, nospace.ascq), (DATA_PROTECT, 0x27, 0x07));
    }
}
