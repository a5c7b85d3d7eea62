//! Text keys (RFC 7143 §6, §13): `key=value` pairs separated by NUL, and the negotiation
//! of the operational parameters a session runs with.
//!
//! Bounds: a key is at most 63 bytes, a value at most 8192 (CHAP's large binary values;
//! 255 for every other key is enforced per key where it matters by the numeric parse),
//! and a whole text at most [`MAX_TEXT_BYTES`] across continuations — more is an
//! initiator error, not memory.

use std::fmt::Write as _;

/// Most text a login or text exchange gathers over continuation PDUs.
pub const MAX_TEXT_BYTES: usize = 64 << 10;
const MAX_KEY: usize = 63;
const MAX_VALUE: usize = 8192;
const MAX_PAIRS: usize = 256;

/// Parse a text segment into ordered pairs; `None` if it is malformed (no `=`, an empty
/// or long key, a long value, non-UTF-8, too many pairs).
pub fn parse(data: &[u8]) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    for item in data.split(|&b| b == 0) {
        if item.is_empty() {
            continue;
        }
        let eq = item.iter().position(|&b| b == b'=')?;
        let (k, v) = (&item[..eq], &item[eq + 1..]);
        if k.is_empty() || k.len() > MAX_KEY || v.len() > MAX_VALUE || out.len() >= MAX_PAIRS {
            return None;
        }
        out.push((std::str::from_utf8(k).ok()?.to_string(), std::str::from_utf8(v).ok()?.to_string()));
    }
    Some(out)
}

pub fn encode(pairs: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

/// The operational parameters of a session (§13), as negotiated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    pub header_digest: bool,
    pub data_digest: bool,
    /// Most data we accept in one PDU (what we declared).
    pub max_recv_data_segment: u32,
    /// Most data the initiator accepts in one PDU (what it declared): our Data-In size.
    pub max_xmit_data_segment: u32,
    pub max_burst: u32,
    pub first_burst: u32,
    pub initial_r2t: bool,
    pub immediate_data: bool,
    pub max_outstanding_r2t: u32,
    pub default_time2wait: u32,
    pub default_time2retain: u32,
}

/// What we declare as our MaxRecvDataSegmentLength: 256 KiB, the common maximum of
/// initiators (Linux's default is 256 KiB too), and it bounds a PDU's memory.
pub const OUR_MAX_RECV: u32 = 256 << 10;
/// Our MaxBurstLength ceiling: 1 MiB per R2T sequence.
pub const OUR_MAX_BURST: u32 = 1 << 20;
/// Login-phase data segment limit (§13.12: 8192 until negotiated).
pub const LOGIN_MAX_RECV: u32 = 8192;

impl Default for Params {
    /// The RFC's defaults (§13).
    fn default() -> Self {
        Params {
            header_digest: false,
            data_digest: false,
            max_recv_data_segment: LOGIN_MAX_RECV,
            max_xmit_data_segment: LOGIN_MAX_RECV,
            max_burst: 262144,
            first_burst: 65536,
            initial_r2t: true,
            immediate_data: true,
            max_outstanding_r2t: 1,
            default_time2wait: 2,
            default_time2retain: 20,
        }
    }
}

fn num(v: &str, lo: u32, hi: u32) -> Option<u32> {
    if v.is_empty() || v.len() > 12 {
        return None;
    }
    let n = if let Some(h) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()?
    } else {
        v.parse::<u64>().ok()?
    };
    (n >= lo as u64 && n <= hi as u64).then_some(n as u32)
}

fn yes_no(v: &str) -> Option<bool> {
    match v {
        "Yes" => Some(true),
        "No" => Some(false),
        _ => None,
    }
}

fn bool_str(b: bool) -> String {
    if b { "Yes" } else { "No" }.to_string()
}

