//! Property tests: arbitrary fact sequences and action outcomes, driven the way a worker would.

mod common;

use std::collections::BTreeMap;

use common::*;
use proptest::prelude::*;
use racklift_deploy::facts::{
    AttrValue, BiosFacts, BootProgress, CancelRequest, KeyDb, MediaProgress, MediaSlot, PowerState,
    TaskState, TransferMethod,
};
use racklift_deploy::ranges::RangeSet;
use racklift_deploy::table::is_edge;
use racklift_deploy::{
    Decision, Deployment, Facts, Jitter, Outcome, State, Step, Time, apply_outcome, decide,
};

const PROGRESS: [BootProgress; 11] = [
    BootProgress::None,
    BootProgress::PrimaryProcessorInitializationStarted,
    BootProgress::BusInitializationStarted,
    BootProgress::MemoryInitializationStarted,
    BootProgress::SecondaryProcessorInitializationStarted,
    BootProgress::PCIResourceConfigStarted,
    BootProgress::SystemHardwareInitializationComplete,
    BootProgress::SetupEntered,
    BootProgress::OSBootStarted,
    BootProgress::OSRunning,
    BootProgress::OEM,
];

fn arb_power() -> impl Strategy<Value = Option<PowerState>> {
    prop::option::weighted(
        0.9,
        prop_oneof![
            4 => Just(PowerState::On),
            4 => Just(PowerState::Off),
            1 => Just(PowerState::PoweringOn),
            1 => Just(PowerState::PoweringOff),
        ],
    )
}

fn arb_media() -> impl Strategy<Value = Option<MediaSlot>> {
    prop::option::weighted(
        0.9,
        (any::<bool>(), any::<bool>(), prop::option::of(any::<bool>())),
    )
    .prop_map(|m| {
        m.map(|(inserted, ours, upload)| MediaSlot {
            inserted,
            image: inserted.then(|| {
                if ours {
                    IMAGE.to_owned()
                } else {
                    "stale.iso".to_owned()
                }
            }),
            transfer_method: upload.map(|u| {
                if u {
                    TransferMethod::Upload
                } else {
                    TransferMethod::Stream
                }
            }),
        })
    })
}

fn arb_bios() -> impl Strategy<Value = Option<BiosFacts>> {
    let attr = |name: &'static str, good: AttrValue, bad: AttrValue| {
        // Mostly right, so walks get past the BIOS passes often enough to reach the later states.
        prop::option::weighted(0.9, prop::bool::weighted(0.8))
            .prop_map(move |v| v.map(|ok| (name.to_owned(), if ok { good.clone() } else { bad.clone() })))
    };
    prop::option::weighted(
        0.9,
        (
            attr(
                "SriovGlobalEnable",
                AttrValue::Text("Enabled".into()),
                AttrValue::Text("Disabled".into()),
            ),
            attr("SriovVfCount", AttrValue::Int(8), AttrValue::Int(0)),
            any::<bool>(),
        ),
    )
    .prop_map(|b| {
        b.map(|(first, deferred, staged)| {
            let current: BTreeMap<_, _> = first.into_iter().chain(deferred).collect();
            let pending = if staged {
                plan().bios.attributes
            } else {
                BTreeMap::new()
            };
            BiosFacts { current, pending }
        })
    })
}

fn arb_key_dbs() -> impl Strategy<Value = BTreeMap<KeyDb, Vec<racklift_deploy::facts::Fingerprint>>> {
    any::<u8>().prop_map(|mask| {
        let mut dbs = correct_key_dbs();
        for (i, db) in KeyDb::ALL.iter().enumerate() {
            match (mask >> (2 * i)) & 3 {
                0 => {
                    dbs.remove(db);
                }
                1 => dbs.entry(*db).or_default().push(fp("stranger")),
                _ => {}
            }
        }
        dbs
    })
}

prop_compose! {
    fn arb_facts(cancel_weight: f64)(
        power in arb_power(),
        lrt in prop::option::of(0i64..4),
        progress in prop::option::of(0usize..PROGRESS.len()),
        media in arb_media(),
        bios in arb_bios(),
        task in prop::option::of(prop_oneof![
            Just(TaskState::Running), Just(TaskState::Completed), Just(TaskState::Failed), Just(TaskState::Unavailable)
        ]),
        key_dbs in arb_key_dbs(),
        registered in prop::bool::weighted(0.03),
        refused in prop::bool::weighted(0.05),
        bios_absent in prop::bool::weighted(0.02),
        read in prop::option::of((-1i64..1500, 0i64..600)),
        cancel in (0.0f64..1.0, any::<bool>()),
    ) -> Facts {
        Facts {
            power,
            last_reset_time: lrt.map(|i| t(i * 1000)),
            boot_progress: progress.map(|i| PROGRESS[i]),
            boot_progress_at: lrt.map(|i| t(i * 1000 + 1)),
            media,
            bios_absent: bios_absent && bios.is_none(),
            bios,
            bios_task: task,
            key_dbs,
            registered,
            registration_refused: refused.then(|| "the registration token was already used".to_owned()),
            media_progress: read.map(|(mib, ago)| MediaProgress {
                bytes_read: if mib < 0 { -1 } else { mib * MIB as i64 },
                last_read_at: Some(t(-ago)),
            }),
            cancel: (cancel.0 < cancel_weight).then_some(CancelRequest { skip_cleanup: cancel.1 }),
        }
    }
}

