//! `/1.0/provisioning/servers`: the deploy and cancel actions, and the registration callback of the installed
//! OS. Deploy runs every pre-flight check of the spec up front, so an impossible deployment is rejected with a
//! code naming the cause instead of failing minutes later in a worker.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use racklift_deploy::certificates::CertificateSet;
use racklift_deploy::facts::{AttrValue, Fingerprint, KeyDb};
use racklift_deploy::profile_match::ServerFacts;
use racklift_deploy::record::{BiosPlan, SecureBootPlan};
use racklift_deploy::secure_boot::AllowOverrides;
use racklift_deploy::{Deployment, Plan};
use racklift_store::{BiosProfile, NewDeployment, PUBLIC_ADDRESS, ServerStatus, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::AppState;
use crate::auth::{Caller, Operator};
use crate::error::{ActionBody, ApiError, ErrorBody};
use crate::openapi::OperatorErrors;
use crate::preflight::{
    check_bios, check_key_databases, check_system, preflight_client, read_server_facts, select_slot,
};
use crate::validate;
use crate::views::DeploymentView;

/// What a deployment is made of; every field is optional, the catalog fills in the rest.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeployRequest {
    /// The provisioning token the server registers with.
    #[schema(value_type = Uuid, required = true)]
    pub token: Option<String>,
    /// A seed of that token (default: its only one).
    pub seed: Option<String>,
    /// Deploy over an installed OS.
    #[serde(default)]
    pub force: bool,
    /// Reinstall a server racklift has seen registered: its seed sets `force_install` (IncusOS installs over a
    /// disk that holds partitions) and `force_install_confirmation`, the first six characters of the machine-id
    /// the server last registered with (IncusOS reinstalls the very version it is booted from only with it).
    /// Without it such a server is refused (409 `server_registered`), so an installed server is never wiped by
    /// a request that did not say so.
    #[serde(default)]
    pub force_install: bool,
    pub image_type: Option<String>,
    pub architecture: Option<String>,
    pub channel: Option<String>,
    /// The virtual media device, as the BMC names it (default: the one the client picks).
    pub media_device: Option<String>,
    /// Leave the BMC's secure boot key databases as they are; the IncusOS certificates are then enrolled by an
    /// operator beforehand. Required where the BMC does not let Redfish write PK, KEK and db (HPE iLO, Lenovo
    /// XCC): without it such a server is refused with `secure_boot_keys_not_writable`.
    #[serde(default)]
    pub skip_secure_boot_certificates: bool,
    /// The server needs no BIOS settings: deploy although no BIOS profile matching it sets anything. Without it
    /// such a server is refused with `no_bios_profile`; with it, a server whose matching profiles do set something
    /// is refused with `bios_settings_matched` (the flag would otherwise hide what they set).
    #[serde(default)]
    pub no_bios_settings: bool,
}

#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Leave the media inserted and the server as it is.
    #[serde(default)]
    skip_cleanup: bool,
    /// Why the operator cancels, kept in the server's event log. Optional: older clients send none.
    #[schema(pattern = r"\S", max_length = 2000)]
    reason: Option<String>,
}

/// Request a deployment after the pre-flight checks. An `Idempotency-Key` retried answers the deployment it made.
#[utoipa::path(post, path = "/1.0/provisioning/servers/{name}/_action/deploy", tag = "provisioning",
    security(("bearer" = ["operator"])),
    params(("name" = String, Path, example = "s1", description = "Server name"),
        ("Idempotency-Key" = Option<String>, Header, pattern = "^[!-~]{1,255}$",
            description = "1 to 255 visible ASCII characters")),
    request_body = DeployRequest,
    responses(
        (status = 202, description = "Deployment created", body = DeploymentView),
        (status = 200, description = "The deployment this Idempotency-Key already made", body = DeploymentView),
        (status = 404, description = "No such server", body = ErrorBody),
        (status = 409, description = "Registered already, or a deployment is running", body = ErrorBody),
        (status = 422, description = "A pre-flight check failed; `code` names it, `field` the input to change",
            body = ErrorBody),
        (status = 502, description = "The BMC could not be read for the pre-flight", body = ErrorBody),
        OperatorErrors))]
pub async fn deploy_action(
    State(state): State<AppState>,
    Operator(caller): Operator,
    Path(name): Path<String>,
    headers: HeaderMap,
    ActionBody(req): ActionBody<DeployRequest>,
) -> Result<Response, ApiError> {
    deploy(&state, &caller, &name, &headers, req).await
}

