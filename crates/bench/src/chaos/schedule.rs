//! The fault schedule: which faults a run injects, in which phase and when, drawn from one seed so a run can be
//! repeated. Times are offsets into their phase, spread over the part of its estimated length where work is
//! surely in flight; the targets of BMC and Incus faults are picked when they fire, among the servers they can
//! hit at that moment (see `inject`).

use std::time::Duration;

use racklift_bmc_sim::Faults;
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// How many of each fault a run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultMix {
    /// `kill -9` of a worker holding jobs, then a replacement started.
    pub kills: usize,
    /// SIGSTOP of a worker holding jobs for longer than its lease, then SIGCONT.
    pub stops: usize,
    /// A worker cut off from PostgreSQL (its connections frozen, no FIN or RST) for longer than its lease, then
    /// let through again: in the rolling phase right after a member received a reboot call from it.
    pub partitions: usize,
    /// PostgreSQL stopped, kept down a few seconds (one of them 6 to 7 s), started again.
    pub pg_restarts: usize,
    /// The primary killed and its synchronous standby promoted behind the proxy.
    pub promotions: usize,
    /// `kill -9` of the `racklift api` process, then a new one on the same address.
    pub api_restarts: usize,
    /// Transient BMC faults (hang, 5xx, busy, connection reset) and, while clusters reboot, Incus faults (5xx,
    /// connection reset), each clearing itself after a few requests.
    pub bmc_faults: usize,
    /// Servers whose media eject lands after the reboot that ends install stage 1.
    pub late_ejects: usize,
}

impl FaultMix {
    /// No fault at all: a plain run of the rack, for checking the harness itself.
    pub const NONE: FaultMix = FaultMix {
        kills: 0,
        stops: 0,
        partitions: 0,
        pg_restarts: 0,
        promotions: 0,
        api_restarts: 0,
        bmc_faults: 0,
        late_ejects: 0,
    };

    /// Whether the run stops or fails over PostgreSQL (and so needs a server of its own).
    pub fn touches_postgres(&self) -> bool {
        self.pg_restarts > 0 || self.promotions > 0
    }
}

/// Every kind of fault the tally counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    WorkerKill,
    WorkerStop,
    WorkerPartition,
    PgRestart,
    Promotion,
    ApiRestart,
    BmcHang,
    BmcStatus,
    BmcBusy,
    BmcReset,
    IncusStatus,
    IncusReset,
    LateEject,
}

impl FaultKind {
    pub const ALL: [FaultKind; 13] = [
        FaultKind::WorkerKill,
        FaultKind::WorkerStop,
        FaultKind::WorkerPartition,
        FaultKind::PgRestart,
        FaultKind::Promotion,
        FaultKind::ApiRestart,
        FaultKind::BmcHang,
        FaultKind::BmcStatus,
        FaultKind::BmcBusy,
        FaultKind::BmcReset,
        FaultKind::IncusStatus,
        FaultKind::IncusReset,
        FaultKind::LateEject,
    ];

    /// How the tally names it.
    pub fn label(self) -> &'static str {
        match self {
            FaultKind::WorkerKill => "worker kill -9",
            FaultKind::WorkerStop => "worker SIGSTOP past its lease",
            FaultKind::WorkerPartition => "worker cut off from PostgreSQL (no FIN/RST)",
            FaultKind::PgRestart => "PostgreSQL restart",
            FaultKind::Promotion => "PostgreSQL failover (standby promoted)",
            FaultKind::ApiRestart => "API kill -9 and restart",
            FaultKind::BmcHang => "BMC hang",
            FaultKind::BmcStatus => "BMC 5xx",
            FaultKind::BmcBusy => "BMC busy (503 RAC0218)",
            FaultKind::BmcReset => "BMC connection reset",
            FaultKind::IncusStatus => "Incus 5xx",
            FaultKind::IncusReset => "Incus connection reset",
            FaultKind::LateEject => "late eject",
        }
    }
}

/// The two phases of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Every server deployed at once.
    Deploy,
    /// Every cluster of deployed servers rebooting at once.
    Rolling,
}

/// A request-level fault that clears itself after `remaining` requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transient {
    Hang { remaining: u32 },
    Status { code: u16, remaining: u32 },
    Busy { remaining: u32 },
    Reset { remaining: u32 },
    IncusStatus { code: u16, remaining: u32 },
    IncusReset { remaining: u32 },
}