/// The outcome of negotiating one key.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// Send this value back.
    Reply(String),
    /// Declarative key with nothing to send back.
    Silent,
    /// The key is not ours to negotiate here (login/identity keys the caller handles).
    NotOperational,
}

/// Negotiate one operational key offered by the initiator, updating `p`. `Reply("Reject")`
/// for a value outside the key's range or type, `Reply("NotUnderstood")` for unknown keys.
pub fn negotiate(p: &mut Params, key: &str, value: &str) -> Answer {
    let reject = || Answer::Reply("Reject".to_string());
    match key {
        "HeaderDigest" | "DataDigest" => {
            let pick = value.split(',').find(|v| *v == "None" || *v == "CRC32C");
            let Some(pick) = pick else { return reject() };
            let on = pick == "CRC32C";
            if key == "HeaderDigest" {
                p.header_digest = on;
            } else {
                p.data_digest = on;
            }
            Answer::Reply(pick.to_string())
        }
        "MaxRecvDataSegmentLength" => match num(value, 512, 16_777_215) {
            Some(n) => {
                p.max_xmit_data_segment = n;
                Answer::Silent
            }
            None => reject(),
        },
        "MaxBurstLength" => match num(value, 512, 16_777_215) {
            Some(n) => {
                p.max_burst = n.min(OUR_MAX_BURST);
                p.first_burst = p.first_burst.min(p.max_burst);
                Answer::Reply(p.max_burst.to_string())
            }
            None => reject(),
        },
        "FirstBurstLength" => match num(value, 512, 16_777_215) {
            Some(n) => {
                p.first_burst = n.min(OUR_MAX_BURST).min(p.max_burst);
                Answer::Reply(p.first_burst.to_string())
            }
            None => reject(),
        },
        "InitialR2T" => match yes_no(value) {
            // OR: we are content with No, so the initiator decides.
            Some(b) => {
                p.initial_r2t = b;
                Answer::Reply(bool_str(b))
            }
            None => reject(),
        },
        "ImmediateData" => match yes_no(value) {
            // AND: we accept immediate data, so the initiator decides.
            Some(b) => {
                p.immediate_data = b;
                Answer::Reply(bool_str(b))
            }
            None => reject(),
        },
        "MaxOutstandingR2T" => match num(value, 1, 65535) {
            // We keep one R2T out per command at a time.
            Some(_) => {
                p.max_outstanding_r2t = 1;
                Answer::Reply("1".into())
            }
            None => reject(),
        },
        // OR with our Yes: Yes (we send data in order).
        "DataPDUInOrder" | "DataSequenceInOrder" => match yes_no(value) {
            Some(_) => Answer::Reply("Yes".into()),
            None => reject(),
        },
        "ErrorRecoveryLevel" => match num(value, 0, 2) {
            Some(_) => Answer::Reply("0".into()),
            None => reject(),
        },
        "MaxConnections" => match num(value, 1, 65535) {
            Some(_) => Answer::Reply("1".into()),
            None => reject(),
        },
        "DefaultTime2Wait" => match num(value, 0, 3600) {
            // Max: our 2 or more.
            Some(n) => {
                p.default_time2wait = n.max(2);
                Answer::Reply(p.default_time2wait.to_string())
            }
            None => reject(),
        },
        "DefaultTime2Retain" => match num(value, 0, 3600) {
            // Min with our 0: nothing is retained at ERL 0.
            Some(_) => {
                p.default_time2retain = 0;
                Answer::Reply("0".into())
            }
            None => reject(),
        },
        "IFMarker" | "OFMarker" => Answer::Reply("No".into()),
        "IFMarkInt" | "OFMarkInt" => Answer::Reply("Irrelevant".into()),
        "InitiatorName"
        | "InitiatorAlias"
        | "TargetName"
        | "SessionType"
        | "AuthMethod"
        | "TargetAlias"
        | "TargetPortalGroupTag" => Answer::NotOperational,
        k if k.starts_with("CHAP_") => Answer::NotOperational,
        _ => Answer::Reply("NotUnderstood".into()),
    }
}

