//! Every decode step the client applies to a BMC's answer, runnable without a network, so the fuzz targets in
//! `tests/fuzz.rs` can feed them any body. Not an API: the operations call these same functions on every answer,
//! and this module only strings them together, followed by the accessors the operations read the values with.

use hyper::StatusCode;
use serde_json::{Map, Value};

use crate::bios::Bios;
use crate::client::Reply;
use crate::error::{Error, Result};
use crate::media::{VirtualMedia, last_segment};
use crate::model::{ActionInfo, ActionRef, Collection, ServiceRoot, link_field};
use crate::secure_boot::{KeyCertificate, KeySignature, SecureBoot, database_id};
use crate::system::{SystemInfo, reset_action};
use crate::task::{TaskMonitor, interpret};

/// The kinds of answer the client reads, in the order [`decode_all`] reports them.
pub const KINDS: [&str; 14] = [
    "service_root",
    "collection",
    "system",
    "system_links",
    "action_info",
    "bios",
    "bios_pending",
    "virtual_media",
    "media_holder",
    "secure_boot",
    "key_database",
    "key_certificate",
    "key_signature",
    "task",
];

/// Reads `body`, answered with `status`, as every kind of resource in [`KINDS`], each the way its operation
/// does: the status check (an error status becomes [`Error::Status`] from the error body), the typed decode, then
/// what the operation reads off the value. One outcome per kind.
pub fn decode_all(status: StatusCode, body: &[u8]) -> Vec<(&'static str, Result<()>)> {
    let reply = || Reply {
        status,
        location: Some("/redfish/v1/TaskService/TaskMonitors/1".to_owned()),
        retry_after: None,
        etag: None,
        body: body.to_vec(),
    };
    KINDS
        .iter()
        .map(|kind| {
            let outcome = match *kind {
                "task" => task(reply()),
                kind => reply().checked("GET", kind).and_then(|r| resource(kind, &r)),
            };
            if let Err(e) = &outcome {
                read_error(e);
            }
            (*kind, outcome)
        })
        .collect()
}

fn resource(kind: &str, reply: &Reply) -> Result<()> {
    match kind {
        "service_root" => {
            let root: ServiceRoot = reply.json(kind)?;
            let _ = (
                root.systems.map(|l| l.odata_id),
                root.managers.map(|l| l.odata_id),
            );
        }
        "collection" => {
            let c: Collection = reply.json(kind)?;
            for m in &c.members {
                let _ = last_segment(&m.odata_id);
            }
        }
        "system" => {
            let s: SystemInfo = reply.json(kind)?;
            let _ = s
                .boot_progress
                .as_ref()
                .and_then(|p| p.last_state.as_ref())
                .map(|l| l.rank());
            let _ = (
                s.power_state.as_ref().map(|p| p.to_string()),
                s.boot.as_ref().map(|b| b.enabled.clone()),
            );
            reset_action(&s)?;
        }
        "system_links" => {
            let s: Value = reply.json(kind)?;
            let _ = s.pointer("/Links/ManagedBy/0/@odata.id").and_then(Value::as_str);
        }
        "action_info" => {
            let info: ActionInfo = reply.json(kind)?;
            let _ = info.parameter("ResetType").map(|p| p.allowable_values.clone());
        }
        "bios" => {
            let bios: Bios = reply.json(kind)?;
            let _ = bios.failed_attributes();
        }
        "bios_pending" => {
            let pending: Value = reply.json(kind)?;
            let _ = pending.get("Attributes").and_then(Value::as_object).map(Map::len);
        }
        "virtual_media" => {
            let m: VirtualMedia = reply.json(kind)?;
            let _ = (
                m.has_media(),
                m.holds("https://racklift/media/x/incusos.img"),
                m.is_optical(),
            );
            let actions = m.actions.as_ref();
            let _ = ActionRef::find(actions, "#VirtualMedia.InsertMedia");
            let _ = ActionRef::find(actions, "#VirtualMedia.EjectMedia");
            let _ = ActionRef::find_oem(actions, "InsertVirtualMedia");
            let _ = ActionRef::find_oem(actions, "EjectVirtualMedia");
        }
        "media_holder" => {
            let holder: Map<String, Value> = reply.json(kind)?;
            let _ = link_field(&holder, "VirtualMedia");
        }
        "secure_boot" => {
            let sb: SecureBoot = reply.json(kind)?;
            let _ = ActionRef::find(sb.actions.as_ref(), "#SecureBoot.ResetKeys");
        }
        "key_database" => {
            let db: Map<String, Value> = reply.json(kind)?;
            let _ = (
                database_id(&db),
                link_field(&db, "Certificates"),
                link_field(&db, "Signatures"),
            );
        }
        "key_certificate" => {
            let _: KeyCertificate = reply.json(kind)?;
        }
        "key_signature" => {
            let _: KeySignature = reply.json(kind)?;
        }
        other => {
            return Err(Error::Config {
                reason: format!("no decode path {other:?}"),
            });
        }
    }
    Ok(())
}

/// A task monitor's answer, as `poll_task` reads it after a 2xx (404 and 410 never reach the body).
fn task(reply: Reply) -> Result<()> {
    let reply = reply.checked("GET", "task")?;
    interpret(
        &TaskMonitor::from_uri("/redfish/v1/TaskService/TaskMonitors/1"),
        &reply,
    )
    .map(|_| ())
}

/// What the callers read off an error: its class, its message ids, the fallbacks' questions.
fn read_error(e: &Error) {
    let _ = (
        e.to_string(),
        e.class(),
        e.status(),
        e.message_id(),
        e.extended_info().len(),
    );
    let _ = (
        e.is_value_rejected("BootSourceOverrideEnabled"),
        e.missing_parameter(),
        e.unwanted_parameter(),
        e.means_not_here(),
        e.has_message("RAC0218"),
    );
}
