//! This daemon's peer identity: an ECDSA P-256 key pair and a self-signed certificate, made
//! at the first start in `DATA_DIR/peer-key.pem` and `DATA_DIR/peer-cert.pem` (mode 0600,
//! written atomically). The identity other daemons know is the SHA-256 fingerprint of the
//! certificate's DER bytes, as 64 lowercase hex digits: they pin it (no CA, no names, no
//! expiry — the certificate is only a carrier for the public key, like an SSH host key).
//!
//! Losing the files means a new identity: every peer then refuses this daemon until it is
//! paired again (that is the point of pinning). Both files are read at start only.

use ring::digest;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;

pub(crate) const KEY_FILE: &str = "peer-key.pem";
pub(crate) const CERT_FILE: &str = "peer-cert.pem";

/// The key pair and certificate this daemon presents to its peers.
pub struct Identity {
    pub cert: CertificateDer<'static>,
    key_der: Vec<u8>,
    /// SHA-256 of `cert`, 64 lowercase hex digits.
    pub fingerprint: String,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity").field("fingerprint", &self.fingerprint).finish_non_exhaustive()
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes of a hex string (either case), or None if it is not one.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok()).collect()
}

/// The fingerprint of a certificate: SHA-256 of its DER bytes, lowercase hex.
pub fn fingerprint(cert: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, cert).as_ref())
}

/// A fingerprint as people compare them: the first 16 hex digits (the full one is in `show`).
pub fn short(fp: &str) -> &str {
    &fp[..fp.len().min(16)]
}

impl Identity {
    /// The private key, for a rustls configuration.
    pub fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(self.key_der.clone().into())
    }

    /// The identity in `dir`, made there if it has none. Half an identity (one file of the
    /// two) is an error, not a reason to make a new one silently.
    pub fn load_or_make(dir: &Path) -> Result<Identity, String> {
        let (key_path, cert_path) = (dir.join(KEY_FILE), dir.join(CERT_FILE));
        let again = "restore it, or remove both peer files to make a new identity (every peer must then pair again)";
        match (key_path.exists(), cert_path.exists()) {
            (false, false) => {
                // The certificate's name is not checked by anyone (peers pin the
                // fingerprint); it only makes the file recognisable.
                let ck = rcgen::generate_simple_self_signed(vec!["strata-peer".to_string()])
                    .map_err(|e| format!("generate the peer key pair: {e}"))?;
                // The key first: a crash between the two leaves a key without a
                // certificate, which the next start reports instead of using half an identity.
                crate::service::state::write_atomic(&key_path, ck.signing_key.serialize_pem().as_bytes(), 0o600)
                    .map_err(|e| format!("write {}: {e}", key_path.display()))?;
                crate::service::state::write_atomic(&cert_path, ck.cert.pem().as_bytes(), 0o600)
                    .map_err(|e| format!("write {}: {e}", cert_path.display()))?;
                let id = Identity::load_or_make(dir)?;
                tracing::info!(fingerprint = %id.fingerprint, "made this daemon's peer identity");
                Ok(id)
            }
            (true, true) => {
                let cert = CertificateDer::from_pem_file(&cert_path)
                    .map_err(|e| format!("{} is damaged ({e}): {again}", cert_path.display()))?;
                let key = PrivateKeyDer::from_pem_file(&key_path)
                    .map_err(|e| format!("{} is damaged ({e}): {again}", key_path.display()))?;
                let PrivateKeyDer::Pkcs8(key) = key else {
                    return Err(format!("{}: not a PKCS#8 key: {again}", key_path.display()));
                };
                Ok(Identity { fingerprint: fingerprint(&cert), cert, key_der: key.secret_pkcs8_der().to_vec() })
            }
            (true, false) | (false, true) => Err(format!(
                "only one of {} and {} exists: restore the other, or remove both to make a new identity \
                 (every peer must then pair again)",
                key_path.display(),
                cert_path.display()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_is_made_once_and_read_back_the_same() {
        let dir = std::env::temp_dir().join(format!("strata-identity-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let a = Identity::load_or_make(&dir).unwrap();
        let b = Identity::load_or_make(&dir).unwrap();
        assert_eq!(a.fingerprint, b.fingerprint);
        assert_eq!(a.key_der, b.key_der);
        assert_eq!(a.fingerprint.len(), 64);
        use std::os::unix::fs::PermissionsExt;
        for f in [KEY_FILE, CERT_FILE] {
            let mode = std::fs::metadata(dir.join(f)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{f}");
        }
        std::fs::remove_file(dir.join(CERT_FILE)).unwrap();
        assert!(Identity::load_or_make(&dir).unwrap_err().contains("only one of"));
        std::fs::remove_file(dir.join(KEY_FILE)).unwrap();
        let c = Identity::load_or_make(&dir).unwrap();
        assert_ne!(c.fingerprint, a.fingerprint, "a new identity");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
        assert_eq!(unhex("00AB10"), Some(vec![0, 0xab, 0x10]));
        assert_eq!(unhex("0g"), None);
        assert_eq!(unhex("abc"), None);
    }
}
