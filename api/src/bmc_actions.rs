//! `POST …/servers/{name}:power` and `…:media`: ad-hoc BMC actions, enqueued as fenced jobs on the server's
//! resource key (never run beside a deployment step), idempotent under an `Idempotency-Key` header: the key is
//! remembered per server for the queue's idempotency retention (24 h by default), after its job has finished
//! too, and concurrent copies of one request make one job.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use racklift_store::{BmcAction, BmcActionPayload, StoreError};
use serde::Deserialize;
use utoipa::{IntoResponses, ToSchema};

use crate::AppState;
use crate::auth::{Caller, Operator};
use crate::error::{ActionBody, ApiError, ErrorBody};
use crate::openapi::OperatorErrors;
use crate::views::BmcActionAccepted;

/// What to do with the server's power.
#[derive(Deserialize, ToSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum PowerVerb {
    On,
    Off,
    Cycle,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PowerRequest {
    action: PowerVerb,
}

/// What to do with the virtual media.
#[derive(Deserialize, ToSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum MediaVerb {
    Insert,
    Eject,
}

/// Insert an image (`image_url` required), or eject (`image_url` refused).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MediaRequest {
    action: MediaVerb,
    /// The image to insert; only with `insert` (422 otherwise).
    image_url: Option<String>,
}

/// `validate::http_url`'s rule as a pattern.
const IMAGE_URL_PATTERN: &str = r"^[Hh][Tt][Tt][Pp][Ss]?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?(/[A-Za-z0-9._~!$&()*+,;=:@%/-]*)?$";

/// The two shapes of [`MediaRequest`] as `oneOf`, so the document says what the handler takes: `insert` with an
/// `image_url`, `eject` without one (absent or `null`).
impl utoipa::PartialSchema for MediaRequest {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, OneOfBuilder, Type};
        let action = |verb: &str| {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some([verb]))
        };
        let shape = |verb: &str, image_url: ObjectBuilder| {
            let required = if verb == "insert" {
                vec!["action", "image_url"]
            } else {
                vec!["action"]
            };
            required
                .into_iter()
                .fold(ObjectBuilder::new(), |o, r| o.required(r))
                .schema_type(Type::Object)
                .property("action", action(verb))
                .property("image_url", image_url)
                .additional_properties(Some(
                    AdditionalProperties::<utoipa::openapi::schema::Schema>::FreeForm(false),
                ))
        };
        let insert = shape(
            "insert",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(IMAGE_URL_PATTERN))
                .description(Some("The image to insert."))
                .examples(["https://racklift.example.net/media/x/incusos.img"]),
        );
        let eject = shape("eject", ObjectBuilder::new().schema_type(Type::Null));
        OneOfBuilder::new()
            .item(insert)
            .item(eject)
            .description(Some(
                "Insert an image (`image_url` required), or eject (no `image_url`).",
            ))
            .into()
    }
}

impl ToSchema for MediaRequest {}

pub fn power_action(req: PowerRequest) -> BmcAction {
    match req.action {
        PowerVerb::On => BmcAction::PowerOn,
        PowerVerb::Off => BmcAction::PowerOff,
        PowerVerb::Cycle => BmcAction::PowerCycle,
    }
}

pub fn media_action(req: MediaRequest) -> Result<BmcAction, ApiError> {
    match (req.action, req.image_url) {
        (MediaVerb::Insert, Some(image_url)) => {
            crate::validate::http_url("image_url", &image_url)?;
            Ok(BmcAction::InsertMedia { image_url })
        }
        (MediaVerb::Insert, None) => Err(ApiError::unprocessable(
            "image_url_required",
            "image_url",
            "insert needs an http(s) image_url",
        )),
        (MediaVerb::Eject, None) => Ok(BmcAction::EjectMedia),
        (MediaVerb::Eject, Some(_)) => Err(ApiError::unprocessable(
            "image_url_unexpected",
            "image_url",
            "eject takes no image_url",
        )),
    }
}

/// What `:power` and `:media` answer besides the operator-level errors (their 422 said more precisely).
/// Listed after those, and its body type registered in [`crate::openapi::ApiDoc`]: responses derived this way
/// replace the shared ones and do not register the schemas they name.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum BmcActionAnswers {
    /// Enqueued.
    #[response(status = 202)]
    Enqueued(BmcActionAccepted),
    /// The job this Idempotency-Key already made.
    #[response(status = 200)]
    Replayed(BmcActionAccepted),
    /// No such server.
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// A deployment step or another BMC action is running.
    #[response(status = 409)]
    Busy(ErrorBody),
    /// The server has no BMC configured, the key was used for another request, or a text holds a character the
    /// database cannot store; `code` says which, `field` names it.
    #[response(status = 422)]
    Unprocessable(ErrorBody),
}

