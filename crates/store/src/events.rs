//! The per-server event log: requests, transitions, BMC calls, registrations, cancels.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgExecutor;

use crate::{Store, StoreError};

#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Event {
    pub id: i64,
    pub server: String,
    pub deployment_id: Option<i64>,
    pub at: DateTime<Utc>,
    pub kind: String,
    pub fence: Option<i64>,
    #[schema(value_type = Object)]
    pub detail: Value,
}

pub(crate) async fn insert<'e>(
    db: impl PgExecutor<'e>,
    server: &str,
    deployment_id: Option<i64>,
    kind: &str,
    fence: Option<i64>,
    detail: &Value,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO server_events (server, deployment_id, kind, fence, detail) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(server)
    .bind(deployment_id)
    .bind(kind)
    .bind(fence)
    .bind(detail)
    .execute(db)
    .await?;
    Ok(())
}

impl Store {
    /// Events of a server after `after_id`, oldest first, at most `limit`.
    pub async fn events(&self, server: &str, after_id: i64, limit: i64) -> Result<Vec<Event>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT id, server, deployment_id, at, kind, fence, detail FROM server_events \
             WHERE server = $1 AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(server)
        .bind(after_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn add_event(
        &self,
        server: &str,
        deployment_id: Option<i64>,
        kind: &str,
        fence: Option<i64>,
        detail: &Value,
    ) -> Result<(), StoreError> {
        insert(&self.pool, server, deployment_id, kind, fence, detail).await
    }
}
