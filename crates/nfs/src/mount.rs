//! MOUNT version 3 (RFC 1813 appendix I): how a client turns an export path into the root
//! file handle. MNT checks the client's address against the export's networks (refusals
//! answer MNT3ERR_ACCES and are logged); the mount list DUMP returns is advisory and kept
//! in memory, as on every NFSv3 server.

use crate::nfs3::root_handle;
use crate::rpc::{AcceptStat, Credential};
use crate::server::{Handled, Request};
use crate::xdr::Encoder;

/// MNTPATHLEN
const MAX_PATH: usize = 1024;

const MNT3_OK: u32 = 0;
const MNT3ERR_NOENT: u32 = 2;
const MNT3ERR_IO: u32 = 5;
const MNT3ERR_ACCES: u32 = 13;
const MNT3ERR_SERVERFAULT: u32 = 10006;

const AUTH_SYS: u32 = 1;
const AUTH_NONE: u32 = 0;

fn client_name(req: &Request<'_>) -> String {
    match &req.cred {
        Credential::Sys { machine, .. } if !machine.is_empty() => machine.clone(),
        _ => req.peer.to_string(),
    }
}

pub(crate) fn dispatch(req: &mut Request<'_>) -> Handled {
    match req.proc_ {
        0 => Ok(req.reply(0)),
        1 => mnt(req),
        2 => {
            let mounts = req.shared.mounts.lock().expect("mount list");
            let mut e = req.reply(64 * mounts.len());
            for (host, path) in mounts.iter() {
                e.bool(true);
                e.opaque(host.as_bytes());
                e.opaque(path.as_bytes());
            }
            e.bool(false);
            Ok(e)
        }
        3 => {
            let path = String::from_utf8_lossy(req.args.string(MAX_PATH)?).into_owned();
            let host = client_name(req);
            req.shared.mounts.lock().expect("mount list").remove(&(host, path));
            Ok(req.reply(0))
        }
        4 => {
            let host = client_name(req);
            req.shared.mounts.lock().expect("mount list").retain(|(h, _)| *h != host);
            Ok(req.reply(0))
        }
        5 => {
            let exports = req.shared.exports.list();
            let mut e = req.reply(128 * exports.len());
            for x in exports {
                e.bool(true);
                e.opaque(x.path.as_bytes());
                for c in &x.policy.clients {
                    e.bool(true);
                    e.opaque(c.to_string().as_bytes());
                }
                e.bool(false);
            }
            e.bool(false);
            Ok(e)
        }
        _ => Ok(crate::rpc::accepted_reply(req.xid, AcceptStat::ProcUnavail, 0)),
    }
}

fn mnt(req: &mut Request<'_>) -> Handled {
    let path = req.args.string(MAX_PATH)?;
    let status_only = |req: &Request<'_>, stat: u32| {
        let mut e: Encoder = req.reply(4);
        e.u32(stat);
        e
    };
    let Some(export) = req.shared.exports.by_path(path) else {
        tracing::info!(client = %req.peer, path = %String::from_utf8_lossy(path), "MOUNT of an unknown export");
        return Ok(status_only(req, MNT3ERR_NOENT));
    };
    if !export.policy.allows(req.peer) {
        req.shared.log_refusal(req.peer, export.id, &format!("MOUNT {}", export.path));
        return Ok(status_only(req, MNT3ERR_ACCES));
    }
    let fh = match root_handle(req.shared, &export) {
        Ok(fh) => fh,
        Err(e) => {
            tracing::error!(export = %export.path, "MOUNT: read the root directory: {e}");
            let stat = if e.errno == libc::EIO { MNT3ERR_IO } else { MNT3ERR_SERVERFAULT };
            return Ok(status_only(req, stat));
        }
    };
    let host = client_name(req);
    {
        let mut mounts = req.shared.mounts.lock().expect("mount list");
        // Advisory and in memory: bounded so that a client mounting in a loop cannot grow it.
        if mounts.len() < 4096 {
            mounts.insert((host, export.path.clone()));
        }
    }
    tracing::info!(client = %req.peer, export = %export.path, "MOUNT");
    let mut e = req.reply(fh.len() + 20);
    e.u32(MNT3_OK);
    e.opaque(&fh);
    e.u32(2);
    e.u32(AUTH_SYS);
    e.u32(AUTH_NONE);
    Ok(e)
}
