//! Little-endian field readers and writers for fixed-layout structures.
//!
//! The reader never panics: every read past the end is a [`Corruption`] naming the
//! structure being decoded, so decoders can use `?` throughout.

use crate::error::Corruption;

pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn with_capacity(n: usize) -> Writer {
        Writer { buf: Vec::with_capacity(n) }
    }
    /// Append to `buf` (whatever it holds stays in front).
    pub fn from_vec(buf: Vec<u8>) -> Writer {
        Writer { buf }
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }
    pub fn zeros(&mut self, n: usize) -> &mut Self {
        self.buf.resize(self.buf.len() + n, 0);
        self
    }
    /// Append `n` zero bytes and return them for the caller to fill.
    pub fn zeros_mut(&mut self, n: usize) -> &mut [u8] {
        let at = self.buf.len();
        self.buf.resize(at + n, 0);
        self.buf.get_mut(at..).unwrap_or_default()
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }
}

pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
    addr: Option<u64>,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], what: &'static str, addr: Option<u64>) -> Reader<'a> {
        Reader { buf, pos: 0, what, addr }
    }
    pub fn corrupt(&self, detail: impl Into<String>) -> Corruption {
        Corruption::new(self.what, self.addr, detail)
    }
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Corruption> {
        let s = self.pos.checked_add(n).and_then(|end| self.buf.get(self.pos..end)).ok_or_else(|| {
            self.corrupt(format!("truncated: need {} bytes at offset {}, have {}", n, self.pos, self.buf.len()))
        })?;
        self.pos += n;
        Ok(s)
    }
    pub fn u8(&mut self) -> Result<u8, Corruption> {
        let [b] = self.array::<1>()?;
        Ok(b)
    }
    pub fn u16(&mut self) -> Result<u16, Corruption> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub fn u32(&mut self) -> Result<u32, Corruption> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub fn u64(&mut self) -> Result<u64, Corruption> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Corruption> {
        let a = self.take(N)?.first_chunk::<N>().copied();
        a.ok_or_else(|| self.corrupt(format!("truncated: need {N} bytes")))
    }
    pub fn pos(&self) -> usize {
        self.pos
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
}

/// The self-checksum of a fixed structure: BLAKE3 over its bytes with the checksum field
/// (at `field..field + 32`) taken as zeros.
pub fn self_checksum(buf: &[u8], field: usize) -> [u8; 32] {
    assert!(field + 32 <= buf.len(), "checksum field inside the structure");
    let (head, rest) = buf.split_at_checked(field).unwrap_or((buf, &[]));
    let mut h = blake3::Hasher::new();
    h.update(head);
    h.update(&[0u8; 32]);
    h.update(rest.get(32..).unwrap_or_default());
    *h.finalize().as_bytes()
}

/// The checksum stored at `field` of a structure read from disk (`None`: too short).
pub fn stored_checksum(buf: &[u8], field: usize) -> Option<[u8; 32]> {
    buf.get(field..)?.first_chunk::<32>().copied()
}

/// Whether `buf` carries a valid self-checksum at `field`.
pub fn self_checksum_ok(buf: &[u8], field: usize) -> bool {
    field + 32 <= buf.len() && stored_checksum(buf, field) == Some(self_checksum(buf, field))
}

/// Store the self-checksum of an encoded structure in its field at `field` (the encoder's
/// own layout: the field is inside the buffer).
pub fn seal(buf: &mut [u8], field: usize) {
    let sum = self_checksum(buf, field);
    let slot = buf.get_mut(field..).and_then(|s| s.first_chunk_mut::<32>());
    let Some(slot) = slot else { unreachable!("checksum field inside the structure") };
    *slot = sum;
}
