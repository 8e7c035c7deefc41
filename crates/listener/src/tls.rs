//! TLS for a listener: a server certificate (from files or generated), TLS 1.3 with 1.2 allowed, and an optional
//! client certificate.
//!
//! The server *asks* every client for a certificate but requires none and trusts no CA for it: IncusOS presents
//! its Incus client certificate (self-signed) when it calls the manager, and what that certificate is worth is
//! decided by the handler (a registered server's certificate fingerprint, say), not by a chain. The handshake
//! still proves the client holds the certificate's key: the `CertificateVerify` signature is checked with the
//! same algorithms as any other TLS signature. A handler finds what was presented as the [`PeerCertificate`]
//! request extension; a client that presented none leaves it absent.

use std::sync::Arc;

use rustls::DigitallySignedStruct;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DistinguishedName, ServerConfig, SignatureScheme};

/// The certificate a TLS client presented, as a request extension: `der` is the leaf certificate as sent, and
/// `sha256` the lower-case hex SHA-256 of `der` (the fingerprint Incus and IncusOS identify certificates by).
/// Absent when the connection is plain HTTP or the client presented no certificate.
#[derive(Clone, PartialEq, Eq)]
pub struct PeerCertificate {
    pub der: Vec<u8>,
    pub sha256: String,
}

impl PeerCertificate {
    pub fn from_der(der: Vec<u8>) -> PeerCertificate {
        use sha2::Digest;
        let sha256 = sha2::Sha256::digest(&der)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        PeerCertificate { der, sha256 }
    }
}

impl std::fmt::Debug for PeerCertificate {
    /// The fingerprint says which certificate it is; the DER is noise in a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerCertificate")
            .field("sha256", &self.sha256)
            .finish_non_exhaustive()
    }
}

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    #[error("the certificate PEM holds no certificate")]
    NoCertificate,
    #[error("reading the certificate PEM")]
    Certificate(#[source] rustls::pki_types::pem::Error),
    #[error("reading the private key PEM")]
    Key(#[source] rustls::pki_types::pem::Error),
    #[error("the certificate and key do not make a TLS configuration")]
    Config(#[source] rustls::Error),
    #[error("generating a self-signed certificate")]
    Generate(#[source] rcgen::Error),
}

/// A certificate and its private key, both PEM.
#[derive(Clone)]
pub struct CertifiedKeyPem {
    pub certificate_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for CertifiedKeyPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertifiedKeyPem")
            .field("certificate_pem", &self.certificate_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// A self-signed certificate (ECDSA P-256) for `names`, each a DNS name or an IP address. Valid from now on for
/// rcgen's default span (until 4096), since nothing renews it.
pub fn self_signed(names: &[String], common_name: &str) -> Result<CertifiedKeyPem, TlsError> {
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(TlsError::Generate)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    let key = rcgen::KeyPair::generate().map_err(TlsError::Generate)?;
    let certificate = params.self_signed(&key).map_err(TlsError::Generate)?;
    Ok(CertifiedKeyPem {
        certificate_pem: certificate.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// The ring provider, named explicitly: the process may have more than one rustls provider compiled in.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The leaf certificate of `certificate_pem` (PEM, the leaf first) when it is self-signed, as its PEM block: a
/// client that must trust exactly this certificate (IncusOS's `server_certificate`) needs it, while one signed by
/// a CA is trusted through that CA. `None` for a CA-signed leaf or a PEM that holds no certificate.
pub fn self_signed_leaf(certificate_pem: &str) -> Option<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let leaf = CertificateDer::pem_slice_iter(certificate_pem.as_bytes())
        .next()?
        .ok()?;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    if parsed.subject().as_raw() != parsed.issuer().as_raw() {
        return None;
    }
    let start = certificate_pem.find(BEGIN)?;
    let end = start + certificate_pem[start..].find(END)? + END.len();
    Some(format!("{}\n", &certificate_pem[start..end]))
}

/// A server configuration for `certificate_pem` (the leaf first, then its chain) and `key_pem`: TLS 1.3 and 1.2,
/// HTTP/1.1 by ALPN, a client certificate asked for and not required.
pub fn server_config(certificate_pem: &str, key_pem: &str) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = CertificateDer::pem_slice_iter(certificate_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(TlsError::Certificate)?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(TlsError::Key)?;
    let provider = provider();
    let verifier = Arc::new(AnyClientCertificate {
        algorithms: provider.signature_verification_algorithms,
    });
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(TlsError::Config)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(TlsError::Config)?;
    // HTTP/1.1 only, as on plain connections (see `serve`).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Asks for a client certificate, accepts a handshake without one, and accepts any certificate whose holder
/// proves it has the key (the signature checks below); see the module documentation.
#[derive(Debug)]
struct AnyClientCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCertificate {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    /// No CA names: a client (Go's crypto/tls among them) then offers whatever certificate it has.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
