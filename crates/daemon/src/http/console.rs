//! The web console (docs/console.md): one page of HTML, CSS and JavaScript modules,
//! embedded in the binary (crates/daemon/console/), so that `strata serve --tcp ADDR` is all
//! a browser needs.
//!
//! Invariant: these files are code, never data. Every figure the page shows comes from /v1
//! with the bearer token the user typed, through the guard like any other client. That is
//! why they are the one thing the guard lets through without a token (`is_public`, called
//! first thing in guard.rs): GET and HEAD of the routes of this file, matched by axum's
//! router (so `/console/../v1/pools` or `/console/a/b` never match them), and nothing else;
//! any other method on them goes through the guard and is refused as for a route with no
//! role. They are not in the OpenAPI document: they are not part of the API.
//!
//! Every answer here carries a Content-Security-Policy that allows only the daemon's own
//! scripts, styles and connections (no inline script, no `eval`, no other origin), forbids
//! framing (also `X-Frame-Options: DENY`: a framed console could be clickjacked into a
//! restore), and `Cache-Control: no-store`. The trade-off of no-store: the browser fetches the
//! ~100 KiB again on each load, in exchange for never running a console older than the daemon
//! after an upgrade (hash-versioned paths would avoid both, at the price of a build step).

use crate::service::Daemon;
use axum::extract::Path;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::Arc;

/// The routes served without a token (GET and HEAD only): `/` and `/console` send the
/// browser to the page, `/console/` is the page, `/console/{file}` its other files.
pub(crate) const PUBLIC_ROUTES: [&str; 4] = ["/", "/console", "/console/", "/console/{file}"];

/// Only the daemon's own files and API; nothing inline, nothing from elsewhere, no frames.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; \
                   form-action 'self'; frame-ancestors 'none'";

struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $type:expr) => {
        Asset { name: $name, content_type: $type, body: include_bytes!(concat!("../../console/", $name)) }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the console. A file not listed here is not served (404).
const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("app.css", "text/css; charset=utf-8"),
    asset!("icon.svg", "image/svg+xml"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("fmt.js", JS),
    asset!("ui.js", JS),
    asset!("chart.js", JS),
    asset!("stats.js", JS),
    asset!("actions.js", JS),
    asset!("view-overview.js", JS),
    asset!("view-pools.js", JS),
    asset!("view-volumes.js", JS),
    asset!("view-snapshots.js", JS),
    asset!("view-exports.js", JS),
    asset!("view-jobs.js", JS),
    asset!("view-events.js", JS),
];

/// Whether the guard lets this request through without a caller: a read of a console route.
pub(crate) fn is_public(method: &Method, route: Option<&str>) -> bool {
    matches!(*method, Method::GET | Method::HEAD) && route.is_some_and(|r| PUBLIC_ROUTES.contains(&r))
}

/// The console's routes (merged beside the API's, behind the same guard: server.rs).
pub(crate) fn routes() -> Router<Arc<Daemon>> {
    debug_assert!(ASSETS.iter().all(|a| !a.name.contains('/')), "the console's files are flat");
    Router::new()
        .route(PUBLIC_ROUTES[0], get(to_console))
        .route(PUBLIC_ROUTES[1], get(to_console))
        .route(PUBLIC_ROUTES[2], get(|| async { file("index.html") }))
        .route(PUBLIC_ROUTES[3], get(|Path(name): Path<String>| async move { file(&name) }))
}

async fn to_console() -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    r.headers_mut().insert(header::LOCATION, HeaderValue::from_static("/console/"));
    secure(r)
}

fn file(name: &str) -> Response {
    let r = match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => ([(header::CONTENT_TYPE, a.content_type)], a.body).into_response(),
        None => {
            (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "no such console file\n")
                .into_response()
        }
    };
    secure(r)
}

fn secure(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reads_of_the_console_routes_are_public() {
        for r in PUBLIC_ROUTES {
            assert!(is_public(&Method::GET, Some(r)));
            assert!(is_public(&Method::HEAD, Some(r)));
            assert!(!is_public(&Method::POST, Some(r)));
            assert!(!is_public(&Method::DELETE, Some(r)));
        }
        for r in ["/v1/pools", "/v1/health", "/metrics", "/v1/openapi.json", "/console/{file}/x"] {
            assert!(!is_public(&Method::GET, Some(r)), "{r}");
        }
        assert!(!is_public(&Method::GET, None), "unmatched paths go through the guard");
    }

    #[test]
    fn every_module_the_page_imports_is_served() {
        // A module missing from ASSETS would load as a 404 and leave a blank page.
        for a in ASSETS.iter().filter(|a| a.name.ends_with(".js") || a.name.ends_with(".html")) {
            let text = std::str::from_utf8(a.body).expect("UTF-8");
            for quote in ['"', '\''] {
                for part in text.split(&format!("{quote}./")[..]).skip(1) {
                    let Some(name) = part.split(quote).next().filter(|n| n.ends_with(".js")) else { continue };
                    assert!(ASSETS.iter().any(|x| x.name == name), "{} imports {name}, which is not served", a.name);
                }
            }
            for part in text.split("/console/").skip(1) {
                let name: String =
                    part.chars().take_while(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c)).collect();
                if !name.is_empty() {
                    assert!(ASSETS.iter().any(|x| x.name == name), "{} names /console/{name}, not served", a.name);
                }
            }
        }
    }
}
