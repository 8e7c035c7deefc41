//! Confirming an insert or an eject by reading the slot back ([`BmcClient::verify_media`]) on every
//! personality, with and without the simulator's `drop_insert` fault (a BMC answering 204 and leaving the slot
//! empty); and following an insert's task monitor ([`BmcClient::wait_task`]) on a small in-test BMC that answers
//! InsertMedia 202, whose task completes, fails or is forgotten.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use racklift_bmc_sim::Faults;
use racklift_redfish::{
    BmcClient, BmcConfig, Credentials, Error, ErrorClass, Fence, SlotExpectation, SlotOwner, SlotRef,
    TaskMonitor, TaskPoll, TlsMode,
};
use serde_json::{Value, json};

use crate::common::{client, fleet, image_server};

#[tokio::test]
async fn a_dropped_insert_reads_back_empty_and_a_kept_one_holds_the_image() {
    let sim = fleet(5, "mix").await;
    let images = image_server().await;
    let window = Duration::from_secs(1);
    for i in 0..sim.len() {
        let personality = sim.personality(i);
        let c = client(&sim, i);
        let slot = c.select_cd_slot().await.expect("slot").slot;
        let image = format!("{images}/{}.iso", sim.name(i));
        // (fault, whether the slot confirms the insert)
        for (drop_insert, holds) in [(true, false), (false, true)] {
            sim.set_faults(
                i,
                Faults {
                    drop_insert,
                    ..Faults::default()
                },
            );
            c.insert_media(&slot, &image)
                .await
                .unwrap_or_else(|e| panic!("{personality:?}: the BMC answers the insert: {e}"));
            let back = c
                .verify_media(&slot, SlotExpectation::Holds(&image), window)
                .await
                .expect("read back");
            assert_eq!(
                back.confirmed, holds,
                "{personality:?} drop_insert={drop_insert}: {back:?}"
            );
            if holds {
                assert_eq!(back.reads, 1, "{personality:?}: a kept insert shows at once");
                assert!(back.media.holds(&image), "{personality:?}: {back:?}");
            } else {
                assert!(
                    back.reads >= 2,
                    "{personality:?}: read until the window ends: {back:?}"
                );
                assert_eq!(back.media.inserted, Some(false), "{personality:?}: {back:?}");
                assert!(!back.media.has_media(), "{personality:?}: {back:?}");
            }
        }
        let inserts = sim.truth(i)["counters"]["media_inserts"].as_u64();
        assert_eq!(inserts, Some(2), "{personality:?}: both inserts reached the BMC");

        c.eject_media(&slot).await.expect("eject");
        // An eject confirms too, after Dell's stale report of the old image.
        let back = c
            .verify_media(&slot, SlotExpectation::Empty, Duration::from_secs(5))
            .await
            .expect("read back");
        assert!(
            back.confirmed && !back.media.has_media(),
            "{personality:?}: {back:?}"
        );
        assert!(
            !SlotExpectation::Holds(&image).met_by(&back.media),
            "{personality:?}: an empty slot holds nothing"
        );
    }
}

/// How the in-test BMC's insert task ends.
#[derive(Clone, Copy, Debug)]
enum TaskEnd {
    /// `Completed`, with the image in the slot.
    Completed,
    /// `Completed`, the slot left empty.
    CompletedDropped,
    /// `Exception`, with an iDRAC message.
    Exception,
    /// The monitor answers 404 from the start.
    Forgotten,
    /// `Running` for ever.
    Never,
}

#[derive(Clone)]
struct TaskBmc {
    end: TaskEnd,
    image: Arc<Mutex<Option<String>>>,
    polls: Arc<Mutex<u32>>,
}

const SLOT: &str = "/redfish/v1/Systems/1/VirtualMedia/CD";
const MONITOR: &str = "/redfish/v1/TaskService/TaskMonitors/7";

