//! ONC RPC version 2 (RFC 5531) over TCP: record marking, call headers, credentials and
//! reply headers.
//!
//! Record marking: a record is one or more fragments, each prefixed by a 4-byte mark whose
//! top bit says "last fragment" and whose low 31 bits are the fragment's length. A record
//! is capped at [`MAX_RECORD_BYTES`] in total (all fragments), checked before any byte of
//! a fragment is read, so a peer can make us hold at most that much per connection.
//!
//! Credentials: AUTH_SYS (uid, gid, up to 16 groups) and AUTH_NONE are accepted; anything
//! else is refused with AUTH_ERROR: AUTH_TOOWEAK for a flavour we do not take (RPCSEC_GSS,
//! as a server without Kerberos must), AUTH_BADCRED for a malformed credential.

use crate::xdr::{Decoder, Encoder, XdrError, XdrResult};
use std::io::{self, Read};

/// wsize is 1 MiB; a WRITE call carries that plus its header (handle, offsets, credential
/// of at most 400 bytes): 64 KiB of slack is generous and still bounded.
pub const MAX_RECORD_BYTES: usize = (1 << 20) + (64 << 10);

pub const RPC_VERSION: u32 = 2;
pub const MSG_CALL: u32 = 0;
pub const MSG_REPLY: u32 = 1;
pub const AUTH_NONE: u32 = 0;
pub const AUTH_SYS: u32 = 1;
/// Credential and verifier bodies are at most 400 bytes (RFC 5531 §8.2).
pub const MAX_AUTH_BYTES: usize = 400;
/// AUTH_SYS carries at most 16 supplementary groups.
pub const MAX_AUTH_GROUPS: usize = 16;

/// accept_stat
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptStat {
    Success = 0,
    ProgUnavail = 1,
    ProgMismatch = 2,
    ProcUnavail = 3,
    GarbageArgs = 4,
    SystemErr = 5,
}

/// auth_stat (for MSG_DENIED / AUTH_ERROR).
pub const AUTH_BADCRED: u32 = 1;
pub const AUTH_TOOWEAK: u32 = 5;

/// Who sent a call, as its credential says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    None,
    Sys { uid: u32, gid: u32, groups: Vec<u32>, machine: String },
}

/// A decoded call header; `args` are the procedure's arguments, undecoded.
#[derive(Debug)]
pub struct Call<'a> {
    pub xid: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub cred: Credential,
    pub args: Decoder<'a>,
}

/// Why a record could not be taken as a call.
#[derive(Debug, PartialEq, Eq)]
pub enum CallError {
    /// Not even an xid: nothing can be answered, drop the record.
    Unanswerable,
    /// RPC version other than 2: answer RPC_MISMATCH.
    RpcMismatch { xid: u32 },
    /// A credential flavour we do not take, or a malformed one: answer AUTH_ERROR.
    Auth { xid: u32, stat: u32 },
    /// A reply or a malformed header: drop it (a server never receives replies).
    Garbage { xid: u32 },
}

impl From<XdrError> for CallError {
    fn from(_: XdrError) -> CallError {
        CallError::Unanswerable
    }
}

fn parse_auth_sys(body: &[u8]) -> XdrResult<Credential> {
    let mut d = Decoder::new(body);
    let _stamp = d.u32()?;
    let machine = String::from_utf8_lossy(d.string(255)?).into_owned();
    let uid = d.u32()?;
    let gid = d.u32()?;
    let n = d.u32()? as usize;
    if n > MAX_AUTH_GROUPS {
        return Err(XdrError);
    }
    let mut groups = Vec::with_capacity(n);
    for _ in 0..n {
        groups.push(d.u32()?);
    }
    Ok(Credential::Sys { uid, gid, groups, machine })
}

/// Decode the call header of one record.
pub fn parse_call(record: &[u8]) -> Result<Call<'_>, CallError> {
    let mut d = Decoder::new(record);
    let xid = d.u32()?;
    let garbage = |_| CallError::Garbage { xid };
    if d.u32().map_err(garbage)? != MSG_CALL {
        return Err(CallError::Garbage { xid });
    }
    if d.u32().map_err(garbage)? != RPC_VERSION {
        return Err(CallError::RpcMismatch { xid });
    }
    let prog = d.u32().map_err(garbage)?;
    let vers = d.u32().map_err(garbage)?;
    let proc_ = d.u32().map_err(garbage)?;
    let bad = |_| CallError::Auth { xid, stat: AUTH_BADCRED };
    let flavor = d.u32().map_err(bad)?;
    let body = d.opaque(MAX_AUTH_BYTES).map_err(bad)?;
    let cred = match flavor {
        AUTH_NONE => Credential::None,
        AUTH_SYS => parse_auth_sys(body).map_err(bad)?,
        _ => return Err(CallError::Auth { xid, stat: AUTH_TOOWEAK }),
    };
    let _verf_flavor = d.u32().map_err(bad)?;
    let _verf = d.opaque(MAX_AUTH_BYTES).map_err(bad)?;
    Ok(Call { xid, prog, vers, proc_, cred, args: d })
}

