//! UEFI key databases: fingerprints of their entries and the enrolment that rewrites them.

use racklift_deploy::certificates::{CertificateSet, fingerprint_pem};
use racklift_deploy::secure_boot::Enrollment;

use super::*;

/// Rewrites the key databases of `enrollment`. Deletions run before enrolments and PK is enrolled
/// last: firmware accepts unsigned writes to KEK, db and dbx only in setup mode, which an empty PK
/// keeps. Re-reads first, so a retry after a partial write only does what is still missing.
///
/// Takes an [`Enrollment`] and a [`CertificateSet`], neither of which can be empty for PK, KEK or
/// db, and checks before the first request that every certificate to enroll has its PEM here:
/// a database is never emptied without what goes back into it.
pub(super) async fn enroll(
    client: &BmcClient,
    enrollment: &Enrollment,
    certificates: &CertificateSet,
) -> Step<String> {
    let work: Vec<(KeyDb, &[Fingerprint], &[Fingerprint])> = enrollment
        .dbs()
        .iter()
        .filter_map(|(db, plan)| match plan {
            DbPlan::Correct => None,
            DbPlan::Reinitialise { keep, enroll } => Some((*db, keep.as_slice(), enroll.as_slice())),
        })
        .collect();
    if work.is_empty() {
        return Ok("every key database is correct".into());
    }
    // Checked before anything is deleted: a missing PEM must not leave a database half empty.
    for (db, _, enroll) in &work {
        if let Some(fp) = enroll.iter().find(|fp| certificates.pem(fp).is_none()) {
            return Err(StepError::MissingCertificate {
                db: *db,
                fingerprint: fp.clone(),
            });
        }
    }
    let current = client.read_key_databases().await?;
    let find = |dbs: &[KeyDatabase], db: KeyDb| -> Step<KeyDatabase> {
        dbs.iter()
            .find(|d| same_name::<KeyDb>(&d.database_id) == Some(db))
            .cloned()
            .ok_or(StepError::NoDatabase(db))
    };
    for (db, _, _) in &work {
        find(&current, *db)?;
    }
    let (mut deleted, mut enrolled) = (0, 0);
    let mut order = work.clone();
    order.sort_by_key(|(db, _, _)| *db != KeyDb::PK);
    for (db, keep, _) in order {
        // An IncusOS certificate is never deleted, even when the plan was judged before it was
        // enrolled: replaying an enrolment must not undo its own writes.
        let keep: BTreeSet<&Fingerprint> = keep.iter().chain(enrollment.incusos().get(db)).collect();
        for (fp, uri) in entries(&find(&current, db)?) {
            if !keep.contains(&fp) {
                client.delete_key_entry(&uri).await?;
                deleted += 1;
                tracing::info!(
                    server = client.server(),
                    ?db,
                    fingerprint = fp.0,
                    "key entry deleted"
                );
            }
        }
    }
    let after = client.read_key_databases().await?;
    let mut order = work;
    order.sort_by_key(|(db, _, _)| *db == KeyDb::PK);
    for (db, _, enroll) in order {
        let present: BTreeSet<Fingerprint> = entries(&find(&after, db)?)
            .into_iter()
            .map(|(fp, _)| fp)
            .collect();
        for fp in enroll.iter().filter(|fp| !present.contains(*fp)) {
            let pem = certificates
                .pem(fp)
                .ok_or_else(|| StepError::MissingCertificate {
                    db,
                    fingerprint: fp.clone(),
                })?;
            client.enroll_certificate(key_db_name(db), pem).await?;
            enrolled += 1;
            tracing::info!(
                server = client.server(),
                ?db,
                fingerprint = fp.0,
                "certificate enrolled"
            );
        }
    }
    Ok(format!(
        "{deleted} key entries deleted, {enrolled} certificates enrolled"
    ))
}

/// Every entry of a key database as (fingerprint, URI). A signature entry already is a hash,
/// so its fingerprint is the hash itself, lower-cased.
pub(super) fn entries(db: &KeyDatabase) -> Vec<(Fingerprint, String)> {
    let certs = db.certificates.iter().map(|c| {
        let fp = fingerprint_pem(c.certificate_string.as_deref().unwrap_or_default());
        (fp, c.odata_id.clone())
    });
    let sigs = db.signatures.iter().map(|s| {
        let hash = s.signature_string.as_deref().unwrap_or_default();
        (Fingerprint(hash.trim().to_ascii_lowercase()), s.odata_id.clone())
    });
    certs.chain(sigs).collect()
}

pub(super) fn key_db_name(db: KeyDb) -> &'static str {
    match db {
        KeyDb::PK => "PK",
        KeyDb::KEK => "KEK",
        KeyDb::Db => "db",
        KeyDb::Dbx => "dbx",
    }
}
