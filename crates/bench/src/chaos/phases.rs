//! Driving a phase: its condition polled, its faults fired when due, the children watched; and the samplers that
//! run beside both phases (the live jobs, the BMCs' concurrency).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use racklift_api::demo;
use racklift_bmc_sim::Faults;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::requests::Submitter;
use super::schedule::{Phase, Planned};
use super::sim_control::SimControl;
use super::{ChaosError, Harness, TICK};

/// How a phase ended.
pub(crate) struct PhaseEnd {
    pub secs: f64,
    /// Faults of its schedule that had not fired when its work was done.
    pub left: Vec<Planned>,
    pub timed_out: bool,
}

impl Harness {
    /// Runs `phase` until its work is done or `limit` passes, firing its faults when they are due. A fault runs to
    /// its end (a stopped worker continued, PostgreSQL back) before the next is looked at.
    pub(crate) async fn drive(
        &mut self,
        phase: Phase,
        events: Vec<Planned>,
        limit: Duration,
    ) -> Result<PhaseEnd, ChaosError> {
        let started = Instant::now();
        let mut pending: VecDeque<Planned> = events.into();
        let timed_out = loop {
            self.watch_children().await?;
            if self.phase_done(phase).await {
                break false;
            }
            if started.elapsed() > limit {
                break true;
            }
            match pending.front().copied() {
                Some(next) if started.elapsed() >= next.at => {
                    pending.pop_front();
                    self.inject(phase, next.action).await?;
                }
                _ => tokio::time::sleep(TICK).await,
            }
        };
        Ok(PhaseEnd {
            secs: started.elapsed().as_secs_f64(),
            left: pending.into(),
            timed_out,
        })
    }

    /// Whether the phase's work is over: every deployment finished (and every request sent), or no cluster
    /// operation running or paused. A database that does not answer means not yet.
    pub(super) async fn phase_done(&self, phase: Phase) -> bool {
        let sql = match phase {
            Phase::Deploy => {
                if self.submitting.as_ref().is_some_and(|s| !s.is_finished()) {
                    return false;
                }
                "SELECT count(*) FROM deployments WHERE finished_at IS NULL"
            }
            Phase::Rolling => "SELECT count(*) FROM cluster_operations WHERE status IN ('running', 'paused')",
        };
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(&self.pool)
            .await
            .is_ok_and(|open| open == 0)
    }

    /// A worker or the API that ended on its own is a failure of racklift's; a new one takes its place so the run
    /// goes on. The simulator ending ends the run.
    async fn watch_children(&mut self) -> Result<(), ChaosError> {
        if let Some(status) = self.sim_process.exited() {
            return Err(ChaosError::Exited {
                what: "racklift bmc-sim".into(),
                status: status.to_string(),
            });
        }
        for (number, pid, status) in self.workers.exited() {
            let problem = format!("worker #{number} (pid {pid}) exited on its own: {status}");
            tracing::warn!(number, pid, %status, "worker exited on its own; starting another");
            self.problems.push(problem);
            self.workers.spawn_one().await?;
        }
        if let Some(status) = self.api.exited() {
            tracing::warn!(%status, "the API exited on its own; starting another");
            self.problems
                .push(format!("racklift api exited on its own: {status}"));
            self.api.respawn()?;
        }
        Ok(())
    }

    /// Gives the late-eject servers their fault and sends every deploy request from a task of its own, so the
    /// schedule runs while requests are still being sent.
    pub(crate) fn submit_deployments(&mut self, catalog: demo::DemoCatalog) {
        let requests: Vec<(String, racklift_api::DeployRequest)> = self
            .servers
            .iter()
            .map(|s| (s.name.clone(), demo::deploy_request(&catalog, &s.personality)))
            .collect();
        let late: Vec<String> = self.late_ejects.iter().cloned().collect();
        let sim = self.sim.clone();
        let submit = Submitter {
            http: self.http.clone(),
            api_url: self.api_url.clone(),
            token: self.token.clone(),
            pool: self.pool.clone(),
        };
        let limit = Duration::from_secs(300);
        self.submitting = Some(tokio::spawn(async move {
            let mut problems = Vec::new();
            for name in &late {
                let faults = Faults {
                    late_eject: true,
                    ..Faults::default()
                };
                if let Err(e) = sim.set_faults(name, &faults).await {
                    problems.push(format!("{name}: setting its late eject: {e}"));
                }
            }
            problems.extend(submit.deploy_all(requests, limit).await);
            problems
        }));
    }
}

/// Records the id of every live job, every 200 ms, until `stop`.
pub(crate) async fn sample_jobs(pool: PgPool, seen: Arc<Mutex<BTreeSet<i64>>>, stop: CancellationToken) {
    loop {
        if let Ok(ids) = sqlx::query_scalar::<_, i64>("SELECT id FROM jobs")
            .fetch_all(&pool)
            .await
        {
            seen.lock().unwrap_or_else(|e| e.into_inner()).extend(ids);
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

/// Notes, per server, when its BMC's audit first shows two requests at once (polled every second until `stop`),
/// so the tally can say what was going on at that moment.
pub(crate) async fn sample_concurrency(
    sim: SimControl,
    servers: Vec<String>,
    started: Instant,
    seen: Arc<Mutex<BTreeMap<String, f64>>>,
    stop: CancellationToken,
) {
    loop {
        for server in &servers {
            if seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains_key(server)
            {
                continue;
            }
            if sim.audit(server).await.is_ok_and(|a| a.max_concurrent > 1) {
                let at = started.elapsed().as_secs_f64();
                seen.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(server.clone(), at);
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}