impl Transient {
    pub fn kind(self) -> FaultKind {
        match self {
            Transient::Hang { .. } => FaultKind::BmcHang,
            Transient::Status { .. } => FaultKind::BmcStatus,
            Transient::Busy { .. } => FaultKind::BmcBusy,
            Transient::Reset { .. } => FaultKind::BmcReset,
            Transient::IncusStatus { .. } => FaultKind::IncusStatus,
            Transient::IncusReset { .. } => FaultKind::IncusReset,
        }
    }

    /// Whether it hits the server's Incus API rather than its BMC.
    pub fn is_incus(self) -> bool {
        matches!(self, Transient::IncusStatus { .. } | Transient::IncusReset { .. })
    }

    /// `faults` with this fault's request-level fields set (the behaviour fields are left as they are).
    pub fn applied_to(self, mut faults: Faults) -> Faults {
        match self {
            Transient::Hang { remaining } => {
                faults.hang = true;
                faults.remaining = Some(remaining);
            }
            Transient::Status { code, remaining } => {
                faults.status = Some(code);
                faults.remaining = Some(remaining);
            }
            Transient::Busy { remaining } => {
                faults.busy = true;
                faults.remaining = Some(remaining);
            }
            Transient::Reset { remaining } => {
                faults.reset_connection = true;
                faults.remaining = Some(remaining);
            }
            Transient::IncusStatus { code, remaining } => {
                faults.incus_status = Some(code);
                faults.incus_remaining = Some(remaining);
            }
            Transient::IncusReset { remaining } => {
                faults.incus_reset = true;
                faults.incus_remaining = Some(remaining);
            }
        }
        faults
    }

    /// What it does, for the fault log.
    pub fn describe(self) -> String {
        match self {
            Transient::Hang { remaining } => format!("the next {remaining} Redfish requests hang"),
            Transient::Status { code, remaining } => {
                format!("the next {remaining} Redfish requests answer {code}")
            }
            Transient::Busy { remaining } => format!("the next {remaining} Redfish requests answer busy"),
            Transient::Reset { remaining } => format!("the next {remaining} Redfish connections are reset"),
            Transient::IncusStatus { code, remaining } => {
                format!("the next {remaining} Incus requests answer {code}")
            }
            Transient::IncusReset { remaining } => {
                format!("the next {remaining} Incus connections are reset")
            }
        }
    }
}

/// What a scheduled fault does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    KillWorker,
    StopWorker,
    /// Cut a worker off from PostgreSQL: in the rolling phase the one that just sent a member a reboot call.
    PartitionWorker,
    RestartPostgres {
        down: Duration,
    },
    Promote,
    RestartApi,
    Transient(Transient),
}

impl Action {
    pub fn kind(self) -> FaultKind {
        match self {
            Action::KillWorker => FaultKind::WorkerKill,
            Action::StopWorker => FaultKind::WorkerStop,
            Action::PartitionWorker => FaultKind::WorkerPartition,
            Action::RestartPostgres { .. } => FaultKind::PgRestart,
            Action::Promote => FaultKind::Promotion,
            Action::RestartApi => FaultKind::ApiRestart,
            Action::Transient(t) => t.kind(),
        }
    }
}

/// One fault of the schedule: `at` after its phase started.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Planned {
    pub at: Duration,
    pub action: Action,
}

/// The whole schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub deploy: Vec<Planned>,
    pub rolling: Vec<Planned>,
    /// Indices of the servers given `late_eject` before their deployment.
    pub late_ejects: Vec<usize>,
}

impl Plan {
    /// How many of each kind the schedule holds.
    pub fn planned(&self, kind: FaultKind) -> usize {
        if kind == FaultKind::LateEject {
            return self.late_ejects.len();
        }
        self.deploy
            .iter()
            .chain(&self.rolling)
            .filter(|p| p.action.kind() == kind)
            .count()
    }
}

