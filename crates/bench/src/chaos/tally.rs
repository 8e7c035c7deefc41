//! The tally of a run, read at its end from the database and the simulator, and the verdict: the problems that
//! make the command fail.

use std::collections::{BTreeMap, BTreeSet};

use super::report::{
    ChaosReport, ClusterOutcome, ClusterTally, ConcurrencySeen, DeadLetter, DeploymentTally, FaultTally,
    JobTally, LateEject, MutationTally, PhaseTimes, RunSettings, ServerOutcome,
};
use super::schedule::{FaultKind, Plan};
use super::{ChaosError, Harness};

/// How many stale mutations the report names one by one.
const EXAMPLES: usize = 5;

/// Reads the tally at the end of the run and decides the verdict.
pub(crate) async fn gather(h: &Harness, plan: &Plan, phases: PhaseTimes) -> Result<ChaosReport, ChaosError> {
    let faults = FaultKind::ALL
        .iter()
        .map(|&kind| FaultTally {
            kind,
            label: kind.label().to_owned(),
            planned: plan.planned(kind),
            injected: if kind == FaultKind::LateEject {
                plan.late_ejects.len()
            } else {
                h.injected.iter().filter(|f| f.kind == kind).count()
            },
        })
        .collect();
    let deployments = deployments(h).await?;
    let late_ejects = late_ejects(h).await?;
    let clusters = clusters(h).await?;
    let dead_letters = dead_letters(h).await?;
    let mutations = mutations(h).await?;
    let jobs = jobs(h).await?;
    let mut report = ChaosReport {
        settings: RunSettings {
            servers: h.servers.len(),
            workers: h.run.workers,
            seed: h.run.seed,
            time_scale: h.run.time_scale,
            members: h.run.members,
            lease_ttl_ms: h.run.lease_ttl_ms,
            database: h.db.describe(),
        },
        faults,
        fault_log: h.injected.clone(),
        deployments,
        late_ejects,
        clusters,
        dead_letters,
        mutations,
        jobs,
        recoveries: h.recoveries.clone(),
        phases,
        logs_dir: None,
        problems: h.problems.clone(),
    };
    report.problems.extend(verdict(&report));
    Ok(report)
}

/// The problems the tally shows.
fn verdict(r: &ChaosReport) -> Vec<String> {
    let mut problems = Vec::new();
    let d = &r.deployments;
    if d.failed_unexpected > 0 || d.stuck > 0 || d.not_started > 0 {
        problems.push(format!(
            "deployments: {} failed, {} stuck, {} never started",
            d.failed_unexpected, d.stuck, d.not_started
        ));
    }
    if d.canceled > 0 {
        problems.push(format!(
            "deployments: {} canceled, none was asked to be",
            d.canceled
        ));
    }
    let c = &r.clusters;
    if c.failed > 0 || c.stuck > 0 || c.canceled > 0 {
        problems.push(format!(
            "cluster reboots: {} failed, {} canceled, {} stuck",
            c.failed, c.canceled, c.stuck
        ));
    }
    for late in r.late_ejects.iter().filter(|l| l.took && l.power_cycles != 1) {
        problems.push(format!(
            "{}: a late eject repaired with {} power cycles, not one",
            late.server, late.power_cycles
        ));
    }
    let m = &r.mutations;
    if m.bmc_stale > 0 || m.incus_stale > 0 || m.cluster_stale > 0 {
        problems.push(format!(
            "stale mutations: {} on BMCs, {} on Incus APIs, {} in cluster audits",
            m.bmc_stale, m.incus_stale, m.cluster_stale
        ));
    }
    if m.bmc_unfenced > 0 || m.incus_unfenced > 0 || m.cluster_unfenced > 0 {
        problems.push(format!(
            "unfenced mutations: {} on BMCs, {} on Incus APIs, {} in cluster audits",
            m.bmc_unfenced, m.incus_unfenced, m.cluster_unfenced
        ));
    }
    if m.bmc_max_concurrent > 1 {
        problems.push(format!(
            "concurrent BMC calls: up to {} at once on {}",
            m.bmc_max_concurrent,
            m.bmc_concurrent_servers.join(", ")
        ));
    }
    if m.max_evacuated_at_once > 1 {
        problems.push(format!(
            "{} members of one cluster out at once",
            m.max_evacuated_at_once
        ));
    }
    if !r.jobs.lost.is_empty() {
        problems.push(format!("jobs lost: {:?}", r.jobs.lost));
    }
    if r.jobs.live > 0 {
        problems.push(format!("{} jobs still live after the work ended", r.jobs.live));
    }
    problems
}

