//! The queue benchmark. Every figure comes from one run on one PostgreSQL, so they can be compared side by side
//! on a noisy machine: the raw-SQL bound (racklift's own claim and complete statements and nothing else),
//! racklift end to end with no-op handlers, apalis-postgres and graphile-worker as peers, idle pickup latency and
//! worker RSS.

pub mod chaos;
pub mod e2e;
pub mod fleet;
pub mod graphile;
mod latency;
pub mod media;
mod proc_stats;
mod raw;
pub mod rolling;
mod rss;

use std::time::Duration;

use sqlx::{Connection, PgConnection, PgPool};

pub use e2e::E2eRun;
pub use graphile::{GraphilePeer, GraphileRun};
pub use latency::Latency;
pub use proc_stats::{CpuPerJob, Throughput};
pub use racklift_bench_apalis::{ApalisRun, best_of as apalis_best_of, run as apalis_run};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    #[error("benchmark database")]
    Database(#[from] sqlx::Error),
    #[error("migrating the benchmark database")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("queue")]
    Queue(#[from] racklift_queue::QueueError),
    #[error("worker process for the RSS probe")]
    Process(#[source] std::io::Error),
    #[error("apalis peer")]
    Apalis(#[from] racklift_bench_apalis::ApalisBenchError),
    #[error("the BMC access policy of the fleet benchmark")]
    Access(#[source] racklift_bmc_access::PolicyError),
    #[error("{0}")]
    Stalled(String),
}

/// One database per phase, created fresh on the admin server so phases cannot disturb each other.
pub struct BenchDb {
    admin_url: String,
}

impl BenchDb {
    pub fn new(admin_url: impl Into<String>) -> BenchDb {
        BenchDb {
            admin_url: admin_url.into(),
        }
    }

    /// Drops and recreates database `name`, migrates it, and returns (url, pool) with all `connections` already
    /// open, so no timed run pays for connection set-up (a backend fork and SCRAM's key stretching) on the clock.
    pub async fn fresh(&self, name: &str, connections: u32) -> Result<(String, PgPool), BenchError> {
        let url = self.fresh_empty(name).await?;
        let pool = racklift_queue::session::pool_options()
            .max_connections(connections)
            .min_connections(connections)
            .idle_timeout(None)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(bounded(&url)?)
            .await?;
        racklift_schema::migrate(&pool).await?;
        let mut open = Vec::with_capacity(connections as usize);
        for _ in 0..connections {
            open.push(pool.acquire().await?);
        }
        drop(open);
        Ok((url, pool))
    }

    /// Drops and recreates database `name` without racklift's schema (for the apalis peer, whose migrations
    /// would clash with ours); returns its URL.
    pub async fn fresh_empty(&self, name: &str) -> Result<String, BenchError> {
        let mut admin = PgConnection::connect(&self.admin_url).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut admin)
        .await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await?;
        admin.close().await?;
        Ok(replace_database(&self.admin_url, name))
    }

    pub async fn drop_db(&self, name: &str) -> Result<(), BenchError> {
        let mut admin = PgConnection::connect(&self.admin_url).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut admin)
        .await?;
        Ok(())
    }
}

/// `url`'s connect options with the session bounds of racklift's default lease: the benchmarks measure racklift
/// as it runs.
pub fn bounded(url: &str) -> Result<sqlx::postgres::PgConnectOptions, sqlx::Error> {
    let ttl = racklift_queue::QueueConfig::default().lease_ttl;
    racklift_queue::session::connect_options(url, &racklift_queue::SessionBounds::for_lease(ttl))
}

/// The same URL with another database name (the path's last segment), keeping the query string.
pub fn replace_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let authority_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let prefix = match base[authority_end..].find('/') {
        Some(slash) => &base[..authority_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{prefix}/{name}?{q}"),
        None => format!("{prefix}/{name}"),
    }
}

/// Bulk-inserts `n` no-op jobs of `kind` straight through SQL (setup, not measured).
pub async fn seed_jobs(
    pool: &PgPool,
    kind: &str,
    n: u64,
    payload: &serde_json::Value,
) -> Result<(), BenchError> {
    let mut left = n as i64;
    while left > 0 {
        let chunk = left.min(50_000);
        sqlx::query("INSERT INTO jobs (kind, payload) SELECT $1, $2 FROM generate_series(1, $3)")
            .bind(kind)
            .bind(payload)
            .bind(chunk)
            .execute(pool)
            .await?;
        left -= chunk;
    }
    sqlx::query("VACUUM ANALYZE jobs").execute(pool).await?;
    Ok(())
}

pub use latency::measure as measure_latency;
pub use raw::run as raw_bound;
pub use rss::measure as measure_worker_rss;

pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_only_the_database_name() {
        let cases = [
            (
                "postgres://u:p@127.0.0.1:5432/postgres",
                "postgres://u:p@127.0.0.1:5432/x",
            ),
            (
                "postgres://u@h/db?sslmode=disable",
                "postgres://u@h/x?sslmode=disable",
            ),
            ("postgres://h:1", "postgres://h:1/x"),
        ];
        for (input, want) in cases {
            assert_eq!(replace_database(input, "x"), want);
        }
    }

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
