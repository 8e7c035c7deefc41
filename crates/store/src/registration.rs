//! The installed server's registration, bound to the deployment whose seed carried its token.
//!
//! Each deployment's seed holds a registration token of its own (provider.yaml's `server_token`). A registration
//! completes that deployment and no other, once: the provisioning token's use is counted then, in the same
//! transaction. Every refusal of a known deployment's token is an event on that server, so a replay or a
//! server registering with another's token shows in its log.

use serde::Serialize;

use crate::deployments::wake_step;
use crate::{Store, StoreError};

/// What the installed server told about itself (Operations Center's `ServerPost`, the keys racklift keeps) and
/// the certificate it proved over TLS. Serialised, it is the server's stored `registration` and the detail of
/// its `registered` event.
#[derive(Debug, Clone, Serialize)]
pub struct RegistrationRequest<'a> {
    /// The hostname IncusOS registered with.
    pub name: &'a str,
    /// Where its Incus API answers (`https://<management address>:8443`).
    pub connection_url: &'a str,
    /// The SMBIOS product UUID IncusOS read; `Some("")` when it could not read one, `None` when the key was
    /// not sent at all.
    pub system_uuid: Option<&'a str>,
    /// `/etc/machine-id`, as `system_uuid`.
    pub machine_id: Option<&'a str>,
    /// SHA-256 of the client certificate the server presented over TLS (Incus' `server.crt`): how it is
    /// recognised when it calls again (`PUT :self`, update checks).
    pub client_certificate_sha256: Option<&'a str>,
    /// That certificate as presented (DER); kept on the server, never in events.
    #[serde(skip)]
    pub client_certificate_der: Option<&'a [u8]>,
}

/// A registration accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub server: String,
    pub deployment_id: i64,
}

/// Why a registration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationRefused {
    #[error("no deployment has this registration token")]
    UnknownToken,
    #[error("the deployment of {server} registered already")]
    Replay { server: String },
    #[error("the deployment of {server} has finished")]
    Finished { server: String },
    #[error("no client certificate provided: {server} registers with the certificate of its Incus")]
    NoClientCertificate { server: String },
    #[error("the installer of {server} has not finished (the deployment is at {state})")]
    InstallNotFinished { server: String, state: String },
    #[error("the deployment of {server} expects the hostname {expected}, not {given:?}")]
    WrongName {
        server: String,
        expected: String,
        given: String,
    },
    #[error("the provisioning token of {server}'s deployment is spent or expired")]
    TokenSpent { server: String },
}

impl RegistrationRefused {
    /// A stable code for answers and events.
    pub fn code(&self) -> &'static str {
        match self {
            RegistrationRefused::UnknownToken => "unknown_registration_token",
            RegistrationRefused::Replay { .. } => "registration_replayed",
            RegistrationRefused::Finished { .. } => "deployment_finished",
            RegistrationRefused::NoClientCertificate { .. } => "client_certificate_required",
            RegistrationRefused::InstallNotFinished { .. } => "install_not_finished",
            RegistrationRefused::WrongName { .. } => "wrong_hostname",
            RegistrationRefused::TokenSpent { .. } => "provisioning_token_spent",
        }
    }

    /// The request part the refusal concerns.
    pub fn field(&self) -> &'static str {
        match self {
            RegistrationRefused::WrongName { .. } => "name",
            RegistrationRefused::NoClientCertificate { .. } => "client_certificate",
            _ => "token",
        }
    }

    /// The server whose deployment the token belongs to, when the token is one.
    pub fn server(&self) -> Option<&str> {
        match self {
            RegistrationRefused::UnknownToken => None,
            RegistrationRefused::Replay { server }
            | RegistrationRefused::Finished { server }
            | RegistrationRefused::NoClientCertificate { server }
            | RegistrationRefused::InstallNotFinished { server, .. }
            | RegistrationRefused::WrongName { server, .. }
            | RegistrationRefused::TokenSpent { server } => Some(server),
        }
    }
}

