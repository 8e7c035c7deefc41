//! Builds a Redfish client for a stored server: resolves the password reference and the TLS policy. Shared by
//! the workers and the API's pre-flight reads.

use std::time::Duration;

use racklift_redfish::{BmcClient, BmcConfig, Credentials, Pin, Secret, TlsMode};
use racklift_store::Server;

#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("server {server} has no BMC configured (address, username and password reference)")]
    NotConfigured { server: String },
    #[error("server {server}: password reference {reference:?} is not of the form env:NAME or file:PATH")]
    BadReference { server: String, reference: String },
    #[error("server {server}: password reference {reference:?} could not be read")]
    Unreadable {
        server: String,
        reference: String,
        #[source]
        source: std::io::Error,
    },
    #[error("server {server}: certificate pin {pin:?} is not valid")]
    BadPin { server: String, pin: String },
    #[error("server {server}: Redfish client")]
    Client {
        server: String,
        #[source]
        source: Box<racklift_redfish::Error>,
    },
}

/// Reads a password reference: `env:NAME` or `file:PATH` (trailing newline dropped).
pub fn resolve_password(server: &str, reference: &str) -> Result<Secret, AccessError> {
    let bad = || AccessError::BadReference {
        server: server.to_owned(),
        reference: reference.to_owned(),
    };
    let unreadable = |source| AccessError::Unreadable {
        server: server.to_owned(),
        reference: reference.to_owned(),
        source,
    };
    match reference.split_once(':') {
        Some(("env", name)) if !name.is_empty() => std::env::var(name).map(Secret::new).map_err(|_| {
            unreadable(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "variable not set",
            ))
        }),
        Some(("file", path)) if !path.is_empty() => std::fs::read_to_string(path)
            .map(|s| Secret::new(s.trim_end_matches(['\r', '\n'])))
            .map_err(unreadable),
        _ => Err(bad()),
    }
}

/// A client for the server's BMC with the given per-call deadline.
pub fn client_for(server: &Server, call_deadline: Duration) -> Result<BmcClient, AccessError> {
    if !server.bmc_configured() {
        return Err(AccessError::NotConfigured {
            server: server.name.clone(),
        });
    }
    let reference = server.bmc_password_ref.as_deref().unwrap_or_default();
    let password = resolve_password(&server.name, reference)?;
    let tls = if let Some(pin) = &server.bmc_cert_pin {
        let parsed: Pin = pin.parse().map_err(|_| AccessError::BadPin {
            server: server.name.clone(),
            pin: pin.clone(),
        })?;
        TlsMode::Pinned(vec![parsed])
    } else if server.bmc_insecure {
        TlsMode::InsecureNoVerify
    } else {
        TlsMode::WebPkiRoots
    };
    let mut config = BmcConfig::new(
        server.name.clone(),
        server.bmc_address.clone(),
        Credentials::new(server.bmc_username.clone(), password),
        tls,
    );
    config.call_deadline = call_deadline;
    BmcClient::new(config).map_err(|source| AccessError::Client {
        server: server.name.clone(),
        source: Box::new(source),
    })
}
