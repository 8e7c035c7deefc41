//! `PUT /1.0/provisioning/servers/:self`: a registered IncusOS tells its manager that something about it changed
//! (Operations Center's `serverSelfUpdate`; IncusOS's provider `UpdateRegistration`). The body is
//! `ServerSelfUpdate {connection_url, cause}`, both always sent; the caller is the server that registered with the
//! TLS client certificate it presents, and no other credential counts.
//!
//! IncusOS sends it fire-and-forget (five tries, 30 s apart, the answer never read beyond success), so racklift
//! records every call, stores the address when the cause carries one, tolerates causes and keys it does not know,
//! and answers the sync envelope; nothing a client sends earns a 5xx.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use racklift_listener::PeerCertificate;
use racklift_store::SelfUpdate;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::AppState;
use crate::error::{ActionBody, ApiError};
use crate::incus_envelope::{IncusError, IncusErrorBody, IncusResponse};
use crate::registration::{bad_connection_url, check_connection_url};

/// Operations Center's `ServerSelfUpdate`. Unknown keys are ignored.
#[derive(Deserialize, ToSchema)]
pub struct ServerSelfUpdate {
    /// The server's current Incus address, as at registration.
    #[serde(default)]
    #[schema(example = "https://10.0.3.17:8443")]
    pub connection_url: String,
    /// Why it calls: `system-is-ready`, `network-config-changed`, `os-update-applied`, `system-reboot-triggered`,
    /// `system-shutdown-triggered`, `application-update-applied`, `storage-config-changed`, or empty (its provider
    /// configuration changed); any other is recorded and otherwise ignored.
    #[serde(default)]
    #[schema(example = "system-is-ready")]
    pub cause: String,
}

/// The empty `metadata` of the answer (`{}`, as Incus' empty sync response).
#[derive(Debug, Serialize, ToSchema)]
pub struct Recorded {}

/// Whether a cause says the server's address may have changed and is to be stored: Operations Center re-reads
/// the address on an empty cause and `network-config-changed` (`server_service.go` `SelfUpdate`), and racklift
/// also on `system-is-ready` and `network-interface-state-changed`, which are sent with the address the server
/// came up with. A server about to go down, or one reporting an update, keeps the stored address; a cause
/// racklift does not know changes nothing.
pub fn cause_updates_address(cause: &str) -> bool {
    matches!(
        cause,
        "" | "network-config-changed" | "network-interface-state-changed" | "system-is-ready"
    )
}

/// A registered server reports a change about itself.
#[utoipa::path(put, path = "/1.0/provisioning/servers/_action/self", tag = "provisioning",
    security(("incus_client_certificate" = [])),
    request_body(content = ServerSelfUpdate, description = "Operations Center's `ServerSelfUpdate`; any or no \
        Content-Type"),
    responses(
        (status = 200, description = "Recorded (Incus envelope, empty metadata)", body = IncusResponse<Recorded>),
        (status = 400, description = "A malformed body, or a `connection_url` racklift would not call \
            (`bad_connection_url`) with a cause that carries the address (Incus envelope)", body = IncusErrorBody),
        (status = 403, description = "No client certificate, or one no registered server presented \
            (Incus envelope)", body = IncusErrorBody),
        (status = 422, description = "The path or query holds a NUL character (`%00`), in the operator API's \
            shape; or a body value the database could not keep (`number_too_large`), in the envelope",
            body = crate::incus_envelope::EnvelopeUnprocessable)))]
pub async fn self_update(
    State(state): State<AppState>,
    peer: Option<Extension<PeerCertificate>>,
    body: Result<ActionBody<ServerSelfUpdate>, ApiError>,
) -> Result<IncusResponse<Recorded>, IncusError> {
    let Some(Extension(peer)) = peer else {
        return Err(IncusError::new(
            StatusCode::FORBIDDEN,
            "not authorized: present the client certificate this server registered with",
        )
        .with_detail("client_certificate_required", "client_certificate"));
    };
    let ActionBody(body) = body?;
    if body.cause.len() > 253 || body.cause.chars().any(char::is_control) {
        return Err(IncusError::new(
            StatusCode::BAD_REQUEST,
            "cause: at most 253 characters, none of them a control character",
        )
        .with_detail("invalid_field", "cause"));
    }
    let apply_address = cause_updates_address(&body.cause);
    if apply_address {
        check_connection_url(&body.connection_url).map_err(bad_connection_url)?;
    } else if body.connection_url.len() > 2048 || body.connection_url.chars().any(char::is_control) {
        return Err(bad_connection_url(
            "must be at most 2048 characters, none of them a control character",
        ));
    }
    let update = SelfUpdate {
        cause: &body.cause,
        connection_url: &body.connection_url,
        apply_address,
    };
    match state.store.self_update(&peer.sha256, &update).await? {
        Some(server) => {
            tracing::info!(server = %server, cause = %body.cause, connection_url = %body.connection_url,
                address_stored = apply_address, "server self-update");
            Ok(IncusResponse::sync(Recorded {}))
        }
        None => {
            tracing::warn!(client_certificate = %peer.sha256, cause = %body.cause,
                "self-update from a certificate no server registered with");
            Err(IncusError::new(
                StatusCode::FORBIDDEN,
                "not authorized: no server registered with this client certificate",
            )
            .with_detail("unknown_client_certificate", "client_certificate"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::cause_updates_address;

    #[test]
    fn causes_that_carry_the_address_store_it() {
        let cases = [
            ("", true),
            ("network-config-changed", true),
            ("network-interface-state-changed", true),
            ("system-is-ready", true),
            ("os-update-applied", false),
            ("system-reboot-triggered", false),
            ("system-shutdown-triggered", false),
            ("suspend-triggered", false),
            ("application-update-applied", false),
            ("secure-boot-update-applied", false),
            ("storage-config-changed", false),
            ("a-cause-of-a-newer-incusos", false),
        ];
        for (cause, stored) in cases {
            assert_eq!(cause_updates_address(cause), stored, "{cause:?}");
        }
    }
}
