//! The installed IncusOS checking its update provider, the `operations-center` provider of its seed's
//! `provider.yaml` (racklift stands in for it), over the same client as its registration ([`register`]): TLS 1.3,
//! the seed's `server_certificate` trusted alone when given, the server's Incus client certificate presented,
//! every answer a `sync` 200 Incus envelope.
//!
//! The pieces of one check, the same whether it runs at start-up or is asked for through
//! `POST /os/1.0/system/update/:check` (IncusOS runs one `Checker` for both, `internal/update/update.go`): the
//! listing's selected update ([`select`]), its files for this architecture ([`for_this_machine`]), what each kind
//! takes from them ([`application_file`], [`os_files`], [`secure_boot_files`]), the version comparison
//! ([`compare`]) and the download ([`download`]). `os.rs` runs them in IncusOS's order.
//!
//! [`register`]: crate::register

use serde::Deserialize;

use crate::register::{self, OperationsCenter, RegisterError};

/// What IncusOS reads of an element of the update listing (`provider_operations_center.go:37-43`).
#[derive(Clone, Debug, Deserialize)]
pub struct Update {
    pub uuid: String,
    pub version: String,
    #[serde(default)]
    pub channels: Vec<String>,
}

/// What IncusOS reads of an update's file (`provider_operations_center.go:45-51`). Its `size` is decoded too but
/// never checked (`internal/providers/utils.go:18-107`), so it is left out.
#[derive(Clone, Debug, Deserialize)]
pub struct UpdateFile {
    pub filename: String,
    #[serde(default)]
    pub architecture: String,
    /// `os` or an application's name (`incus`, ...).
    #[serde(default)]
    pub component: String,
    /// `application`, `update-efi`, `update-secureboot`, ... (`api/images/update_file_type.go`).
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub sha256: String,
}

/// The simulated machine's architecture, in IncusOS's spelling.
const ARCHITECTURE: &str = "x86_64";

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The OS files a system update needs (`provider_operations_center.go:718-747`; `internal/systemd/sysupdate.go`).
const OS_FILE_TYPES: [&str; 4] = [
    "update-efi",
    "update-usr",
    "update-usr-verity",
    "update-usr-verity-signature",
];

/// The update IncusOS takes from a listing (`checkRelease`, `provider_operations_center.go:577-592`): the first
/// element, in the order given, whose channels hold `channel` (any first one when `channel` is empty); an element
/// outside the channel whose version is the running one ends the walk and is taken too. IncusOS does not sort.
pub fn select<'a>(updates: &'a [Update], channel: &str, running: &str) -> Option<&'a Update> {
    updates
        .iter()
        .find(|u| channel.is_empty() || u.channels.iter().any(|c| c == channel) || u.version == running)
}

/// The files for this machine: those without an architecture or for `x86_64` (`provider_operations_center.go:
/// 618-625`). None left means no update; there is no fallback to another one.
pub fn for_this_machine(files: Vec<UpdateFile>) -> Vec<UpdateFile> {
    files
        .into_iter()
        .filter(|f| f.architecture.is_empty() || f.architecture == ARCHITECTURE)
        .collect()
}

/// An application's file: base name `<name>.raw.gz`, type `application`; the component is not checked
/// (`provider_operations_center.go:271-301, 660-701`).
pub fn application_file<'a>(files: &'a [UpdateFile], name: &str) -> Option<&'a UpdateFile> {
    let wanted = format!("{name}.raw.gz");
    files
        .iter()
        .find(|f| f.kind == "application" && f.filename.rsplit('/').next() == Some(wanted.as_str()))
}

/// The OS part of an update: `None` when no file has component `os`; otherwise the four `update-*` files, or the
/// type missing (`provider_operations_center.go:240-269, 718-747`).
pub fn os_files(files: &[UpdateFile]) -> Option<Result<Vec<&UpdateFile>, &'static str>> {
    if !files.iter().any(|f| f.component == "os") {
        return None;
    }
    let mut wanted = Vec::new();
    for kind in OS_FILE_TYPES {
        match files.iter().find(|f| f.component == "os" && f.kind == kind) {
            Some(f) => wanted.push(f),
            None => return Some(Err(kind)),
        }
    }
    Some(Ok(wanted))
}