/// Cancel the running deployment; the reason is kept in the event log.
#[utoipa::path(post, path = "/1.0/provisioning/servers/{name}/_action/cancel-deploy", tag = "provisioning",
    security(("bearer" = ["operator"])),
    params(("name" = String, Path, example = "s1", description = "Server name")),
    request_body(content = Option<CancelRequest>, description = "Optional; an empty body is {}"),
    responses(
        (status = 202, description = "Cancel requested", body = DeploymentView),
        (status = 404, description = "No such server", body = ErrorBody),
        (status = 409, description = "No deployment is running", body = ErrorBody),
        OperatorErrors))]
pub async fn cancel_action(
    State(state): State<AppState>,
    Operator(caller): Operator,
    Path(name): Path<String>,
    ActionBody(req): ActionBody<CancelRequest>,
) -> Result<Response, ApiError> {
    cancel(&state, &caller, &name, req).await
}

fn not_found_as(code: &'static str, status: StatusCode, field: &str) -> impl FnOnce(StoreError) -> ApiError {
    move |e| match e {
        StoreError::NotFound { .. } => ApiError::new(status, code, e.to_string()).field(field),
        other => other.into(),
    }
}

/// The request's `Idempotency-Key` header, if any: 1 to 255 visible ASCII characters, else a 400 naming it (a key
/// that cannot be read is not silently ignored, which would turn a retry into a second request).
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let bytes = v.as_bytes();
    match std::str::from_utf8(bytes) {
        Ok(s) if (1..=255).contains(&s.len()) && bytes.iter().all(|b| (b'!'..=b'~').contains(b)) => {
            Ok(Some(s.to_owned()))
        }
        _ => Err(ApiError::invalid(
            "Idempotency-Key",
            "must be 1 to 255 visible ASCII characters",
        )),
    }
}

