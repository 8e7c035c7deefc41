//! The dashboard's server-side sessions (`ui_sessions`, migration 0010). The browser holds a random id; the
//! table holds its digest, the API token it was made from and that token's role. Every lookup re-checks the
//! token, so revoking, expiring or re-keying it ends the session at the next request.

use std::time::Duration;

use crate::{ApiToken, Role, Store, StoreError, new_secret, sha256_hex};

/// A session just made: the id for the cookie (shown once, only its digest is stored) and who it is.
#[derive(Debug, Clone)]
pub struct NewUiSession {
    pub id: String,
    pub token: ApiToken,
}

impl Store {
    /// Makes a session from the API token whose secret is `token_secret`, lasting `ttl` or until the token
    /// expires, whichever is first; `None` when no live token has that secret. Sessions already expired are
    /// removed on the way, so the table holds only live ones and a few hours of stale ones.
    pub async fn create_ui_session(
        &self,
        token_secret: &str,
        ttl: Duration,
    ) -> Result<Option<NewUiSession>, StoreError> {
        sqlx::query("DELETE FROM ui_sessions WHERE expires_at <= now()")
            .execute(&self.pool)
            .await?;
        let id = new_secret();
        // The insert is conditional on the token: no row comes back when it is unknown or expired.
        let row: Option<(String, String)> = sqlx::query_as(
            "WITH t AS ( \
                 SELECT id, name, role, expires_at FROM api_tokens \
                 WHERE secret_sha256 = decode($2, 'hex') AND (expires_at IS NULL OR expires_at > now()) \
             ), made AS ( \
                 INSERT INTO ui_sessions (id_sha256, api_token_id, role, expires_at) \
                 SELECT decode($1, 'hex'), t.id, t.role, LEAST(now() + make_interval(secs => $3), t.expires_at) \
                 FROM t RETURNING api_token_id \
             ) \
             SELECT t.name, t.role FROM t JOIN made ON made.api_token_id = t.id",
        )
        .bind(sha256_hex(id.as_bytes()))
        .bind(sha256_hex(token_secret.as_bytes()))
        .bind(ttl.as_secs_f64())
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.and_then(|(name, role)| {
            Role::parse(&role).map(|role| NewUiSession {
                id,
                token: ApiToken { name, role },
            })
        }))
    }

    /// The token behind the live session `id`: `None` when the session is unknown, logged out or expired, or its
    /// token was revoked, has expired or changed role (all by the database's clock, one for every API instance).
    pub async fn ui_session(&self, id: &str) -> Result<Option<ApiToken>, StoreError> {
        let row: Option<(String, String)> = sqlx::query_as(
            "WITH s AS ( \
                 SELECT s.id_sha256, t.name, s.role, s.last_seen \
                 FROM ui_sessions s JOIN api_tokens t ON t.id = s.api_token_id \
                 WHERE s.id_sha256 = decode($1, 'hex') AND s.expires_at > now() AND t.role = s.role \
                   AND (t.expires_at IS NULL OR t.expires_at > now()) \
             ), seen AS ( \
                 UPDATE ui_sessions u SET last_seen = now() FROM s \
                 WHERE u.id_sha256 = s.id_sha256 AND s.last_seen < now() - interval '1 minute' \
             ) \
             SELECT name, role FROM s",
        )
        .bind(sha256_hex(id.as_bytes()))
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.and_then(|(name, role)| Role::parse(&role).map(|role| ApiToken { name, role })))
    }

    /// Logs the session `id` out; `false` when there was none (already logged out, expired and removed).
    pub async fn end_ui_session(&self, id: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM ui_sessions WHERE id_sha256 = decode($1, 'hex')")
            .bind(sha256_hex(id.as_bytes()))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }
}
