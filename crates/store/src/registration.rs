//! The installed server's registration, bound to the deployment whose seed carried its token.
//!
//! Each deployment's seed holds a registration token of its own (provider.yaml's `server_token`). A registration
//! completes that deployment and no other, once: the provisioning token's use is counted then, in the same
//! transaction. Every refusal of a known deployment's token is an event on that server, so a replay or a
//! server registering with another's token shows in its log.

use serde::Serialize;

use crate::deployments::wake_step;
use crate::{Store, StoreError};

/// What the installed server told about itself.
#[derive(Debug, Clone, Serialize)]
pub struct RegistrationRequest<'a> {
    /// The hostname IncusOS registered with.
    pub name: &'a str,
    /// Where its Incus API answers (`https://<management address>:8443`).
    pub connection_url: &'a str,
    /// SHA-256 of the Incus client certificate the server presented over TLS, if it presented one: how it is
    /// recognised when it calls again (update checks).
    pub client_certificate_sha256: Option<&'a str>,
}

/// A registration accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub server: String,
    pub deployment_id: i64,
}

/// Why a registration was refused; each is answered 403.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationRefused {
    #[error("no deployment has this registration token")]
    UnknownToken,
    #[error("the deployment of {server} registered already")]
    Replay { server: String },
    #[error("the deployment of {server} has finished")]
    Finished { server: String },
    #[error("the deployment of {server} expects the hostname {expected:?}, not {given:?}")]
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
            RegistrationRefused::WrongName { .. } => "wrong_hostname",
            RegistrationRefused::TokenSpent { .. } => "provisioning_token_spent",
        }
    }

    /// The server whose deployment the token belongs to, when the token is one.
    pub fn server(&self) -> Option<&str> {
        match self {
            RegistrationRefused::UnknownToken => None,
            RegistrationRefused::Replay { server }
            | RegistrationRefused::Finished { server }
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
    expected_hostname: Option<String>,
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
            "SELECT id, server, token, expected_hostname, registered_at IS NOT NULL AS registered, \
                    finished_at IS NOT NULL AS finished \
             FROM deployments WHERE registration_token = $1 FOR UPDATE",
        )
        .bind(registration_token)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(c) = claim else {
            return Ok(Err(RegistrationRefused::UnknownToken));
        };
        let server = c.server.clone();
        let refused = if c.registered {
            Some(RegistrationRefused::Replay { server })
        } else if c.finished {
            Some(RegistrationRefused::Finished { server })
        } else if let Some(expected) = c.expected_hostname.filter(|e| !hostname_matches(e, request.name)) {
            Some(RegistrationRefused::WrongName {
                server,
                expected,
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
                "UPDATE servers SET client_certificate_sha256 = NULL, updated_at = now() \
                 WHERE client_certificate_sha256 = $1 AND name <> $2",
            )
            .bind(sha256)
            .bind(&c.server)
            .execute(&mut *tx)
            .await?;
        }
        let updated = sqlx::query(
            "UPDATE servers SET registered_at = now(), registration = $2, connection_url = $3, \
             client_certificate_sha256 = $4, status = CASE WHEN status = 'deploying' THEN status ELSE 'registered' END, \
             status_detail = 'registered', updated_at = now() WHERE name = $1",
        )
        .bind(&c.server)
        .bind(&detail)
        .bind(request.connection_url)
        .bind(request.client_certificate_sha256)
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

/// Whether IncusOS registering as `given` is the server expected as `expected`. Hostnames compare without case.
/// When the expected name is the system UUID the BMC reported (IncusOS's default hostname is the SMBIOS product
/// UUID the OS reads), the OS may also show it with the first three fields byte-swapped: SMBIOS before 2.6 left
/// their byte order open, and BMCs and kernels of one machine have been seen to disagree.
pub fn hostname_matches(expected: &str, given: &str) -> bool {
    if expected.eq_ignore_ascii_case(given) {
        return true;
    }
    match (uuid::Uuid::parse_str(expected), uuid::Uuid::parse_str(given)) {
        (Ok(e), Ok(g)) => {
            let (a, b, c, d) = e.as_fields();
            uuid::Uuid::from_fields(a.swap_bytes(), b.swap_bytes(), c.swap_bytes(), d) == g
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
    use super::hostname_matches;

    #[test]
    fn a_hostname_matches_without_case_and_a_uuid_also_with_its_first_fields_swapped() {
        let cases = [
            ("node2", "NODE2", true),
            ("node2", "node3", false),
            (
                "4C4C4544-0042-3510-8052-B4C04F4E4D32",
                "4c4c4544-0042-3510-8052-b4c04f4e4d32",
                true,
            ),
            (
                "4c4c4544-0042-3510-8052-b4c04f4e4d32",
                "44454c4c-4200-1035-8052-b4c04f4e4d32",
                true,
            ),
            (
                "4c4c4544-0042-3510-8052-b4c04f4e4d32",
                "44454c4c-4200-1035-8052-b4c04f4e4d33",
                false,
            ),
            ("4c4c4544-0042-3510-8052-b4c04f4e4d32", "node1", false),
        ];
        for (expected, given, matches) in cases {
            assert_eq!(
                hostname_matches(expected, given),
                matches,
                "{expected} vs {given}"
            );
        }
    }
}