async fn deploy(
    state: &AppState,
    caller: &Caller,
    name: &str,
    headers: &HeaderMap,
    req: DeployRequest,
) -> Result<Response, ApiError> {
    let store = &state.store;
    let key = idempotency_key(headers)?;
    let server =
        store
            .server(name)
            .await
            .map_err(not_found_as("server_not_found", StatusCode::NOT_FOUND, "name"))?;
    // A retry answers with the original deployment even though it now fails "deployment running".
    if let Some(key) = &key
        && let Some(existing) = store.deployment_by_idempotency_key(name, key).await?
    {
        let view = DeploymentView::of(store, &existing, caller.0.role).await?;
        return Ok((StatusCode::OK, Json(view)).into_response());
    }
    let seen_registered = server.status == ServerStatus::Registered || server.registered_at.is_some();
    if seen_registered && !req.force_install {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "server_registered",
            "the server has registered before: set force_install to reinstall it",
        )
        .field("force_install"));
    }
    if !server.bmc_configured() {
        return Err(ApiError::unprocessable(
            "bmc_not_configured",
            "bmc_address",
            "the server needs a BMC address, username and password reference",
        ));
    }
    if let Some(d) = store.latest_deployment(name).await?
        && !d.is_finished()
    {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "deployment_running",
            format!("deployment {} is still running", d.id),
        )
        .field("name"));
    }

    let token_text = req
        .token
        .as_deref()
        .ok_or_else(|| ApiError::invalid("token", "required"))?;
    let token_id: Uuid = token_text
        .parse()
        .map_err(|_| ApiError::invalid("token", "not a UUID"))?;
    let token = store.token(token_id).await.map_err(not_found_as(
        "token_not_found",
        StatusCode::UNPROCESSABLE_ENTITY,
        "token",
    ))?;
    if token.uses_remaining <= 0 {
        return Err(ApiError::unprocessable(
            "token_exhausted",
            "token",
            "the token has no uses remaining",
        ));
    }
    let timeout = i64::try_from(state.config.deploy.deployment_timeout_secs).unwrap_or(i64::MAX / 1000);
    let needed_until = Utc::now() + chrono::TimeDelta::try_seconds(timeout).unwrap_or(chrono::TimeDelta::MAX);
    if token.expires_at < needed_until {
        return Err(ApiError::unprocessable(
            "token_expires_too_soon",
            "token",
            format!(
                "the token expires at {}, before the deployment could time out ({needed_until}); the server registers at the very end",
                token.expires_at
            ),
        ));
    }

    let seed_name = req
        .seed
        .as_deref()
        .ok_or_else(|| ApiError::invalid("seed", "required"))?;
    validate::name("seed", seed_name)?;
    let seed = store.seed(token_id, seed_name).await.map_err(not_found_as(
        "seed_not_found",
        StatusCode::UNPROCESSABLE_ENTITY,
        "seed",
    ))?;
    if !seed.public {
        return Err(ApiError::unprocessable(
            "seed_not_public",
            "seed",
            "the token seed is not public",
        ));
    }
    if !seed.force_reboot() && !req.force {
        return Err(ApiError::unprocessable(
            "seed_needs_force_reboot",
            "force",
            "the seed's install config does not set force_reboot; set force to rely on media read progress alone",
        ));
    }
    let public_address = store
        .setting(PUBLIC_ADDRESS)
        .await?
        .and_then(|v| v.as_str().map(str::to_owned))
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            ApiError::unprocessable(
                "public_address_unset",
                "public_address",
                "set /1.0/settings/public-address first",
            )
        })?;
    let image = crate::seeding::select_image(store.images().await?, &req)?;
    crate::update_catalog::check_incus_offered(store, &image).await?;
    let catalog_profiles = store.bios_profiles().await?;
    // Last: the only checks that talk to the BMC, so cheap rejections come first.
    let client = preflight_client(state, &server).await?;
    check_system(&client, &server).await?;
    let slot = select_slot(&client, image.format, req.media_device.as_deref()).await?;
    let report = read_server_facts(&client, &server).await?;
    let profiles = matching_profiles(catalog_profiles, &report.facts);
    let resolved = resolve_profiles(&profiles);
    check_resolved(&report.facts, &profiles, &resolved, req.no_bios_settings)?;
    let Resolved {
        bios, secure_boot, ..
    } = resolved;
    check_bios(report.has_bios, &bios, &profiles)?;
    if !req.skip_secure_boot_certificates {
        check_key_databases(&client).await?;
    }

    let media_secret = racklift_store::new_secret();
    let force_reboot = seed.force_reboot();
    // What the server learns at install time travels in the media itself: the seed laid over partition 2.
    let reinstall = if req.force_install {
        Some(crate::seeding::Reinstall {
            machine_id: store.registered_machine_id(name).await?,
        })
    } else {
        None
    };
    let seeded = crate::seeding::for_deployment(
        &seed,
        &image,
        &public_address,
        state.config.server_certificate_pem.clone(),
        reinstall.as_ref(),
    )?;
    // BMCs fetch the media from the plain media listener when there is one, else from the public address.
    let media_address = state
        .config
        .media
        .public_address
        .as_deref()
        .unwrap_or(&public_address)
        .trim_end_matches('/');
    let plan = Plan {
        image_url: format!(
            "{media_address}/media/{media_secret}/{}",
            crate::seeding::media_file_name(&state.config.media.file_name, image.format),
        ),
        image_size_bytes: u64::try_from(image.size_bytes).ok(),
        force: req.force && !force_reboot,
        skip_secure_boot_certificates: req.skip_secure_boot_certificates,
        reinstall: req.force_install,
        bios_profiles: profiles.iter().map(|p| p.name.clone()).collect(),
        bios_matched_on: report.facts.clone(),
        no_bios_settings: req.no_bios_settings,
        bios,
        secure_boot,
    };
    let new = NewDeployment {
        server: name.to_owned(),
        media_secret,
        image_id: image.id,
        token: token_id,
        seed: seed.name.clone(),
        deployment: Deployment::new(plan, Utc::now()),
        media_slot: Some(Value::String(slot.slot.to_string())),
        boot_target: Some(slot.target.as_str().to_owned()),
        idempotency_key: key,
        requested_by: caller.name().to_owned(),
        seed_archive: seeded.archive.bytes,
        registration_token: seeded.registration_token,
        // Without a hostname in the seed, IncusOS registers under the system's SMBIOS UUID, which the BMC reports.
        expected_hostname: seeded.expected_hostname,
        bmc_system_uuid: report.system_uuid.clone(),
    };
    let (record, created) = state
        .store
        .create_deployment(&state.queue, &new)
        .await
        .map_err(|e| match e {
            StoreError::Conflict { .. } => {
                ApiError::new(StatusCode::CONFLICT, "deployment_running", e.to_string()).field("name")
            }
            other => other.into(),
        })?;
    tracing::info!(
        server = name,
        deployment_id = record.id,
        created,
        by = caller.name(),
        profiles = ?profiles.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        matched_on = %report.facts,
        no_bios_settings = req.no_bios_settings,
        "deployment requested"
    );
    let status = if created {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    let view = DeploymentView::of(store, &record, caller.0.role).await?;
    Ok((status, Json(view)).into_response())
}

