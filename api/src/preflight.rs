//! The deploy pre-flight's reads of the BMC: its client, the ComputerSystem and Bios resource BIOS profiles are
//! matched on, the virtual media slot and the key databases. Each refusal names the input to change, so an
//! impossible deployment is rejected before anything is touched.

use axum::http::StatusCode;
use racklift_deploy::profile_match::ServerFacts;
use racklift_deploy::record::BiosPlan;
use racklift_redfish::{
    BmcClient, ErrorClass, ImageKind, KeyDatabaseAccess, SlotChoice, SlotRefusal, choose_slot,
};
use racklift_store::{BiosProfile, ImageFormat, Server};

use crate::AppState;
use crate::error::ApiError;

/// The pre-flight's BMC client, read-only under the API's BMC read timeout.
pub(crate) async fn preflight_client(state: &AppState, server: &Server) -> Result<BmcClient, ApiError> {
    use racklift_bmc_access::{AccessError, client_for};
    client_for(server, state.config.bmc_read_timeout, &state.config.bmc_access)
        .await
        .map_err(|e| match e {
            AccessError::NotConfigured { .. } => {
                ApiError::unprocessable("bmc_not_configured", "bmc_address", e.to_string())
            }
            AccessError::BadPin { .. } => {
                ApiError::unprocessable("bmc_cert_pin_invalid", "bmc_cert_pin", e.to_string())
            }
            // The answer does not name the host's paths; the log has the whole reason.
            AccessError::Password { ref source, .. } => {
                tracing::warn!(server = %server.name, error = ?source,
                    "deploy pre-flight: the BMC password reference does not resolve");
                crate::servers::password_ref_error(source)
            }
            AccessError::PlainHttp { .. } => {
                ApiError::unprocessable("plain_http_bmc", "bmc_address", e.to_string())
            }
            AccessError::Client { .. } => {
                ApiError::unprocessable("bmc_client", "bmc_address", format!("{e:#}"))
            }
        })
}

/// A BMC error of a pre-flight read that is not about the resource read: bad credentials, or no answer.
pub(crate) fn bmc_read_error(e: racklift_redfish::Error) -> ApiError {
    match e.class() {
        ErrorClass::Auth => ApiError::unprocessable("bmc_auth_failed", "bmc_username", e.to_string()),
        _ => ApiError::new(StatusCode::BAD_GATEWAY, "bmc_unreachable", e.to_string()).field("bmc_address"),
    }
}

