//! XDR (RFC 4506): the big-endian, 4-byte aligned encoding of every ONC RPC message.
//!
//! Decoding borrows from the record it reads (`opaque` and `string` return slices into it),
//! so a hostile length field can never make us allocate: every variable-length item is
//! checked against its protocol maximum *and* against the bytes actually left before it is
//! touched. Decoding never panics; a short or malformed message is an [`XdrError`], which
//! the RPC layer answers with GARBAGE_ARGS.
//!
//! Encoding appends to a `Vec<u8>` the caller sized; replies are built in one buffer that
//! starts with room for the record mark, so a reply is one `write_all`.

/// The message is shorter than its fields say, or a length is over its maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdrError;

impl std::fmt::Display for XdrError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("malformed XDR")
    }
}

pub type XdrResult<T> = Result<T, XdrError>;

/// Bytes of padding after `len` bytes of opaque data.
pub fn pad(len: usize) -> usize {
    (4 - len % 4) % 4
}

/// A cursor over one received message.
#[derive(Debug)]
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8]) -> Decoder<'a> {
        Decoder { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The bytes not decoded yet.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    fn take(&mut self, n: usize) -> XdrResult<&'a [u8]> {
        if n > self.remaining() {
            return Err(XdrError);
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn u32(&mut self) -> XdrResult<u32> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().map_err(|_| XdrError)?))
    }

    pub fn u64(&mut self) -> XdrResult<u64> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().map_err(|_| XdrError)?))
    }

    /// XDR bool: 0 or 1, anything else is malformed.
    pub fn bool(&mut self) -> XdrResult<bool> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(XdrError),
        }
    }

    /// Fixed-length opaque of `n` bytes (plus padding).
    pub fn fixed(&mut self, n: usize) -> XdrResult<&'a [u8]> {
        let s = self.take(n)?;
        self.take(pad(n))?;
        Ok(s)
    }

    /// Variable-length opaque of at most `max` bytes.
    pub fn opaque(&mut self, max: usize) -> XdrResult<&'a [u8]> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(XdrError);
        }
        self.fixed(n)
    }

    /// A string is opaque bytes to us (file names are not required to be UTF-8).
    pub fn string(&mut self, max: usize) -> XdrResult<&'a [u8]> {
        self.opaque(max)
    }
}

use strata_fs::SharedBytes;

/// Appends XDR items to a buffer.
pub struct Encoder {
    pub buf: Vec<u8>,
    /// The bytes of an opaque that ends the message, left where they are (a READ's data in
    /// the engine's records): see [`Encoder::opaque_tail`].
    pub tail: Vec<SharedBytes>,
}

impl Encoder {
    pub fn with_capacity(n: usize) -> Encoder {
        Encoder { buf: Vec::with_capacity(n), tail: Vec::new() }
    }

    /// A variable-length opaque of `pieces`, which stay where they are: the message is
    /// sent as `buf`, the pieces and the padding (`rpc::finish_record`). It ends the
    /// message: nothing may be encoded after it.
    pub fn opaque_tail(&mut self, pieces: Vec<SharedBytes>) {
        let len: usize = pieces.iter().map(SharedBytes::len).sum();
        debug_assert!(len <= u32::MAX as usize && self.tail.is_empty());
        self.u32(len as u32);
        self.tail = pieces;
    }

    /// Bytes of the tail opaque's data (without its padding).
    pub fn tail_len(&self) -> usize {
        self.tail.iter().map(SharedBytes::len).sum()
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn bool(&mut self, v: bool) {
        self.u32(v as u32);
    }

    pub fn fixed(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
        self.buf.extend_from_slice(&[0u8; 3][..pad(b.len())]);
    }

    /// Variable-length opaque; the caller keeps `b` within the protocol's maximum.
    pub fn opaque(&mut self, b: &[u8]) {
        debug_assert!(b.len() <= u32::MAX as usize);
        self.u32(b.len() as u32);
        self.fixed(b);
    }

    /// Pad to a multiple of four bytes (after opaque bytes appended straight to `buf`).
    pub fn pad(&mut self) {
        let n = pad(self.buf.len());
        self.buf.extend_from_slice(&[0u8; 3][..n]);
    }

    /// Overwrite a u32 written earlier at `at` (lengths known only after the body).
    pub fn patch_u32(&mut self, at: usize, v: u32) {
        self.buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut e = Encoder::with_capacity(64);
        e.u32(7);
        e.u64(u64::MAX - 1);
        e.bool(true);
        e.opaque(b"hello");
        e.fixed(b"ab");
        assert_eq!(e.len(), 4 + 8 + 4 + 4 + 8 + 4);
        let mut d = Decoder::new(&e.buf);
        assert_eq!(d.u32(), Ok(7));
        assert_eq!(d.u64(), Ok(u64::MAX - 1));
        assert_eq!(d.bool(), Ok(true));
        assert_eq!(d.opaque(16), Ok(&b"hello"[..]));
        assert_eq!(d.fixed(2), Ok(&b"ab"[..]));
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.u32(), Err(XdrError));
    }

    #[test]
    fn hostile_lengths_are_refused_without_allocating() {
        // A length of 4 GiB - 1 in a 8-byte message.
        let msg = [0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4];
        assert_eq!(Decoder::new(&msg).opaque(usize::MAX), Err(XdrError));
        // Over the protocol maximum even though the bytes are there.
        let mut e = Encoder::with_capacity(16);
        e.opaque(&[1u8; 10]);
        assert_eq!(Decoder::new(&e.buf).opaque(9), Err(XdrError));
        // Padding missing at the end.
        let mut e = Encoder::with_capacity(16);
        e.opaque(b"abc");
        e.buf.pop();
        assert_eq!(Decoder::new(&e.buf).opaque(9), Err(XdrError));
        // bool other than 0/1.
        assert_eq!(Decoder::new(&[0, 0, 0, 2]).bool(), Err(XdrError));
    }
}
