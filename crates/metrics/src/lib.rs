//! racklift's Prometheus metrics: one process-wide registry of collectors with fixed names, rendered as text at
//! `GET /metrics` by the API and by every worker.
//!
//! The names and labels are a contract: `ops/prometheus/alerts.yml` and `ops/grafana/racklift.json` query them,
//! so renaming one silently breaks an alert. Counters and histograms count what this process saw (rules sum
//! them); the gauges named `DB_SAMPLED` are read from PostgreSQL at scrape time and are the same in every
//! process (rules take their max).
//!
//! Labels stay bounded: no server names, job ids or free text. Values that come from data (job kinds, vendor
//! hints, error classes) pass through [`job_kind`], [`vendor`] and [`error_class`], which admit a fixed number of
//! distinct values and fold the rest into `other`.

mod labels;
mod scrape;

use std::sync::LazyLock;

use prometheus::{GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry};

pub use labels::{OTHER, UNKNOWN, error_class, job_kind, vendor};
pub use prometheus;
pub use scrape::{CONTENT_TYPE, router, scrape, serve};

/// Errors at this crate's boundary.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// A collector could not be built or registered (a name or label defined twice): a bug, found at start.
    #[error("defining metric {name}")]
    Define {
        name: &'static str,
        #[source]
        source: prometheus::Error,
    },
}

/// Bucket bounds in seconds for everything timed here. Jobs and BMC calls range from a few milliseconds (a cached
/// read, a snooze) to 20 minutes (attach media on a BMC that copies the image), so the buckets span both ends.
pub const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0,
];

/// Every metric name this crate defines; the gauges read from the database come first.
pub const NAMES: &[&str] = &[
    "racklift_queue_jobs",
    "racklift_queue_oldest_due_seconds",
    "racklift_dead_letters_open",
    "racklift_deployments",
    "racklift_cluster_operations",
    "racklift_cluster_servers_done",
    "racklift_queue_leases_total",
    "racklift_queue_lease_lost_total",
    "racklift_queue_fence_rejections_total",
    "racklift_queue_retries_total",
    "racklift_dead_letters_opened_total",
    "racklift_job_duration_seconds",
    "racklift_deploy_step_duration_seconds",
    "racklift_cluster_step_duration_seconds",
    "racklift_bmc_call_duration_seconds",
    "racklift_bmc_call_errors_total",
    "racklift_media_bytes_served_total",
];

/// The first names of [`NAMES`]: gauges sampled from PostgreSQL at scrape time, not counted in the process.
pub const DB_SAMPLED: &[&str] = &[
    "racklift_queue_jobs",
    "racklift_queue_oldest_due_seconds",
    "racklift_dead_letters_open",
    "racklift_deployments",
    "racklift_cluster_operations",
    "racklift_cluster_servers_done",
];

/// The registered collectors. Fields are public so a call site reads as what it counts:
/// `global().queue_leases.with_label_values(&[kind]).inc()`.
pub struct Metrics {
    pub registry: Registry,
    /// Jobs per kind and state (`queued`, `running`, `completed` until retention purges them).
    pub queue_jobs: GaugeVec,
    /// Seconds the oldest due, unleased job of a kind has waited since its `run_at`; 0 when none is due.
    pub queue_oldest_due: GaugeVec,
    /// Untriaged dead letters per kind.
    pub dead_letters_open: GaugeVec,
    /// Deployments per state-machine state.
    pub deployments: GaugeVec,
    /// Cluster operations per operation and status.
    pub cluster_operations: GaugeVec,
    /// Servers done of each live cluster operation.
    pub cluster_servers_done: GaugeVec,
    /// Jobs leased, per kind.
    pub queue_leases: IntCounterVec,
    /// Leases their holder found lost (expired and taken over, or revoked) while the job ran.
    pub queue_lease_lost: IntCounterVec,
    /// Fenced writes (complete, retry, snooze, dead letter) refused because the writer's fence was stale.
    pub queue_fence_rejections: IntCounterVec,
    /// Failed attempts queued again with backoff (handler failures and expired leases).
    pub queue_retries: IntCounterVec,
    /// Jobs moved to dead letters, per kind and error class.
    pub dead_letters_opened: IntCounterVec,
    /// Handler run time of one lease, per kind and outcome.
    pub job_duration: HistogramVec,
    /// Time of one deployment step lease, per state it started in.
    pub deploy_step_duration: HistogramVec,
    /// Time of one Incus trigger call of a rolling run, per step.
    pub cluster_step_duration: HistogramVec,
    /// Redfish operations (all requests and in-process retries of one operation), per vendor and operation.
    pub bmc_call_duration: HistogramVec,
    /// Failed Redfish operations, per vendor and error class.
    pub bmc_call_errors: IntCounterVec,
    /// Installation image bytes handed to connections by the media server.
    pub media_bytes_served: IntCounter,
}