#[derive(sqlx::FromRow)]
struct Claim {
    id: i64,
    server: String,
    token: uuid::Uuid,
    state: String,
    expected_hostname: Option<String>,
    bmc_system_uuid: Option<String>,
    registered: bool,
    finished: bool,
}

impl Store {
    /// Completes the registration of the deployment holding `registration_token`, or says why not (recording the
    /// refusal on the server when the token is a deployment's).
    pub async fn register_deployment(
        &self,
        queue: &racklift_queue::Queue,
        registration_token: &str,
        request: &RegistrationRequest<'_>,
    ) -> Result<Result<Registered, RegistrationRefused>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let claim: Option<Claim> = sqlx::query_as(
            "SELECT id, server, token, state, expected_hostname, bmc_system_uuid, \
                    registered_at IS NOT NULL AS registered, finished_at IS NOT NULL AS finished \
             FROM deployments WHERE registration_token = $1 FOR UPDATE",
        )
        .bind(registration_token)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(c) = claim else {
            return Ok(Err(RegistrationRefused::UnknownToken));
        };
        let server = c.server.clone();
        let expected = ExpectedName {
            seeded_hostname: c.expected_hostname.as_deref(),
            bmc_system_uuid: c.bmc_system_uuid.as_deref(),
        };
        let installer_finished = c
            .state
            .parse::<racklift_deploy::State>()
            .is_ok_and(racklift_deploy::State::installer_finished);
        let refused = if c.registered {
            Some(RegistrationRefused::Replay { server })
        } else if c.finished {
            Some(RegistrationRefused::Finished { server })
        } else if request.client_certificate_der.is_none() || request.client_certificate_sha256.is_none() {
            Some(RegistrationRefused::NoClientCertificate { server })
        } else if !installer_finished {
            Some(RegistrationRefused::InstallNotFinished {
                server,
                state: c.state.clone(),
            })
        } else if !registration_name_accepted(&expected, request) {
            Some(RegistrationRefused::WrongName {
                server,
                expected: expected.describe(),
                given: request.name.to_owned(),
            })
        } else {
            let used = sqlx::query(
                "UPDATE provisioning_tokens SET uses_remaining = uses_remaining - 1 \
                 WHERE token = $1 AND uses_remaining > 0 AND expires_at > now()",
            )
            .bind(c.token)
            .execute(&mut *tx)
            .await?;
            (used.rows_affected() != 1).then_some(RegistrationRefused::TokenSpent { server })
        };
        if let Some(why) = refused {
            drop(tx);
            self.record_refusal(c.id, &c.server, &why, request).await?;
            return Ok(Err(why));
        }
        let done = sqlx::query(
            "UPDATE deployments SET registered_at = now() WHERE id = $1 AND registered_at IS NULL",
        )
        .bind(c.id)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Err(StoreError::Conflict {
                what: "deployment registration",
                name: c.server,
            });
        }
        let detail = serde_json::to_value(request).expect("a registration serialises");
        if let Some(sha256) = request.client_certificate_sha256 {
            // One certificate names one server: a disk moved to another chassis takes its identity with it.
            sqlx::query(
                "UPDATE servers SET client_certificate_sha256 = NULL, client_certificate_der = NULL, \
                 updated_at = now() WHERE client_certificate_sha256 = $1 AND name <> $2",
            )
            .bind(sha256)
            .bind(&c.server)
            .execute(&mut *tx)
            .await?;
        }
        // A fresh install has a fresh Incus certificate: whatever was pinned for the previous one goes, and the
        // registration certificate is what a standalone server is trusted by from now on.
        let updated = sqlx::query(
            "UPDATE servers SET registered_at = now(), registration = $2, connection_url = $3, \
             client_certificate_sha256 = $4, client_certificate_der = $5, system_uuid = $6, machine_id = $7, \
             incus_certificate_sha256 = NULL, incus_repin_requested_at = NULL, \
             status = CASE WHEN status = 'deploying' THEN status ELSE 'registered' END, \
             status_detail = 'registered', updated_at = now() WHERE name = $1",
        )
        .bind(&c.server)
        .bind(&detail)
        .bind(request.connection_url)
        .bind(request.client_certificate_sha256)
        .bind(request.client_certificate_der)
        .bind(request.system_uuid)
        .bind(request.machine_id)
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() != 1 {
            return Err(StoreError::NotFound {
                what: "server",
                name: c.server,
            });
        }
        crate::events::insert(&mut *tx, &c.server, Some(c.id), "registered", None, &detail).await?;
        wake_step(queue, &mut tx, &c.server, false).await?;
        tx.commit().await?;
        Ok(Ok(Registered {
            server: c.server,
            deployment_id: c.id,
        }))
    }

    async fn record_refusal(
        &self,
        deployment_id: i64,
        server: &str,
        why: &RegistrationRefused,
        request: &RegistrationRequest<'_>,
    ) -> Result<(), StoreError> {
        let detail = serde_json::to_value(RefusalDetail {
            code: why.code(),
            reason: why.to_string(),
            request,
        })
        .expect("a refusal serialises");
        crate::events::insert(
            &self.pool,
            server,
            Some(deployment_id),
            "registration_refused",
            None,
            &detail,
        )
        .await?;
        Ok(())
    }
}

