//! Portmapper version 2 (RFC 1833 §3): maps (program, version, protocol) to a port, so
//! that clients that know only the server's address find MOUNT and NFS. Our own programs
//! are registered at start; SET and UNSET are taken from loopback clients only (a remote
//! host must not redirect our clients). CALLIT (indirect calls) is not provided: it is an
//! amplification vector and no NFS client needs it.

use crate::rpc::AcceptStat;
use crate::server::{Handled, Request};

pub(crate) fn dispatch(req: &mut Request<'_>) -> Handled {
    match req.proc_ {
        0 => Ok(req.reply(0)),
        1 | 2 => {
            let (prog, vers, prot, port) = (req.args.u32()?, req.args.u32()?, req.args.u32()?, req.args.u32()?);
            let ok = req.peer.is_loopback() && {
                let mut t = req.shared.portmap.lock().expect("portmap table");
                if req.proc_ == 1 {
                    // SET refuses to replace an existing mapping (RFC 1833).
                    t.len() < 1024
                        && !t.contains_key(&(prog, vers, prot))
                        && t.insert((prog, vers, prot), port).is_none()
                } else {
                    let before = t.len();
                    t.retain(|&(p, v, _), _| !(p == prog && v == vers));
                    t.len() != before
                }
            };
            let mut e = req.reply(4);
            e.bool(ok);
            Ok(e)
        }
        3 => {
            let (prog, vers, prot, _port) = (req.args.u32()?, req.args.u32()?, req.args.u32()?, req.args.u32()?);
            let port = req.shared.portmap.lock().expect("portmap table").get(&(prog, vers, prot)).copied().unwrap_or(0);
            let mut e = req.reply(4);
            e.u32(port);
            Ok(e)
        }
        4 => {
            let t = req.shared.portmap.lock().expect("portmap table");
            let mut e = req.reply(20 * t.len() + 4);
            for (&(prog, vers, prot), &port) in t.iter() {
                e.bool(true);
                e.u32(prog);
                e.u32(vers);
                e.u32(prot);
                e.u32(port);
            }
            e.bool(false);
            Ok(e)
        }
        _ => Ok(crate::rpc::accepted_reply(req.xid, AcceptStat::ProcUnavail, 0)),
    }
}
