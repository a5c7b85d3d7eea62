//! The guard every request passes, in this order (except reads of the web console's
//! files: code, no data, served without a token so that its login page loads; console.rs):
//! 1. browsers: a request with an `Origin` other than the daemon's own, or marked
//!    cross-site by `Sec-Fetch-Site`, is refused; on TCP the `Host` must name the listener
//!    (a DNS-rebinding page cannot reach it by another name);
//! 2. a request that changes something must be `Content-Type: application/json` (a page
//!    cannot send that cross-origin without a preflight the daemon never answers);
//! 3. who is calling: the socket peer's uid, or the bearer token (access/);
//! 4. may they: the route's role, read from the OpenAPI document (http/mod.rs);
//! 5. the audit record of every request that is not a read, refused ones included.

use super::extract::{Failure, MAX_BODY_BYTES};
use crate::access::{unix_caller, Caller};
use crate::service::{ApiError, Daemon};
use crate::SystemClock;
use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use strata_api::{ErrorKind, HistoryEntry, Role};
use strata_engine::Clock;

/// Where a connection came from (set by the listener, server.rs).
#[derive(Debug, Clone)]
pub(crate) enum Peer {
    Unix {
        uid: u32,
        gid: u32,
        pid: Option<i32>,
    },
    /// `hosts`: the names a request's Host may use; None with TLS (the certificate check
    /// already binds the name a browser used to this daemon).
    Tcp {
        addr: SocketAddr,
        hosts: Option<Arc<Vec<String>>>,
    },
}

pub(crate) struct Guard {
    pub d: Arc<Daemon>,
    /// (method, route) → the role it needs.
    roles: HashMap<(Method, String), Role>,
    /// The group whose members are admins on the socket.
    admin_gid: Option<u32>,
    pub doc: Arc<Value>,
}

impl Guard {
    pub(crate) fn new(d: Arc<Daemon>, doc: Value, admin_gid: Option<u32>) -> Guard {
        Guard { d, roles: route_roles(&doc), admin_gid, doc: Arc::new(doc) }
    }
}

/// Each operation's role: the scope of its `token` security requirement.
pub(crate) fn route_roles(doc: &Value) -> HashMap<(Method, String), Role> {
    let mut out = HashMap::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for (method, op) in item.as_object().into_iter().flatten() {
            let Ok(m) = method.to_uppercase().parse::<Method>() else { continue };
            let role = op["security"][0]["token"][0].as_str().and_then(Role::parse);
            if let Some(role) = role {
                out.insert((m, path.clone()), role);
            }
        }
    }
    out
}

fn refuse(kind: ErrorKind, message: impl Into<String>, hint: &str) -> ApiError {
    ApiError::new(kind, message, hint)
}

/// Checks 1 and 2.
fn browser_checks(req: &Request, peer: &Peer, mutating: bool) -> Result<(), ApiError> {
    let h = req.headers();
    let host = h.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    if let Peer::Tcp { hosts: Some(hosts), .. } = peer {
        if !hosts.iter().any(|a| a.eq_ignore_ascii_case(host)) {
            return Err(refuse(
                ErrorKind::PermissionDenied,
                format!("Host {host:?} does not name this daemon"),
                "address the daemon by its listening address (or a name in api.hostnames)",
            ));
        }
    }
    if let Some(origin) = h.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let own = [format!("http://{host}"), format!("https://{host}")];
        if !own.iter().any(|o| o == origin) {
            return Err(refuse(
                ErrorKind::PermissionDenied,
                format!("cross-origin request from {origin:?}"),
                "the control API does not serve web pages of other origins",
            ));
        }
    }
    if h.get("sec-fetch-site").and_then(|v| v.to_str().ok()) == Some("cross-site") {
        return Err(refuse(ErrorKind::PermissionDenied, "cross-site request", "use the CLI or the API directly"));
    }
    if mutating {
        let ct = h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        let essence = ct.split(';').next().unwrap_or("").trim();
        if !essence.eq_ignore_ascii_case("application/json") {
            return Err(refuse(
                ErrorKind::UnsupportedMediaType,
                format!("Content-Type {ct:?}: a request that changes something must be application/json"),
                "send the header Content-Type: application/json (with a JSON body, {} if it has none)",
            ));
        }
    }
    Ok(())
}

/// Check 3: who is calling.
fn authenticate(g: &Guard, req: &Request, peer: &Peer) -> Result<Caller, ApiError> {
    match peer {
        Peer::Unix { uid, gid, pid } => unix_caller(*uid, *gid, *pid, g.admin_gid).map_err(|why| {
            refuse(ErrorKind::PermissionDenied, why, "run as root, or add the user to the daemon's group (strata)")
        }),
        Peer::Tcp { .. } => {
            let auth = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
            let token = auth.and_then(|a| a.strip_prefix("Bearer ")).map(str::trim);
            let Some(token) = token else {
                return Err(refuse(
                    ErrorKind::Unauthenticated,
                    "no bearer token",
                    "send Authorization: Bearer TOKEN (the CLI: STRATA_TOKEN); an admin makes one with `strata token create`",
                ));
            };
            match g.d.tokens.verify(token) {
                Some((name, role)) => Ok(Caller { name: format!("token {name} ({})", role.name()), role }),
                None => Err(refuse(ErrorKind::Unauthenticated, "unknown or revoked token", "ask an admin for a token")),
            }
        }
    }
}

