//! BIOS: current attributes, the SettingsObject (pending values, applied at the next reset),
//! `SettingsFailed` messages for deferred attributes, and task monitors on Dell-like BMCs; the attribute
//! registry the Bios resource names, published as a `MessageRegistryFile` under `/redfish/v1/Registries` whose
//! `Location` leads to the `AttributeRegistry` document.
//!
//! A settings PATCH is checked against the registry the way the firmware checks it: an unknown attribute, a
//! read-only one, a value outside its enumeration or bounds, or of the wrong type is refused with 400 and a
//! message naming the attribute (`MessageArgs`, `RelatedProperties`), and nothing of the PATCH is staged.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::Ctx;
use crate::bios_registry::Rejection;
use crate::bmc::TaskDone;
use crate::clock::redfish_time;
use crate::reply;

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
        "AttributeRegistry": p.bios_registry.id,
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
        "AttributeRegistry": p.bios_registry.id,
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
    for (name, value) in attrs {
        if let Err(why) = p.bios_registry.check(name, value) {
            return refused(p, name, value, why);
        }
    }
    let bmc = ctx.bmc;
    let now = bmc.shared.clock.now();
    let mut m = bmc.machine();
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

/// The 400 for an attribute the registry refuses: the vendor's MessageId, the attribute in `MessageArgs` (after
/// the value, as the Base registry orders `PropertyValueNotInList`) and in `RelatedProperties`.
fn refused(p: &crate::profile::Profile, name: &str, value: &Value, why: Rejection) -> Response {
    let shown = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let (id, message, args) = match why {
        Rejection::Unknown => (
            p.bios_unknown_message.to_owned(),
            format!("The property {name} is not in the list of valid properties for the resource."),
            vec![json!(name)],
        ),
        Rejection::ReadOnly => (
            p.bios_read_only_message.to_owned(),
            format!("The property {name} is a read only property and cannot be assigned a value."),
            vec![json!(name)],
        ),
        Rejection::NotInList => (
            format!("{}.PropertyValueNotInList", reply::BASE),
            format!("The value {shown} for the property {name} is not in the list of acceptable values."),
            vec![json!(shown), json!(name)],
        ),
        Rejection::WrongType => (
            format!("{}.PropertyValueTypeError", reply::BASE),
            format!(
                "The value {shown} for the property {name} is of a different type than the property can accept."
            ),
            vec![json!(shown), json!(name)],
        ),
    };
    let related = format!("#/Attributes/{name}");
    reply::json(
        StatusCode::BAD_REQUEST,
        &json!({"error": {
            "code": format!("{}.GeneralError", reply::BASE),
            "message": message,
            "@Message.ExtendedInfo": [{
                "@odata.type": "#Message.v1_1_1.Message",
                "MessageId": id,
                "Message": message,
                "MessageArgs": args,
                "Severity": "Warning",
                "Resolution": "Remove the attribute or correct its value, then resubmit the request.",
                "RelatedProperties": [related],
            }],
        }}),
    )
}

/// `/redfish/v1/Registries`: the BIOS attribute registry's file.
pub fn registries(ctx: &Ctx<'_>) -> Response {
    reply::ok(&ctx.collection(
        "/redfish/v1/Registries",
        "#MessageRegistryFileCollection.MessageRegistryFileCollection",
        "Registry File Collection",
        &[ctx.profile().registry_file_path()],
    ))
}

/// The `MessageRegistryFile` of the attribute registry; `Location[].Uri` is where the document is.
pub fn registry_file(ctx: &Ctx<'_>) -> Response {
    let p = ctx.profile();
    let id = p.bios_registry.id;
    reply::ok(&json!({
        "@odata.id": ctx.uri(&p.registry_file_path()),
        "@odata.type": "#MessageRegistryFile.v1_1_3.MessageRegistryFile",
        "@odata.context": "/redfish/v1/$metadata#MessageRegistryFile.MessageRegistryFile",
        "Id": id,
        "Name": "BIOS Attribute Registry File",
        "Description": "The BIOS attribute registry of this system",
        "Languages": ["en"],
        "Registry": id,
        "Location": [{"Language": "en", "Uri": ctx.uri(&p.registry_document_path())}],
    }))
}

/// The `AttributeRegistry` document.
pub fn registry_document(ctx: &Ctx<'_>) -> Response {
    let p = ctx.profile();
    reply::ok(
        &p.bios_registry
            .document(&ctx.uri(&p.registry_document_path()), p.manufacturer, p.model),
    )
}