/// The catalog's profiles whose rules hold for `facts`, in the catalog's order (lowest priority first). A stored
/// profile whose rules no longer parse (written around the API's check) matches nothing, loudly.
fn matching_profiles(catalog: Vec<BiosProfile>, facts: &ServerFacts) -> Vec<BiosProfile> {
    catalog
        .into_iter()
        .filter(|p| match p.rules() {
            Ok(rules) => rules.matches(facts),
            Err(e) => {
                tracing::warn!(server = %facts.name, profile = %p.name, error = %e,
                    "BIOS profile with unreadable match rules skipped");
                false
            }
        })
        .collect()
}

/// A profile attribute as the BIOS plan holds it; `None` for shapes Redfish attributes cannot have.
pub fn attr_value(v: &Value) -> Option<AttrValue> {
    match v {
        Value::Bool(b) => Some(AttrValue::Bool(*b)),
        Value::Number(n) => n.as_i64().map(AttrValue::Int),
        Value::String(s) => Some(AttrValue::Text(s.clone())),
        _ => None,
    }
}

/// A profile's `secure_boot` section: `{"db": ["<sha256>", ...]}` keeps the listed entries;
/// `{"db": {"<sha256>": true|false|null}}` is the full override form. `None` when it has neither shape.
pub fn allow_overrides(v: &Value) -> Option<AllowOverrides> {
    let mut out = AllowOverrides::new();
    let Some(map) = v.as_object() else {
        return v.is_null().then_some(out);
    };
    for (db, entries) in map {
        let db: KeyDb = serde_json::from_value(Value::String(db.clone())).ok()?;
        let mut verdicts = BTreeMap::new();
        match entries {
            Value::Array(list) => {
                for fp in list {
                    verdicts.insert(Fingerprint(fp.as_str()?.to_owned()), Some(true));
                }
            }
            // No rules for this database: the built-in set alone.
            Value::Null => continue,
            Value::Object(o) => {
                for (fp, verdict) in o {
                    let verdict = match verdict {
                        Value::Bool(b) => Some(*b),
                        Value::Null => None,
                        _ => return None,
                    };
                    verdicts.insert(Fingerprint(fp.clone()), verdict);
                }
            }
            _ => return None,
        }
        out.insert(db, verdicts);
    }
    Some(out)
}

/// What the matching profiles resolve to.
struct Resolved {
    bios: BiosPlan,
    secure_boot: SecureBootPlan,
    /// Some profile has a secure boot rule (the built-in IncusOS certificates alone do not count: every
    /// deployment has them).
    secure_boot_rules: bool,
}

impl Resolved {
    /// Spec 000's "resolve to something": an attribute, a deferred attribute or a secure boot rule.
    fn is_empty(&self) -> bool {
        self.bios.attributes.is_empty() && self.bios.deferred_attributes.is_empty() && !self.secure_boot_rules
    }
}

/// Merges matching profiles, lowest priority first, so higher priorities win attribute by attribute.
fn resolve_profiles(profiles: &[BiosProfile]) -> Resolved {
    let mut bios = BiosPlan::default();
    let mut layers = Vec::new();
    for p in profiles {
        for (src, dst) in [
            (&p.attributes, &mut bios.attributes),
            (&p.deferred_attributes, &mut bios.deferred_attributes),
        ] {
            for (k, v) in src.as_object().into_iter().flatten() {
                if let Some(v) = attr_value(v) {
                    dst.insert(k.clone(), v);
                }
            }
        }
        layers.extend(allow_overrides(&p.secure_boot));
    }
    let secure_boot_rules = layers.iter().flat_map(|l| l.values()).any(|v| !v.is_empty());
    // The IncusOS certificates shipped in this binary, and the profiles over the built-in allow lists.
    let secure_boot = SecureBootPlan::new(&CertificateSet::incusos(), &layers);
    Resolved {
        bios,
        secure_boot,
        secure_boot_rules,
    }
}

