//! The installed server's registration as IncusOS's `operations-center` provider makes it, bound to its
//! deployment: only the token in that deployment's seed registers it, once, over TLS with the Incus client
//! certificate, after the installer finished; another deployment's token, a replay, a hostname the seed did not
//! name, a spent provisioning token and an unknown token are each 403 in an Incus error envelope, recorded on
//! the server, and leave the running deployment untouched. The accepted answer is the Incus `sync` envelope
//! IncusOS requires, carrying racklift's client certificate. Then the server's `PUT :self`, authenticated by that
//! certificate.
//!
//! The bodies are written from Operations Center's structs (`shared/api/provisioning_server.go` `ServerPost`,
//! `ServerPut`, `BMCConfig`, `ServerSelfUpdate`) exactly as Go's `encoding/json` marshals them: every key, in
//! declaration order, the embedded `ServerPut` first, `properties` a nil map, no `Content-Type` header. Answers
//! are judged by the envelope's `type` and `status_code`, as IncusOS judges them, not by the HTTP status.

mod common;

use common::{ADMIN, Api, OPERATOR, VIEWER};
use racklift_bmc_sim::{Personality, PersonalityChoice, Sim, SimConfig};
use reqwest::Method;
use serde_json::{Value, json};

/// `ServerPost` as IncusOS's provider marshals it (`provider_operations_center.go` `Register`).
fn server_post(name: &str, connection_url: &str, system_uuid: &str, machine_id: &str) -> String {
    format!(
        concat!(
            r#"{{"public_connection_url":"","channel":"","description":"","properties":null,"#,
            r#""bmc_config":{{"api_type":"","endpoint":"","certificate":"","auto_pin_certificate":false,"#,
            r#""username":"","password":""}},"name":"{}","connection_url":"{}","system_uuid":"{}","machine_id":"{}"}}"#
        ),
        name, connection_url, system_uuid, machine_id
    )
}

/// `ServerSelfUpdate` as IncusOS's provider marshals it (`UpdateRegistration`).
fn self_update_body(connection_url: &str, cause: &str) -> String {
    format!(r#"{{"connection_url":"{connection_url}","cause":"{cause}"}}"#)
}

const MACHINE_ID: &str = "b4c04f4e4d32445a8c1f0e9d7c6b5a49";

/// A client of the API presenting a fresh self-signed certificate as its TLS client certificate, as IncusOS
/// presents its Incus' `server.crt`.
fn incus_client(api: &Api, hostname: &str) -> reqwest::Client {
    let own = racklift_listener::tls::self_signed(&[hostname.to_owned()], hostname).expect("a certificate");
    let api_pem = api.certificate_pem.as_deref().expect("the API serves TLS");
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(api_pem.as_bytes()).expect("PEM"))
        .identity(
            reqwest::Identity::from_pem(format!("{}{}", own.key_pem, own.certificate_pem).as_bytes())
                .expect("identity"),
        )
        .build()
        .expect("client")
}

/// Sends `body` as IncusOS does: no `Content-Type`, the token in the query.
async fn post_registration(api: &Api, client: &reqwest::Client, token: &str, body: String) -> (u16, Value) {
    let r = client
        .post(format!("{}/1.0/provisioning/servers?token={token}", api.base))
        .body(body);
    common::read(r.send().await.unwrap()).await
}

async fn register(api: &Api, client: &reqwest::Client, token: &str, name: &str) -> (u16, Value) {
    let body = server_post(name, "https://10.0.3.17:8443", name, MACHINE_ID);
    post_registration(api, client, token, body).await
}

async fn put_self(api: &Api, client: &reqwest::Client, body: String) -> (u16, Value) {
    let r = client
        .put(format!("{}/1.0/provisioning/servers/:self", api.base))
        .body(body);
    common::read(r.send().await.unwrap()).await
}

