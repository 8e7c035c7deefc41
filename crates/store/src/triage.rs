//! The dead-letter triage reads: what is stuck, since when and why. Open dead letters filtered and grouped by the
//! keys operators ask about (operation, error class, Redfish MessageId, vendor, failed state, age), one dead
//! letter with its deployment, timeline and live job, and live deployments that stopped advancing.
//!
//! Every filter is pushed as its own condition (and the triage status as a literal), so each combination gets a
//! plan that can use the partial indexes of `migrations/0004_triage.sql`; a `($1 IS NULL OR col = $1)` pattern
//! would make a generic plan that cannot. [`Store::explain_dead_letters`] shows the plan of the real statement.
//!
//! The actions (retry, cancel, discard) are in [`actions`], bulk retry in [`bulk`]; live deployments that stopped advancing
//! in `stuck`.

pub mod actions;
pub mod bulk;
mod durations;
mod stuck;

pub use durations::{StateDuration, StateSpan};
pub use stuck::StuckDeployment;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{Postgres, QueryBuilder};

use crate::deployments::DeploymentRecord;
use crate::events::Event;
use crate::{Store, StoreError};

/// Where a dead letter is in its triage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TriageStatus {
    #[default]
    Open,
    Retried,
    Discarded,
    Resolved,
    Canceled,
}

impl TriageStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TriageStatus::Open => "open",
            TriageStatus::Retried => "retried",
            TriageStatus::Discarded => "discarded",
            TriageStatus::Resolved => "resolved",
            TriageStatus::Canceled => "canceled",
        }
    }

    pub fn parse(s: &str) -> Option<TriageStatus> {
        [
            TriageStatus::Open,
            TriageStatus::Retried,
            TriageStatus::Discarded,
            TriageStatus::Resolved,
            TriageStatus::Canceled,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
    }
}

/// Which dead letters a list, a group count or a bulk retry is about. Unset fields do not filter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeadLetterFilter {
    /// `deployment`, `bmc_action`, later `rolling_reboot` / `rolling_update`.
    pub operation: Option<String>,
    pub error_class: Option<String>,
    /// The Redfish MessageId of the last BMC error.
    pub message_id: Option<String>,
    /// The server's `vendor_hint`.
    pub vendor: Option<String>,
    /// The deployment state the work failed in.
    pub state: Option<String>,
    pub server: Option<String>,
    /// Dead for at least this long.
    pub min_age_secs: Option<i64>,
    pub status: TriageStatus,
}

/// A position in the list, (dead_at, id) of the last row seen; opaque to clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub dead_at: DateTime<Utc>,
    pub id: i64,
}

impl Cursor {
    /// `<microseconds since the epoch>.<id>`: PostgreSQL keeps microseconds, so the round trip is exact.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.dead_at.timestamp_micros(), self.id)
    }

    pub fn decode(s: &str) -> Option<Cursor> {
        let (micros, id) = s.split_once('.')?;
        Some(Cursor {
            dead_at: DateTime::from_timestamp_micros(micros.parse().ok()?)?,
            id: id.parse().ok()?,
        })
    }
}

/// One dead letter as listed.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct DeadLetterSummary {
    pub id: i64,
    pub job_id: i64,
    pub kind: String,
    pub operation: Option<String>,
    pub server: Option<String>,
    pub vendor: Option<String>,
    pub deployment_id: Option<i64>,
    /// The deployment state the work failed in.
    pub state: Option<String>,
    pub cause: Option<String>,
    pub error_class: Option<String>,
    pub message_id: Option<String>,
    pub bmc_status: Option<Value>,
    /// Why the queue gave up: `deployment_failed`, `exhausted`, `fatal`, `lease_expired`.
    pub reason: String,
    pub first_error: Option<String>,
    pub last_error: Option<String>,
    pub attempts: i32,
    pub max_attempts: i32,
    pub dead_at: DateTime<Utc>,
    pub age_secs: i64,
    pub triage_status: String,
    pub triaged_by: Option<String>,
    pub triaged_at: Option<DateTime<Utc>>,
    pub triage_note: Option<String>,
}

/// A dead letter with everything the queue kept: payload, error history, context.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct DeadLetter {
    #[sqlx(flatten)]
    #[serde(flatten)]
    pub summary: DeadLetterSummary,
    pub payload: Value,
    pub errors: Value,
    pub context: Value,
    pub resource_key: Option<String>,
    pub idempotency_key: Option<String>,
    pub fence: Option<i64>,
    pub priority: i16,
    pub job_created_at: DateTime<Utc>,
}

