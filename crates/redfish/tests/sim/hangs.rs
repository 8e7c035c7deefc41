//! A call abandoned at its deadline keeps its BMC's slot until its connection is closed, so a hanging BMC
//! never sees two requests at once: the simulator's `max_concurrent` stays 1 whether the calls come back to
//! back from one client or at once from several tasks and clients sharing the limiter, over HTTP and TLS.

use std::time::Duration;

use racklift_bmc_sim::{Faults, PersonalityChoice, Sim, SimConfig, SimHandle};
use racklift_redfish::{BmcClient, ErrorClass, HostLimiter, Pin, RetryPolicy, TlsMode};

use crate::common::{TIME_SCALE, config, eventually, fleet};

/// Rounds of hangs per BMC: an overlap shows up within a few rounds when the slot is released too early.
const ROUNDS: usize = 20;
/// Requests each round's fault hangs.
const HUNG: u32 = 3;
/// The call deadline: long enough for a request to reach the BMC on loopback, short enough for 20 rounds.
const DEADLINE: Duration = Duration::from_millis(80);
/// The deadline of the calls that must succeed once the fault is cleared, so a loaded machine cannot fail them.
const RECOVERY: Duration = Duration::from_secs(10);

fn hang(remaining: u32) -> Faults {
    Faults {
        hang: true,
        remaining: Some(remaining),
        ..Default::default()
    }
}

/// A client for BMC `i` under `limiter`, with the short deadline and no polite retries (one request per call).
fn client(sim: &SimHandle, i: usize, limiter: &HostLimiter, tls: Option<TlsMode>) -> BmcClient {
    let mut cfg = config(sim, i);
    cfg.limiter = limiter.clone();
    cfg.call_deadline = DEADLINE;
    cfg.retry = RetryPolicy::NONE;
    if let Some(tls) = tls {
        cfg.tls = tls;
    }
    BmcClient::new(cfg).expect("client")
}

/// Each BMC of `sim`, in parallel: `ROUNDS` times, `HUNG` back-to-back calls that hit their deadline on a hanging
/// BMC, then the fault is cleared and a call answers. Then every BMC's audit says one request at a time.
async fn back_to_back(sim: &SimHandle, tls: Option<TlsMode>) {
    let limiter = HostLimiter::new(1);
    let runs = (0..sim.len()).map(|i| {
        let c = client(sim, i, &limiter, tls.clone());
        async move {
            for round in 0..ROUNDS {
                sim.set_faults(i, hang(HUNG));
                for call in 0..HUNG {
                    let err = c.read_system().await.expect_err("hang");
                    assert_eq!(
                        err.class(),
                        ErrorClass::Deadline,
                        "bmc {i} round {round} call {call}: {err:?}"
                    );
                }
                sim.set_faults(i, Faults::default());
                c.with_deadline(RECOVERY)
                    .read_system()
                    .await
                    .expect("the BMC answers again");
            }
        }
    });
    futures::future::join_all(runs).await;
    for i in 0..sim.len() {
        settled(sim, i).await;
    }
}

/// Waits for BMC `i` to hold no request any more, then checks it never held two.
async fn settled(sim: &SimHandle, i: usize) {
    eventually("no request in flight", Duration::from_secs(5), || async {
        sim.audit(i).in_flight == 0
    })
    .await;
    let audit = sim.audit(i);
    assert_eq!(audit.max_concurrent, 1, "bmc {i}: {audit:?}");
    assert!(audit.requests > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn back_to_back_calls_after_hangs_never_overlap_at_the_bmc() {
    let sim = fleet(5, "generic").await;
    back_to_back(&sim, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn back_to_back_calls_after_hangs_never_overlap_at_a_tls_bmc() {
    let sim = Sim::start(
        SimConfig::new(3, PersonalityChoice::Single(racklift_bmc_sim::Personality::Dell))
            .with_time_scale(TIME_SCALE)
            .with_tls(true),
    )
    .await
    .expect("sim");
    let pin = Pin::cert_of(sim.cert_der().expect("certificate"));
    back_to_back(&sim, Some(TlsMode::Pinned(vec![pin]))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_callers_behind_a_hung_call_never_overlap_at_the_bmc() {
    let sim = fleet(1, "generic").await;
    let limiter = HostLimiter::new(1);
    // Two tasks share one client, two more have clients of their own: the limit is the BMC's, not a client's.
    let shared = client(&sim, 0, &limiter, None);
    let clients = [
        shared.clone(),
        shared,
        client(&sim, 0, &limiter, None),
        client(&sim, 0, &limiter, None),
    ];
    for round in 0..ROUNDS {
        sim.set_faults(0, hang(HUNG + 1));
        let callers = clients.iter().cloned().map(|c| {
            tokio::spawn(async move {
                for _ in 0..3 {
                    // Behind a hung call a caller may run out of time waiting for the slot, or hang itself.
                    if let Err(err) = c.read_system().await {
                        assert_eq!(err.class(), ErrorClass::Deadline, "{err:?}");
                    }
                }
            })
        });
        for caller in futures::future::join_all(callers).await {
            caller.unwrap_or_else(|e| panic!("round {round}: {e}"));
        }
        sim.set_faults(0, Faults::default());
        for c in &clients {
            c.with_deadline(RECOVERY)
                .read_system()
                .await
                .expect("the BMC answers again");
        }
    }
    settled(&sim, 0).await;
}
