//! The web console's carve-out from the guard (crates/daemon/src/http/console.rs): its files
//! load without a token, with a CSP that allows no inline script, no framing and no caching;
//! nothing else does — not /v1 on the same listener, not a path that merely starts with
//! /console/, not another method on the console's own routes. The browser side (sign-in,
//! charts, actions) is scripts/e2e/console.sh.

mod common;

use common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::time::Duration;

/// One HTTP/1.1 request over TCP: (status, lower-cased head, body). A local helper rather
/// than access.rs's: this one returns the headers, which are what is under test here.
fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let out = String::from_utf8_lossy(&out).to_string();
    let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (status, head.to_ascii_lowercase(), body.to_string())
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| l.strip_prefix(&format!("{name}: ")))
}

#[test]
fn the_console_loads_without_a_token_and_nothing_else_does() {
    let dir = temp_dir("console");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut d = Daemon { child: None, socket: dir.join("strata.sock"), dir: dir.clone() };
    d.spawn_with(&["--tcp", &addr]);

    // The page, without a token, with its security headers.
    let (st, head, page) = http(&addr, "GET", "/console/", &[], "");
    assert_eq!(st, 200, "{head}\n{page}");
    assert_eq!(header(&head, "content-type"), Some("text/html; charset=utf-8"), "{head}");
    let csp = header(&head, "content-security-policy").unwrap_or_else(|| panic!("no CSP: {head}"));
    for directive in ["default-src 'self'", "script-src 'self';", "frame-ancestors 'none'", "object-src 'none'"] {
        assert!(csp.contains(directive), "CSP without {directive:?}: {csp}");
    }
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "{csp}");
    assert_eq!(header(&head, "x-frame-options"), Some("deny"), "{head}");
    assert_eq!(header(&head, "cache-control"), Some("no-store"), "{head}");
    assert_eq!(header(&head, "x-content-type-options"), Some("nosniff"), "{head}");
    // No inline script (the CSP would block it anyway): every <script> has a src.
    for tag in page.split("<script").skip(1) {
        let open = tag.split('>').next().unwrap();
        assert!(open.contains("src=\"/console/"), "an inline script in the page: <script{open}>");
    }
    // `/` and `/console` send the browser to the page; its files load, with the same headers.
    for path in ["/", "/console"] {
        let (st, head, _) = http(&addr, "GET", path, &[], "");
        assert_eq!(st, 303, "{path}: {head}");
        assert_eq!(header(&head, "location"), Some("/console/"), "{head}");
    }
    for (path, kind) in [
        ("/console/app.js", "text/javascript"),
        ("/console/app.css", "text/css"),
        ("/console/icon.svg", "image/svg+xml"),
    ] {
        let (st, head, body) = http(&addr, "GET", path, &[], "");
        assert_eq!(st, 200, "{path}: {head}");
        assert!(header(&head, "content-type").unwrap_or("").starts_with(kind), "{path}: {head}");
        assert!(header(&head, "content-security-policy").is_some(), "{path}: {head}");
        assert!(!body.is_empty());
    }
    let (st, head, _) = http(&addr, "HEAD", "/console/app.js", &[], "");
    assert_eq!(st, 200, "{head}");

    // The API on the same listener still needs a token.
    for path in ["/v1/pools", "/v1/health", "/v1/stats", "/metrics", "/v1/openapi.json"] {
        let (st, _, body) = http(&addr, "GET", path, &[], "");
        assert_eq!(st, 401, "GET {path} without a token: {body}");
        assert!(body.contains("Unauthenticated"), "{body}");
    }
    // Paths that only look like the console's, and files it does not have, are not served.
    for path in [
        "/console/../v1/pools",
        "/console/%2e%2e/v1/pools",
        "/console/./app.js/../../v1/pools",
        "/console//v1/pools",
        "/console/app.js/x",
        "/console/index.html/",
        "/v1/../console/",
        "/consolex/app.js",
        "/favicon.ico",
    ] {
        let (st, head, body) = http(&addr, "GET", path, &[], "");
        assert_eq!(st, 401, "GET {path} without a token: {head}\n{body}");
    }
    for path in ["/console/nope.js", "/console/..", "/console/%2e%2e", "/console/Cargo.toml", "/console/console.rs"] {
        let (st, _, body) = http(&addr, "GET", path, &[], "");
        assert_eq!(st, 404, "GET {path}: {body}");
        assert_eq!(body, "no such console file\n", "{path}");
    }

    // The carve-out answers reads only: any other method on the console's routes goes
    // through the guard — refused without a token, and refused to every role (no route
    // role), before a body is read.
    let json = ("Content-Type", "application/json");
    for (method, path) in
        [("POST", "/console/app.js"), ("PUT", "/console/"), ("DELETE", "/console/index.html"), ("POST", "/")]
    {
        let (st, _, body) = http(&addr, method, path, &[json], "{}");
        assert_eq!(st, 401, "{method} {path} without a token: {body}");
    }
    let admin = d.json(&["token", "create", "console-admin", "--role", "admin"])["token"].as_str().unwrap().to_string();
    let auth = format!("Bearer {admin}");
    let (st, _, body) = http(&addr, "POST", "/console/app.js", &[json, ("Authorization", &auth)], "{}");
    assert_eq!(st, 403, "{body}");
    assert!(body.contains("PermissionDenied") && body.contains("no role"), "{body}");
    let history = d.json(&["history"]).to_string();
    assert!(history.contains("POST /console/{file}"), "the refused POST is not in the history: {history}");

    // With a token the API answers as before; the console's routes are not in its document.
    let (st, _, body) = http(&addr, "GET", "/v1/openapi.json", &[("Authorization", &auth)], "");
    assert_eq!(st, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    let paths: Vec<&String> = doc["paths"].as_object().unwrap().keys().collect();
    assert!(paths.iter().all(|p| p.starts_with("/v1/") || *p == "/metrics"), "{paths:?}");
    let (st, _, body) = http(&addr, "GET", "/v1/pools", &[("Authorization", &auth)], "");
    assert_eq!(st, 200, "{body}");
}
