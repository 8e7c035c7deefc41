//! ComputerSystem: read, boot override PATCH, Reset and its ActionInfo.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::{Ctx, sb_path};
use crate::clock::redfish_time;
use crate::driver;
use crate::machine::{OsPhase, Power};
use crate::reply;

pub fn get(ctx: &Ctx<'_>) -> Response {
    let p = ctx.profile();
    let bmc = ctx.bmc;
    let (no_progress, no_reset_time, no_bios) = {
        let f = bmc.faults();
        (f.no_boot_progress, f.no_last_reset_time, f.no_bios)
    };
    let m = bmc.machine();
    let mut reset = Map::new();
    reset.insert(
        "target".into(),
        json!(ctx.uri(&format!("{}/Actions/ComputerSystem.Reset", p.system_path))),
    );
    if p.reset_inline {
        reset.insert("ResetType@Redfish.AllowableValues".into(), json!(p.reset_types));
    }
    if p.reset_action_info {
        reset.insert(
            "@Redfish.ActionInfo".into(),
            json!(ctx.uri(&p.reset_action_info_path())),
        );
    }
    let mut body = json!({
        "@odata.id": ctx.uri(&p.system_path),
        "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
        "@odata.context": "/redfish/v1/$metadata#ComputerSystem.ComputerSystem",
        "Id": p.system_id,
        "Name": "System",
        "SystemType": "Physical",
        "Manufacturer": p.manufacturer,
        "Model": p.model,
        "SerialNumber": bmc.serial,
        "UUID": bmc.uuid,
        "HostName": bmc.name,
        "PowerState": m.power.as_str(),
        "Status": {"State": "Enabled", "Health": "OK"},
        "Boot": {
            "BootSourceOverrideEnabled": m.boot_override.enabled,
            "BootSourceOverrideTarget": m.boot_override.target,
            "BootSourceOverrideMode": m.boot_override.mode,
            "BootSourceOverrideEnabled@Redfish.AllowableValues": p.override_enabled,
            "BootSourceOverrideTarget@Redfish.AllowableValues": p.override_targets,
        },
        "Bios": ctx.link(&p.bios_path),
        "SecureBoot": ctx.link(&sb_path(p)),
        "Links": {
            "Chassis": [ctx.link(&p.chassis_path)],
            "ManagedBy": [ctx.link(&p.manager_path)],
        },
        "Actions": {"#ComputerSystem.Reset": Value::Object(reset)},
    });
    let obj = body.as_object_mut().expect("object literal");
    if let Some(link) = &p.system_media_link {
        obj.insert("VirtualMedia".into(), ctx.link(link));
    }
    if p.last_reset_time
        && !no_reset_time
        && let Some(t) = m.last_reset_time
    {
        obj.insert("LastResetTime".into(), json!(redfish_time(t)));
    }
    if p.boot_progress && !no_progress {
        let mut bp = json!({"LastState": m.boot_state});
        if let Some(t) = m.boot_state_time {
            bp["LastStateTime"] = json!(redfish_time(t));
        }
        if let Some(secs) = m.last_boot_seconds {
            bp["LastBootTimeSeconds"] = json!(secs);
        }
        obj.insert("BootProgress".into(), bp);
    }
    if no_bios {
        obj.remove("Bios");
    }
    if !p.override_targets_listed {
        obj["Boot"]
            .as_object_mut()
            .expect("object literal")
            .remove("BootSourceOverrideTarget@Redfish.AllowableValues");
    }
    reply::ok(&body)
}

fn not_in_list(property: &str, value: &str) -> Response {
    reply::error(
        StatusCode::BAD_REQUEST,
        "PropertyValueNotInList",
        &format!("The value {value} for the property {property} is not in the list of acceptable values."),
        &[&format!("#/Boot/{property}")],
    )
}

