//! SecureBoot, SecureBootDatabases, their Certificates and Signatures, and ResetKeys.

use std::time::Instant;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::{Ctx, sb_db_path, sb_path};
use crate::bmc::TaskDone;
use crate::reply;
use crate::secure_boot::{DATABASES, Refusal};

const DB_RESET_TYPES: &[&str] = &["ResetAllKeysToDefault", "DeleteAllKeys"];

pub fn get(ctx: &Ctx<'_>) -> Response {
    let p = ctx.profile();
    let sb = sb_path(p);
    let m = ctx.bmc.machine();
    let s = &m.secure_boot;
    let mut reset = json!({"target": ctx.uri(&format!("{sb}/Actions/SecureBoot.ResetKeys"))});
    if p.reset_keys_listed {
        reset["ResetKeysType@Redfish.AllowableValues"] = json!(p.reset_keys_types);
    }
    let mut body = json!({
        "@odata.id": ctx.uri(&sb),
        "@odata.type": "#SecureBoot.v1_1_0.SecureBoot",
        "@odata.context": "/redfish/v1/$metadata#SecureBoot.SecureBoot",
        "Id": "SecureBoot",
        "Name": "UEFI Secure Boot",
        "SecureBootEnable": s.enable,
        "SecureBootCurrentBoot": if s.enable && s.mode != "SetupMode" { "Enabled" } else { "Disabled" },
        "SecureBootMode": s.mode,
        "Actions": {"#SecureBoot.ResetKeys": reset},
    });
    if p.secure_boot_databases {
        body["SecureBootDatabases"] = ctx.link(&format!("{sb}/SecureBootDatabases"));
    }
    reply::ok(&body)
}

pub fn patch(ctx: &Ctx<'_>) -> Response {
    let body = match ctx.json_body() {
        Ok(b) => b,
        Err(r) => return r,
    };
    if let Some(enable) = body.get("SecureBootEnable").and_then(Value::as_bool) {
        ctx.bmc.machine().secure_boot.enable = enable;
    }
    reply::no_content()
}

