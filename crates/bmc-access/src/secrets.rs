//! BMC password references: what a stored `bmc_password_ref` may name, and reading it.
//!
//! A reference is chosen by an admin through the API, but it is read on the API's and every worker's host with
//! their privileges, and the value is sent to a BMC address the same admin chose. So a reference can name only a
//! secret meant for a BMC, never an arbitrary file or variable of the host:
//!
//! - `file:NAME`: NAME is relative to the secrets directory (`paths.secrets_dir`), made of non-empty
//!   `/`-separated components of `[A-Za-z0-9._-]`, none `.` or `..`. The name is opened beneath the directory's
//!   open handle by the kernel in one step ([`racklift_confined`]: `openat2` with `RESOLVE_BENEATH`), never by a
//!   path checked first and opened afterwards, so a component swapped for a link meanwhile cannot lead out.
//!   Symbolic links that stay beneath the directory are followed (a Kubernetes Secret volume's links to
//!   `..data/…`); a link out of it (to `/etc`, an absolute link, `..` above it) is refused, and on a kernel
//!   without `openat2` (before Linux 5.6) every link is refused. The file is opened non-blocking (a FIFO cannot
//!   hang the read), must be a regular file by `fstat` of the open handle, and is read up to
//!   [`MAX_SECRET_BYTES`]; trailing CR and LF are dropped.
//! - `env:NAME`: NAME is a variable name that starts with the secret prefix (`paths.secret_env_prefix`), so
//!   `DATABASE_URL` or `HOME` cannot be sent to a BMC.
//!
//! Anything else is refused by its form alone, before the filesystem is touched, so a refusal says nothing about
//! what exists on the host. No error repeats a refused reference (it may be a password typed in the wrong
//! place) or a value read.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use racklift_confined::{Access, Beneath, OpenError};
use racklift_redfish::Secret;

/// Where `file:` references live unless `paths.secrets_dir` says otherwise.
pub const DEFAULT_SECRETS_DIR: &str = "/etc/racklift/secrets";
/// The prefix `env:` references must carry unless `paths.secret_env_prefix` says otherwise.
pub const DEFAULT_ENV_PREFIX: &str = "RACKLIFT_SECRET_";
/// The largest secret file read: a password is a few dozen bytes, so anything near this is not one (`/dev/zero`
/// behind a link, a log file) and reading all of it would only cost memory.
pub const MAX_SECRET_BYTES: usize = 4096;
/// How long reading a secret file may take. The read runs on the blocking pool, so a stalled filesystem (a hung
/// network mount) costs a blocking thread, never the runtime; the caller gives up after this.
pub const READ_DEADLINE: Duration = Duration::from_secs(2);
/// Longest reference name accepted; far above any real file name, far below what would be worth storing.
const MAX_NAME_BYTES: usize = 1024;

