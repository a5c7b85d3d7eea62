//! API tokens for TCP callers: `strata token create --role ROLE NAME` shows the secret once;
//! the daemon keeps only its BLAKE3 hash (DATA_DIR/tokens.json, mode 0600), so a copy of
//! the data directory does not hand out access.
//!
//! A token reads `strata_<id>_<secret>`: the id (16 hex digits) finds the record without
//! comparing secrets; the secret (64 hex digits, 256 random bits) is checked against the
//! hash in constant time (blake3::Hash's equality).

use crate::service::state::write_atomic;
use crate::service::{random_u64, ApiError};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Mutex;
use strata_api::{CreatedToken, ErrorKind, Role, TokenInfo};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenRecord {
    id: String,
    name: String,
    role: Role,
    /// BLAKE3 of the secret, hex.
    hash: String,
    created_ns: u64,
    created_by: String,
}

pub(crate) struct TokenStore {
    path: PathBuf,
    records: Mutex<Vec<TokenRecord>>,
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl TokenStore {
    pub(crate) fn load(path: PathBuf) -> Result<TokenStore, String> {
        let records = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                format!("{} is damaged ({e}): fix it, or remove it to revoke every token", path.display())
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(format!("read {}: {e}", path.display())),
        };
        Ok(TokenStore { path, records: Mutex::new(records) })
    }

    fn save(&self, records: &[TokenRecord]) -> Result<(), ApiError> {
        let bytes = serde_json::to_vec_pretty(records).expect("tokens serialise");
        write_atomic(&self.path, &bytes, 0o600)
            .map_err(|e| ApiError::internal(format!("save {}: {e}", self.path.display())))
    }

    pub(crate) fn create(
        &self,
        name: &str,
        role: Role,
        created_by: &str,
        now_ns: u64,
    ) -> Result<CreatedToken, ApiError> {
        if !valid_name(name) {
            return Err(ApiError::bad_request(
                format!("token name {name:?}"),
                "use 1-64 lowercase letters, digits, '.', '_' or '-'",
            ));
        }
        let mut records = self.records.lock().expect("tokens");
        if records.iter().any(|r| r.name == name) {
            return Err(ApiError::new(
                ErrorKind::AlreadyExists,
                format!("token {name} exists"),
                "choose another name, or revoke it first",
            ));
        }
        let id = format!("{:016x}", random_u64());
        let secret: String = (0..4).map(|_| format!("{:016x}", random_u64())).collect();
        let rec = TokenRecord {
            id: id.clone(),
            name: name.into(),
            role,
            hash: hex(blake3::hash(secret.as_bytes()).as_bytes()),
            created_ns: now_ns,
            created_by: created_by.into(),
        };
        let mut next = records.clone();
        next.push(rec.clone());
        self.save(&next)?;
        *records = next;
        Ok(CreatedToken { info: info(&rec), token: format!("strata_{id}_{secret}") })
    }

    pub(crate) fn list(&self) -> Vec<TokenInfo> {
        self.records.lock().expect("tokens").iter().map(info).collect()
    }

    pub(crate) fn revoke(&self, name: &str) -> Result<(), ApiError> {
        let mut records = self.records.lock().expect("tokens");
        let next: Vec<TokenRecord> = records.iter().filter(|r| r.name != name).cloned().collect();
        if next.len() == records.len() {
            return Err(ApiError::not_found(format!("token {name}"), "see `strata token list`"));
        }
        self.save(&next)?;
        *records = next;
        Ok(())
    }

    /// The token's name and role, if `token` is one of ours.
    pub(crate) fn verify(&self, token: &str) -> Option<(String, Role)> {
        let rest = token.strip_prefix("strata_")?;
        let (id, secret) = rest.split_once('_')?;
        let records = self.records.lock().expect("tokens");
        let rec = records.iter().find(|r| r.id == id)?;
        let want = blake3::Hash::from_hex(&rec.hash).ok()?;
        (blake3::hash(secret.as_bytes()) == want).then(|| (rec.name.clone(), rec.role))
    }
}

fn info(r: &TokenRecord) -> TokenInfo {
    TokenInfo { name: r.name.clone(), role: r.role, created_ns: r.created_ns, created_by: r.created_by.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_only_with_their_secret_and_survive_a_reload() {
        let dir = std::env::temp_dir().join(format!("strata-tokens-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokens.json");
        let s = TokenStore::load(path.clone()).unwrap();
        let t = s.create("ci", Role::Viewer, "uid 0 (root)", 1).unwrap();
        assert_eq!(s.verify(&t.token), Some(("ci".into(), Role::Viewer)));
        let mut forged = t.token.clone();
        let last = forged.pop().unwrap();
        forged.push(if last == '0' { '1' } else { '0' });
        assert_eq!(s.verify(&forged), None);
        assert_eq!(s.verify("strata_x_y"), None);
        assert_eq!(s.verify(""), None);
        assert!(s.create("ci", Role::Admin, "x", 2).is_err(), "names are unique");
        assert!(s.create("Bad Name", Role::Admin, "x", 2).is_err());
        let raw = std::fs::read_to_string(&path).unwrap();
        assert!(!raw.contains(t.token.rsplit('_').next().unwrap()), "the secret is never stored");
        let again = TokenStore::load(path).unwrap();
        assert_eq!(again.verify(&t.token), Some(("ci".into(), Role::Viewer)));
        again.revoke("ci").unwrap();
        assert_eq!(again.verify(&t.token), None);
        assert!(again.revoke("ci").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
