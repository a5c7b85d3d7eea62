//! `strata export nfs|list|delete`: NFS exports of volumes (the daemon's /v1/exports).

use crate::client::Client;
use clap::Subcommand;
use serde_json::{json, Value};

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

fn print_exports(rows: &[Value]) {
    println!("{:>4}  {:<24} {:<5} {:<6} {:<8}  {}", "ID", "VOLUME", "MODE", "SQUASH", "SERVED", "CLIENTS");
    for r in rows {
        let clients: Vec<&str> = r["clients"].as_array().into_iter().flatten().filter_map(|c| c.as_str()).collect();
        println!(
            "{:>4}  {:<24} {:<5} {:<6} {:<8}  {}",
            r["id"].as_u64().unwrap_or(0),
            r["volume"].as_str().unwrap_or("?"),
            if r["read_only"].as_bool() == Some(true) { "ro" } else { "rw" },
            r["squash"].as_str().unwrap_or("?"),
            match (r["active"].as_bool(), r["nfs_port"].as_u64()) {
                (Some(true), Some(p)) => format!("port {p}"),
                _ => "no".into(),
            },
            clients.join(",")
        );
    }
}

pub fn run(c: &Client, json_out: bool, cmd: ExportCmd) -> Result<(), String> {
    let out = |v: &Value, human: &dyn Fn(&Value)| {
        if json_out {
            println!("{v}");
        } else {
            human(v)
        }
    };
    match cmd {
        ExportCmd::Nfs { volume, clients, ro, root_squash: _, no_root_squash, all_squash, anon_uid, anon_gid } => {
            let squash = if all_squash {
                "all"
            } else if no_root_squash {
                "none"
            } else {
                "root"
            };
            let mut body = json!({"volume": volume, "protocol": "nfs", "read_only": ro, "squash": squash,
                "anon_uid": anon_uid, "anon_gid": anon_gid});
            if !clients.is_empty() {
                body["clients"] = json!(clients);
            }
            let v = c.call("POST", "/v1/exports", Some(&body))?;
            out(&v, &|v| {
                println!("exported {} as export {} ({})", volume, v["id"], v["path"].as_str().unwrap_or("?"));
                if let Some(m) = v["mount"].as_str() {
                    println!("mount it with: {m}");
                }
                if let Some(n) = v["note"].as_str() {
                    println!("note: {n}");
                }
            });
        }
        ExportCmd::List => {
            let v = c.call("GET", "/v1/exports", None)?;
            out(&v, &|v| print_exports(v.as_array().map(Vec::as_slice).unwrap_or(&[])));
        }
        ExportCmd::Delete { id } => {
            let v = c.call("DELETE", &format!("/v1/exports/{id}"), None)?;
            out(&v, &|_| println!("deleted export {id}"));
        }
    }
    Ok(())
}