pub fn reset_keys(ctx: &Ctx<'_>, db: Option<usize>) -> Response {
    let body = match ctx.json_body() {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Some(kind) = body.get("ResetKeysType").and_then(Value::as_str) else {
        return reply::error(
            StatusCode::BAD_REQUEST,
            "ActionParameterMissing",
            "The action ResetKeys requires the parameter ResetKeysType.",
            &["#/ResetKeysType"],
        );
    };
    let p = ctx.profile();
    let allowed = if db.is_some() {
        DB_RESET_TYPES
    } else {
        p.reset_keys_types
    };
    if !allowed.contains(&kind) || db.is_some_and(|d| d >= 4) {
        return reply::error(
            StatusCode::BAD_REQUEST,
            "ActionParameterValueNotInList",
            &format!("The value {kind} for ResetKeysType is not supported."),
            &["#/ResetKeysType"],
        );
    }
    ctx.bmc.machine().secure_boot.reset_keys(kind, db);
    if p.secure_boot_task {
        let bmc = ctx.bmc;
        let done = Instant::now() + bmc.shared.clock.scaled(bmc.shared.timings.task);
        let id = bmc.tasks().create(
            "Secure boot key reset",
            TaskDone::At(done),
            bmc.shared.clock.now(),
        );
        return super::service::accepted_task(ctx, id);
    }
    reply::no_content()
}

pub fn databases(ctx: &Ctx<'_>) -> Response {
    let p = ctx.profile();
    let members: Vec<String> = (0..DATABASES.len()).map(|i| sb_db_path(p, i)).collect();
    reply::ok(&ctx.collection(
        &format!("{}/SecureBootDatabases", sb_path(p)),
        "#SecureBootDatabaseCollection.SecureBootDatabaseCollection",
        "UEFI SecureBoot Database Collection",
        &members,
    ))
}

pub fn database(ctx: &Ctx<'_>, db: usize) -> Response {
    let path = sb_db_path(ctx.profile(), db);
    let name = DATABASES[db];
    let mut body = json!({
        "@odata.id": ctx.uri(&path),
        "@odata.type": "#SecureBootDatabase.v1_0_3.SecureBootDatabase",
        "@odata.context": "/redfish/v1/$metadata#SecureBootDatabase.SecureBootDatabase",
        "Id": name,
        "Name": format!("{name} Database"),
        "DatabaseId": name,
        "Certificates": ctx.link(&format!("{path}/Certificates")),
        "Signatures": ctx.link(&format!("{path}/Signatures")),
    });
    if db < 4 {
        body["Actions"] = json!({"#SecureBootDatabase.ResetKeys": {
            "target": ctx.uri(&format!("{path}/Actions/SecureBootDatabase.ResetKeys")),
            "ResetKeysType@Redfish.AllowableValues": DB_RESET_TYPES,
        }});
    }
    reply::ok(&body)
}

pub fn certificates(ctx: &Ctx<'_>, db: usize) -> Response {
    let path = format!("{}/Certificates", sb_db_path(ctx.profile(), db));
    let members: Vec<String> = ctx.bmc.machine().secure_boot.dbs[db]
        .certs
        .iter()
        .map(|c| format!("{path}/{}", c.id))
        .collect();
    let mut body = ctx.collection(
        &path,
        "#CertificateCollection.CertificateCollection",
        "Certificates",
        &members,
    );
    body["@Redfish.SupportedCertificates"] = json!(["PEM"]);
    reply::ok(&body)
}

pub fn signatures(ctx: &Ctx<'_>, db: usize) -> Response {
    let path = format!("{}/Signatures", sb_db_path(ctx.profile(), db));
    let members: Vec<String> = ctx.bmc.machine().secure_boot.dbs[db]
        .sigs
        .iter()
        .map(|s| format!("{path}/{}", s.id))
        .collect();
    reply::ok(&ctx.collection(
        &path,
        "#SignatureCollection.SignatureCollection",
        "Signatures",
        &members,
    ))
}

pub fn add_certificate(ctx: &Ctx<'_>, db: usize) -> Response {
    let body = match ctx.json_body() {
        Ok(b) => b,
        Err(r) => return r,
    };
    if db >= 4 {
        return reply::method_not_allowed();
    }
    let Some(pem) = body.get("CertificateString").and_then(Value::as_str) else {
        return reply::error(
            StatusCode::BAD_REQUEST,
            "PropertyMissing",
            "The property CertificateString is required.",
            &["#/CertificateString"],
        );
    };
    let not_pem = || {
        reply::error(
            StatusCode::BAD_REQUEST,
            "PropertyValueFormatError",
            "Only PEM certificates are supported.",
            &["#/CertificateString"],
        )
    };
    if body
        .get("CertificateType")
        .and_then(Value::as_str)
        .is_some_and(|t| t != "PEM")
    {
        return not_pem();
    }
    let added = ctx.bmc.machine().secure_boot.add_cert(db, pem.to_owned());
    let id = match added {
        Ok(id) => id,
        Err(Refusal::NotACertificate) => return not_pem(),
        // The platform has one owner: the current PK is deleted (or the keys reset) first.
        Err(Refusal::PkOccupied) => {
            return reply::error(
                StatusCode::BAD_REQUEST,
                "PropertyValueConflict",
                "The platform key database holds a key already; delete it before enrolling another.",
                &["#/CertificateString"],
            );
        }
    };
    let location = ctx.uri(&format!("{}/Certificates/{id}", sb_db_path(ctx.profile(), db)));
    reply::created(&location, &json!({"@odata.id": location, "Id": id.to_string()}))
}

/// A certificate or signature entry: GET or DELETE.
pub fn entry(ctx: &Ctx<'_>, db: usize, id: u64, sig: bool) -> Response {
    let base = sb_db_path(ctx.profile(), db);
    if *ctx.method == Method::DELETE {
        if db >= 4 {
            return reply::method_not_allowed();
        }
        return if ctx.bmc.machine().secure_boot.delete(db, id, sig) {
            reply::no_content()
        } else {
            reply::not_found()
        };
    }
    if *ctx.method != Method::GET {
        return reply::method_not_allowed();
    }
    let m = ctx.bmc.machine();
    let d = &m.secure_boot.dbs[db];
    let body = if sig {
        let Some(s) = d.sigs.iter().find(|s| s.id == id) else {
            return reply::not_found();
        };
        json!({
            "@odata.id": ctx.uri(&format!("{base}/Signatures/{id}")),
            "@odata.type": "#Signature.v1_0_2.Signature",
            "@odata.context": "/redfish/v1/$metadata#Signature.Signature",
            "Id": id.to_string(),
            "Name": "Signature",
            "SignatureString": s.hash_hex,
            "SignatureTypeRegistry": "UEFI",
            "SignatureType": "EFI_CERT_SHA256_GUID",
            "UefiSignatureOwner": s.owner,
        })
    } else {
        let Some(c) = d.certs.iter().find(|c| c.id == id) else {
            return reply::not_found();
        };
        json!({
            "@odata.id": ctx.uri(&format!("{base}/Certificates/{id}")),
            "@odata.type": "#Certificate.v1_5_0.Certificate",
            "@odata.context": "/redfish/v1/$metadata#Certificate.Certificate",
            "Id": id.to_string(),
            "Name": "Certificate",
            "CertificateString": c.pem,
            "CertificateType": "PEM",
            "UefiSignatureOwner": c.owner,
        })
    };
    reply::ok(&body)
}
