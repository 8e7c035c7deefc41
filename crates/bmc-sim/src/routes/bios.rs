//! BIOS: current attributes, the SettingsObject (pending values, applied at the next reset),
//! `SettingsFailed` messages for deferred attributes, and task monitors on Dell-like BMCs.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::Ctx;
use crate::bmc::TaskDone;
use crate::clock::redfish_time;
use crate::machine::DEFERRED;
use crate::reply;

const REGISTRY: &str = "BiosAttributeRegistry.v1_0_0";

pub fn get(ctx: &Ctx<'_>) -> Response {
    let p = ctx.profile();
    let m = ctx.bmc.machine();
    let attributes: Map<String, Value> = m
        .bios
        .current
        .iter()
        .filter(|(k, _)| m.bios.visible(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut settings = json!({
        "@odata.type": "#Settings.v1_3_5.Settings",
        "SettingsObject": ctx.link(&p.bios_settings_path),
        "ETag": format!("W/\"{}\"", m.bios.pending.len() + m.counters.bios_applies as usize),
        "Messages": m.bios.messages,
    });
    if let Some(t) = m.bios.settings_time {
        settings["Time"] = json!(redfish_time(t));
    }
    if !p.bios_apply_times.is_empty() {
        settings["SupportedApplyTimes"] = json!(p.bios_apply_times);
    }
    reply::ok(&json!({
        "@odata.id": ctx.uri(&p.bios_path),
        "@odata.type": "#Bios.v1_2_0.Bios",
        "@odata.context": "/redfish/v1/$metadata#Bios.Bios",
        "Id": "Bios",
        "Name": "BIOS Configuration Current Settings",
        "AttributeRegistry": REGISTRY,
        "Attributes": attributes,
        "@Redfish.Settings": settings,
        "Actions": {
            "#Bios.ResetBios": {"target": ctx.uri(&format!("{}/Actions/Bios.ResetBios", p.bios_path))},
        },
    }))
}

pub fn get_settings(ctx: &Ctx<'_>) -> Response {
    let p = ctx.profile();
    let m = ctx.bmc.machine();
    reply::ok(&json!({
        "@odata.id": ctx.uri(&p.bios_settings_path),
        "@odata.type": "#Bios.v1_2_0.Bios",
        "@odata.context": "/redfish/v1/$metadata#Bios.Bios",
        "Id": "Settings",
        "Name": "BIOS Configuration Pending Settings",
        "AttributeRegistry": REGISTRY,
        "Attributes": m.bios.pending,
    }))
}

pub fn patch_settings(ctx: &Ctx<'_>) -> Response {
    let body = match ctx.json_body() {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Some(attrs) = body.get("Attributes").and_then(Value::as_object) else {
        return reply::error(
            StatusCode::BAD_REQUEST,
            "PropertyMissing",
            "The property Attributes is required.",
            &["#/Attributes"],
        );
    };
    let p = ctx.profile();
    if let Some(apply) = body
        .pointer("/@Redfish.SettingsApplyTime/ApplyTime")
        .and_then(Value::as_str)
        && !p.bios_apply_times.contains(&apply)
    {
        return reply::error(
            StatusCode::BAD_REQUEST,
            "PropertyValueNotInList",
            &format!("The apply time {apply} is not supported."),
            &["#/@Redfish.SettingsApplyTime/ApplyTime"],
        );
    }
    let bmc = ctx.bmc;
    let now = bmc.shared.clock.now();
    let mut m = bmc.machine();
    for name in attrs.keys() {
        let known = m.bios.current.contains_key(name) || DEFERRED.iter().any(|(a, _, _)| a == name);
        if !known {
            return reply::error(
                StatusCode::BAD_REQUEST,
                "PropertyUnknown",
                &format!("The attribute {name} is not known."),
                &[&format!("#/Attributes/{name}")],
            );
        }
    }
    m.bios
        .pending
        .extend(attrs.iter().map(|(k, v)| (k.clone(), v.clone())));
    m.bios.settings_time = Some(now);
    if !p.bios_task {
        return reply::no_content();
    }
    let id = match m.bios.apply_task {
        Some(id) => id,
        None => {
            let id = bmc
                .tasks()
                .create("BIOS configuration job", TaskDone::Marked(false), now);
            m.bios.apply_task = Some(id);
            id
        }
    };
    drop(m);
    super::service::accepted_task(ctx, id)
}

pub fn reset_bios(ctx: &Ctx<'_>) -> Response {
    // Factory defaults are the initial values, staged like any other change.
    let initial = crate::machine::Machine::new(ctx.profile()).bios.current;
    ctx.bmc.machine().bios.pending = initial;
    reply::no_content()
}
