//! Bearer-token authentication and role checks. The token's digest is looked up per request: tokens can be
//! revoked in the database and take effect at once, with no cache to invalidate.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use racklift_store::{ApiToken, Role};

use crate::AppState;
use crate::error::ApiError;

/// The authenticated caller. Handlers call [`Caller::require`] with the role their action needs.
pub struct Caller(pub ApiToken);

impl Caller {
    /// 403 `forbidden` unless the caller's role is at least `role` (viewer < operator < admin).
    pub fn require(&self, role: Role) -> Result<&ApiToken, ApiError> {
        if self.0.role >= role {
            Ok(&self.0)
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "this needs the {} role; token {:?} has {}",
                    role.as_str(),
                    self.0.name,
                    self.0.role.as_str()
                ),
            ))
        }
    }

    pub fn name(&self) -> &str {
        &self.0.name
    }
}

fn unauthenticated(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", message)
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let value = parts
            .headers
            .get(header::AUTHORIZATION)
            .ok_or_else(|| unauthenticated("missing Authorization: Bearer <token>"))?;
        let secret = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| unauthenticated("Authorization must be Bearer <token>"))?;
        let token = state
            .store
            .api_token(secret)
            .await?
            .ok_or_else(|| unauthenticated("unknown API token"))?;
        Ok(Caller(token))
    }
}
