use super::*;

// ---------------------------------------------------------------------------------------------------------------
// The cluster model: applies each triggered step to the member facts the way Incus and IncusOS would
// ---------------------------------------------------------------------------------------------------------------

/// What a step, once triggered, does to a member that does not behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Misbehave {
    /// The step starts (its immediate effect shows) but never finishes.
    Hangs,
    /// The step has no effect at all.
    Ignored,
}

/// The effect a triggered step shows on the tick after the one that first sees it.
#[derive(Debug, Clone)]
pub(crate) enum Effect {
    Status(MS),
    /// Reachable again after a reboot, booted into the staged version, with the same status.
    BackUp,
    /// The update has been staged.
    Staged,
}

pub(crate) struct Cluster {
    pub(crate) kind: RunKind,
    pub(crate) members: BTreeMap<String, MemberFacts>,
    pub(crate) queued: Vec<(String, Effect)>,
    pub(crate) misbehave: Option<(String, St, Misbehave)>,
}

impl Cluster {
    pub(crate) fn new(kind: &RunKind, list: &[(String, MemberFacts)]) -> Cluster {
        Cluster {
            kind: kind.clone(),
            members: list.iter().cloned().collect(),
            queued: vec![],
            misbehave: None,
        }
    }

    pub(crate) fn misbehaving(mut self, server: &str, step: St, how: Misbehave) -> Cluster {
        self.misbehave = Some((server.to_owned(), step, how));
        self
    }

    /// What a poll reads of every member: a member that answers reports its cluster member name.
    pub(crate) fn facts(&self) -> BTreeMap<String, MemberFacts> {
        self.members
            .iter()
            .map(|(name, f)| {
                let mut f = f.clone();
                if f.reachable {
                    f.member_name.get_or_insert_with(|| name.clone());
                }
                (name.clone(), f)
            })
            .collect()
    }

    /// What a worker's tick reads: whole where the run asks for it, the member status elsewhere.
    pub(crate) fn polled_for(&self, run: &RollingRun) -> BTreeMap<String, MemberFacts> {
        self.facts()
            .into_iter()
            .map(|(name, f)| {
                let f = if run.reads_fully(&name) {
                    f
                } else {
                    f.status_only()
                };
                (name, f)
            })
            .collect()
    }

    /// evacuate: Evacuating now, Evacuated on the next tick; reboot: unreachable for a tick, then reachable with
    /// the same status; restore: Restoring, then Online; update: staged on the next tick.
    pub(crate) fn apply(&mut self, server: &str, step: St) {
        let how = match &self.misbehave {
            Some((s, st, how)) if s == server && *st == step => Some(*how),
            _ => None,
        };
        if how == Some(Misbehave::Ignored) {
            return;
        }
        let m = self.members.get_mut(server).expect("a member of the cluster");
        let effect = match step {
            St::Evacuate => {
                m.status = Some(MS::Evacuating);
                Effect::Status(MS::Evacuated)
            }
            St::Reboot => {
                m.reachable = false;
                Effect::BackUp
            }
            St::Restore => {
                m.status = Some(MS::Restoring);
                Effect::Status(MS::Online)
            }
            St::Update => Effect::Staged,
        };
        if how.is_none() {
            self.queued.push((server.to_owned(), effect));
        }
    }

    /// One tick passes: what was triggered before this tick's decision takes effect.
    pub(crate) fn advance(&mut self) {
        for (server, effect) in std::mem::take(&mut self.queued) {
            let m = self.members.get_mut(&server).expect("a member of the cluster");
            match effect {
                Effect::Status(s) => m.status = Some(s),
                Effect::BackUp => {
                    m.reachable = true;
                    m.running_version = m.staged_version.clone();
                }
                Effect::Staged => {
                    let RunKind::Update {
                        os_only,
                        applications,
                    } = &self.kind
                    else {
                        panic!("an update triggered in a reboot run");
                    };
                    let available = m.available_applications.clone();
                    let stage_app = |m: &mut MemberFacts, app: &str| {
                        if let (Some(have), Some(avail)) = (m.applications.get_mut(app), available.get(app)) {
                            *have = avail.clone();
                        }
                    };
                    if applications.is_empty() {
                        m.staged_version = m.available_version.clone();
                        if !os_only {
                            for app in available.keys() {
                                stage_app(m, app);
                            }
                        }
                    } else {
                        for app in applications {
                            stage_app(m, app);
                        }
                    }
                }
            }
        }
    }

    /// Members away from service that the run did not find evacuated at launch.
    pub(crate) fn away(&self, kept: &BTreeSet<String>) -> Vec<String> {
        self.members
            .iter()
            .filter(|(n, f)| {
                !kept.contains(*n) && matches!(f.status, Some(MS::Evacuating | MS::Evacuated | MS::Restoring))
            })
            .map(|(n, _)| n.clone())
            .collect()
    }
}

