//! The installer acts on the seed inside the media only, and the installed OS registers as IncusOS does.

use std::time::Duration;

use racklift_bmc_sim::SimHandle;
use reqwest::StatusCode;
use rustls::ProtocolVersion;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};

use crate::common::{self, Client, MediaServer, cd_slot, media_server, wait_for};
use crate::lifecycle::{eject, insert};
use crate::registration::{self, MANAGER_CERT};
use crate::seeded::{
    full_seed, image_without_partition2, image_without_seed_data, install_yaml, provider_json,
    seeded_disk_image, seeded_image,
};

const LONG: Duration = Duration::from_secs(30);
const SIZE: u64 = 2 << 20;

/// Insert `media` into server 0's CD slot and power it on (inserted media boots ahead of the disk).
async fn boot(sim: &SimHandle, media: &MediaServer) -> (Client, Value) {
    let c = Client::new(sim);
    let slot = cd_slot(&c, &sim.bmc_url(0)).await;
    insert(&c, &slot, &media.url()).await;
    let sys = c.system(&sim.bmc_url(0)).await;
    assert_eq!(c.reset(&sys, "On").await, StatusCode::NO_CONTENT);
    (c, slot)
}

/// Boot, wait for stage 1 to end, eject, wait for the installed OS to come up (or fail).
pub async fn install(sim: &SimHandle, media: &MediaServer) {
    let (c, slot) = boot(sim, media).await;
    wait_for("installed", LONG, || async {
        (sim.truth(0)["installed"] == true).then_some(())
    })
    .await;
    eject(&c, &c.get(slot["@odata.id"].as_str().unwrap()).await).await;
    wait_for("the installed OS up", LONG, || async {
        let phase = sim.truth(0)["phase"]["phase"].clone();
        (phase == "os_running" || phase == "os_failed").then_some(())
    })
    .await;
}

async fn phase_of(sim: &SimHandle, want: &str) -> Value {
    wait_for(want, LONG, || async {
        let truth = sim.truth(0);
        (truth["phase"]["phase"] == want).then_some(truth)
    })
    .await
}

#[tokio::test]
async fn registers_over_tls13_with_its_client_certificate_the_seed_token_and_the_seed_hostname() {
    let sim = common::start_with_tls(1, "generic", true).await;
    let oc = registration::start(false, Vec::new()).await;
    let mut seed = full_seed(true, provider_json(&oc.url, "tok-9", Some(&oc.cert_pem)));
    seed.push((
        "network.yaml",
        "version: \"1\"\ndns:\n  hostname: web-1\n  domain: example.test\n".to_owned(),
    ));
    let media = media_server(seeded_image(SIZE, &seed)).await;
    install(&sim, &media).await;
    let truth = wait_for("registered", LONG, || async {
        let t = sim.truth(0);
        (t["registered"] == true).then_some(t)
    })
    .await;
    let received = oc.received();
    assert_eq!(received.len(), 1);
    let r = &received[0];
    assert_eq!(r.token.as_deref(), Some("tok-9"));
    assert_eq!(r.body["name"], "web-1.example.test");
    assert_eq!(
        r.body["connection_url"],
        json!(sim.incus_url(0).expect("Incus runs"))
    );
    assert!(r.body["connection_url"].as_str().unwrap().starts_with("https://"));
    assert_eq!(r.tls_version, Some(ProtocolVersion::TLSv1_3));
    let pem = truth["os"]["client_certificate"]
        .as_str()
        .expect("a client certificate");
    let der = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
    assert_eq!(
        r.client_cert.as_deref(),
        Some(der.as_ref()),
        "its own Incus certificate is presented"
    );
    assert_eq!(truth["os"]["trusted_certificates"], json!([MANAGER_CERT]));
    assert_eq!(truth["os"]["hostname"], "web-1.example.test");
    assert_eq!(
        truth["os"]["seed_files"],
        json!([
            "provider.json",
            "applications.yaml",
            "incus.yaml",
            "update.yml",
            "network.yaml"
        ]),
        "the installed copy of the seed has no install file"
    );
    assert_eq!(truth["install_seed"]["force_reboot"], true);
}

