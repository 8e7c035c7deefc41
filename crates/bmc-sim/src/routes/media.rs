//! VirtualMedia: collections under the System and/or the Manager, slot reads, InsertMedia /
//! EjectMedia (standard and HPE OEM), PATCH-only slots (Lenovo) and Upload at insert (Dell).
//!
//! A slot spec is one URI; its `state` is the device behind it, so XCC's slots read and change the same under
//! `Systems/1/VirtualMedia` and `Managers/1/VirtualMedia`.

use std::time::Instant;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::Ctx;
use crate::install;
use crate::machine::Power;
use crate::profile::{MediaRead, SlotLocation};
use crate::reply;

pub fn collection(ctx: &Ctx<'_>, loc: SlotLocation) -> Response {
    let p = ctx.profile();
    let base = match loc {
        SlotLocation::System => &p.system_path,
        SlotLocation::Manager => &p.manager_path,
    };
    let members: Vec<String> = p
        .slots
        .iter()
        .filter(|s| s.location == loc)
        .map(|s| s.path.clone())
        .collect();
    reply::ok(&ctx.collection(
        &format!("{base}/VirtualMedia"),
        "#VirtualMediaCollection.VirtualMediaCollection",
        "Virtual Media Services",
        &members,
    ))
}

pub fn get(ctx: &Ctx<'_>, i: usize) -> Response {
    let p = ctx.profile();
    let spec = &p.slots[i];
    let m = ctx.bmc.machine();
    let slot = &m.media[spec.state];
    let (image, inserted) = slot.reported(Instant::now());
    let image_name = image.map(|u| u.rsplit('/').next().unwrap_or(u).split('?').next().unwrap_or(""));
    // What the BMC says, not what it does: the installer reads as `media_read` says either way.
    let transfer_method = match (p.transfer_method_reported, p.media_read, inserted) {
        (false, _, _) => Value::Null,
        (true, MediaRead::Upload, _) => json!("Upload"),
        (true, _, true) => json!("Stream"),
        (true, _, false) => Value::Null,
    };
    let blank = |v: Option<&str>| match v {
        None if p.empty_image_is_blank => json!(""),
        v => json!(v),
    };
    let mut body = json!({
        "@odata.id": ctx.uri(&spec.path),
        "@odata.type": "#VirtualMedia.v1_6_0.VirtualMedia",
        "@odata.context": "/redfish/v1/$metadata#VirtualMedia.VirtualMedia",
        "Id": spec.id,
        "Name": format!("Virtual Media {}", spec.id),
        "MediaTypes": spec.media_types,
        "Image": blank(image),
        "ImageName": blank(image_name),
        "Inserted": inserted,
        "WriteProtected": slot.write_protected || !inserted,
        "ConnectedVia": if inserted { "URI" } else { "NotConnected" },
        "TransferMethod": transfer_method,
        "TransferProtocolType": slot.protocol,
    });
    let mut actions = Map::new();
    if spec.actions {
        let mut insert =
            json!({"target": ctx.uri(&format!("{}/Actions/VirtualMedia.InsertMedia", spec.path))});
        if spec.insert_action_info {
            insert["@Redfish.ActionInfo"] = json!(ctx.uri(&format!("{}/InsertMediaActionInfo", spec.path)));
        }
        actions.insert("#VirtualMedia.InsertMedia".into(), insert);
        if inserted || !p.eject_hidden_when_empty {
            actions.insert(
                "#VirtualMedia.EjectMedia".into(),
                json!({"target": ctx.uri(&format!("{}/Actions/VirtualMedia.EjectMedia", spec.path))}),
            );
        }
    }
    if spec.oem_actions {
        // Where iLO 5 and 6 publish them: the resource's `Oem.Hpe.Actions`, described by HPE's
        // `HpeiLOVirtualMedia` schema (`VirtualMedia.OemActions` defines no `Hpe`).
        let oem = |name: &str| json!({"target": ctx.uri(&format!("{}/Actions/Oem/Hpe/HpeiLOVirtualMedia.{name}", spec.path))});
        body["Oem"] = json!({"Hpe": {
            "@odata.type": "#HpeiLOVirtualMedia.v2_2_0.HpeiLOVirtualMedia",
            "Actions": {
                "#HpeiLOVirtualMedia.InsertVirtualMedia": oem("InsertVirtualMedia"),
                "#HpeiLOVirtualMedia.EjectVirtualMedia": oem("EjectVirtualMedia"),
            },
        }});
    }
    if !actions.is_empty() {
        body["Actions"] = Value::Object(actions);
    }
    reply::ok(&body)
}

