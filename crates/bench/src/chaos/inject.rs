//! Firing one scheduled fault and measuring the recovery after it. Each fault runs to its end here: a stopped
//! worker is continued, PostgreSQL and the API are back, before the schedule moves on. Recovery is measured on
//! conditions: the API answering a request that reads the database, PostgreSQL accepting a write (a transaction
//! id drawn on a fresh connection), a worker leasing again (a job carrying a fence newer than any before the
//! fault), the jobs of a killed, stopped or cut-off worker released by the rescuer. The partition of a worker from
//! PostgreSQL is in `partition`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use racklift_bmc_sim::Faults;
use rand::Rng;
use rand::seq::IndexedRandom;
use sqlx::{Connection, PgConnection};

use super::procs::signal;
use super::report::{FaultRecord, Recovery};
use super::schedule::{Action, FaultKind, Phase, Transient};
use super::{ChaosError, Harness};

/// The bound of every recovery wait.
pub(super) const RECOVERY_LIMIT: Duration = Duration::from_secs(120);
/// How long a kill or a stop waits for a worker to hold jobs before taking any worker.
const HOLDER_WAIT: Duration = Duration::from_secs(15);
/// A failover manager's time to notice the primary is gone, before it promotes.
const FAILOVER_DETECT: Duration = Duration::from_secs(1);
/// How often a recovery is checked.
pub(super) const PROBE: Duration = Duration::from_millis(100);

impl Harness {
    /// Fires `action` and waits for its end.
    pub(crate) async fn inject(&mut self, phase: Phase, action: Action) -> Result<(), ChaosError> {
        tracing::info!(?phase, fault = ?action, at = self.started.elapsed().as_secs_f64(), "injecting");
        match action {
            Action::KillWorker => self.kill_worker(phase).await,
            Action::StopWorker => self.stop_worker(phase).await,
            Action::PartitionWorker => self.partition_worker(phase).await,
            Action::RestartPostgres { down } => self.restart_postgres(phase, down).await,
            Action::Promote => self.promote(phase).await,
            Action::RestartApi => self.restart_api(phase).await,
            Action::Transient(t) => self.transient(phase, t).await,
        }
    }

    pub(super) fn record(&mut self, phase: Phase, kind: FaultKind, target: String, detail: String) -> f64 {
        let at_secs = self.started.elapsed().as_secs_f64();
        tracing::info!(?kind, target = %target, detail = %detail, "fault injected");
        self.injected.push(FaultRecord {
            at_secs,
            phase,
            kind,
            target,
            detail,
        });
        at_secs
    }

    /// `kill -9` of the worker holding the most jobs, a replacement started at once.
    async fn kill_worker(&mut self, phase: Phase) -> Result<(), ChaosError> {
        let (pid, held) = self.pick_holder().await;
        let at_secs = self.started.elapsed().as_secs_f64();
        self.workers.kill(pid).await;
        let replacement = self.workers.spawn_one().await?;
        self.record(
            phase,
            FaultKind::WorkerKill,
            format!("worker pid {pid}"),
            format!("held {} jobs; replacement pid {replacement}", held.len()),
        );
        let holder = format!("%:{pid}:%");
        let (takeover, lease) = tokio::join!(
            self.released(&holder, &held, RECOVERY_LIMIT),
            self.first_lease_by(replacement, RECOVERY_LIMIT)
        );
        if takeover.is_none() {
            self.problems.push(format!(
                "the {} jobs of killed worker {pid} were not released within {RECOVERY_LIMIT:?}",
                held.len()
            ));
        }
        let mut recovery = Recovery::of(FaultKind::WorkerKill, phase, at_secs, format!("worker pid {pid}"));
        recovery.held_jobs = Some(held.len());
        recovery.takeover_secs = takeover;
        recovery.lease_secs = lease;
        self.recoveries.push(recovery);
        Ok(())
    }

