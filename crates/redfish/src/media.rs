//! Virtual media: finding a CD/DVD slot, inserting with the fallback chain (standard action →
//! OEM action → PATCH), ejecting as an "ensure empty", and reading the slot back.
//!
//! Slots are named `system:<id>` or `manager:<id>` so a deployment can persist its choice and
//! re-resolve it after a restart. Every capability is optional: the DMTF CD mockup has no
//! actions at all, Lenovo XCC needs PATCH, HPE adds OEM actions, Supermicro hides EjectMedia
//! while the slot is empty.
//!
//! What the slots report varies as much: iLO 5 writes `Image: ""` for an empty slot where others write null
//! (both read as empty), iDRAC 9 reports `TransferMethod: null` although it copies the image at insert (so
//! `None` means "not said", never "Stream"), and XCC lists each slot under the System and under the Manager.
//! Those are the same devices at two URIs: both are listed (`system:EXT1` and `manager:EXT1`), the System's
//! first, so the slot chosen by default is the System's, and a change through either URI reads back through
//! both.

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::client::{BmcClient, Idempotency, Reply};
use crate::error::{Error, Result};
use crate::model::{ActionInfo, ActionRef, Collection, link_field, redfish_enum};
use crate::task::TaskMonitor;

mod choice;
mod read_back;
pub use choice::{ImageKind, SlotChoice, SlotRefusal, choose_slot};
pub use read_back::{SlotExpectation, SlotReadBack};

redfish_enum!(
    /// `MediaTypes` entries.
    MediaType { CD, DVD, Floppy, USBStick }
);

redfish_enum!(
    /// `TransferMethod`: Stream reads on demand, Upload copies the image at insert time.
    TransferMethod { Stream, Upload }
);

/// Which resource a slot hangs off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SlotOwner {
    /// Reached through the ComputerSystem's `VirtualMedia` link (even if it points into
    /// Managers, as on Supermicro).
    System,
    /// Reached through the Manager's `VirtualMedia` link.
    Manager,
}

/// A persistable slot name: `system:<id>` or `manager:<id>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SlotRef {
    /// Where the slot was found.
    pub owner: SlotOwner,
    /// The slot's `Id`.
    pub id: String,
}

impl fmt::Display for SlotRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let owner = match self.owner {
            SlotOwner::System => "system",
            SlotOwner::Manager => "manager",
        };
        write!(f, "{owner}:{}", self.id)
    }
}

impl FromStr for SlotRef {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let (owner, id) = s.split_once(':').ok_or_else(|| Error::Config {
            reason: format!("slot {s:?}"),
        })?;
        let owner = match owner {
            "system" => SlotOwner::System,
            "manager" => SlotOwner::Manager,
            _ => {
                return Err(Error::Config {
                    reason: format!("slot {s:?}: owner must be system or manager"),
                });
            }
        };
        Ok(Self {
            owner,
            id: id.to_owned(),
        })
    }
}

