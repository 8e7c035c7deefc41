//! The partition fault: one worker cut off from PostgreSQL by freezing its proxy (`procs`), every socket kept
//! open, so neither the worker nor the server learns of it (no FIN, no RST) and the worker's leases run out
//! while it still runs.
//!
//! In the rolling phase it aims at the moment a rolling reboot is most fragile: the worker holding a cluster's
//! job has just sent a member `:reboot` and has not yet recorded what followed. The simulator's cluster audits
//! count each member's reboot calls; they are polled closely, and the worker holding the job of the cluster whose
//! member received one is cut off as soon as it shows. Another worker then takes the job over and must tell from
//! the member alone whether the reboot happened. Without a reboot call to aim at (the deploy phase, or none within
//! [`REBOOT_WAIT`]) the worker holding the most jobs is cut off, as a stop would take it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::inject::{PROBE, RECOVERY_LIMIT};
use super::report::Recovery;
use super::schedule::{FaultKind, Phase};
use super::{ChaosError, Harness};

/// Between two reads of the cluster audits while waiting for a reboot call: the cut-off worker must not have
/// recorded the call's outcome yet.
const REBOOT_POLL: Duration = Duration::from_millis(10);
/// How long a partition in the rolling phase waits for a reboot call before cutting off the busiest worker.
const REBOOT_WAIT: Duration = Duration::from_secs(60);
/// Every this many audit polls, whether any cluster operation is still going (none: no call will come).
const DONE_CHECK_EVERY: u32 = 50;

/// Reboot calls received so far, per (cluster, member).
type RebootCounts = BTreeMap<(String, String), u64>;

/// A reboot call the audits showed, and the worker that held its cluster's job.
struct RebootCall {
    cluster: String,
    member: String,
    pid: u32,
    /// The audit read before the one that showed the call: the call came after it.
    not_before: Instant,
}

impl Harness {
    /// Cuts a worker off from PostgreSQL until its jobs have been released to the others and at least one and a
    /// half lease TTLs have passed (as a stop), then lets it through again: it finds its leases gone.
    pub(crate) async fn partition_worker(&mut self, phase: Phase) -> Result<(), ChaosError> {
        // Unlike a stop, no hang is drained first: the cut-off worker still runs, and its lease clock stops a
        // handler (closing a hung request with it) before the lease it cannot renew runs out.
        let call = match phase {
            Phase::Rolling => self.next_reboot_call(REBOOT_WAIT).await,
            Phase::Deploy => None,
        };
        let (pid, after_call) = match &call {
            Some(call) => {
                self.workers.set_partitioned(call.pid, true);
                (call.pid, Some(call.not_before.elapsed().as_secs_f64()))
            }
            None => {
                let (pid, _) = self.pick_holder().await;
                self.workers.set_partitioned(pid, true);
                (pid, None)
            }
        };
        let frozen = Instant::now();
        let held = self.held_by(pid).await;
        let aim = match (&call, after_call) {
            (Some(call), Some(after)) => format!(
                "cut off at most {:.0} ms after member {} of cluster {} received a reboot call",
                after * 1000.0,
                call.member,
                call.cluster
            ),
            _ if phase == Phase::Rolling => {
                format!(
                    "no reboot call came (waited at most {REBOOT_WAIT:?}): the worker holding the most jobs"
                )
            }
            _ => "the worker holding the most jobs".to_owned(),
        };
        let at_secs = self.record(
            phase,
            FaultKind::WorkerPartition,
            format!("worker pid {pid}"),
            format!("held {} jobs; {aim}", held.len()),
        );
        let ttl = Duration::from_millis(self.run.lease_ttl_ms);
        let holder = format!("%:{pid}:%");
        let takeover = self.released(&holder, &held, ttl * 3 + RECOVERY_LIMIT).await;
        let least = ttl.mul_f64(1.5);
        if frozen.elapsed() < least {
            tokio::time::sleep(least - frozen.elapsed()).await;
        }
        self.workers.set_partitioned(pid, false);
        let down = frozen.elapsed().as_secs_f64();
        self.stopped.push((at_secs, at_secs + down, pid));
        if takeover.is_none() {
            self.problems.push(format!(
                "the {} jobs of worker {pid}, cut off from PostgreSQL, were not released while it was",
                held.len()
            ));
        }
        let mut recovery = Recovery::of(
            FaultKind::WorkerPartition,
            phase,
            at_secs,
            format!("worker pid {pid}"),
        );
        recovery.down_secs = Some(down);
        recovery.held_jobs = Some(held.len());
        recovery.takeover_secs = takeover;
        recovery.after_reboot_call_secs = after_call;
        self.recoveries.push(recovery);
        Ok(())
    }

