//! The installed server's registration as IncusOS's `operations-center` provider makes it, bound to its
//! deployment: only the token in that deployment's seed registers it, once; another deployment's token, a
//! replay, a hostname the seed did not name, a spent provisioning token and an unknown token are each 403 in an
//! Incus error envelope, recorded on the server, and leave the running deployment untouched. The accepted answer
//! is the Incus `sync` envelope IncusOS requires, carrying racklift's client certificate.

mod common;

use common::{ADMIN, Api, OPERATOR, VIEWER};
use racklift_bmc_sim::{Personality, PersonalityChoice, Sim, SimConfig};
use reqwest::Method;
use serde_json::{Value, json};

async fn register(api: &Api, token: &str, name: &str) -> (u16, Value) {
    let r = api
        .req(
            Method::POST,
            &format!("/1.0/provisioning/servers?token={token}"),
            None,
        )
        .json(&json!({ "name": name, "connection_url": "https://10.0.3.17:8443" }));
    common::read(r.send().await.unwrap()).await
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
    let api = Api::start().await;
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
    let (_, t2) = deploy(&api, "node2", &token, "named").await;
    assert_ne!(t1, t2);

    // Unknown token: refused, nothing recorded anywhere.
    let (s, v) = register(&api, &"0".repeat(64), "node1").await;
    assert_eq!(
        (s, refusal(&v)),
        (403, ("error", 403, "unknown_registration_token")),
        "{v}"
    );
    // node2's seed names its hostname: another name is refused and recorded on node2.
    let (s, v) = register(&api, &t2, "node1").await;
    assert_eq!((s, refusal(&v)), (403, ("error", 403, "wrong_hostname")), "{v}");
    assert_eq!(v["metadata"]["field"], "name");
    assert_eq!(events(&api, "node2", "registration_refused").await.len(), 1);

    // node1's seed names no hostname: IncusOS then registers under the system UUID, which the pre-flight read
    // from the BMC. Any other name is refused.
    let system = sim_system_uuid(&sim, 0).await;
    let (s, v) = register(&api, &t1, "4c4c4544-0042-3510-8052-b4c04f4e4d32").await;
    assert_eq!((s, refusal(&v)), (403, ("error", 403, "wrong_hostname")), "{v}");

    // node1's own token under its UUID (as the OS may spell it, in lower case): the Incus sync envelope, once.
    let (s, v) = register(&api, &t1, &system.to_lowercase()).await;
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
    let (s, v) = register(&api, &t1, &system).await;
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
    let (s, v) = register(&api, &t2, "node2.rack1").await;
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