/// A registered server's `PUT /1.0/provisioning/servers/:self` (Operations Center's `ServerSelfUpdate`), as
/// racklift applies it: the cause is recorded, and the address replaces the stored one when `apply_address`.
#[derive(Debug, Clone, Serialize)]
pub struct SelfUpdate<'a> {
    pub cause: &'a str,
    pub connection_url: &'a str,
    /// Whether the cause carries the server's current address, to be stored.
    pub apply_address: bool,
}

impl Store {
    /// Applies a server's self-update, finding the server by the certificate it registered with; `None` when no
    /// server registered with that certificate. Every call is a `self_update` event on the server.
    pub async fn self_update(
        &self,
        client_certificate_sha256: &str,
        update: &SelfUpdate<'_>,
    ) -> Result<Option<String>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let server: Option<String> =
            sqlx::query_scalar("SELECT name FROM servers WHERE client_certificate_sha256 = $1 FOR UPDATE")
                .bind(client_certificate_sha256)
                .fetch_optional(&mut *tx)
                .await?;
        let Some(server) = server else {
            return Ok(None);
        };
        if update.apply_address {
            let done =
                sqlx::query("UPDATE servers SET connection_url = $2, updated_at = now() WHERE name = $1")
                    .bind(&server)
                    .bind(update.connection_url)
                    .execute(&mut *tx)
                    .await?;
            if done.rows_affected() != 1 {
                return Err(StoreError::NotFound {
                    what: "server",
                    name: server,
                });
            }
        }
        let detail = serde_json::to_value(update).expect("a self-update serialises");
        crate::events::insert(&mut *tx, &server, None, "self_update", None, &detail).await?;
        tx.commit().await?;
        Ok(Some(server))
    }
}

/// An operator's repin of a server's Incus certificate, as recorded.
#[derive(Debug, Clone, Serialize)]
pub struct Repin<'a> {
    /// The API token's name.
    pub by: &'a str,
    pub reason: &'a str,
}

impl Store {
    /// Clears the certificate a server's Incus API is pinned to, so that the next connection records and pins
    /// the certificate the server then serves; audited as a `certificate_repin` event with who, why and the pin
    /// it replaced. `NotFound` for an unknown server.
    pub async fn request_incus_repin(&self, server: &str, repin: &Repin<'_>) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let previous: Option<(Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT incus_certificate_sha256, client_certificate_sha256 FROM servers WHERE name = $1 FOR UPDATE",
        )
        .bind(server)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((repinned, registered)) = previous else {
            return Err(StoreError::NotFound {
                what: "server",
                name: server.to_owned(),
            });
        };
        let done = sqlx::query(
            "UPDATE servers SET incus_certificate_sha256 = NULL, incus_repin_requested_at = now(), \
             updated_at = now() WHERE name = $1",
        )
        .bind(server)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Err(StoreError::NotFound {
                what: "server",
                name: server.to_owned(),
            });
        }
        let detail = serde_json::to_value(RepinDetail {
            repin,
            previous_certificate_sha256: repinned.or(registered),
        })
        .expect("a repin serialises");
        crate::events::insert(&mut *tx, server, None, "certificate_repin", None, &detail).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// The detail of a `certificate_repin` event.
