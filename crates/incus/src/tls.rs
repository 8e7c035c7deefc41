//! Mutual TLS with an Incus server: racklift's client certificate, and the server's self-signed certificate
//! trusted by its SHA-256 pin.
//!
//! Incus servers present self-signed certificates, so names, dates and CAs say nothing; what identifies a server
//! is the certificate itself. With a pin, only the certificate with that SHA-256 is accepted. Without one, the
//! first certificate seen is accepted and recorded (trust on first use), so the caller can store it and pin it
//! from then on; a different certificate later on the same client is refused. The handshake signature is checked
//! in every mode, so the peer has to hold the certificate's private key.
//!
//! The crypto provider is always `ring`, passed explicitly, so the client works whichever provider other crates
//! of the process install as the default.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The SHA-256 of a certificate's DER encoding. Text form: 64 hex digits; parsing also takes upper case, `:`
/// separators and a `sha256:` or `cert-sha256:` prefix (as `openssl x509 -fingerprint -sha256` and
/// racklift-redfish print it).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CertPin([u8; 32]);

impl CertPin {
    /// The pin of a DER certificate.
    pub fn of_der(der: &[u8]) -> Self {
        Self(Sha256::digest(der).into())
    }

    /// A pin from its 32 bytes.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The 32 bytes of the digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The pin of the first certificate of a PEM bundle.
    pub fn of_pem(pem: &[u8]) -> Result<Self> {
        let der = CertificateDer::pem_slice_iter(pem)
            .next()
            .ok_or_else(|| Error::Config {
                reason: "PEM holds no certificate".into(),
            })?
            .map_err(|e| Error::Config {
                reason: format!("certificate PEM: {e}"),
            })?;
        Ok(Self::of_der(&der))
    }
}

impl fmt::Display for CertPin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for CertPin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CertPin({self})")
    }
}

impl FromStr for CertPin {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |reason: &str| Error::Config {
            reason: format!("certificate pin {s:?}: {reason}"),
        };
        let lower = s.trim().to_ascii_lowercase();
        let hex = ["cert-sha256:", "sha256:"]
            .iter()
            .find_map(|prefix| lower.strip_prefix(prefix))
            .unwrap_or(&lower);
        let hex: Vec<u8> = hex.bytes().filter(|b| *b != b':').collect();
        if hex.len() != 64 || !hex.iter().all(u8::is_ascii_hexdigit) {
            return Err(bad("expected 32 bytes of hex"));
        }
        let nibble = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
        let mut digest = [0u8; 32];
        for (byte, pair) in digest.iter_mut().zip(hex.chunks(2)) {
            let (hi, lo) = nibble(pair[0])
                .zip(nibble(pair[1]))
                .ok_or_else(|| bad("invalid hex"))?;
            *byte = (hi << 4) | lo;
        }
        Ok(Self(digest))
    }
}

/// How the server's certificate is trusted. There is no CA mode: Incus servers are self-signed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerTrust {
    /// Accept only the certificate with this SHA-256 (names, dates and issuers ignored).
    Pinned(CertPin),
    /// Accept the first certificate and record its pin ([`IncusClient::observed_pin`](crate::IncusClient::observed_pin));
    /// refuse any other certificate afterwards.
    FirstUse,
    /// Accept any certificate and record nothing. An explicit opt-in for labs; logged with `warn!` each time a
    /// client is built with it.
    InsecureAcceptAny,
}

impl ServerTrust {
    /// The stored pin when there is one, else first use.
    pub fn from_pin(pin: Option<CertPin>) -> Self {
        pin.map_or(Self::FirstUse, Self::Pinned)
    }
}

/// racklift's client certificate and its private key, both PEM. `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
}

impl ClientIdentity {
    /// An identity from a certificate chain PEM and a private key PEM (PKCS#8, PKCS#1 or SEC1).
    pub fn from_pem(cert_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> Self {
        Self {
            cert_pem: cert_pem.into(),
            key_pem: key_pem.into(),
        }
    }

    /// The pin of the client certificate: what the server has in its trust store for racklift.
    pub fn certificate_pin(&self) -> Result<CertPin> {
        CertPin::of_pem(&self.cert_pem)
    }

    fn parse(&self) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
        let certs = CertificateDer::pem_slice_iter(&self.cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::Config {
                reason: format!("client certificate PEM: {e}"),
            })?;
        if certs.is_empty() {
            return Err(Error::Config {
                reason: "client certificate PEM holds no certificate".into(),
            });
        }
        // The key's own parse error can quote key material, so it is not passed on.
        let key = PrivateKeyDer::from_pem_slice(&self.key_pem).map_err(|_| Error::Config {
            reason: "client key PEM holds no usable private key".into(),
        })?;
        Ok((certs, key))
    }
}

impl fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pin = self.certificate_pin().ok();
        f.debug_struct("ClientIdentity")
            .field("certificate", &pin)
            .field("key", &"***")
            .finish()
    }
}

/// What a client knows about the server's certificate: the configured pin, or the one seen first.
#[derive(Debug)]
pub(crate) struct PinState {
    trust: ServerTrust,
    observed: OnceLock<CertPin>,
}

impl PinState {
    pub(crate) fn new(trust: ServerTrust) -> Self {
        Self {
            trust,
            observed: OnceLock::new(),
        }
    }

    /// The pin a presented certificate must match now, if any.
    fn expected(&self) -> Option<CertPin> {
        match self.trust {
            ServerTrust::Pinned(pin) => Some(pin),
            ServerTrust::FirstUse => self.observed.get().copied(),
            ServerTrust::InsecureAcceptAny => None,
        }
    }