fn define<C>(
    registry: &Registry,
    name: &'static str,
    make: impl FnOnce() -> prometheus::Result<C>,
) -> Result<C, MetricsError>
where
    C: prometheus::core::Collector + Clone + 'static,
{
    let wrap = |source| MetricsError::Define { name, source };
    let collector = make().map_err(wrap)?;
    registry.register(Box::new(collector.clone())).map_err(wrap)?;
    Ok(collector)
}

fn histogram(name: &str, help: &str) -> HistogramOpts {
    HistogramOpts::new(name, help).buckets(DURATION_BUCKETS.to_vec())
}

impl Metrics {
    /// Defines every collector on a fresh registry. Processes use [`global`]; a test may build its own.
    pub fn new() -> Result<Metrics, MetricsError> {
        let r = Registry::new();
        let gauge = |name: &'static str, help: &str, labels: &[&str]| {
            define(&r, name, || GaugeVec::new(Opts::new(name, help), labels))
        };
        let counter = |name: &'static str, help: &str, labels: &[&str]| {
            define(&r, name, || IntCounterVec::new(Opts::new(name, help), labels))
        };
        let timed = |name: &'static str, help: &str, labels: &[&str]| {
            define(&r, name, || HistogramVec::new(histogram(name, help), labels))
        };
        Ok(Metrics {
            queue_jobs: gauge(
                "racklift_queue_jobs",
                "Jobs in the queue table per kind and state, read from PostgreSQL at scrape time.",
                &["kind", "state"],
            )?,
            queue_oldest_due: gauge(
                "racklift_queue_oldest_due_seconds",
                "Seconds the oldest due, unleased job of each kind has waited (0 if none), read at scrape time.",
                &["kind"],
            )?,
            dead_letters_open: gauge(
                "racklift_dead_letters_open",
                "Untriaged dead letters per kind, read from PostgreSQL at scrape time.",
                &["kind"],
            )?,
            deployments: gauge(
                "racklift_deployments",
                "Deployments per state-machine state, read from PostgreSQL at scrape time.",
                &["state"],
            )?,
            cluster_operations: gauge(
                "racklift_cluster_operations",
                "Cluster operations (rolling_update, rolling_reboot) per status, read from PostgreSQL at scrape time.",
                &["operation", "status"],
            )?,
            cluster_servers_done: gauge(
                "racklift_cluster_servers_done",
                "Servers a live cluster operation is done with, read from PostgreSQL at scrape time.",
                &["cluster", "operation"],
            )?,
            queue_leases: counter(
                "racklift_queue_leases_total",
                "Jobs leased by this process.",
                &["kind"],
            )?,
            queue_lease_lost: counter(
                "racklift_queue_lease_lost_total",
                "Leases this process found lost (expired and taken over, or revoked) while the job ran.",
                &["kind"],
            )?,
            queue_fence_rejections: counter(
                "racklift_queue_fence_rejections_total",
                "Fenced job writes refused because the writer's fencing token was stale.",
                &["kind"],
            )?,
            queue_retries: counter(
                "racklift_queue_retries_total",
                "Failed attempts queued again with backoff (handler failures and expired leases).",
                &["kind"],
            )?,
            dead_letters_opened: counter(
                "racklift_dead_letters_opened_total",
                "Jobs moved to dead letters (attempts spent or fatal failure).",
                &["kind", "error_class"],
            )?,
            job_duration: timed(
                "racklift_job_duration_seconds",
                "Handler run time of one leased job, by outcome.",
                &["kind", "outcome"],
            )?,
            deploy_step_duration: timed(
                "racklift_deploy_step_duration_seconds",
                "Time one deployment step lease takes (observe, decide, act, commit), by the state it started in.",
                &["state"],
            )?,
            cluster_step_duration: timed(
                "racklift_cluster_step_duration_seconds",
                "Time of one Incus trigger call of a rolling run (evacuate, reboot, restore, update), by step.",
                &["step"],
            )?,
            bmc_call_duration: timed(
                "racklift_bmc_call_duration_seconds",
                "Redfish operations (requests and in-process retries included), by BMC vendor and operation.",
                &["vendor", "operation"],
            )?,
            bmc_call_errors: counter(
                "racklift_bmc_call_errors_total",
                "Failed Redfish operations by BMC vendor and error class.",
                &["vendor", "class"],
            )?,
            media_bytes_served: define(&r, "racklift_media_bytes_served_total", || {
                IntCounter::new(
                    "racklift_media_bytes_served_total",
                    "Installation image bytes sent by this process's media server.",
                )
            })?,
            registry: r,
        })
    }
}

