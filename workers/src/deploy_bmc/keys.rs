//! UEFI key databases: fingerprints of their entries and the enrolment that rewrites them.

use super::*;

/// SHA-256 of the certificate's DER, lower-case hex: what `openssl x509 -fingerprint -sha256`
/// shows an operator writing an allow list. A body that is not valid base64 (the simulator's
/// stand-ins) is hashed as text, so it still has a stable identity.
pub fn fingerprint_pem(pem: &str) -> Fingerprint {
    let body: String = pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .flat_map(|l| l.chars())
        .filter(|c| !c.is_whitespace())
        .collect();
    let bytes = base64_decode(&body).unwrap_or_else(|| body.clone().into_bytes());
    Fingerprint(format!("{:x}", Sha256::digest(&bytes)))
}

/// Rewrites the listed key databases. Deletions run before enrolments and PK is enrolled last:
/// firmware accepts unsigned writes to KEK, db and dbx only in setup mode, which an empty PK
/// keeps. Re-reads first, so a retry after a partial write only does what is still missing.
pub(super) async fn enroll(
    client: &BmcClient,
    plans: &[(KeyDb, DbPlan)],
    pems: &BTreeMap<Fingerprint, String>,
) -> Step<String> {
    let work: Vec<(KeyDb, &[Fingerprint], &[Fingerprint])> = plans
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
        if let Some(fp) = enroll.iter().find(|fp| !pems.contains_key(*fp)) {
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
        let keep: BTreeSet<&Fingerprint> = keep.iter().collect();
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
            let pem = pems.get(fp).ok_or_else(|| StepError::MissingCertificate {
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

/// Standard base64, padded or not; `None` on anything else.
pub(super) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(text.trim_end_matches('='))
        .ok()
}