/// A VirtualMedia resource.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct VirtualMedia {
    /// The resource URI.
    #[serde(rename = "@odata.id", default)]
    pub odata_id: String,
    /// `Id`.
    #[serde(default)]
    pub id: String,
    /// Media the slot can take.
    #[serde(default)]
    pub media_types: Vec<MediaType>,
    /// Image URL; empty (iLO 5) or null when nothing is inserted.
    #[serde(default)]
    pub image: Option<String>,
    /// Image name.
    #[serde(default)]
    pub image_name: Option<String>,
    /// `Inserted` (may be absent).
    #[serde(default)]
    pub inserted: Option<bool>,
    /// `WriteProtected`.
    #[serde(default)]
    pub write_protected: Option<bool>,
    /// `TransferMethod`: `None` when null or absent, which says nothing about how the BMC reads the image
    /// (iDRAC 9 reports null and copies it at insert).
    #[serde(default)]
    pub transfer_method: Option<TransferMethod>,
    /// `TransferProtocolType`.
    #[serde(default)]
    pub transfer_protocol_type: Option<String>,
    /// `Actions`.
    #[serde(default)]
    pub actions: Option<Map<String, Value>>,
    /// `Oem`: an iLO publishes its media actions here (`Oem.Hpe.Actions`), not under `Actions.Oem`.
    #[serde(default)]
    pub oem: Option<Map<String, Value>>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl VirtualMedia {
    /// "Has media": `Inserted` is not false, and `Image` or `ImageName` is non-empty (`""` and whitespace are
    /// empty, as iLO reports an empty slot).
    pub fn has_media(&self) -> bool {
        let named = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.trim().is_empty());
        self.inserted != Some(false) && (named(&self.image) || named(&self.image_name))
    }

    /// Whether the slot holds exactly `image` (the attach wait condition).
    pub fn holds(&self, image: &str) -> bool {
        self.has_media() && self.image.as_deref() == Some(image)
    }

    /// The OEM action whose name ends with `suffix` (`InsertVirtualMedia`): under a vendor's `Oem.<vendor>.Actions`
    /// in the resource, where iLO 5 and 6 put `#HpeiLOVirtualMedia.InsertVirtualMedia`, or under `Actions.Oem`,
    /// where the Redfish specification lets a vendor extend `Actions`.
    pub fn oem_action(&self, suffix: &str) -> Option<ActionRef> {
        let in_resource = self.oem.as_ref().and_then(|oem| {
            oem.values()
                .filter_map(|vendor| vendor.get("Actions")?.as_object())
                .find_map(|actions| ActionRef::find_named(actions, suffix))
        });
        in_resource.or_else(|| ActionRef::find_oem(self.actions.as_ref(), suffix))
    }

    /// Whether the slot takes CDs or DVDs.
    pub fn is_optical(&self) -> bool {
        self.media_types
            .iter()
            .any(|t| matches!(t, MediaType::CD | MediaType::DVD))
    }
}

/// A discovered slot.
#[derive(Clone, Debug)]
pub struct MediaSlot {
    /// Its persistable name.
    pub slot: SlotRef,
    /// The resource as read.
    pub media: VirtualMedia,
}

/// How media got inserted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertMethod {
    /// The image was already in the slot; nothing was sent.
    AlreadyInserted,
    /// `#VirtualMedia.InsertMedia`.
    Action,
    /// An OEM `*.InsertVirtualMedia` action.
    OemAction,
    /// PATCH of the slot.
    Patch,
}

/// What an insert did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InsertOutcome {
    /// Which link of the chain worked.
    pub method: InsertMethod,
    /// Task monitor, on a 202.
    pub task: Option<TaskMonitor>,
}

/// How a slot was emptied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EjectMethod {
    /// `#VirtualMedia.EjectMedia`.
    Action,
    /// An OEM `*.EjectVirtualMedia` action.
    OemAction,
    /// PATCH `{"Image": null, "Inserted": false}`.
    Patch,
    /// The BMC offers no way to eject and reports the slot empty.
    NothingToEject,
    /// The BMC refused the eject, but the slot reads back empty.
    AlreadyEmpty,
}

impl BmcClient {
    /// Every virtual-media slot: the system's first, then the manager's (deduplicated when
    /// the system's link points into the manager).
    pub async fn list_virtual_media(&self) -> Result<Vec<MediaSlot>> {
        self.within("list_virtual_media", self.slots()).await
    }

    /// The slot the deployment uses by default: the first CD/DVD-capable one, system slots
    /// first. Only a BMC without any such slot is an error.
    pub async fn select_cd_slot(&self) -> Result<MediaSlot> {
        self.within("select_cd_slot", async {
            self.slots()
                .await?
                .into_iter()
                .find(|s| s.media.is_optical())
                .ok_or_else(|| Error::Unsupported {
                    what: "a CD/DVD virtual media slot".into(),
                })
        })
        .await
    }

    /// Reads one slot (`Inserted`, `Image`, `TransferMethod`, …).
    pub async fn read_media(&self, slot: &SlotRef) -> Result<VirtualMedia> {
        self.within("read_media", async {
            let path = self.slot_path(slot).await?;
            self.get_json(&path).await
        })
        .await
    }

