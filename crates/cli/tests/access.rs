//! Who may administer the daemon: the socket refuses other users, TCP needs a token, roles
//! are enforced on every route of the generated OpenAPI document, browsers' requests are
//! refused, TLS off loopback; and the document itself does not drift from docs/openapi.json.

mod common;

use common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// One HTTP/1.1 request over TCP: (status, body).
fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

fn start_with(dir: &Path, extra: &[&str]) -> Daemon {
    let mut d = Daemon { child: None, socket: dir.join("strata.sock"), dir: dir.to_path_buf() };
    d.spawn_with(extra);
    d
}

fn token(d: &Daemon, name: &str, role: &str) -> String {
    d.json(&["token", "create", name, "--role", role])["token"].as_str().unwrap().to_string()
}

/// A request body that parses for the operation: `{}` (every refusal asserted here comes
/// before the body is read).
fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

#[test]
fn tcp_needs_a_token_and_each_role_may_do_only_its_part() {
    let dir = temp_dir("access-tcp");
    let addr = format!("127.0.0.1:{}", free_port());
    let d = start_with(&dir, &["--tcp", &addr]);
    let json = ("Content-Type", "application/json");

    // No token, a forged one: 401.
    let (st, body) = http(&addr, "GET", "/v1/pools", &[], "");
    assert_eq!(st, 401, "{body}");
    assert!(body.contains("Unauthenticated"), "{body}");
    let (st, _) = http(&addr, "GET", "/v1/pools", &[("Authorization", "Bearer strata_0000000000000001_00")], "");
    assert_eq!(st, 401);

    let viewer = token(&d, "ci-viewer", "viewer");
    let operator = token(&d, "ci-operator", "operator");
    let admin = token(&d, "ci-admin", "admin");

    // The viewer reads; every route that changes something, taken from the generated
    // document, is refused to it before anything happens.
    let (st, body) = http(&addr, "GET", "/v1/openapi.json", &[("Authorization", &bearer(&viewer))], "");
    assert_eq!(st, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    let mut mutating = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let concrete = path
                .replace("{pool}", "default")
                .replace("{volume}", "v")
                .replace("{snapshot}", "s")
                .replace("{id}", "1")
                .replace("{name}", "ci-admin");
            let role = op["security"][0]["token"][0].as_str().unwrap_or_else(|| panic!("{method} {path} has no role"));
            let (st, body) =
                http(&addr, &method.to_uppercase(), &concrete, &[("Authorization", &bearer(&viewer)), json], "{}");
            let documented = op["responses"].as_object().unwrap();
            assert!(documented.contains_key(&st.to_string()), "{method} {path}: status {st} is not documented: {body}");
            if method != "get" {
                mutating += 1;
                assert_ne!(role, "viewer", "{method} {path} changes something but a viewer may call it");
                assert_eq!(st, 403, "viewer {method} {path}: {body}");
                assert!(body.contains("PermissionDenied"), "{body}");
            } else if role == "viewer" {
                assert_ne!(st, 403, "viewer {method} {path}: {body}");
            } else {
                // Reads that reach devices or secrets (import scans, the token list).
                assert_eq!(st, 403, "viewer {method} {path} needs {role}: {body}");
            }
        }
    }
    assert!(mutating >= 20, "only {mutating} mutating routes in the document");

    // The operator manages volumes and snapshots, not pools or tokens.
    let op = |m: &str, p: &str, b: &str| http(&addr, m, p, &[("Authorization", &bearer(&operator)), json], b);
    let img = dir.join("op.img");
    let create_pool = format!(r#"{{"name":"op","device":"{}","size_bytes":67108864}}"#, img.display());
    let (st, body) = op("POST", "/v1/pools", &create_pool);
    assert_eq!(st, 403, "{body}");
    assert!(!img.exists(), "a refused pool create touched its device");
    assert_eq!(op("DELETE", "/v1/pools/default?confirm=default", "").0, 403);
    assert_eq!(op("POST", "/v1/pools/default/export", "{}").0, 403);
    assert_eq!(op("PATCH", "/v1/pools/default", r#"{"capacity_alert_percent":20}"#).0, 403);
    assert_eq!(op("POST", "/v1/tokens", r#"{"name":"x","role":"admin"}"#).0, 403);
    // A commit changes no setting: the operator may ask for one (as for a scrub).
    let (st, body) = op("POST", "/v1/pools/default/sync", "{}");
    assert_eq!(st, 200, "{body}");
    let (st, body) = op("POST", "/v1/pools/default/volumes", r#"{"name":"opvol"}"#);
    assert_eq!(st, 201, "{body}");
    assert_eq!(op("POST", "/v1/pools/default/volumes/opvol/snapshots", r#"{"name":"s"}"#).0, 201);

    // Operators mount only under the mount roots: a mount decides what appears at a host
    // path (/root/.ssh, /etc/cron.d), even through a symbolic link or "..".
    let outside = dir.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let link = std::path::PathBuf::from(format!("/mnt/strata-it-link-{}", std::process::id()));
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let inside = format!("/mnt/strata-it-op-{}", std::process::id());
    for path in [
        outside.join("m").display().to_string(),
        link.join("m").display().to_string(),
        format!("{inside}/../../etc/strata-it"),
        "/mnt".to_string(),
    ] {
        let (st, body) = op("POST", "/v1/mounts", &format!(r#"{{"volume":"default/opvol","path":"{path}"}}"#));
        assert_eq!(st, 403, "operator mount at {path}: {body}");
    }
    std::fs::remove_file(&link).unwrap();
    let (st, body) = op("POST", "/v1/mounts", &format!(r#"{{"volume":"default/opvol","path":"{inside}"}}"#));
    assert_eq!(st, 201, "{body}");
    let (st, body) = op("DELETE", "/v1/mounts", &format!(r#"{{"path":"{inside}"}}"#));
    assert_eq!(st, 200, "{body}");
    let _ = std::fs::remove_dir(&inside);

    // Names in paths are percent-decoded ("de%66ault" is "default").
    let (st, body) =
        http(&addr, "GET", "/v1/pools/de%66ault/volumes/opvol", &[("Authorization", &bearer(&operator))], "");
    assert_eq!(st, 200, "{body}");

    // The admin may create pools.
    let (st, body) = http(&addr, "POST", "/v1/pools", &[("Authorization", &bearer(&admin)), json], &create_pool);
    assert_eq!(st, 201, "{body}");

    // Through the CLI: STRATA_API + STRATA_TOKEN, errors with their kind and exit status.
    let cli = |t: &str, args: &[&str]| {
        let out = Command::new(BIN)
            .args(args)
            .env_remove("STRATA_SOCKET")
            .env("STRATA_API", &addr)
            .env("STRATA_TOKEN", t)
            .output()
            .unwrap();
        (out.status.code().unwrap(), String::from_utf8_lossy(&out.stdout).to_string())
    };
    let (code, out) = cli(&viewer, &["--json", "volume", "create", "default/nope"]);
    assert_eq!(code, 5, "{out}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["error"]["kind"], "PermissionDenied", "{out}");
    assert_eq!(cli(&viewer, &["volume", "list"]).0, 0);
    let (code, out) = cli(&operator, &["--json", "whoami"]);
    assert_eq!(code, 0);
    assert!(out.contains("token ci-operator (operator)"), "{out}");

    // A revoked token is refused at once.
    d.ok(&["token", "revoke", "ci-viewer"]);
    assert_eq!(http(&addr, "GET", "/v1/pools", &[("Authorization", &bearer(&viewer))], "").0, 401);
    let tokens = d.json(&["token", "list"]);
    assert!(!tokens.to_string().contains(viewer.rsplit('_').next().unwrap()), "secrets are never listed");
}

#[test]
fn browsers_cannot_drive_the_api() {
    let dir = temp_dir("access-browser");
    let addr = format!("127.0.0.1:{}", free_port());
    let d = start_with(&dir, &["--tcp", &addr]);
    let admin = token(&d, "admin", "admin");
    let auth = ("Authorization", bearer(&admin));
    let auth = (auth.0, auth.1.as_str());
    let body = r#"{"name":"fromweb"}"#;
    // A "simple" cross-site POST (text/plain needs no CORS preflight): refused.
    let (st, r) = http(&addr, "POST", "/v1/pools/default/volumes", &[auth, ("Content-Type", "text/plain")], body);
    assert_eq!(st, 415, "{r}");
    // No Content-Type at all: refused.
    assert_eq!(http(&addr, "POST", "/v1/pools/default/volumes", &[auth], body).0, 415);
    // A page of another origin, even with JSON: refused.
    let (st, r) = http(
        &addr,
        "POST",
        "/v1/pools/default/volumes",
        &[auth, ("Content-Type", "application/json"), ("Origin", "http://evil.example")],
        body,
    );
    assert_eq!(st, 403, "{r}");
    assert_eq!(
        http(&addr, "GET", "/v1/pools", &[auth, ("Sec-Fetch-Site", "cross-site")], "").0,
        403,
        "cross-site reads are refused too"
    );
    // DNS rebinding: a name that is not the daemon's.
    let (st, r) = http(&addr, "GET", "/v1/pools", &[auth, ("Host", "evil.example:80")], "");
    assert_eq!(st, 403, "{r}");
    d.fails(&["volume", "show", "default/fromweb"], "not found");
    // The refusals are in the history, with who was refused.
    let h = d.json(&["history"]).to_string();
    assert!(h.contains("refused: Content-Type"), "{h}");
    assert!(h.contains("cross-origin request from"), "{h}");
}

#[test]
fn other_local_users_are_refused_on_the_socket() {
    let dir = temp_dir("access-unix");
    // Files the unprivileged user must reach: the binary and the directory of the socket.
    let bin = dir.join("strata");
    std::fs::copy(BIN, &bin).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = Daemon::start(&dir);
    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o007, 0, "the socket is open to others: {mode:o}");
    let as_nobody = |args: &[&str]| {
        let out = Command::new("runuser")
            .args(["-u", "nobody", "--", "env", &format!("STRATA_SOCKET={}", d.socket.display())])
            .arg(&bin)
            .args(args)
            .output()
            .unwrap();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).to_string())
    };
    // The socket's mode refuses the connection.
    let (code, err) = as_nobody(&["volume", "create", "default/x"]);
    assert_eq!(code, 6, "{err}");
    assert!(err.contains("Permission denied"), "{err}");
    // Loosened by hand, the daemon still refuses the caller (SO_PEERCRED).
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, err) = as_nobody(&["volume", "create", "default/x"]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("neither root nor a member"), "{err}");
    // A pool over a root-only file: refused before anything is opened.
    let secret = dir.join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let target = secret.join("precious");
    std::fs::write(&target, vec![7u8; 32 << 20]).unwrap();
    let (code, _) = as_nobody(&["pool", "create", "evil", "--device", target.to_str().unwrap()]);
    assert_eq!(code, 5);
    assert!(std::fs::read(&target).unwrap().iter().all(|&b| b == 7), "the file was touched");
    d.fails(&["volume", "show", "default/x"], "not found");
    // Root is an admin.
    assert!(d.ok(&["whoami"]).contains("(admin)"));
    // A mounted volume's set-user-id files and device nodes give nobody anything on this host.
    d.ok(&["volume", "create", "default/m"]);
    let m = dir.join("m");
    d.ok(&["mount", "default/m", m.to_str().unwrap()]);
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info.lines().find(|l| l.split(' ').nth(4) == Some(m.to_str().unwrap())).expect("the mount");
    let opts = line.split(' ').nth(5).unwrap();
    assert!(opts.contains("nosuid") && opts.contains("nodev"), "{line}");
}

#[test]
fn tcp_off_loopback_needs_tls_and_tls_works() {
    let dir = temp_dir("access-tls");
    // Off loopback without TLS: the daemon does not start.
    let out = Command::new(BIN)
        .args(["serve", "--data-dir", dir.join("data0").to_str().unwrap(), "--tcp", "0.0.0.0:0"])
        .env("STRATA_SOCKET", dir.join("s0.sock"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("TLS is required"), "{err}");
    assert!(!dir.join("data0").join("default.img").exists(), "it opened pools before refusing");

    // A CA and a server certificate for 127.0.0.1 / localhost.
    let sh = |cmd: &str| {
        let st = Command::new("sh").arg("-c").arg(cmd).current_dir(&dir).status().unwrap();
        assert!(st.success(), "{cmd}");
    };
    sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=strata-test-ca 2>/dev/null");
    sh("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout key.pem -out srv.csr -subj /CN=localhost 2>/dev/null");
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
        .unwrap();
    sh("openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out cert.pem -days 2 -extfile ext.cnf 2>/dev/null");
    let port = free_port();
    let d = start_with(
        &dir,
        &[
            "--tcp",
            &format!("127.0.0.1:{port}"),
            "--tls-cert",
            dir.join("cert.pem").to_str().unwrap(),
            "--tls-key",
            dir.join("key.pem").to_str().unwrap(),
        ],
    );
    let t = token(&d, "tls", "viewer");
    let cli = |api: &str, ca: Option<&str>| {
        let mut c = Command::new(BIN);
        c.args(["whoami"]).env_remove("STRATA_SOCKET").env("STRATA_API", api).env("STRATA_TOKEN", &t);
        if let Some(ca) = ca {
            c.env("STRATA_CA_CERT", dir.join(ca));
        }
        let out = c.output().unwrap();
        (
            out.status.code().unwrap(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    };
    let (code, out) = cli(&format!("https://localhost:{port}"), Some("ca.pem"));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("token tls (viewer)"), "{out}");
    // A CA that did not sign it: refused by the client.
    let (code, out) = cli(&format!("https://localhost:{port}"), Some("cert.pem"));
    assert_ne!(code, 0, "{out}");
    // Plain HTTP to the TLS port gets no answer from the API.
    let (code, out) = cli(&format!("127.0.0.1:{port}"), None);
    assert_ne!(code, 0, "{out}");
}

#[test]
fn the_openapi_document_is_generated_and_matches_docs() {
    let generated = strata_daemon::openapi_document();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    if std::env::var_os("STRATA_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap();
    assert!(
        committed == generated,
        "docs/openapi.json differs from the routes and types: regenerate it with \
         `STRATA_BLESS=1 cargo nextest run -p strata-cli --test access the_openapi` (or `strata openapi`)"
    );
    let doc: Value = serde_json::from_str(&generated).unwrap();
    // Every operation has a role and documents the guard's refusals.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            assert!(op["security"][0]["token"][0].is_string(), "{method} {path} has no role");
            for code in ["401", "403", "415"] {
                assert!(op["responses"][code].is_object(), "{method} {path} does not document {code}");
            }
        }
    }
    // Fields the CLI and scripts rely on are in the schemas (a rename fails here).
    for (schema, field) in [
        ("PoolFigures", "allocated_bytes"),
        ("PoolFigures", "dedup_saved_bytes"),
        ("VolumeInfo", "used_bytes"),
        ("VolumeInfo", "mounted_at"),
        ("CreateVolume", "dedup"),
        ("SetVolume", "dedup"),
        ("CreatePool", "force"),
        ("ExportInfo", "mount"),
        ("HistoryEntry", "caller"),
    ] {
        assert!(doc["components"]["schemas"][schema]["properties"][field].is_object(), "{schema}.{field} missing");
    }
}

/// Every field a live daemon returns is in the document's schema of that response.
#[test]
fn responses_carry_only_documented_fields() {
    let dir = temp_dir("access-fields");
    let d = Daemon::start(&dir);
    d.ok(&["volume", "create", "default/v"]);
    d.ok(&["snapshot", "create", "default/v@s"]);
    let doc: Value = serde_json::from_str(&strata_daemon::openapi_document()).unwrap();
    let props = |name: &str| -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![doc["components"]["schemas"][name].clone()];
        while let Some(s) = stack.pop() {
            if let Some(r) = s["$ref"].as_str() {
                stack.push(doc["components"]["schemas"][r.rsplit('/').next().unwrap()].clone());
            }
            for k in ["allOf", "oneOf", "anyOf"] {
                stack.extend(s[k].as_array().cloned().unwrap_or_default());
            }
            out.extend(s["properties"].as_object().into_iter().flatten().map(|(k, _)| k.clone()));
        }
        out
    };
    for (args, schema) in [
        (vec!["pool", "status", "default"], "PoolInfo"),
        (vec!["volume", "show", "default/v"], "VolumeInfo"),
        (vec!["snapshot", "show", "default/v@s"], "SnapshotInfo"),
        (vec!["whoami"], "Health"),
    ] {
        let v = d.json(&args);
        let known = props(schema);
        assert!(!known.is_empty(), "{schema} has no properties in the document");
        for k in v.as_object().unwrap().keys() {
            assert!(known.contains(k), "{args:?}: field {k} is not in the {schema} schema");
        }
    }
}
