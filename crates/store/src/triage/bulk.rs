//! Bulk retry of a filtered group of open dead letters: each item is retried in its own transaction (one busy
//! server does not hold back or roll back the rest), all under one `bulk_retry` action carrying the reason, the
//! filter and the counts.

use racklift_queue::Queue;
use serde::Serialize;
use serde_json::json;

use super::actions::{TriageError, record_action};
use super::{Cursor, DeadLetterFilter, TriageStatus};
use crate::catalog::ApiToken;
use crate::{Store, StoreError};

/// One item a bulk retry left alone, and why.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Skipped {
    pub id: i64,
    #[schema(value_type = String)]
    pub code: &'static str,
    pub message: String,
}

/// The result of a bulk retry.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BulkRetry {
    pub bulk_id: i64,
    pub matched: u64,
    pub retried: u64,
    pub skipped: u64,
    /// The first 100 skipped items.
    pub skipped_items: Vec<Skipped>,
    /// More open dead letters match than `limit` allowed in this call.
    pub more: bool,
}

impl Store {
    /// Retries up to `limit` open dead letters matching `filter`, each in its own transaction (one busy server
    /// does not hold back the rest), all recorded under one `bulk_retry` action with the reason.
    pub async fn bulk_retry(
        &self,
        queue: &Queue,
        filter: &DeadLetterFilter,
        actor: &ApiToken,
        reason: &str,
        limit: u64,
    ) -> Result<BulkRetry, TriageError> {
        let filter = DeadLetterFilter {
            status: TriageStatus::Open,
            ..filter.clone()
        };
        let mut tx = self.pool.begin().await?;
        let detail = json!({ "filter": filter, "limit": limit });
        let bulk_id = record_action(&mut tx, None, "bulk_retry", actor, reason, &detail, None).await?;
        tx.commit().await?;
        let mut out = BulkRetry {
            bulk_id,
            matched: 0,
            retried: 0,
            skipped: 0,
            skipped_items: Vec::new(),
            more: false,
        };
        let mut after: Option<Cursor> = None;
        'pages: loop {
            let page = self.dead_letters(&filter, after, 100).await?;
            for item in &page.items {
                if out.matched == limit {
                    out.more = true;
                    break 'pages;
                }
                out.matched += 1;
                match self
                    .retry_in_bulk(queue, item.id, actor, reason, None, Some(bulk_id))
                    .await
                {
                    Ok(_) => out.retried += 1,
                    // The database failing is not an item to skip: stop and say so.
                    Err(TriageError::Store(
                        e @ (StoreError::Db(_) | StoreError::Corrupt { .. } | StoreError::Queue(_)),
                    )) => return Err(e.into()),
                    Err(e) => {
                        out.skipped += 1;
                        if out.skipped_items.len() < 100 {
                            out.skipped_items.push(Skipped {
                                id: item.id,
                                code: e.code(),
                                message: e.to_string(),
                            });
                        }
                    }
                }
            }
            // Retried items leave the open set, skipped ones stay: the cursor moves past both.
            match page.items.last() {
                Some(last) if page.next_cursor.is_some() => {
                    after = Some(Cursor {
                        dead_at: last.dead_at,
                        id: last.id,
                    })
                }
                _ => break,
            }
        }
        let counts = json!({ "filter": filter, "limit": limit, "matched": out.matched, "retried": out.retried,
                             "skipped": out.skipped, "more": out.more });
        sqlx::query("UPDATE triage_actions SET detail = $2 WHERE id = $1")
            .bind(bulk_id)
            .bind(counts)
            .execute(&self.pool)
            .await?;
        Ok(out)
    }
}
