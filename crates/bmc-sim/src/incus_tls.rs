//! TLS of a server's own Incus listener: the server's Incus certificate (made at first boot, used by Incus as both
//! server and client certificate) and a client certificate requested but optional at the handshake, of any issuer.
//!
//! Incus itself accepts any client certificate at the TLS layer and decides afterwards, per request, whether the
//! certificate is trusted (`util.CheckTrustState` against its trust store). So the verifier here checks only that
//! the client holds the key of the certificate it presents (the handshake signature), never a chain; the listener
//! then compares the certificate with the server's `trusted_certificates`.

use std::sync::Arc;

use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};

use crate::register::ClientIdentity;

/// The TLS configuration serving `identity`: TLS 1.3 and 1.2, HTTP/1.1 (and h2) by ALPN.
pub fn server_config(identity: &ClientIdentity) -> Result<Arc<ServerConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(AnyClientCertificate {
        algs: provider.signature_verification_algorithms,
    });
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(identity.key_der().to_vec()));
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![CertificateDer::from(identity.cert_der().to_vec())], key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The DER of each PEM certificate that parses (a trust store entry that does not is never matched).
pub fn trusted_ders(pems: &[String]) -> Vec<Vec<u8>> {
    pems.iter()
        .filter_map(|pem| CertificateDer::from_pem_slice(pem.as_bytes()).ok())
        .map(|der| der.to_vec())
        .collect()
}

/// Requests a client certificate, accepts a connection without one, and accepts any certificate whose key signed
/// the handshake.
#[derive(Debug)]
struct AnyClientCertificate {
    algs: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCertificate {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

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
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}