fn arb_outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        22 => Just(Outcome::Succeeded),
        2 => Just(Outcome::Accepted { task_monitor: "/redfish/v1/TaskMonitors/1".into() }),
        3 => Just(Outcome::Retryable { error: "503".into() }),
        2 => Just(Outcome::DeadlineExpired),
        1 => Just(Outcome::Fatal { error: "400".into() }),
    ]
}

/// One tick of the world: what the worker observes, how an action it issues ends, and the jitter.
fn arb_ticks(cancel_weight: f64) -> impl Strategy<Value = Vec<(Facts, Outcome, f64)>> {
    prop::collection::vec((arb_facts(cancel_weight), arb_outcome(), 0.0f64..1.0), 1..48)
}

fn deadline() -> Time {
    t(2 * 60 * 60)
}

fn new_deployment(force: bool, skip_sb: bool) -> Deployment {
    let mut d = Deployment::new(plan(), t(0));
    d.plan.force = force;
    d.plan.skip_secure_boot_certificates = skip_sb;
    d
}

/// Checks one step against the table and against the machine it came from.
fn check(before: &Deployment, step: &Step, now: Time) -> Result<(), TestCaseError> {
    match step.transition {
        Some(tr) => {
            prop_assert_eq!(tr.from, before.machine.state);
            prop_assert_eq!(tr.to, step.machine.state);
            prop_assert!(
                is_edge(tr.from, tr.to),
                "{} --> {} is not an edge",
                tr.from,
                tr.to
            );
            prop_assert_eq!(step.machine.seq, before.machine.seq + 1);
        }
        None => {
            prop_assert_eq!(step.machine.state, before.machine.state);
            prop_assert_eq!(step.machine.seq, before.machine.seq);
        }
    }
    prop_assert_eq!(step.changed, step.machine != before.machine);
    // A BIOS task monitor only lives between its apply and the end of that apply's wait.
    prop_assert!(
        step.machine.bios_task_monitor.is_none()
            || matches!(
                step.machine.state,
                State::PowerOnBIOS
                    | State::PowerOnBIOSDeferred
                    | State::WaitBIOSApplied
                    | State::WaitBIOSAppliedDeferred
            ),
        "monitor kept into {}",
        step.machine.state
    );
    match step.decision {
        Decision::Snooze { until } => prop_assert!(until >= now && until <= deadline()),
        Decision::Retry { at } => prop_assert!(at >= now && at <= deadline()),
        Decision::Finished(_) => prop_assert!(step.machine.state.is_terminal()),
        Decision::Act {
            call_deadline_secs, ..
        } => prop_assert!(call_deadline_secs >= 1),
        Decision::Continue => {}
    }
    Ok(())
}

/// Where a drive stopped.
struct Drive {
    d: Deployment,
    decisions: usize,
    now: Time,
    finished: bool,
    visited: Vec<State>,
}