/// Hex encoding for CHAP values (`0x…`).
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 + bytes.len() * 2);
    s.push_str("0x");
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Decode a CHAP binary value: `0x` hex or `0b` base64 (§6.1).
pub fn unhex(v: &str) -> Option<Vec<u8>> {
    if let Some(h) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        if h.is_empty() || h.len() > 2048 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let h = if h.len() % 2 == 1 { format!("0{h}") } else { h.to_string() };
        return (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).ok()).collect();
    }
    if let Some(b) = v.strip_prefix("0b").or_else(|| v.strip_prefix("0B")) {
        return base64(b);
    }
    None
}

fn base64(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            _ => return None,
        };
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_encode() {
        let t = b"InitiatorName=iqn.x\0SessionType=Normal\0\0";
        let pairs = parse(t).unwrap();
        assert_eq!(pairs.len(), 2);
        assert_eq!(pairs[1], ("SessionType".into(), "Normal".into()));
        assert_eq!(&encode(&pairs)[..], &t[..t.len() - 1]);
        assert!(parse(b"novalue\0").is_none());
        assert!(parse(b"=x\0").is_none());
        assert!(parse(format!("{}=1\0", "k".repeat(64)).as_bytes()).is_none());
        assert!(parse(&[b'a', b'=', 0xff, 0]).is_none());
    }

    #[test]
    fn negotiation_rules() {
        let mut p = Params::default();
        assert_eq!(negotiate(&mut p, "HeaderDigest", "CRC32C,None"), Answer::Reply("CRC32C".into()));
        assert!(p.header_digest);
        assert_eq!(negotiate(&mut p, "DataDigest", "MD5"), Answer::Reply("Reject".into()));
        assert_eq!(negotiate(&mut p, "MaxBurstLength", "16776192"), Answer::Reply(OUR_MAX_BURST.to_string()));
        assert_eq!(negotiate(&mut p, "FirstBurstLength", "4194304"), Answer::Reply(OUR_MAX_BURST.to_string()));
        assert_eq!(negotiate(&mut p, "MaxRecvDataSegmentLength", "8192"), Answer::Silent);
        assert_eq!(p.max_xmit_data_segment, 8192);
        assert_eq!(negotiate(&mut p, "MaxRecvDataSegmentLength", "100"), Answer::Reply("Reject".into()));
        assert_eq!(negotiate(&mut p, "MaxRecvDataSegmentLength", "99999999999999"), Answer::Reply("Reject".into()));
        assert_eq!(negotiate(&mut p, "ErrorRecoveryLevel", "2"), Answer::Reply("0".into()));
        assert_eq!(negotiate(&mut p, "MaxConnections", "8"), Answer::Reply("1".into()));
        assert_eq!(negotiate(&mut p, "InitialR2T", "No"), Answer::Reply("No".into()));
        assert!(!p.initial_r2t);
        assert_eq!(negotiate(&mut p, "ImmediateData", "maybe"), Answer::Reply("Reject".into()));
        assert_eq!(negotiate(&mut p, "X-com.example.key", "1"), Answer::Reply("NotUnderstood".into()));
        assert_eq!(negotiate(&mut p, "TargetName", "iqn.t"), Answer::NotOperational);
    }

    #[test]
    fn chap_values() {
        assert_eq!(unhex(&hex(&[0, 1, 0xab])).unwrap(), vec![0, 1, 0xab]);
        assert_eq!(unhex("0xabc").unwrap(), vec![0x0a, 0xbc]);
        assert_eq!(unhex("0bAAEC").unwrap(), vec![0, 1, 2]);
        assert!(unhex("0xzz").is_none());
        assert!(unhex("0xé1").is_none(), "non-ASCII is refused, not sliced through");
        assert!(unhex("12").is_none());
    }
}
