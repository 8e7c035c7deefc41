//! TLS modes: a CA bundle by default, SHA-256 pins for self-signed BMC certificates, and an
//! explicit, logged opt-out.
//!
//! BMCs ship with self-signed certificates whose names rarely match the address they are
//! reached at, and whose validity dates are often wrong. Turning verification off for them
//! would hand the BMC password to anyone on the management network, so the usual answer is a
//! pin: the SHA-256 of the certificate (or of its public key, which survives a re-issue with
//! the same key) recorded when the BMC is enrolled. A pinned connection accepts exactly that
//! certificate, ignores names and dates, and still checks the handshake signature, so the
//! peer has to hold the private key.
//!
//! The crypto provider is always `ring`, passed explicitly, so the client works whichever
//! provider other crates of the process install as the default.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// How the client verifies a BMC's certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsMode {
    /// Verify the chain and the name against the Mozilla root set (`webpki-roots`).
    WebPkiRoots,
    /// Verify the chain and the name against only the CAs in this PEM bundle.
    CaBundlePem(Vec<u8>),
    /// Accept exactly the certificates matching one of these pins (names and dates ignored).
    Pinned(Vec<Pin>),
    /// Accept any certificate. An explicit opt-in for labs; logged with `warn!` each time a
    /// client is built with it.
    InsecureNoVerify,
}

impl TlsMode {
    /// Checks the mode can build a client (a CA bundle that holds certificates, at least one pin), so a bad
    /// site-wide setting fails when it is loaded rather than at the first BMC call.
    pub fn check(&self) -> Result<()> {
        client_config(self, "-").map(|_| ())
    }
}

/// A SHA-256 pin of a certificate or of its SubjectPublicKeyInfo.
///
/// Text form: `cert-sha256:<hex>` or `spki-sha256:<hex>`; the hex may be upper or lower case
/// and may contain `:` separators (as `openssl x509 -fingerprint -sha256` prints it).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pin {
    /// SHA-256 over the certificate's DER encoding.
    CertSha256([u8; 32]),
    /// SHA-256 over the DER SubjectPublicKeyInfo (the key, whatever certificate carries it).
    SpkiSha256([u8; 32]),
}

impl Pin {
    /// The certificate pin of a DER certificate.
    pub fn cert_of(der: &[u8]) -> Self {
        Self::CertSha256(Sha256::digest(der).into())
    }

    /// The public-key pin of a DER certificate; `None` if the DER cannot be walked.
    pub fn spki_of(der: &[u8]) -> Option<Self> {
        spki_der(der).map(|spki| Self::SpkiSha256(Sha256::digest(spki).into()))
    }

    /// Whether a DER certificate matches this pin.
    pub fn matches(&self, der: &[u8]) -> bool {
        match self {
            Self::CertSha256(_) => Self::cert_of(der) == *self,
            Self::SpkiSha256(_) => Self::spki_of(der) == Some(*self),
        }
    }
}

impl fmt::Display for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, digest) = match self {
            Self::CertSha256(d) => ("cert-sha256", d),
            Self::SpkiSha256(d) => ("spki-sha256", d),
        };
        write!(f, "{kind}:")?;
        digest.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Pin {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |reason: &str| Error::Config {
            reason: format!("pin {s:?}: {reason}"),
        };
        let (kind, hex) = s.split_once(':').ok_or_else(|| bad("expected <kind>:<hex>"))?;
        let hex: String = hex.chars().filter(|c| *c != ':').collect();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("expected 32 bytes of hex"));
        }
        let mut digest = [0u8; 32];
        for (i, byte) in digest.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad("invalid hex"))?;
        }
        match kind.to_ascii_lowercase().as_str() {
            "cert-sha256" | "sha256" => Ok(Self::CertSha256(digest)),
            "spki-sha256" => Ok(Self::SpkiSha256(digest)),
            _ => Err(bad("kind must be cert-sha256 or spki-sha256")),
        }
    }
}

