//! The etcd calls failover needs (failover.rs), blocking: leases, an owner key claimed in
//! a transaction, keep-alives. Each `Etcd` has its own single-threaded runtime, driven by
//! the failover thread only; every call is bounded by `timeout` (an etcd that does not
//! answer is an error, never a hang: the lease then runs out on its own, which is the
//! point).

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, Identity, PutOptions, TlsOptions, Txn, TxnOp,
    TxnOpResponse,
};
use std::time::Duration;

pub(crate) struct Etcd {
    rt: tokio::runtime::Runtime,
    endpoints: Vec<String>,
    tls: Option<crate::EtcdTls>,
    user: Option<crate::EtcdUser>,
    client: Option<Client>,
    timeout: Duration,
    keeper: Option<(i64, etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream)>,
}

/// What a claim of the owner key found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The key is ours now, on the lease given.
    Ours,
    /// Another daemon's value is there.
    HeldBy(String),
}

impl Etcd {
    /// A client of `endpoints`, with this daemon's TLS settings and etcd user; `https://`
    /// endpoints need `serve --etcd-ca`.
    pub(crate) fn new(endpoints: &[String], opts: &crate::ServeOptions, timeout: Duration) -> Result<Etcd, String> {
        let (tls, user) = (opts.etcd_tls.clone(), opts.etcd_user.clone());
        if endpoints.iter().any(|e| e.starts_with("https://")) && tls.is_none() {
            return Err(format!(
                "etcd at {} is https: start this daemon with --etcd-ca (and --etcd-cert/--etcd-key if etcd asks for client certificates)",
                endpoints.join(",")
            ));
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("start the etcd client's runtime: {e}"))?;
        Ok(Etcd { rt, endpoints: endpoints.to_vec(), tls, user, client: None, timeout, keeper: None })
    }

    fn options(&self) -> ConnectOptions {
        let mut opts = ConnectOptions::new().with_connect_timeout(self.timeout).with_timeout(self.timeout);
        if let Some(t) = &self.tls {
            let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(&t.ca_pem));
            if let Some((cert, key)) = &t.client {
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            opts = opts.with_tls(tls);
        }
        if let Some(u) = &self.user {
            opts = opts.with_user(u.name.clone(), u.password.clone());
        }
        opts
    }

    fn call<T>(
        &mut self,
        what: &str,
        f: impl AsyncFnOnce(&mut Client) -> Result<T, etcd_client::Error>,
    ) -> Result<T, String> {
        let (timeout, endpoints, opts) = (self.timeout, self.endpoints.clone(), self.options());
        let mut client = self.client.take();
        let r = self.rt.block_on(async {
            let c = match client.as_mut() {
                Some(c) => c,
                None => {
                    let c = tokio::time::timeout(timeout, Client::connect(&endpoints, Some(opts)))
                        .await
                        .map_err(|_| format!("connecting to etcd at {} timed out", endpoints.join(",")))?
                        .map_err(|e| format!("connecting to etcd at {}: {}", endpoints.join(","), causes(&e)))?;
                    client.insert(c)
                }
            };
            tokio::time::timeout(timeout, f(c))
                .await
                .map_err(|_| format!("etcd {what}: no answer in {timeout:?}"))?
                .map_err(|e| format!("etcd {what}: {}", causes(&e)))
        });
        if r.is_ok() {
            self.client = client;
        } else {
            // A new connection next time (the endpoint may have come back elsewhere).
            self.keeper = None;
        }
        r
    }

    /// A new lease of `ttl` seconds.
    pub(crate) fn grant(&mut self, ttl: u64) -> Result<i64, String> {
        self.call("lease grant", async |c| c.lease_grant(ttl as i64, None).await.map(|r| r.id()))
    }

