//! `strata export nfs|nbd|iscsi|list|delete`: exports of volumes over NFS and of LUNs over
//! NBD and iSCSI (the daemon's /v1/exports).

use crate::client::{Client, Failure};
use crate::Out;
use clap::Subcommand;
use strata_api::{CreateExport, Done, ExportInfo};

#[derive(Subcommand)]
pub enum ExportCmd {
    /// Export a volume over NFSv3 (the daemon must run with --nfs-port to serve it).
    Nfs {
        /// POOL/VOLUME; clients mount it as HOST:/POOL/VOLUME.
        volume: String,
        /// Client networks allowed, comma-separated CIDRs or addresses (default: this host only).
        #[arg(long, value_delimiter = ',')]
        clients: Vec<String>,
        /// Read-only: every change answers ROFS.
        #[arg(long)]
        ro: bool,
        /// Map uid/gid 0 to the anonymous user (the default).
        #[arg(long, conflicts_with_all = ["no_root_squash", "all_squash"])]
        root_squash: bool,
        /// Trust root on the clients (for database hosts that run as root, e.g. for chown).
        #[arg(long, conflicts_with = "all_squash")]
        no_root_squash: bool,
        /// Map every user to the anonymous user.
        #[arg(long)]
        all_squash: bool,
        /// The anonymous user's uid (default 65534, nobody).
        #[arg(long)]
        anon_uid: Option<u32>,
        /// The anonymous user's gid (default 65534, nogroup).
        #[arg(long)]
        anon_gid: Option<u32>,
    },
    /// Export a LUN volume (or a snapshot of one, read-only: POOL/VOLUME@SNAPSHOT) over NBD
    /// (the daemon must run with --nbd-port to serve it).
    Nbd {
        volume: String,
        /// The export name clients ask for (default POOL/VOLUME[@SNAPSHOT]).
        #[arg(long)]
        name: Option<String>,
        /// Client networks allowed, comma-separated CIDRs or addresses (default: this host only).
        #[arg(long, value_delimiter = ',')]
        clients: Vec<String>,
        /// Read-only: writes, trims and zeroing answer EPERM.
        #[arg(long)]
        ro: bool,
    },
    /// Export a LUN volume (or a snapshot of one, read-only) as an iSCSI target with one
    /// LUN, 0 (the daemon must run with --iscsi-port to serve it).
    Iscsi {
        volume: String,
        /// The target's name (default iqn.2026-11.io.strata:POOL.VOLUME).
        #[arg(long)]
        iqn: Option<String>,
        /// Initiator IQNs allowed to log in, comma-separated (default: any from --clients).
        #[arg(long, value_delimiter = ',')]
        initiators: Vec<String>,
        /// Client networks allowed, comma-separated CIDRs or addresses (default: this host only).
        #[arg(long, value_delimiter = ',')]
        clients: Vec<String>,
        /// CHAP user name initiators must log in with (with --chap-secret).
        #[arg(long, requires = "chap_secret")]
        chap_user: Option<String>,
        /// CHAP secret, 12 to 255 characters (with --chap-user).
        #[arg(long, requires = "chap_user")]
        chap_secret: Option<String>,
        /// Read-only: writes answer DATA PROTECT.
        #[arg(long)]
        ro: bool,
    },
    /// List exports.
    List,
    /// Delete an export (its clients' file handles become STALE).
    Delete { id: u32 },
}

fn print_exports(rows: &[ExportInfo]) {
    println!("{:>4}  {:<24} {:<5} {:<6} {:<12}  CLIENTS", "ID", "VOLUME", "MODE", "SQUASH", "SERVED");
    for r in rows {
        println!(
            "{:>4}  {:<24} {:<5} {:<6} {:<12}  {}",
            r.id,
            if r.protocol == "nfs" { r.volume.clone() } else { format!("{} ({})", r.volume, r.path) },
            if r.read_only { "ro" } else { "rw" },
            r.squash,
            match (r.active, r.nfs_port.or(r.port)) {
                (true, Some(p)) => format!("{} {p}", r.protocol),
                _ => "no".into(),
            },
            r.clients.join(",")
        );
    }
}

pub fn run(c: &Client, out: &Out, cmd: ExportCmd) -> Result<(), Failure> {
    match cmd {
        ExportCmd::Nfs { volume, clients, ro, root_squash: _, no_root_squash, all_squash, anon_uid, anon_gid } => {
            let squash = if all_squash {
                "all"
            } else if no_root_squash {
                "none"
            } else {
                "root"
            };
            let req = CreateExport {
                volume: volume.clone(),
                protocol: Some("nfs".into()),
                clients: (!clients.is_empty()).then_some(clients),
                read_only: Some(ro),
                squash: Some(squash.into()),
                anon_uid,
                anon_gid,
                ..blank(&volume)
            };
            let v: ExportInfo = c.send("POST", "/v1/exports", &req)?;
            out.show(&v, |v| {
                println!("exported {} as export {} ({})", volume, v.id, v.path);
                if let Some(m) = &v.mount {
                    println!("mount it with: {m}");
                }
                if let Some(n) = &v.note {
                    println!("note: {n}");
                }
            });
        }
        ExportCmd::Nbd { volume, name, clients, ro } => {
            let req = CreateExport {
                volume: volume.clone(),
                protocol: Some("nbd".into()),
                clients: (!clients.is_empty()).then_some(clients),
                read_only: Some(ro),
                name,
                ..blank(&volume)
            };
            let v: ExportInfo = c.send("POST", "/v1/exports", &req)?;
            out.show(&v, |v| print_block_export(&volume, v));
        }
        ExportCmd::Iscsi { volume, iqn, initiators, clients, chap_user, chap_secret, ro } => {
            let req = CreateExport {
                volume: volume.clone(),
                protocol: Some("iscsi".into()),
                clients: (!clients.is_empty()).then_some(clients),
                read_only: Some(ro),
                name: iqn,
                initiators: (!initiators.is_empty()).then_some(initiators),
                chap_user,
                chap_secret,
                ..blank(&volume)
            };
            let v: ExportInfo = c.send("POST", "/v1/exports", &req)?;
            out.show(&v, |v| print_block_export(&volume, v));
        }
        ExportCmd::List => {
            let v: Vec<ExportInfo> = c.get("/v1/exports")?;
            out.show(&v, |v| print_exports(v));
        }
        ExportCmd::Delete { id } => {
            let d: Done = c.call::<(), Done>("DELETE", &format!("/v1/exports/{id}"), None)?;
            out.show(&d, |_| println!("deleted export {id}"));
        }
    }
    Ok(())
}

/// A request with every option unset.
fn blank(volume: &str) -> CreateExport {
    CreateExport {
        volume: volume.into(),
        protocol: None,
        clients: None,
        read_only: None,
        squash: None,
        anon_uid: None,
        anon_gid: None,
        name: None,
        initiators: None,
        chap_user: None,
        chap_secret: None,
    }
}

fn print_block_export(volume: &str, v: &ExportInfo) {
    println!("exported {volume} over {} as export {} ({})", v.protocol, v.id, v.path);
    if let Some(u) = &v.uri {
        println!("connect to: {u}");
    }
    if let Some(n) = &v.note {
        println!("note: {n}");
    }
}
