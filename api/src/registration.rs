//! `POST /1.0/provisioning/servers?token=UUID`: the installed OS announces itself. Authenticated by the
//! provisioning token alone (the OS has no API token), which is why it is exempt from bearer auth.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::AppState;
use crate::error::{ActionBody, ApiError, ErrorBody, Params};
use crate::validate;
use crate::views::Registered;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RegisterQuery {
    /// The provisioning token the server was deployed with.
    #[param(value_type = Option<Uuid>)]
    token: Option<String>,
}

/// What the installed OS sends: its name, and whatever else it reports (kept as the registration record).
#[derive(Deserialize, ToSchema)]
pub struct Registration {
    #[schema(pattern = r"^[a-z0-9][a-z0-9._-]{0,62}$", example = "rack1-node07")]
    name: String,
    /// The token, when not in the query.
    #[schema(value_type = Option<Uuid>)]
    token: Option<String>,
    #[serde(flatten)]
    #[schema(value_type = Object)]
    details: Map<String, Value>,
}

/// Registration callback of the installed OS.
#[utoipa::path(post, path = "/1.0/provisioning/servers", tag = "provisioning",
    params(RegisterQuery),
    request_body = Registration,
    responses(
        (status = 200, description = "Registered", body = Registered),
        (status = 400, description = "The body or a field is malformed", body = ErrorBody),
        (status = 403, description = "Unknown, spent or expired provisioning token", body = ErrorBody),
        (status = 422, description = "A text holds a character the database cannot store", body = ErrorBody)))]
pub async fn register(
    State(state): State<AppState>,
    Params(q): Params<RegisterQuery>,
    ActionBody(r): ActionBody<Registration>,
) -> Result<Json<Registered>, ApiError> {
    validate::name("name", &r.name)?;
    let invalid_token = || {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "invalid_token",
            "unknown, spent or expired provisioning token",
        )
        .field("token")
    };
    let token_text = q.token.or(r.token).ok_or_else(invalid_token)?;
    let token: Uuid = token_text.parse().map_err(|_| invalid_token())?;
    // The registration record is shown to viewers; the provisioning token is a credential, so it is not kept.
    let mut details = r.details;
    details.insert("name".to_owned(), Value::String(r.name.clone()));
    match state
        .store
        .register_server(&state.queue, token, &r.name, &Value::Object(details))
        .await?
    {
        Some(server) => {
            tracing::info!(server = %server, "server registered");
            Ok(Json(Registered {
                name: server,
                registered: true,
            }))
        }
        None => Err(invalid_token()),
    }
}