/// Drives a deployment like a worker: decide, act, persist, sleep as told, for at most
/// `max_decisions` decisions.
fn drive(
    mut d: Deployment,
    ticks: &[(Facts, Outcome, f64)],
    max_decisions: usize,
    start: Time,
) -> Result<Drive, TestCaseError> {
    let mut now = start;
    let mut visited = vec![d.machine.state];
    let mut chain = 0;
    for i in 0..max_decisions {
        let (facts, outcome, jitter) = &ticks[i % ticks.len()];
        let step = decide(&d, facts, now, &cfg());
        check(&d, &step, now)?;
        d.machine = step.machine.clone();
        visited.push(d.machine.state);
        match step.decision {
            Decision::Finished(_) => {
                return Ok(Drive {
                    d,
                    decisions: i,
                    now,
                    finished: true,
                    visited,
                });
            }
            Decision::Continue => {
                chain += 1;
                prop_assert!(chain <= 40, "decisions keep transitioning without blocking");
                continue;
            }
            Decision::Snooze { until } => now = until.max(now + chrono::TimeDelta::seconds(1)),
            Decision::Retry { at } => now = at.max(now + chrono::TimeDelta::seconds(1)),
            Decision::Act { .. } => {
                now += chrono::TimeDelta::seconds(1);
                let applied = apply_outcome(&d, outcome, now, &cfg(), Jitter::new(*jitter));
                check(&d, &applied, now)?;
                d.machine = applied.machine;
                visited.push(d.machine.state);
                if let Decision::Retry { at } = applied.decision {
                    now = at.max(now);
                }
            }
        }
        chain = 0;
    }
    Ok(Drive {
        d,
        decisions: max_decisions,
        now,
        finished: false,
        visited,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every transition any fact sequence produces is an edge of the table, and every
    /// deployment driven as told reaches a terminal state by the overall deadline.
    #[test]
    fn every_decision_is_an_edge_and_everything_ends_by_the_deadline(
        ticks in arb_ticks(0.01),
        force in any::<bool>(),
        skip_sb in any::<bool>(),
    ) {
        let Drive { d, now, finished, .. } = drive(new_deployment(force, skip_sb), &ticks, 20_000, t(0))?;
        prop_assert!(finished, "not terminal after 20000 decisions");
        prop_assert!(d.machine.state.is_terminal());
        prop_assert!(now <= deadline(), "ended at {now}, after the deadline");
        if d.machine.state == State::Failed {
            prop_assert!(d.machine.failure.is_some());
        }
    }

    /// A cancel preempts whatever state the deployment reached, except the clean up it
    /// triggered itself, and then ends canceled (or failed, if the clean up itself fails).
    #[test]
    fn cancel_always_wins_except_during_cleanup(
        ticks in arb_ticks(0.0),
        prefix in 0usize..400,
        skip in any::<bool>(),
        cancel_ticks in arb_ticks(0.0),
    ) {
        // Cancel at a point the deployment reaches before it ends on its own.
        let whole = drive(new_deployment(false, false), &ticks, 20_000, t(0))?;
        let at = prefix % whole.decisions.max(1);
        let Drive { d, now, finished, .. } = drive(new_deployment(false, false), &ticks, at, t(0))?;
        let before = d.machine.state;
        prop_assume!(!finished && !before.is_terminal());
        prop_assume!(now < deadline());
        let cancel = Facts { cancel: Some(CancelRequest { skip_cleanup: skip }), ..on() };
        let step = decide(&d, &cancel, now, &cfg());
        if before.is_cancel_cleanup() {
            prop_assert!(step.transition.is_none_or(|tr| !matches!(tr.to, State::Canceled if skip)));
        } else {
            let want = if skip { State::Canceled } else { State::Cancel };
            prop_assert_eq!(step.transition.map(|tr| tr.to), Some(want));
        }
        // Keep the cancel request in every later observation: it must end canceled or failed.
        let ticks: Vec<_> = cancel_ticks
            .into_iter()
            .map(|(f, o, j)| (Facts { cancel: Some(CancelRequest { skip_cleanup: skip }), ..f }, o, j))
            .collect();
        let Drive { d, finished, visited, .. } = drive(d, &ticks, 20_000, now)?;
        prop_assert!(finished);
        prop_assert!(matches!(d.machine.state, State::Canceled | State::Failed | State::Completed));
        if d.machine.state == State::Completed {
            prop_assert!(false, "a canceled deployment completed: {:?}", visited);
        }
    }

    /// Re-evaluating a waiting deployment with the same facts at the same time changes nothing:
    /// a retried job or a duplicate wake-up is harmless.
    #[test]
    fn decisions_are_repeatable(ticks in arb_ticks(0.02), prefix in 0usize..300) {
        let Drive { d, now, .. } = drive(new_deployment(true, false), &ticks, prefix, t(0))?;
        let facts = &ticks[prefix % ticks.len()].0;
        let first = decide(&d, facts, now, &cfg());
        prop_assert_eq!(&decide(&d, facts, now, &cfg()), &first, "not deterministic");
        if matches!(first.decision, Decision::Snooze { .. } | Decision::Retry { .. }) {
            let again = decide(&Deployment { machine: first.machine.clone(), ..d.clone() }, facts, now, &cfg());
            prop_assert!(!again.changed, "a second evaluation changed the machine again");
            prop_assert_eq!(again.decision, first.decision);
        }
    }

    /// The range set never under-counts the true union, stays sorted, disjoint and bounded, and
    /// is exact while it has room.
    #[test]
    fn range_set_never_under_counts(
        ranges in prop::collection::vec((0u64..4096, 1u64..300), 0..60),
        cap in 1usize..10,
    ) {
        let mut bounded = RangeSet::new(cap);
        let mut roomy = RangeSet::new(1000);
        let mut truth = vec![false; 4096 + 300];
        for (start, len) in &ranges {
            bounded.insert(*start, start + len);
            roomy.insert(*start, start + len);
            for b in &mut truth[*start as usize..(start + len) as usize] {
                *b = true;
            }
        }
        let union = truth.iter().filter(|b| **b).count() as u64;
        prop_assert!(bounded.total() >= union, "under-counted: {} < {}", bounded.total(), union);
        prop_assert_eq!(roomy.total(), union);
        prop_assert!(bounded.ranges().len() <= cap);
        for set in [&bounded, &roomy] {
            for w in set.ranges().windows(2) {
                prop_assert!(w[0].1 < w[1].0, "ranges overlap or touch: {:?}", set.ranges());
            }
            for (s, e) in set.ranges() {
                prop_assert!(s < e);
            }
        }
        for (start, len) in &ranges {
            let covered = bounded.ranges().iter().any(|(s, e)| s <= start && start + len <= *e);
            prop_assert!(covered, "[{}, {}) not covered", start, start + len);
        }
    }
}
