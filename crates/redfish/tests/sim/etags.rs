//! Conditional writes: the client sends the tag it read (header or, when the BMC sends it alone, the body's
//! `@odata.etag`), and after a 412 reads the resource again and writes once more with the new tag.

use racklift_bmc_sim::Faults;
use serde_json::{Map, json};

use crate::common::{client, fleet, image_server};

fn counter(sim: &racklift_bmc_sim::SimHandle, i: usize, name: &str) -> u64 {
    sim.truth(i)["counters"][name].as_u64().unwrap_or_default()
}

#[tokio::test]
async fn a_raced_bios_write_is_sent_again_with_the_tag_from_the_body() {
    // Rows: (faults, precondition failures expected, conditional writes expected).
    let cases = [
        // The tag comes from the header; the write matches at once.
        (Faults::default(), 0, 1),
        // The tag comes from the body alone; the write matches at once.
        (
            Faults {
                etag_header_absent: true,
                ..Faults::default()
            },
            0,
            1,
        ),
        // Another client wrote between the read and the write: 412, read again, the new tag matches.
        (
            Faults {
                etag_header_absent: true,
                foreign_writes: 1,
                ..Faults::default()
            },
            1,
            1,
        ),
    ];
    for (faults, failures, writes) in cases {
        let sim = fleet(1, "generic").await;
        sim.set_faults(0, faults.clone());
        let c = client(&sim, 0);
        let mut wanted = Map::new();
        wanted.insert("ProcTurboMode".into(), json!("Disabled"));
        c.stage_bios_attributes(wanted).await.expect("staged");
        assert_eq!(
            c.pending_bios_attributes()
                .await
                .expect("pending")
                .get("ProcTurboMode"),
            Some(&json!("Disabled")),
            "{faults:?}"
        );
        assert_eq!(counter(&sim, 0, "precondition_failures"), failures, "{faults:?}");
        assert_eq!(counter(&sim, 0, "conditional_writes"), writes, "{faults:?}");
    }
}

#[tokio::test]
async fn a_bmc_rejecting_its_own_tags_is_written_without_if_match() {
    let sim = fleet(1, "generic").await;
    sim.set_faults(
        0,
        Faults {
            reject_if_match: true,
            ..Faults::default()
        },
    );
    let c = client(&sim, 0);
    let mut wanted = Map::new();
    wanted.insert("ProcTurboMode".into(), json!("Disabled"));
    c.stage_bios_attributes(wanted)
        .await
        .expect("staged without If-Match");
    assert_eq!(
        c.pending_bios_attributes()
            .await
            .expect("pending")
            .get("ProcTurboMode"),
        Some(&json!("Disabled"))
    );
}

#[tokio::test]
async fn a_patched_media_slot_is_written_with_its_body_tag_after_a_race() {
    // XCC's slots take PATCH only.
    let sim = fleet(1, "lenovo").await;
    let images = image_server().await;
    sim.set_faults(
        0,
        Faults {
            etag_header_absent: true,
            foreign_writes: 1,
            ..Faults::default()
        },
    );
    let c = client(&sim, 0);
    let slot = c.select_cd_slot().await.expect("cd slot").slot;
    let image = format!("{images}/installer.iso");
    c.insert_media(&slot, &image).await.expect("inserted");
    assert!(c.read_media(&slot).await.expect("read").holds(&image));
    assert_eq!(counter(&sim, 0, "precondition_failures"), 1);
    assert!(counter(&sim, 0, "conditional_writes") >= 1);
}