/// Why a reference was refused or could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Refused by form, before anything was looked up.
    #[error("a password reference must be env:NAME or file:NAME: {why}")]
    BadForm { why: &'static str },
    /// An `env:` name without the secret prefix.
    #[error("env: references must name a variable that starts with {prefix}")]
    EnvPrefix { prefix: String },
    #[error("env:{name} is not set")]
    EnvNotSet { name: String },
    /// The secrets directory is missing or cannot be searched; every `file:` reference fails until it can.
    #[error("the secrets directory {} is not available", dir.display())]
    DirUnavailable {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The name resolves (through a symbolic link, or `..` after one) to something outside the secrets directory,
    /// or through any link on a kernel without `openat2`.
    #[error("file:{name} leads outside the secrets directory")]
    Outside { name: String },
    #[error("file:{name} cannot be read")]
    Unreadable {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("file:{name} is not a regular file")]
    NotRegularFile { name: String },
    #[error("file:{name} is larger than {MAX_SECRET_BYTES} bytes")]
    TooLarge { name: String },
    #[error("file:{name} was not read within {} ms", READ_DEADLINE.as_millis())]
    Deadline { name: String },
    /// `reference` is the accepted reference (`env:…` or `file:…`), never the value.
    #[error("{reference} holds an empty password")]
    Empty { reference: String },
    #[error("{reference} does not hold UTF-8 text")]
    NotText { reference: String },
}

/// A reference that passed the form rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reference<'a> {
    /// A name relative to the secrets directory.
    File(&'a str),
    /// A variable name carrying the secret prefix.
    Env(&'a str),
}

/// Where password references may point: the secrets directory and the secret variables' prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secrets {
    dir: PathBuf,
    env_prefix: String,
}

impl Default for Secrets {
    fn default() -> Self {
        Secrets {
            dir: PathBuf::from(DEFAULT_SECRETS_DIR),
            env_prefix: DEFAULT_ENV_PREFIX.to_owned(),
        }
    }
}

/// Whether `prefix` can be a secret prefix: a non-empty start of a variable name. An empty one would let
/// references name every variable, which is the unconfined mode there no longer is.
pub fn valid_env_prefix(prefix: &str) -> bool {
    !prefix.is_empty()
        && !prefix.starts_with(|c: char| c.is_ascii_digit())
        && prefix.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !prefix.contains("__")
}

impl Secrets {
    /// The rules for `dir` and `env_prefix`; `None` when the prefix is not [`valid_env_prefix`].
    pub(crate) fn new(dir: &Path, env_prefix: &str) -> Option<Secrets> {
        valid_env_prefix(env_prefix).then(|| Secrets {
            dir: dir.to_owned(),
            env_prefix: env_prefix.to_owned(),
        })
    }

    /// The secrets directory as configured.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The prefix `env:` names must start with.
    pub fn env_prefix(&self) -> &str {
        &self.env_prefix
    }

    /// Applies the form rules and the prefix: touches neither the filesystem nor the environment.
    pub fn parse<'a>(&self, reference: &'a str) -> Result<Reference<'a>, SecretError> {
        let parsed = parse_form(reference)?;
        if let Reference::Env(name) = parsed
            && (name.len() <= self.env_prefix.len() || !name.starts_with(&self.env_prefix))
        {
            return Err(SecretError::EnvPrefix {
                prefix: self.env_prefix.clone(),
            });
        }
        Ok(parsed)
    }

    /// What can be checked when a reference is stored: its form, and for a file that already exists, that it
    /// stays inside the directory and is a regular file of at most [`MAX_SECRET_BYTES`]. A file or variable not
    /// there yet is accepted: it may be provisioned after the server is registered.
    pub async fn check(&self, reference: &str) -> Result<(), SecretError> {
        let Reference::File(name) = self.parse(reference)? else {
            return Ok(());
        };
        let (dir, owned) = (self.dir.clone(), name.to_owned());
        match off_runtime(name, READ_DEADLINE, move || inspect(&dir, &owned)).await {
            Err(SecretError::DirUnavailable { .. } | SecretError::Unreadable { .. }) => Ok(()),
            other => other,
        }
    }

    /// Reads the password `reference` names, under every rule above. Called on every use, so a rotated secret
    /// takes effect at the next one.
    pub async fn resolve(&self, reference: &str) -> Result<Secret, SecretError> {
        match self.parse(reference)? {
            Reference::Env(name) => {
                let value = std::env::var(name).map_err(|e| match e {
                    std::env::VarError::NotPresent => SecretError::EnvNotSet {
                        name: name.to_owned(),
                    },
                    std::env::VarError::NotUnicode(_) => SecretError::NotText {
                        reference: reference.to_owned(),
                    },
                })?;
                password(value.into_bytes(), reference)
            }
            Reference::File(name) => {
                let (dir, owned) = (self.dir.clone(), name.to_owned());
                let bytes = off_runtime(name, READ_DEADLINE, move || read_file(&dir, &owned)).await?;
                password(bytes, reference)
            }
        }
    }
}

/// The form rules that hold whatever the site's settings: what a client can check before a reference leaves the
/// operator's machine (the prefix is the API's to check, since it is configured there).
pub fn parse_form(reference: &str) -> Result<Reference<'_>, SecretError> {
    let why = match reference.split_once(':') {
        Some(("file", name)) => match file_name_form(name) {
            None => return Ok(Reference::File(name)),
            Some(why) => why,
        },
        Some(("env", name)) => match env_name_form(name) {
            None => return Ok(Reference::Env(name)),
            Some(why) => why,
        },
        _ => "no env: or file: scheme (a reference names where the password is, never the password)",
    };
    Err(SecretError::BadForm { why })
}

/// Why `name` is not a valid `file:` name, if it is not.
fn file_name_form(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("the file name is empty");
    }
    if name.len() > MAX_NAME_BYTES {
        return Some("the file name is too long");
    }
    if name.starts_with('/') {
        return Some("file names are relative to the secrets directory, not absolute paths");
    }
    for component in name.split('/') {
        if component.is_empty() {
            return Some("the file name has an empty component");
        }
        if component == "." || component == ".." {
            return Some("the file name has a . or .. component");
        }
        if !component
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Some("file names are made of A-Z a-z 0-9 . _ - and /");
        }
    }
    None
}

