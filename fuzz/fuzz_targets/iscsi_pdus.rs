//! The iSCSI decoders on arbitrary bytes: PDUs (with and without digests), the login
//! state machine (text keys, CHAP), SCSI Command headers and the SCSI device server's CDB
//! and parameter-list decoding over a small in-memory LUN. Errors allowed, panics not.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, Mutex};
use strata_iscsi::login::{LoginEnv, LoginState, Step};
use strata_iscsi::pdu::{self, Pdu, ScsiCommand};
use strata_iscsi::scsi::{self, Nexus};
use strata_iscsi::{text, Chap, TargetConfig, TargetTable};
use strata_lun::{check_range, Extent, Lun, LunResult};

/// 64 KiB of memory, 512-byte blocks.
struct MemLun(Mutex<Vec<u8>>);

impl Lun for MemLun {
    fn size(&self) -> u64 {
        64 << 10
    }
    fn block_size(&self) -> u32 {
        512
    }
    fn preferred_block_size(&self) -> u32 {
        4096
    }
    fn read_only(&self) -> bool {
        false
    }
    fn identity(&self) -> [u8; 16] {
        [1; 16]
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> LunResult<()> {
        check_range(offset, buf.len() as u64, self.size())?;
        buf.copy_from_slice(&self.0.lock().unwrap()[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8], _fua: bool) -> LunResult<()> {
        check_range(offset, data.len() as u64, self.size())?;
        self.0.lock().unwrap()[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn flush(&self) -> LunResult<()> {
        Ok(())
    }
    fn trim(&self, offset: u64, len: u64, _fua: bool) -> LunResult<()> {
        self.write_zeroes(offset, len, true, false)
    }
    fn write_zeroes(&self, offset: u64, len: u64, _may_trim: bool, _fua: bool) -> LunResult<()> {
        check_range(offset, len, self.size())?;
        self.0.lock().unwrap()[offset as usize..(offset + len) as usize].fill(0);
        Ok(())
    }
    fn extents(&self, offset: u64, len: u64) -> LunResult<Vec<Extent>> {
        check_range(offset, len.min(1), self.size())?;
        Ok(vec![Extent { len: len.min(self.size() - offset).max(1), hole: false }])
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let (hd, dd) = (flags & 1 != 0, flags & 2 != 0);
    let _ = text::parse(rest);
    let targets = TargetTable::new();
    let lun: Arc<dyn Lun> = Arc::new(MemLun(Mutex::new(vec![0; 64 << 10])));
    let mut tc = TargetConfig::new("iqn.2026-01.org.strata:fuzz", vec![lun]);
    if flags & 4 != 0 {
        tc.chap = Some(Chap { user: "u".into(), secret: b"secret".to_vec(), mutual: Some(("t".into(), b"s2".to_vec())) });
    }
    targets.add(tc).expect("fuzz target");
    let target = targets.get("iqn.2026-01.org.strata:fuzz").expect("target");
    let env = LoginEnv {
        targets: &targets,
        discovery_chap: None,
        peer: "127.0.0.1".parse().expect("address"),
        window: 8,
        tsih: 1,
    };
    let mut login = LoginState::default();
    let nexus = Nexus { initiator: "iqn.fuzz".into(), isid: [0; 6] };
    let mut buf = rest;
    while let Ok((p, used)) = Pdu::decode(buf, hd, dd, 16 << 10) {
        buf = &buf[used..];
        let _ = p.encode(hd, dd);
        match login.handle(&p, &env) {
            Step::Reply(r) | Step::Fail(r) | Step::Done(r, _) => {
                let _ = r.encode(false, false);
            }
        }
        if let Some(cmd) = ScsiCommand::parse(&p) {
            let o = scsi::execute(&scsi::Request {
                cdb: &cmd.cdb,
                data_out: &p.data,
                edtl: cmd.edtl,
                target: &target,
                lun: pdu::lun_number(cmd.lun),
                nexus: &nexus,
            });
            if let Some(s) = o.sense {
                let _ = s.encode();
            }
        }
    }
});
