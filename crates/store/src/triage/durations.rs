//! How long deployments spend in each state, per vendor: the p50 and p95 operators tune timeouts with (a state
//! whose p95 sits near its budget will time out on a slow BMC; one far under it can be tightened). Derived from
//! the transition events, so it needs no bookkeeping of its own.

use racklift_deploy::{Config, State};
use serde::Serialize;

use crate::{Store, StoreError};

/// One state's time, for one vendor, over the deployments started in the window.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct StateDuration {
    /// The server's vendor hint; `None` for servers without one.
    pub vendor: Option<String>,
    pub state: String,
    /// How many times a deployment left this state.
    pub count: i64,
    pub p50_secs: f64,
    pub p95_secs: f64,
    pub max_secs: f64,
    /// What the state may take before it counts as stuck (`racklift_deploy::triage::state_budget`).
    pub budget_secs: Option<i64>,
}

/// Every visit to a state of the deployments created in the last `$1` seconds: from the transition into it
/// (the deployment's creation for the first) to the one out of it, so a state still occupied has no span yet.
macro_rules! spans_sql {
    () => {
        "SELECT d.id AS deployment_id, d.server, s.vendor_hint AS vendor, e.detail ->> 'from' AS state, \
                extract(epoch FROM e.at - coalesce( \
                    lag(e.at) OVER (PARTITION BY e.deployment_id ORDER BY e.id), d.created_at))::float8 AS secs \
         FROM deployments d \
         JOIN servers s ON s.name = d.server \
         JOIN server_events e ON e.deployment_id = d.id AND e.kind = 'transition' \
         WHERE d.created_at >= now() - make_interval(secs => $1)"
    };
}

/// The time one deployment spent in one state, every visit summed.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StateSpan {
    pub server: String,
    pub vendor: Option<String>,
    pub state: String,
    pub secs: f64,
}

#[derive(sqlx::FromRow)]
struct Row {
    vendor: Option<String>,
    state: String,
    count: i64,
    p50_secs: f64,
    p95_secs: f64,
    max_secs: f64,
}

impl Store {
    /// p50 / p95 / max time in each state by vendor over deployments started in the last `window_secs`. A
    /// state's time runs from the transition into it (the deployment's creation for the first) to the one out
    /// of it, so a state still occupied is not counted yet.
    pub async fn state_durations(
        &self,
        window_secs: i64,
        cfg: &Config,
    ) -> Result<Vec<StateDuration>, StoreError> {
        let rows: Vec<Row> = sqlx::query_as(concat!(
            "WITH spans AS (",
            spans_sql!(),
            ") \
             SELECT vendor, state, count(*) AS count, \
                    percentile_cont(0.5) WITHIN GROUP (ORDER BY secs) AS p50_secs, \
                    percentile_cont(0.95) WITHIN GROUP (ORDER BY secs) AS p95_secs, \
                    max(secs) AS max_secs \
             FROM spans WHERE state IS NOT NULL \
             GROUP BY vendor, state ORDER BY vendor NULLS LAST, max(secs) DESC"
        ))
        .bind(window_secs as f64)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| StateDuration {
                budget_secs: r
                    .state
                    .parse::<State>()
                    .ok()
                    .map(|s| racklift_deploy::triage::state_budget(s, cfg).num_seconds()),
                vendor: r.vendor,
                state: r.state,
                count: r.count,
                p50_secs: r.p50_secs,
                p95_secs: r.p95_secs,
                max_secs: r.max_secs,
            })
            .collect())
    }

    /// Time per deployment and state over deployments created in the last `window_secs` (for comparing single
    /// deployments, where `state_durations` gives the distribution).
    pub async fn state_spans(&self, window_secs: i64) -> Result<Vec<StateSpan>, StoreError> {
        Ok(sqlx::query_as(concat!(
            "WITH spans AS (",
            spans_sql!(),
            ") \
             SELECT server, vendor, state, sum(secs)::float8 AS secs FROM spans WHERE state IS NOT NULL \
             GROUP BY deployment_id, server, vendor, state"
        ))
        .bind(window_secs as f64)
        .fetch_all(&self.pool)
        .await?)
    }
}
