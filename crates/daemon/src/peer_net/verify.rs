//! Certificate verifiers that pin fingerprints instead of trusting a CA.
//!
//! Each still checks the handshake signature with the certificate's key (rustls's
//! `verify_tls13_signature`): a copy of a peer's certificate without its private key proves
//! nothing. Dates and names are not checked: the fingerprint is the identity, and a
//! certificate is replaced only by re-pairing.
//!
//! A refusal is `CertificateError::ApplicationVerificationFailure`, which rustls sends as
//! the TLS alert `access_denied`: the other side learns it was refused, not merely cut off.

use super::identity::{fingerprint, short};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};
use std::sync::{Arc, Mutex};

fn algorithms() -> WebPkiSupportedAlgorithms {
    rustls::crypto::ring::default_provider().signature_verification_algorithms
}

fn refused() -> Error {
    Error::InvalidCertificate(CertificateError::ApplicationVerificationFailure)
}

/// The client's check of the server: its certificate's fingerprint must be `expected`.
/// What it saw is kept in `seen`, for the error message.
#[derive(Debug)]
pub(crate) struct PinnedServer {
    expected: String,
    pub seen: Arc<Mutex<Option<String>>>,
    algs: WebPkiSupportedAlgorithms,
}

impl PinnedServer {
    pub fn new(expected: &str) -> PinnedServer {
        PinnedServer { expected: expected.to_ascii_lowercase(), seen: Default::default(), algs: algorithms() }
    }
}

impl ServerCertVerifier for PinnedServer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let fp = fingerprint(end_entity);
        let ok = fp == self.expected;
        *self.seen.lock().expect("seen") = Some(fp);
        if ok {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(refused())
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// Is this fingerprint a paired peer's? (Asked at every handshake: a peer deleted a moment
/// ago is refused at once.)
pub(crate) type KnownPeer = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The listener's check of a client. `known: None` is the pairing session's verifier: any
/// certificate whose key signs the handshake is taken, because the pairing proof that must
/// follow is what authorises it (server.rs answers nothing else on that session).
pub(crate) struct PinnedClients {
    known: Option<KnownPeer>,
    algs: WebPkiSupportedAlgorithms,
}

impl std::fmt::Debug for PinnedClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedClients").field("pairing", &self.known.is_none()).finish()
    }
}

impl PinnedClients {
    pub fn peers(known: KnownPeer) -> PinnedClients {
        PinnedClients { known: Some(known), algs: algorithms() }
    }
    pub fn pairing() -> PinnedClients {
        PinnedClients { known: None, algs: algorithms() }
    }
}

impl ClientCertVerifier for PinnedClients {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let Some(known) = &self.known else { return Ok(ClientCertVerified::assertion()) };
        let fp = fingerprint(end_entity);
        if known(&fp) {
            Ok(ClientCertVerified::assertion())
        } else {
            tracing::warn!(fingerprint = %short(&fp), "replication listener: refused a client certificate that is no paired peer's");
            Err(refused())
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}
