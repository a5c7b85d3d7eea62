//! Procedures on one object: GETATTR, SETATTR, ACCESS, READLINK, READ, WRITE, COMMIT, and
//! the file system information ones (FSSTAT, FSINFO, PATHCONF).
//!
//! Durability (DESIGN.md invariant 5): an UNSTABLE WRITE is answered once VolumeFs has the
//! data (in the open txg); DATA_SYNC and FILE_SYNC, and COMMIT, only after
//! `VolumeFs::fsync` made everything so far durable through the intent log. Every WRITE
//! and COMMIT reply carries the server's write verifier, which changes at every daemon
//! start: a client that sees it change resends what it had not committed.

use super::access::{self, check_read_data, check_write_data};
use super::attr::{get_sattr, get_time, put_fattr, put_post_op_attr, put_wcc, FATTR3_BYTES};
use super::{resolve, setattr, status, NfsResult, Node, Stat, MAX_IO_BYTES};
use crate::rpc::MAX_RECORD_BYTES;
use crate::server::{Handled, Request};
use crate::xdr::Encoder;
use strata_fs::SharedBytes;

const UNSTABLE: u32 = 0;
const FILE_SYNC: u32 = 2;

pub(crate) fn getattr(req: &mut Request<'_>) -> Handled {
    let node = resolve(req)?;
    let mut e = req.reply(4 + FATTR3_BYTES);
    match node {
        Ok(n) => {
            status(&mut e, Stat::Ok);
            put_fattr(&mut e, &n.export, &n.attr);
        }
        Err(s) => status(&mut e, s),
    }
    Ok(e)
}

/// Answer a procedure whose reply is `status, wcc_data` (+ `extra` when OK) on `node`.
fn wcc_reply(
    req: &Request<'_>,
    node: NfsResult<Node>,
    f: impl FnOnce(&Node) -> NfsResult<()>,
    extra: impl FnOnce(&mut Encoder),
) -> Encoder {
    let mut e = req.reply(8 + 2 * FATTR3_BYTES + 24);
    match node {
        Err(s) => {
            status(&mut e, s);
            e.bool(false);
            e.bool(false);
        }
        Ok(n) => {
            let r = f(&n);
            let after = n.reload();
            status(&mut e, r.err().unwrap_or(Stat::Ok));
            put_wcc(&mut e, &n.export, Some(&n.attr), after.as_ref());
            if r.is_ok() {
                extra(&mut e);
            }
        }
    }
    e
}

/// SETATTR, in knfsd's order (setattr.rs): file type, read-only export and write
/// permission; the ctime guard; the ownership rules; then the change.
pub(crate) fn setattr(req: &mut Request<'_>) -> Handled {
    let node = resolve(req)?;
    let s = get_sattr(&mut req.args)?;
    let guard = if req.args.bool()? { Some(get_time(&mut req.args)?) } else { None };
    Ok(wcc_reply(
        req,
        node,
        |n| {
            // A snapshot is a read-only file system under a writable export.
            let read_only = n.export.policy.read_only || strata_fs::is_snapshot_ino(n.ino);
            setattr::check_access(&n.who, &n.attr, &s, read_only)?;
            if guard.is_some_and(|ctime| ctime != n.attr.ctime_ns) {
                return Err(Stat::NotSync);
            }
            if let Some(set) = setattr::prepare(&n.who, &n.attr, &s)? {
                n.fs().setattr(n.ino, set)?;
            }
            Ok(())
        },
        |_| {},
    ))
}

pub(crate) fn access(req: &mut Request<'_>) -> Handled {
    let node = resolve(req)?;
    let requested = req.args.u32()?;
    let mut e = req.reply(12 + FATTR3_BYTES);
    match node {
        Ok(n) => {
            status(&mut e, Stat::Ok);
            put_post_op_attr(&mut e, &n.export, Some(&n.attr));
            e.u32(access::access_bits(&n.who, &n.attr, requested, n.export.policy.read_only));
        }
        Err(s) => {
            status(&mut e, s);
            e.bool(false);
        }
    }
    Ok(e)
}

