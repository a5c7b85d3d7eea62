//! Application-consistent snapshots: freeze the database around the snapshot (the API
//! calls it `quiesce`, as backup tools do; not the engine's quiescing txg, quiesce.rs).
//!
//! - PostgreSQL (`postgresql://...`): `CHECKPOINT`, then `pg_backup_start(label, fast)` held
//!   in one session across the snapshot, then `pg_backup_stop(false)`. Recovery from the
//!   snapshot then starts at that checkpoint (seconds, not minutes, of WAL to replay).
//! - MySQL / MariaDB (`mysql://` or `mariadb://`): `FLUSH TABLES WITH READ LOCK` held in
//!   one session across the snapshot, `UNLOCK TABLES` after.
//!
//! The session is a `psql` / `mariadb` client process the daemon drives through a pipe. If
//! quiescing fails or times out the snapshot is not taken, and the client is killed: the
//! server ends the session, which releases the lock (or ends the backup).

use super::ApiError;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

const MARK: &str = "strata-quiesced";
const TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Postgres,
    MySql,
}

/// A database held quiet until [`FrozenDatabase::release`] (or drop, which kills the session).
pub struct FrozenDatabase {
    kind: Kind,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: std::thread::JoinHandle<String>,
}

fn bad_url(url: &str, why: &str) -> ApiError {
    ApiError::bad_request(
        format!("quiesce URL {url:?}: {why}"),
        "use postgresql://USER@HOST:PORT/DB (or ?host=/socket/dir) or mysql://USER:PASS@HOST:PORT/ (or ?socket=PATH)",
    )
}

