//! Invitation tokens and the pairing proof.
//!
//! A token is `strata-peer1-ID-FINGERPRINT-SECRET`: the invitation's id (8 random bytes),
//! the inviting daemon's certificate fingerprint (so the joining daemon pins it from its
//! first byte) and a 128-bit random secret, all hex. It is printed once and kept by the
//! inviting daemon in memory only.
//!
//! The proof is HMAC-SHA256 keyed by the secret over a transcript that names the
//! invitation, the joining daemon's fingerprint, the inviting daemon's fingerprint and the
//! TLS session (an RFC 5705/8446 exporter value): it cannot be replayed on another
//! connection, for another certificate, or to another daemon, and the secret never
//! travels. 128 bits, one use, ten minutes and five wrong proofs at most (service/peers/):
//! guessing is hopeless.

use super::identity::{hex, unhex};
use crate::service::ApiError;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

const PREFIX: &str = "strata-peer1-";
/// The TLS exporter label of the pairing proof.
pub(crate) const EXPORTER_LABEL: &[u8] = b"EXPORTER-strata-pair-1";
const TRANSCRIPT_LABEL: &[u8] = b"strata pairing proof v1\0";

#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Token {
    /// 16 hex digits.
    pub invitation: String,
    /// The inviting daemon's fingerprint, 64 hex digits.
    pub fingerprint: String,
    pub secret: [u8; 16],
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token").field("invitation", &self.invitation).finish_non_exhaustive()
    }
}

fn random<const N: usize>() -> Result<[u8; N], ApiError> {
    let mut b = [0u8; N];
    SystemRandom::new().fill(&mut b).map_err(|_| ApiError::internal("the system's random generator failed"))?;
    Ok(b)
}

impl Token {
    /// A fresh token for an invitation of the daemon with `fingerprint`.
    pub fn new(fingerprint: &str) -> Result<Token, ApiError> {
        Ok(Token { invitation: hex(&random::<8>()?), fingerprint: fingerprint.into(), secret: random::<16>()? })
    }

    pub fn encode(&self) -> String {
        format!("{PREFIX}{}-{}-{}", self.invitation, self.fingerprint, hex(&self.secret))
    }

    pub fn parse(s: &str) -> Result<Token, ApiError> {
        let bad = |why: &str| {
            ApiError::bad_request(
                format!("not a peer invitation token ({why})"),
                "copy the whole token `strata peer invite` printed on the other daemon (strata-peer1-…)",
            )
        };
        let rest = s.trim().strip_prefix(PREFIX).ok_or_else(|| bad("it does not start with strata-peer1-"))?;
        let parts: Vec<&str> = rest.split('-').collect();
        let [id, fp, secret] = parts[..] else { return Err(bad("it has not three parts after the prefix")) };
        let ok_hex = |p: &str, len: usize| p.len() == len && unhex(p).is_some();
        if !ok_hex(id, 16) || !ok_hex(fp, 64) || !ok_hex(secret, 32) {
            return Err(bad("a part has the wrong length or is not hex"));
        }
        let secret: [u8; 16] = unhex(secret).expect("checked").try_into().expect("16 bytes");
        Ok(Token { invitation: id.to_ascii_lowercase(), fingerprint: fp.to_ascii_lowercase(), secret })
    }
}

fn transcript(invitation: &str, client_fp: &str, server_fp: &str, exporter: &[u8]) -> Vec<u8> {
    let mut t = TRANSCRIPT_LABEL.to_vec();
    for part in [invitation.as_bytes(), client_fp.as_bytes(), server_fp.as_bytes(), exporter] {
        t.extend_from_slice(&(part.len() as u32).to_be_bytes());
        t.extend_from_slice(part);
    }
    t
}

/// The joining daemon's proof, hex.
pub(crate) fn proof(secret: &[u8; 16], invitation: &str, client_fp: &str, server_fp: &str, exporter: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    hex(hmac::sign(&key, &transcript(invitation, client_fp, server_fp, exporter)).as_ref())
}

/// Does `proof_hex` prove `secret` for this transcript? (Constant time.)
pub(crate) fn check_proof(
    secret: &[u8; 16],
    invitation: &str,
    client_fp: &str,
    server_fp: &str,
    exporter: &[u8],
    proof_hex: &str,
) -> bool {
    let Some(tag) = unhex(proof_hex) else { return false };
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    hmac::verify(&key, &transcript(invitation, client_fp, server_fp, exporter), &tag).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_bad_ones_are_refused() {
        let fp = "ab".repeat(32);
        let t = Token::new(&fp).unwrap();
        let s = t.encode();
        assert!(s.starts_with("strata-peer1-"), "{s}");
        assert_eq!(Token::parse(&s).unwrap(), t);
        assert_eq!(Token::parse(&format!("  {}\n", s.to_uppercase().replace("STRATA-PEER1-", PREFIX))).unwrap(), t);
        assert_ne!(Token::new(&fp).unwrap().secret, t.secret, "secrets are random");
        for bad in
            ["", "strata-peer1-", "hello", &s[..s.len() - 1], &format!("{s}-00"), &s.replace("strata-peer1-", "x-")]
        {
            let e = Token::parse(bad).unwrap_err();
            assert!(e.message.contains("not a peer invitation token"), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn a_proof_holds_only_for_its_own_transcript() {
        let (c, s, x) = ("c".repeat(64), "d".repeat(64), [7u8; 32]);
        let secret = [1u8; 16];
        let p = proof(&secret, "0011", &c, &s, &x);
        assert!(check_proof(&secret, "0011", &c, &s, &x, &p));
        assert!(!check_proof(&[2u8; 16], "0011", &c, &s, &x, &p), "another secret");
        assert!(!check_proof(&secret, "0012", &c, &s, &x, &p), "another invitation");
        assert!(!check_proof(&secret, "0011", &s, &s, &x, &p), "another client");
        assert!(!check_proof(&secret, "0011", &c, &c, &x, &p), "another server");
        assert!(!check_proof(&secret, "0011", &c, &s, &[8u8; 32], &p), "another TLS session");
        assert!(!check_proof(&secret, "0011", &c, &s, &x, "zz"), "not hex");
        assert!(!check_proof(&secret, "0011", &c, &s, &x, &p[..62]), "truncated");
    }
}