async fn deployments(h: &Harness) -> Result<DeploymentTally, ChaosError> {
    // Each server's newest deployment.
    let rows: Vec<(String, String, bool, Option<String>)> = sqlx::query_as(
        "SELECT DISTINCT ON (server) server, state, finished_at IS NOT NULL, \
                coalesce(machine -> 'failure', last_error)::text \
         FROM deployments ORDER BY server, id DESC",
    )
    .fetch_all(&h.pool)
    .await?;
    let by_server: BTreeMap<String, (String, bool, Option<String>)> =
        rows.into_iter().map(|(s, st, f, d)| (s, (st, f, d))).collect();
    // No fault of this mix is meant to outlast its server's deployment.
    let doomed: BTreeSet<&str> = BTreeSet::new();
    let mut t = DeploymentTally {
        servers: h.servers.len(),
        completed: 0,
        failed_expected: 0,
        failed_unexpected: 0,
        canceled: 0,
        stuck: 0,
        not_started: 0,
        not_completed: Vec::new(),
    };
    for server in &h.servers {
        let Some((state, finished, detail)) = by_server.get(&server.name) else {
            t.not_started += 1;
            t.not_completed.push(ServerOutcome {
                server: server.name.clone(),
                state: "not started".into(),
                detail: None,
                machine: machine(h, &server.name).await,
                events: Vec::new(),
            });
            continue;
        };
        match (state.as_str(), finished) {
            ("Completed", true) => {
                t.completed += 1;
                continue;
            }
            ("Failed", true) if doomed.contains(server.name.as_str()) => t.failed_expected += 1,
            ("Failed", true) => t.failed_unexpected += 1,
            ("Canceled", true) => t.canceled += 1,
            _ => t.stuck += 1,
        }
        t.not_completed.push(ServerOutcome {
            server: server.name.clone(),
            state: state.clone(),
            detail: detail.clone(),
            machine: machine(h, &server.name).await,
            events: events(h, &server.name).await?,
        });
    }
    Ok(t)
}

/// The newest events of the server's newest deployment, oldest first, each on one line.
async fn events(h: &Harness, server: &str) -> Result<Vec<String>, ChaosError> {
    let rows: Vec<(f64, String, Option<i64>, String)> = sqlx::query_as(
        "SELECT extract(epoch FROM e.at)::float8 - $2, e.kind, e.fence, e.detail::text FROM server_events e \
         WHERE e.server = $1 AND e.deployment_id = (SELECT max(id) FROM deployments WHERE server = $1) \
         ORDER BY e.id DESC LIMIT 30",
    )
    .bind(server)
    .bind(h.started_epoch)
    .fetch_all(&h.pool)
    .await?;
    Ok(rows
        .into_iter()
        .rev()
        .map(|(at, kind, fence, detail)| {
            let detail: String = detail.chars().take(300).collect();
            let fence = fence.map_or_else(String::new, |f| format!(" fence {f}"));
            format!("{at:>7.1} {kind}{fence} {detail}")
        })
        .collect())
}

/// The simulated machine's state in one line.
async fn machine(h: &Harness, server: &str) -> Option<String> {
    let t = h.sim.truth(server).await.ok()?;
    let phase = match &t.phase.detail {
        Some(detail) => format!("{} ({detail})", t.phase.phase),
        None => t.phase.phase.clone(),
    };
    Some(format!(
        "power {}, {phase}, registered {}, {} boots, installer ran {} times",
        t.power, t.registered, t.counters.boot_count, t.counters.installer_runs
    ))
}

async fn late_ejects(h: &Harness) -> Result<Vec<LateEject>, ChaosError> {
    let repair = serde_json::to_value(racklift_deploy::State::PowerOffMissedEject)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let mut out = Vec::new();
    for server in h.servers.iter().filter(|s| h.late_ejects.contains(&s.name)) {
        let (power_cycles, state): (i64, Option<String>) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM server_events e WHERE e.server = $1 AND e.kind = 'transition' \
                     AND e.deployment_id = d.id AND e.detail ->> 'to' = $2), d.state \
             FROM deployments d WHERE d.server = $1 ORDER BY d.id DESC LIMIT 1",
        )
        .bind(&server.name)
        .bind(&repair)
        .fetch_optional(&h.pool)
        .await?
        .unwrap_or((0, None));
        let took = h
            .sim
            .truth(&server.name)
            .await
            .is_ok_and(|t| t.counters.installer_runs >= 2);
        out.push(LateEject {
            server: server.name.clone(),
            personality: server.personality.clone(),
            took,
            power_cycles: power_cycles as usize,
            state: state.unwrap_or_else(|| "not started".into()),
        });
    }
    Ok(out)
}

async fn clusters(h: &Harness) -> Result<ClusterTally, ChaosError> {
    let rows: Vec<ClusterOutcome> = sqlx::query_as(
        "SELECT DISTINCT ON (cluster) cluster, status, status_reason AS reason, failed_server, failed_step \
         FROM cluster_operations ORDER BY cluster, id DESC",
    )
    .fetch_all(&h.pool)
    .await?;
    let mut t = ClusterTally {
        clusters: h.clusters.len(),
        members: h.run.members,
        ..ClusterTally::default()
    };
    for outcome in rows {
        match outcome.status.as_str() {
            "completed" => {
                t.completed += 1;
                continue;
            }
            "failed" => t.failed += 1,
            "canceled" => t.canceled += 1,
            _ => t.stuck += 1,
        }
        t.not_completed.push(outcome);
    }
    Ok(t)
}

