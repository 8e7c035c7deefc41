//! Registration with the `operations-center` provider, the way IncusOS does it
//! (`incus-osd/internal/providers/provider_operations_center.go`, `Register`, `load`, `loadTLS`, `apiRequest`).
//!
//! - The provider seed's `config` gives `server_url`, `server_token` and optionally `server_certificate`; a
//!   missing URL or token fails the provider's load, which stops the daemon before anything is sent (L339-379).
//! - `POST {server_url}/1.0/provisioning/servers?token={server_token}` with Operations Center's whole `ServerPost`
//!   (its `ServerPut` flattened, every key present, L136-158), and no `Content-Type` or other header (L452-460).
//! - TLS 1.3 at least (L388-390). With `server_certificate`, that certificate is the one trusted; otherwise the
//!   usual roots (here the Mozilla set). Incus's `server.crt` is presented once Incus has made it, and nothing
//!   before (`configureClientCertificate`, L429-450): the first update check of a fresh install is anonymous.
//! - IncusOS builds a Go `http.Transport`, which sends a plain `http://` URL without TLS: no scheme is refused,
//!   and neither is it here.
//! - Whatever the HTTP status, the answer must be an Incus envelope with `type: sync` and `status_code: 200`
//!   (L511-534); the registration's `metadata` is a `ServerRegistrationResponse` whose `certificate` Incus then
//!   trusts (L166-191).
//! - `PUT {server_url}/1.0/provisioning/servers/:self` with `{connection_url, cause}` (`ServerSelfUpdate`,
//!   L80-123), answered the same way.
//!
//! Kept to plain functions over a [`OperationsCenter`] so that the provider's other calls (update checks,
//! `:self`) share the client and the envelope check.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::seed::Provider;

/// The provider name that registers.
pub const OPERATIONS_CENTER: &str = "operations-center";

/// Why the provider could not be loaded (the daemon stops at start-up).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    #[error("no operations center URL provided")]
    NoUrl,
    #[error("invalid operations center URL {url:?}")]
    BadUrl { url: String },
    #[error("no operations center token provided")]
    NoToken,
    #[error("invalid remote certificate")]
    BadCertificate,
}