/// Start a reply record: room for the record mark, then an accepted reply header with an
/// AUTH_NONE verifier. The procedure's results follow; [`finish_record`] fills the mark.
pub fn accepted_reply(xid: u32, stat: AcceptStat, capacity: usize) -> Encoder {
    let mut e = Encoder::with_capacity(capacity + 28);
    e.u32(0); // record mark, patched by finish_record
    e.u32(xid);
    e.u32(MSG_REPLY);
    e.u32(0); // MSG_ACCEPTED
    e.u32(AUTH_NONE);
    e.u32(0);
    e.u32(stat as u32);
    e
}

/// PROG_MISMATCH: the versions of the program we serve.
pub fn prog_mismatch(xid: u32, low: u32, high: u32) -> Encoder {
    let mut e = accepted_reply(xid, AcceptStat::ProgMismatch, 8);
    e.u32(low);
    e.u32(high);
    e
}

/// MSG_DENIED replies: RPC_MISMATCH (we speak version 2 only) or AUTH_ERROR.
pub fn denied_reply(err: &CallError) -> Option<Encoder> {
    let mut e = Encoder::with_capacity(32);
    e.u32(0);
    match *err {
        CallError::RpcMismatch { xid } => {
            e.u32(xid);
            e.u32(MSG_REPLY);
            e.u32(1); // MSG_DENIED
            e.u32(0); // RPC_MISMATCH
            e.u32(RPC_VERSION);
            e.u32(RPC_VERSION);
        }
        CallError::Auth { xid, stat } => {
            e.u32(xid);
            e.u32(MSG_REPLY);
            e.u32(1);
            e.u32(1); // AUTH_ERROR
            e.u32(stat);
        }
        CallError::Unanswerable | CallError::Garbage { .. } => return None,
    }
    Some(e)
}

/// A reply record as sent: `head` (record mark and XDR), then the bytes of a tail opaque
/// from where they are, then its padding (`Encoder::opaque_tail`).
pub struct Reply {
    pub head: Vec<u8>,
    tail: Vec<strata_fs::SharedBytes>,
    pad: usize,
}

impl Reply {
    /// The pieces to write, in order (for `writev`).
    pub fn io_slices(&self) -> Vec<io::IoSlice<'_>> {
        let mut v = Vec::with_capacity(self.tail.len() + 2);
        v.push(io::IoSlice::new(&self.head));
        v.extend(self.tail.iter().map(|p| io::IoSlice::new(p.as_slice())));
        if self.pad > 0 {
            v.push(io::IoSlice::new(&[0u8; 3][..self.pad]));
        }
        v
    }

    /// The whole record in one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let slices = self.io_slices();
        let mut v = Vec::with_capacity(slices.iter().map(|s| s.len()).sum());
        for s in &slices {
            v.extend_from_slice(s);
        }
        v
    }
}

impl From<Vec<u8>> for Reply {
    fn from(head: Vec<u8>) -> Reply {
        Reply { head, tail: Vec::new(), pad: 0 }
    }
}

/// Fill the record mark of a reply built by [`accepted_reply`] (one, last fragment).
pub fn finish_record(mut e: Encoder) -> Reply {
    let data = e.tail_len();
    let pad = crate::xdr::pad(data);
    let len = (e.len() - 4 + data + pad) as u32;
    e.patch_u32(0, 0x8000_0000 | len);
    Reply { head: e.buf, tail: e.tail, pad }
}

/// A byte stream that reads into memory not initialized yet: a socket's `recv` writes the
/// buffer, so a record's body of up to a megabyte need not be zeroed before it is read
/// (`Read::read_to_end` on a reader without `read_buf` zeroes it: 4 % of the daemon's CPU
/// under sequential NFS writes).
///
/// # Safety
/// `read_uninit` returns `n <= buf.len()` and has initialized `buf[..n]`.
pub unsafe trait ReadUninit: Read {
    /// Read up to `buf.len()` bytes into `buf`: how many (0 at the end of the stream).
    fn read_uninit(&mut self, buf: &mut [std::mem::MaybeUninit<u8>]) -> io::Result<usize> {
        buf.fill(std::mem::MaybeUninit::new(0));
        // SAFETY: every byte was just initialized; MaybeUninit<u8> has u8's layout.
        let buf = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), buf.len()) };
        let n = self.read(buf)?;
        Ok(n.min(buf.len()))
    }
}

