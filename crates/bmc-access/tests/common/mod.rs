//! The stored server record the access tests build clients for.

use racklift_store::{Server, ServerStatus};

/// A never-registered server `name` at `address`, its password read from the `bmc-password` secret file.
pub fn server(name: &str, address: String, username: &str) -> Server {
    let now = chrono::Utc::now();
    Server {
        name: name.into(),
        bmc_address: address,
        bmc_username: username.into(),
        bmc_password_ref: Some("file:bmc-password".into()),
        bmc_cert_pin: None,
        bmc_insecure: false,
        allow_plain_http: false,
        vendor_hint: None,
        system_id: None,
        status: ServerStatus::Unregistered,
        status_detail: String::new(),
        fence: 0,
        registered_at: None,
        created_at: now,
        updated_at: now,
    }
}
