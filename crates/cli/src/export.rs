//! `strata export nfs|list|delete`: NFS exports of volumes (the daemon's /v1/exports).

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
    /// List exports.
    List,
    /// Delete an export (its clients' file handles become STALE).
    Delete { id: u32 },
}

fn print_exports(rows: &[ExportInfo]) {
    println!("{:>4}  {:<24} {:<5} {:<6} {:<8}  CLIENTS", "ID", "VOLUME", "MODE", "SQUASH", "SERVED");
    for r in rows {
        println!(
            "{:>4}  {:<24} {:<5} {:<6} {:<8}  {}",
            r.id,
            r.volume,
            if r.read_only { "ro" } else { "rw" },
            r.squash,
            match (r.active, r.nfs_port) {
                (true, Some(p)) => format!("port {p}"),
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