    /// Waits for the next reboot call any cluster's member receives, up to `limit` or the end of every cluster
    /// operation, and names the worker holding that cluster's job when it came.
    async fn next_reboot_call(&self, limit: Duration) -> Option<RebootCall> {
        let started = Instant::now();
        let mut before: Option<(Instant, RebootCounts)> = None;
        let mut polls = 0u32;
        while started.elapsed() < limit {
            polls += 1;
            if polls.is_multiple_of(DONE_CHECK_EVERY) && self.phase_done(Phase::Rolling).await {
                return None;
            }
            // The holders first: a call the audits show next was sent by a job held now.
            let holders = self.cluster_holders().await;
            let read = Instant::now();
            let counts = self.reboot_counts().await;
            if before.as_ref().is_some_and(|(_, previous)| *previous != counts) {
                tracing::debug!(?counts, ?holders, "reboot calls counted");
            }
            if let Some((not_before, previous)) = &before {
                let called = counts
                    .iter()
                    .find(|(key, n)| previous.get(*key).is_some_and(|was| *n > was));
                if let Some(((cluster, member), _)) = called {
                    // A job leased between the two reads is not among `holders`; its holder is still writing what
                    // followed the call, so it is read now.
                    let holder = match holders.get(cluster) {
                        Some(&pid) => Some(pid),
                        None => self.cluster_holders().await.get(cluster).copied(),
                    };
                    tracing::info!(cluster = %cluster, member = %member, holder = ?holder, "reboot call seen");
                    if let Some(pid) = holder {
                        return Some(RebootCall {
                            cluster: cluster.clone(),
                            member: member.clone(),
                            pid,
                            not_before: *not_before,
                        });
                    }
                }
            }
            before = Some((read, counts));
            tokio::time::sleep(REBOOT_POLL).await;
        }
        None
    }

    /// Reboot calls received so far, per (cluster, member); a cluster whose audit could not be read is left out.
    async fn reboot_counts(&self) -> RebootCounts {
        let audits = futures::future::join_all(
            self.clusters
                .iter()
                .map(|(name, _)| async move { (name.clone(), self.sim.cluster_audit(name).await) }),
        )
        .await;
        let mut counts = BTreeMap::new();
        for (cluster, audit) in audits {
            let Ok(audit) = audit else { continue };
            for (member, c) in audit.members {
                counts.insert((cluster.clone(), member), c.reboots);
            }
        }
        counts
    }

    /// The worker (of this run's, by pid) holding each cluster's job now.
    async fn cluster_holders(&self) -> BTreeMap<String, u32> {
        let pids = self.workers.pids();
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT resource_key, leased_by FROM jobs \
             WHERE state = 'running' AND leased_by IS NOT NULL AND resource_key LIKE 'cluster/%'",
        )
        .fetch_all(&self.pool)
        .await
        .unwrap_or_default();
        rows.into_iter()
            .filter_map(|(key, holder)| {
                let cluster = key.strip_prefix("cluster/")?.to_owned();
                let pid = holder.split(':').nth(1)?.parse::<u32>().ok()?;
                pids.contains(&pid).then_some((cluster, pid))
            })
            .collect()
    }

    /// The running jobs worker `pid` holds, as the database still records them.
    async fn held_by(&self, pid: u32) -> Vec<i64> {
        let holder = format!("%:{pid}:%");
        for _ in 0..20 {
            if let Ok(ids) =
                sqlx::query_scalar("SELECT id FROM jobs WHERE state = 'running' AND leased_by LIKE $1")
                    .bind(&holder)
                    .fetch_all(&self.pool)
                    .await
            {
                return ids;
            }
            tokio::time::sleep(PROBE).await;
        }
        Vec::new()
    }
}