/// One tick of a driven run.
#[derive(Debug, Clone)]
pub(crate) struct Tick {
    pub(crate) at: i64,
    /// The server the decision is about: the one triggered, or the one the run is on while it waits.
    pub(crate) server: Option<String>,
    pub(crate) facts: BTreeMap<String, MemberFacts>,
    pub(crate) decision: RunDecision,
    pub(crate) run_after: RollingRun,
}

pub(crate) struct Trace {
    pub(crate) ticks: Vec<Tick>,
    pub(crate) run: RollingRun,
    pub(crate) cluster: Cluster,
    pub(crate) end: RunDecision,
    pub(crate) now: i64,
}

impl Trace {
    pub(crate) fn triggers(&self) -> Vec<(String, St)> {
        self.ticks
            .iter()
            .filter_map(|k| match &k.decision {
                RunDecision::Trigger { server, step } => Some((server.clone(), *step)),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn trigger_times(&self, name: &str, step: St) -> Vec<i64> {
        self.ticks
            .iter()
            .filter(|k| {
                k.decision
                    == RunDecision::Trigger {
                        server: name.into(),
                        step,
                    }
            })
            .map(|k| k.at)
            .collect()
    }

    pub(crate) fn of(&self, name: &str) -> Vec<&Tick> {
        self.ticks
            .iter()
            .filter(|k| k.server.as_deref() == Some(name))
            .collect()
    }
}

pub(crate) fn tr(list: &[(&str, St)]) -> Vec<(String, St)> {
    list.iter().map(|(s, st)| (s.to_string(), *st)).collect()
}

/// The triggers of restarting `servers` in turn: evacuate, reboot, restore each.
pub(crate) fn restarts(servers: &[&str]) -> Vec<(String, St)> {
    servers
        .iter()
        .flat_map(|s| [St::Evacuate, St::Reboot, St::Restore].map(|step| (s.to_string(), step)))
        .collect()
}

pub(crate) const MAX_TICKS: usize = 2_000;

/// Drives `run` against `cluster` from `t(start)` until it completes, pauses or fails. `hook` runs before every
/// tick's decision, with the tick's index, to play the worker or the operator. Asserts on every tick that the
/// clock only moves forward and that no two members the run is responsible for are out of service at once.
pub(crate) fn drive_with(
    mut run: RollingRun,
    mut cluster: Cluster,
    start: i64,
    cfg: &RollingConfig,
    settings: &RunSettings,
    mut hook: impl FnMut(usize, &mut RollingRun, &mut Cluster),
) -> Trace {
    let kept: BTreeSet<String> = run
        .servers
        .iter()
        .filter(|s| s.update.keep_evacuated)
        .map(|s| s.name.clone())
        .collect();
    let mut now = start;
    let mut ticks = vec![];
    for i in 0..MAX_TICKS {
        hook(i, &mut run, &mut cluster);
        let facts = cluster.polled_for(&run);
        let (next, decision) = decide_run(&run, &facts, t(now), cfg, settings);
        run = next;
        let server = match &decision {
            RunDecision::Trigger { server, .. } => Some(server.clone()),
            RunDecision::Wait { .. } => run.current().map(|s| s.name.clone()),
            _ => None,
        };
        ticks.push(Tick {
            at: now,
            server,
            facts,
            decision: decision.clone(),
            run_after: run.clone(),
        });
        cluster.advance();
        match decision {
            RunDecision::Trigger { server, step } => {
                cluster.apply(&server, step);
                // As the worker does: the answer to a reboot call is recorded.
                if step == St::Reboot
                    && let Some(s) = run.servers.iter_mut().find(|s| s.name == server)
                {
                    s.reboot_unconfirmed = false;
                }
                now += 1;
            }
            RunDecision::Wait { until } => {
                let until = secs_of(until);
                assert!(until > now, "tick {i}: a wait for {until} at {now} would spin");
                now = until;
            }
            end => {
                return Trace {
                    ticks,
                    run,
                    cluster,
                    end,
                    now,
                };
            }
        }
        let away = cluster.away(&kept);
        assert!(
            away.len() <= 1,
            "tick {i} at {now}: {away:?} are out of service at once"
        );
    }
    panic!("the run did not end within {MAX_TICKS} ticks");
}

pub(crate) fn drive(run: RollingRun, cluster: Cluster, cfg: &RollingConfig, settings: &RunSettings) -> Trace {
    drive_with(run, cluster, 0, cfg, settings, |_, _, _| {})
}

/// A rolling reboot of three idle Online servers, the cluster overriding the post-restore delay with 20 s.
pub(crate) fn reboot_three() -> Trace {
    let list = three_online();
    let run = launch(RunKind::Reboot, &list);
    drive(
        run,
        Cluster::new(&RunKind::Reboot, &list),
        &cfg(),
        &settings(Some(20)),
    )
}
