//! A LUN in memory, 4 KiB blocks of which all-zero ones are reported as holes: for the
//! fuzz target and unit tests that want no files.

use std::sync::Mutex;
use strata_lun::{check_range, Extent, Lun, LunError, LunErrorKind, LunResult};

pub struct MemLun {
    data: Mutex<Vec<u8>>,
    block_size: u32,
}

const MAP_BLOCK: u64 = 4096;

impl MemLun {
    /// A zeroed LUN of `size` bytes (a multiple of `block_size`, 512 or 4096).
    pub fn new(size: u64, block_size: u32) -> MemLun {
        assert!(block_size == 512 || block_size == 4096, "block size 512 or 4096");
        assert_eq!(size % u64::from(block_size), 0, "size a multiple of the block size");
        MemLun { data: Mutex::new(vec![0; size as usize]), block_size }
    }

    fn zero(&self, offset: u64, len: u64) -> LunResult<()> {
        let mut d = self.data.lock().expect("memory LUN");
        check_range(offset, len, d.len() as u64)?;
        d[offset as usize..(offset + len) as usize].fill(0);
        Ok(())
    }
}

impl Lun for MemLun {
    fn size(&self) -> u64 {
        self.data.lock().expect("memory LUN").len() as u64
    }
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn preferred_block_size(&self) -> u32 {
        4096
    }
    fn read_only(&self) -> bool {
        false
    }
    fn identity(&self) -> [u8; 16] {
        [0x4d; 16]
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> LunResult<()> {
        let d = self.data.lock().expect("memory LUN");
        check_range(offset, buf.len() as u64, d.len() as u64)?;
        buf.copy_from_slice(&d[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8], _fua: bool) -> LunResult<()> {
        let mut d = self.data.lock().expect("memory LUN");
        check_range(offset, data.len() as u64, d.len() as u64)?;
        d[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn flush(&self) -> LunResult<()> {
        Ok(())
    }
    fn trim(&self, offset: u64, len: u64, _fua: bool) -> LunResult<()> {
        self.zero(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64, _may_trim: bool, _fua: bool) -> LunResult<()> {
        self.zero(offset, len)
    }
    fn extents(&self, offset: u64, len: u64) -> LunResult<Vec<Extent>> {
        let d = self.data.lock().expect("memory LUN");
        check_range(offset, len, d.len() as u64)?;
        if len == 0 {
            return Err(LunError::new(LunErrorKind::Invalid, "empty range"));
        }
        let mut out: Vec<Extent> = Vec::new();
        let mut at = offset;
        while at < offset + len {
            let end = ((at / MAP_BLOCK + 1) * MAP_BLOCK).min(offset + len);
            let hole = d[at as usize..end as usize].iter().all(|&b| b == 0);
            match out.last_mut() {
                Some(e) if e.hole == hole => e.len += end - at,
                _ => out.push(Extent { len: end - at, hole }),
            }
            at = end;
        }
        Ok(out)
    }
}