/// The deployment as the workers leave it once the installer finished and the media is out: waiting for the
/// installed system to register. (No workers run here; the deployment's state is set where they would put it.)
async fn installer_finished(api: &Api, deployment_id: i64) {
    let done = sqlx::query("UPDATE deployments SET state = 'WaitRegistration' WHERE id = $1")
        .bind(deployment_id)
        .execute(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 1);
}

fn envelope(v: &Value) -> (&str, i64) {
    (
        v["type"].as_str().unwrap_or_default(),
        v["status_code"].as_i64().unwrap_or_default(),
    )
}

async fn deploy(api: &Api, server: &str, token: &str, seed: &str) -> (i64, String) {
    let r = api
        .req(
            Method::POST,
            &format!("/1.0/provisioning/servers/{server}:deploy"),
            Some(OPERATOR),
        )
        .json(&json!({ "token": token, "seed": seed }));
    let (s, d) = common::read(r.send().await.unwrap()).await;
    assert_eq!(s, 202, "{d}");
    let id = d["id"].as_i64().unwrap();
    let registration: String = sqlx::query_scalar("SELECT registration_token FROM deployments WHERE id = $1")
        .bind(id)
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    (id, registration)
}

async fn events(api: &Api, server: &str, kind: &str) -> Vec<Value> {
    let (_, v) = api
        .call(
            Method::GET,
            &format!("/1.0/servers/{server}/events"),
            VIEWER,
            None,
        )
        .await;
    v.as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["kind"] == kind)
        .cloned()
        .collect()
}

/// The `UUID` server `i`'s BMC reports for its system.
async fn sim_system_uuid(sim: &racklift_bmc_sim::SimHandle, i: usize) -> String {
    let (user, pass) = sim.credentials();
    let http = reqwest::Client::new();
    let systems: Value = http
        .get(format!("{}/redfish/v1/Systems", sim.bmc_url(i)))
        .basic_auth(user, Some(pass))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let member = systems["Members"][0]["@odata.id"].as_str().unwrap().to_owned();
    // Member links are absolute paths on the simulator's one listener.
    let base = sim.bmc_url(i);
    let origin = &base[..base.find("/bmc/").unwrap_or(base.len())];
    let url = if member.starts_with("/bmc/") {
        format!("{origin}{member}")
    } else {
        format!("{base}{member}")
    };
    let system: Value = http
        .get(url)
        .basic_auth(user, Some(pass))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    system["UUID"].as_str().expect("a system UUID").to_owned()
}

fn refusal(v: &Value) -> (&str, i64, &str) {
    (
        v["type"].as_str().unwrap_or_default(),
        v["error_code"].as_i64().unwrap_or_default(),
        v["metadata"]["code"].as_str().unwrap_or_default(),
    )
}

