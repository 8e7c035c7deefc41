//! `POST /1.0/provisioning/servers?token=…`: the installed IncusOS registers, as its `operations-center`
//! provider does (`incus-osd/internal/providers/provider_operations_center.go` `Register`): the body is Operations
//! Center's whole `ServerPost` (the embedded `ServerPut` flattened), the token is the one its seed's provider.yaml
//! carried, the TLS client certificate is its Incus' `server.crt`, and only an Incus response envelope counts as
//! an answer. No bearer auth: the per-deployment token is the credential, and it completes that deployment and no
//! other, once.
//!
//! This endpoint is a protocol with a client racklift does not control, so it is lenient where Go's
//! `encoding/json` is (unknown keys, missing keys, no `Content-Type`) and strict where racklift acts on what it is
//! told (the name, the address it will call, the certificate). Every answer is an Incus envelope, the refusals
//! of a malformed body included.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use racklift_listener::PeerCertificate;
use racklift_store::{RegistrationRefused, RegistrationRequest};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ActionBody, ApiError, Params};
use crate::incus_envelope::{IncusError, IncusErrorBody, IncusResponse};

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RegisterQuery {
    /// The registration token from the server's seed (provider.yaml's `server_token`).
    #[param(pattern = "^[0-9a-f]{64}$")]
    token: Option<String>,
}

/// What IncusOS sends: Operations Center's `ServerPost` with its `ServerPut` flattened, every key always present
/// (no `omitempty`). racklift keeps `name`, `connection_url`, `system_uuid` and `machine_id`; the `ServerPut` keys
/// are what an Operations Center operator edits, which IncusOS sends empty. Unknown keys are ignored, as a newer
/// IncusOS may add some.
#[derive(Deserialize, ToSchema)]
#[expect(
    dead_code,
    reason = "the ServerPut keys are part of the wire format, read to be documented and accepted, never acted on"
)]
pub struct Registration {
    /// `ServerPut`: empty from IncusOS.
    #[serde(default)]
    #[schema(example = "")]
    pub public_connection_url: Option<String>,
    /// `ServerPut`: empty from IncusOS; the channel is the deployment's, never the server's say.
    #[serde(default)]
    #[schema(example = "")]
    pub channel: Option<String>,
    /// `ServerPut`: empty from IncusOS.
    #[serde(default)]
    #[schema(example = "")]
    pub description: Option<String>,
    /// `ServerPut`: `null` from IncusOS (a nil `ConfigMap`).
    #[serde(default)]
    pub properties: Option<BTreeMap<String, String>>,
    /// `ServerPut`: all empty from IncusOS; racklift reaches BMCs through its own server records.
    #[serde(default)]
    pub bmc_config: Option<BmcConfig>,
    /// The server's hostname: its seeded network hostname, else its SMBIOS product UUID, else its machine-id.
    #[schema(
        min_length = 1,
        max_length = 253,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$",
        example = "4c4c4544-0042-3510-8052-b4c04f4e4d32"
    )]
    pub name: String,
    /// Where its Incus API answers: `https://<host>:<port>`, an IPv6 host bracketed.
    #[schema(example = "https://[fd00:3::17]:8443", min_length = 1, max_length = 2048)]
    pub connection_url: String,
    /// The SMBIOS product UUID IncusOS read, or empty.
    #[serde(default)]
    #[schema(
        example = "4c4c4544-0042-3510-8052-b4c04f4e4d32",
        max_length = 253,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$"
    )]
    pub system_uuid: Option<String>,
    /// `/etc/machine-id`, or empty.
    #[serde(default)]
    #[schema(
        example = "b4c04f4e4d32445a8c1f0e9d7c6b5a49",
        max_length = 253,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$"
    )]
    pub machine_id: Option<String>,
}

/// Operations Center's `BMCConfig`, as IncusOS sends it (every value empty). Accepted and ignored.
#[derive(Deserialize, ToSchema)]
#[expect(dead_code, reason = "part of the wire format, accepted and never acted on")]
pub struct BmcConfig {
    #[serde(default)]
    pub api_type: Option<String>,
    #[serde(default)]
    pub endpoint: Option<String>,
    #[serde(default)]
    pub certificate: Option<String>,
    #[serde(default)]
    pub auto_pin_certificate: Option<bool>,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
}

