//! Virtual media on every personality: slot selection (system first), insert through the
//! action / PATCH chain, read-back, foreign-media refusal, eject as "ensure empty".

use std::time::Duration;

use racklift_bmc_sim::Personality;
use racklift_redfish::{EjectMethod, ErrorClass, InsertMethod, SlotOwner, TransferMethod};

use crate::common::{client, eventually, fleet, image_server};

#[tokio::test]
async fn insert_read_eject_on_every_personality() {
    let sim = fleet(5, "mix").await;
    let images = image_server().await;
    for i in 0..sim.len() {
        let personality = sim.personality(i);
        let c = client(&sim, i);
        let all = c.list_virtual_media().await.expect("list");
        assert!(!all.is_empty(), "{personality:?}");
        let chosen = c.select_cd_slot().await.expect("cd slot");
        assert!(chosen.media.is_optical());
        let (owner, method) = match personality {
            Personality::Generic => (SlotOwner::System, InsertMethod::Action),
            Personality::Dell => (SlotOwner::System, InsertMethod::Action),
            Personality::Hpe => (SlotOwner::Manager, InsertMethod::Action),
            // XCC lists its slots under the System too, and the System's come first.
            Personality::Lenovo => (SlotOwner::System, InsertMethod::Patch),
            Personality::Supermicro => (SlotOwner::System, InsertMethod::Action),
        };
        assert_eq!(chosen.slot.owner, owner, "{personality:?}: {}", chosen.slot);
        let first_optical = all.iter().find(|s| s.media.is_optical()).expect("optical");
        assert_eq!(first_optical.slot, chosen.slot);
        let slot = chosen.slot.clone();
        let reparsed: racklift_redfish::SlotRef = slot.to_string().parse().expect("slot ref");
        assert_eq!(reparsed, slot);

        // Clearing an empty slot succeeds whatever the BMC offers.
        c.eject_media(&slot).await.expect("clear");
        assert!(
            !c.read_media(&slot).await.expect("read").has_media(),
            "{personality:?}"
        );

        let image = format!("{images}/{}.iso", sim.name(i));
        let inserted = c.insert_media(&slot, &image).await.expect("insert");
        assert_eq!(inserted.method, method, "{personality:?}");
        let media = c.read_media(&slot).await.expect("read");
        assert!(media.holds(&image), "{personality:?}: {media:?}");
        // iDRAC 9 copies the image at insert but reports `TransferMethod: null`.
        let transfer = match personality {
            Personality::Dell => None,
            _ => Some(TransferMethod::Stream),
        };
        assert_eq!(media.transfer_method, transfer, "{personality:?}");
        let again = c.insert_media(&slot, &image).await.expect("insert again");
        assert_eq!(again.method, InsertMethod::AlreadyInserted);
        let foreign = c
            .insert_media(&slot, &format!("{images}/other.iso"))
            .await
            .expect_err("foreign");
        assert_eq!(foreign.class(), ErrorClass::Rejected);

        let ejected = c.eject_media(&slot).await.expect("eject");
        let expected = if personality == Personality::Lenovo {
            EjectMethod::Patch
        } else {
            EjectMethod::Action
        };
        assert_eq!(ejected, expected, "{personality:?}");
        // Dell keeps reporting the old image for a while after an eject.
        eventually("slot empty", Duration::from_secs(10), || async {
            !c.read_media(&slot).await.expect("read").has_media()
        })
        .await;
        let second = c
            .eject_media(&slot)
            .await
            .expect("eject when nothing is inserted");
        if personality == Personality::Supermicro {
            assert_eq!(second, EjectMethod::NothingToEject);
        }
        let audit = sim.audit(i);
        assert_eq!(
            (audit.unfenced_mutations, audit.max_concurrent),
            (0, 1),
            "{personality:?}"
        );
    }
}

#[tokio::test]
async fn insert_errors_are_classified() {
    let sim = fleet(1, "dell").await;
    let images = image_server().await;
    let c = client(&sim, 0);
    let slot = c.select_cd_slot().await.expect("slot").slot;
    c.eject_media(&slot).await.expect("clear");
    for (code, status) in [("SYS446", 500), ("RAC0904", 400)] {
        sim.set_faults(
            0,
            racklift_bmc_sim::Faults {
                insert_error: Some(code.into()),
                ..Default::default()
            },
        );
        let err = c
            .insert_media(&slot, &format!("{images}/x.iso"))
            .await
            .expect_err(code);
        assert_eq!(err.status(), Some(status), "{code}");
        assert!(err.has_message(code), "{err:?}");
        assert!(err.is_retryable(), "{code} passes with time");
    }
    sim.set_faults(0, racklift_bmc_sim::Faults::default());
    // An unreachable image on an Upload BMC is RAC0904 too.
    let err = c
        .insert_media(&slot, "http://127.0.0.1:9/missing.iso")
        .await
        .expect_err("unreachable");
    assert!(err.has_message("RAC0904"), "{err:?}");
}
