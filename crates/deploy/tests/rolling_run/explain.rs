use racklift_deploy::rolling_run::explain::run_failure_sentence;

use super::*;

// ---------------------------------------------------------------------------------------------------------------
// The sentence a failed run carries into its dead letter
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn every_end_of_a_run_has_a_sentence_for_people() {
    // (label, the misbehaving server and step, how, words the sentence must carry)
    let rows: [(&str, St, Misbehave, &[&str]); 3] = [
        (
            "a reboot that never comes back",
            St::Reboot,
            Misbehave::Hangs,
            &[
                "in state rebooting, step reboot",
                "waiting for: back up",
                "cannot be rebooted",
                "its own API not answering",
            ],
        ),
        (
            "an evacuation that never ends",
            St::Evacuate,
            Misbehave::Hangs,
            &[
                "in state evacuating, step evacuate",
                "waiting for: evacuated",
                "ran out of attempts",
                "member Evacuating",
            ],
        ),
        (
            "a restore that never starts",
            St::Restore,
            Misbehave::Ignored,
            &["step restore", "ran out of attempts", "member Evacuated"],
        ),
    ];
    for (label, step, how, says) in rows {
        let list = three_online();
        let run = launch(RunKind::Reboot, &list);
        let cluster = Cluster::new(&RunKind::Reboot, &list).misbehaving("s1", step, how);
        let trace = drive(run, cluster, &cfg(), &settings(None));
        let RunDecision::Fail {
            server,
            step,
            state,
            reason,
        } = &trace.end
        else {
            panic!("{label}: {:?}", trace.end);
        };
        let last = trace.ticks.last().map(|k| &k.facts[server.as_str()]);
        let text = run_failure_sentence("c1", "rolling_reboot", server, *state, *step, reason, last);
        assert!(
            text.starts_with("cluster c1: rolling reboot ended on server s1 in state "),
            "{label}: {text}"
        );
        assert!(text.contains("Last seen: "), "{label}: {text}");
        for word in says {
            assert!(text.contains(word), "{label}: {word:?} missing from {text}");
        }
        for debug in ["Some(", "None", "{ ", "\""] {
            assert!(!text.contains(debug), "{label}: {debug:?} in {text}");
        }
    }
}

#[test]
fn a_state_the_run_cannot_drive_is_named_in_words() {
    let list = three_online();
    let run = launch(RunKind::Reboot, &list);
    let mut facts: BTreeMap<String, MemberFacts> = list.into_iter().collect();
    facts.get_mut("s1").unwrap().status = Some(MS::Other("Blocked".into()));
    let (_, d) = decide_run(&run, &facts, t(0), &cfg(), &settings(None));
    let RunDecision::Fail {
        server,
        step,
        state,
        reason,
    } = d
    else {
        panic!("{d:?}");
    };
    let text = run_failure_sentence(
        "c1",
        "rolling_reboot",
        &server,
        state,
        step,
        &reason,
        facts.get(&server),
    );
    assert!(
        text.contains("undefined") && text.contains("member Blocked"),
        "{text}"
    );
    assert!(!text.contains("Other("), "{text}");
}