/// Spec 000: "The BIOS profiles matching the server resolve to something", unless the request says the server
/// needs no BIOS settings. A server no profile was written for would otherwise deploy with whatever its BIOS
/// holds; the refusal names what it was matched on, so a rule can be written for it. The flag is refused where
/// profiles do set something, since the deployment would apply them all the same.
fn check_resolved(
    facts: &ServerFacts,
    profiles: &[BiosProfile],
    resolved: &Resolved,
    no_bios_settings: bool,
) -> Result<(), ApiError> {
    let names = || {
        profiles
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (resolved.is_empty(), no_bios_settings) {
        (true, false) if profiles.is_empty() => Err(ApiError::unprocessable(
            "no_bios_profile",
            "bios_profiles",
            format!(
                "no BIOS profile matches server {facts}; add a profile whose match_rules hold for it, or set \
                 no_bios_settings if it needs none"
            ),
        )),
        (true, false) => Err(ApiError::unprocessable(
            "no_bios_profile",
            "bios_profiles",
            format!(
                "the BIOS profiles matching server {facts} ({}) set no attribute, deferred attribute or secure \
                 boot rule; give them settings, or set no_bios_settings if it needs none",
                names()
            ),
        )),
        (false, true) => Err(ApiError::unprocessable(
            "bios_settings_matched",
            "no_bios_settings",
            format!(
                "no_bios_settings is set, but the BIOS profiles {} matching server {facts} set BIOS settings; \
                 drop the flag to apply them, or change their match_rules",
                names()
            ),
        )),
        _ => Ok(()),
    }
}

async fn cancel(
    state: &AppState,
    caller: &Caller,
    name: &str,
    req: CancelRequest,
) -> Result<Response, ApiError> {
    // Given, it must say something, like every other reason the API records.
    let reason = req
        .reason
        .map(|r| crate::triage::reason("reason", Some(r)))
        .transpose()?;
    state.store.server(name).await.map_err(not_found_as(
        "server_not_found",
        StatusCode::NOT_FOUND,
        "name",
    ))?;
    let record = state
        .store
        .request_cancel(
            &state.queue,
            name,
            req.skip_cleanup,
            reason.as_deref(),
            caller.name(),
        )
        .await
        .map_err(not_found_as(
            "no_running_deployment",
            StatusCode::CONFLICT,
            "name",
        ))?;
    tracing::info!(
        server = name,
        deployment_id = record.id,
        skip_cleanup = req.skip_cleanup,
        reason = reason.as_deref(),
        by = caller.name(),
        "cancel requested"
    );
    Ok((
        StatusCode::ACCEPTED,
        Json(DeploymentView::of(&state.store, &record, caller.0.role).await?),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn profile(attributes: Value, deferred: Value, secure_boot: Value) -> BiosProfile {
        BiosProfile {
            name: "p".into(),
            match_rules: json!({}),
            priority: 0,
            attributes,
            deferred_attributes: deferred,
            secure_boot,
            created_at: Utc::now(),
            updated_at: Utc::now(),
        }
    }

    #[test]
    fn matching_profiles_must_resolve_to_something_unless_the_request_needs_none() {
        let facts = ServerFacts {
            name: "s1".into(),
            ..ServerFacts::default()
        };
        let (none, empty) = (json!({}), Value::Null);
        let attribute = profile(json!({ "BootMode": "Uefi" }), none.clone(), empty.clone());
        let deferred = profile(none.clone(), json!({ "SriovVfCount": 8 }), empty.clone());
        let sb_rule = profile(none.clone(), none.clone(), json!({ "db": ["aa"] }));
        let sb_nothing = profile(none.clone(), none.clone(), json!({ "db": null, "KEK": {} }));
        let bare = profile(none.clone(), none.clone(), empty.clone());
        // (matching profiles, no_bios_settings, the refusal's code or None for accepted)
        let cases: Vec<(&str, Vec<BiosProfile>, bool, Option<&str>)> = vec![
            ("no profile", vec![], false, Some("no_bios_profile")),
            (
                "a profile setting nothing",
                vec![bare.clone()],
                false,
                Some("no_bios_profile"),
            ),
            (
                "empty secure boot rules",
                vec![sb_nothing.clone()],
                false,
                Some("no_bios_profile"),
            ),
            ("an attribute", vec![bare.clone(), attribute.clone()], false, None),
            ("a deferred attribute", vec![deferred.clone()], false, None),
            ("a secure boot rule", vec![sb_rule.clone()], false, None),
            ("no profile, none needed", vec![], true, None),
            ("nothing set, none needed", vec![bare, sb_nothing], true, None),
            (
                "an attribute, none needed",
                vec![attribute],
                true,
                Some("bios_settings_matched"),
            ),
            (
                "a secure boot rule, none needed",
                vec![sb_rule],
                true,
                Some("bios_settings_matched"),
            ),
        ];
        for (what, profiles, no_bios_settings, want) in cases {
            let resolved = resolve_profiles(&profiles);
            let got = check_resolved(&facts, &profiles, &resolved, no_bios_settings).err();
            assert_eq!(got.as_ref().map(|e| e.code), want, "{what}");
            if let Some(e) = got {
                assert!(
                    e.message.contains("s1 ("),
                    "{what}: the refusal names the server: {}",
                    e.message
                );
            }
        }
    }
}
