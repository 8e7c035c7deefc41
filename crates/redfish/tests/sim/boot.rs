//! Boot override: Once preferred on every personality, Continuous where Once is refused,
//! restore only our own override, and iLO's refusal during POST as a retryable error.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use racklift_bmc_sim::{PersonalityChoice, Sim, SimConfig};
use racklift_redfish::{
    BmcClient, BmcConfig, BootSourceOverrideEnabled as Enabled, BootSourceOverrideMode,
    BootSourceOverrideTarget as Target, Credentials, ErrorClass, Fence, PowerState, TlsMode,
};
use serde_json::{Value, json};

use crate::common::{TIME_SCALE, client, eventually, fleet};

#[tokio::test]
async fn once_preferred_and_restored_on_every_personality() {
    let sim = fleet(5, "mix").await;
    for i in 0..sim.len() {
        let personality = sim.personality(i);
        let c = client(&sim, i);
        let outcome = c
            .set_boot_override(Target::Cd, Some(BootSourceOverrideMode::UEFI))
            .await
            .expect("override");
        assert_eq!(outcome.accepted, Enabled::Once, "{personality:?}");
        assert!(!outcome.unchanged);
        let boot = c.read_boot().await.expect("boot");
        assert_eq!(
            (boot.target, boot.enabled.clone()),
            (Some(Target::Cd), Some(Enabled::Once)),
            "{personality:?}"
        );
        assert!(
            c.set_boot_override(Target::Cd, None)
                .await
                .expect("again")
                .unchanged,
            "{personality:?}"
        );

        // Someone else's override is left alone.
        assert!(!c.clear_boot_override(Target::Pxe).await.expect("not ours"));
        assert!(
            c.clear_boot_override(Target::Cd).await.expect("clear"),
            "{personality:?}"
        );
        let boot = c.read_boot().await.expect("boot");
        assert_eq!(boot.enabled, Some(Enabled::Disabled), "{personality:?}");
        assert!(!c.clear_boot_override(Target::Cd).await.expect("clear again"));
    }
}

#[tokio::test]
async fn targets_outside_allowable_values_are_refused_before_sending() {
    let sim = fleet(1, "lenovo").await;
    let c = client(&sim, 0);
    let allowed = c
        .read_boot()
        .await
        .expect("boot")
        .allowed_targets
        .expect("advertised");
    assert!(!allowed.iter().any(|t| t == "UefiBootNext"), "{allowed:?}");
    let err = c
        .set_boot_override(Target::UefiBootNext, None)
        .await
        .expect_err("not advertised");
    assert_eq!(err.class(), ErrorClass::Unsupported);
    assert_eq!(sim.audit(0).mutations, 0);
}

#[tokio::test]
async fn ilo_refuses_changes_during_post_retryably() {
    let mut config = SimConfig::new(1, PersonalityChoice::Single(racklift_bmc_sim::Personality::Hpe))
        .with_time_scale(TIME_SCALE);
    // Long POST stages (0.6 s each at this scale) so the test can land inside POST.
    config.timings.post_stage = Duration::from_secs(60);
    let sim = Sim::start(config).await.expect("sim");
    let c = client(&sim, 0);
    c.power_off().await.expect("off");
    eventually("power off", Duration::from_secs(10), || async {
        c.read_system().await.expect("system").power_state == Some(PowerState::Off)
    })
    .await;
    c.power_on().await.expect("on");
    eventually("POST", Duration::from_secs(10), || async {
        let system = c.read_system().await.expect("system");
        let rank = system
            .boot_progress
            .and_then(|p| p.last_state)
            .and_then(|s| s.rank());
        rank.is_some_and(|r| (1..=6).contains(&r))
    })
    .await;
    let err = c
        .set_boot_override(Target::Cd, None)
        .await
        .expect_err("refused in POST");
    assert_eq!(err.status(), Some(400));
    assert!(err.has_message("UnableToModifyDuringSystemPOST"), "{err:?}");
    assert!(err.is_retryable(), "a durable retry after POST succeeds");
}

/// A one-system BMC whose `Boot` refuses `Once` with `PropertyValueNotInList` (no
/// AllowableValues advertised), like firmware that only does continuous overrides.
#[derive(Clone, Default)]
struct ContinuousOnly {
    boot: Arc<Mutex<Value>>,
    patches: Arc<Mutex<Vec<Value>>>,
}

async fn root() -> Json<Value> {
    Json(json!({"Systems": {"@odata.id": "/redfish/v1/Systems"}}))
}

async fn systems() -> Json<Value> {
    Json(json!({"Members": [{"@odata.id": "/redfish/v1/Systems/1"}]}))
}

async fn system(State(s): State<ContinuousOnly>) -> Json<Value> {
    let boot = s.boot.lock().expect("lock").clone();
    Json(json!({"@odata.id": "/redfish/v1/Systems/1", "Id": "1", "PowerState": "Off", "Boot": boot}))
}

async fn patch_system(State(s): State<ContinuousOnly>, Json(body): Json<Value>) -> Response {
    s.patches.lock().expect("lock").push(body.clone());
    let boot = &body["Boot"];
    if boot["BootSourceOverrideEnabled"] == "Once" {
        let err = json!({"error": {"code": "Base.1.8.GeneralError", "message": "see ExtendedInfo",
            "@Message.ExtendedInfo": [{"MessageId": "Base.1.8.PropertyValueNotInList",
                "MessageArgs": ["Once", "BootSourceOverrideEnabled"],
                "RelatedProperties": ["#/Boot/BootSourceOverrideEnabled"]}]}});
        return (StatusCode::BAD_REQUEST, Json(err)).into_response();
    }
    let mut current = s.boot.lock().expect("lock");
    for (k, v) in boot.as_object().into_iter().flatten() {
        current[k] = v.clone();
    }
    StatusCode::NO_CONTENT.into_response()
}

#[tokio::test]
async fn continuous_where_once_is_refused() {
    let state = ContinuousOnly::default();
    *state.boot.lock().expect("lock") =
        json!({"BootSourceOverrideEnabled": "Disabled", "BootSourceOverrideTarget": "None"});
    let app = axum::Router::new()
        .route("/redfish/v1/", axum::routing::get(root))
        .route("/redfish/v1/Systems", axum::routing::get(systems))
        .route(
            "/redfish/v1/Systems/1",
            axum::routing::get(system).patch(patch_system),
        )
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });

    let config = BmcConfig::new(
        "continuous-only",
        url,
        Credentials::new("u", "p"),
        TlsMode::WebPkiRoots,
    );
    let c = BmcClient::new(config).expect("client").with_fence(Fence(9));
    let outcome = c.set_boot_override(Target::Cd, None).await.expect("override");
    assert_eq!(outcome.accepted, Enabled::Continuous);
    assert_eq!(outcome.reported, Some(Enabled::Continuous));
    let patches = state.patches.lock().expect("lock").clone();
    let sent: Vec<&Value> = patches
        .iter()
        .map(|p| &p["Boot"]["BootSourceOverrideEnabled"])
        .collect();
    assert_eq!(sent, vec![&json!("Once"), &json!("Continuous")]);
}