/// Builds the rustls configuration for a mode; `server` only labels the warning.
pub(crate) fn client_config(mode: &TlsMode, server: &str) -> Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let algs = provider.signature_verification_algorithms;
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config {
            reason: format!("TLS versions: {e}"),
        })?;
    let config = match mode {
        TlsMode::WebPkiRoots => {
            let roots = RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        TlsMode::CaBundlePem(pem) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| Error::Config {
                    reason: format!("CA bundle: {e}"),
                })?;
                roots.add(cert).map_err(|e| Error::Config {
                    reason: format!("CA certificate: {e}"),
                })?;
            }
            if roots.is_empty() {
                return Err(Error::Config {
                    reason: "CA bundle holds no certificate".into(),
                });
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        TlsMode::Pinned(pins) => {
            if pins.is_empty() {
                return Err(Error::Config {
                    reason: "pinned TLS mode without a pin".into(),
                });
            }
            let verifier = PinVerifier {
                pins: Some(pins.clone()),
                algs,
            };
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
                .with_no_client_auth()
        }
        TlsMode::InsecureNoVerify => {
            tracing::warn!(
                server,
                "TLS certificate verification disabled for this BMC (explicit opt-in)"
            );
            let verifier = PinVerifier { pins: None, algs };
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
                .with_no_client_auth()
        }
    };
    Ok(config)
}

/// Accepts the end-entity certificate when it matches a pin (or always, with `pins: None`),
/// and verifies handshake signatures with the certificate's key in every case.
#[derive(Debug)]
struct PinVerifier {
    pins: Option<Vec<Pin>>,
    algs: WebPkiSupportedAlgorithms,
}

/// The error a pin mismatch surfaces as, inside `rustls::Error`.
#[derive(Debug)]
struct PinMismatch;

impl fmt::Display for PinMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("certificate matches no configured pin")
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
        match &self.pins {
            None => Ok(ServerCertVerified::assertion()),
            Some(pins) if pins.iter().any(|p| p.matches(end_entity)) => Ok(ServerCertVerified::assertion()),
            Some(_) => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Other(rustls::OtherError(Arc::new(PinMismatch))),
            )),
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

/// Whether an error chain holds a rustls certificate rejection. rustls errors travel inside
/// `io::Error` (tokio-rustls wraps them so), whose `source()` skips the wrapped error, so look
/// inside those too.
pub(crate) fn is_certificate_error(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        let mut inner = e;
        // io::Error may wrap io::Error (hyper-util does) before the rustls error.
        loop {
            if is_cert(inner) {
                return true;
            }
            match inner.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
                Some(wrapped) => inner = wrapped,
                None => break,
            }
        }
        current = e.source();
    }
    false
}

fn is_cert(e: &(dyn std::error::Error + 'static)) -> bool {
    matches!(
        e.downcast_ref::<rustls::Error>(),
        Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented)
    )
}

/// One DER element: its tag, its content, the whole encoding, and what follows it.
struct Tlv<'a> {
    tag: u8,
    whole: &'a [u8],
    content: &'a [u8],
    rest: &'a [u8],
}

/// Splits one DER element off the front of `input`.
fn der_tlv(input: &[u8]) -> Option<Tlv<'_>> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    let header = input.len() - rest.len();
    Some(Tlv {
        tag,
        whole: &input[..header + len],
        content: &rest[..len],
        rest: &rest[len..],
    })
}