    /// SIGSTOP of the worker holding the most jobs until its leases have expired and been released, and at least
    /// one and a half lease TTLs, then SIGCONT: it wakes holding leases it no longer owns.
    async fn stop_worker(&mut self, phase: Phase) -> Result<(), ChaosError> {
        self.drain_hangs().await?;
        let (pid, held) = self.pick_holder().await;
        let stopped = Instant::now();
        signal(pid, "STOP")?;
        let at_secs = self.record(
            phase,
            FaultKind::WorkerStop,
            format!("worker pid {pid}"),
            format!("held {} jobs", held.len()),
        );
        let ttl = Duration::from_millis(self.run.lease_ttl_ms);
        let holder = format!("%:{pid}:%");
        let takeover = self.released(&holder, &held, ttl * 3 + RECOVERY_LIMIT).await;
        let least = ttl.mul_f64(1.5);
        if stopped.elapsed() < least {
            tokio::time::sleep(least - stopped.elapsed()).await;
        }
        signal(pid, "CONT")?;
        let down = stopped.elapsed().as_secs_f64();
        self.stopped.push((at_secs, at_secs + down, pid));
        if takeover.is_none() {
            self.problems.push(format!(
                "the {} jobs of stopped worker {pid} were not released while it was stopped",
                held.len()
            ));
        }
        let mut recovery = Recovery::of(FaultKind::WorkerStop, phase, at_secs, format!("worker pid {pid}"));
        recovery.down_secs = Some(down);
        recovery.held_jobs = Some(held.len());
        recovery.takeover_secs = takeover;
        self.recoveries.push(recovery);
        Ok(())
    }

    /// Waits until no request hung by a hang fault is still open: a worker stopped with one open keeps it open
    /// (it cannot time out while stopped), and the worker taking its job over then calls that BMC beside it, a
    /// second request at once that no fencing can prevent. A hang no request has hit within the bound is taken
    /// back instead.
    async fn drain_hangs(&mut self) -> Result<(), ChaosError> {
        let limit = Duration::from_secs(30);
        for server in std::mem::take(&mut self.hangs) {
            let started = Instant::now();
            loop {
                let armed = self.sim.faults(&server).await?;
                let open = self.sim.audit(&server).await?.in_flight;
                if !armed.hang && open == 0 {
                    break;
                }
                if started.elapsed() > limit {
                    if armed.hang {
                        let disarmed = Faults {
                            hang: false,
                            remaining: None,
                            ..armed
                        };
                        self.sim.set_faults(&server, &disarmed).await?;
                        tracing::info!(server = %server, "hang never hit; taken back before a worker stop");
                    }
                    break;
                }
                tokio::time::sleep(PROBE).await;
            }
        }
        Ok(())
    }

    /// Stops PostgreSQL's primary, keeps it down `down`, starts it again.
    async fn restart_postgres(&mut self, phase: Phase, down: Duration) -> Result<(), ChaosError> {
        let fence = self.fence_now().await;
        let at_secs = self.started.elapsed().as_secs_f64();
        let stopped = Instant::now();
        tokio::task::block_in_place(|| self.db.stop_primary())?;
        tokio::time::sleep(down).await;
        tokio::task::block_in_place(|| self.db.start_primary())?;
        let outage = stopped.elapsed().as_secs_f64();
        let target = self.db.describe();
        self.record(
            phase,
            FaultKind::PgRestart,
            target.clone(),
            format!(
                "down {:.1} s (stopped, then {outage:.1} s until started again)",
                down.as_secs_f64()
            ),
        );
        self.after_database_fault(phase, FaultKind::PgRestart, at_secs, target, outage, fence)
            .await;
        tokio::task::block_in_place(|| self.db.settle())?;
        Ok(())
    }

    /// Kills the primary (every process of it, a host crash) and promotes the standby behind the proxy.
    async fn promote(&mut self, phase: Phase) -> Result<(), ChaosError> {
        let fence = self.fence_now().await;
        let at_secs = self.started.elapsed().as_secs_f64();
        let crashed = Instant::now();
        tokio::task::block_in_place(|| self.db.fail_over(FAILOVER_DETECT))?;
        let outage = crashed.elapsed().as_secs_f64();
        let target = self.db.describe();
        self.record(
            phase,
            FaultKind::Promotion,
            target.clone(),
            format!("primary killed, standby promoted {outage:.1} s later"),
        );
        self.after_database_fault(phase, FaultKind::Promotion, at_secs, target, outage, fence)
            .await;
        Ok(())
    }

