//! The NBD wire format (NetworkBlockDevice/nbd doc/proto.md): constants, and the encoders
//! and decoders of the fixed newstyle handshake and the transmission phase. Big-endian
//! throughout. Decoders take the bytes the caller read and check every length against
//! the bytes present; nothing here reads a socket or trusts a length.

pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
pub const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Transmission flags.
pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
pub const FLAG_READ_ONLY: u16 = 1 << 1;
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const FLAG_SEND_FUA: u16 = 1 << 3;
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const FLAG_SEND_DF: u16 = 1 << 7;
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const FLAG_SEND_CACHE: u16 = 1 << 10;
pub const FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;

// Option replies.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
pub const REP_ERR_POLICY: u32 = (1 << 31) + 2;
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
pub const REP_ERR_TLS_REQD: u32 = (1 << 31) + 5;
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;

pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Commands and their flags.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// Structured reply chunks.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;

// base:allocation states.
pub const STATE_HOLE: u32 = 1 << 0;
pub const STATE_ZERO: u32 = 1 << 1;

// Errors (Linux numbering, as the protocol's).
pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;
pub const EOVERFLOW: u32 = 75;
pub const ENOTSUP: u32 = 95;
pub const ESHUTDOWN: u32 = 108;

/// The one metadata context served, and the id SET_META_CONTEXT gives it.
pub const META_BASE_ALLOCATION: &str = "base:allocation";
pub const META_ID_BASE_ALLOCATION: u32 = 1;

/// Largest READ or WRITE payload. 32 MiB is the size the spec says no peer may treat as a
/// denial of service (and nbdkit's and qemu's maximum); larger reads are refused, larger
/// writes end the connection without their payload being read.
pub const MAX_PAYLOAD_BYTES: u32 = 32 << 20;
/// Largest option data accepted in the handshake: an export name (at most 4096 bytes by
/// the spec) and a few queries fit many times over; more ends the connection.
pub const MAX_OPTION_BYTES: u32 = 64 << 10;
/// Longest string in an error chunk (the spec's limit).
pub const MAX_ERROR_MESSAGE: usize = 4096;
/// Longest export name or metadata query accepted (the spec's string limit).
pub const MAX_STRING: usize = 4096;

pub const REQUEST_HEADER_BYTES: usize = 28;

/// A transmission-phase request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

/// Decode a request header; `None` when the magic is wrong (the connection is then closed:
/// the stream can no longer be framed).
pub fn decode_request(b: &[u8; REQUEST_HEADER_BYTES]) -> Option<RequestHeader> {
    let mut d = Decoder::new(b);
    if d.u32()? != REQUEST_MAGIC {
        return None;
    }
    Some(RequestHeader { flags: d.u16()?, kind: d.u16()?, cookie: d.u64()?, offset: d.u64()?, length: d.u32()? })
}

pub fn encode_request(h: &RequestHeader) -> [u8; REQUEST_HEADER_BYTES] {
    let mut out = [0u8; REQUEST_HEADER_BYTES];
    out[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    out[4..6].copy_from_slice(&h.flags.to_be_bytes());
    out[6..8].copy_from_slice(&h.kind.to_be_bytes());
    out[8..16].copy_from_slice(&h.cookie.to_be_bytes());
    out[16..24].copy_from_slice(&h.offset.to_be_bytes());
    out[24..28].copy_from_slice(&h.length.to_be_bytes());
    out
}

/// Bounded big-endian reads from a byte slice: `None` when the bytes run out.
pub struct Decoder<'a> {
    buf: &'a [u8],
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8]) -> Decoder<'a> {
        Decoder { buf }
    }

    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.buf.len() {
            return None;
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N)?.try_into().ok()
    }

    pub fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_be_bytes)
    }

    pub fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_be_bytes)
    }

    pub fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_be_bytes)
    }

    /// A string with a 32-bit length before it, of at most `max` bytes.
    pub fn string(&mut self, max: usize) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        if n > max {
            return None;
        }
        self.bytes(n)
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// The data of NBD_OPT_INFO / NBD_OPT_GO.
#[derive(Debug, PartialEq, Eq)]
pub struct InfoRequest<'a> {
    pub name: &'a [u8],
    pub requests: Vec<u16>,
}

/// Decode INFO/GO data; `None` if the lengths do not add up to exactly the data sent.
pub fn decode_info_request(data: &[u8]) -> Option<InfoRequest<'_>> {
    let mut d = Decoder::new(data);
    let name = d.string(MAX_STRING)?;
    let n = d.u16()?;
    let mut requests = Vec::with_capacity(usize::from(n).min(64));
    for _ in 0..n {
        requests.push(d.u16()?);
    }
    d.is_empty().then_some(InfoRequest { name, requests })
}

/// The data of NBD_OPT_LIST_META_CONTEXT / NBD_OPT_SET_META_CONTEXT.
#[derive(Debug, PartialEq, Eq)]
pub struct MetaRequest<'a> {
    pub name: &'a [u8],
    pub queries: Vec<&'a [u8]>,
}

pub fn decode_meta_request(data: &[u8]) -> Option<MetaRequest<'_>> {
    let mut d = Decoder::new(data);
    let name = d.string(MAX_STRING)?;
    let n = d.u32()?;
    let mut queries = Vec::new();
    for _ in 0..n {
        // Each query costs at least its 4-byte length, so `n` cannot make this loop run
        // longer than the (bounded) option data allows.
        queries.push(d.string(MAX_STRING)?);
    }
    d.is_empty().then_some(MetaRequest { name, queries })
}

/// An option reply: magic, option, reply type, length, data.
pub fn option_reply(option: u32, reply: u32, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + data.len());
    out.extend_from_slice(&OPT_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    out
}