/// The DER SubjectPublicKeyInfo of an X.509 certificate, found by walking the TBSCertificate:
/// `[0] version?`, serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo.
fn spki_der(cert: &[u8]) -> Option<&[u8]> {
    const SEQUENCE: u8 = 0x30;
    let cert = der_tlv(cert).filter(|t| t.tag == SEQUENCE)?;
    let tbs = der_tlv(cert.content).filter(|t| t.tag == SEQUENCE)?;
    let mut rest = tbs.content;
    let first = der_tlv(rest)?;
    if first.tag == 0xa0 {
        rest = first.rest;
    }
    for expected in [0x02, SEQUENCE, SEQUENCE, SEQUENCE, SEQUENCE] {
        rest = der_tlv(rest).filter(|t| t.tag == expected)?.rest;
    }
    der_tlv(rest).filter(|t| t.tag == SEQUENCE).map(|t| t.whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed() -> (Vec<u8>, Vec<u8>) {
        let key = rcgen::KeyPair::generate().expect("key");
        let params = rcgen::CertificateParams::new(vec!["bmc.example".into()]).expect("params");
        let cert = params.self_signed(&key).expect("cert");
        (
            cert.der().to_vec(),
            rcgen::PublicKeyData::subject_public_key_info(&key),
        )
    }

    #[test]
    fn spki_walk_finds_the_public_key() {
        let (der, spki) = self_signed();
        assert_eq!(spki_der(&der), Some(spki.as_slice()));
        assert_eq!(
            Pin::spki_of(&der),
            Some(Pin::SpkiSha256(Sha256::digest(&spki).into()))
        );
        assert_eq!(spki_der(&der[..20]), None);
        assert_eq!(spki_der(b"\x02\x01\x00"), None);
    }

    #[test]
    fn pins_match_only_their_certificate() {
        let (der, _) = self_signed();
        let (other, _) = self_signed();
        let cert_pin = Pin::cert_of(&der);
        let spki_pin = Pin::spki_of(&der).expect("spki");
        assert!(cert_pin.matches(&der) && spki_pin.matches(&der));
        assert!(!cert_pin.matches(&other) && !spki_pin.matches(&other));
    }

    #[test]
    fn pin_text_round_trips_and_accepts_openssl_form() {
        let (der, _) = self_signed();
        for pin in [Pin::cert_of(&der), Pin::spki_of(&der).expect("spki")] {
            assert_eq!(pin.to_string().parse::<Pin>().expect("parse"), pin);
        }
        let Pin::CertSha256(digest) = Pin::cert_of(&der) else {
            unreachable!()
        };
        let openssl: Vec<String> = digest.iter().map(|b| format!("{b:02X}")).collect();
        let parsed: Pin = format!("sha256:{}", openssl.join(":"))
            .parse()
            .expect("openssl form");
        assert_eq!(parsed, Pin::cert_of(&der));
        assert!("cert-sha256:abcd".parse::<Pin>().is_err());
        assert!(format!("md5:{}", "00".repeat(32)).parse::<Pin>().is_err());
        assert!(format!("cert-sha256:{}", "zz".repeat(32)).parse::<Pin>().is_err());
    }

    #[test]
    fn verifier_accepts_pinned_and_rejects_others() {
        let (der, _) = self_signed();
        let (other, _) = self_signed();
        let algs = rustls::crypto::ring::default_provider().signature_verification_algorithms;
        let verifier = PinVerifier {
            pins: Some(vec![Pin::spki_of(&der).expect("spki")]),
            algs,
        };
        let name = ServerName::try_from("10.0.0.1").expect("name");
        let now = UnixTime::now();
        assert!(
            verifier
                .verify_server_cert(&CertificateDer::from(der), &[], &name, &[], now)
                .is_ok()
        );
        let err = verifier
            .verify_server_cert(&CertificateDer::from(other), &[], &name, &[], now)
            .expect_err("mismatch");
        assert!(
            matches!(&err, rustls::Error::InvalidCertificate(rustls::CertificateError::Other(o)) if format!("{o:?}").contains("PinMismatch")),
            "{err:?}"
        );
    }

    #[test]
    fn config_rejects_empty_pins_and_empty_bundles() {
        assert!(client_config(&TlsMode::Pinned(vec![]), "s").is_err());
        assert!(client_config(&TlsMode::CaBundlePem(b"not pem".to_vec()), "s").is_err());
        assert!(client_config(&TlsMode::WebPkiRoots, "s").is_ok());
        let key = rcgen::KeyPair::generate().expect("key");
        let params = rcgen::CertificateParams::new(vec!["ca.example".into()]).expect("params");
        let pem = params.self_signed(&key).expect("cert").pem();
        assert!(client_config(&TlsMode::CaBundlePem(pem.into_bytes()), "s").is_ok());
    }
}