pub fn patch(ctx: &Ctx<'_>) -> Response {
    let body = match ctx.json_body() {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Some(boot) = body.get("Boot").and_then(Value::as_object) else {
        return reply::no_content();
    };
    let p = ctx.profile();
    let refuse_in_post = p.override_refused_during_post || ctx.bmc.faults().refuse_override_during_post;
    let mut m = ctx.bmc.machine();
    if refuse_in_post && m.in_post() {
        return reply::error_with(
            StatusCode::BAD_REQUEST,
            "iLO.2.14.UnableToModifyDuringSystemPOST",
            "The value for the property cannot be changed while the server is in POST.",
            &["#/Boot/BootSourceOverrideTarget"],
        );
    }
    let field = |name: &str| boot.get(name).and_then(Value::as_str);
    if let Some(e) = field("BootSourceOverrideEnabled")
        && !p.override_enabled.contains(&e)
    {
        return not_in_list("BootSourceOverrideEnabled", e);
    }
    if let Some(t) = field("BootSourceOverrideTarget")
        && !p.override_targets.contains(&t)
    {
        return not_in_list("BootSourceOverrideTarget", t);
    }
    if let Some(mode) = field("BootSourceOverrideMode")
        && mode != "UEFI"
        && mode != "Legacy"
    {
        return not_in_list("BootSourceOverrideMode", mode);
    }
    if let Some(e) = field("BootSourceOverrideEnabled") {
        m.boot_override.enabled = e.to_owned();
    }
    if let Some(t) = field("BootSourceOverrideTarget") {
        m.boot_override.target = t.to_owned();
    }
    if let Some(mode) = field("BootSourceOverrideMode") {
        m.boot_override.mode = mode.to_owned();
    }
    reply::no_content()
}

pub fn reset(ctx: &Ctx<'_>) -> Response {
    let body = match ctx.json_body() {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Some(kind) = body.get("ResetType").and_then(Value::as_str) else {
        return reply::error(
            StatusCode::BAD_REQUEST,
            "ActionParameterMissing",
            "The action ComputerSystem.Reset requires the parameter ResetType.",
            &["#/ResetType"],
        );
    };
    let p = ctx.profile();
    if !p.reset_types.contains(&kind) {
        return reply::error(
            StatusCode::BAD_REQUEST,
            "ActionParameterValueNotInList",
            &format!("The value {kind} for the parameter ResetType is not in the list of acceptable values."),
            &["#/ResetType"],
        );
    }
    let bmc = ctx.bmc;
    let (ignore_off, conflict) = {
        let f = bmc.faults();
        (f.ignore_power_off, f.power_on_conflict)
    };
    let mut m = bmc.machine();
    let is_on = matches!(m.power, Power::On | Power::PoweringOn);
    let os_up = m.phase == OsPhase::OsRunning;
    let wants_on = match kind {
        "On" | "ForceOn" => true,
        "PushPowerButton" => !is_on,
        "ForceRestart" | "PowerCycle" | "GracefulRestart" => !is_on,
        _ => false,
    };
    if wants_on {
        m.counters.power_on_requests += 1;
        if is_on {
            return reply::no_content();
        }
        let window = bmc
            .shared
            .clock
            .scaled(bmc.shared.timings.power_on_conflict_window);
        if conflict && m.powered_off_at.is_some_and(|t| t.elapsed() < window) {
            return reply::error(
                StatusCode::CONFLICT,
                "ActionParameterValueConflict",
                "The server was powered off moments ago; try again later.",
                &["#/ResetType"],
            );
        }
        driver::power_on(bmc, &mut m);
        return reply::no_content();
    }
    match kind {
        "ForceOff" | "PushPowerButton" | "GracefulShutdown" => {
            m.counters.power_off_requests += 1;
            // A graceful shutdown is an ACPI request only a running OS answers.
            let acpi_ignored = kind == "GracefulShutdown" && !os_up;
            // The one-shot fault is only spent on a power-off that would have acted (machine, then faults:
            // the lock order the installer uses too).
            if is_on && !ignore_off && !acpi_ignored && !bmc.faults().take_ignored_power_off() {
                driver::power_off(bmc, &mut m);
            }
        }
        "ForceRestart" | "PowerCycle" => driver::restart(bmc, &mut m),
        "GracefulRestart" if os_up => driver::restart(bmc, &mut m),
        _ => {}
    }
    reply::no_content()
}

pub fn reset_action_info(ctx: &Ctx<'_>) -> Response {
    let p = ctx.profile();
    reply::ok(&json!({
        "@odata.id": ctx.uri(&p.reset_action_info_path()),
        "@odata.type": "#ActionInfo.v1_3_0.ActionInfo",
        "@odata.context": "/redfish/v1/$metadata#ActionInfo.ActionInfo",
        "Id": "ResetActionInfo",
        "Name": "Reset Action Info",
        "Parameters": [{
            "Name": "ResetType",
            "Required": true,
            "DataType": "String",
            "AllowableValues": p.reset_types,
        }],
    }))
}

/// The members of `Systems`: the server's own System, then the extra ones its faults list (a DPU, a baseboard).
pub fn member_paths(ctx: &Ctx<'_>) -> Vec<String> {
    let mut paths = vec![ctx.profile().system_path.clone()];
    paths.extend(ctx.bmc.faults().extra_systems.iter().map(|s| extra_path(&s.id)));
    paths
}

fn extra_path(id: &str) -> String {
    format!("/redfish/v1/Systems/{id}")
}

/// The answer for `path` when it is one of the faults' extra Systems: a ComputerSystem (v1_20_0) that has the
/// server's manager and chassis and no actions, so reading it is all a client can do. `None` for any other path.
pub fn extra(ctx: &Ctx<'_>, path: &str) -> Option<Response> {
    let path = path.trim_end_matches('/');
    let system = ctx
        .bmc
        .faults()
        .extra_systems
        .iter()
        .find(|s| extra_path(&s.id) == path)
        .cloned()?;
    let mut resp = if *ctx.method == axum::http::Method::GET || *ctx.method == axum::http::Method::HEAD {
        let p = ctx.profile();
        reply::ok(&json!({
            "@odata.id": ctx.uri(path),
            "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
            "@odata.context": "/redfish/v1/$metadata#ComputerSystem.ComputerSystem",
            "Id": system.id,
            "Name": format!("{} System", system.system_type),
            "SystemType": system.system_type,
            "Manufacturer": p.manufacturer,
            "PowerState": "On",
            "Status": {"State": "Enabled", "Health": "OK"},
            "Links": {
                "Chassis": [ctx.link(&p.chassis_path)],
                "ManagedBy": [ctx.link(&p.manager_path)],
            },
        }))
    } else {
        reply::method_not_allowed()
    };
    resp.headers_mut().insert(
        axum::http::header::ALLOW,
        axum::http::HeaderValue::from_static("GET, HEAD"),
    );
    Some(resp)
}
