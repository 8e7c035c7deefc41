//! The installed IncusOS checking its update provider, the `operations-center` provider of its seed's
//! `provider.yaml` (racklift stands in for it), over the same client as its registration ([`register`]): TLS 1.3,
//! the seed's `server_certificate` trusted alone when given, the server's Incus client certificate presented,
//! every answer a `sync` 200 Incus envelope.
//!
//! A check lists `GET /1.0/provisioning/updates?recursion=1`, takes the newest update on the server's channel
//! (`update.yaml`), lists its files, downloads those for its architecture and checks each against its SHA-256
//! and size: one mismatch and nothing is staged. The files' `component`s (`os`, application names) say which
//! applications the update carries a new version of.
//!
//! [`register`]: crate::register

use serde::Deserialize;

use crate::register::{self, ClientIdentity, OperationsCenter, RegisterError};

#[derive(Debug, Deserialize)]
struct Update {
    uuid: String,
    version: String,
    #[serde(default)]
    channels: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct UpdateFile {
    filename: String,
    size: u64,
    #[serde(default)]
    architecture: String,
    /// `os` or an application's name (`incus`, ...).
    #[serde(default)]
    component: String,
    sha256: String,
}

/// What an update check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckOutcome {
    /// Nothing on the channel newer than what the machine runs (its OS and every application).
    UpToDate,
    /// This version's files were fetched and verified: the components (`os`, application names) they update.
    Staged {
        version: String,
        components: Vec<String>,
    },
    /// A file did not match its SHA-256 or size: nothing staged.
    Refused { version: String, filename: String },
}

/// Why a check could not finish.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("requesting {path}")]
    Request {
        path: String,
        #[source]
        source: RegisterError,
    },
    #[error("downloading {path}: HTTP {status}")]
    Download { path: String, status: u16 },
}

/// The simulated machine's architecture, in IncusOS's spelling.
const ARCHITECTURE: &str = "x86_64";

/// One update check against the manager (see the module documentation).
pub async fn check(
    oc: &OperationsCenter,
    identity: &ClientIdentity,
    oldest_running: &str,
    channel: &str,
) -> Result<CheckOutcome, CheckError> {
    let failed = |path: &str| {
        let path = path.to_owned();
        move |source| CheckError::Request { path, source }
    };
    let http = register::client(oc, identity).map_err(failed(""))?;
    let list = "/1.0/provisioning/updates?recursion=1";
    let updates: Vec<Update> = register::get(&http, oc, list).await.map_err(failed(list))?;
    // The list is newest first, as the manager sorts it.
    let Some(newest) = updates
        .into_iter()
        .find(|u| channel.is_empty() || u.channels.iter().any(|c| c == channel))
    else {
        return Ok(CheckOutcome::UpToDate);
    };
    // Version strings are timestamps, compared as text (as IncusOS does). The OS and each application are
    // updated on their own, so the update matters while any of them is older than it.
    if newest.version.as_str() <= oldest_running {
        return Ok(CheckOutcome::UpToDate);
    }
    let base = format!("/1.0/provisioning/updates/{}/files", newest.uuid);
    let files: Vec<UpdateFile> = register::get(&http, oc, &base).await.map_err(failed(&base))?;
    let mut components: Vec<String> = Vec::new();
    for file in files
        .iter()
        .filter(|f| f.architecture.is_empty() || f.architecture == ARCHITECTURE)
    {
        if !file.component.is_empty() && !components.contains(&file.component) {
            components.push(file.component.clone());
        }
        let path = format!("{base}/{}", file.filename);
        let response = http
            .get(oc.url(&path))
            .send()
            .await
            .map_err(|e| failed(&path)(RegisterError::Send(e)))?;
        if !response.status().is_success() {
            return Err(CheckError::Download {
                status: response.status().as_u16(),
                path,
            });
        }
        let bytes = response
            .bytes()
            .await
            .map_err(|e| failed(&path)(RegisterError::Send(e)))?;
        if bytes.len() as u64 != file.size || sha256_hex(&bytes) != file.sha256 {
            return Ok(CheckOutcome::Refused {
                version: newest.version,
                filename: file.filename.clone(),
            });
        }
    }
    Ok(CheckOutcome::Staged {
        version: newest.version,
        components,
    })
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
