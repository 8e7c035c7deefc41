//! The deploy action: every pre-flight rejection, a successful deploy with its job, idempotency, cancel.

mod common;

use common::{ADMIN, Api, OPERATOR, catalog, code, deploy_catalog, field, set_public_address};
use racklift_bmc_sim::{Personality, PersonalityChoice, Sim, SimConfig, SimHandle};
use reqwest::Method;
use serde_json::{Value, json};

async fn deploy(api: &Api, server: &str, body: Value, key: Option<&str>) -> (u16, Value) {
    let mut r = api
        .req(
            Method::POST,
            &format!("/1.0/provisioning/servers/{server}:deploy"),
            Some(OPERATOR),
        )
        .json(&body);
    if let Some(k) = key {
        r = r.header("Idempotency-Key", k);
    }
    common::read(r.send().await.unwrap()).await
}

async fn start_sim() -> SimHandle {
    Sim::start(SimConfig::new(1, PersonalityChoice::Single(Personality::Generic)).with_time_scale(0.001))
        .await
        .expect("simulator")
}

#[tokio::test]
async fn every_preflight_check_rejects_with_its_code() {
    let api = Api::start().await;
    let sim = start_sim().await;
    let (token, _) = catalog(&api, &sim, 4096).await;
    let ok = json!({ "token": token, "seed": "web" });
    let expect = |(s, v): (u16, Value), status: u16, c: &str, f: Option<&str>| {
        assert_eq!((s, code(&v), field(&v)), (status, c, f), "{v}");
    };

    expect(
        deploy(&api, "ghost", ok.clone(), None).await,
        404,
        "server_not_found",
        Some("name"),
    );
    api.call(
        Method::POST,
        "/1.0/servers",
        ADMIN,
        Some(json!({ "name": "bare" })),
    )
    .await;
    expect(
        deploy(&api, "bare", ok.clone(), None).await,
        422,
        "bmc_not_configured",
        Some("bmc_address"),
    );
    expect(
        deploy(
            &api,
            "node1",
            json!({ "token": uuid::Uuid::new_v4(), "seed": "web" }),
            None,
        )
        .await,
        422,
        "token_not_found",
        Some("token"),
    );
    let expires_soon = (chrono::Utc::now() + chrono::TimeDelta::minutes(10)).to_rfc3339();
    let (_, short) = api
        .call(
            Method::POST,
            "/1.0/tokens",
            ADMIN,
            Some(json!({ "uses_remaining": 1, "expires_at": expires_soon })),
        )
        .await;
    expect(
        deploy(
            &api,
            "node1",
            json!({ "token": short["token"], "seed": "web" }),
            None,
        )
        .await,
        422,
        "token_expires_too_soon",
        Some("token"),
    );
    let later = (chrono::Utc::now() + chrono::TimeDelta::days(2)).to_rfc3339();
    let (_, spent) = api
        .call(
            Method::POST,
            "/1.0/tokens",
            ADMIN,
            Some(json!({ "uses_remaining": 0, "expires_at": later })),
        )
        .await;
    expect(
        deploy(
            &api,
            "node1",
            json!({ "token": spent["token"], "seed": "web" }),
            None,
        )
        .await,
        422,
        "token_exhausted",
        Some("token"),
    );
    expect(
        deploy(&api, "node1", json!({ "token": token, "seed": "nope" }), None).await,
        422,
        "seed_not_found",
        Some("seed"),
    );
    expect(
        deploy(&api, "node1", json!({ "token": token, "seed": "private" }), None).await,
        422,
        "seed_not_public",
        Some("seed"),
    );
    expect(
        deploy(&api, "node1", json!({ "token": token, "seed": "noreboot" }), None).await,
        422,
        "seed_needs_force_reboot",
        Some("force"),
    );
    expect(
        deploy(&api, "node1", ok.clone(), None).await,
        422,
        "public_address_unset",
        Some("public_address"),
    );
    set_public_address(&api).await;
    expect(
        deploy(
            &api,
            "node1",
            json!({ "token": token, "seed": "web", "channel": "beta" }),
            None,
        )
        .await,
        422,
        "image_not_found",
        Some("image_type"),
    );
    expect(
        deploy(
            &api,
            "node1",
            json!({ "token": token, "seed": "web", "media_device": "nope" }),
            None,
        )
        .await,
        422,
        "media_device_not_found",
        Some("media_device"),
    );
    // The catalog's image is a disk image (512-byte sectors): a CD slot cannot boot it.
    expect(
        deploy(
            &api,
            "node1",
            json!({ "token": token, "seed": "web", "media_device": "CD1" }),
            None,
        )
        .await,
        422,
        "media_device_unsuitable",
        Some("media_device"),
    );

    // A BMC without any virtual media device.
    let stub = no_media_bmc().await;
    api.call(
        Method::POST,
        "/1.0/servers",
        ADMIN,
        Some(
            json!({ "name": "nomedia", "bmc_address": stub, "bmc_username": "u",
                     "bmc_password_ref": api.password_file("p"), "allow_plain_http": true }),
        ),
    )
    .await;
    expect(
        deploy(&api, "nomedia", ok.clone(), None).await,
        422,
        "no_virtual_media",
        Some("media_device"),
    );

    // Accepted, then a second request finds it running.
    let (s, v) = deploy(&api, "node1", ok.clone(), None).await;
    assert_eq!(s, 202, "{v}");
    expect(
        deploy(&api, "node1", ok.clone(), None).await,
        409,
        "deployment_running",
        Some("name"),
    );

    // Registered servers are refused (registered by hand, as a server installed another way would be).
    sqlx::query("UPDATE servers SET status = 'registered', registered_at = now() WHERE name = 'bare'")
        .execute(&api.db.pool)
        .await
        .unwrap();
    expect(
        deploy(&api, "bare", ok.clone(), None).await,
        409,
        "server_registered",
        Some("force_install"),
    );
    api.stop().await;
    sim.shutdown().await;
}