/// What a registered server is handed (`ServerRegistrationResponse`): racklift's client certificate, which Incus
/// adds to its trusted certificates so that racklift can then call the server's Incus API with it (mutual TLS).
#[derive(Debug, Serialize, ToSchema)]
pub struct RegisteredMetadata {
    /// PEM of racklift's client certificate.
    pub certificate: String,
}

/// Registration callback of the installed IncusOS.
#[utoipa::path(post, path = "/1.0/provisioning/servers", tag = "provisioning",
    params(RegisterQuery),
    request_body(content = Registration, description = "Operations Center's `ServerPost`; any or no Content-Type"),
    responses(
        (status = 200, description = "Registered: racklift's client certificate in the envelope",
            body = IncusResponse<RegisteredMetadata>),
        (status = 400, description = "A malformed body or field (`connection_url`: `bad_connection_url`), or no TLS \
            client certificate (`client_certificate_required`); `metadata` holds the code and the field",
            body = IncusErrorBody),
        (status = 403, description = "Unknown or replayed token, a finished deployment, a hostname the seed did \
            not name, or a spent provisioning token; `metadata` holds the code and the field", body = IncusErrorBody),
        (status = 409, description = "The deployment's installer has not finished (`install_not_finished`); \
            IncusOS retries on its restart loop", body = IncusErrorBody),
        (status = 422, description = "The path or query holds a NUL character (`%00`), in the operator API's \
            shape; or a body value the database could not keep (`number_too_large`), in the envelope",
            body = crate::incus_envelope::EnvelopeUnprocessable)))]
pub async fn register(
    State(state): State<AppState>,
    peer: Option<Extension<PeerCertificate>>,
    query: Result<Params<RegisterQuery>, ApiError>,
    body: Result<ActionBody<Registration>, ApiError>,
) -> Result<IncusResponse<RegisteredMetadata>, IncusError> {
    let Params(q) = query?;
    let ActionBody(r) = body?;
    check_registration(&r)?;
    let Some(token) = q.token.filter(|t| !t.is_empty()) else {
        return Err(refused(&RegistrationRefused::UnknownToken));
    };
    // Read first: a registration that completes must be able to hand the certificate over.
    let identity = state.store.client_identity().await?;
    let request = RegistrationRequest {
        name: &r.name,
        connection_url: &r.connection_url,
        system_uuid: r.system_uuid.as_deref(),
        machine_id: r.machine_id.as_deref(),
        client_certificate_sha256: peer.as_ref().map(|p| p.sha256.as_str()),
        client_certificate_der: peer.as_ref().map(|p| p.der.as_slice()),
    };
    match state
        .store
        .register_deployment(&state.queue, &token, &request)
        .await?
    {
        Ok(done) => {
            tracing::info!(server = %done.server, deployment_id = done.deployment_id,
                connection_url = %r.connection_url, client_certificate = ?request.client_certificate_sha256,
                system_uuid = ?request.system_uuid, machine_id = ?request.machine_id, "server registered");
            Ok(IncusResponse::sync(RegisteredMetadata {
                certificate: identity.certificate_pem,
            }))
        }
        Err(why) => {
            tracing::warn!(server = why.server(), code = why.code(), reason = %why, name = %r.name,
                "registration refused");
            Err(refused(&why))
        }
    }
}

/// The checks on what racklift will store and act on; each refusal names the field.
fn check_registration(r: &Registration) -> Result<(), IncusError> {
    let invalid = |field: &str, message: &str| {
        IncusError::new(StatusCode::BAD_REQUEST, format!("{field}: {message}"))
            .with_detail("invalid_field", field)
    };
    // Lengths in characters, as the document's `maxLength` counts them.
    if r.name.is_empty() || r.name.chars().count() > 253 {
        return Err(invalid("name", "must be 1 to 253 characters"));
    }
    for (field, value) in [
        ("name", Some(&r.name)),
        ("system_uuid", r.system_uuid.as_ref()),
        ("machine_id", r.machine_id.as_ref()),
    ] {
        let Some(value) = value else { continue };
        if value.chars().count() > 253 || value.chars().any(char::is_control) {
            return Err(invalid(
                field,
                "must be at most 253 characters, none of them a control character",
            ));
        }
    }
    check_connection_url(&r.connection_url).map_err(bad_connection_url)
}

/// The envelope refusing a `connection_url` racklift would not call.
pub(crate) fn bad_connection_url(why: &'static str) -> IncusError {
    IncusError::new(StatusCode::BAD_REQUEST, format!("connection_url: {why}"))
        .with_detail("bad_connection_url", "connection_url")
}