/// The `update-secureboot` files of an update (`provider_operations_center.go:210-238`).
pub fn secure_boot_files(files: &[UpdateFile]) -> Vec<&UpdateFile> {
    files.iter().filter(|f| f.kind == "update-secureboot").collect()
}

/// How an offered version compares with the installed one (`internal/providers/structs.go:56-70`,
/// `DatetimeComparison`; `internal/update/update.go:394-427`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offered {
    /// Nothing installed yet, or a greater version: apply it.
    Newer,
    /// The installed version itself.
    Same,
    /// Anything else: not greater (or not numbers, which never compare greater), an error for the check.
    NotNewer,
}

/// Compare `offered` with `installed` (`None`: nothing installed) as IncusOS does: both parsed as integers.
pub fn compare(offered: &str, installed: Option<&str>) -> Offered {
    let Some(installed) = installed else {
        return Offered::Newer;
    };
    if offered == installed {
        return Offered::Same;
    }
    match (offered.parse::<i64>(), installed.parse::<i64>()) {
        (Ok(o), Ok(i)) if o > i => Offered::Newer,
        _ => Offered::NotNewer,
    }
}

/// Why a check ended early. At start-up IncusOS logs it and starts up all the same (`update.go:139-211`); a
/// requested check reports it in the update state's `status`.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("requesting {path}")]
    Request {
        path: String,
        #[source]
        source: RegisterError,
    },
    #[error("downloading {path}: HTTP {status}")]
    Status { path: String, status: u16 },
    #[error("downloading {path}: SHA-256 {got} is not {want}")]
    Checksum { path: String, got: String, want: String },
    #[error("downloading {path}: not gzip")]
    Gzip {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("local {what} version {installed} is newer than available update {offered}")]
    NotNewer {
        what: String,
        installed: String,
        offered: String,
    },
    #[error("the OS update has no {0} file")]
    MissingOsFile(&'static str),
}

/// Download one file of update `uuid` as `downloadAsset` does (`internal/providers/utils.go:18-107`): a plain GET
/// with `User-Agent: IncusOS/<running>`, only HTTP 200 accepted, the SHA-256 over the bytes as received compared
/// as lower-case hex (skipped when empty), then gunzipped. Returns the gunzipped bytes.
pub async fn download(
    http: &reqwest::Client,
    oc: &OperationsCenter,
    uuid: &str,
    file: &UpdateFile,
    running: &str,
) -> Result<Vec<u8>, CheckError> {
    // The file name is appended as it is, `/` included (`provider_operations_center.go:623`).
    let path = format!("/1.0/provisioning/updates/{uuid}/files/{}", file.filename);
    let request = |source| CheckError::Request {
        path: path.clone(),
        source: RegisterError::Send(source),
    };
    let response = http
        .get(oc.url(&path))
        .header(reqwest::header::USER_AGENT, format!("IncusOS/{running}"))
        .send()
        .await
        .map_err(request)?;
    if response.status() != reqwest::StatusCode::OK {
        return Err(CheckError::Status {
            status: response.status().as_u16(),
            path,
        });
    }
    let compressed = response.bytes().await.map_err(request)?;
    let got = sha256_hex(&compressed);
    if !file.sha256.is_empty() && got != file.sha256 {
        return Err(CheckError::Checksum {
            path,
            got,
            want: file.sha256.clone(),
        });
    }
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&compressed[..]), &mut out)
        .map_err(|source| CheckError::Gzip { path, source })?;
    Ok(out)
}

