//! NFS version 3 (RFC 1813): the 22 procedures on [`strata_fs::VolumeFs`].
//!
//! Every procedure starts by resolving its file handle(s) (`resolve`): the tag must verify
//! (else BADHANDLE), the export must still exist and still hold the same volume, the inode
//! must exist with the generation in the handle (else STALE), and the client's address
//! must be in the export's networks (else ACCES, logged). The request then acts as the
//! export's view of the caller ([`Identity`], after squashing).
//!
//! Permission checks are ours (access.rs): VolumeFs records owners and modes but leaves
//! checking to its front end, and over NFS no kernel does it for us.
//!
//! Statistics: a request whose file handle names an export with statistics is counted
//! there (strata-stats) once it is answered: READ as read, WRITE as write (a stable one
//! included: its sync is part of its latency), COMMIT as sync, every other procedure as
//! other; an error is a reply whose nfsstat3 is not NFS3_OK (or GARBAGE_ARGS). A request
//! whose handle does not resolve to an export (BADHANDLE, STALE) belongs to no volume and
//! is not counted. Latency: from the start of the procedure to its reply being built
//! (the reply's send excluded, as for every front end).
//!
//! Modules: `attr` (fattr3, wcc_data, sattr3), `access` (permission rules), `setattr`
//! (SETATTR's ownership rules, Linux's), `file` (attributes, data, COMMIT, file system
//! information), `dir` (names).

mod access;
mod attr;
mod dir;
mod file;
mod setattr;

use crate::export::{Export, Identity};
use crate::handle::{HandleFields, HANDLE_BYTES};
use crate::rpc::AcceptStat;
use crate::server::{Handled, Request, Shared};
use crate::xdr::{Decoder, Encoder, XdrResult};
use std::sync::Arc;
use strata_fs::{Attr, FsError, ROOT_INO};
use strata_stats::OpClass;

/// rtmax / wtmax: 1 MiB, the largest the Linux client uses.
pub const MAX_IO_BYTES: u32 = 1 << 20;

/// nfsstat3
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    Ok = 0,
    Perm = 1,
    NoEnt = 2,
    Io = 5,
    NxIo = 6,
    Acces = 13,
    Exist = 17,
    XDev = 18,
    NoDev = 19,
    NotDir = 20,
    IsDir = 21,
    Inval = 22,
    FBig = 27,
    NoSpc = 28,
    RoFs = 30,
    MLink = 31,
    NameTooLong = 63,
    NotEmpty = 66,
    DQuot = 69,
    Stale = 70,
    BadHandle = 10001,
    NotSync = 10002,
    NotSupp = 10004,
    TooSmall = 10005,
    ServerFault = 10006,
    BadType = 10007,
}

impl From<FsError> for Stat {
    fn from(e: FsError) -> Stat {
        match e.errno {
            libc::EPERM => Stat::Perm,
            libc::ENOENT => Stat::NoEnt,
            libc::EIO => {
                tracing::error!("NFS request failed with an I/O error: {e}");
                Stat::Io
            }
            libc::ENXIO => Stat::NxIo,
            libc::EACCES => Stat::Acces,
            libc::EEXIST => Stat::Exist,
            libc::EXDEV => Stat::XDev,
            libc::ENODEV => Stat::NoDev,
            libc::ENOTDIR => Stat::NotDir,
            libc::EISDIR => Stat::IsDir,
            libc::EINVAL => Stat::Inval,
            libc::EFBIG => Stat::FBig,
            libc::ENOSPC => Stat::NoSpc,
            libc::EROFS => Stat::RoFs,
            libc::EMLINK => Stat::MLink,
            libc::ENAMETOOLONG => Stat::NameTooLong,
            libc::ENOTEMPTY => Stat::NotEmpty,
            libc::EDQUOT => Stat::DQuot,
            libc::ESTALE => Stat::Stale,
            libc::EOPNOTSUPP => Stat::NotSupp,
            _ => {
                tracing::error!("NFS request failed with an unexpected error: {e}");
                Stat::ServerFault
            }
        }
    }
}

pub(crate) type NfsResult<T> = Result<T, Stat>;

/// A file handle that resolved: its export, inode and current attributes, and who the
/// request acts as there.
pub(crate) struct Node {
    pub export: Arc<Export>,
    pub ino: u64,
    pub attr: Attr,
    pub who: Identity,
}

impl Node {
    pub fn fs(&self) -> &strata_fs::VolumeFs {
        &self.export.fs
    }

    /// Fresh attributes (after a change), or none if they cannot be read.
    pub fn reload(&self) -> Option<Attr> {
        self.export.fs.getattr(self.ino).ok()
    }

    pub fn writable(&self) -> NfsResult<()> {
        if self.export.policy.read_only {
            return Err(Stat::RoFs);
        }
        Ok(())
    }

    /// The handle of an inode of this node's export.
    pub fn handle_of(&self, shared: &Shared, a: &Attr) -> [u8; HANDLE_BYTES] {
        mint(shared, &self.export, a)
    }
}