#[tokio::test]
async fn an_answer_that_is_not_a_sync_200_envelope_is_a_failed_registration_and_is_retried() {
    let sim = common::start(1, "generic").await;
    let script = vec![
        (StatusCode::OK, json!({"name": "x", "registered": true})),
        (
            StatusCode::OK,
            json!({"type": "async", "status": "Operation created", "status_code": 100}),
        ),
        (
            StatusCode::FORBIDDEN,
            json!({"type": "error", "error": "bad token", "error_code": 403}),
        ),
        (
            StatusCode::CREATED,
            json!({"type": "sync", "status": "Created", "status_code": 201, "metadata": {}}),
        ),
    ];
    let oc = registration::start(false, script).await;
    let media = media_server(seeded_image(
        SIZE,
        &full_seed(true, provider_json(&oc.url, "t", Some(&oc.cert_pem))),
    ))
    .await;
    install(&sim, &media).await;
    wait_for("a failed registration", LONG, || async {
        let t = sim.truth(0);
        (t["os"]["registration_error"].is_string() && t["registered"] == false).then_some(())
    })
    .await;
    wait_for("registered at last", LONG, || async {
        (sim.truth(0)["registered"] == true).then_some(())
    })
    .await;
    assert_eq!(oc.received().len(), 5, "four refused answers, then the envelope");
    let truth = sim.truth(0);
    assert_eq!(truth["os"]["registration_error"], Value::Null);
    assert_eq!(truth["os"]["trusted_certificates"], json!([MANAGER_CERT]));
    assert_eq!(truth["counters"]["registration_attempts"], 5);
}

#[tokio::test]
async fn a_manager_below_tls13_or_with_another_certificate_is_never_registered_with() {
    for (tls12_only, pin_other) in [(true, false), (false, true)] {
        let sim = common::start(1, "generic").await;
        let oc = registration::start(tls12_only, Vec::new()).await;
        let other = registration::start(false, Vec::new()).await;
        let pin = if pin_other { &other.cert_pem } else { &oc.cert_pem };
        let media = media_server(seeded_image(
            SIZE,
            &full_seed(true, provider_json(&oc.url, "t", Some(pin))),
        ))
        .await;
        install(&sim, &media).await;
        // Five sends per daemon run: more than that is the daemon started again and retrying.
        wait_for("retried registrations", LONG, || async {
            (sim.truth(0)["counters"]["registration_attempts"]
                .as_u64()
                .unwrap()
                > 5)
            .then_some(())
        })
        .await;
        let truth = sim.truth(0);
        assert_eq!(truth["registered"], false);
        assert!(truth["os"]["registration_error"].is_string(), "{truth}");
        assert!(oc.received().is_empty(), "no request got through the handshake");
    }
}

#[tokio::test]
async fn without_an_install_file_or_seed_data_the_live_image_boots_and_never_installs() {
    let oc = registration::start(false, Vec::new()).await;
    let provider_only = seeded_image(SIZE, &[provider_json(&oc.url, "t", Some(&oc.cert_pem))]);
    for image in [provider_only, image_without_seed_data(SIZE)] {
        let sim = common::start(1, "generic").await;
        let media = media_server(image).await;
        boot(&sim, &media).await;
        let truth = phase_of(&sim, "live_without_install_seed").await;
        let detail = truth["phase"]["detail"].as_str().unwrap();
        assert!(
            detail.contains("unable to begin install without seed configuration"),
            "{detail}"
        );
        assert_eq!(truth["installed"], false);
        assert_eq!(truth["install_seed"], Value::Null);
        assert!(
            media.bytes_served() < media.size,
            "the image is not copied to a disk"
        );
    }
    assert!(oc.received().is_empty());
}

#[tokio::test]
async fn a_malformed_install_file_or_no_partition_2_fails_the_install_with_the_reason() {
    let cases = [
        (
            seeded_image(SIZE, &[("install.yaml", "force_reboot: [\n".to_owned())]),
            "install.yaml",
        ),
        (
            seeded_image(
                SIZE,
                &[("install.json", "{\"force_reboot\": \"yes\"}".to_owned())],
            ),
            "install.json",
        ),
        (image_without_partition2(SIZE), "partition 2"),
        (
            seeded_image(
                SIZE,
                &[("install.yaml", "target:\n  id: scsi-other\n".to_owned())],
            ),
            "unable to determine target device",
        ),
    ];
    for (image, reason) in cases {
        let sim = common::start(1, "generic").await;
        let media = media_server(image).await;
        boot(&sim, &media).await;
        let truth = phase_of(&sim, "install_failed").await;
        let detail = truth["phase"]["detail"].as_str().unwrap();
        assert!(detail.contains(reason), "{reason}: {detail}");
        assert_eq!(truth["installed"], false);
        assert_eq!(truth["registered"], false);
    }
}

#[tokio::test]
async fn a_malformed_provider_file_installs_but_stops_the_installed_daemon() {
    let sim = common::start(1, "generic").await;
    let media = media_server(seeded_image(
        SIZE,
        &[install_yaml(true), ("provider.yaml", "name: [\n".to_owned())],
    ))
    .await;
    install(&sim, &media).await;
    let truth = phase_of(&sim, "os_failed").await;
    assert!(
        truth["phase"]["detail"]
            .as_str()
            .unwrap()
            .contains("provider.yaml"),
        "{truth}"
    );
    assert_eq!(truth["installed"], true);
    assert_eq!(truth["counters"]["registration_attempts"], 0);
}

