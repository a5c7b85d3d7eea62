//! `strata token ...`, `strata history`, `strata events`, `strata whoami`.

use crate::client::{seg, Client, Failure};
use crate::Out;
use clap::Subcommand;
use strata_api::*;
use strata_daemon::utc;

#[derive(Subcommand)]
pub enum TokenCmd {
    /// Make a token for TCP callers (its secret is shown once; the daemon keeps a hash).
    Create {
        /// A name to recognise it by (1-64 of a-z 0-9 . _ -).
        name: String,
        /// viewer (read only), operator (volumes, snapshots, clones, mounts, exports) or admin.
        #[arg(long)]
        role: String,
    },
    /// List tokens (names and roles, never secrets).
    List,
    /// Revoke a token: requests carrying it are refused from now on.
    Revoke { name: String },
}

pub fn run_token(c: &Client, out: &Out, cmd: TokenCmd) -> Result<(), Failure> {
    match cmd {
        TokenCmd::Create { name, role } => {
            let role = Role::parse(&role)
                .ok_or_else(|| Failure::usage(format!("--role {role:?}: use viewer, operator or admin")))?;
            let t: CreatedToken = c.send("POST", "/v1/tokens", &CreateToken { name, role })?;
            out.show(&t, |t| {
                println!("token {} ({}): {}", t.info.name, t.info.role.name(), t.token);
                println!("keep it secret; it is not shown again. Use it as STRATA_TOKEN with STRATA_API=HOST:PORT.");
            });
        }
        TokenCmd::List => {
            let ts: Vec<TokenInfo> = c.get("/v1/tokens")?;
            out.show(&ts, |ts| {
                println!("{:<24} {:<9} {:<20} BY", "NAME", "ROLE", "CREATED");
                for t in ts {
                    println!(
                        "{:<24} {:<9} {:<20} {}",
                        t.name,
                        t.role.name(),
                        utc(t.created_ns / 1_000_000_000),
                        t.created_by
                    );
                }
            });
        }
        TokenCmd::Revoke { name } => {
            let d: Done = c.call::<(), Done>("DELETE", &format!("/v1/tokens/{}", seg(&name)), None)?;
            out.show(&d, |_| println!("revoked token {name}"));
        }
    }
    Ok(())
}

pub fn run_history(c: &Client, out: &Out, pool: Option<String>, limit: Option<u32>) -> Result<(), Failure> {
    let mut q = String::from("/v1/history?");
    if let Some(p) = &pool {
        q.push_str(&format!("pool={}&", seg(p)));
    }
    if let Some(l) = limit {
        q.push_str(&format!("limit={l}"));
    }
    let h: Vec<HistoryEntry> = c.get(q.trim_end_matches(['&', '?']))?;
    out.show(&h, |h| {
        for e in h {
            println!(
                "{} {} [{}] {} -> {} {}",
                utc(e.time_ns / 1_000_000_000),
                e.caller,
                e.operation,
                e.target,
                e.status,
                e.result
            );
            if let Some(r) = &e.request {
                println!("    {r}");
            }
        }
    });
    Ok(())
}

pub fn run_whoami(c: &Client, out: &Out) -> Result<(), Failure> {
    let h: Health = c.get("/v1/health")?;
    out.show(&h, |h| println!("{} ({}), daemon {}", h.caller, h.role.name(), h.version));
    Ok(())
}

fn print_event(e: &strata_api::EventInfo) {
    let secs = e.time_ns / 1_000_000_000;
    let where_ = match (&e.pool, &e.target) {
        (Some(p), Some(t)) => format!("{p} {t}"),
        (Some(p), None) => p.clone(),
        (None, Some(t)) => t.clone(),
        (None, None) => "-".into(),
    };
    println!("{} {:<7} {:<16} {:<28} {}", utc(secs), e.severity, e.kind, where_, e.message);
}

/// `strata events [--limit N] [--follow]`.
pub fn run_events(c: &Client, out: &Out, limit: u32, follow: bool) -> Result<(), Failure> {
    let mut v: Vec<strata_api::EventInfo> = c.get(&format!("/v1/events?limit={limit}"))?;
    if !follow {
        out.show(&v, |v| v.iter().for_each(print_event));
        return Ok(());
    }
    let mut last = 0;
    loop {
        for e in &v {
            match out.json {
                true => println!("{}", serde_json::to_string(e).expect("events serialise")),
                false => print_event(e),
            }
            last = e.id;
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
        v = c.get(&format!("/v1/events?after={last}&limit=10000"))?;
    }
}
