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