pub(crate) fn mint(shared: &Shared, export: &Export, a: &Attr) -> [u8; HANDLE_BYTES] {
    shared.key.mint(&HandleFields {
        export_id: export.id,
        pool_guid: export.pool_guid,
        volume_id: export.volume_id(),
        ino: a.ino,
        generation: a.crtime_ns as u64,
    })
}

/// The root directory's handle of an export (for MOUNT).
pub(crate) fn root_handle(shared: &Shared, export: &Export) -> Result<[u8; HANDLE_BYTES], FsError> {
    let a = export.fs.getattr(ROOT_INO)?;
    Ok(mint(shared, export, &a))
}

/// Read an nfs_fh3 and resolve it (see the module comment for the checks).
pub(crate) fn resolve(req: &mut Request<'_>) -> XdrResult<NfsResult<Node>> {
    let fh = req.args.opaque(64)?;
    Ok(resolve_bytes(req, fh))
}

pub(crate) fn resolve_bytes(req: &Request<'_>, fh: &[u8]) -> NfsResult<Node> {
    let f = req.shared.key.open(fh).map_err(|_| Stat::BadHandle)?;
    let export = req.shared.exports.get(f.export_id).ok_or(Stat::Stale)?;
    if let Some(s) = &export.stats {
        // The first handle names the volume counted (RENAME and LINK have two, of one export).
        let _ = req.stats.get_or_init(|| s.clone());
    }
    if !export.policy.allows(req.peer) {
        req.shared.log_refusal(req.peer, export.id, &format!("NFS request on {}", export.path));
        return Err(Stat::Acces);
    }
    if f.pool_guid != export.pool_guid || f.volume_id != export.volume_id() {
        return Err(Stat::Stale);
    }
    let attr = export.fs.getattr(f.ino).map_err(|e| if e.errno == libc::ENOENT { Stat::Stale } else { e.into() })?;
    if attr.crtime_ns as u64 != f.generation || attr.nlink == 0 {
        return Err(Stat::Stale);
    }
    let who = export.policy.identity(&req.cred);
    Ok(Node { export, ino: f.ino, attr, who })
}

/// diropargs3: a directory handle and a name. Names are decoded up to 4 KiB so that a long
/// one gets NAMETOOLONG rather than GARBAGE_ARGS.
pub(crate) fn name<'a>(d: &mut Decoder<'a>) -> XdrResult<&'a [u8]> {
    d.string(4096)
}

pub(crate) fn status(e: &mut Encoder, s: Stat) {
    e.u32(s as u32);
}

pub(crate) fn dispatch(req: &mut Request<'_>) -> Handled {
    let t = std::time::Instant::now();
    let r = run(req);
    if let Some(s) = req.stats.get() {
        let class = match req.proc_ {
            6 => OpClass::Read,
            7 => OpClass::Write,
            21 => OpClass::Sync,
            _ => OpClass::Other,
        };
        let ok = r.as_ref().is_ok_and(|e| reply_status(e) == Some(Stat::Ok as u32));
        s.record(class, req.io_bytes, t.elapsed(), ok);
    }
    r
}

/// The nfsstat3 of a reply built by `Request::reply` (None: not an accepted SUCCESS).
fn reply_status(e: &Encoder) -> Option<u32> {
    // Record mark, xid, REPLY, MSG_ACCEPTED, verifier (flavor, length 0), accept_stat.
    const ACCEPT_STAT_AT: usize = 24;
    let word = |at: usize| e.buf.get(at..at + 4).map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")));
    match word(ACCEPT_STAT_AT) {
        Some(0) => word(ACCEPT_STAT_AT + 4),
        _ => None,
    }
}

fn run(req: &mut Request<'_>) -> Handled {
    match req.proc_ {
        0 => Ok(req.reply(0)),
        1 => file::getattr(req),
        2 => file::setattr(req),
        3 => dir::lookup(req),
        4 => file::access(req),
        5 => file::readlink(req),
        6 => file::read(req),
        7 => file::write(req),
        8 => dir::create(req),
        9 => dir::mkdir(req),
        10 => dir::symlink(req),
        11 => dir::mknod(req),
        12 => dir::remove(req, false),
        13 => dir::remove(req, true),
        14 => dir::rename(req),
        15 => dir::link(req),
        16 => dir::readdir(req, false),
        17 => dir::readdir(req, true),
        18 => file::fsstat(req),
        19 => file::fsinfo(req),
        20 => file::pathconf(req),
        21 => file::commit(req),
        _ => Ok(crate::rpc::accepted_reply(req.xid, AcceptStat::ProcUnavail, 0)),
    }
}

/// Attributes and identities for the permission tests of access.rs and setattr.rs.
#[cfg(test)]
pub(crate) mod test_support {
    use crate::export::Identity;
    use strata_fs::Attr;

    pub(crate) fn attr(mode: u32, uid: u32, gid: u32) -> Attr {
        Attr {
            ino: 5,
            size: 0,
            blocks: 0,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            crtime_ns: 0,
            mode,
            nlink: 1,
            uid,
            gid,
            rdev: 0,
            blksize: 4096,
        }
    }

    pub(crate) fn who(uid: u32, gid: u32, groups: &[u32]) -> Identity {
        Identity { uid, gid, groups: groups.to_vec() }
    }
}