/// Request fields that carry secrets, replaced in the audit record (the history is readable
/// by viewers): a peer invitation token (`POST /v1/peers`), an iSCSI CHAP secret.
const SECRET_FIELDS: [&str; 2] = ["token", "chap_secret"];

fn redact_secrets(body: &str) -> String {
    let Ok(mut v) = serde_json::from_str::<Value>(body) else { return body.to_string() };
    let Some(fields) = v.as_object_mut() else { return body.to_string() };
    let mut changed = false;
    for k in SECRET_FIELDS {
        if let Some(f) = fields.get_mut(k).filter(|f| !f.is_null()) {
            *f = Value::String("(redacted)".into());
            changed = true;
        }
    }
    if changed {
        v.to_string()
    } else {
        body.to_string()
    }
}

fn peer_name(peer: &Peer) -> String {
    match peer {
        Peer::Unix { uid, .. } => format!("uid {uid} (refused)"),
        Peer::Tcp { addr, .. } => format!("unauthenticated {addr}"),
    }
}

pub(crate) async fn guard(State(g): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let mutating = !matches!(method, Method::GET | Method::HEAD);
    // The path with its query: `?recursive=true`, `?force=true` are part of what was asked.
    let target = req.uri().path_and_query().map_or_else(|| req.uri().path().to_string(), |pq| pq.as_str().to_string());
    let route = req.extensions().get::<MatchedPath>().map(|m| m.as_str().to_string());
    if super::console::is_public(&method, route.as_deref()) {
        return next.run(req).await;
    }
    let operation = format!("{method} {}", route.as_deref().unwrap_or(&target));
    let Some(peer) = req.extensions().get::<Peer>().cloned() else {
        return ApiError::internal("a request without its connection's peer").into_response();
    };
    let audit = |caller: &str, request: Option<String>, status: u16, result: String| {
        if mutating {
            g.d.history.record(&HistoryEntry {
                time_ns: SystemClock.now_ns(),
                caller: caller.into(),
                operation: operation.clone(),
                target: target.clone(),
                request,
                status,
                result,
            });
        }
    };
    let checked = browser_checks(&req, &peer, mutating).and_then(|_| authenticate(&g, &req, &peer));
    let caller = match checked {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(peer = %peer_name(&peer), %operation, "request refused: {}", e.message);
            audit(&peer_name(&peer), None, e.kind.http_status(), format!("refused: {}", e.message));
            g.d.events.record(
                "warning",
                "request.refused",
                None,
                Some(&peer_name(&peer)),
                format!("{operation}: {}", e.message),
            );
            return e.into_response();
        }
    };
    let Some(route) = route else {
        // No such route: say so only to a caller the daemon knows.
        let e = ApiError::not_found(format!("no endpoint {method} {target}"), "see /v1/openapi.json");
        return e.into_response();
    };
    let needed = g.roles.get(&(method.clone(), route.clone())).copied();
    let allowed = needed.is_some_and(|r| caller.role >= r);
    if !allowed {
        let e = refuse(
            ErrorKind::PermissionDenied,
            format!(
                "{} may not {operation} (needs the {} role)",
                caller.name,
                needed.map_or("(none: the route has no role)", |r| r.name())
            ),
            "ask an admin for a token with that role",
        );
        audit(&caller.name, None, e.kind.http_status(), format!("refused: {}", e.message));
        g.d.events.record("warning", "request.refused", None, Some(&caller.name), e.message.clone());
        return e.into_response();
    }
    // Keep the body for the record (bounded: the API's bodies are small).
    let (mut parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(_) => {
            let e = ApiError::bad_request("request body over 64 KiB", "send a small JSON document");
            audit(&caller.name, None, 413, format!("refused: {}", e.message));
            let mut r = e.into_response();
            *r.status_mut() = axum::http::StatusCode::PAYLOAD_TOO_LARGE;
            return r;
        }
    };
    let request = (!bytes.is_empty() && &bytes[..] != b"{}").then(|| {
        let s = redact_secrets(&String::from_utf8_lossy(&bytes));
        s.chars().take(1024).collect::<String>()
    });
    parts.extensions.insert(caller.clone());
    parts.extensions.insert(g.doc.clone());
    let resp = next.run(Request::from_parts(parts, Body::from(bytes))).await;
    let status = resp.status().as_u16();
    let result = match resp.extensions().get::<Failure>() {
        Some(f) => f.0.clone(),
        None if resp.status().is_success() => "ok".into(),
        None => resp.status().to_string(),
    };
    if mutating {
        tracing::info!(caller = %caller.name, %operation, %target, status, "{result}");
    }
    audit(&caller.name, request, status, result);
    resp
}