/// A page of the list; `next_cursor` is `None` on the last page.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DeadLetterPage {
    pub items: Vec<DeadLetterSummary>,
    pub next_cursor: Option<String>,
}

/// How many dead letters share one (operation, error class, MessageId, vendor, state).
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct DeadLetterGroup {
    pub operation: Option<String>,
    pub error_class: Option<String>,
    pub message_id: Option<String>,
    pub vendor: Option<String>,
    pub state: Option<String>,
    pub count: i64,
    pub oldest_dead_at: DateTime<Utc>,
    pub newest_dead_at: DateTime<Utc>,
}

/// The queued or running job holding a server's resource key, with its lease.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct LiveJob {
    pub id: i64,
    pub kind: String,
    pub state: String,
    pub run_at: DateTime<Utc>,
    pub attempts: i32,
    pub max_attempts: i32,
    pub fence: Option<i64>,
    pub leased_by: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// One recorded triage action.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct TriageAction {
    pub id: i64,
    pub dead_letter_id: Option<i64>,
    pub action: String,
    pub actor: String,
    pub actor_role: String,
    pub reason: String,
    pub detail: Value,
    pub bulk_id: Option<i64>,
    pub at: DateTime<Utc>,
}

/// A dead letter and what surrounds it.
#[derive(Debug, Clone)]
pub struct DeadLetterDetail {
    pub dead_letter: DeadLetter,
    pub deployment: Option<DeploymentRecord>,
    /// Events of the deployment (or, for other work, of the server up to the death), oldest first.
    pub timeline: Vec<Event>,
    pub live_job: Option<LiveJob>,
    pub actions: Vec<TriageAction>,
}

/// The columns of [`DeadLetterSummary`], from `dead_letters d LEFT JOIN servers s`.
const SUMMARY_COLUMNS: &str = "d.id, d.job_id, d.kind, d.operation, d.server, s.vendor_hint AS vendor, \
     CASE WHEN coalesce(d.context ->> 'deployment_id', d.payload ->> 'deployment_id') ~ '^[0-9]{1,18}$' \
          THEN coalesce(d.context ->> 'deployment_id', d.payload ->> 'deployment_id')::bigint END AS deployment_id, \
     d.failed_state AS state, d.context ->> 'cause' AS cause, d.error_class, d.message_id, \
     d.context -> 'last_error' -> 'bmc_status' AS bmc_status, d.reason, d.first_error, d.last_error, \
     d.attempts, d.max_attempts, d.dead_at, extract(epoch FROM now() - d.dead_at)::bigint AS age_secs, \
     d.triage_status, d.triaged_by, d.triaged_at, d.triage_note";

/// Appends the WHERE clause of `f` (columns of `dead_letters d`).
fn push_filter(qb: &mut QueryBuilder<Postgres>, f: &DeadLetterFilter) {
    // A literal from a closed enum, never input: the planner must see it to match the partial indexes.
    qb.push(format_args!(" WHERE d.triage_status = '{}'", f.status.as_str()));
    let eq = [
        ("d.operation", &f.operation),
        ("d.error_class", &f.error_class),
        ("d.message_id", &f.message_id),
        ("d.failed_state", &f.state),
        ("d.server", &f.server),
    ];
    for (column, value) in eq {
        if let Some(v) = value {
            qb.push(format_args!(" AND {column} = ")).push_bind(v.clone());
        }
    }
    if let Some(vendor) = &f.vendor {
        qb.push(" AND d.server IN (SELECT name FROM servers WHERE vendor_hint = ")
            .push_bind(vendor.clone())
            .push(")");
    }
    if let Some(age) = f.min_age_secs {
        qb.push(" AND d.dead_at <= now() - ")
            .push_bind(age as f64)
            .push(" * interval '1 second'");
    }
}

fn list_query(
    f: &DeadLetterFilter,
    after: Option<Cursor>,
    limit: i64,
    prefix: &str,
) -> QueryBuilder<Postgres> {
    let mut qb = QueryBuilder::new(format!(
        "{prefix}SELECT {SUMMARY_COLUMNS} FROM dead_letters d LEFT JOIN servers s ON s.name = d.server"
    ));
    push_filter(&mut qb, f);
    if let Some(c) = after {
        qb.push(" AND (d.dead_at, d.id) < (")
            .push_bind(c.dead_at)
            .push(", ")
            .push_bind(c.id)
            .push(")");
    }
    qb.push(" ORDER BY d.dead_at DESC, d.id DESC LIMIT ")
        .push_bind(limit);
    qb
}

