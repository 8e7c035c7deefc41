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
            )
            .field("Authorization"))
        }
    }

    pub fn name(&self) -> &str {
        &self.0.name
    }
}

fn unauthenticated(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", message).field("Authorization")
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

/// A caller with at least the role the type names, checked while the request's head is read: declared before
/// the body in a handler's arguments, an under-privileged caller gets 403 whatever its body holds.
macro_rules! role_extractor {
    ($(#[$doc:meta])* $name:ident, $role:expr) => {
        $(#[$doc])*
        pub struct $name(pub Caller);

        impl FromRequestParts<AppState> for $name {
            type Rejection = ApiError;

            async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
                let caller = Caller::from_request_parts(parts, state).await?;
                caller.require($role)?;
                Ok($name(caller))
            }
        }
    };
}

role_extractor!(
    /// Any valid API token: reads.
    Viewer,
    Role::Viewer
);
role_extractor!(
    /// Operator or admin: actions on servers and dead letters.
    Operator,
    Role::Operator
);
role_extractor!(
    /// Admin: catalog changes.
    Admin,
    Role::Admin
);