pub fn info_export(size: u64, flags: u16) -> Vec<u8> {
    let mut d = INFO_EXPORT.to_be_bytes().to_vec();
    d.extend_from_slice(&size.to_be_bytes());
    d.extend_from_slice(&flags.to_be_bytes());
    d
}

pub fn info_string(kind: u16, s: &str) -> Vec<u8> {
    let mut d = kind.to_be_bytes().to_vec();
    d.extend_from_slice(s.as_bytes());
    d
}

pub fn info_block_size(min: u32, preferred: u32, max: u32) -> Vec<u8> {
    let mut d = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
    for v in [min, preferred, max] {
        d.extend_from_slice(&v.to_be_bytes());
    }
    d
}

/// NBD_REP_SERVER data: the name, then the description (LIST).
pub fn rep_server(name: &str, description: &str) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(description.as_bytes());
    d
}

pub fn rep_meta_context(id: u32, name: &str) -> Vec<u8> {
    let mut d = id.to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d
}

pub fn simple_reply(error: u32, cookie: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out[4..8].copy_from_slice(&error.to_be_bytes());
    out[8..16].copy_from_slice(&cookie.to_be_bytes());
    out
}

/// A structured reply chunk's header; `length` bytes of payload follow it.
pub fn chunk_header(flags: u16, kind: u16, cookie: u64, length: u32) -> [u8; 20] {
    let mut out = [0u8; 20];
    out[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out[4..6].copy_from_slice(&flags.to_be_bytes());
    out[6..8].copy_from_slice(&kind.to_be_bytes());
    out[8..16].copy_from_slice(&cookie.to_be_bytes());
    out[16..20].copy_from_slice(&length.to_be_bytes());
    out
}

/// A whole NBD_REPLY_TYPE_ERROR chunk (flagged DONE), the message cut to the spec's limit
/// on a character boundary.
pub fn error_chunk(cookie: u64, error: u32, message: &str) -> Vec<u8> {
    let mut cut = message.len().min(MAX_ERROR_MESSAGE);
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    let msg = &message.as_bytes()[..cut];
    let mut out = chunk_header(REPLY_FLAG_DONE, REPLY_TYPE_ERROR, cookie, 6 + msg.len() as u32).to_vec();
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    out.extend_from_slice(msg);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip_and_bad_magic() {
        let h =
            RequestHeader { flags: 5, kind: CMD_WRITE, cookie: 0x0102_0304_0506_0708, offset: 1 << 40, length: 4096 };
        let b = encode_request(&h);
        assert_eq!(&b[..4], &[0x25, 0x60, 0x95, 0x13]);
        assert_eq!(decode_request(&b), Some(h));
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(decode_request(&bad), None);
    }

    #[test]
    fn info_request_lengths_must_match() {
        let mut d = 3u32.to_be_bytes().to_vec();
        d.extend_from_slice(b"abc");
        d.extend_from_slice(&2u16.to_be_bytes());
        d.extend_from_slice(&INFO_NAME.to_be_bytes());
        d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        let r = decode_info_request(&d).expect("well formed");
        assert_eq!(r.name, b"abc");
        assert_eq!(r.requests, vec![INFO_NAME, INFO_BLOCK_SIZE]);
        // A trailing byte, a missing byte, a name longer than the data: all refused.
        let mut longer = d.clone();
        longer.push(0);
        assert!(decode_info_request(&longer).is_none());
        assert!(decode_info_request(&d[..d.len() - 1]).is_none());
        let mut lying = d.clone();
        lying[3] = 200;
        assert!(decode_info_request(&lying).is_none());
        assert!(decode_info_request(&[]).is_none());
    }

    #[test]
    fn meta_request_decodes_queries() {
        let mut d = 0u32.to_be_bytes().to_vec();
        d.extend_from_slice(&2u32.to_be_bytes());
        for q in [&b"base:allocation"[..], b"qemu:dirty-bitmap:x"] {
            d.extend_from_slice(&(q.len() as u32).to_be_bytes());
            d.extend_from_slice(q);
        }
        let r = decode_meta_request(&d).expect("well formed");
        assert_eq!(r.name, b"");
        assert_eq!(r.queries, vec![&b"base:allocation"[..], b"qemu:dirty-bitmap:x"]);
        // A count of queries larger than the data holds.
        let mut many = d.clone();
        many[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode_meta_request(&many).is_none());
        assert!(decode_meta_request(&d[..d.len() - 1]).is_none());
    }

    #[test]
    fn replies_encode_as_the_spec_lays_out() {
        let r = option_reply(OPT_GO, REP_ACK, &[]);
        assert_eq!(r.len(), 20);
        assert_eq!(&r[..8], &[0, 3, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9]);
        assert_eq!(&r[8..12], &7u32.to_be_bytes());
        assert_eq!(&r[12..16], &1u32.to_be_bytes());
        assert_eq!(info_export(1 << 20, 0x1ff).len(), 12);
        assert_eq!(info_block_size(512, 4096, MAX_PAYLOAD_BYTES).len(), 14);
        let s = simple_reply(EINVAL, 9);
        assert_eq!(&s[..4], &[0x67, 0x44, 0x66, 0x98]);
        assert_eq!(&s[4..8], &22u32.to_be_bytes());
        let e = error_chunk(3, EIO, &"é".repeat(3000));
        // 4096 bytes of message cut on a character boundary: 4096 is even, "é" is 2 bytes.
        assert_eq!(u32::from_be_bytes(e[16..20].try_into().unwrap()), 6 + 4096);
        assert_eq!(u16::from_be_bytes(e[24..26].try_into().unwrap()), 4096);
        assert_eq!(&e[4..6], &REPLY_FLAG_DONE.to_be_bytes());
    }
}