/// Counted per server first (an index-only scan of `dead_letters_open_groups`, already in group order), then
/// per vendor: the servers join touches one row per group, not one per dead letter.
fn groups_query(f: &DeadLetterFilter, limit: i64, prefix: &str) -> QueryBuilder<Postgres> {
    let mut qb = QueryBuilder::new(format!(
        "{prefix}SELECT g.operation, g.error_class, g.message_id, s.vendor_hint AS vendor, g.failed_state AS state, \
         sum(g.n)::bigint AS count, min(g.oldest) AS oldest_dead_at, max(g.newest) AS newest_dead_at \
         FROM (SELECT d.operation, d.error_class, d.message_id, d.failed_state, d.server, count(*) AS n, \
                      min(d.dead_at) AS oldest, max(d.dead_at) AS newest FROM dead_letters d"
    ));
    push_filter(&mut qb, f);
    qb.push(
        " GROUP BY d.operation, d.error_class, d.message_id, d.failed_state, d.server) g \
         LEFT JOIN servers s ON s.name = g.server \
         GROUP BY g.operation, g.error_class, g.message_id, s.vendor_hint, g.failed_state \
         ORDER BY count DESC, newest_dead_at DESC LIMIT ",
    )
    .push_bind(limit);
    qb
}

async fn explain(mut qb: QueryBuilder<Postgres>, pool: &sqlx::PgPool) -> Result<String, StoreError> {
    let lines: Vec<String> = qb.build_query_scalar().fetch_all(pool).await?;
    Ok(lines.join("\n"))
}

impl Store {
    /// A page of dead letters, newest first. `limit` is the page size (the caller bounds it).
    pub async fn dead_letters(
        &self,
        f: &DeadLetterFilter,
        after: Option<Cursor>,
        limit: i64,
    ) -> Result<DeadLetterPage, StoreError> {
        let mut qb = list_query(f, after, limit + 1, "");
        let mut items: Vec<DeadLetterSummary> = qb.build_query_as().fetch_all(&self.pool).await?;
        let next_cursor = if items.len() as i64 > limit {
            items.truncate(limit as usize);
            items.last().map(|l| {
                Cursor {
                    dead_at: l.dead_at,
                    id: l.id,
                }
                .encode()
            })
        } else {
            None
        };
        items.iter_mut().for_each(redact_summary);
        Ok(DeadLetterPage { items, next_cursor })
    }

    /// Dead letters counted per (operation, error class, MessageId, vendor, state), largest group first.
    pub async fn dead_letter_groups(
        &self,
        f: &DeadLetterFilter,
        limit: i64,
    ) -> Result<Vec<DeadLetterGroup>, StoreError> {
        let mut qb = groups_query(f, limit, "");
        Ok(qb.build_query_as().fetch_all(&self.pool).await?)
    }

    /// The plan PostgreSQL picks for [`Store::dead_letters`] with these arguments (`EXPLAIN`, text format):
    /// for tests and for an operator checking that the indexes are used.
    pub async fn explain_dead_letters(
        &self,
        f: &DeadLetterFilter,
        after: Option<Cursor>,
        limit: i64,
    ) -> Result<String, StoreError> {
        explain(list_query(f, after, limit + 1, "EXPLAIN "), &self.pool).await
    }

    /// The plan of [`Store::dead_letter_groups`].
    pub async fn explain_dead_letter_groups(
        &self,
        f: &DeadLetterFilter,
        limit: i64,
    ) -> Result<String, StoreError> {
        explain(groups_query(f, limit, "EXPLAIN "), &self.pool).await
    }

