//! Credentials that cannot leak through `Debug`, `Display`, logs or error messages.
//!
//! BMC passwords are the keys to the hardware: a password printed into a log line or a dead
//! letter is a password that has to be rotated on every BMC of the fleet. The only way to
//! read the value is the explicit [`Secret::expose`], which is called in exactly one place
//! (building the `Authorization` header).

use std::fmt;

/// A secret string whose `Debug` and `Display` print `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret value itself. Call only where the value leaves the process on purpose.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// HTTP Basic credentials for one BMC.
///
/// Basic auth on every request rather than Redfish sessions: a session left behind by a
/// crashed worker occupies one of the few session slots a BMC has (iDRAC `RAC0218`), and
/// recovering from exhaustion can take twenty minutes or a power drain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// The BMC user name; not secret.
    pub username: String,
    /// The BMC password.
    pub password: Secret,
}

impl Credentials {
    /// Builds credentials from a user name and a password.
    pub fn new(username: impl Into<String>, password: impl Into<Secret>) -> Self {
        Self {
            username: username.into(),
            password: password.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_redact_the_value() {
        let secret = Secret::new("hunter2-calvin");
        assert_eq!(format!("{secret:?}"), "Secret(***)");
        assert_eq!(format!("{secret}"), "***");
        let creds = Credentials::new("root", "hunter2-calvin");
        let debug = format!("{creds:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("root"), "{debug}");
        assert_eq!(creds.password.expose(), "hunter2-calvin");
    }
}