    /// Records the certificate of a completed handshake. Two first contacts racing (two clients would have to
    /// share this state, which clones do) settle on the first; the other one is refused.
    pub(crate) fn settle(&self, presented: CertPin) -> Result<()> {
        if self.trust == ServerTrust::InsecureAcceptAny {
            return Ok(());
        }
        let expected = *self.observed.get_or_init(|| presented);
        if expected == presented {
            Ok(())
        } else {
            Err(Error::PinMismatch { expected, presented })
        }
    }

    /// The pin of the certificate the server presented, once a handshake has completed.
    pub(crate) fn observed(&self) -> Option<CertPin> {
        self.observed.get().copied()
    }
}

/// The rustls client configuration: TLS 1.3 and 1.2, ring, the pin verifier, the client certificate.
pub(crate) fn client_config(
    identity: &ClientIdentity,
    pins: Arc<PinState>,
    server: &str,
) -> Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let algs = provider.signature_verification_algorithms;
    if pins.trust == ServerTrust::InsecureAcceptAny {
        tracing::warn!(
            server,
            "Incus server certificate verification disabled (explicit opt-in)"
        );
    }
    let (certs, key) = identity.parse()?;
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| Error::Config {
            reason: format!("TLS versions: {e}"),
        })?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinVerifier { pins, algs }))
        .with_client_auth_cert(certs, key)
        .map_err(|e| Error::Config {
            reason: format!("client identity: {e}"),
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // Every connection is a full handshake, so every call checks the certificate the server presents now: a
    // resumed session would carry the first one forward and hide a changed certificate.
    config.resumption = rustls::client::Resumption::disabled();
    Ok(config)
}

/// Accepts the server's certificate when it matches the expected pin (or when none is expected yet), and verifies
/// handshake signatures with the certificate's key in every case.
#[derive(Debug)]
struct PinVerifier {
    pins: Arc<PinState>,
    algs: WebPkiSupportedAlgorithms,
}

/// A pin mismatch travelling inside `rustls::Error` up to the client, which turns it into
/// [`Error::PinMismatch`].
#[derive(Debug)]
pub(crate) struct PinMismatch {
    pub expected: CertPin,
    pub presented: CertPin,
}

impl fmt::Display for PinMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "certificate {} is not the pinned {}",
            self.presented, self.expected
        )
    }
}

impl std::error::Error for PinMismatch {}

impl ServerCertVerifier for PinVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let presented = CertPin::of_der(end_entity);
        match self.pins.expected() {
            Some(expected) if expected != presented => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Other(rustls::OtherError(Arc::new(PinMismatch {
                    expected,
                    presented,
                }))),
            )),
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// What a failed connection's error chain says about TLS.
pub(crate) enum TlsFailure {
    /// The server's certificate is not the pinned one.
    Pin(CertPin, CertPin),
    /// Any other handshake or TLS-level failure (an alert, no common version, a bad signature).
    Other,
}

/// Looks through an error chain for rustls errors. rustls errors travel inside `io::Error`, whose `source()`
/// skips the wrapped error, so look inside those too.
pub(crate) fn tls_failure(err: &(dyn std::error::Error + 'static)) -> Option<TlsFailure> {
    let mut current = Some(err);
    let mut found = None;
    while let Some(e) = current {
        let mut inner = e;
        loop {
            if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
                if let rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)) = tls
                    && let Some(pin) = other.0.downcast_ref::<PinMismatch>()
                {
                    return Some(TlsFailure::Pin(pin.expected, pin.presented));
                }
                found = Some(TlsFailure::Other);
            }
            match inner.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
                Some(wrapped) => inner = wrapped,
                None => break,
            }
        }
        current = e.source();
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_text_round_trips_and_accepts_openssl_form() {
        let pin = CertPin::of_der(b"not really a certificate");
        assert_eq!(pin.to_string().len(), 64);
        assert_eq!(pin.to_string().parse::<CertPin>().expect("parse"), pin);
        let openssl: Vec<String> = pin.as_bytes().iter().map(|b| format!("{b:02X}")).collect();
        for text in [
            format!("sha256:{}", openssl.join(":")),
            format!("cert-sha256:{pin}"),
            openssl.concat(),
        ] {
            assert_eq!(text.parse::<CertPin>().expect("parse"), pin, "{text}");
        }
        for bad in ["abcd".to_owned(), "zz".repeat(32), format!("{pin}00")] {
            assert!(bad.parse::<CertPin>().is_err(), "{bad}");
        }
    }

    #[test]
    fn first_use_records_then_holds() {
        let a = CertPin::from_bytes([1; 32]);
        let b = CertPin::from_bytes([2; 32]);
        let state = PinState::new(ServerTrust::FirstUse);
        assert_eq!(state.expected(), None);
        state.settle(a).expect("first contact");
        assert_eq!(state.observed(), Some(a));
        assert_eq!(state.expected(), Some(a));
        let err = state.settle(b).expect_err("second certificate");
        assert!(matches!(err, Error::PinMismatch { expected, presented } if expected == a && presented == b));
        let insecure = PinState::new(ServerTrust::InsecureAcceptAny);
        insecure.settle(a).expect("insecure");
        assert_eq!(insecure.observed(), None);
        assert_eq!(ServerTrust::from_pin(Some(a)), ServerTrust::Pinned(a));
        assert_eq!(ServerTrust::from_pin(None), ServerTrust::FirstUse);
    }

    #[test]
    fn identity_debug_hides_the_key() {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["racklift".into()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        let identity = ClientIdentity::from_pem(cert.pem(), key.serialize_pem());
        let debug = format!("{identity:?}");
        assert!(!debug.contains("PRIVATE"), "{debug}");
        assert!(
            debug.contains(&CertPin::of_der(cert.der()).to_string()),
            "{debug}"
        );
        assert!(identity.parse().is_ok());
        assert!(ClientIdentity::from_pem("nope", "nope").parse().is_err());
    }
}