    /// Ensures `image` is inserted in `slot`. Refuses to replace foreign media (clearing is an
    /// earlier, separate step). Tries InsertMedia (adding parameters the BMC reports missing,
    /// dropping ones it rejects), then an OEM action, then PATCH. The caller confirms by
    /// reading the slot back ([`VirtualMedia::holds`]).
    pub async fn insert_media(&self, slot: &SlotRef, image: &str) -> Result<InsertOutcome> {
        self.within("insert_media", async {
            let path = self.slot_path(slot).await?;
            let media: VirtualMedia = self.get_json(&path).await?;
            if media.holds(image) {
                return Ok(InsertOutcome {
                    method: InsertMethod::AlreadyInserted,
                    task: None,
                });
            }
            if media.has_media() {
                return Err(Error::Refused {
                    what: format!(
                        "slot {slot} holds foreign media {:?}",
                        media.image.unwrap_or_default()
                    ),
                });
            }
            let actions = media.actions.as_ref();
            if let Some(action) = ActionRef::find(actions, "#VirtualMedia.InsertMedia") {
                match self.insert_by_action(&action, image).await {
                    Ok(reply) => return Ok(outcome(InsertMethod::Action, &reply)),
                    Err(e) if e.means_not_here() => {}
                    Err(e) => return Err(e),
                }
            }
            if let Some(action) = media.oem_action("InsertVirtualMedia") {
                let body = json!({ "Image": image });
                match self.post(&action.target, &body, Idempotency::Once).await {
                    Ok(reply) => return Ok(outcome(InsertMethod::OemAction, &reply)),
                    Err(e) if e.means_not_here() => {}
                    Err(e) => return Err(e),
                }
            }
            let mut body = Map::new();
            body.insert("Image".into(), json!(image));
            body.insert("Inserted".into(), json!(true));
            body.insert("WriteProtected".into(), json!(true));
            let reply = self.patch_dropping(&path, body).await?;
            Ok(outcome(InsertMethod::Patch, &reply))
        })
        .await
    }

    /// Ensures `slot` is empty. Sends an eject even when nothing is reported inserted (a BMC
    /// may have dropped the report but not the override); a refusal counts as success when
    /// the slot reads back empty.
    pub async fn eject_media(&self, slot: &SlotRef) -> Result<EjectMethod> {
        self.within("eject_media", async {
            let path = self.slot_path(slot).await?;
            let media: VirtualMedia = self.get_json(&path).await?;
            let actions = media.actions.as_ref();
            let attempts = [
                (
                    ActionRef::find(actions, "#VirtualMedia.EjectMedia"),
                    EjectMethod::Action,
                ),
                (media.oem_action("EjectVirtualMedia"), EjectMethod::OemAction),
            ];
            for (action, method) in attempts {
                let Some(action) = action else { continue };
                match self
                    .post(&action.target, &json!({}), Idempotency::Idempotent)
                    .await
                {
                    Ok(_) => return Ok(method),
                    Err(e) => match self.refusal_outcome(&path, e).await? {
                        Some(done) => return Ok(done),
                        None => continue,
                    },
                }
            }
            if !media.has_media() && ActionRef::find(actions, "#VirtualMedia.InsertMedia").is_some() {
                // Supermicro: no EjectMedia while empty, which is normal.
                return Ok(EjectMethod::NothingToEject);
            }
            let mut body = Map::new();
            body.insert("Image".into(), Value::Null);
            body.insert("Inserted".into(), json!(false));
            match self.patch_dropping(&path, body).await {
                Ok(_) => Ok(EjectMethod::Patch),
                Err(e) => match self.refusal_outcome(&path, e).await? {
                    Some(done) => Ok(done),
                    None => Err(Error::Unsupported {
                        what: format!("ejecting media from slot {slot}"),
                    }),
                },
            }
        })
        .await
    }

    /// After a failed eject: `Some(AlreadyEmpty)` if the slot reads back empty, `None` to try
    /// the next method when the error means "not here", else the error itself.
    async fn refusal_outcome(&self, path: &str, err: Error) -> Result<Option<EjectMethod>> {
        if !matches!(err.status(), Some(400..=499)) {
            return Err(err);
        }
        let now: VirtualMedia = self.get_json(path).await?;
        if !now.has_media() {
            return Ok(Some(EjectMethod::AlreadyEmpty));
        }
        if err.means_not_here() { Ok(None) } else { Err(err) }
    }