async fn dead_letters(h: &Harness) -> Result<Vec<DeadLetter>, ChaosError> {
    Ok(sqlx::query_as(
        "SELECT job_id, kind, reason, context ->> 'server' AS server, error_class, last_error AS message \
         FROM dead_letters ORDER BY id",
    )
    .fetch_all(&h.pool)
    .await?)
}

async fn mutations(h: &Harness) -> Result<MutationTally, ChaosError> {
    let mut t = MutationTally::default();
    for server in &h.servers {
        let bmc = h.sim.audit(&server.name).await?;
        t.bmc_mutations += bmc.mutations;
        t.bmc_unfenced += bmc.unfenced_mutations;
        t.bmc_stale += bmc.stale_mutations.len();
        t.bmc_max_concurrent = t.bmc_max_concurrent.max(bmc.max_concurrent);
        if bmc.max_concurrent > 1 {
            t.bmc_concurrent_servers.push(server.name.clone());
            t.bmc_concurrency.push(concurrency_context(h, &server.name));
        }
        for s in bmc.stale_mutations.iter().take(EXAMPLES) {
            t.stale_examples.push(format!(
                "BMC {}: {} {} fence {} after {}",
                server.name, s.method, s.path, s.token, s.highest_seen
            ));
        }
        let incus = h.sim.incus_audit(&server.name).await?;
        t.incus_mutations += incus.mutations;
        t.incus_unfenced += incus.unfenced_mutations;
        t.incus_stale += incus.stale_mutations.len();
        t.incus_max_concurrent = t.incus_max_concurrent.max(incus.max_concurrent);
        for s in incus.stale_mutations.iter().take(EXAMPLES) {
            t.stale_examples.push(format!(
                "Incus {}: {} {} fence {} after {}",
                server.name, s.method, s.path, s.token, s.highest_seen
            ));
        }
    }
    for (cluster, _) in &h.clusters {
        let audit = h.sim.cluster_audit(cluster).await?;
        t.cluster_mutations += audit.mutations;
        t.cluster_unfenced += audit.unfenced_mutations;
        t.cluster_stale += audit.stale_mutations.len();
        t.max_evacuated_at_once = t.max_evacuated_at_once.max(audit.max_evacuated_at_once);
        for s in audit.stale_mutations.iter().take(EXAMPLES) {
            t.stale_examples.push(format!(
                "cluster {cluster}, member {}: {} {} fence {} after {}",
                s.member, s.method, s.path, s.token, s.highest_seen
            ));
        }
    }
    t.stale_examples.truncate(EXAMPLES * 3);
    Ok(t)
}

fn concurrency_context(h: &Harness, server: &str) -> ConcurrencySeen {
    let first_seen_secs = h
        .concurrency_seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(server)
        .copied();
    let until = first_seen_secs.unwrap_or(f64::MAX);
    let during_stop_of = first_seen_secs.and_then(|at| {
        h.stopped
            .iter()
            .find(|(from, to, _)| *from <= at && at <= to + 2.0)
            .map(|(_, _, pid)| *pid)
    });
    let faults_before = h
        .injected
        .iter()
        .filter(|f| f.target == server && f.at_secs <= until)
        .map(|f| format!("{:.1} s: {}", f.at_secs, f.detail))
        .collect();
    ConcurrencySeen {
        server: server.to_owned(),
        first_seen_secs,
        during_stop_of,
        faults_before,
    }
}

async fn jobs(h: &Harness) -> Result<JobTally, ChaosError> {
    let (last, called, completed, dead, live): (i64, bool, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT last_value FROM jobs_id_seq), (SELECT is_called FROM jobs_id_seq), \
                (SELECT count(*) FROM jobs_completed), (SELECT count(DISTINCT job_id) FROM dead_letters), \
                (SELECT count(*) FROM jobs)",
    )
    .fetch_one(&h.pool)
    .await?;
    let ids_drawn = if called { last } else { 0 };
    let observed: Vec<i64> = h
        .observed_jobs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .copied()
        .collect();
    let accounted: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM jobs_completed WHERE id = ANY($1) \
         UNION SELECT job_id FROM dead_letters WHERE job_id = ANY($1) \
         UNION SELECT id FROM jobs WHERE id = ANY($1)",
    )
    .bind(&observed)
    .fetch_all(&h.pool)
    .await?;
    let accounted: BTreeSet<i64> = accounted.into_iter().collect();
    let lost = observed
        .iter()
        .copied()
        .filter(|id| !accounted.contains(id))
        .collect();
    Ok(JobTally {
        ids_drawn,
        completed,
        dead,
        live,
        ids_without_row: ids_drawn - completed - dead - live,
        observed: observed.len(),
        lost,
    })
}
