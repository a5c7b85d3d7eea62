//! A minimal HTTP/1.1 client for the daemon's control API (one request per connection;
//! the API is local and low-traffic, so nothing more is needed).

use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub struct Client {
    pub addr: String,
}

impl Client {
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let unreachable = |e: std::io::Error| {
            format!(
                "cannot reach the Strata daemon at {}: {e} (start it with `strata serve`, or set STRATA_API)",
                self.addr
            )
        };
        let mut s = TcpStream::connect(&self.addr).map_err(unreachable)?;
        s.set_read_timeout(Some(Duration::from_secs(600))).map_err(unreachable)?;
        let payload = body.map(|b| b.to_string()).unwrap_or_default();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
            self.addr,
            payload.len()
        );
        s.write_all(req.as_bytes()).map_err(unreachable)?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).map_err(unreachable)?;
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n").ok_or("malformed reply from the daemon")?;
        let status: u16 = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or("malformed status line")?;
        let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
            dechunk(body)
        } else {
            body.to_string()
        };
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("malformed JSON from the daemon: {e}"))?;
        if status >= 400 {
            let e = &v["error"];
            return Err(format!(
                "{} ({})",
                e["message"].as_str().unwrap_or("request failed"),
                e["hint"].as_str().unwrap_or("see the daemon log")
            ));
        }
        Ok(v)
    }
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}
