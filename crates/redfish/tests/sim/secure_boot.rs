//! Secure boot: key databases where the BMC has them (generic, Dell, Supermicro), none on
//! HPE/Lenovo, enrolment and replay-safe deletion, ResetKeys with and without task.

use std::time::Duration;

use racklift_bmc_sim::Personality;
use racklift_redfish::{ErrorClass, ResetKeysType, SecureBootMode, TaskPoll};

use crate::common::{client, eventually, fleet};

fn test_certificate_pem() -> String {
    let key = rcgen::KeyPair::generate().expect("key");
    let params = rcgen::CertificateParams::new(vec!["racklift-test-db".into()]).expect("params");
    params.self_signed(&key).expect("cert").pem()
}

#[tokio::test]
async fn key_databases_on_every_personality() {
    let sim = fleet(5, "mix").await;
    let pem = test_certificate_pem();
    for i in 0..sim.len() {
        let personality = sim.personality(i);
        let c = client(&sim, i);
        let sb = c.read_secure_boot().await.expect("secure boot");
        let dbs = c.read_key_databases().await.expect("databases");
        let has_dbs = matches!(
            personality,
            Personality::Generic | Personality::Dell | Personality::Supermicro
        );
        assert_eq!(sb.secure_boot_databases.is_some(), has_dbs, "{personality:?}");
        if !has_dbs {
            assert!(dbs.is_empty());
            let err = c.enroll_certificate("db", &pem).await.expect_err("no databases");
            assert_eq!(err.class(), ErrorClass::Unsupported);
            continue;
        }
        let ids: Vec<&str> = dbs.iter().map(|d| d.database_id.as_str()).collect();
        assert_eq!(ids, ["PK", "KEK", "db", "dbx"], "{personality:?}");
        let before = dbs
            .iter()
            .find(|d| d.database_id == "db")
            .expect("db")
            .certificates
            .len();

        let location = c
            .enroll_certificate("db", &pem)
            .await
            .expect("enrol")
            .expect("Location");
        let dbs = c.read_key_databases().await.expect("databases");
        let db = dbs.iter().find(|d| d.database_id == "db").expect("db");
        assert_eq!(db.certificates.len(), before + 1, "{personality:?}");
        let entry = db
            .certificates
            .iter()
            .find(|cert| location.ends_with(&cert.odata_id))
            .expect("new entry");
        assert_eq!(
            entry.certificate_string.as_deref().map(str::trim),
            Some(pem.trim())
        );

        c.delete_key_entry(&entry.odata_id).await.expect("delete");
        c.delete_key_entry(&entry.odata_id)
            .await
            .expect("replayed delete is fine");
        let dbs = c.read_key_databases().await.expect("databases");
        assert_eq!(
            dbs.iter()
                .find(|d| d.database_id == "db")
                .expect("db")
                .certificates
                .len(),
            before
        );
    }
}

#[tokio::test]
async fn reset_keys_reaches_setup_mode() {
    let sim = fleet(5, "mix").await;
    for i in 0..sim.len() {
        let personality = sim.personality(i);
        let c = client(&sim, i);
        let task = c
            .reset_keys(ResetKeysType::DeleteAllKeys)
            .await
            .expect("reset keys");
        if let Some(task) = &task {
            eventually("reset task", Duration::from_secs(10), || async {
                !matches!(c.poll_task(task).await.expect("poll"), TaskPoll::Running { .. })
            })
            .await;
        }
        eventually("setup mode", Duration::from_secs(10), || async {
            c.read_secure_boot().await.expect("sb").secure_boot_mode == Some(SecureBootMode::SetupMode)
        })
        .await;
        if personality == Personality::Hpe {
            assert!(task.is_some(), "HPE answers ResetKeys with a task");
        }
        c.set_secure_boot_enable(true).await.expect("enable");
    }
}