/// The schedule of `mix` for a rack of `servers`, from `seed`. `deploy` and `rolling` are the phases' estimated
/// lengths (`rolling` is `None` without a rolling phase): process faults fall into a phase in proportion to its
/// length, BMC faults likewise (Incus faults only while clusters reboot, as Incus is only used then). Partitions
/// fall into the first half of the rolling phase whenever there is one: a worker cut off right after it sent a
/// reboot call is the case they are there for.
pub fn plan(seed: u64, mix: &FaultMix, servers: usize, deploy: Duration, rolling: Option<Duration>) -> Plan {
    let mut rng = StdRng::seed_from_u64(seed);
    let share_rolling = rolling.map_or(0.0, |r| {
        r.as_secs_f64() / (r.as_secs_f64() + deploy.as_secs_f64()).max(1e-9)
    });
    let mut deploy_events = Vec::new();
    let mut rolling_events = Vec::new();
    // The long outage: one restart of PostgreSQL lasts 6 to 7 s, longer than a worker's lease at the default TTL.
    let long_restart = (mix.pg_restarts > 0).then(|| rng.random_range(0..mix.pg_restarts));
    let mut process: Vec<Action> = Vec::new();
    process.extend(std::iter::repeat_n(Action::KillWorker, mix.kills));
    process.extend(std::iter::repeat_n(Action::StopWorker, mix.stops));
    for i in 0..mix.pg_restarts {
        let secs = if Some(i) == long_restart {
            rng.random_range(6.0..7.0)
        } else {
            rng.random_range(2.0..4.0)
        };
        process.push(Action::RestartPostgres {
            down: Duration::from_secs_f64(secs),
        });
    }
    process.extend(std::iter::repeat_n(Action::Promote, mix.promotions));
    process.extend(std::iter::repeat_n(Action::RestartApi, mix.api_restarts));
    for action in process {
        let in_rolling = rolling.is_some() && rng.random_bool(share_rolling);
        place(
            &mut rng,
            action,
            in_rolling,
            deploy,
            rolling,
            &mut deploy_events,
            &mut rolling_events,
        );
    }
    for _ in 0..mix.bmc_faults {
        let in_rolling = rolling.is_some() && rng.random_bool(share_rolling);
        // While clusters reboot most faults hit Incus, the API the rolling reboot drives.
        let incus = in_rolling && rng.random_bool(0.7);
        let action = Action::Transient(transient(&mut rng, incus));
        place(
            &mut rng,
            action,
            in_rolling,
            deploy,
            rolling,
            &mut deploy_events,
            &mut rolling_events,
        );
    }
    let late = mix.late_ejects.min(servers);
    let mut late_ejects = sample(&mut rng, servers, late).into_vec();
    late_ejects.sort_unstable();
    // Drawn last, so a seed keeps the schedule of the other faults it had before partitions existed. In the first
    // half of the rolling phase, while every cluster still has members to reboot.
    for _ in 0..mix.partitions {
        let action = Action::PartitionWorker;
        match rolling {
            Some(r) => rolling_events.push(Planned {
                at: r.mul_f64(rng.random_range(0.05..0.5)),
                action,
            }),
            None => place(
                &mut rng,
                action,
                false,
                deploy,
                rolling,
                &mut deploy_events,
                &mut rolling_events,
            ),
        }
    }
    deploy_events.sort_by_key(|p| p.at);
    rolling_events.sort_by_key(|p| p.at);
    Plan {
        deploy: deploy_events,
        rolling: rolling_events,
        late_ejects,
    }
}

/// Puts `action` at a random time of its phase: after the first twentieth (work has started) and before 85 % of
/// the estimate (work is surely still in flight).
fn place(
    rng: &mut StdRng,
    action: Action,
    in_rolling: bool,
    deploy: Duration,
    rolling: Option<Duration>,
    deploy_events: &mut Vec<Planned>,
    rolling_events: &mut Vec<Planned>,
) {
    let (length, events) = match (in_rolling, rolling) {
        (true, Some(r)) => (r, rolling_events),
        _ => (deploy, deploy_events),
    };
    let at = length.mul_f64(rng.random_range(0.05..0.85));
    events.push(Planned { at, action });
}