/// The listing and the selected update's files for this machine, or `None` when nothing is offered.
pub async fn selected(
    http: &reqwest::Client,
    oc: &OperationsCenter,
    channel: &str,
    running: &str,
) -> Result<Option<(Update, Vec<UpdateFile>)>, CheckError> {
    let failed = |path: &str| {
        let path = path.to_owned();
        move |source| CheckError::Request { path, source }
    };
    let list = "/1.0/provisioning/updates?recursion=1";
    let updates: Vec<Update> = register::get(http, oc, list).await.map_err(failed(list))?;
    let Some(update) = select(&updates, channel, running).cloned() else {
        return Ok(None);
    };
    let path = format!("/1.0/provisioning/updates/{}/files", update.uuid);
    let files: Vec<UpdateFile> = register::get(http, oc, &path).await.map_err(failed(&path))?;
    let files = for_this_machine(files);
    if files.is_empty() {
        return Ok(None);
    }
    Ok(Some((update, files)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(version: &str, channels: &[&str]) -> Update {
        Update {
            uuid: format!("u-{version}"),
            version: version.to_owned(),
            channels: channels.iter().map(|c| (*c).to_owned()).collect(),
        }
    }

    fn file(filename: &str, component: &str, kind: &str, architecture: &str) -> UpdateFile {
        UpdateFile {
            filename: filename.to_owned(),
            architecture: architecture.to_owned(),
            component: component.to_owned(),
            kind: kind.to_owned(),
            sha256: String::new(),
        }
    }

    #[test]
    fn the_first_listed_update_in_the_channel_or_at_the_running_version_is_taken() {
        let listing = [
            update("3", &["testing"]),
            update("2", &["stable"]),
            update("1", &["stable"]),
        ];
        // (channel, running, expected version)
        let cases = [
            ("stable", "0", Some("2")),
            ("testing", "0", Some("3")),
            ("", "0", Some("3")),
            ("other", "0", None),
            ("other", "2", Some("2")),
        ];
        for (channel, running, want) in cases {
            assert_eq!(
                select(&listing, channel, running).map(|u| u.version.as_str()),
                want,
                "{channel} {running}"
            );
        }
        // The order given counts, not the versions: an older first element wins.
        let unsorted = [update("1", &["stable"]), update("2", &["stable"])];
        assert_eq!(select(&unsorted, "stable", "0").unwrap().version, "1");
    }

    #[test]
    fn versions_compare_as_integers_and_nothing_else_is_newer() {
        let cases = [
            ("202612010000", None, Offered::Newer),
            ("202612010000", Some("202611010000"), Offered::Newer),
            ("202612010000", Some("202612010000"), Offered::Same),
            ("202611010000", Some("202612010000"), Offered::NotNewer),
            ("v2", Some("1"), Offered::NotNewer),
        ];
        for (offered, installed, want) in cases {
            assert_eq!(compare(offered, installed), want, "{offered} {installed:?}");
        }
    }

    #[test]
    fn files_are_picked_by_architecture_base_name_type_and_component() {
        let files = for_this_machine(vec![
            file("x86_64/incus.raw.gz", "incus", "application", "x86_64"),
            file("aarch64/incus.raw.gz", "incus", "application", "aarch64"),
            file("amd64/debug.raw.gz", "debug", "application", "amd64"),
            file("x86_64/IncusOS_2.efi.gz", "os", "update-efi", "x86_64"),
            file("SecureBootKeys_2.tar.gz", "os", "update-secureboot", ""),
        ]);
        assert_eq!(files.len(), 3, "aarch64 and amd64 are not x86_64");
        assert_eq!(
            application_file(&files, "incus").map(|f| f.filename.as_str()),
            Some("x86_64/incus.raw.gz")
        );
        assert!(application_file(&files, "debug").is_none());
        assert!(application_file(&[file("incus.raw.gz", "incus", "image-raw", "")], "incus").is_none());
        assert_eq!(os_files(&files).unwrap().unwrap_err(), "update-usr");
        assert!(os_files(&[file("x86_64/incus.raw.gz", "incus", "application", "")]).is_none());
        assert_eq!(secure_boot_files(&files).len(), 1);
        let os = [
            "update-efi",
            "update-usr",
            "update-usr-verity",
            "update-usr-verity-signature",
        ]
        .map(|kind| file(kind, "os", kind, ""));
        assert_eq!(os_files(&os).unwrap().unwrap().len(), 4);
    }
}