/// Which of the BMC's ComputerSystems the deployment would power and boot, decided before anything else is read:
/// every later read and action goes to that System. Several that could be the host (a baseboard System beside
/// the server) and no `system_id`, or a `system_id` the BMC does not list, is refused naming `system_id` and the
/// Ids to choose from; a DPU beside a single host needs nothing.
pub(crate) async fn check_system(client: &BmcClient, server: &Server) -> Result<(), ApiError> {
    let quoted = |ids: &[String]| {
        ids.iter()
            .map(|id| format!("{id:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match client.system_uri().await {
        Ok(_) => Ok(()),
        Err(racklift_redfish::Error::AmbiguousSystem { candidates }) => Err(ApiError::unprocessable(
            "system_ambiguous",
            "system_id",
            format!(
                "the BMC lists several ComputerSystems that could be this server: {}; set the server's system_id \
                 to one of them",
                quoted(&candidates)
            ),
        )),
        Err(racklift_redfish::Error::SystemNotFound { id, available }) => Err(ApiError::unprocessable(
            "system_not_found",
            "system_id",
            format!(
                "the BMC has no ComputerSystem {id:?} (the server's system_id); it lists {}",
                quoted(&available)
            ),
        )),
        // No Systems to choose from: the reads that need one answer for it, as they do on any BMC.
        Err(e) if e.class() == ErrorClass::Unsupported => {
            tracing::debug!(server = %server.name, error = %e, "deploy pre-flight: no ComputerSystem resolved");
            Ok(())
        }
        Err(e) => Err(bmc_read_error(e)),
    }
}

/// What the pre-flight read of the server from its BMC.
#[derive(Debug)]
pub(crate) struct BmcReport {
    /// The ComputerSystem's SMBIOS `UUID`: without a hostname in the seed, IncusOS registers under it.
    pub system_uuid: Option<String>,
    /// What BIOS profiles are matched on: the server's record and the BMC's `Manufacturer`, `Model`, `SKU` and
    /// Bios `AttributeRegistry`.
    pub facts: ServerFacts,
    /// The BMC has a Bios resource for the ComputerSystem.
    pub has_bios: bool,
}

/// Reads the ComputerSystem and, when there is one, its Bios resource: two GETs, whatever the profiles ask, so
/// the deployment records what its profiles were matched on. A BMC without a Bios resource is not an error here
/// (a profile matching on its registry then does not match; [`check_bios`] decides whether the deployment
/// needs one).
pub(crate) async fn read_server_facts(client: &BmcClient, server: &Server) -> Result<BmcReport, ApiError> {
    let reported = |v: Option<String>| v.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    let system = client.read_system().await.map_err(bmc_read_error)?;
    let bios = match client.read_bios().await {
        Ok(bios) => Some(bios),
        Err(e) if e.class() == ErrorClass::Unsupported => {
            tracing::debug!(server = %server.name, error = %e, "deploy pre-flight: no Bios resource");
            None
        }
        Err(e) => return Err(bmc_read_error(e)),
    };
    Ok(BmcReport {
        system_uuid: reported(system.uuid),
        facts: ServerFacts {
            name: server.name.clone(),
            vendor_hint: reported(server.vendor_hint.clone()),
            manufacturer: reported(system.manufacturer),
            model: reported(system.model),
            sku: reported(system.sku),
            attribute_registry: reported(bios.as_ref().and_then(|b| b.attribute_registry.clone())),
        },
        has_bios: bios.is_some(),
    })
}

/// A BMC without a Bios resource can take a deployment only when no BIOS profile sets an attribute for the
/// server: refused here, rather than failing at the BIOS check minutes later. With nothing to set, the
/// deployment passes the BIOS by and records why.
pub(crate) fn check_bios(has_bios: bool, plan: &BiosPlan, profiles: &[BiosProfile]) -> Result<(), ApiError> {
    let wanted = plan.attributes.len() + plan.deferred_attributes.len();
    if wanted == 0 || has_bios {
        return Ok(());
    }
    let names: Vec<&str> = profiles.iter().map(|p| p.name.as_str()).collect();
    Err(ApiError::unprocessable(
        "bios_absent",
        "name",
        format!(
            "the BMC has no Bios resource, and the BIOS profiles {} set {wanted} attribute(s) for this server; \
             change the profiles' match rules or remove their attributes",
            names.join(", ")
        ),
    ))
}

/// The key databases the secure boot state rewrites must be exposed, and PK, KEK and db writable (a
/// `Certificates` collection to enrol into), or the deployment would fail minutes later, after the BIOS passes.
/// HPE iLO and Lenovo XCC expose none: their operators enrol the certificates beforehand and deploy with
/// `skip_secure_boot_certificates`.
pub(crate) async fn check_key_databases(client: &BmcClient) -> Result<(), ApiError> {
    const NEEDED: [(&str, bool); 4] = [("PK", true), ("KEK", true), ("db", true), ("dbx", false)];
    let refuse = |why: String| {
        ApiError::unprocessable(
            "secure_boot_keys_not_writable",
            "skip_secure_boot_certificates",
            format!(
                "{why}, so the IncusOS secure boot certificates cannot be enrolled through Redfish; enrol them \
                 beforehand and set skip_secure_boot_certificates"
            ),
        )
    };
    let listed = match client.key_database_access().await {
        Ok(KeyDatabaseAccess::Listed(listed)) => listed,
        Ok(KeyDatabaseAccess::NoDatabasesLink) => {
            return Err(refuse(
                "the BMC does not expose the UEFI key databases (its SecureBoot resource has no \
                 SecureBootDatabases link)"
                    .into(),
            ));
        }
        Err(e) if e.class() == ErrorClass::Unsupported => {
            return Err(refuse(format!("the BMC does not expose secure boot ({e})")));
        }
        Err(e) => return Err(bmc_read_error(e)),
    };
    let mut missing = Vec::new();
    for (name, enrolled_into) in NEEDED {
        match listed.iter().find(|d| d.database_id == name) {
            None => missing.push(format!("no key database {name}")),
            Some(d) if enrolled_into && !d.certificates => {
                missing.push(format!("no Certificates collection on key database {name}"))
            }
            Some(_) => {}
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(refuse(format!("the BMC has {}", missing.join(", "))))
    }
}

/// Reads the BMC's virtual media and boot settings and chooses the slot and boot target for an image of
/// `format` (`racklift_redfish::choose_slot`): a CD image goes into a CD/DVD slot and boots `Cd`, a disk image
/// into a USBStick slot and boots `Usb`; the named device, else the first that fits. A BMC with no slot that
/// can boot the image, or a named device that cannot, is refused naming `media_device` and the slots it has;
/// a BMC that does not list the boot target is refused naming `image_type` (an image of the other format
/// could boot).
pub(crate) async fn select_slot(
    client: &BmcClient,
    format: ImageFormat,
    device: Option<&str>,
) -> Result<SlotChoice, ApiError> {
    let no_media = || {
        ApiError::unprocessable(
            "no_virtual_media",
            "media_device",
            "the BMC reports no virtual media device",
        )
    };
    let slots = match client.list_virtual_media().await {
        Ok(slots) => slots,
        Err(e) if e.class() == ErrorClass::Unsupported => return Err(no_media()),
        Err(e) => return Err(bmc_read_error(e)),
    };
    let boot = match client.read_boot().await {
        Ok(boot) => boot,
        // A System without a Boot object: the override is refused when it is set, as on any BMC.
        Err(e) if e.class() == ErrorClass::Unsupported => Default::default(),
        Err(e) => return Err(bmc_read_error(e)),
    };
    let kind = match format {
        ImageFormat::Cd => ImageKind::Cd,
        ImageFormat::Disk => ImageKind::Disk,
    };
    choose_slot(kind, &slots, device, boot.allowed_targets.as_deref()).map_err(|refusal| {
        let text = format!("{refusal}");
        match refusal {
            SlotRefusal::NoSlots => no_media(),
            SlotRefusal::NotFound { .. } => {
                ApiError::unprocessable("media_device_not_found", "media_device", text)
            }
            SlotRefusal::Unsuitable { .. } | SlotRefusal::NoneSuitable { .. } => ApiError::unprocessable(
                "media_device_unsuitable",
                "media_device",
                format!(
                    "{text}: a {} image boots from a {} slot",
                    format.as_str(),
                    kind.needs()
                ),
            ),
            SlotRefusal::TargetNotOffered { .. } => ApiError::unprocessable(
                "boot_target_not_offered",
                "image_type",
                format!("{text}, which a {} image boots with", format.as_str()),
            ),
        }
    })
}