/// A transient fault hitting at most three requests (a hang at most two: each costs a call timeout).
fn transient(rng: &mut StdRng, incus: bool) -> Transient {
    let code = [500, 502, 503][rng.random_range(0..3)];
    if incus {
        let remaining = rng.random_range(1..=3);
        return if rng.random_bool(0.5) {
            Transient::IncusStatus { code, remaining }
        } else {
            Transient::IncusReset { remaining }
        };
    }
    match rng.random_range(0..4) {
        0 => Transient::Hang {
            remaining: rng.random_range(1..=2),
        },
        1 => Transient::Status {
            code,
            remaining: rng.random_range(1..=3),
        },
        2 => Transient::Busy {
            remaining: rng.random_range(1..=3),
        },
        _ => Transient::Reset {
            remaining: rng.random_range(1..=3),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIX: FaultMix = FaultMix {
        kills: 3,
        stops: 2,
        partitions: 2,
        pg_restarts: 2,
        promotions: 1,
        api_restarts: 1,
        bmc_faults: 40,
        late_ejects: 3,
    };

    #[test]
    fn one_seed_one_schedule_and_every_fault_planned() {
        let deploy = Duration::from_secs(200);
        let rolling = Some(Duration::from_secs(100));
        let a = plan(7, &MIX, 50, deploy, rolling);
        assert_eq!(a, plan(7, &MIX, 50, deploy, rolling));
        assert_ne!(a, plan(8, &MIX, 50, deploy, rolling));
        assert_eq!(a.planned(FaultKind::WorkerKill), 3);
        assert_eq!(a.planned(FaultKind::WorkerPartition), 2);
        assert_eq!(a.planned(FaultKind::PgRestart), 2);
        assert_eq!(a.planned(FaultKind::LateEject), 3);
        let transient: usize = FaultKind::ALL[6..12].iter().map(|k| a.planned(*k)).sum();
        assert_eq!(transient, 40);
        assert!(a.deploy.windows(2).all(|w| w[0].at <= w[1].at));
        assert!(a.deploy.iter().all(|p| p.at < deploy));
        assert!(
            a.deploy
                .iter()
                .all(|p| !matches!(p.action, Action::Transient(t) if t.is_incus())),
            "Incus faults only while clusters reboot"
        );
    }

    #[test]
    fn one_postgres_restart_is_long_and_the_others_short() {
        let p = plan(1, &MIX, 50, Duration::from_secs(100), None);
        assert!(p.rolling.is_empty());
        let mut downs: Vec<f64> = p
            .deploy
            .iter()
            .filter_map(|e| match e.action {
                Action::RestartPostgres { down } => Some(down.as_secs_f64()),
                _ => None,
            })
            .collect();
        downs.sort_by(f64::total_cmp);
        assert_eq!(downs.len(), 2);
        assert!((2.0..4.0).contains(&downs[0]), "{downs:?}");
        assert!((6.0..7.0).contains(&downs[1]), "{downs:?}");
    }

    #[test]
    fn partitions_fall_in_the_rolling_phase_when_there_is_one() {
        let rolling = Duration::from_secs(100);
        for seed in 0..20 {
            let p = plan(seed, &MIX, 50, Duration::from_secs(200), Some(rolling));
            let partitions: Vec<&Planned> = p
                .rolling
                .iter()
                .filter(|e| e.action == Action::PartitionWorker)
                .collect();
            assert_eq!(partitions.len(), 2, "seed {seed}: {p:?}");
            assert!(
                partitions.iter().all(|e| e.at < rolling / 2),
                "seed {seed}: {p:?}"
            );
            assert!(
                p.deploy.iter().all(|e| e.action != Action::PartitionWorker),
                "seed {seed}: {p:?}"
            );
        }
        let without = plan(1, &MIX, 50, Duration::from_secs(200), None);
        assert_eq!(
            without
                .deploy
                .iter()
                .filter(|e| e.action.kind() == FaultKind::WorkerPartition)
                .count(),
            2
        );
    }

    #[test]
    fn a_partition_is_its_own_kind_in_the_tally() {
        assert_eq!(Action::PartitionWorker.kind(), FaultKind::WorkerPartition);
        assert!(FaultKind::ALL.contains(&FaultKind::WorkerPartition));
        assert_eq!(
            serde_json::to_value(FaultKind::WorkerPartition).unwrap(),
            "worker_partition"
        );
        let none = plan(
            3,
            &FaultMix::NONE,
            5,
            Duration::from_secs(10),
            Some(Duration::from_secs(10)),
        );
        assert_eq!(none.planned(FaultKind::WorkerPartition), 0);
    }

    #[test]
    fn partitions_leave_a_seed_s_other_faults_where_they_were() {
        let (deploy, rolling) = (Duration::from_secs(200), Some(Duration::from_secs(100)));
        let without = FaultMix { partitions: 0, ..MIX };
        let other = |p: Plan| Plan {
            rolling: p
                .rolling
                .into_iter()
                .filter(|e| e.action != Action::PartitionWorker)
                .collect(),
            ..p
        };
        assert_eq!(
            other(plan(5, &MIX, 50, deploy, rolling)),
            plan(5, &without, 50, deploy, rolling)
        );
    }
}