    /// Make `key` = `me` on `lease`, if it is absent or already `me` (a restart of the
    /// owner within the lease's life). A transaction: two daemons never both succeed.
    pub(crate) fn claim(&mut self, key: &str, me: &str, lease: i64) -> Result<Claim, String> {
        let put = || TxnOp::put(key, me, Some(PutOptions::new().with_lease(lease)));
        let absent = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([put()])
            .or_else([TxnOp::get(key, None)]);
        let (ok, held) = self.call("claim", async |c| {
            let r = c.txn(absent).await?;
            let held = r.op_responses().into_iter().find_map(|op| match op {
                TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value_str().unwrap_or("?").to_string()),
                _ => None,
            });
            Ok((r.succeeded(), held))
        })?;
        if ok {
            return Ok(Claim::Ours);
        }
        match held {
            Some(v) if v == me => {
                let mine = Txn::new().when([Compare::value(key, CompareOp::Equal, me)]).and_then([put()]);
                match self.call("claim", async |c| c.txn(mine).await.map(|r| r.succeeded()))? {
                    true => Ok(Claim::Ours),
                    false => Ok(Claim::HeldBy("(changed while claiming)".into())),
                }
            }
            Some(v) => Ok(Claim::HeldBy(v)),
            // Gone between the two reads (a lease that just ran out): try again next time.
            None => Ok(Claim::HeldBy("(nobody: it expired while claiming)".into())),
        }
    }

    /// Who holds `key`, if anyone.
    pub(crate) fn owner(&mut self, key: &str) -> Result<Option<String>, String> {
        self.call("get", async |c| {
            let r = c.get(key, None).await?;
            Ok(r.kvs().first().map(|kv| kv.value_str().unwrap_or("?").to_string()))
        })
    }

    /// Put `key` = `value` with no lease (a marker).
    pub(crate) fn put(&mut self, key: &str, value: &str) -> Result<(), String> {
        self.call("put", async |c| c.put(key, value, None).await.map(|_| ()))
    }

    pub(crate) fn delete(&mut self, key: &str) -> Result<(), String> {
        self.call("delete", async |c| c.delete(key, None).await.map(|_| ()))
    }

    /// Delete `key` if it is still `me` (giving a lease up on purpose).
    pub(crate) fn release(&mut self, key: &str, me: &str) -> Result<(), String> {
        let t = Txn::new().when([Compare::value(key, CompareOp::Equal, me)]).and_then([TxnOp::delete(key, None)]);
        self.call("release", async |c| c.txn(t).await.map(|_| ()))
    }

    /// Renew `lease`: its remaining TTL in seconds (0: it expired; the key it carried is
    /// gone).
    pub(crate) fn keep_alive(&mut self, lease: i64) -> Result<i64, String> {
        let mut keeper = self.keeper.take().filter(|(id, _, _)| *id == lease);
        if keeper.is_none() {
            let (k, s) = self.call("lease keep-alive", async |c| c.lease_keep_alive(lease).await)?;
            keeper = Some((lease, k, s));
        }
        let (id, mut k, mut s) = keeper.expect("made above");
        let timeout = self.timeout;
        let r = self.rt.block_on(async {
            tokio::time::timeout(timeout, async {
                k.keep_alive().await?;
                s.message().await
            })
            .await
        });
        match r {
            Ok(Ok(Some(resp))) => {
                self.keeper = Some((id, k, s));
                Ok(resp.ttl())
            }
            Ok(Ok(None)) => Err("etcd closed the keep-alive stream".into()),
            Ok(Err(e)) => Err(format!("etcd lease keep-alive: {}", causes(&e))),
            Err(_) => Err(format!("etcd lease keep-alive: no answer in {timeout:?}")),
        }
    }
}

/// An error and its causes ("transport error: invalid peer certificate: ..."): tonic's
/// own message alone says little.
fn causes(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.ends_with(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s.push_str(auth_hint(&s));
    s
}

/// What to do about etcd's authentication errors, which name no flag of ours.
fn auth_hint(message: &str) -> &'static str {
    if message.contains("authentication failed") {
        " (check serve --etcd-user and the password in --etcd-password-file)"
    } else if message.contains("user name is empty") || message.contains("user name not found") {
        " (etcd has authentication enabled: start the daemon with --etcd-user and --etcd-password-file)"
    } else if message.contains("permission denied") {
        " (grant the etcd user of serve --etcd-user a role with readwrite on the prefix /strata/failover/)"
    } else {
        ""
    }
}