/// Enqueue a power action as a fenced job on the server's resource key.
#[utoipa::path(post, path = "/1.0/provisioning/servers/{name}/_action/power", tag = "provisioning",
    security(("bearer" = ["operator"])),
    params(("name" = String, Path, example = "s1", description = "Server name"),
        ("Idempotency-Key" = Option<String>, Header, pattern = "^[!-~]{1,255}$",
            description = "1 to 255 visible ASCII characters")),
    request_body = PowerRequest,
    responses(OperatorErrors, BmcActionAnswers))]
pub async fn power(
    State(state): State<AppState>,
    Operator(caller): Operator,
    Path(name): Path<String>,
    headers: HeaderMap,
    ActionBody(req): ActionBody<PowerRequest>,
) -> Result<Response, ApiError> {
    enqueue(&state, &caller, &name, &headers, power_action(req)).await
}

/// Enqueue a virtual media action (insert with image_url, or eject) as a fenced job.
#[utoipa::path(post, path = "/1.0/provisioning/servers/{name}/_action/media", tag = "provisioning",
    security(("bearer" = ["operator"])),
    params(("name" = String, Path, example = "s1", description = "Server name"),
        ("Idempotency-Key" = Option<String>, Header, pattern = "^[!-~]{1,255}$",
            description = "1 to 255 visible ASCII characters")),
    request_body = MediaRequest,
    responses(OperatorErrors, BmcActionAnswers))]
pub async fn media(
    State(state): State<AppState>,
    Operator(caller): Operator,
    Path(name): Path<String>,
    headers: HeaderMap,
    ActionBody(req): ActionBody<MediaRequest>,
) -> Result<Response, ApiError> {
    let action = media_action(req)?;
    enqueue(&state, &caller, &name, &headers, action).await
}

/// Enqueues the action for `name`: 202 with the job id, 200 with the same job id for a retried request with the
/// same key, 422 `idempotency_key_reused` (field `Idempotency-Key`) when the key was used for another request.
pub async fn enqueue(
    state: &AppState,
    caller: &Caller,
    name: &str,
    headers: &HeaderMap,
    action: BmcAction,
) -> Result<Response, ApiError> {
    let key = crate::deploy::idempotency_key(headers)?;
    let server = state.store.server(name).await.map_err(|e| match e {
        StoreError::NotFound { .. } => {
            ApiError::new(StatusCode::NOT_FOUND, "server_not_found", e.to_string()).field("name")
        }
        other => other.into(),
    })?;
    if !server.bmc_configured() {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "bmc_not_configured",
            format!("server {name} has no BMC address, username and password reference"),
        )
        .field("name"));
    }
    let payload = BmcActionPayload {
        server: name.to_owned(),
        action,
        requested_by: caller.name().to_owned(),
    };
    match state
        .store
        .enqueue_bmc_action(&state.queue, &payload, key.as_deref())
        .await
    {
        Ok((job_id, created)) => {
            tracing::info!(
                server = name,
                job_id,
                created,
                action = payload.action.name(),
                by = caller.name(),
                "BMC action requested"
            );
            let status = if created {
                StatusCode::ACCEPTED
            } else {
                StatusCode::OK
            };
            Ok((
                status,
                Json(BmcActionAccepted {
                    job_id,
                    server: name.to_owned(),
                    action: payload.action,
                }),
            )
                .into_response())
        }
        Err(StoreError::Conflict { .. }) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "server_busy",
            format!(
                "server {name} has a deployment step or another BMC action running; try again when it ends"
            ),
        )
        .field("name")),
        // The same key for a different request is the client's mistake; answering with the other request's job
        // would report an action that was never asked for (status 422 as in the IETF Idempotency-Key draft).
        Err(StoreError::IdempotencyKeyReused { existing_job, .. }) => Err(ApiError::unprocessable(
            "idempotency_key_reused",
            "Idempotency-Key",
            format!(
                "this Idempotency-Key was used for another request to server {name} (job {existing_job}); use a \
                 new key for a new request"
            ),
        )),
        Err(e) => Err(e.into()),
    }
}