// SAFETY: the default method (zero, then read).
unsafe impl ReadUninit for &[u8] {}

/// Read one record (all its fragments) from `r`. `Ok(None)` at a clean end of stream
/// between records; an error for a record over [`MAX_RECORD_BYTES`] or a stream that ends
/// inside one.
pub fn read_record(r: &mut impl ReadUninit, max: usize) -> io::Result<Option<Vec<u8>>> {
    read_record_expecting(r, max, |_, _| {})
}

/// [`read_record`], telling `expect` how many bytes of a fragment's body it is about to
/// read before it reads them (and 0 once they are in): a socket reader can then sleep until
/// that much has arrived instead of waking for every segment.
pub fn read_record_expecting<R: ReadUninit>(
    r: &mut R,
    max: usize,
    mut expect: impl FnMut(&mut R, usize),
) -> io::Result<Option<Vec<u8>>> {
    let mut record = Vec::new();
    loop {
        let mut mark = [0u8; 4];
        if record.is_empty() {
            // EOF before the first byte of a record is a normal close.
            match r.read(&mut mark[..1])? {
                0 => return Ok(None),
                _ => r.read_exact(&mut mark[1..])?,
            }
        } else {
            r.read_exact(&mut mark)?;
        }
        let mark = u32::from_be_bytes(mark);
        let last = mark & 0x8000_0000 != 0;
        let len = (mark & 0x7fff_ffff) as usize;
        if len > max - record.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("RPC record over {max} bytes (fragment of {len} after {})", record.len()),
            ));
        }
        record.reserve_exact(len);
        expect(r, len);
        let read = read_body(r, &mut record, len);
        expect(r, 0);
        read?;
        if last {
            return Ok(Some(record));
        }
    }
}