pub(crate) fn readlink(req: &mut Request<'_>) -> Handled {
    let node = resolve(req)?;
    let mut e = req.reply(4200);
    let n = match node {
        Ok(n) => n,
        Err(s) => {
            status(&mut e, s);
            e.bool(false);
            return Ok(e);
        }
    };
    match n.fs().readlink(n.ino).map_err(Stat::from) {
        Ok(target) => {
            status(&mut e, Stat::Ok);
            put_post_op_attr(&mut e, &n.export, Some(&n.attr));
            e.opaque(&target);
        }
        Err(s) => {
            status(&mut e, s);
            put_post_op_attr(&mut e, &n.export, Some(&n.attr));
        }
    }
    Ok(e)
}

/// The READ's data, as pieces of the engine's buffers.
fn read_data(n: &Node, offset: u64, count: u32) -> NfsResult<Vec<SharedBytes>> {
    if n.attr.mode & libc::S_IFMT == libc::S_IFDIR {
        return Err(Stat::IsDir);
    }
    if n.attr.mode & libc::S_IFMT != libc::S_IFREG {
        return Err(Stat::Inval);
    }
    check_read_data(&n.who, &n.attr)?;
    if offset >= n.attr.size || count == 0 {
        return Ok(Vec::new());
    }
    Ok(n.fs().read_shared(n.ino, offset, count.min(MAX_IO_BYTES))?)
}

pub(crate) fn read(req: &mut Request<'_>) -> Handled {
    let node = resolve(req)?;
    let (offset, count) = (req.args.u64()?, req.args.u32()?);
    let n = match node {
        Ok(n) => n,
        Err(s) => {
            let mut e = req.reply(8);
            status(&mut e, s);
            e.bool(false);
            return Ok(e);
        }
    };
    // The data is not copied into the reply: it is sent from the engine's records (or
    // cache) where it is (`Encoder::opaque_tail`, one `writev`).
    let mut e = req.reply(24 + FATTR3_BYTES);
    match read_data(&n, offset, count) {
        Ok(pieces) => {
            let len: usize = pieces.iter().map(SharedBytes::len).sum();
            req.io_bytes = len as u64;
            status(&mut e, Stat::Ok);
            put_post_op_attr(&mut e, &n.export, Some(&n.attr));
            e.u32(len as u32);
            e.bool(offset.saturating_add(len as u64) >= n.attr.size);
            e.opaque_tail(pieces);
            Ok(e)
        }
        Err(s) => {
            status(&mut e, s);
            put_post_op_attr(&mut e, &n.export, Some(&n.attr));
            Ok(e)
        }
    }
}

fn write_data(n: &Node, offset: u64, count: u32, stable: u32, data: &[u8]) -> NfsResult<u32> {
    n.writable()?;
    match n.attr.mode & libc::S_IFMT {
        libc::S_IFREG => {}
        libc::S_IFDIR => return Err(Stat::IsDir),
        _ => return Err(Stat::Inval),
    }
    if count as usize > data.len() || data.len() > MAX_IO_BYTES as usize {
        return Err(Stat::Inval);
    }
    let data = &data[..count as usize];
    if offset.checked_add(data.len() as u64).is_none_or(|end| end > i64::MAX as u64) {
        return Err(Stat::FBig);
    }
    check_write_data(&n.who, &n.attr)?;
    n.fs().write(n.ino, offset, data)?;
    if stable != UNSTABLE {
        n.fs().fsync(n.ino)?;
    }
    Ok(data.len() as u32)
}

pub(crate) fn write(req: &mut Request<'_>) -> Handled {
    let node = resolve(req)?;
    let (offset, count, stable) = (req.args.u64()?, req.args.u32()?, req.args.u32()?);
    if stable > FILE_SYNC {
        return Err(crate::xdr::XdrError);
    }
    let data = req.args.opaque(MAX_RECORD_BYTES)?;
    let verifier = req.shared.verifier;
    let written = std::cell::Cell::new(0u32);
    let e = wcc_reply(
        req,
        node,
        |n| {
            written.set(write_data(n, offset, count, stable, data)?);
            Ok(())
        },
        |e| {
            e.u32(written.get());
            // DATA_SYNC is answered as FILE_SYNC: the intent log makes data and metadata
            // durable together.
            e.u32(if stable == UNSTABLE { UNSTABLE } else { FILE_SYNC });
            e.fixed(&verifier);
        },
    );
    req.io_bytes = u64::from(written.get());
    Ok(e)
}