/// Whether racklift may call `url` as a server's Incus API: `https://HOST:PORT` as IncusOS builds it
/// (`connectionURL`, Go's `net.JoinHostPort`), HOST an IPv4 literal, a bracketed IPv6 literal or a DNS name, PORT
/// explicit, and nothing else (no user, path, query or fragment, since racklift appends its own paths).
pub(crate) fn check_connection_url(url: &str) -> Result<(), &'static str> {
    if url.len() > 2048 {
        return Err("must be at most 2048 characters");
    }
    let scheme_end = url.find("://").ok_or("must be an https:// URL")?;
    if !url[..scheme_end].eq_ignore_ascii_case("https") {
        return Err("must use the https scheme");
    }
    let authority = &url[scheme_end + 3..];
    if authority.contains(['/', '?', '#', '@'])
        || authority.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err("must be https://HOST:PORT, with no user, path, query or fragment");
    }
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (v6, rest) = bracketed
            .split_once(']')
            .ok_or("an IPv6 host must be closed by ']'")?;
        v6.parse::<Ipv6Addr>()
            .map_err(|_| "the bracketed host is not an IPv6 address")?;
        let port = rest.strip_prefix(':').ok_or("must name the port")?;
        (None, port)
    } else {
        let (host, port) = authority.rsplit_once(':').ok_or("must name the port")?;
        (Some(host), port)
    };
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) || !matches!(port.parse::<u16>(), Ok(1..))
    {
        return Err("the port must be a number from 1 to 65535");
    }
    match host {
        None => Ok(()),
        Some(host) if host.parse::<Ipv4Addr>().is_ok() => Ok(()),
        Some(host) if is_dns_name(host) => Ok(()),
        Some(host) if host.contains(':') => Err("an IPv6 host must be bracketed"),
        Some(_) => Err("the host is neither an IP address nor a DNS name"),
    }
}

/// A DNS name of letters, digits and hyphens in labels of 1 to 63 characters (not starting or ending with a
/// hyphen), at most 253 characters, not all digits and dots (that would be a malformed IPv4 address).
fn is_dns_name(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    !host.is_empty()
        && host.len() <= 253
        && !host.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

fn refused(why: &RegistrationRefused) -> IncusError {
    let status = match why {
        // Operations Center answers a registration without a client certificate 400.
        RegistrationRefused::NoClientCertificate { .. } => StatusCode::BAD_REQUEST,
        RegistrationRefused::InstallNotFinished { .. } => StatusCode::CONFLICT,
        _ => StatusCode::FORBIDDEN,
    };
    IncusError::new(status, why.to_string()).with_detail(why.code(), why.field())
}

#[cfg(test)]
mod tests {
    use super::check_connection_url;

    #[test]
    fn only_https_host_port_urls_are_called() {
        let cases = [
            ("https://10.0.3.17:8443", true),
            ("HTTPS://10.0.3.17:8443", true),
            ("https://[fd00:3::17]:8443", true),
            ("https://[fe80::1%25eth0]:8443", false),
            ("https://node1.rack1.example:8443", true),
            ("https://node1:1", true),
            ("https://10.0.3.17", false),
            ("https://10.0.3.17:", false),
            ("https://10.0.3.17:0", false),
            ("https://10.0.3.17:65536", false),
            ("https://10.0.3.17:+443", false),
            ("https://fd00:3::17:8443", false),
            ("https://[fd00:3::17]", false),
            ("https://[fd00:3::17:8443", false),
            ("https://[not-v6]:8443", false),
            ("http://10.0.3.17:8443", false),
            ("10.0.3.17:8443", false),
            ("https://10.0.3.17:8443/", false),
            ("https://10.0.3.17:8443/1.0", false),
            ("https://10.0.3.17:8443?x=1", false),
            ("https://user@10.0.3.17:8443", false),
            ("https://:8443", false),
            ("https://999.1.1.1:8443", false),
            ("https://-bad.example:8443", false),
            ("https://bad_host:8443", false),
            ("https://10.0.3.17 :8443", false),
            ("", false),
        ];
        for (url, ok) in cases {
            assert_eq!(
                check_connection_url(url).is_ok(),
                ok,
                "{url}: {:?}",
                check_connection_url(url)
            );
        }
    }
}
