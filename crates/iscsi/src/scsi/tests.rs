//! The device server against a LUN in memory that can be made to fail: CDB decoding,
//! range checks, and the sense data each LUN error maps to.

use super::*;
use crate::targets::{TargetConfig, TargetTable};
use std::sync::{Arc, Mutex};
use strata_lun::{check_range, Extent, Lun, LunError, LunErrorKind, LunResult};

struct MemLun {
    data: Mutex<Vec<u8>>,
    read_only: bool,
    fail: Mutex<Option<LunErrorKind>>,
}

impl MemLun {
    fn failing(&self) -> LunResult<()> {
        match *self.fail.lock().unwrap() {
            Some(k) => Err(LunError::new(k, "injected")),
            None => Ok(()),
        }
    }
}

impl Lun for MemLun {
    fn size(&self) -> u64 {
        self.data.lock().unwrap().len() as u64
    }
    fn block_size(&self) -> u32 {
        512
    }
    fn preferred_block_size(&self) -> u32 {
        4096
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn identity(&self) -> [u8; 16] {
        [3; 16]
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> LunResult<()> {
        self.failing()?;
        check_range(offset, buf.len() as u64, self.size())?;
        buf.copy_from_slice(&self.data.lock().unwrap()[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8], _fua: bool) -> LunResult<()> {
        self.failing()?;
        check_range(offset, data.len() as u64, self.size())?;
        self.data.lock().unwrap()[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn flush(&self) -> LunResult<()> {
        self.failing()
    }
    fn trim(&self, offset: u64, len: u64, fua: bool) -> LunResult<()> {
        self.write_zeroes(offset, len, true, fua)
    }
    fn write_zeroes(&self, offset: u64, len: u64, _may_trim: bool, _fua: bool) -> LunResult<()> {
        self.failing()?;
        check_range(offset, len, self.size())?;
        self.data.lock().unwrap()[offset as usize..(offset + len) as usize].fill(0);
        Ok(())
    }
    fn extents(&self, offset: u64, len: u64) -> LunResult<Vec<Extent>> {
        check_range(offset, len, self.size())?;
        Ok(vec![Extent { len, hole: false }])
    }
}

fn setup(read_only: bool) -> (Arc<MemLun>, Arc<crate::targets::Target>) {
    let lun = Arc::new(MemLun { data: Mutex::new(vec![0; 1 << 20]), read_only, fail: Mutex::new(None) });
    let t = TargetTable::new();
    t.add(TargetConfig::new("iqn.2026-01.test:scsi", vec![lun.clone() as Arc<dyn Lun>])).unwrap();
    (lun, t.get("iqn.2026-01.test:scsi").unwrap())
}

fn run(t: &crate::targets::Target, cdb: &[u8], data_out: &[u8], edtl: u32) -> Outcome {
    let nexus = Nexus { initiator: "iqn.i".into(), isid: [0; 6] };
    execute(&Request { cdb, data_out, edtl, target: t, lun: Some(0), nexus: &nexus })
}

fn sense_of(o: &Outcome) -> (u8, u8, u8) {
    let s = o.sense.expect("sense data");
    (s.key, s.asc, s.ascq)
}

fn write10(lba: u32, blocks: u16) -> Vec<u8> {
    let mut c = vec![0x2a, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    c[2..6].copy_from_slice(&lba.to_be_bytes());
    c[7..9].copy_from_slice(&blocks.to_be_bytes());
    c
}

#[test]
fn read_write_and_range() {
    let (_, t) = setup(false);
    let data = vec![0xab; 1024];
    assert_eq!(run(&t, &write10(10, 2), &data, 1024).status, sense::GOOD);
    let mut read16 = vec![0x88; 16];
    read16[1..].fill(0);
    read16[2..10].copy_from_slice(&10u64.to_be_bytes());
    read16[10..14].copy_from_slice(&2u32.to_be_bytes());
    let o = run(&t, &read16, &[], 1024);
    assert_eq!((o.status, &o.data[..]), (sense::GOOD, &data[..]));
    // 2048 blocks of 512 bytes: LBA 2047 + 2 blocks is past the end.
    assert_eq!(sense_of(&run(&t, &write10(2047, 2), &data, 1024)), (5, 0x21, 0));
    assert_eq!(sense_of(&run(&t, &[0x28, 0xe0, 0, 0, 0, 0, 0, 0, 1, 0], &[], 512)), (5, 0x24, 0), "RDPROTECT");
    assert_eq!(sense_of(&run(&t, &[0xd9, 0, 0, 0, 0, 0], &[], 0)), (5, 0x20, 0), "unknown opcode");
    assert_eq!(sense_of(&run(&t, &[0x28, 0, 0], &[], 0)), (5, 0x24, 0), "short CDB");
    let nexus = Nexus { initiator: "iqn.i".into(), isid: [0; 6] };
    let o = execute(&Request { cdb: &[0x00; 6], data_out: &[], edtl: 0, target: &t, lun: Some(5), nexus: &nexus });
    assert_eq!(sense_of(&o), (5, 0x25, 0), "no LUN 5");
}

#[test]
fn commands_are_counted_by_class() {
    let lun = Arc::new(MemLun { data: Mutex::new(vec![0; 1 << 20]), read_only: false, fail: Mutex::new(None) });
    let stats = Arc::new(strata_stats::ProtocolStats::default());
    let table = TargetTable::new();
    let mut config = TargetConfig::new("iqn.2026-01.test:counted", vec![lun as Arc<dyn Lun>]);
    config.stats = vec![stats.clone()];
    table.add(config).unwrap();
    let t = table.get("iqn.2026-01.test:counted").unwrap();
    let data = vec![0xab; 1024];
    assert_eq!(run(&t, &write10(10, 2), &data, 1024).status, sense::GOOD);
    assert_ne!(run(&t, &write10(2047, 2), &data, 1024).status, sense::GOOD, "past the end");
    assert_eq!(run(&t, &[0x28, 0, 0, 0, 0, 10, 0, 0, 2, 0], &[], 1024).status, sense::GOOD, "READ(10)");
    assert_eq!(run(&t, &[0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[], 0).status, sense::GOOD, "SYNCHRONIZE CACHE");
    let mut unmap = vec![0u8; 24];
    unmap[1] = 22;
    unmap[3] = 16;
    unmap[8..16].copy_from_slice(&0u64.to_be_bytes());
    unmap[16..20].copy_from_slice(&8u32.to_be_bytes());
    assert_eq!(run(&t, &[0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0], &unmap, 24).status, sense::GOOD, "UNMAP");
    assert_eq!(run(&t, &[0x00; 6], &[], 0).status, sense::GOOD, "TEST UNIT READY");
    let get = |c| {
        let s = stats.snapshot(c);
        (s.ops, s.bytes, s.errors, s.latency.count())
    };
    assert_eq!(get(OpClass::Write), (2, 1024, 1, 2));
    assert_eq!(get(OpClass::Read), (1, 1024, 0, 1));
    assert_eq!(get(OpClass::Sync), (1, 0, 0, 1));
    assert_eq!(get(OpClass::Trim), (1, 0, 0, 1));
    assert_eq!(get(OpClass::Other), (1, 0, 0, 1));
}

#[test]
fn lun_errors_map_to_sense() {
    let (lun, t) = setup(false);
    let data = vec![1; 512];
    for (kind, want) in [
        (LunErrorKind::Io, (3, 0x0c, 0)),
        (LunErrorKind::NoSpace, (7, 0x27, 0x07)),
        (LunErrorKind::ReadOnly, (7, 0x27, 0)),
        (LunErrorKind::OutOfRange, (5, 0x21, 0)),
        (LunErrorKind::Invalid, (5, 0x24, 0)),
    ] {
        *lun.fail.lock().unwrap() = Some(kind);
        assert_eq!(sense_of(&run(&t, &write10(0, 1), &data, 512)), want, "{kind:?}");
    }
    *lun.fail.lock().unwrap() = Some(LunErrorKind::Io);
    assert_eq!(sense_of(&run(&t, &[0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0], &[], 512)), (3, 0x11, 0), "read: unrecovered");
    let (_, ro) = setup(true);
    assert_eq!(sense_of(&run(&ro, &write10(0, 1), &data, 512)), (7, 0x27, 0), "read-only LUN");
}

#[test]
fn compare_and_write_miscompare_reports_the_offset() {
    let (_, t) = setup(false);
    let mut caw = vec![0x89, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0];
    caw[2..10].copy_from_slice(&4u64.to_be_bytes());
    let mut data = vec![0u8; 1024];
    data[512..].fill(9);
    assert_eq!(run(&t, &caw, &data, 1024).status, sense::GOOD, "zeros compare equal");
    data[..512].fill(9);
    data[100] = 8;
    let o = run(&t, &caw, &data, 1024);
    assert_eq!(sense_of(&o), (0x0e, 0x1d, 0));
    assert_eq!(o.sense.unwrap().info, Some(100));
    assert_eq!(sense_of(&run(&t, &caw, &data[..1000], 1000)), (5, 0x24, 0), "wrong data length");
}

#[test]
fn reservations_conflict_other_nexuses() {
    let (_, t) = setup(false);
    let a = Nexus { initiator: "iqn.a".into(), isid: [0; 6] };
    let b = Nexus { initiator: "iqn.b".into(), isid: [0; 6] };
    let go = |n: &Nexus, cdb: &[u8], d: &[u8]| {
        execute(&Request { cdb, data_out: d, edtl: d.len() as u32, target: &t, lun: Some(0), nexus: n })
    };
    let mut params = vec![0u8; 24];
    params[8..16].copy_from_slice(&0x1234u64.to_be_bytes());
    let register = [0x5f, 0, 0, 0, 0, 0, 0, 0, 24, 0];
    assert_eq!(go(&a, &register, &params).status, sense::GOOD);
    let mut params = vec![0u8; 24];
    params[..8].copy_from_slice(&0x1234u64.to_be_bytes());
    let reserve_ea = [0x5f, 1, 3, 0, 0, 0, 0, 0, 24, 0];
    assert_eq!(go(&a, &reserve_ea, &params).status, sense::GOOD);
    let read = [0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0];
    assert_eq!(go(&a, &read, &[]).status, sense::GOOD, "the holder reads");
    assert_eq!(go(&b, &read, &[]).status, sense::RESERVATION_CONFLICT, "others may not");
    assert_eq!(go(&b, &[0x12, 0, 0, 0, 36, 0], &[]).status, sense::GOOD, "INQUIRY is always allowed");
}