#[derive(Serialize)]
struct RepinDetail<'a> {
    #[serde(flatten)]
    repin: &'a Repin<'a>,
    previous_certificate_sha256: Option<String>,
}

/// Whom a deployment expects to register: the hostname its seed names, and the system UUID its BMC reported.
#[derive(Debug, Clone, Copy)]
pub struct ExpectedName<'a> {
    pub seeded_hostname: Option<&'a str>,
    pub bmc_system_uuid: Option<&'a str>,
}

impl ExpectedName<'_> {
    /// For the refusal's message.
    fn describe(&self) -> String {
        match (self.seeded_hostname, self.bmc_system_uuid) {
            (Some(host), _) => format!("{host:?}"),
            (None, Some(uuid)) => format!("its system UUID {uuid:?} (or its machine-id without a UUID)"),
            (None, None) => "its system UUID (or its machine-id without a UUID)".to_owned(),
        }
    }
}

/// Whether IncusOS registering as `request.name` is the server the deployment expects. IncusOS names itself as
/// `internal/state` `Hostname()` does: the seeded hostname, else the DMI product UUID, else the machine-id; and
/// it sends the UUID and machine-id it read beside the name (empty when unreadable). So:
///
/// - with a seeded hostname, the name must be it;
/// - without one, a sent UUID must be the name, and the BMC's UUID when the BMC reported one;
/// - a sent but empty UUID leaves the machine-id, which must be the name;
/// - a client that sends no UUID key at all (not IncusOS's `ServerPost`) must use the BMC's UUID as its name.
///
/// Names compare without case; UUIDs also with their first three fields byte-swapped (SMBIOS before 2.6 left
/// their byte order open, and BMCs and kernels of one machine have been seen to disagree).
pub fn registration_name_accepted(expected: &ExpectedName<'_>, request: &RegistrationRequest<'_>) -> bool {
    let name = request.name;
    if let Some(host) = expected.seeded_hostname {
        // Deployments made before the BMC's UUID was kept apart stored it here; uuid_matches covers them.
        return host.eq_ignore_ascii_case(name) || uuid_matches(host, name);
    }
    let bmc_agrees = |uuid: &str| expected.bmc_system_uuid.is_none_or(|bmc| uuid_matches(bmc, uuid));
    match request.system_uuid {
        Some(uuid) if !uuid.is_empty() => uuid.eq_ignore_ascii_case(name) && bmc_agrees(uuid),
        Some(_) => request
            .machine_id
            .is_some_and(|id| !id.is_empty() && id.eq_ignore_ascii_case(name)),
        None => bmc_agrees(name),
    }
}

/// Whether two spellings name one UUID: equal without case, or with the first three fields byte-swapped.
fn uuid_matches(a: &str, b: &str) -> bool {
    if a.eq_ignore_ascii_case(b) {
        return true;
    }
    match (uuid::Uuid::parse_str(a), uuid::Uuid::parse_str(b)) {
        (Ok(x), Ok(y)) => {
            let (f1, f2, f3, f4) = x.as_fields();
            x == y || uuid::Uuid::from_fields(f1.swap_bytes(), f2.swap_bytes(), f3.swap_bytes(), f4) == y
        }
        _ => false,
    }
}

/// The detail of a `registration_refused` event.
#[derive(Serialize)]
struct RefusalDetail<'a> {
    code: &'static str,
    reason: String,
    #[serde(flatten)]
    request: &'a RegistrationRequest<'a>,
}