/// Append `len` bytes of `r` to `record` (capacity reserved), straight into its spare
/// capacity.
fn read_body<R: ReadUninit>(r: &mut R, record: &mut Vec<u8>, len: usize) -> io::Result<()> {
    let end = record.len() + len;
    while record.len() < end {
        let want = end - record.len();
        let spare = &mut record.spare_capacity_mut()[..want];
        match r.read_uninit(spare) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "RPC record cut short")),
            Ok(n) => {
                // SAFETY: ReadUninit's contract: n <= want bytes of the spare capacity are
                // initialized.
                unsafe { record.set_len(record.len() + n.min(want)) }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call_bytes(cred_flavor: u32, cred: &[u8], rpcvers: u32) -> Vec<u8> {
        let mut e = Encoder::with_capacity(128);
        e.u32(42);
        e.u32(MSG_CALL);
        e.u32(rpcvers);
        e.u32(100003);
        e.u32(3);
        e.u32(1);
        e.u32(cred_flavor);
        e.opaque(cred);
        e.u32(AUTH_NONE);
        e.opaque(b"");
        e.u32(0xdead_beef);
        e.buf
    }

    fn auth_sys(uid: u32, gid: u32, groups: &[u32]) -> Vec<u8> {
        let mut e = Encoder::with_capacity(64);
        e.u32(1);
        e.opaque(b"client");
        e.u32(uid);
        e.u32(gid);
        e.u32(groups.len() as u32);
        for g in groups {
            e.u32(*g);
        }
        e.buf
    }

    #[test]
    fn parses_auth_sys_call() {
        let rec = call_bytes(AUTH_SYS, &auth_sys(1000, 100, &[4, 27]), 2);
        let mut c = parse_call(&rec).expect("a call");
        assert_eq!((c.xid, c.prog, c.vers, c.proc_), (42, 100003, 3, 1));
        assert_eq!(c.cred, Credential::Sys { uid: 1000, gid: 100, groups: vec![4, 27], machine: "client".into() });
        assert_eq!(c.args.u32(), Ok(0xdead_beef));
    }

    #[test]
    fn refuses_bad_credentials_and_versions() {
        let too_many: Vec<u32> = (0..17).collect();
        let rec = call_bytes(AUTH_SYS, &auth_sys(0, 0, &too_many), 2);
        assert_eq!(parse_call(&rec).unwrap_err(), CallError::Auth { xid: 42, stat: AUTH_BADCRED });
        let rec = call_bytes(6, b"kerberos", 2);
        assert_eq!(parse_call(&rec).unwrap_err(), CallError::Auth { xid: 42, stat: AUTH_TOOWEAK });
        let rec = call_bytes(AUTH_NONE, b"", 3);
        assert_eq!(parse_call(&rec).unwrap_err(), CallError::RpcMismatch { xid: 42 });
        assert!(denied_reply(&CallError::RpcMismatch { xid: 42 }).is_some());
        assert_eq!(parse_call(&[0, 0]).unwrap_err(), CallError::Unanswerable);
    }

    /// One record "abcde" in two fragments: "abc", then the last, "de".
    fn abc_de_record() -> Vec<u8> {
        [&3u32.to_be_bytes()[..], b"abc", &(0x8000_0000u32 | 2).to_be_bytes(), b"de"].concat()
    }

    #[test]
    fn record_marking_joins_fragments_and_caps_size() {
        let wire = abc_de_record();
        let mut r = &wire[..];
        assert_eq!(read_record(&mut r, 100).expect("record"), Some(b"abcde".to_vec()));
        assert_eq!(read_record(&mut r, 100).expect("clean end"), None);
        // A fragment over the cap is refused before its bytes are read.
        let mut huge = (0x8000_0000u32 | 0x7fff_ffff).to_be_bytes().to_vec();
        huge.extend_from_slice(b"x");
        assert!(read_record(&mut &huge[..], MAX_RECORD_BYTES).is_err());
        // Two fragments whose sum passes the cap.
        let mut two = 60u32.to_be_bytes().to_vec();
        two.extend_from_slice(&[0u8; 60]);
        two.extend_from_slice(&(0x8000_0000u32 | 60).to_be_bytes());
        assert!(read_record(&mut &two[..], 100).is_err());
        // A stream cut inside a record.
        let cut = (0x8000_0000u32 | 10).to_be_bytes();
        assert!(read_record(&mut &cut[..], 100).is_err());
    }

    #[test]
    fn the_reader_is_told_each_fragment_body_before_reading_it() {
        let wire = abc_de_record();
        let mut told = Vec::new();
        let mut r = &wire[..];
        // `expect` sees the stream before the body is read: its length is what is left.
        let rec = read_record_expecting(&mut r, 100, |r: &mut &[u8], n| told.push((n, r.len())));
        assert_eq!(rec.expect("record"), Some(b"abcde".to_vec()));
        assert_eq!(told, [(3, 9), (0, 6), (2, 2), (0, 0)]);
        // A cut body still resets the expectation.
        let cut = [&(0x8000_0000u32 | 10).to_be_bytes()[..], b"xy"].concat();
        let mut told = Vec::new();
        assert!(read_record_expecting(&mut &cut[..], 100, |_, n| told.push(n)).is_err());
        assert_eq!(told, [10, 0]);
    }

    #[test]
    fn reply_record_mark_covers_the_body() {
        let mut e = accepted_reply(9, AcceptStat::Success, 4);
        e.u32(0);
        let rec = finish_record(e).to_vec();
        let mark = u32::from_be_bytes(rec[..4].try_into().expect("4 bytes"));
        assert_eq!(mark, 0x8000_0000 | (rec.len() as u32 - 4));
        assert_eq!(&rec[4..8], &9u32.to_be_bytes());
    }

    #[test]
    fn a_tail_opaque_is_sent_in_place_and_counted_in_the_mark() {
        let mut e = accepted_reply(9, AcceptStat::Success, 4);
        e.u32(7);
        let pieces =
            vec![strata_fs::SharedBytes::owned(b"abc".to_vec()), strata_fs::SharedBytes::owned(b"de".to_vec())];
        e.opaque_tail(pieces);
        let reply = finish_record(e);
        // The head, each piece as it is, and the padding of the 5 data bytes to 8.
        assert_eq!(reply.io_slices().len(), 4);
        let rec = reply.to_vec();
        let mark = u32::from_be_bytes(rec[..4].try_into().expect("4 bytes"));
        assert_eq!(mark, 0x8000_0000 | (rec.len() as u32 - 4));
        assert_eq!(rec.len() % 4, 0);
        assert_eq!(&rec[rec.len() - 13..], &[0, 0, 0, 7, 0, 0, 0, 5, b'a', b'b', b'c', b'd', b'e', 0, 0, 0][3..]);
    }
}