    /// One dead letter with its deployment, timeline, the server's live job and the triage actions so far.
    pub async fn dead_letter_detail(&self, id: i64) -> Result<DeadLetterDetail, StoreError> {
        let mut dead_letter = dead_letter_in(&self.pool, id).await?;
        redact_summary(&mut dead_letter.summary);
        redact(&mut dead_letter.payload);
        redact(&mut dead_letter.errors);
        redact(&mut dead_letter.context);
        let s = &dead_letter.summary;
        let deployment = match s.deployment_id {
            Some(d) => match self.deployment(d).await {
                Ok(record) => Some(record),
                // The server (and its deployments) may have been deleted since.
                Err(StoreError::NotFound { .. }) => None,
                Err(e) => return Err(e),
            },
            None => None,
        };
        let mut timeline: Vec<Event> = match (s.deployment_id, &s.server) {
            (Some(d), _) => sqlx::query_as(
                "SELECT * FROM (SELECT id, server, deployment_id, at, kind, fence, detail FROM server_events \
                     WHERE deployment_id = $1 ORDER BY id DESC LIMIT 1000) e ORDER BY id",
            )
            .bind(d)
            .fetch_all(&self.pool)
            .await?,
            (None, Some(server)) => sqlx::query_as(
                "SELECT * FROM (SELECT id, server, deployment_id, at, kind, fence, detail FROM server_events \
                     WHERE server = $1 AND deployment_id IS NULL AND at <= $2 ORDER BY id DESC LIMIT 200) e \
                     ORDER BY id",
            )
            .bind(server)
            .bind(s.dead_at)
            .fetch_all(&self.pool)
            .await?,
            (None, None) => Vec::new(),
        };
        timeline.iter_mut().for_each(|e| redact(&mut e.detail));
        let live_job = match &s.server {
            Some(server) => live_job_in(&self.pool, server).await?,
            None => None,
        };
        let actions = sqlx::query_as(
            "SELECT id, dead_letter_id, action, actor, actor_role, reason, detail, bulk_id, at FROM triage_actions \
             WHERE dead_letter_id = $1 ORDER BY id",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await?;
        Ok(DeadLetterDetail {
            dead_letter,
            deployment,
            timeline,
            live_job,
            actions,
        })
    }
}

pub(crate) async fn dead_letter_in<'e>(
    db: impl sqlx::PgExecutor<'e>,
    id: i64,
) -> Result<DeadLetter, StoreError> {
    let row: Option<DeadLetter> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {SUMMARY_COLUMNS}, d.payload, d.errors, d.context, d.resource_key, d.idempotency_key, d.fence, \
         d.priority, d.job_created_at FROM dead_letters d LEFT JOIN servers s ON s.name = d.server WHERE d.id = $1"
    )))
    .bind(id)
    .fetch_optional(db)
    .await?;
    row.ok_or_else(|| StoreError::NotFound {
        what: "dead letter",
        name: id.to_string(),
    })
}

pub(crate) async fn live_job_in<'e>(
    db: impl sqlx::PgExecutor<'e>,
    server: &str,
) -> Result<Option<LiveJob>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT id, kind, state, run_at, attempts, max_attempts, fence, leased_by, lease_expires_at, created_at \
         FROM jobs WHERE resource_key = $1 AND state IN ('queued', 'running')",
    )
    .bind(format!("server/{server}"))
    .fetch_optional(db)
    .await?)
}

fn redact_summary(s: &mut DeadLetterSummary) {
    for text in [&mut s.first_error, &mut s.last_error, &mut s.triage_note]
        .into_iter()
        .flatten()
    {
        *text = redact_text(text);
    }
}

/// Strips what must never reach a client from a stored value, whatever wrote it: keys naming a password or a
/// secret are removed, and media URLs lose their secret path segment (it is the capability to read the image).
/// The queue stores whatever context a handler hands it, so this is applied on the way out, not trusted on the
/// way in.
pub fn redact(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, _| !is_secret_key(k));
            map.values_mut().for_each(redact);
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        Value::String(s) if s.contains("/media/") => *s = redact_text(s),
        _ => {}
    }
}

fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("password") || k.contains("passwd") || k == "secret" || k.ends_with("_secret")
}

/// Replaces the secret of every `/media/<secret>/` in `s`.
pub fn redact_text(s: &str) -> String {
    const MARK: &str = "/media/";
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find(MARK) {
        let (head, tail) = rest.split_at(at + MARK.len());
        out.push_str(head);
        let end = tail.find(['/', '?', '"', ' ']).unwrap_or(tail.len());
        if end > 0 {
            out.push_str("REDACTED");
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cursor_round_trips_and_rejects_garbage() {
        let c = Cursor {
            dead_at: DateTime::from_timestamp_micros(1_800_000_000_123_456).unwrap(),
            id: 42,
        };
        assert_eq!(Cursor::decode(&c.encode()), Some(c));
        for bad in ["", "1", "x.1", "1.x", "1.2.3"] {
            assert_eq!(Cursor::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn redact_drops_password_keys_and_media_secrets() {
        let mut v = json!({
            "server": "n1", "bmc_password": "hunter2", "nested": [{ "Password": "x", "keep": 1 }],
            "last_facts": { "media": { "image": "http://api:7878/media/abcdef0123/incusos.img?token=t" } },
            "media_secret": "abc",
        });
        redact(&mut v);
        assert_eq!(
            v,
            json!({ "server": "n1", "nested": [{ "keep": 1 }],
                    "last_facts": { "media": { "image": "http://api:7878/media/REDACTED/incusos.img?token=t" } } })
        );
        assert_eq!(
            redact_text("insert http://a/media/s1/x failed; http://b/media/s2"),
            "insert http://a/media/REDACTED/x failed; http://b/media/REDACTED"
        );
    }
}
