//! `POST /1.0/provisioning/servers?token=…`: the installed IncusOS registers, as its `operations-center`
//! provider does (`incus-osd/internal/providers/provider_operations_center.go`): the body is its hostname and
//! the address of its Incus API, the token is the one its seed's provider.yaml carried, and only an Incus
//! response envelope counts as an answer. No bearer auth: the per-deployment token is the credential, and it
//! completes that deployment and no other, once.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use racklift_listener::PeerCertificate;
use racklift_store::{RegistrationRefused, RegistrationRequest};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ActionBody, ApiError, ErrorBody, Params};
use crate::incus_envelope::{IncusError, IncusErrorBody, IncusResponse};

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RegisterQuery {
    /// The registration token from the server's seed (provider.yaml's `server_token`).
    #[param(pattern = "^[0-9a-f]{64}$")]
    token: Option<String>,
}

/// What IncusOS sends.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    /// The server's hostname (its network config's, else its product UUID).
    #[schema(
        min_length = 1,
        max_length = 253,
        example = "4c4c4544-0042-3510-8052-b4c04f4e4d32"
    )]
    name: String,
    /// Where its Incus API answers.
    #[schema(example = "https://10.0.3.17:8443", min_length = 1, max_length = 2048)]
    connection_url: String,
}

/// What a registered server is handed: racklift's client certificate, which Incus adds to its trusted
/// certificates so that racklift can then call the server's Incus API with it (mutual TLS).
#[derive(Debug, Serialize, ToSchema)]
pub struct RegisteredMetadata {
    /// PEM of racklift's client certificate.
    pub certificate: String,
}

/// Registration callback of the installed IncusOS.
#[utoipa::path(post, path = "/1.0/provisioning/servers", tag = "provisioning",
    params(RegisterQuery),
    request_body = Registration,
    responses(
        (status = 200, description = "Registered: racklift's client certificate in the envelope",
            body = IncusResponse<RegisteredMetadata>),
        (status = 400, description = "The body or a field is malformed", body = ErrorBody),
        (status = 403, description = "Unknown or replayed token, a finished deployment, a hostname the seed did \
            not name, or a spent provisioning token; `metadata` holds the code and the field", body = IncusErrorBody),
        (status = 422, description = "A text holds a character the database cannot store", body = ErrorBody)))]
pub async fn register(
    State(state): State<AppState>,
    peer: Option<Extension<PeerCertificate>>,
    Params(q): Params<RegisterQuery>,
    ActionBody(r): ActionBody<Registration>,
) -> Result<Result<IncusResponse<RegisteredMetadata>, IncusError>, ApiError> {
    if r.name.is_empty() || r.name.len() > 253 {
        return Err(ApiError::invalid("name", "must be 1 to 253 characters"));
    }
    if r.connection_url.is_empty() || r.connection_url.len() > 2048 {
        return Err(ApiError::invalid(
            "connection_url",
            "must be 1 to 2048 characters",
        ));
    }
    let Some(token) = q.token.filter(|t| !t.is_empty()) else {
        return Ok(Err(refused(&RegistrationRefused::UnknownToken)));
    };
    // Read first: a registration that completes must be able to hand the certificate over.
    let identity = state.store.client_identity().await?;
    let request = RegistrationRequest {
        name: &r.name,
        connection_url: &r.connection_url,
        client_certificate_sha256: peer.as_ref().map(|p| p.sha256.as_str()),
    };
    match state
        .store
        .register_deployment(&state.queue, &token, &request)
        .await?
    {
        Ok(done) => {
            tracing::info!(server = %done.server, deployment_id = done.deployment_id,
                connection_url = %r.connection_url, client_certificate = ?request.client_certificate_sha256,
                "server registered");
            Ok(Ok(IncusResponse::sync(RegisteredMetadata {
                certificate: identity.certificate_pem,
            })))
        }
        Err(why) => {
            tracing::warn!(server = why.server(), code = why.code(), reason = %why, name = %r.name,
                "registration refused");
            Ok(Err(refused(&why)))
        }
    }
}

fn refused(why: &RegistrationRefused) -> IncusError {
    let field = if matches!(why, RegistrationRefused::WrongName { .. }) {
        "name"
    } else {
        "token"
    };
    IncusError::new(StatusCode::FORBIDDEN, why.to_string()).with_detail(why.code(), field)
}
