//! A heap buffer aligned to the allocation unit, as O_DIRECT requires.

use crate::format::UNIT_SIZE;
use std::alloc::{alloc_zeroed, dealloc, Layout};

pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes; `len` must be a multiple of the unit.
    pub fn zeroed(len: usize) -> AlignedBuf {
        assert!(len > 0 && (len as u64).is_multiple_of(UNIT_SIZE), "aligned buffers are whole units");
        let layout = Self::layout(len);
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, UNIT_SIZE as usize).expect("unit-aligned layout is valid")
    }

    /// `buf` in a new aligned buffer for an O_DIRECT write, zeros after it to the unit
    /// boundary. `buf` must not be empty.
    pub fn padded_copy(buf: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(Self::padded_len(buf.len()));
        b[..buf.len()].copy_from_slice(buf);
        b
    }

    /// `buf` copied into the front of this buffer with zeros after it to the unit boundary,
    /// and that padded front returned — the same bytes `padded_copy` would make, in a buffer
    /// kept for the next one. None if it does not fit.
    pub fn fill_padded(&mut self, buf: &[u8]) -> Option<&[u8]> {
        let len = Self::padded_len(buf.len());
        if len > self.len {
            return None;
        }
        self[..buf.len()].copy_from_slice(buf);
        self[buf.len()..len].fill(0);
        Some(&self[..len])
    }

    /// `len` rounded up to whole units.
    pub fn padded_len(len: usize) -> usize {
        len.next_multiple_of(UNIT_SIZE as usize)
    }

    pub fn is_aligned(buf: &[u8]) -> bool {
        (buf.as_ptr() as usize).is_multiple_of(UNIT_SIZE as usize) && (buf.len() as u64).is_multiple_of(UNIT_SIZE)
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is a live allocation of len bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with the same layout.
        unsafe { dealloc(self.ptr, Self::layout(self.len)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_copies_hold_the_bytes_then_zeros_to_the_unit() {
        let unit = UNIT_SIZE as usize;
        let src: Vec<u8> = (0..unit + 100).map(|i| (i % 251) as u8 + 1).collect();
        let c = AlignedBuf::padded_copy(&src);
        assert!(AlignedBuf::is_aligned(&c));
        assert_eq!(c.len(), 2 * unit);
        assert_eq!(&c[..src.len()], &src[..]);
        assert!(c[src.len()..].iter().all(|&b| b == 0));
        // A kept buffer that held a longer copy: the padding is zeroed again, not left over.
        let mut kept = AlignedBuf::zeroed(4 * unit);
        kept.fill(0xee);
        let short = &src[..10];
        let got = kept.fill_padded(short).expect("fits").to_vec();
        assert_eq!(got.len(), unit);
        assert_eq!(&got[..10], short);
        assert!(got[10..].iter().all(|&b| b == 0));
        assert_eq!(&got[..], &AlignedBuf::padded_copy(short)[..]);
        assert!(kept.fill_padded(&vec![1u8; 4 * unit + 1]).is_none(), "too long for the kept buffer");
    }
}
