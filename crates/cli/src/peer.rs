//! `strata peer`: other Strata daemons paired with this one, for mirrors between daemons
//! (invite, add, list, show, delete; docs/peers.md).

use crate::client::{seg, Client, Failure};
use crate::Out;
use clap::Subcommand;
use serde::Serialize;
use strata_api::{AddPeer, CreateInvitation, Done, Invitation, PeerInfo, PeerPing};
use strata_daemon::utc;

#[derive(Subcommand)]
pub enum PeerCmd {
    /// Make a one-time invitation for another daemon to pair with this one. The token is
    /// printed once and is valid for 10 minutes; give it to `strata peer add` there.
    Invite {
        /// The name this daemon gives the peer that joins (default: its host name).
        #[arg(long)]
        name: Option<String>,
        /// Pools of this daemon the peer may write to (mirror into).
        #[arg(long, value_delimiter = ',')]
        grant: Vec<String>,
        /// Seconds the invitation is valid (1 to 600; for tests).
        #[arg(long, hide = true)]
        expires_seconds: Option<u64>,
    },
    /// Pair with the daemon at HOST:PORT (its replication listener, `serve --repl-port`)
    /// that made an invitation, calling it NAME here.
    Add {
        name: String,
        address: String,
        /// The token `strata peer invite` printed there. (Not `--token`: that is the API's
        /// bearer token.)
        #[arg(long)]
        invitation: String,
    },
    /// Every paired peer.
    List,
    /// A peer's address, pinned fingerprint and grants.
    Show {
        name: String,
        /// Also connect to it and ping it (its version, the round trip).
        #[arg(long)]
        ping: bool,
    },
    /// Connect to a peer and ping it.
    #[command(hide = true)]
    Ping { name: String },
    /// Forget a peer: this daemon refuses its certificate from now on.
    Delete { name: String },
}

#[derive(Serialize)]
struct ShowWithPing {
    #[serde(flatten)]
    info: PeerInfo,
    ping: PeerPing,
}

fn path(name: &str) -> String {
    format!("/v1/peers/{}", seg(name))
}

fn print_info(p: &PeerInfo) {
    println!(
        "peer {} ({})",
        p.name,
        if p.origin == "invited" { "joined with our invitation" } else { "we joined with its invitation" }
    );
    println!("  address:      {}", p.address.as_deref().unwrap_or("none (it had no replication listener)"));
    println!("  fingerprint:  {}", p.fingerprint);
    println!("  may write to: {}", if p.grants.is_empty() { "no pool here".into() } else { p.grants.join(", ") });
    if p.origin == "joined" {
        let there = if p.granted_there.is_empty() { "no pool there".into() } else { p.granted_there.join(", ") };
        println!("  we may write: {there}");
    }
    if let Some(n) = &p.known_there_as {
        println!("  known there as: {n}");
    }
    println!("  paired:       {} UTC", utc(p.paired_ns / 1_000_000_000));
}

fn print_ping(p: &PeerPing) {
    println!(
        "ping {} at {}: version {} (ours {}), connect {:.1} ms, round trip {:.2} ms",
        p.name, p.address, p.peer_version, p.version, p.connect_ms, p.round_trip_ms
    );
}

pub fn run(c: &Client, out: &Out, cmd: PeerCmd) -> Result<(), Failure> {
    match cmd {
        PeerCmd::Invite { name, grant, expires_seconds } => {
            let req = CreateInvitation { name, grants: grant, expires_seconds };
            let i: Invitation = c.send("POST", "/v1/peers/invitations", &req)?;
            out.show(&i, |i| {
                println!("{}", i.token);
                eprintln!(
                    "invitation {} (valid once, until {} UTC; the token is not shown again)",
                    i.id,
                    utc(i.expires_ns / 1_000_000_000)
                );
                eprintln!("this daemon's fingerprint: {}", i.fingerprint);
                if !i.grants.is_empty() {
                    eprintln!("the new peer may write to: {}", i.grants.join(", "));
                }
                let at = i.listen.as_deref().unwrap_or("HOST:PORT");
                eprintln!("on the other daemon: strata peer add NAME {at} --invitation TOKEN");
            });
        }
        PeerCmd::Add { name, address, invitation } => {
            let req = AddPeer { name, address, token: invitation };
            let p: PeerInfo = c.send("POST", "/v1/peers", &req)?;
            out.show(&p, |p| {
                println!("paired with {} at {}", p.name, p.address.as_deref().unwrap_or("?"));
                print_info(p);
            });
        }
        PeerCmd::List => {
            let v: Vec<PeerInfo> = c.get("/v1/peers")?;
            out.show(&v, |v| {
                println!("{:<20} {:<24} {:<18} GRANTS", "PEER", "ADDRESS", "FINGERPRINT");
                for p in v {
                    println!(
                        "{:<20} {:<24} {:<18} {}",
                        p.name,
                        p.address.as_deref().unwrap_or("-"),
                        format!("{}…", &p.fingerprint[..p.fingerprint.len().min(16)]),
                        p.grants.join(",")
                    );
                }
            });
        }
        PeerCmd::Show { name, ping: false } => {
            let p: PeerInfo = c.get(&path(&name))?;
            out.show(&p, print_info);
        }
        PeerCmd::Show { name, ping: true } => {
            let info: PeerInfo = c.get(&path(&name))?;
            let ping: PeerPing = c.get(&format!("{}/ping", path(&name)))?;
            out.show(&ShowWithPing { info, ping }, |s| {
                print_info(&s.info);
                print_ping(&s.ping);
            });
        }
        PeerCmd::Ping { name } => {
            let p: PeerPing = c.get(&format!("{}/ping", path(&name)))?;
            out.show(&p, print_ping);
        }
        PeerCmd::Delete { name } => {
            let d: Done = c.call::<(), Done>("DELETE", &path(&name), None)?;
            out.show(&d, |d| println!("deleted peer {} (its certificate is refused from now on)", d.target));
        }
    }
    Ok(())
}