/// A Redfish service with one system and no virtual media anywhere.
async fn no_media_bmc() -> String {
    use axum::extract::Request;
    let app = axum::Router::new().fallback(|req: Request| async move {
        let body = match req.uri().path().trim_end_matches('/') {
            "/redfish/v1" => {
                json!({ "@odata.id": "/redfish/v1", "Systems": { "@odata.id": "/redfish/v1/Systems" } })
            }
            "/redfish/v1/Systems" => json!({ "@odata.id": "/redfish/v1/Systems",
                "Members": [{ "@odata.id": "/redfish/v1/Systems/1" }], "Members@odata.count": 1 }),
            "/redfish/v1/Systems/1" => json!({ "@odata.id": "/redfish/v1/Systems/1", "Id": "1" }),
            _ => return (axum::http::StatusCode::NOT_FOUND, axum::Json(json!({}))),
        };
        (axum::http::StatusCode::OK, axum::Json(body))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test]
async fn deploy_enqueues_one_job_and_is_idempotent() {
    let api = Api::start().await;
    let sim = start_sim().await;
    let (token, _) = catalog(&api, &sim, 4096).await;
    set_public_address(&api).await;
    let body = json!({ "token": token, "seed": "web", "force": true });
    let (s, first) = deploy(&api, "node1", body.clone(), Some("key-1")).await;
    assert_eq!(s, 202, "{first}");
    assert_eq!(first["state"], "RefreshBMCData");
    assert_eq!(
        first["force"], false,
        "force is dropped when the seed reboots on its own"
    );
    let (s, again) = deploy(&api, "node1", body, Some("key-1")).await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(again["id"], first["id"]);
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE kind = 'deployment.step'")
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(jobs, 1);
    let (plan, slot): (Value, Option<Value>) =
        sqlx::query_as("SELECT plan, media_slot FROM deployments WHERE id = $1")
            .bind(first["id"].as_i64().unwrap())
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    let url = plan["image_url"].as_str().unwrap();
    assert!(url.starts_with(&format!("{}/media/", api.base)), "{url}");
    // What the server learns travels in the media's seed, never in the URL a BMC may log.
    assert!(!url.contains('?'), "{url}");
    let secret = url.rsplit('/').nth(1).unwrap();
    let composed = api.composed_media(secret).await;
    let target = api.store.media_target(secret).await.unwrap().unwrap();
    let offset = target.seed_offset.unwrap() as usize;
    let seed = racklift_media::SeedFiles::from_archive(&composed[offset..offset + (1 << 20)])
        .expect("the seed parses");
    assert!(seed.install.force_reboot);
    assert_eq!(seed.provider.name, "operations-center");
    assert_eq!(seed.provider.config["server_url"], api.base);
    assert_eq!(seed.provider.config["server_token"].len(), 64);
    assert!(!seed.update.auto_reboot);
    assert_eq!(plan["bios"]["attributes"]["Cores"], 4);
    assert_eq!(plan["image_size_bytes"], common::IMAGE_MIN);
    // A disk image (512-byte sectors) goes into the USBStick slot and boots `Usb`, its URL named `.img`.
    assert_eq!(slot, Some(json!("system:USB1")));
    assert!(url.ends_with(".img"), "{url}");
    let target: Option<String> = sqlx::query_scalar("SELECT boot_target FROM deployments WHERE id = $1")
        .bind(first["id"].as_i64().unwrap())
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(target.as_deref(), Some("Usb"));
    let (_, v) = api
        .call(Method::GET, "/1.0/servers/node1", common::VIEWER, None)
        .await;
    assert_eq!(v["status"], "deploying");
    assert_eq!(v["deployment"]["id"], first["id"]);
    assert_eq!(v["deployment"]["attempts"], 0);

    // Cancel.
    let r = api
        .req(
            Method::POST,
            "/1.0/provisioning/servers/node1:cancel-deploy",
            Some(OPERATOR),
        )
        .json(&json!({ "skip_cleanup": true }));
    let (s, v) = common::read(r.send().await.unwrap()).await;
    assert_eq!(s, 202, "{v}");
    assert_eq!(v["cancel"]["skip_cleanup"], true);
    api.stop().await;
    sim.shutdown().await;
}

/// A BMC without a Bios resource: a deployment whose profiles set attributes for the server is refused up front,
/// naming the profiles; with none that apply, it is accepted (and passes the BIOS by).
#[tokio::test]
async fn preflight_refuses_bios_attributes_a_bmc_without_bios_cannot_take() {
    let api = Api::start().await;
    let sim = start_sim().await;
    let (token, _) = catalog(&api, &sim, 4096).await;
    set_public_address(&api).await;
    sim.set_faults(
        0,
        racklift_bmc_sim::Faults {
            no_bios: true,
            ..Default::default()
        },
    );
    let body = json!({ "token": token, "seed": "web" });
    let (s, v) = deploy(&api, "node1", body.clone(), None).await;
    assert_eq!(s, 422, "{v}");
    assert_eq!((code(&v), field(&v)), ("bios_absent", Some("name")), "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("no Bios resource")
            && message.contains("generic")
            && message.contains("2 attribute"),
        "{v}"
    );
    let (s, _) = api
        .call(Method::DELETE, "/1.0/bios-profiles/generic", ADMIN, None)
        .await;
    assert!(s == 200 || s == 204, "{s}");
    let body = json!({ "token": token, "seed": "web", "no_bios_settings": true });
    let (s, v) = deploy(&api, "node1", body, None).await;
    assert_eq!(s, 202, "{v}");
    api.stop().await;
    sim.shutdown().await;
}

/// Another server record for the simulated BMC `i`, so one simulator takes several deployments.
async fn add_server(api: &Api, sim: &SimHandle, i: usize, name: &str, vendor_hint: Option<&str>) {
    let (user, pass) = sim.credentials();
    let server = json!({ "name": name, "bmc_address": sim.bmc_url(i), "bmc_username": user,
                         "bmc_password_ref": api.password_file(pass), "vendor_hint": vendor_hint,
                         "allow_plain_http": true });
    let (s, v) = api.call(Method::POST, "/1.0/servers", ADMIN, Some(server)).await;
    assert_eq!(s, 201, "{v}");
}

async fn stored_plan(api: &Api, deployment: &Value) -> Value {
    let (plan,): (Value,) = sqlx::query_as("SELECT plan FROM deployments WHERE id = $1")
        .bind(deployment["id"].as_i64().expect("a deployment id"))
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    plan
}

/// Spec 000: the BIOS profiles matching the server resolve to something. No matching profile, or matching
/// profiles that set nothing, is refused naming the server and what it was matched on, unless the request says
/// the server needs no BIOS settings; that flag is refused where the profiles do set something.
#[tokio::test]
async fn profiles_that_resolve_to_nothing_are_refused_unless_no_bios_settings() {
    let api = Api::start().await;
    let sim = start_sim().await;
    let (token, _) = catalog(&api, &sim, 4096).await;
    set_public_address(&api).await;
    for name in ["node2", "node3"] {
        add_server(&api, &sim, 0, name, Some("contoso")).await;
    }
    let body = |extra: Value| {
        let mut b = json!({ "token": token, "seed": "web" });
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };

    // `catalog`'s profile matches the vendor hint "generic" only.
    let (s, v) = deploy(&api, "node2", body(json!({})), None).await;
    assert_eq!(
        (s, code(&v), field(&v)),
        (422, "no_bios_profile", Some("bios_profiles")),
        "{v}"
    );
    let message = v["error"]["message"].as_str().unwrap_or_default();
    for says in [
        "node2",
        "vendor hint \"contoso\"",
        "manufacturer \"Contoso\"",
        "model \"3500RX\"",
        "no SKU",
        "BiosAttributeRegistryContoso.v1_0_0",
        "no_bios_settings",
    ] {
        assert!(message.contains(says), "{says}: {v}");
    }

    // A profile that matches but sets nothing resolves to nothing too.
    let empty = json!({ "name": "contoso-empty", "match_rules": { "vendor": "contoso" },
                        "secure_boot": { "db": null } });
    let (s, v) = api
        .call(Method::POST, "/1.0/bios-profiles", ADMIN, Some(empty))
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = deploy(&api, "node2", body(json!({})), None).await;
    assert_eq!((s, code(&v)), (422, "no_bios_profile"), "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("contoso-empty"),
        "{v}"
    );
    assert!(
        api.store.latest_deployment("node2").await.unwrap().is_none(),
        "nothing was started"
    );

    // The request says the server needs none: deployed with an empty plan, and the deployment says why.
    let (s, created) = deploy(&api, "node2", body(json!({ "no_bios_settings": true })), None).await;
    assert_eq!(s, 202, "{created}");
    assert_eq!(created["no_bios_settings"], true, "{created}");
    assert_eq!(created["bios_matched_on"]["vendor_hint"], "contoso", "{created}");
    let plan = stored_plan(&api, &created).await;
    assert_eq!(
        plan["bios"],
        json!({ "attributes": {}, "deferred_attributes": {} }),
        "{plan}"
    );
    assert_eq!(plan["bios_profiles"], json!(["contoso-empty"]), "{plan}");
    assert_eq!(plan["no_bios_settings"], true, "{plan}");

    // A secure boot rule is something: the flag is refused, since the rule would apply all the same.
    let rule = json!({ "name": "contoso-empty", "match_rules": { "vendor": "contoso" },
                       "secure_boot": { "db": ["aa"] } });
    let (s, v) = api
        .call(Method::POST, "/1.0/bios-profiles", ADMIN, Some(rule))
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = deploy(&api, "node3", body(json!({ "no_bios_settings": true })), None).await;
    assert_eq!(
        (s, code(&v), field(&v)),
        (422, "bios_settings_matched", Some("no_bios_settings")),
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("contoso-empty"),
        "{v}"
    );
    let (s, v) = deploy(&api, "node3", body(json!({})), None).await;
    assert_eq!(s, 202, "{v}");
    assert_eq!(v["no_bios_settings"], false, "{v}");
    api.stop().await;
    sim.shutdown().await;
}

/// Profiles match on what the BMC reports: a Dell-like BMC's `Manufacturer` alone selects a profile for a server
/// without a vendor hint; a wrong `Model` or a `SKU` the BMC does not report selects nothing; the Bios resource's
/// `AttributeRegistry` matches by its name without a version.
#[tokio::test]
async fn profiles_match_on_what_the_bmc_reports() {
    let api = Api::start().await;
    set_public_address(&api).await;
    let sim =
        Sim::start(SimConfig::new(1, PersonalityChoice::Single(Personality::Dell)).with_time_scale(0.001))
            .await
            .expect("simulator");
    let (token, _) = deploy_catalog(&api, 4096).await;
    add_server(&api, &sim, 0, "r750", None).await;
    for profile in [
        json!({ "name": "dell", "match_rules": { "manufacturer": "dell inc." }, "priority": 2,
                "attributes": { "ProcVirtualization": "Enabled" } }),
        json!({ "name": "dell-r650", "match_rules": { "manufacturer": "Dell Inc.", "model": "PowerEdge R650" },
                "priority": 3, "attributes": { "ProcVirtualization": "Disabled" } }),
        json!({ "name": "by-sku", "match_rules": { "sku": "F54P1G3" }, "priority": 4,
                "attributes": { "ProcVirtualization": "Disabled" } }),
        json!({ "name": "r750-registry", "match_rules": { "attribute_registry": "BiosAttributeRegistryR750" },
                "priority": 1, "deferred_attributes": { "SriovGlobalEnable": "Enabled" } }),
    ] {
        let (s, v) = api
            .call(Method::POST, "/1.0/bios-profiles", ADMIN, Some(profile))
            .await;
        assert_eq!(s, 200, "{v}");
    }

    let (s, created) = deploy(&api, "r750", json!({ "token": token, "seed": "web" }), None).await;
    assert_eq!(s, 202, "{created}");
    assert_eq!(
        created["bios_profiles"],
        json!(["r750-registry", "dell"]),
        "{created}"
    );
    let facts = &created["bios_matched_on"];
    assert_eq!(
        (
            &facts["manufacturer"],
            &facts["model"],
            &facts["sku"],
            &facts["attribute_registry"]
        ),
        (
            &json!("Dell Inc."),
            &json!("PowerEdge R750"),
            &Value::Null,
            &json!("BiosAttributeRegistryR750.v1_0_0")
        ),
        "{created}"
    );
    let plan = stored_plan(&api, &created).await;
    assert_eq!(
        plan["bios"]["attributes"],
        json!({ "ProcVirtualization": "Enabled" }),
        "{plan}"
    );
    assert_eq!(
        plan["bios"]["deferred_attributes"],
        json!({ "SriovGlobalEnable": "Enabled" }),
        "{plan}"
    );
    assert_eq!(plan["bios_matched_on"], *facts, "{plan}");
    api.stop().await;
    sim.shutdown().await;
}

/// Pre-flight snapshots which profiles the BIOS plan came from, in the order they were layered, and the deployment
/// keeps showing them after the catalog changes.
#[tokio::test]
async fn deploy_snapshots_the_matching_bios_profile_names() {
    let api = Api::start().await;
    let sim = start_sim().await;
    let (token, _) = catalog(&api, &sim, 4096).await;
    set_public_address(&api).await;
    // `catalog` adds "generic" (vendor generic, priority 1).
    for profile in [
        json!({ "name": "node-defaults", "match_rules": { "name_prefix": "node" }, "priority": 0,
                "attributes": { "Cores": 2, "SriovGlobalEnable": "Enabled" } }),
        json!({ "name": "other-vendor", "match_rules": { "vendor": "dell" }, "priority": 5,
                "attributes": { "Cores": 64 } }),
        json!({ "name": "site", "match_rules": {}, "priority": 9, "deferred_attributes": { "SriovVfCount": 8 } }),
    ] {
        let (s, v) = api
            .call(Method::POST, "/1.0/bios-profiles", ADMIN, Some(profile))
            .await;
        assert_eq!(s, 200, "{v}");
    }
    let expected = json!(["node-defaults", "generic", "site"]);

    let (s, created) = deploy(&api, "node1", json!({ "token": token, "seed": "web" }), None).await;
    assert_eq!(s, 202, "{created}");
    assert_eq!(created["bios_profiles"], expected, "{created}");
    let (plan,): (Value,) = sqlx::query_as("SELECT plan FROM deployments WHERE id = $1")
        .bind(created["id"].as_i64().unwrap())
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(plan["bios_profiles"], expected);
    // The higher priority wins the attribute both profiles set.
    assert_eq!(plan["bios"]["attributes"]["Cores"], 4);
    assert_eq!(plan["bios"]["deferred_attributes"]["SriovVfCount"], 8);

    let (s, _) = api
        .call(Method::DELETE, "/1.0/bios-profiles/generic", ADMIN, None)
        .await;
    assert!((200..300).contains(&s), "delete profile: {s}");
    let (_, server) = api
        .call(Method::GET, "/1.0/servers/node1", common::VIEWER, None)
        .await;
    assert_eq!(server["deployment"]["id"], created["id"]);
    assert_eq!(server["deployment"]["bios_profiles"], expected, "{server}");
    api.stop().await;
    sim.shutdown().await;
}

/// The pre-flight reads the BMC's secure boot: where the key databases are not exposed (HPE iLO and
/// Lenovo XCC, and a BMC with no SecureBoot resource at all) a deployment that would enrol certificates is
/// refused up front, naming `skip_secure_boot_certificates`; with the flag, or where the databases are
/// writable, it is accepted.
#[tokio::test]
async fn preflight_refuses_key_databases_redfish_cannot_write() {
    let api = Api::start().await;
    set_public_address(&api).await;
    let sim = Sim::start(SimConfig::new(5, PersonalityChoice::Mix).with_time_scale(0.001))
        .await
        .expect("simulator");
    let (token, _) = deploy_catalog(&api, 4096).await;
    let (user, pass) = sim.credentials();
    let password = api.password_file(pass);
    let mut servers = Vec::new();
    for i in 0..sim.len() {
        let name = format!("sb-{}", sim.personality(i).as_str());
        let server = json!({ "name": name, "bmc_address": sim.bmc_url(i), "bmc_username": user,
                             "bmc_password_ref": password, "allow_plain_http": true });
        let (s, v) = api.call(Method::POST, "/1.0/servers", ADMIN, Some(server)).await;
        assert_eq!(s, 201, "{v}");
        servers.push((sim.personality(i), name));
    }
    let no_secure_boot = no_secure_boot_bmc().await;
    let server = json!({ "name": "sb-none", "bmc_address": no_secure_boot, "bmc_username": "u",
                         "bmc_password_ref": password, "allow_plain_http": true });
    assert_eq!(
        api.call(Method::POST, "/1.0/servers", ADMIN, Some(server))
            .await
            .0,
        201
    );

    let name = |p: Personality| {
        servers
            .iter()
            .find(|(q, _)| *q == p)
            .map(|(_, n)| n.as_str())
            .unwrap()
    };
    // (server, skip_secure_boot_certificates, status, what the refusal says); each server is accepted once.
    let cases: [(&str, bool, u16, Option<&str>); 9] = [
        (name(Personality::Hpe), false, 422, Some("SecureBootDatabases")),
        (name(Personality::Lenovo), false, 422, Some("SecureBootDatabases")),
        ("sb-none", false, 422, Some("does not expose secure boot")),
        (name(Personality::Generic), false, 202, None),
        (name(Personality::Dell), false, 202, None),
        (name(Personality::Supermicro), false, 202, None),
        (name(Personality::Hpe), true, 202, None),
        (name(Personality::Lenovo), true, 202, None),
        ("sb-none", true, 202, None),
    ];
    for (server, skip, status, says) in cases {
        // No profile matches these servers; the key databases are what is checked here.
        let body = json!({ "token": token, "seed": "web", "skip_secure_boot_certificates": skip,
                           "no_bios_settings": true });
        let (s, v) = deploy(&api, server, body, None).await;
        assert_eq!(s, status, "{server} skip={skip}: {v}");
        if let Some(says) = says {
            assert_eq!(
                (code(&v), field(&v)),
                (
                    "secure_boot_keys_not_writable",
                    Some("skip_secure_boot_certificates")
                ),
                "{server}: {v}"
            );
            let message = v["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains(says) && message.contains("skip_secure_boot_certificates"),
                "{server}: {v}"
            );
        } else {
            // The snapshot carries the shipped IncusOS certificates and the built-in allow lists.
            let id = v["id"].as_i64().expect("a deployment id");
            let (plan,): (Value,) = sqlx::query_as("SELECT plan FROM deployments WHERE id = $1")
                .bind(id)
                .fetch_one(&api.db.pool)
                .await
                .unwrap();
            let sb = &plan["secure_boot"];
            let count = |v: &Value| v.as_array().map_or(0, Vec::len);
            assert_eq!(
                [
                    count(&sb["incusos"]["PK"]),
                    count(&sb["incusos"]["KEK"]),
                    count(&sb["incusos"]["db"])
                ],
                [1, 1, 2],
                "{server}: {plan}"
            );
            assert!(sb["incusos"].get("dbx").is_none(), "{plan}");
            assert_eq!(
                [count(&sb["allow"]["KEK"]), count(&sb["allow"]["db"])],
                [2, 3],
                "{plan}"
            );
        }
    }
    api.stop().await;
    sim.shutdown().await;
}

/// A Redfish service with one system, one virtual media slot taking CDs and USB sticks (so either image format
/// passes the slot check) and no SecureBoot resource (like sushy-tools).
async fn no_secure_boot_bmc() -> String {
    use axum::extract::Request;
    let app = axum::Router::new().fallback(|req: Request| async move {
        let sys = "/redfish/v1/Systems/1";
        let body = match req.uri().path().trim_end_matches('/') {
            "/redfish/v1" => {
                json!({ "@odata.id": "/redfish/v1", "Systems": { "@odata.id": "/redfish/v1/Systems" } })
            }
            "/redfish/v1/Systems" => json!({ "@odata.id": "/redfish/v1/Systems",
                "Members": [{ "@odata.id": sys }], "Members@odata.count": 1 }),
            "/redfish/v1/Systems/1" => json!({ "@odata.id": sys, "Id": "1",
                "VirtualMedia": { "@odata.id": format!("{sys}/VirtualMedia") } }),
            "/redfish/v1/Systems/1/VirtualMedia" => json!({ "@odata.id": format!("{sys}/VirtualMedia"),
                "Members": [{ "@odata.id": format!("{sys}/VirtualMedia/CD1") }], "Members@odata.count": 1 }),
            "/redfish/v1/Systems/1/VirtualMedia/CD1" => {
                json!({ "@odata.id": format!("{sys}/VirtualMedia/CD1"),
                "Id": "CD1", "MediaTypes": ["CD", "DVD", "USBStick"], "Inserted": false })
            }
            _ => return (axum::http::StatusCode::NOT_FOUND, axum::Json(json!({}))),
        };
        (axum::http::StatusCode::OK, axum::Json(body))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}