pub(crate) fn commit(req: &mut Request<'_>) -> Handled {
    let node = resolve(req)?;
    let (_offset, _count) = (req.args.u64()?, req.args.u32()?);
    let verifier = req.shared.verifier;
    // The whole file is made durable (with every namespace change): the range is moot.
    Ok(wcc_reply(req, node, |n| Ok(n.fs().fsync(n.ino)?), |e| e.fixed(&verifier)))
}

/// Replies of FSSTAT, FSINFO and PATHCONF: `status, post_op_attr`, then `body` when OK.
fn info_reply(
    req: &Request<'_>,
    node: NfsResult<Node>,
    body: impl FnOnce(&Node, &mut Encoder) -> NfsResult<()>,
) -> Encoder {
    let mut e = req.reply(8 + FATTR3_BYTES + 64);
    match node {
        Err(s) => {
            status(&mut e, s);
            e.bool(false);
        }
        Ok(n) => {
            let mut tail = Encoder::with_capacity(64);
            match body(&n, &mut tail) {
                Ok(()) => {
                    status(&mut e, Stat::Ok);
                    put_post_op_attr(&mut e, &n.export, Some(&n.attr));
                    e.buf.extend_from_slice(&tail.buf);
                }
                Err(s) => {
                    status(&mut e, s);
                    put_post_op_attr(&mut e, &n.export, Some(&n.attr));
                }
            }
        }
    }
    e
}

pub(crate) fn fsstat(req: &mut Request<'_>) -> Handled {
    let node = resolve(req)?;
    Ok(info_reply(req, node, |n, e| {
        let s = n.fs().statfs()?;
        let bs = s.block_size as u64;
        e.u64(s.blocks * bs);
        e.u64(s.blocks_free * bs);
        e.u64(s.blocks_avail * bs);
        e.u64(s.files);
        e.u64(s.files_free);
        e.u64(s.files_free);
        e.u32(0); // invarsec: the numbers change at any time
        Ok(())
    }))
}

const FSF_LINK: u32 = 0x1;
const FSF_SYMLINK: u32 = 0x2;
const FSF_HOMOGENEOUS: u32 = 0x8;
const FSF_CANSETTIME: u32 = 0x10;

pub(crate) fn fsinfo(req: &mut Request<'_>) -> Handled {
    let node = resolve(req)?;
    Ok(info_reply(req, node, |_, e| {
        e.u32(MAX_IO_BYTES); // rtmax
        e.u32(MAX_IO_BYTES); // rtpref
        e.u32(4096); // rtmult
        e.u32(MAX_IO_BYTES); // wtmax
        e.u32(MAX_IO_BYTES); // wtpref
        e.u32(4096); // wtmult
        e.u32(64 << 10); // dtpref
        e.u64(i64::MAX as u64); // maxfilesize
        e.u32(0); // time_delta: nanoseconds
        e.u32(1);
        e.u32(FSF_LINK | FSF_SYMLINK | FSF_HOMOGENEOUS | FSF_CANSETTIME);
        Ok(())
    }))
}

pub(crate) fn pathconf(req: &mut Request<'_>) -> Handled {
    let node = resolve(req)?;
    Ok(info_reply(req, node, |_, e| {
        e.u32(65000); // linkmax (VolumeFs refuses the 65000th link with EMLINK)
        e.u32(strata_fs::NAME_MAX as u32);
        e.bool(true); // no_trunc: long names are refused, not cut
        e.bool(true); // chown_restricted
        e.bool(false); // case_insensitive
        e.bool(true); // case_preserving
        Ok(())
    }))
}
