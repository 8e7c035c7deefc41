//! Insert fallbacks no simulator personality produces, against a small in-test BMC: a slot
//! whose standard action answers 405 (falls to the OEM action), one that reports a missing
//! parameter (added and retried), and a PATCH-only slot that rejects its own ETag (412, then
//! retried without `If-Match`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use racklift_redfish::{BmcClient, BmcConfig, Credentials, Fence, InsertMethod, SlotOwner, SlotRef, TlsMode};
use serde_json::{Value, json};

/// One request seen: method, path, `If-Match`, JSON body.
type Logged = (String, String, Option<String>, Value);

#[derive(Clone, Default)]
struct Mock {
    images: Arc<Mutex<HashMap<String, String>>>,
    log: Arc<Mutex<Vec<Logged>>>,
}

const VM: &str = "/redfish/v1/Systems/1/VirtualMedia";

fn slot_body(mock: &Mock, id: &str) -> Value {
    let image = mock.images.lock().expect("lock").get(id).cloned();
    let mut body = json!({
        "@odata.id": format!("{VM}/{id}"), "Id": id, "MediaTypes": ["CD", "DVD"],
        "Image": image, "Inserted": image.is_some(),
    });
    let actions = match id {
        "A" => json!({"#VirtualMedia.InsertMedia": {"target": format!("{VM}/A/insert")},
                      "Oem": {"Hpe": {"#HpeiLOVirtualMedia.InsertVirtualMedia": {"target": format!("{VM}/A/oem-insert")}}}}),
        "B" => json!({"#VirtualMedia.InsertMedia": {"target": format!("{VM}/B/insert")}}),
        _ => Value::Null,
    };
    if !actions.is_null() {
        body["Actions"] = actions;
    }
    body
}

fn missing(param: &str) -> Response {
    let err = json!({"error": {"code": "Base.1.8.GeneralError", "message": "x",
        "@Message.ExtendedInfo": [{"MessageId": "Base.1.8.ActionParameterMissing", "MessageArgs": ["InsertMedia", param]}]}});
    (StatusCode::BAD_REQUEST, axum::Json(err)).into_response()
}

async fn handle(
    State(mock): State<Mock>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let if_match = headers
        .get(header::IF_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    mock.log
        .lock()
        .expect("lock")
        .push((method.to_string(), path.clone(), if_match.clone(), body.clone()));
    let ok = |v: Value| axum::Json(v).into_response();
    let insert = |id: &str| {
        mock.images.lock().expect("lock").insert(
            id.to_owned(),
            body["Image"].as_str().unwrap_or_default().to_owned(),
        );
        StatusCode::NO_CONTENT.into_response()
    };
    match (method.as_str(), path.trim_end_matches('/')) {
        ("GET", "/redfish/v1") => ok(json!({"Systems": {"@odata.id": "/redfish/v1/Systems"}})),
        ("GET", "/redfish/v1/Systems") => ok(json!({"Members": [{"@odata.id": "/redfish/v1/Systems/1"}]})),
        ("GET", "/redfish/v1/Systems/1") => {
            ok(json!({"@odata.id": "/redfish/v1/Systems/1", "Id": "1", "VirtualMedia": {"@odata.id": VM}}))
        }
        ("GET", VM) => {
            let members: Vec<Value> = ["A", "B", "C"]
                .iter()
                .map(|s| json!({"@odata.id": format!("{VM}/{s}")}))
                .collect();
            ok(json!({ "Members": members }))
        }
        ("POST", p) if p == format!("{VM}/A/insert") => StatusCode::METHOD_NOT_ALLOWED.into_response(),
        ("POST", p) if p == format!("{VM}/A/oem-insert") => insert("A"),
        ("POST", p) if p == format!("{VM}/B/insert") => {
            if body.get("TransferProtocolType").is_none() {
                missing("TransferProtocolType")
            } else {
                insert("B")
            }
        }
        ("PATCH", p) if p == format!("{VM}/C") => {
            if if_match.is_some() {
                StatusCode::PRECONDITION_FAILED.into_response()
            } else {
                insert("C")
            }
        }
        ("GET", p) if p.starts_with(VM) => {
            let id = p.rsplit('/').next().unwrap_or_default();
            let mut resp = ok(slot_body(&mock, id));
            resp.headers_mut()
                .insert(header::ETAG, "W/\"7\"".parse().expect("etag"));
            resp
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

#[tokio::test]
async fn oem_action_missing_parameter_and_etag_fallbacks() {
    let mock = Mock::default();
    let app = axum::Router::new().fallback(handle).with_state(mock.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let c = BmcClient::new(BmcConfig::new(
        "mock",
        url,
        Credentials::new("u", "p"),
        TlsMode::WebPkiRoots,
    ))
    .expect("client")
    .with_fence(Fence(4));
    let slot = |id: &str| SlotRef {
        owner: SlotOwner::System,
        id: id.into(),
    };
    let image = "https://media.example/racklift.iso";

    assert_eq!(
        c.insert_media(&slot("A"), image).await.expect("A").method,
        InsertMethod::OemAction
    );
    assert_eq!(
        c.insert_media(&slot("B"), image).await.expect("B").method,
        InsertMethod::Action
    );
    assert_eq!(
        c.insert_media(&slot("C"), image).await.expect("C").method,
        InsertMethod::Patch
    );
    for id in ["A", "B", "C"] {
        assert!(c.read_media(&slot(id)).await.expect("read").holds(image), "{id}");
    }

    let log = mock.log.lock().expect("lock").clone();
    let b_posts: Vec<&Value> = log
        .iter()
        .filter(|(m, p, _, _)| m == "POST" && p.ends_with("/B/insert"))
        .map(|(_, _, _, b)| b)
        .collect();
    assert_eq!(b_posts.len(), 2, "{b_posts:?}");
    assert_eq!(b_posts[1]["TransferProtocolType"], "HTTPS");
    let c_patches: Vec<Option<String>> = log
        .iter()
        .filter(|(m, p, _, _)| m == "PATCH" && p.ends_with("/C"))
        .map(|(_, _, i, _)| i.clone())
        .collect();
    assert_eq!(c_patches, vec![Some("W/\"7\"".to_owned()), None]);
}
