//! Distinct bytes of a deployment's image read per source, merged in PostgreSQL so any API instance can serve
//! the media and the progress survives a restart.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use racklift_deploy::ranges::RangeSet;

use crate::servers::{ServerRow, qualified_columns};
use crate::{Server, Store, StoreError};

/// Ranges served to one source since the last flush.
#[derive(Debug, Clone)]
pub struct MediaRead {
    pub deployment_id: i64,
    pub source: String,
    /// Half-open `[start, end)` byte ranges.
    pub ranges: Vec<(u64, u64)>,
    pub at: DateTime<Utc>,
}

/// What reaches a deployment through the API rather than the BMC: registration, a cancel request and the media
/// reads. A wait step re-reads it on every pass.
#[derive(Debug, Clone, Default)]
pub struct ApiFacts {
    pub registered_at: Option<DateTime<Utc>>,
    pub cancel: Option<serde_json::Value>,
    /// Distinct ranges read, by source address.
    pub media: BTreeMap<String, RangeSet>,
    pub last_read_at: Option<DateTime<Utc>>,
    /// The reason of the last refused registration that carried this deployment's token.
    pub last_refusal: Option<String>,
}

/// Where a media URL leads: just enough to serve a range, so a read costs one narrow query.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MediaTarget {
    pub deployment_id: i64,
    pub finished: bool,
    pub image_id: i64,
    pub path: String,
    pub image_sha256: String,
    /// What identified the image's bytes when they were last hashed.
    pub file_stamp: Option<String>,
    /// Where the seed goes and what it is; `None` for a deployment made before seeded media.
    pub seed_offset: Option<i64>,
    pub seed_archive: Option<Vec<u8>>,
}

/// Ranges of one (deployment, source) waiting to be merged, and the latest read among them.
type Pending = (Vec<(u64, u64)>, DateTime<Utc>);

impl Store {
    /// Merges a batch of reads into the stored range sets, one transaction for the whole batch. Rows are locked
    /// in key order so concurrent API instances cannot deadlock.
    pub async fn record_media_reads(&self, reads: &[MediaRead], max_ranges: usize) -> Result<(), StoreError> {
        let mut merged: BTreeMap<(i64, String), Pending> = BTreeMap::new();
        for r in reads {
            let e = merged
                .entry((r.deployment_id, r.source.clone()))
                .or_insert_with(|| (Vec::new(), r.at));
            e.0.extend(&r.ranges);
            e.1 = e.1.max(r.at);
        }
        let mut tx = self.pool.begin().await?;
        for ((deployment_id, source), (ranges, at)) in merged {
            let stored: Option<serde_json::Value> = sqlx::query_scalar(
                "SELECT ranges FROM media_reads WHERE deployment_id = $1 AND source = $2 FOR UPDATE",
            )
            .bind(deployment_id)
            .bind(&source)
            .fetch_optional(&mut *tx)
            .await?;
            let mut set = match stored {
                Some(v) => serde_json::from_value(v).unwrap_or_else(|_| RangeSet::new(max_ranges)),
                None => RangeSet::new(max_ranges),
            };
            for (start, end) in ranges {
                set.insert(start, end);
            }
            // The deployment may have finished and been dropped meanwhile: then there is nothing to record.
            sqlx::query(
                "INSERT INTO media_reads (deployment_id, source, ranges, bytes_read, last_read_at) \
                 SELECT $1, $2, $3, $4, $5 WHERE EXISTS (SELECT 1 FROM deployments WHERE id = $1) \
                 ON CONFLICT (deployment_id, source) DO UPDATE SET ranges = excluded.ranges, \
                 bytes_read = excluded.bytes_read, last_read_at = greatest(media_reads.last_read_at, excluded.last_read_at)",
            )
            .bind(deployment_id)
            .bind(&source)
            .bind(serde_json::to_value(&set).expect("range sets serialise"))
            .bind(set.total() as i64)
            .bind(at)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The deployment's server with what reached the deployment through the API (registration, cancel, media
    /// reads), in one query: a wait step polls this on every pass.
    pub async fn step_context(&self, deployment_id: i64) -> Result<(Server, ApiFacts), StoreError> {
        #[derive(sqlx::FromRow)]
        struct ContextRow {
            #[sqlx(flatten)]
            server: ServerRow,
            cancel: Option<serde_json::Value>,
            source: Option<String>,
            ranges: Option<serde_json::Value>,
            last_read_at: Option<DateTime<Utc>>,
            last_refusal: Option<String>,
        }
        let rows: Vec<ContextRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {}, d.cancel, m.source, m.ranges, m.last_read_at, \
                    (SELECT e.detail->>'reason' FROM server_events e \
                     WHERE e.deployment_id = d.id AND e.kind = 'registration_refused' \
                     ORDER BY e.id DESC LIMIT 1) AS last_refusal \
             FROM deployments d JOIN servers s ON s.name = d.server \
             LEFT JOIN media_reads m ON m.deployment_id = d.id WHERE d.id = $1",
            qualified_columns("s")
        )))
        .bind(deployment_id)
        .fetch_all(&self.pool)
        .await?;
        let mut facts = ApiFacts::default();
        let mut server = None;
        for row in rows {
            facts.registered_at = row.server.registered_at;
            facts.cancel = row.cancel;
            facts.last_refusal = row.last_refusal;
            if let (Some(source), Some(ranges)) = (row.source, row.ranges) {
                facts.media.insert(source, range_set(ranges)?);
                facts.last_read_at = facts.last_read_at.max(row.last_read_at);
            }
            server = Some(row.server);
        }
        let server = server.ok_or_else(|| StoreError::NotFound {
            what: "deployment",
            name: deployment_id.to_string(),
        })?;
        Ok((server.into(), facts))
    }

    /// The deployment and image file a media secret leads to.
    pub async fn media_target(&self, secret: &str) -> Result<Option<MediaTarget>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT d.id AS deployment_id, d.finished_at IS NOT NULL AS finished, i.id AS image_id, i.path, \
                    i.sha256 AS image_sha256, i.file_stamp, i.seed_offset, d.seed_archive \
             FROM deployments d JOIN images i ON i.id = d.image_id WHERE d.media_secret = $1",
        )
        .bind(secret)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// The range sets of a deployment by source, and the latest read.
    pub async fn media_progress(
        &self,
        deployment_id: i64,
    ) -> Result<(BTreeMap<String, RangeSet>, Option<DateTime<Utc>>), StoreError> {
        let rows: Vec<(String, serde_json::Value, DateTime<Utc>)> =
            sqlx::query_as("SELECT source, ranges, last_read_at FROM media_reads WHERE deployment_id = $1")
                .bind(deployment_id)
                .fetch_all(&self.pool)
                .await?;
        let mut last = None;
        let mut sets = BTreeMap::new();
        for (source, ranges, at) in rows {
            sets.insert(source, range_set(ranges)?);
            last = last.max(Some(at));
        }
        Ok((sets, last))
    }
}

fn range_set(stored: serde_json::Value) -> Result<RangeSet, StoreError> {
    serde_json::from_value(stored).map_err(|source| StoreError::Corrupt {
        what: "media read ranges",
        source,
    })
}
