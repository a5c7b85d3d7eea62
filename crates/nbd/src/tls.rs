//! TLS configuration: the server's certificate chain and key (PEM), and optionally a CA
//! whose certificates clients must present (mutual TLS: the client is authenticated).
//! rustls with the ring provider, TLS 1.2 and 1.3 (what GnuTLS-based libnbd and qemu
//! negotiate).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct TlsConfig {
    /// The server's certificate chain, PEM, leaf first.
    pub cert_pem: PathBuf,
    /// The server's private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key_pem: PathBuf,
    /// CA certificates (PEM) that sign the client certificates accepted. With it, a client
    /// without a certificate signed by one of them fails the TLS handshake.
    pub client_ca_pem: Option<PathBuf>,
}

impl TlsConfig {
    /// True if clients are authenticated by certificate.
    pub fn verifies_clients(&self) -> bool {
        self.client_ca_pem.is_some()
    }

    /// Load the files and build the rustls configuration.
    pub fn build(&self) -> Result<Arc<rustls::ServerConfig>, String> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.cert_pem)
            .and_then(|i| i.collect::<Result<_, _>>())
            .map_err(|e| format!("TLS certificate {}: {e}", self.cert_pem.display()))?;
        if certs.is_empty() {
            return Err(format!("TLS certificate {}: no certificate in it (PEM expected)", self.cert_pem.display()));
        }
        let key = PrivateKeyDer::from_pem_file(&self.key_pem)
            .map_err(|e| format!("TLS key {}: {e}", self.key_pem.display()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let builder = match &self.client_ca_pem {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                let ca_certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
                    .and_then(|i| i.collect::<Result<_, _>>())
                    .map_err(|e| format!("TLS client CA {}: {e}", ca.display()))?;
                for c in ca_certs {
                    roots.add(c).map_err(|e| format!("TLS client CA {}: {e}", ca.display()))?;
                }
                if roots.is_empty() {
                    return Err(format!("TLS client CA {}: no certificate in it", ca.display()));
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                    .build()
                    .map_err(|e| format!("TLS client verification: {e}"))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder.with_single_cert(certs, key).map_err(|e| format!("TLS certificate and key: {e}"))?;
        Ok(Arc::new(config))
    }
}