pub fn insert_action_info(ctx: &Ctx<'_>, i: usize) -> Response {
    let spec = &ctx.profile().slots[i];
    reply::ok(&json!({
        "@odata.id": ctx.uri(&format!("{}/InsertMediaActionInfo", spec.path)),
        "@odata.type": "#ActionInfo.v1_3_0.ActionInfo",
        "@odata.context": "/redfish/v1/$metadata#ActionInfo.ActionInfo",
        "Id": "InsertMediaActionInfo",
        "Name": "Insert Media Action Info",
        "Parameters": [
            {"Name": "Image", "Required": true, "DataType": "String"},
            {"Name": "Inserted", "Required": false, "DataType": "Boolean"},
            {"Name": "WriteProtected", "Required": false, "DataType": "Boolean"},
            {"Name": "TransferProtocolType", "Required": false, "DataType": "String", "AllowableValues": ["HTTP", "HTTPS"]},
            {"Name": "TransferMethod", "Required": false, "DataType": "String", "AllowableValues": ["Stream"]},
        ],
    }))
}

/// Insert `image` into slot `i` (action, OEM action or PATCH).
async fn insert_image(ctx: &Ctx<'_>, i: usize, body: &Value) -> Response {
    let state = ctx.profile().slots[i].state;
    let Some(image) = body
        .get("Image")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    else {
        return reply::error(
            StatusCode::BAD_REQUEST,
            "ActionParameterMissing",
            "The action InsertMedia requires the parameter Image.",
            &["#/Image"],
        );
    };
    if let Some(code) = ctx.bmc.faults().insert_error.clone() {
        let status = if code == "RAC0904" {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        return reply::error_with(
            status,
            &format!("IDRAC.2.8.{code}"),
            "Unable to connect the virtual media.",
            &[],
        );
    }
    {
        let m = ctx.bmc.machine();
        let slot = &m.media[state];
        if slot.has_media() && slot.image.as_deref() != Some(image) {
            return reply::error(
                StatusCode::CONFLICT,
                "ResourceInUse",
                "Media is already inserted in the slot.",
                &[],
            );
        }
    }
    let mut cached = None;
    if ctx.profile().media_read == MediaRead::Upload {
        match install::upload(ctx.bmc, image).await {
            Ok(copy) => cached = Some(copy),
            Err(e) => {
                return reply::error_with(
                    StatusCode::BAD_REQUEST,
                    "IDRAC.2.8.RAC0904",
                    &format!("The remote file location is not accessible: {e}"),
                    &["#/Image"],
                );
            }
        }
    }
    let mut m = ctx.bmc.machine();
    m.counters.media_inserts += 1;
    if ctx.bmc.faults().drop_insert {
        return reply::no_content();
    }
    let slot = &mut m.media[state];
    slot.image = Some(image.to_owned());
    slot.inserted = body.get("Inserted").and_then(Value::as_bool).unwrap_or(true);
    slot.write_protected = body
        .get("WriteProtected")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    slot.protocol = body
        .get("TransferProtocolType")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| image.split_once("://").map(|(s, _)| s.to_ascii_uppercase()));
    slot.transfer_method = body
        .get("TransferMethod")
        .and_then(Value::as_str)
        .map(str::to_owned);
    slot.user_name = body.get("UserName").and_then(Value::as_str).map(str::to_owned);
    slot.cached_bytes = cached.as_ref().map_or(0, |c| c.size);
    slot.cached = cached;
    slot.stale = None;
    reply::no_content()
}

pub async fn insert(ctx: &Ctx<'_>, i: usize) -> Response {
    match ctx.json_body() {
        Ok(body) => insert_image(ctx, i, &body).await,
        Err(r) => r,
    }
}

/// Eject (idempotent: nothing inserted is success). Under the `late_eject` fault an eject of a running server's
/// media is answered but queued: it lands once the server has booted from the media again.
fn eject_slot(ctx: &Ctx<'_>, i: usize) {
    let state = ctx.profile().slots[i].state;
    let stale = ctx.profile().stale_inserted_after_eject.then(|| {
        Instant::now()
            + ctx
                .bmc
                .shared
                .clock
                .scaled(ctx.bmc.shared.timings.stale_inserted_after_eject)
    });
    let mut m = ctx.bmc.machine();
    if m.power == Power::On && m.media[state].has_media() {
        let mut faults = ctx.bmc.faults();
        if std::mem::take(&mut faults.late_eject) {
            m.media[state].eject_pending = true;
            return;
        }
    }
    m.eject(state, stale);
}

pub fn eject(ctx: &Ctx<'_>, i: usize) -> Response {
    eject_slot(ctx, i);
    reply::no_content()
}

pub async fn patch(ctx: &Ctx<'_>, i: usize) -> Response {
    if !ctx.profile().slots[i].patchable {
        return reply::error(
            StatusCode::BAD_REQUEST,
            "PropertyNotWritable",
            "The property Image is read-only; use the InsertMedia action.",
            &["#/Image"],
        );
    }
    let body = match ctx.json_body() {
        Ok(b) => b,
        Err(r) => return r,
    };
    let image = body
        .get("Image")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let inserted = body.get("Inserted").and_then(Value::as_bool);
    match (image, inserted) {
        (Some(_), Some(true) | None) => insert_image(ctx, i, &body).await,
        _ => {
            eject_slot(ctx, i);
            reply::no_content()
        }
    }
}