    async fn insert_by_action(&self, action: &ActionRef, image: &str) -> Result<Reply> {
        let info = match &action.action_info {
            Some(uri) => Some(self.get_json::<ActionInfo>(uri).await?),
            None => None,
        };
        let protocol = protocol_of(image);
        let mut body = Map::new();
        body.insert("Image".into(), json!(image));
        match &info {
            None => {
                body.insert("Inserted".into(), json!(true));
                body.insert("WriteProtected".into(), json!(true));
            }
            Some(info) => {
                let allows = |name: &str, value: &str| {
                    info.parameter(name).is_some_and(|p| {
                        p.allowable_values
                            .as_ref()
                            .is_none_or(|v| v.iter().any(|x| x == value))
                    })
                };
                for flag in ["Inserted", "WriteProtected"] {
                    if info.parameter(flag).is_some() {
                        body.insert(flag.into(), json!(true));
                    }
                }
                if let Some(protocol) = protocol
                    && allows("TransferProtocolType", protocol)
                {
                    body.insert("TransferProtocolType".into(), json!(protocol));
                }
                if allows("TransferMethod", "Stream") {
                    body.insert("TransferMethod".into(), json!("Stream"));
                }
            }
        }
        let mut attempts_left = 3;
        loop {
            attempts_left -= 1;
            let err = match self
                .post(&action.target, &Value::Object(body.clone()), Idempotency::Once)
                .await
            {
                Ok(reply) => return Ok(reply),
                Err(e) => e,
            };
            if attempts_left == 0 || err.status() != Some(400) {
                return Err(err);
            }
            let value_for = |name: &str| match name {
                "Inserted" | "WriteProtected" => Some(json!(true)),
                "TransferProtocolType" => protocol.map(|p| json!(p)),
                "TransferMethod" => Some(json!("Stream")),
                _ => None,
            };
            if let Some(missing) = err.missing_parameter()
                && !body.contains_key(&missing)
                && let Some(value) = value_for(&missing)
            {
                body.insert(missing, value);
            } else if let Some(unwanted) = err.unwanted_parameter()
                && unwanted != "Image"
                && body.remove(&unwanted).is_some()
            {
            } else {
                return Err(err);
            }
        }
    }

    /// PATCHes `body`, dropping properties the BMC reports unknown or read-only (up to three
    /// times). Sends `If-Match` with the slot's ETag when known.
    async fn patch_dropping(&self, path: &str, mut body: Map<String, Value>) -> Result<Reply> {
        let etag = self.get(path).await.ok().and_then(|r| r.etag());
        for _ in 0..3 {
            match self
                .patch(path, &Value::Object(body.clone()), etag.as_deref())
                .await
            {
                Ok(reply) => return Ok(reply),
                Err(e) => match e.unwanted_parameter() {
                    Some(p) if p != "Image" && body.remove(&p).is_some() => {}
                    _ => return Err(e),
                },
            }
        }
        self.patch(path, &Value::Object(body), etag.as_deref()).await
    }

    async fn slots(&self) -> Result<Vec<MediaSlot>> {
        let mut out: Vec<MediaSlot> = Vec::new();
        for owner in [SlotOwner::System, SlotOwner::Manager] {
            let Some(collection) = self.media_collection(owner).await? else {
                continue;
            };
            for member in collection.members {
                if out.iter().any(|s| s.media.odata_id == member.odata_id) {
                    continue;
                }
                let mut media: VirtualMedia = self.get_json(&member.odata_id).await?;
                if media.odata_id.is_empty() {
                    media.odata_id = member.odata_id.clone();
                }
                let id = if media.id.is_empty() {
                    last_segment(&member.odata_id).to_owned()
                } else {
                    media.id.clone()
                };
                out.push(MediaSlot {
                    slot: SlotRef { owner, id },
                    media,
                });
            }
        }
        Ok(out)
    }

    async fn media_collection(&self, owner: SlotOwner) -> Result<Option<Collection>> {
        let holder = match owner {
            SlotOwner::System => Some(self.system_path().await?),
            SlotOwner::Manager => self.manager_path().await?,
        };
        let Some(holder) = holder else { return Ok(None) };
        let resource: Map<String, Value> = self.get_json(&holder).await?;
        match link_field(&resource, "VirtualMedia") {
            Some(link) => self.get_json(&link).await.map(Some),
            None => Ok(None),
        }
    }

