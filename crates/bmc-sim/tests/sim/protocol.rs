//! What the Redfish specification asks of every answer and request, whatever the personality: `Allow` on reads
//! and on 405, `Cache-Control`, `OData-Version` other than 4.0 refused with 412, sessions created through the
//! collection's `Members` too, the service root's `Tasks` link, `Link: rel=describedby` naming the schema of each
//! read, and ETags (header and `@odata.etag`) that `If-Match` and `If-None-Match` are checked against.

use reqwest::Method;
use reqwest::StatusCode;

use racklift_bmc_sim::Faults;
use serde_json::json;

use super::common::{Client, start};

#[tokio::test]
async fn answers_carry_allow_and_cache_control_and_unsupported_odata_versions_are_refused() {
    for personality in ["generic", "dell", "hpe", "lenovo", "supermicro"] {
        let sim = start(1, personality).await;
        let c = Client::new(&sim);
        let base = sim.bmc_url(0);
        let root = c.get(&format!("{base}/redfish/v1")).await;
        assert!(root["Tasks"]["@odata.id"].is_string(), "{personality}: {root}");
        assert!(root.get("TaskService").is_none(), "{personality}");
        let system = c.system(&base).await;
        let system_uri = system["@odata.id"].as_str().unwrap().to_owned();
        let reset = system["Actions"]["#ComputerSystem.Reset"]["target"]
            .as_str()
            .unwrap()
            .to_owned();
        let systems = root["Systems"]["@odata.id"].as_str().unwrap().to_owned();
        // (method, resource, status, Allow)
        let cases = [
            (
                Method::GET,
                system_uri.as_str(),
                StatusCode::OK,
                "GET, HEAD, PATCH",
            ),
            (
                Method::DELETE,
                system_uri.as_str(),
                StatusCode::METHOD_NOT_ALLOWED,
                "GET, HEAD, PATCH",
            ),
            (
                Method::GET,
                reset.as_str(),
                StatusCode::METHOD_NOT_ALLOWED,
                "POST",
            ),
            (Method::GET, systems.as_str(), StatusCode::OK, "GET, HEAD"),
            (
                Method::POST,
                systems.as_str(),
                StatusCode::METHOD_NOT_ALLOWED,
                "GET, HEAD",
            ),
        ];
        for (method, uri, status, allow) in cases {
            let (got, headers, body) = c.send(method.clone(), uri, None, None).await;
            assert_eq!(got, status, "{personality} {method} {uri}: {body}");
            assert_eq!(
                headers.get("allow").and_then(|v| v.to_str().ok()),
                Some(allow),
                "{personality} {method} {uri}"
            );
            assert_eq!(
                headers.get("cache-control").and_then(|v| v.to_str().ok()),
                Some("no-cache"),
                "{personality} {method} {uri}"
            );
        }
        for (version, status) in [("4.0", StatusCode::OK), ("4.1", StatusCode::PRECONDITION_FAILED)] {
            let r = c
                .http
                .get(c.url(&system_uri))
                .basic_auth("admin", Some("password"))
                .header("OData-Version", version)
                .send()
                .await
                .expect("request");
            assert_eq!(r.status(), status, "{personality} OData-Version {version}");
        }
        sim.shutdown().await;
    }
}

#[tokio::test]
async fn a_session_is_created_through_the_collection_or_its_members() {
    let sim = start(1, "generic").await;
    let c = Client::new(&sim);
    let (user, pass) = sim.credentials();
    let base = sim.bmc_url(0);
    for path in [
        "/redfish/v1/SessionService/Sessions",
        "/redfish/v1/SessionService/Sessions/Members",
    ] {
        let r = c
            .http
            .post(format!("{base}{path}"))
            .json(&serde_json::json!({"UserName": user, "Password": pass}))
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), StatusCode::CREATED, "{path}");
        assert!(r.headers().get("x-auth-token").is_some(), "{path}");
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn reads_carry_their_schema_and_etag_and_writes_are_checked_against_it() {
    for personality in ["generic", "dell", "hpe", "lenovo", "supermicro"] {
        let sim = start(1, personality).await;
        let c = Client::new(&sim);
        let system = c.system(&sim.bmc_url(0)).await;
        let uri = system["@odata.id"].as_str().unwrap().to_owned();
        let (status, headers, body) = c.send(Method::GET, &uri, None, None).await;
        assert_eq!(status, StatusCode::OK);
        let version = body["@odata.type"]
            .as_str()
            .unwrap()
            .split('.')
            .nth(1)
            .unwrap()
            .to_owned();
        let link = headers["link"].to_str().unwrap();
        assert!(
            link.contains(&format!("/ComputerSystem.{version}.json>")) && link.ends_with("rel=describedby"),
            "{personality}: {link}"
        );
        let tag = headers["etag"].to_str().unwrap().to_owned();
        assert_eq!(body["@odata.etag"], tag.as_str(), "{personality}");
        assert_eq!(
            tag.starts_with("W/"),
            personality == "hpe",
            "{personality}: {tag}"
        );

        let (status, headers) = c
            .send_with(Method::GET, &uri, ("If-None-Match", &tag), None)
            .await;
        assert_eq!(status, StatusCode::NOT_MODIFIED, "{personality}");
        assert_eq!(headers["etag"], tag.as_str());

        let boot = json!({"Boot": {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"}});
        let before = c.get(&uri).await;
        assert_eq!(
            c.http_with_if_match(&uri, "\"not-this-one\"", boot.clone()).await,
            StatusCode::PRECONDITION_FAILED,
            "{personality}"
        );
        assert_eq!(
            c.get(&uri).await["Boot"],
            before["Boot"],
            "{personality}: a refused write changes nothing"
        );
        let status = c.http_with_if_match(&uri, &tag, boot.clone()).await;
        assert!(status.is_success(), "{personality}: {status}");
        let (_, headers, _) = c.send(Method::GET, &uri, None, None).await;
        assert_ne!(
            headers["etag"],
            tag.as_str(),
            "{personality}: the write changed the resource"
        );

        // Some firmware sends the tag in the body alone.
        sim.set_faults(
            0,
            Faults {
                etag_header_absent: true,
                ..Faults::default()
            },
        );
        let (_, headers, body) = c.send(Method::GET, &uri, None, None).await;
        assert!(headers.get("etag").is_none(), "{personality}");
        assert!(body["@odata.etag"].is_string(), "{personality}");
    }
}
