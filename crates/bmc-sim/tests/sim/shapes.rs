//! The shapes recorded from real BMCs that each personality reproduces: XCC's slots under the System and the
//! Manager, iDRAC 9's null `TransferMethod`, Supermicro's three slots and power cycle, and BIOS resources that
//! name an attribute registry the service publishes and checks writes against.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{self, Client, media_server};
use crate::seeded::plain_image;

async fn members(c: &Client, collection: &str) -> Vec<String> {
    c.get(collection).await["Members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["@odata.id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn xcc_publishes_each_slot_under_the_system_and_the_manager_as_one_device() {
    let sim = common::start(1, "lenovo").await;
    let c = Client::new(&sim);
    let sys = c.system(&sim.bmc_url(0)).await;
    let mgr = c
        .get(sys["Links"]["ManagedBy"][0]["@odata.id"].as_str().unwrap())
        .await;
    let on_system = members(&c, sys["VirtualMedia"]["@odata.id"].as_str().unwrap()).await;
    let on_manager = members(&c, mgr["VirtualMedia"]["@odata.id"].as_str().unwrap()).await;
    assert_eq!(on_system.len(), 10);
    let ids = |links: &[String]| -> Vec<String> {
        links
            .iter()
            .map(|l| l.rsplit('/').next().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(&on_system), ids(&on_manager), "the same slots in both");
    assert!(
        on_system[0].ends_with("/Systems/1/VirtualMedia/EXT1"),
        "{}",
        on_system[0]
    );
    for link in on_system.iter().chain(&on_manager) {
        let slot = c.get(link).await;
        assert_eq!(slot["@odata.id"], json!(link), "each URI names itself");
        assert_eq!(slot["MediaTypes"], json!(["CD", "DVD", "Floppy", "USBStick"]));
        assert!(slot.get("Actions").is_none(), "PATCH only");
    }

    // Inserted through the System's URI, seen through the Manager's; ejected through the Manager's.
    let media = media_server(plain_image(1 << 16)).await;
    let (status, _, _) = c
        .patch(
            &on_system[0],
            json!({"Image": media.url(), "Inserted": true, "WriteProtected": true}),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    for link in [&on_system[0], &on_manager[0]] {
        let slot = c.get(link).await;
        assert_eq!(
            (&slot["Image"], &slot["Inserted"]),
            (&json!(media.url()), &json!(true)),
            "{link}"
        );
    }
    assert_eq!(
        c.get(&on_system[1]).await["Inserted"],
        false,
        "EXT2 is another device"
    );
    let (status, _, _) = c
        .patch(&on_manager[0], json!({"Image": null, "Inserted": false}))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(c.get(&on_system[0]).await["Inserted"], false);
}

#[tokio::test]
async fn idrac_reports_a_null_transfer_method_and_takes_usb_in_system_slot_two() {
    let sim = common::start(1, "dell").await;
    let c = Client::new(&sim);
    let sys = c.system(&sim.bmc_url(0)).await;
    let on_system = members(&c, sys["VirtualMedia"]["@odata.id"].as_str().unwrap()).await;
    let types: Vec<Value> = {
        let mut out = Vec::new();
        for link in &on_system {
            let slot = c.get(link).await;
            assert_eq!(slot["TransferMethod"], Value::Null, "{link}");
            out.push(slot["MediaTypes"].clone());
        }
        out
    };
    assert_eq!(types, [json!(["CD", "DVD"]), json!(["CD", "DVD", "USBStick"])]);
}

#[tokio::test]
async fn supermicro_has_three_slots_and_a_power_cycle_but_no_power_button() {
    let sim = common::start(1, "supermicro").await;
    let c = Client::new(&sim);
    let sys = c.system(&sim.bmc_url(0)).await;
    let slots = members(&c, sys["VirtualMedia"]["@odata.id"].as_str().unwrap()).await;
    assert_eq!(slots.len(), 3, "{slots:?}");
    let reset = &sys["Actions"]["#ComputerSystem.Reset"];
    let info = c.get(reset["@Redfish.ActionInfo"].as_str().unwrap()).await;
    let allowed = info["Parameters"][0]["AllowableValues"]
        .as_array()
        .unwrap()
        .clone();
    assert!(allowed.contains(&json!("PowerCycle")), "{allowed:?}");
    assert!(!allowed.contains(&json!("PushPowerButton")), "{allowed:?}");
    let (status, _, body) = c
        .post(
            reset["target"].as_str().unwrap(),
            json!({"ResetType": "PushPowerButton"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["error"]["@Message.ExtendedInfo"][0]["MessageId"],
        "Base.1.8.ActionParameterValueNotInList"
    );
    assert_eq!(c.reset(&sys, "PowerCycle").await, StatusCode::NO_CONTENT);
    common::wait_for(
        "powered on by the cycle",
        std::time::Duration::from_secs(10),
        || async { (c.get(sys["@odata.id"].as_str().unwrap()).await["PowerState"] == "On").then_some(()) },
    )
    .await;
}

/// `(personality, registry size, an attribute only that vendor has, a read-only attribute, unknown-attribute id)`.
const REGISTRIES: &[(&str, usize, &str, &str, &str)] = &[
    (
        "generic",
        32,
        "LogicalProc",
        "SystemBiosVersion",
        "Base.1.8.PropertyUnknown",
    ),
    (
        "dell",
        455,
        "SysProfile",
        "SystemServiceTag",
        "Base.1.8.PropertyUnknown",
    ),
    (
        "hpe",
        277,
        "WorkloadProfile",
        "DimmSlot1Status",
        "iLO.2.14.PropertyNotWritableOrUnknown",
    ),
    (
        "lenovo",
        400,
        "Processors_IntelVirtualizationTechnology",
        "SystemInformation_BiosVersion",
        "Base.1.8.PropertyUnknown",
    ),
    (
        "supermicro",
        300,
        "IntelVirtualizationTechnology_0002",
        "SMCBiosVersion_001E",
        "Base.1.8.PropertyUnknown",
    ),
];

fn first_message(body: &Value) -> &Value {
    &body["error"]["@Message.ExtendedInfo"][0]
}

#[tokio::test]
async fn bios_resources_name_a_published_registry_that_settings_writes_are_checked_against() {
    for &(personality, size, vendor_name, read_only, unknown_id) in REGISTRIES {
        let sim = common::start(1, personality).await;
        let c = Client::new(&sim);
        let root = c.get(&format!("{}/redfish/v1", sim.bmc_url(0))).await;
        let sys = c.system(&sim.bmc_url(0)).await;
        let bios = c.get(sys["Bios"]["@odata.id"].as_str().unwrap()).await;
        let name = bios["AttributeRegistry"].as_str().unwrap().to_owned();
        assert!(
            name.starts_with("BiosAttributeRegistry") && name.ends_with(".v1_0_0"),
            "{name}"
        );
        let attributes = bios["Attributes"].as_object().unwrap();
        assert!(
            attributes.contains_key(vendor_name),
            "{personality}: {vendor_name}"
        );

        // Registries → the file whose Registry is the name → Location → the AttributeRegistry.
        let files = members(&c, root["Registries"]["@odata.id"].as_str().unwrap()).await;
        let mut file = Value::Null;
        for link in &files {
            let f = c.get(link).await;
            if f["Registry"] == json!(name) {
                file = f;
            }
        }
        assert_eq!(
            file["@odata.type"], "#MessageRegistryFile.v1_1_3.MessageRegistryFile",
            "{personality}"
        );
        let registry = c.get(file["Location"][0]["Uri"].as_str().unwrap()).await;
        assert_eq!(registry["Id"], json!(name));
        let entries = registry["RegistryEntries"]["Attributes"].as_array().unwrap();
        assert_eq!(entries.len(), size, "{personality}");
        let entry = |n: &str| entries.iter().find(|e| e["AttributeName"] == n).cloned();
        for published in attributes.keys() {
            assert!(
                entry(published).is_some(),
                "{personality}: {published} not in the registry"
            );
        }
        assert_eq!(entry(read_only).expect("read-only entry")["ReadOnly"], true);
        let virt = entry("ProcVirtualization").expect("shared name");
        assert_eq!(virt["Type"], "Enumeration");
        assert_eq!(virt["Value"][0]["ValueName"], "Enabled");

        let settings = bios["@Redfish.Settings"]["SettingsObject"]["@odata.id"]
            .as_str()
            .unwrap()
            .to_owned();
        for (attrs, id, named) in [
            (
                json!({"ProcTurboMode": "Disabled", "NoSuchKnob": "Enabled"}),
                unknown_id,
                "NoSuchKnob",
            ),
            (
                json!({"ProcVirtualization": "Sometimes"}),
                "Base.1.8.PropertyValueNotInList",
                "ProcVirtualization",
            ),
            (
                json!({"ProcVirtualization": true}),
                "Base.1.8.PropertyValueTypeError",
                "ProcVirtualization",
            ),
        ] {
            let (status, _, body) = c.patch(&settings, json!({"Attributes": attrs})).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{personality}: {attrs}");
            let m = first_message(&body);
            assert_eq!(m["MessageId"], id, "{personality}: {attrs}");
            assert!(
                m["MessageArgs"].as_array().unwrap().contains(&json!(named)),
                "{personality}: {m}"
            );
            assert_eq!(m["RelatedProperties"], json!([format!("#/Attributes/{named}")]));
        }
        let (status, _, body) = c.patch(&settings, json!({"Attributes": {read_only: "x"}})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{personality}");
        assert!(
            first_message(&body)["MessageId"]
                .as_str()
                .unwrap()
                .contains("NotWritable"),
            "{body}"
        );
        let pending = c.get(&settings).await;
        assert_eq!(
            pending["Attributes"],
            json!({}),
            "{personality}: a refused PATCH stages nothing"
        );
    }
}