    /// Resolves a slot name to its URI: by the member's last path segment, else by `Id`.
    async fn slot_path(&self, slot: &SlotRef) -> Result<String> {
        let not_found = || Error::Unsupported {
            what: format!("virtual media slot {slot}"),
        };
        let collection = self.media_collection(slot.owner).await?.ok_or_else(not_found)?;
        if let Some(m) = collection
            .members
            .iter()
            .find(|m| last_segment(&m.odata_id) == slot.id)
        {
            return Ok(m.odata_id.clone());
        }
        for m in &collection.members {
            let media: VirtualMedia = self.get_json(&m.odata_id).await?;
            if media.id == slot.id {
                return Ok(m.odata_id.clone());
            }
        }
        Err(not_found())
    }
}

fn outcome(method: InsertMethod, reply: &Reply) -> InsertOutcome {
    InsertOutcome {
        method,
        task: TaskMonitor::from_reply(reply),
    }
}

pub(crate) fn last_segment(path: &str) -> &str {
    path.trim_end_matches('/').rsplit('/').next().unwrap_or(path)
}

/// `TransferProtocolType` for an image URL's scheme.
fn protocol_of(image: &str) -> Option<&'static str> {
    let scheme = image.split_once("://")?.0.to_ascii_lowercase();
    Some(match scheme.as_str() {
        "https" => "HTTPS",
        "http" => "HTTP",
        "nfs" => "NFS",
        "cifs" | "smb" => "CIFS",
        "ftp" => "FTP",
        "sftp" => "SFTP",
        "tftp" => "TFTP",
        "scp" => "SCP",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_refs_round_trip() {
        let s: SlotRef = "manager:RemovableDisk".parse().expect("parse");
        assert_eq!(
            s,
            SlotRef {
                owner: SlotOwner::Manager,
                id: "RemovableDisk".into()
            }
        );
        assert_eq!(s.to_string(), "manager:RemovableDisk");
        assert!("elsewhere:1".parse::<SlotRef>().is_err());
        assert!("nocolon".parse::<SlotRef>().is_err());
    }

    #[test]
    fn has_media_follows_the_reference_rule() {
        let parse = |s: &str| serde_json::from_str::<VirtualMedia>(s).expect("media");
        assert!(!parse(r##"{"Image":null,"Inserted":false,"MediaTypes":["CD","DVD"]}"##).has_media());
        assert!(!parse(r##"{"Image":"","Inserted":true}"##).has_media());
        // iLO 5's empty slot.
        let ilo = parse(r##"{"Image":"","ImageName":"","Inserted":false,"MediaTypes":["CD","DVD"]}"##);
        assert!(!ilo.has_media() && !ilo.holds(""));
        // iDRAC 9: inserted, no TransferMethod.
        let idrac = parse(r##"{"Image":"http://x/a.iso","Inserted":true,"TransferMethod":null}"##);
        assert!(idrac.holds("http://x/a.iso"));
        assert_eq!(idrac.transfer_method, None);
        assert!(!parse(r##"{"Image":"http://x/a.iso","Inserted":false}"##).has_media());
        let m = parse(r##"{"Image":"http://x/a.iso","TransferMethod":"Upload","MediaTypes":["DVD"]}"##);
        assert!(m.has_media() && m.holds("http://x/a.iso") && !m.holds("http://x/b.iso"));
        assert!(m.is_optical());
        assert_eq!(m.transfer_method, Some(TransferMethod::Upload));
        assert!(!parse(r##"{"MediaTypes":["USBStick"]}"##).is_optical());
    }

    #[test]
    fn protocols_from_schemes() {
        assert_eq!(protocol_of("https://h/x.iso"), Some("HTTPS"));
        assert_eq!(protocol_of("HTTP://h/x.iso"), Some("HTTP"));
        assert_eq!(protocol_of("gopher://h"), None);
        assert_eq!(protocol_of("no-scheme"), None);
        assert_eq!(last_segment("/redfish/v1/Managers/1/VirtualMedia/CD/"), "CD");
    }
}