static GLOBAL: LazyLock<Metrics> =
    LazyLock::new(|| Metrics::new().expect("racklift's metric definitions are valid and distinct"));

/// The process-wide metrics. A static rather than state threaded through every crate: the queue, the Redfish
/// client and the media server count from deep inside call paths that have no shared context to carry it.
pub fn global() -> &'static Metrics {
    &GLOBAL
}

/// The registry in the Prometheus text exposition format. An encoding failure (impossible for the collectors
/// defined here) is logged and rendered as a comment, so a scrape still answers.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    if let Err(error) = prometheus::TextEncoder::new().encode_utf8(&registry.gather(), &mut out) {
        tracing::error!(%error, "encoding metrics failed");
        out.push_str(&format!("# encoding metrics failed: {error}\n"));
    }
    out
}

/// Replaces a sampled gauge's values with `values`. Series it exported before but absent now are set to 0 rather
/// than dropped: a kind whose last dead letter was triaged reads 0, so graphs go to zero instead of stopping and
/// `increase`-style rules see the change.
pub fn set_gauges<'a>(vec: &GaugeVec, values: impl IntoIterator<Item = (Vec<&'a str>, f64)>) {
    use prometheus::core::Collector;
    for family in vec.collect() {
        for metric in family.get_metric() {
            let labels: std::collections::HashMap<&str, &str> = metric
                .get_label()
                .iter()
                .map(|pair| (pair.name(), pair.value()))
                .collect();
            if let Ok(gauge) = vec.get_metric_with(&labels) {
                gauge.set(0.0);
            }
        }
    }
    for (labels, value) in values {
        vec.with_label_values(labels.as_slice()).set(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_registry_is_independent_of_the_global_one() {
        let own = Metrics::new().unwrap();
        own.media_bytes_served.inc_by(7);
        assert!(render(&own.registry).contains("racklift_media_bytes_served_total 7"));
        assert_eq!(NAMES[..DB_SAMPLED.len()], *DB_SAMPLED);
    }

    #[test]
    fn set_gauges_zeroes_series_that_disappeared() {
        let m = Metrics::new().unwrap();
        set_gauges(&m.dead_letters_open, [(vec!["a"], 3.0), (vec!["b"], 1.0)]);
        set_gauges(&m.dead_letters_open, [(vec!["b"], 2.0)]);
        let text = render(&m.registry);
        assert!(
            text.contains("racklift_dead_letters_open{kind=\"a\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("racklift_dead_letters_open{kind=\"b\"} 2"),
            "{text}"
        );
    }
}