#[tokio::test]
async fn only_the_deployments_own_token_registers_it_once() {
    let api = Api::start_tls().await;
    let sim =
        Sim::start(SimConfig::new(2, PersonalityChoice::Single(Personality::Generic)).with_time_scale(0.001))
            .await
            .unwrap();
    let (token, _) = common::catalog(&api, &sim, common::IMAGE_MIN).await;
    common::set_public_address(&api).await;
    // A second server on the same BMC simulator, and a seed that names the hostname.
    let (user, pass) = sim.credentials();
    let server2 = json!({ "name": "node2", "bmc_address": sim.bmc_url(1), "bmc_username": user,
        "bmc_password_ref": api.password_file(pass), "allow_plain_http": true, "vendor_hint": "generic" });
    let (s, v) = api.call(Method::POST, "/1.0/servers", ADMIN, Some(server2)).await;
    assert_eq!(s, 201, "{v}");
    let named = json!({ "name": "named", "public": true,
        "install_config": { "force_reboot": true, "network": { "dns": { "hostname": "node2", "domain": "rack1" } } } });
    let (s, v) = api
        .call(
            Method::POST,
            &format!("/1.0/tokens/{token}/seeds"),
            ADMIN,
            Some(named),
        )
        .await;
    assert_eq!(s, 201, "{v}");

    let (d1, t1) = deploy(&api, "node1", &token, "web").await;
    let (d2, t2) = deploy(&api, "node2", &token, "named").await;
    assert_ne!(t1, t2);
    installer_finished(&api, d1).await;
    installer_finished(&api, d2).await;
    let node1 = incus_client(&api, "node1");
    let node2 = incus_client(&api, "node2");

    // Unknown token: refused, nothing recorded anywhere.
    let (s, v) = register(&api, &node1, &"0".repeat(64), "node1").await;
    assert_eq!(
        (s, refusal(&v)),
        (403, ("error", 403, "unknown_registration_token")),
        "{v}"
    );
    // node2's seed names its hostname: another name is refused and recorded on node2.
    let (s, v) = register(&api, &node2, &t2, "node1").await;
    assert_eq!((s, refusal(&v)), (403, ("error", 403, "wrong_hostname")), "{v}");
    assert_eq!(v["metadata"]["field"], "name");
    assert_eq!(events(&api, "node2", "registration_refused").await.len(), 1);

    // node1's seed names no hostname: IncusOS then registers under the system UUID, which the pre-flight read
    // from the BMC. Any other name is refused.
    let system = sim_system_uuid(&sim, 0).await;
    let (s, v) = register(&api, &node1, &t1, "4c4c4544-0042-3510-8052-b4c04f4e4d32").await;
    assert_eq!((s, refusal(&v)), (403, ("error", 403, "wrong_hostname")), "{v}");

    // node1's own token under its UUID (as the OS may spell it, in lower case): the Incus sync envelope, once.
    let (s, v) = register(&api, &node1, &t1, &system.to_lowercase()).await;
    assert_eq!(
        (s, v["type"].as_str(), v["status_code"].as_i64()),
        (200, Some("sync"), Some(200)),
        "{v}"
    );
    // racklift's client identity, which Incus will then trust for racklift's calls to it.
    let identity = api.store.client_identity().await.unwrap();
    assert_eq!(
        v["metadata"]["certificate"],
        identity.certificate_pem.as_str(),
        "{v}"
    );
    assert!(
        identity
            .certificate_pem
            .starts_with("-----BEGIN CERTIFICATE-----")
    );
    let (_, server) = api.call(Method::GET, "/1.0/servers/node1", VIEWER, None).await;
    assert!(server["registered_at"].is_string(), "{server}");
    let stored: Option<String> =
        sqlx::query_scalar("SELECT connection_url FROM servers WHERE name = 'node1'")
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(stored.as_deref(), Some("https://10.0.3.17:8443"));
    let (_, t) = api
        .call(Method::GET, &format!("/1.0/tokens/{token}"), OPERATOR, None)
        .await;
    let uses_after_one = t["uses_remaining"].as_i64().unwrap();

    // A replay: refused, recorded, the provisioning token's use not counted again.
    let (s, v) = register(&api, &node1, &t1, &system).await;
    assert_eq!(
        (s, refusal(&v)),
        (403, ("error", 403, "registration_replayed")),
        "{v}"
    );
    // The wrong UUID before, and the replay.
    assert_eq!(events(&api, "node1", "registration_refused").await.len(), 2);
    assert_eq!(events(&api, "node1", "registered").await.len(), 1);
    let (_, t) = api
        .call(Method::GET, &format!("/1.0/tokens/{token}"), OPERATOR, None)
        .await;
    assert_eq!(t["uses_remaining"].as_i64(), Some(uses_after_one));

    // node2 with its own token but a spent provisioning token: refused, node2's deployment untouched.
    sqlx::query("UPDATE provisioning_tokens SET uses_remaining = 0")
        .execute(&api.db.pool)
        .await
        .unwrap();
    let (s, v) = register(&api, &node2, &t2, "node2.rack1").await;
    assert_eq!(
        (s, refusal(&v)),
        (403, ("error", 403, "provisioning_token_spent")),
        "{v}"
    );
    let (_, server2) = api.call(Method::GET, "/1.0/servers/node2", VIEWER, None).await;
    assert!(server2["registered_at"].is_null(), "{server2}");
    assert_eq!(server2["deployment"]["finished_at"], Value::Null);
    let live: Option<i64> =
        sqlx::query_scalar("SELECT id FROM deployments WHERE id = $1 AND registered_at IS NOT NULL")
            .bind(d1)
            .fetch_optional(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(live, Some(d1));
    api.stop().await;
    sim.shutdown().await;
}

/// An API over TLS, one simulated server `node1` deployed with a seed naming no hostname (so IncusOS registers
/// under its system UUID), its installer not yet finished. Returns the deployment, its registration token and
/// the system UUID the BMC reports.
async fn deployed_node1(api: &Api) -> (racklift_bmc_sim::SimHandle, i64, String, String) {
    let sim =
        Sim::start(SimConfig::new(1, PersonalityChoice::Single(Personality::Generic)).with_time_scale(0.001))
            .await
            .unwrap();
    let (token, _) = common::catalog(api, &sim, common::IMAGE_MIN).await;
    common::set_public_address(api).await;
    let (id, registration) = deploy(api, "node1", &token, "web").await;
    let system = sim_system_uuid(&sim, 0).await;
    (sim, id, registration, system)
}

async fn server_row(api: &Api) -> Value {
    sqlx::query_scalar(
        "SELECT json_build_object('connection_url', connection_url, 'system_uuid', system_uuid, \
         'machine_id', machine_id, 'registration', registration, \
         'fingerprint', client_certificate_sha256, 'der_sha256', encode(sha256(client_certificate_der), 'hex')) \
         FROM servers WHERE name = 'node1'",
    )
    .fetch_one(&api.db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_server_post_as_incusos_marshals_it_registers_only_with_its_certificate_after_the_install() {
    let api = Api::start_tls().await;
    let (sim, deployment, token, system) = deployed_node1(&api).await;
    let node1 = incus_client(&api, "node1");
    let body = |url: &str| server_post(&system, url, &system, MACHINE_ID);

    // Without a client certificate (Incus not initialised yet): refused in the envelope, as Operations Center
    // refuses it, and recorded.
    let (_, v) = post_registration(&api, &api.http, &token, body("https://10.0.3.17:8443")).await;
    assert_eq!(envelope(&v), ("error", 0), "{v}");
    assert_eq!(refusal(&v), ("error", 400, "client_certificate_required"), "{v}");

    // With it, but before racklift saw the installer finish: refused, recorded; IncusOS retries on its restart
    // loop.
    let (_, v) = post_registration(&api, &node1, &token, body("https://10.0.3.17:8443")).await;
    assert_eq!(refusal(&v), ("error", 409, "install_not_finished"), "{v}");
    assert_eq!(v["metadata"]["field"], "token", "{v}");
    let refused = events(&api, "node1", "registration_refused").await;
    let codes: Vec<&str> = refused
        .iter()
        .map(|e| e["detail"]["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes.len(), 2, "{refused:?}");
    assert!(codes.contains(&"client_certificate_required") && codes.contains(&"install_not_finished"));

    installer_finished(&api, deployment).await;
    // An address racklift would not call: refused, naming the field.
    for url in [
        "http://10.0.3.17:8443",
        "https://10.0.3.17",
        "https://fd00:3::17:8443",
        "https://10.0.3.17:8443/1.0",
        "https://10.0.3.17:99999",
    ] {
        let (_, v) = post_registration(&api, &node1, &token, body(url)).await;
        assert_eq!(refusal(&v), ("error", 400, "bad_connection_url"), "{url}: {v}");
        assert_eq!(v["metadata"]["field"], "connection_url", "{url}: {v}");
    }
    // A body that is not JSON, or a key of the wrong type: the envelope still, naming what is wrong.
    let (_, v) = post_registration(&api, &node1, &token, "{".to_owned()).await;
    assert_eq!(refusal(&v), ("error", 400, "invalid_body"), "{v}");
    let (_, v) = post_registration(
        &api,
        &node1,
        &token,
        r#"{"name":5,"connection_url":""}"#.to_owned(),
    )
    .await;
    assert_eq!(refusal(&v), ("error", 400, "invalid_body"), "{v}");
    assert_eq!(v["metadata"]["field"], "name", "{v}");

    // The whole ServerPost, with a key a newer IncusOS might add, no Content-Type, an IPv6 address as Go's
    // net.JoinHostPort writes it: registered.
    let newer = body("https://[fd00:3::17]:8443").replacen('{', r#"{"a_newer_key":{"x":[1]},"#, 1);
    let (_, v) = post_registration(&api, &node1, &token, newer).await;
    assert_eq!(envelope(&v), ("sync", 200), "{v}");
    assert!(
        v["metadata"]["certificate"]
            .as_str()
            .is_some_and(|c| c.starts_with("-----BEGIN CERTIFICATE"))
    );

    // What it said about itself and the certificate it proved are kept.
    let row = server_row(&api).await;
    assert_eq!(row["connection_url"], "https://[fd00:3::17]:8443", "{row}");
    assert_eq!(row["system_uuid"], system.as_str(), "{row}");
    assert_eq!(row["machine_id"], MACHINE_ID, "{row}");
    assert_eq!(row["registration"]["machine_id"], MACHINE_ID, "{row}");
    assert_eq!(row["registration"]["system_uuid"], system.as_str(), "{row}");
    assert!(
        row["fingerprint"].as_str().is_some_and(|f| f.len() == 64),
        "{row}"
    );
    assert_eq!(row["fingerprint"], row["der_sha256"], "{row}");
    api.stop().await;
    sim.shutdown().await;
}

#[tokio::test]
async fn put_self_is_recorded_for_every_cause_from_the_registration_certificate_only() {
    let api = Api::start_tls().await;
    let (sim, deployment, token, system) = deployed_node1(&api).await;
    installer_finished(&api, deployment).await;
    let node1 = incus_client(&api, "node1");
    let (_, v) = post_registration(
        &api,
        &node1,
        &token,
        server_post(&system, "https://10.0.3.17:8443", &system, MACHINE_ID),
    )
    .await;
    assert_eq!(envelope(&v), ("sync", 200), "{v}");

    // Every cause IncusOS sends (and those Operations Center defines besides), each with a new address: the
    // causes that carry the address store it, the others keep the stored one.
    let causes = [
        ("system-is-ready", true),
        ("network-config-changed", true),
        ("", true),
        ("os-update-applied", false),
        ("system-reboot-triggered", false),
        ("system-shutdown-triggered", false),
        ("application-update-applied", false),
        ("storage-config-changed", false),
        ("network-interface-state-changed", true),
        ("secure-boot-update-applied", false),
        ("suspend-triggered", false),
        ("a-cause-of-a-newer-incusos", false),
    ];
    let mut expected_url = "https://10.0.3.17:8443".to_owned();
    for (i, (cause, stores)) in causes.iter().enumerate() {
        let url = format!("https://10.0.3.{}:8443", 100 + i);
        // Without a certificate, and with one no server registered with: 403 in the envelope.
        let (_, v) = put_self(&api, &api.http, self_update_body(&url, cause)).await;
        assert_eq!(
            refusal(&v),
            ("error", 403, "client_certificate_required"),
            "{cause}: {v}"
        );
        let stranger = incus_client(&api, "stranger");
        let (_, v) = put_self(&api, &stranger, self_update_body(&url, cause)).await;
        assert_eq!(
            refusal(&v),
            ("error", 403, "unknown_client_certificate"),
            "{cause}: {v}"
        );

        let (_, v) = put_self(&api, &node1, self_update_body(&url, cause)).await;
        assert_eq!(envelope(&v), ("sync", 200), "{cause}: {v}");
        if *stores {
            expected_url = url.clone();
        }
        assert_eq!(
            server_row(&api).await["connection_url"],
            expected_url.as_str(),
            "{cause}"
        );
    }
    let recorded: Vec<Value> = events(&api, "node1", "self_update")
        .await
        .into_iter()
        .map(|e| e["detail"]["cause"].clone())
        .collect();
    for (cause, _) in causes {
        assert!(
            recorded.contains(&json!(cause)),
            "{cause} not recorded: {recorded:?}"
        );
    }
    assert_eq!(recorded.len(), causes.len(), "{recorded:?}");

    // Unknown keys are ignored; an address racklift would not call is refused only where it would be stored.
    let (_, v) = put_self(
        &api,
        &node1,
        r#"{"connection_url":"https://10.0.3.17:8443","cause":"system-is-ready","newer":true}"#.to_owned(),
    )
    .await;
    assert_eq!(envelope(&v), ("sync", 200), "{v}");
    let (_, v) = put_self(
        &api,
        &node1,
        self_update_body("http://10.0.3.17:8443", "network-config-changed"),
    )
    .await;
    assert_eq!(refusal(&v), ("error", 400, "bad_connection_url"), "{v}");
    let (_, v) = put_self(&api, &node1, self_update_body("", "system-reboot-triggered")).await;
    assert_eq!(envelope(&v), ("sync", 200), "{v}");
    let (_, v) = put_self(&api, &node1, "5".to_owned()).await;
    assert_eq!(refusal(&v), ("error", 400, "invalid_body"), "{v}");
    api.stop().await;
    sim.shutdown().await;
}

#[tokio::test]
async fn a_repin_is_for_admins_audited_and_pins_what_the_server_serves_next() {
    let api = Api::start_tls().await;
    let (sim, deployment, token, system) = deployed_node1(&api).await;
    installer_finished(&api, deployment).await;
    let node1 = incus_client(&api, "node1");
    let (_, v) = post_registration(
        &api,
        &node1,
        &token,
        server_post(&system, "https://10.0.3.17:8443", &system, MACHINE_ID),
    )
    .await;
    assert_eq!(envelope(&v), ("sync", 200), "{v}");
    let registered = server_row(&api).await["fingerprint"].as_str().unwrap().to_owned();
    // A standalone server is trusted by the certificate it registered with.
    let endpoint = |api: &Api| {
        let store = api.store.clone();
        async move {
            store
                .incus_endpoints(&["node1".to_owned()])
                .await
                .unwrap()
                .remove(0)
        }
    };
    assert_eq!(
        endpoint(&api).await.trust,
        racklift_store::EndpointTrust::Server(registered.clone())
    );

    let path = "/1.0/servers/node1:repin";
    let body = json!({ "reason": "Incus certificate replaced by hand" });
    for who in [VIEWER, OPERATOR] {
        let (s, v) = api.call(Method::POST, path, who, Some(body.clone())).await;
        assert_eq!(s, 403, "{v}");
    }
    let (s, v) = api
        .call(Method::POST, path, ADMIN, Some(json!({ "reason": " " })))
        .await;
    assert_eq!(
        (s, common::code(&v), common::field(&v)),
        (400, "invalid_field", Some("reason")),
        "{v}"
    );
    let (s, v) = api.call(Method::POST, path, ADMIN, Some(json!({}))).await;
    assert_eq!(s, 400, "{v}");
    let (s, v) = api
        .call(
            Method::POST,
            "/1.0/servers/nobody:repin",
            ADMIN,
            Some(body.clone()),
        )
        .await;
    assert_eq!((s, common::code(&v)), (404, "server_not_found"), "{v}");
    assert!(events(&api, "node1", "certificate_repin").await.is_empty());

    let (s, v) = api.call(Method::POST, path, ADMIN, Some(body)).await;
    assert_eq!((s, &v["repin_pending"]), (200, &json!(true)), "{v}");
    let audit = events(&api, "node1", "certificate_repin").await;
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0]["detail"]["by"], "admin");
    assert_eq!(audit[0]["detail"]["reason"], "Incus certificate replaced by hand");
    assert_eq!(
        audit[0]["detail"]["previous_certificate_sha256"],
        registered.as_str()
    );
    // The next connection records what the server serves; once only.
    assert_eq!(endpoint(&api).await.trust, racklift_store::EndpointTrust::Repin);
    let served = "ab".repeat(32);
    assert!(api.store.pin_incus_certificate("node1", &served).await.unwrap());
    assert!(
        !api.store
            .pin_incus_certificate("node1", &"cd".repeat(32))
            .await
            .unwrap()
    );
    assert_eq!(
        endpoint(&api).await.trust,
        racklift_store::EndpointTrust::Server(served.clone())
    );
    assert_eq!(events(&api, "node1", "certificate_pinned").await.len(), 1);
    api.stop().await;
    sim.shutdown().await;
}

/// Whether `value` has the shape of `schema` at its top level: the type, the required keys and each present
/// key's type (a `$ref` resolved in `doc`; `oneOf` / `anyOf` met by one alternative).
fn top_level_fits(doc: &Value, schema: &Value, value: &Value) -> bool {
    let resolve = |s: &Value| match s["$ref"].as_str() {
        Some(r) => doc
            .pointer(r.trim_start_matches('#'))
            .cloned()
            .expect("a defined $ref"),
        None => s.clone(),
    };
    let schema = resolve(schema);
    if let Some(alternatives) = schema["oneOf"].as_array().or(schema["anyOf"].as_array()) {
        return alternatives.iter().any(|a| top_level_fits(doc, a, value));
    }
    let type_fits = |s: &Value, v: &Value| {
        let types: Vec<&str> = match &s["type"] {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => return true,
        };
        types.iter().any(|t| match *t {
            "object" => v.is_object(),
            "string" => v.is_string(),
            "integer" => v.is_i64() || v.is_u64(),
            "null" => v.is_null(),
            "array" => v.is_array(),
            "boolean" => v.is_boolean(),
            _ => true,
        })
    };
    let required = schema["required"].as_array().cloned().unwrap_or_default();
    type_fits(&schema, value)
        && required.iter().all(|k| value.get(k.as_str().unwrap()).is_some())
        && schema["properties"]
            .as_object()
            .into_iter()
            .flatten()
            .all(|(k, s)| value.get(k).is_none_or(|v| type_fits(&resolve(s), v)))
}

/// A registration body value the database could not keep is refused 422 in the envelope, and the document's 422
/// for the operation says so (it named only the operator API's shape, which the envelope does not fit).
#[tokio::test]
async fn a_refused_registration_body_is_answered_as_the_document_says() {
    let api = Api::start().await;
    let body = r#"{"name": "n1", "connection_url": "https://10.0.3.17:8443", "properties": {"x": [1.7976931348623157e308]}}"#;
    let r = reqwest::Client::new()
        .post(format!("{}/1.0/provisioning/servers?token=t", api.base))
        .body(body);
    let (s, v) = common::read(r.send().await.unwrap()).await;
    assert_eq!(
        (s, v["type"].as_str(), v["metadata"]["code"].as_str()),
        (422, Some("error"), Some("number_too_large")),
        "{v}"
    );
    let doc = serde_json::to_value(racklift_api::openapi::document()).unwrap();
    let schema = &doc["paths"]["/1.0/provisioning/servers"]["post"]["responses"]["422"]["content"]["application/json"]
        ["schema"];
    assert!(top_level_fits(&doc, schema, &v), "{schema} does not describe {v}");
    // The NUL refusal before routing keeps the operator API's shape, which the document names too.
    let (s, v) = api
        .call(Method::POST, "/1.0/provisioning/servers?token=%00", VIEWER, None)
        .await;
    assert_eq!(s, 422, "{v}");
    assert!(top_level_fits(&doc, schema, &v), "{schema} does not describe {v}");
}