    /// The recovery after PostgreSQL came back: the API, a write, a lease.
    async fn after_database_fault(
        &mut self,
        phase: Phase,
        kind: FaultKind,
        at_secs: f64,
        target: String,
        outage: f64,
        fence: Option<i64>,
    ) {
        let (api, write, lease) = tokio::join!(
            self.api_answers(RECOVERY_LIMIT),
            self.writable(RECOVERY_LIMIT),
            self.leased_after(fence, RECOVERY_LIMIT)
        );
        if api.is_none() {
            self.problems.push(format!(
                "the API did not answer within {RECOVERY_LIMIT:?} after the {}",
                kind.label()
            ));
        }
        if write.is_none() {
            self.problems.push(format!(
                "PostgreSQL did not accept a write within {RECOVERY_LIMIT:?} after the {}",
                kind.label()
            ));
        }
        if lease.is_none() && self.live_jobs().await > 0 {
            self.problems.push(format!(
                "no worker leased a job within {RECOVERY_LIMIT:?} after the {} though jobs were waiting",
                kind.label()
            ));
        }
        let mut recovery = Recovery::of(kind, phase, at_secs, target);
        recovery.down_secs = Some(outage);
        recovery.api_secs = api;
        recovery.write_secs = write;
        recovery.lease_secs = lease;
        self.recoveries.push(recovery);
    }

    /// `kill -9` of the API, and a new one started on the same address at once.
    async fn restart_api(&mut self, phase: Phase) -> Result<(), ChaosError> {
        let at_secs = self.started.elapsed().as_secs_f64();
        let killed = Instant::now();
        let pid = self.api.pid();
        self.api.kill().await;
        self.api.respawn()?;
        let down = killed.elapsed().as_secs_f64();
        let target = pid.map_or_else(|| "racklift api".to_owned(), |p| format!("racklift api pid {p}"));
        self.record(
            phase,
            FaultKind::ApiRestart,
            target.clone(),
            "killed and started again".into(),
        );
        let api = self.api_answers(RECOVERY_LIMIT).await;
        if api.is_none() {
            self.problems.push(format!(
                "the restarted API did not answer within {RECOVERY_LIMIT:?}"
            ));
        }
        let mut recovery = Recovery::of(FaultKind::ApiRestart, phase, at_secs, target);
        recovery.down_secs = Some(down);
        recovery.api_secs = api;
        self.recoveries.push(recovery);
        Ok(())
    }

    /// Sets `fault` on a random server it can hit now: a cluster member for an Incus fault; not a server whose
    /// late eject is still to come (the simulator's PUT replaces the whole set, and re-arming the eject after it
    /// landed would make a second one); none with a request fault still pending.
    async fn transient(&mut self, phase: Phase, fault: Transient) -> Result<(), ChaosError> {
        let candidates: Vec<String> = if fault.is_incus() {
            self.members.clone()
        } else {
            self.servers
                .iter()
                .map(|s| s.name.clone())
                .filter(|n| phase != Phase::Deploy || !self.late_ejects.contains(n))
                .collect()
        };
        for _ in 0..8 {
            let Some(server) = candidates.choose(&mut self.rng).cloned() else {
                break;
            };
            let Ok(current) = self.sim.faults(&server).await else {
                continue;
            };
            if pending(&current) {
                continue;
            }
            self.sim.set_faults(&server, &fault.applied_to(current)).await?;
            if matches!(fault, Transient::Hang { .. }) {
                self.hangs.insert(server.clone());
            }
            self.record(phase, fault.kind(), server, fault.describe());
            return Ok(());
        }
        tracing::info!(?fault, "no server free for the fault; skipped");
        Ok(())
    }

    /// The worker (of this run's) holding the most running jobs, and those jobs; any worker, holding none, if
    /// none holds one within [`HOLDER_WAIT`].
    pub(super) async fn pick_holder(&mut self) -> (u32, Vec<i64>) {
        let started = Instant::now();
        let pids = self.workers.pids();
        while started.elapsed() < HOLDER_WAIT {
            let rows: Vec<(i64, String)> = sqlx::query_as(
                "SELECT id, leased_by FROM jobs WHERE state = 'running' AND leased_by IS NOT NULL",
            )
            .fetch_all(&self.pool)
            .await
            .unwrap_or_default();
            let mut held: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
            for (id, holder) in rows {
                if let Some(pid) = holder.split(':').nth(1).and_then(|p| p.parse::<u32>().ok())
                    && pids.contains(&pid)
                {
                    held.entry(pid).or_default().push(id);
                }
            }
            if let Some((pid, ids)) = held.into_iter().max_by_key(|(_, ids)| ids.len()) {
                return (pid, ids);
            }
            tokio::time::sleep(PROBE).await;
        }
        let at = self.rng.random_range(0..pids.len().max(1));
        (pids.get(at).copied().unwrap_or_default(), Vec::new())
    }