/// Why `name` is not a valid `env:` name, if it is not. `__` is refused as well: racklift reads
/// `RACKLIFT_<SECTION>__<KEY>` variables as configuration, so such a name would be taken for a key.
fn env_name_form(name: &str) -> Option<&'static str> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        return Some("the variable name is not made of A-Z a-z 0-9 _ (not starting with a digit)");
    }
    if name.contains("__") {
        return Some("variable names with __ are read as racklift.toml keys");
    }
    None
}

/// The password in `bytes`: trailing CR and LF dropped, not empty, UTF-8.
fn password(mut bytes: Vec<u8>, reference: &str) -> Result<Secret, SecretError> {
    while bytes.last().is_some_and(|b| matches!(b, b'\r' | b'\n')) {
        bytes.pop();
    }
    if bytes.is_empty() {
        return Err(SecretError::Empty {
            reference: reference.to_owned(),
        });
    }
    String::from_utf8(bytes)
        .map(Secret::new)
        .map_err(|_| SecretError::NotText {
            reference: reference.to_owned(),
        })
}

/// Runs blocking filesystem work on the blocking pool, giving up after `deadline`. A read past it keeps its
/// thread until the filesystem answers; the caller moves on either way.
async fn off_runtime<T: Send + 'static>(
    name: &str,
    deadline: Duration,
    work: impl FnOnce() -> Result<T, SecretError> + Send + 'static,
) -> Result<T, SecretError> {
    match tokio::time::timeout(deadline, tokio::task::spawn_blocking(work)).await {
        Ok(Ok(result)) => result,
        Ok(Err(join)) => Err(SecretError::Unreadable {
            name: name.to_owned(),
            source: std::io::Error::other(join.to_string()),
        }),
        Err(_) => Err(SecretError::Deadline {
            name: name.to_owned(),
        }),
    }
}

/// Opens `name` beneath the secrets directory's handle ([`racklift_confined`]): the kernel resolves the whole name
/// from the directory in one step, so no component swapped for a link meanwhile can lead out of it.
fn open_beneath(dir: &Path, name: &str, access: Access) -> Result<std::fs::File, SecretError> {
    let root = Beneath::open(dir).map_err(|source| SecretError::DirUnavailable {
        dir: dir.to_owned(),
        source,
    })?;
    root.file(Path::new(name), access).map_err(|e| match e {
        OpenError::Outside => SecretError::Outside {
            name: name.to_owned(),
        },
        OpenError::Io(source) => SecretError::Unreadable {
            name: name.to_owned(),
            source,
        },
    })
}

/// What [`Secrets::check`] looks at: the file's type and size, from a handle opened only to look (`O_PATH`).
fn inspect(dir: &Path, name: &str) -> Result<(), SecretError> {
    let file = open_beneath(dir, name, Access::Look)?;
    let meta = file.metadata().map_err(|source| SecretError::Unreadable {
        name: name.to_owned(),
        source,
    })?;
    regular_and_small(&meta, name)
}

fn regular_and_small(meta: &std::fs::Metadata, name: &str) -> Result<(), SecretError> {
    if !meta.file_type().is_file() {
        return Err(SecretError::NotRegularFile {
            name: name.to_owned(),
        });
    }
    if meta.len() > MAX_SECRET_BYTES as u64 {
        return Err(SecretError::TooLarge {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// Opens and reads the secret file `name` beneath the directory, non-blocking (a FIFO does not wait for a writer)
/// and without adopting a terminal; the type is then taken from the open handle, so what is read is what was
/// checked.
fn read_file(dir: &Path, name: &str) -> Result<Vec<u8>, SecretError> {
    let file = open_beneath(dir, name, Access::Read)?;
    let unreadable = |source| SecretError::Unreadable {
        name: name.to_owned(),
        source,
    };
    let meta = file.metadata().map_err(unreadable)?;
    regular_and_small(&meta, name)?;
    let mut bytes = Vec::with_capacity(64);
    // One byte past the cap tells a file that grew since `fstat` from one that fits.
    file.take(MAX_SECRET_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() > MAX_SECRET_BYTES {
        return Err(SecretError::TooLarge {
            name: name.to_owned(),
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests;