#[cfg(test)]
mod hostname_tests {
    use super::{ExpectedName, RegistrationRequest, registration_name_accepted};

    const BMC: &str = "4c4c4544-0042-3510-8052-b4c04f4e4d32";
    const SWAPPED: &str = "44454c4c-4200-1035-8052-b4c04f4e4d32";
    const OTHER: &str = "44454c4c-4200-1035-8052-b4c04f4e4d33";
    const MACHINE_ID: &str = "b4c04f4e4d32445a8c1f0e9d7c6b5a49";

    fn request<'a>(
        name: &'a str,
        system_uuid: Option<&'a str>,
        machine_id: Option<&'a str>,
    ) -> RegistrationRequest<'a> {
        RegistrationRequest {
            name,
            connection_url: "https://10.0.3.17:8443",
            system_uuid,
            machine_id,
            client_certificate_sha256: None,
            client_certificate_der: None,
        }
    }

    #[test]
    fn the_name_is_the_seeded_hostname_else_the_uuid_else_the_machine_id() {
        let seeded = |h| ExpectedName {
            seeded_hostname: Some(h),
            bmc_system_uuid: Some(BMC),
        };
        let unseeded = ExpectedName {
            seeded_hostname: None,
            bmc_system_uuid: Some(BMC),
        };
        let no_bmc = ExpectedName {
            seeded_hostname: None,
            bmc_system_uuid: None,
        };
        let upper = BMC.to_uppercase();
        #[rustfmt::skip]
        let cases: &[(&str, ExpectedName, RegistrationRequest, bool)] = &[
            ("seeded hostname, any case", seeded("node2.rack1"), request("NODE2.rack1", Some(BMC), Some(MACHINE_ID)), true),
            ("seeded hostname, another name", seeded("node2.rack1"), request("node2", Some(BMC), Some(MACHINE_ID)), false),
            ("seeded hostname, registering as its UUID", seeded("node2"), request(BMC, Some(BMC), Some(MACHINE_ID)), false),
            ("an older deployment that stored the UUID as the hostname", seeded(BMC), request(SWAPPED, None, None), true),
            ("no hostname: the UUID it sent, the BMC's", unseeded, request(BMC, Some(BMC), Some(MACHINE_ID)), true),
            ("no hostname: the UUID in upper case", unseeded, request(&upper, Some(&upper), Some(MACHINE_ID)), true),
            ("no hostname: the UUID byte-swapped against the BMC's", unseeded, request(SWAPPED, Some(SWAPPED), Some(MACHINE_ID)), true),
            ("no hostname: another machine's UUID", unseeded, request(OTHER, Some(OTHER), Some(MACHINE_ID)), false),
            ("no hostname: a name other than the UUID it sent", unseeded, request(OTHER, Some(BMC), Some(MACHINE_ID)), false),
            ("no hostname: the machine-id while it had a UUID", unseeded, request(MACHINE_ID, Some(BMC), Some(MACHINE_ID)), false),
            ("no hostname, no UUID: the machine-id", unseeded, request(MACHINE_ID, Some(""), Some(MACHINE_ID)), true),
            ("no hostname, no UUID: another name", unseeded, request("IncusOS", Some(""), Some(MACHINE_ID)), false),
            ("no hostname, no UUID, no machine-id: the OS name", unseeded, request("IncusOS", Some(""), Some("")), false),
            ("no UUID key sent: the BMC's UUID as the name", unseeded, request(SWAPPED, None, None), true),
            ("no UUID key sent: another name", unseeded, request("node1", None, None), false),
            ("no BMC UUID known: the UUID it sent", no_bmc, request(OTHER, Some(OTHER), Some(MACHINE_ID)), true),
            ("no BMC UUID known: a name other than the UUID sent", no_bmc, request("node1", Some(OTHER), Some(MACHINE_ID)), false),
        ];
        for (what, expected, request, accepted) in cases {
            assert_eq!(registration_name_accepted(expected, request), *accepted, "{what}");
        }
    }
}