/// Why a registration failed.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error("building the TLS client")]
    Tls(#[source] rustls::Error),
    #[error("building the HTTP client")]
    Client(#[source] reqwest::Error),
    #[error("sending the request")]
    Send(#[source] reqwest::Error),
    #[error("the answer is not an Incus response")]
    NotAnEnvelope(#[source] serde_json::Error),
    #[error("error from operations center: {0}")]
    Refused(String),
    #[error("bad response from operations center (type {kind:?}, status code {status_code})")]
    BadResponse { kind: String, status_code: i64 },
    #[error("the answer's metadata is not the expected shape")]
    Metadata(#[source] serde_json::Error),
}

/// The `operations-center` provider's settings, validated.
#[derive(Clone, Debug)]
pub struct OperationsCenter {
    pub server_url: reqwest::Url,
    pub server_token: String,
    /// DER of `server_certificate`, when given.
    pub server_certificate: Option<Vec<u8>>,
}

impl OperationsCenter {
    /// `Ok(None)` for any other provider: those do not register (IncusOS: `ErrRegistrationUnsupported`).
    pub fn from_provider(provider: &Provider) -> Result<Option<OperationsCenter>, ProviderError> {
        if provider.name != OPERATIONS_CENTER {
            return Ok(None);
        }
        let get = |k: &str| provider.config.get(k).filter(|v| !v.is_empty());
        let url = get("server_url").ok_or(ProviderError::NoUrl)?;
        let server_url = reqwest::Url::parse(url).map_err(|_| ProviderError::BadUrl { url: url.clone() })?;
        let server_token = get("server_token").ok_or(ProviderError::NoToken)?.clone();
        let server_certificate = match get("server_certificate") {
            Some(pem) => Some(
                CertificateDer::from_pem_slice(pem.as_bytes())
                    .map_err(|_| ProviderError::BadCertificate)?
                    .to_vec(),
            ),
            None => None,
        };
        Ok(Some(OperationsCenter {
            server_url,
            server_token,
            server_certificate,
        }))
    }

    /// `{server_url}{path}`, keeping a path prefix of `server_url`; `path` starts with `/` and has no query.
    pub fn url(&self, path: &str) -> reqwest::Url {
        let mut url = self.server_url.clone();
        let path = format!("{}{path}", url.path().trim_end_matches('/'));
        url.set_path(&path);
        url.set_query(None);
        url
    }

    /// `{server_url}/1.0/provisioning/servers?token=…`.
    pub fn registration_url(&self) -> reqwest::Url {
        let mut url = self.url("/1.0/provisioning/servers");
        url.query_pairs_mut().append_pair("token", &self.server_token);
        url
    }
}

/// A server's Incus client certificate and key, made at the first boot of the installed OS.
#[derive(Clone, Debug)]
pub struct ClientIdentity {
    pub cert_pem: String,
    cert_der: Vec<u8>,
    key_der: Vec<u8>,
}

impl ClientIdentity {
    /// A self-signed certificate named after the server, as Incus makes its own at first start.
    pub fn generate(hostname: &str) -> Result<ClientIdentity, rcgen::Error> {
        let certified = rcgen::generate_simple_self_signed(vec![hostname.to_owned()])?;
        Ok(ClientIdentity {
            cert_pem: certified.cert.pem(),
            cert_der: certified.cert.der().to_vec(),
            key_der: certified.signing_key.serialize_der(),
        })
    }

    /// The certificate's DER.
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The private key (PKCS#8 DER), for the server side of the Incus listener.
    pub(crate) fn key_der(&self) -> &[u8] {
        &self.key_der
    }

    /// Lower-case hex SHA-256 of the certificate's DER: how Incus, and the manager, name a certificate.
    pub fn sha256(&self) -> String {
        use sha2::Digest;
        sha2::Sha256::digest(&self.cert_der)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// Operations Center's `ServerPost` as IncusOS fills it (`provider_operations_center.go:136-145`;
/// `oc@v0.8.1 shared/api/provisioning_server.go:702-755`): the embedded `ServerPut` first (Go marshals an embedded
/// struct's fields in place), no field `omitempty`, so every key is sent, empty ones included.
#[derive(Clone, Debug, Serialize)]
pub struct ServerPost {
    #[serde(flatten)]
    pub put: ServerPut,
    /// `state.Hostname()` (`incus-osd/internal/state/struct.go:128-156`).
    pub name: String,
    pub connection_url: String,
    /// The SMBIOS product UUID (`struct.go:114-126`).
    pub system_uuid: String,
    /// `/etc/machine-id` (`struct.go:100-112`).
    pub machine_id: String,
}

/// `ServerPut`: IncusOS leaves it at Go's zero values.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ServerPut {
    pub public_connection_url: String,
    pub channel: String,
    pub description: String,
    /// A nil `ConfigMap`: `null`.
    pub properties: Option<std::collections::BTreeMap<String, String>>,
    pub bmc_config: BmcConfig,
}

/// `BMCConfig` (`provisioning_server.go:562-588`), zero-valued.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BmcConfig {
    pub api_type: String,
    pub endpoint: String,
    pub certificate: String,
    pub auto_pin_certificate: bool,
    pub username: String,
    pub password: String,
}

/// `ServerSelfUpdate` (`provisioning_server.go:1019-1027`): both keys always sent.
#[derive(Clone, Debug, Serialize)]
pub struct ServerSelfUpdate {
    pub connection_url: String,
    pub cause: String,
}

/// `ServerRegistrationResponse` (`provisioning_server.go:1032-1036`), the registration answer's `metadata`.
#[derive(Debug, Default, Deserialize)]
struct ServerRegistrationResponse {
    #[serde(default)]
    certificate: String,
}

/// An Incus response envelope (`shared/api.Response`).
#[derive(Debug, Deserialize)]
struct Envelope {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    status_code: i64,
    #[serde(default)]
    error: String,
    #[serde(default)]
    metadata: Value,
}

/// The HTTP client for the provider: TLS 1.3 only, the pinned or the usual roots, the client certificate.
pub fn client(oc: &OperationsCenter, identity: &ClientIdentity) -> Result<reqwest::Client, RegisterError> {
    build_client(oc, Some(identity))
}

/// The provider's client before Incus exists: no client certificate to present
/// (`provider_operations_center.go:429-450`, `configureClientCertificate` on `ErrNoPrimary`).
pub fn anonymous_client(oc: &OperationsCenter) -> Result<reqwest::Client, RegisterError> {
    build_client(oc, None)
}

fn build_client(
    oc: &OperationsCenter,
    identity: Option<&ClientIdentity>,
) -> Result<reqwest::Client, RegisterError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(RegisterError::Tls)?;
    let builder = match &oc.server_certificate {
        Some(der) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ExactCertificate {
                der: der.clone(),
                algs: provider.signature_verification_algorithms,
            })),
        None => {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            builder.with_root_certificates(roots)
        }
    };
    let config = match identity {
        Some(identity) => {
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(identity.key_der.clone()));
            builder
                .with_client_auth_cert(vec![CertificateDer::from(identity.cert_der.clone())], key)
                .map_err(RegisterError::Tls)?
        }
        None => builder.with_no_client_auth(),
    };
    reqwest::Client::builder()
        .use_preconfigured_tls(config)
        .no_proxy()
        .build()
        .map_err(RegisterError::Client)
}

/// Send the registration and check the answer; returns `metadata.certificate` (PEM, possibly empty). The body
/// goes out as bytes: IncusOS sets no `Content-Type`.
pub async fn register(
    client: &reqwest::Client,
    oc: &OperationsCenter,
    body: &ServerPost,
) -> Result<String, RegisterError> {
    let bytes = serde_json::to_vec(body).map_err(RegisterError::Metadata)?;
    let resp = client
        .post(oc.registration_url())
        .body(bytes)
        .send()
        .await
        .map_err(RegisterError::Send)?;
    let bytes = resp.bytes().await.map_err(RegisterError::Send)?;
    let envelope = check_envelope(&bytes)?;
    let answer: ServerRegistrationResponse = match envelope.metadata {
        Value::Null => ServerRegistrationResponse::default(),
        metadata => serde_json::from_value(metadata).map_err(RegisterError::Metadata)?,
    };
    Ok(answer.certificate)
}

/// `PUT {server_url}/1.0/provisioning/servers/:self`, one try; the answer is checked as every provider answer is.
pub async fn put_self(
    client: &reqwest::Client,
    oc: &OperationsCenter,
    body: &ServerSelfUpdate,
) -> Result<(), RegisterError> {
    let bytes = serde_json::to_vec(body).map_err(RegisterError::Metadata)?;
    let resp = client
        .put(oc.url("/1.0/provisioning/servers/:self"))
        .body(bytes)
        .send()
        .await
        .map_err(RegisterError::Send)?;
    let bytes = resp.bytes().await.map_err(RegisterError::Send)?;
    check_envelope(&bytes).map(|_| ())
}

/// `GET {server_url}{path}` (a query allowed), answered as every provider call is: a `sync` 200 envelope whose
/// metadata is a `T`.
pub async fn get<T: DeserializeOwned>(
    client: &reqwest::Client,
    oc: &OperationsCenter,
    path_and_query: &str,
) -> Result<T, RegisterError> {
    let (path, query) = path_and_query
        .split_once('?')
        .map_or((path_and_query, None), |(p, q)| (p, Some(q)));
    let mut url = oc.url(path);
    url.set_query(query);
    let bytes = client
        .get(url)
        .send()
        .await
        .map_err(RegisterError::Send)?
        .bytes()
        .await
        .map_err(RegisterError::Send)?;
    let envelope = check_envelope(&bytes)?;
    serde_json::from_value(envelope.metadata).map_err(RegisterError::Metadata)
}

/// IncusOS's "quick validation" of every provider answer: whatever the HTTP status, the body must be a `sync`
/// envelope with `status_code` 200.
fn check_envelope(bytes: &[u8]) -> Result<Envelope, RegisterError> {
    let envelope: Envelope = serde_json::from_slice(bytes).map_err(RegisterError::NotAnEnvelope)?;
    if envelope.kind != "sync" || envelope.status_code != 200 {
        if envelope.kind == "error" {
            return Err(RegisterError::Refused(envelope.error));
        }
        return Err(RegisterError::BadResponse {
            kind: envelope.kind,
            status_code: envelope.status_code,
        });
    }
    Ok(envelope)
}

/// Trusts exactly one certificate (the provider seed's `server_certificate`), whatever name it carries, and
/// checks the handshake signatures against it.
#[derive(Debug)]
struct ExactCertificate {
    der: Vec<u8>,
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ExactCertificate {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.der.as_slice() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            ))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(pairs: &[(&str, &str)]) -> Provider {
        Provider {
            name: OPERATIONS_CENTER.to_owned(),
            config: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Provider::default()
        }
    }

    #[test]
    fn the_provider_needs_a_url_and_a_token_and_other_providers_do_not_register() {
        let other = Provider {
            name: "images".to_owned(),
            ..Provider::default()
        };
        assert!(OperationsCenter::from_provider(&other).unwrap().is_none());
        assert_eq!(
            OperationsCenter::from_provider(&provider(&[("server_token", "t")])).unwrap_err(),
            ProviderError::NoUrl
        );
        assert_eq!(
            OperationsCenter::from_provider(&provider(&[("server_url", "https://oc")])).unwrap_err(),
            ProviderError::NoToken
        );
        let bad = provider(&[
            ("server_url", "https://oc"),
            ("server_token", "t"),
            ("server_certificate", "x"),
        ]);
        assert_eq!(
            OperationsCenter::from_provider(&bad).unwrap_err(),
            ProviderError::BadCertificate
        );
    }

    #[test]
    fn the_registration_url_keeps_a_path_prefix_and_carries_the_token() {
        let oc = OperationsCenter::from_provider(&provider(&[
            ("server_url", "https://oc:7443/base/"),
            ("server_token", "a b"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            oc.registration_url().as_str(),
            "https://oc:7443/base/1.0/provisioning/servers?token=a+b"
        );
    }

    #[test]
    fn the_server_post_is_marshalled_as_go_marshals_it_every_key_in_field_order() {
        let post = ServerPost {
            put: ServerPut::default(),
            name: "web-1".to_owned(),
            connection_url: "https://[2001:db8::1]:8443".to_owned(),
            system_uuid: "5a1d0000-0000-4000-8000-000000000000".to_owned(),
            machine_id: "0123456789abcdef0123456789abcdef".to_owned(),
        };
        // Written from oc v0.8.1 shared/api/provisioning_server.go: ServerPut's fields (embedded, so first), then
        // ServerPost's; BMCConfig zero-valued; a nil ConfigMap is null.
        let fixture = concat!(
            r#"{"public_connection_url":"","channel":"","description":"","properties":null,"#,
            r#""bmc_config":{"api_type":"","endpoint":"","certificate":"","auto_pin_certificate":false,"#,
            r#""username":"","password":""},"name":"web-1","connection_url":"https://[2001:db8::1]:8443","#,
            r#""system_uuid":"5a1d0000-0000-4000-8000-000000000000","#,
            r#""machine_id":"0123456789abcdef0123456789abcdef"}"#
        );
        assert_eq!(serde_json::to_string(&post).unwrap(), fixture);
        let update = ServerSelfUpdate {
            connection_url: "https://127.0.0.1:1".to_owned(),
            cause: "system-is-ready".to_owned(),
        };
        assert_eq!(
            serde_json::to_string(&update).unwrap(),
            r#"{"connection_url":"https://127.0.0.1:1","cause":"system-is-ready"}"#
        );
    }

    #[test]
    fn only_a_sync_200_envelope_is_an_answer() {
        let ok = br#"{"type":"sync","status":"Success","status_code":200,"metadata":{"certificate":"PEM"}}"#;
        assert_eq!(check_envelope(ok).unwrap().metadata["certificate"], "PEM");
        assert!(matches!(
            check_envelope(br#"{"type":"async","status_code":100}"#),
            Err(RegisterError::BadResponse { .. })
        ));
        assert!(matches!(
            check_envelope(br#"{"type":"sync","status_code":201}"#),
            Err(RegisterError::BadResponse { .. })
        ));
        assert!(matches!(
            check_envelope(br#"{"type":"error","error":"no","error_code":403}"#),
            Err(RegisterError::Refused(m)) if m == "no"
        ));
        assert!(matches!(
            check_envelope(br#"{"name":"x","registered":true}"#),
            Err(RegisterError::BadResponse { .. })
        ));
        assert!(matches!(
            check_envelope(b"ok"),
            Err(RegisterError::NotAnEnvelope(_))
        ));
    }
}