#[tokio::test]
async fn an_upload_bmc_reads_the_seed_from_the_copy_it_made_at_insert() {
    let sim = common::start(1, "dell").await;
    let oc = registration::start(false, Vec::new()).await;
    let seed = full_seed(false, provider_json(&oc.url, "tok-d", Some(&oc.cert_pem)));
    let media = media_server(seeded_image(SIZE, &seed)).await;
    let (c, slot) = boot(&sim, &media).await;
    let after_insert = media.bytes_served();
    assert!(after_insert >= media.size, "copied at insert");
    // `force_reboot: false` from the copy's seed: the installer waits for the media to go.
    phase_of(&sim, "waiting_for_eject").await;
    assert_eq!(
        media.bytes_served(),
        after_insert,
        "nothing read through the URL during the install"
    );
    eject(&c, &c.get(slot["@odata.id"].as_str().unwrap()).await).await;
    wait_for("registered", LONG, || async {
        (sim.truth(0)["registered"] == true).then_some(())
    })
    .await;
    assert_eq!(oc.received()[0].token.as_deref(), Some("tok-d"));
}

/// The slot whose `MediaTypes` are exactly `types`, on server 0 of a generic simulator (System slots).
async fn slot_of(c: &Client, sim: &SimHandle, types: &[&str]) -> Value {
    let sys = c.system(&sim.bmc_url(0)).await;
    let coll = c.get(sys["VirtualMedia"]["@odata.id"].as_str().unwrap()).await;
    for m in coll["Members"].as_array().unwrap() {
        let slot = c.get(m["@odata.id"].as_str().unwrap()).await;
        if slot["MediaTypes"] == json!(types) {
            return slot;
        }
    }
    panic!("no slot taking {types:?}");
}

/// A simulated BMC boots what its boot override and the slot allow: an `.iso` (2048-byte sectors) from a CD slot
/// with `Cd`, an `.img` (512-byte sectors) from a USBStick slot with `Usb`. The wrong pairings do not boot: the
/// machine goes on to its next boot device (nothing, on a blank machine), as if no media were inserted.
#[tokio::test]
async fn media_boots_only_from_the_slot_and_override_its_format_is_made_for() {
    let seed = [install_yaml(true)];
    // (slot media types, image, URL extension, override target, boots)
    let cases = [
        (&["CD", "DVD"][..], seeded_image(SIZE, &seed), false, "Cd", true),
        (
            &["USBStick"][..],
            seeded_disk_image(SIZE, &seed),
            true,
            "Usb",
            true,
        ),
        (
            &["CD", "DVD"][..],
            seeded_disk_image(SIZE, &seed),
            true,
            "Cd",
            false,
        ),
        (&["USBStick"][..], seeded_image(SIZE, &seed), false, "Usb", false),
        // The right image in the right slot, but an override to the other kind of device.
        (
            &["USBStick"][..],
            seeded_disk_image(SIZE, &seed),
            true,
            "Cd",
            false,
        ),
        (&["CD", "DVD"][..], seeded_image(SIZE, &seed), false, "Usb", false),
    ];
    for (types, image, img, target, boots) in cases {
        let name = format!("{types:?} {} {target}", if img { "img" } else { "iso" });
        let sim = common::start(1, "generic").await;
        let c = Client::new(&sim);
        let media = media_server(image).await;
        let slot = slot_of(&c, &sim, types).await;
        insert(&c, &slot, &if img { media.img_url() } else { media.url() }).await;
        let sys = c.system(&sim.bmc_url(0)).await;
        let (status, _, body) = c
            .patch(
                sys["@odata.id"].as_str().unwrap(),
                json!({"Boot": {"BootSourceOverrideTarget": target, "BootSourceOverrideEnabled": "Once"}}),
            )
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{name}: {body}");
        assert_eq!(c.reset(&sys, "On").await, StatusCode::NO_CONTENT);
        if boots {
            wait_for(&name, LONG, || async {
                (sim.truth(0)["installed"] == true).then_some(())
            })
            .await;
            assert!(
                sim.truth(0)["counters"]["installer_runs"].as_u64() >= Some(1),
                "{name}"
            );
        } else {
            let truth = phase_of(&sim, "no_boot_device").await;
            assert_eq!(truth["installed"], false, "{name}");
            assert_eq!(truth["counters"]["installer_runs"], 0, "{name}");
        }
    }
}