/// mysql://user:pass@host:port/db?socket=/path → mariadb client arguments and password.
fn mysql_args(url: &str) -> Result<(Vec<String>, Option<String>), ApiError> {
    let rest = url.split_once("://").map(|(_, r)| r).ok_or_else(|| bad_url(url, "no scheme"))?;
    let (main, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (auth, hostpart) = main.rsplit_once('@').map_or(("", main), |(a, h)| (a, h));
    let (hostport, db) = hostpart.split_once('/').unwrap_or((hostpart, ""));
    let (user, pass) = auth.split_once(':').map_or((auth, None), |(u, p)| (u, Some(p.to_string())));
    let mut args = vec!["--batch".to_string(), "--skip-column-names".into(), "--unbuffered".into()];
    if !user.is_empty() {
        args.push(format!("--user={user}"));
    }
    for kv in query.split('&').filter(|s| !s.is_empty()) {
        match kv.split_once('=') {
            Some(("socket", s)) => args.push(format!("--socket={s}")),
            _ => return Err(bad_url(url, &format!("unknown parameter {kv:?} (only socket=PATH)"))),
        }
    }
    if !hostport.is_empty() {
        let (h, p) = hostport.rsplit_once(':').map_or((hostport, None), |(h, p)| (h, Some(p)));
        args.push(format!("--host={h}"));
        if let Some(p) = p {
            p.parse::<u16>().map_err(|_| bad_url(url, &format!("port {p:?}")))?;
            args.push(format!("--port={p}"));
            args.push("--protocol=TCP".into());
        }
    }
    if !db.is_empty() {
        args.push(db.to_string());
    }
    Ok((args, pass))
}

impl FrozenDatabase {
    fn send(&mut self, sql: &str) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("session closed")?;
        stdin.write_all(sql.as_bytes()).and_then(|_| stdin.flush()).map_err(|e| e.to_string())
    }

    fn wait_mark(&mut self) -> Result<(), String> {
        let deadline = std::time::Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.trim() == MARK => return Ok(()),
                Ok(_) => continue,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    return Err(format!("no answer in {} s", TIMEOUT.as_secs()))
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Err("the session ended".into()),
            }
        }
    }

    fn fail(mut self, what: &str, why: String) -> ApiError {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let stderr = std::mem::replace(&mut self.stderr, std::thread::spawn(String::new)).join().unwrap_or_default();
        let db = if self.kind == Kind::Postgres { "PostgreSQL" } else { "MySQL/MariaDB" };
        ApiError::conflict(
            format!(
                "{what} {db}: {why}{}",
                if stderr.trim().is_empty() { String::new() } else { format!(": {}", stderr.trim()) }
            ),
            "check the URL, that the server is up and the user may run it; no snapshot was taken",
        )
    }

    /// Quiesce the database at `url`; the returned session holds it quiet.
    pub fn begin(url: &str) -> Result<FrozenDatabase, ApiError> {
        let (kind, mut cmd) = if url.starts_with("postgresql://") || url.starts_with("postgres://") {
            let psql = ["/usr/lib/postgresql/15/bin/psql", "/usr/bin/psql"]
                .into_iter()
                .find(|p| std::path::Path::new(p).exists())
                .ok_or_else(|| ApiError::conflict("psql is not installed", "apt-get install postgresql-client"))?;
            let mut c = Command::new(psql);
            c.args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", url]);
            (Kind::Postgres, c)
        } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            let (args, pass) = mysql_args(url)?;
            let mut c = Command::new("mariadb");
            c.args(args);
            if let Some(p) = pass {
                c.env("MYSQL_PWD", p);
            }
            (Kind::MySql, c)
        } else {
            return Err(bad_url(url, "unknown scheme"));
        };
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| ApiError::conflict(format!("start the database client: {e}"), "install the client"))?;
        let stdout = child.stdout.take().expect("piped");
        let mut stderr_pipe = child.stderr.take().expect("piped");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr_pipe.read_to_string(&mut s);
            s
        });
        let stdin = child.stdin.take();
        let mut held = FrozenDatabase { kind, child, stdin, lines, stderr };
        let sql = match kind {
            Kind::Postgres => {
                format!("CHECKPOINT;\nSELECT pg_backup_start('strata-snapshot', true);\nSELECT '{MARK}';\n")
            }
            Kind::MySql => format!("FLUSH TABLES WITH READ LOCK;\nSELECT '{MARK}';\n"),
        };
        if let Err(e) = held.send(&sql).and_then(|_| held.wait_mark()) {
            return Err(held.fail("could not quiesce", e));
        }
        Ok(held)
    }

    /// Let the database go on; an error here does not undo the snapshot.
    pub fn release(mut self) -> Result<(), ApiError> {
        let sql = match self.kind {
            Kind::Postgres => format!("SELECT 1 FROM pg_backup_stop(false);\nSELECT '{MARK}';\n"),
            Kind::MySql => format!("UNLOCK TABLES;\nSELECT '{MARK}';\n"),
        };
        if let Err(e) = self.send(&sql).and_then(|_| self.wait_mark()) {
            return Err(self.fail("could not release", e));
        }
        drop(self.stdin.take()); // end of input: the client quits
        let _ = self.child.wait();
        Ok(())
    }
}

impl Drop for FrozenDatabase {
    fn drop(&mut self) {
        if self.stdin.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mysql_urls() {
        let (a, p) = mysql_args("mysql://root:pw@127.0.0.1:3307/shop").unwrap();
        assert!(a.contains(&"--user=root".to_string()) && a.contains(&"--port=3307".to_string()));
        assert_eq!(a.last().unwrap(), "shop");
        assert_eq!(p.as_deref(), Some("pw"));
        let (a, p) = mysql_args("mariadb://root@/?socket=/run/mysqld/mysqld.sock").unwrap();
        assert!(a.contains(&"--socket=/run/mysqld/mysqld.sock".to_string()));
        assert!(p.is_none());
        assert!(mysql_args("mysql://h:notaport/").is_err());
        assert!(mysql_args("mysql://h/?x=1").is_err());
        assert!(FrozenDatabase::begin("ftp://x").is_err());
    }
}