async fn task_bmc(State(bmc): State<TaskBmc>, method: Method, uri: Uri, body: axum::body::Bytes) -> Response {
    let ok = |v: Value| axum::Json(v).into_response();
    match (method.as_str(), uri.path().trim_end_matches('/')) {
        ("GET", "/redfish/v1") => ok(json!({"Systems": {"@odata.id": "/redfish/v1/Systems"}})),
        ("GET", "/redfish/v1/Systems") => ok(json!({"Members": [{"@odata.id": "/redfish/v1/Systems/1"}]})),
        ("GET", "/redfish/v1/Systems/1") => ok(json!({"@odata.id": "/redfish/v1/Systems/1", "Id": "1",
            "VirtualMedia": {"@odata.id": "/redfish/v1/Systems/1/VirtualMedia"}})),
        ("GET", "/redfish/v1/Systems/1/VirtualMedia") => ok(json!({"Members": [{"@odata.id": SLOT}]})),
        ("GET", SLOT) => {
            let image = bmc.image.lock().expect("lock").clone();
            ok(json!({"@odata.id": SLOT, "Id": "CD", "MediaTypes": ["CD", "DVD"],
                "Image": image, "Inserted": image.is_some(),
                "Actions": {"#VirtualMedia.InsertMedia": {"target": format!("{SLOT}/Actions/VirtualMedia.InsertMedia")}}}))
        }
        ("POST", p) if p.ends_with("VirtualMedia.InsertMedia") => {
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            if matches!(bmc.end, TaskEnd::Completed) {
                *bmc.image.lock().expect("lock") = body["Image"].as_str().map(str::to_owned);
            }
            let mut resp = (StatusCode::ACCEPTED, axum::Json(json!({"TaskState": "New"}))).into_response();
            resp.headers_mut()
                .insert(header::LOCATION, MONITOR.parse().expect("location"));
            resp
        }
        ("GET", MONITOR) => {
            let polls = {
                let mut polls = bmc.polls.lock().expect("lock");
                *polls += 1;
                *polls
            };
            let task = |state: &str, messages: Value| {
                json!({"@odata.id": "/redfish/v1/TaskService/Tasks/7",
                "TaskState": state, "Messages": messages})
            };
            let running = || {
                let mut resp = (StatusCode::ACCEPTED, axum::Json(task("Running", json!([])))).into_response();
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, "1".parse().expect("retry-after"));
                resp
            };
            match bmc.end {
                TaskEnd::Forgotten => StatusCode::NOT_FOUND.into_response(),
                TaskEnd::Never => running(),
                _ if polls < 3 => running(),
                TaskEnd::Exception => ok(task(
                    "Exception",
                    json!([{"MessageId": "IDRAC.2.8.RAC0904",
                    "Message": "The remote file location is not accessible or reachable."}]),
                )),
                TaskEnd::Completed | TaskEnd::CompletedDropped => ok(task("Completed", json!([]))),
            }
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

#[tokio::test]
async fn an_insert_task_is_followed_to_its_end_before_the_slot_is_read_back() {
    let image = "https://media.example/racklift.iso";
    let slot = SlotRef {
        owner: SlotOwner::System,
        id: "CD".into(),
    };
    // (how the task ends, what following it gives, whether the slot then holds the image)
    let cases: [(TaskEnd, Result<TaskPoll, &str>, bool); 5] = [
        (
            TaskEnd::Completed,
            Ok(TaskPoll::Done {
                status: 200,
                body: None,
            }),
            true,
        ),
        (
            TaskEnd::CompletedDropped,
            Ok(TaskPoll::Done {
                status: 200,
                body: None,
            }),
            false,
        ),
        (TaskEnd::Exception, Err("task"), false),
        (TaskEnd::Forgotten, Ok(TaskPoll::Gone), false),
        (TaskEnd::Never, Err("deadline"), false),
    ];
    for (end, expected, holds) in cases {
        let bmc = TaskBmc {
            end,
            image: Arc::default(),
            polls: Arc::default(),
        };
        let app = axum::Router::new().fallback(task_bmc).with_state(bmc.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        let mut config = BmcConfig::new("task-bmc", url, Credentials::new("u", "p"), TlsMode::WebPkiRoots);
        // Long enough for two 1 s `Retry-After`s, short enough that a task running for ever ends the test soon.
        config.call_deadline = Duration::from_secs(4);
        let c = BmcClient::new(config).expect("client").with_fence(Fence(9));

        let inserted = c.insert_media(&slot, image).await.expect("insert");
        let monitor = inserted
            .task
            .clone()
            .unwrap_or_else(|| panic!("{end:?}: a 202 hands out a monitor"));
        assert_eq!(monitor, TaskMonitor::from_uri(MONITOR), "{end:?}");
        let followed = c.wait_task(&monitor).await;
        match (&expected, followed) {
            (Ok(TaskPoll::Done { status, .. }), Ok(TaskPoll::Done { status: got, .. })) => {
                assert_eq!(*status, got, "{end:?}");
                assert_eq!(
                    *bmc.polls.lock().expect("lock"),
                    3,
                    "{end:?}: polled until the task ended"
                );
            }
            (Ok(TaskPoll::Gone), Ok(TaskPoll::Gone)) => {}
            (
                Err("task"),
                Err(Error::TaskFailed {
                    uri,
                    state,
                    message_ids,
                }),
            ) => {
                assert_eq!((uri.as_str(), state.as_str()), (MONITOR, "Exception"), "{end:?}");
                assert_eq!(message_ids, vec!["IDRAC.2.8.RAC0904".to_owned()], "{end:?}");
            }
            (Err("deadline"), Err(e)) => assert_eq!(e.class(), ErrorClass::Deadline, "{end:?}: {e}"),
            (expected, got) => panic!("{end:?}: expected {expected:?}, got {got:?}"),
        }
        let back = c
            .verify_media(&slot, SlotExpectation::Holds(image), Duration::from_millis(600))
            .await
            .expect("read back");
        assert_eq!(back.confirmed, holds, "{end:?}: {back:?}");
    }
}