    /// Seconds until none of `ids` is leased by `holder` (a `leased_by` pattern) any more.
    pub(super) async fn released(&self, holder: &str, ids: &[i64], limit: Duration) -> Option<f64> {
        self.until(limit, || async {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM jobs WHERE id = ANY($1) AND leased_by LIKE $2")
                .bind(ids)
                .bind(holder)
                .fetch_one(&self.pool)
                .await
                .is_ok_and(|n| n == 0)
        })
        .await
    }

    /// Seconds until worker `pid` holds (or has completed) a job.
    async fn first_lease_by(&self, pid: u32, limit: Duration) -> Option<f64> {
        let holder = format!("%:{pid}:%");
        self.until(limit, || async {
            sqlx::query_scalar::<_, bool>(
                "SELECT EXISTS (SELECT 1 FROM jobs WHERE leased_by LIKE $1) OR EXISTS \
                 (SELECT 1 FROM jobs_completed WHERE finished_at > now() - interval '10 minutes' AND leased_by LIKE $1)",
            )
            .bind(&holder)
            .fetch_one(&self.pool)
            .await
            .unwrap_or(false)
        })
        .await
    }

    /// Seconds until a job carries a fence newer than `fence` (drawn by a lease after the fault).
    async fn leased_after(&self, fence: Option<i64>, limit: Duration) -> Option<f64> {
        let fence = fence?;
        self.until(limit, || async {
            sqlx::query_scalar::<_, bool>(
                "SELECT EXISTS (SELECT 1 FROM jobs WHERE fence > $1) OR EXISTS \
                 (SELECT 1 FROM jobs_completed WHERE finished_at > now() - interval '10 minutes' AND fence > $1)",
            )
            .bind(fence)
            .fetch_one(&self.pool)
            .await
            .unwrap_or(false)
        })
        .await
    }

    /// Seconds until a fresh connection to the benchmark database can draw a transaction id (a standby in
    /// recovery cannot).
    async fn writable(&self, limit: Duration) -> Option<f64> {
        self.until(limit, || async {
            let attempt = async {
                let mut conn = PgConnection::connect(&self.url).await?;
                let drawn: Result<String, sqlx::Error> =
                    sqlx::query_scalar("SELECT pg_current_xact_id()::text")
                        .fetch_one(&mut conn)
                        .await;
                let _ = conn.close().await;
                drawn
            };
            matches!(
                tokio::time::timeout(Duration::from_secs(2), attempt).await,
                Ok(Ok(_))
            )
        })
        .await
    }

    /// The newest fencing token drawn so far.
    async fn fence_now(&self) -> Option<i64> {
        sqlx::query_scalar("SELECT last_value FROM job_fence_seq")
            .fetch_one(&self.pool)
            .await
            .ok()
    }

    pub(crate) async fn live_jobs(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM jobs")
            .fetch_one(&self.pool)
            .await
            .unwrap_or(0)
    }

    /// Seconds until `check` holds, polled every [`PROBE`], if within `limit`.
    pub(super) async fn until<F, Fut>(&self, limit: Duration, check: F) -> Option<f64>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let started = Instant::now();
        while started.elapsed() < limit {
            if check().await {
                return Some(started.elapsed().as_secs_f64());
            }
            tokio::time::sleep(PROBE).await;
        }
        None
    }
}

/// Whether a request fault or the late eject is still armed on a server.
fn pending(f: &Faults) -> bool {
    f.hang
        || f.status.is_some()
        || f.busy
        || f.reset_connection
        || f.incus_hang
        || f.incus_status.is_some()
        || f.incus_reset
        || f.late_eject
}
