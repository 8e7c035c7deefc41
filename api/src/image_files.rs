//! Catalog images and update files as the API reads them: opened beneath `paths.images_dir`'s handle
//! ([`racklift_confined`], never by a path checked first), their SHA-256 computed by racklift from the open handle,
//! and checked again before they are served.
//!
//! A file is recorded with its digest and the [`FileStamp`] it had when it was hashed. A request whose open
//! handle shows another stamp (rewritten in place at the same size, replaced) has the file hashed again before
//! anything is sent: the same digest, and the new stamp is recorded; another, and the file is refused with an
//! answer naming the image or file by its catalog name, never the host's path. Each stamp is hashed once per
//! process ([`Rechecks`]), so the thousands of range requests of one install do not hash it each.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use racklift_confined::{Access, Beneath, FileStamp, OpenError};

/// A regular file opened beneath the images directory.
pub struct Opened {
    pub file: Arc<File>,
    /// Its name relative to the images directory.
    pub name: PathBuf,
    /// That name under the images directory's canonical path: what the catalog records and shows.
    pub stored: PathBuf,
    pub size: u64,
    pub stamp: FileStamp,
}

/// Opens `path` (absolute inside `dir`, or relative to it) beneath `dir`: `None` when it is outside the directory,
/// not there, or not a regular file; an error only for what the directory itself or the open said otherwise.
pub fn open(dir: &Path, path: &Path) -> std::io::Result<Option<Opened>> {
    let Some(name) = racklift_confined::relative_name(dir, path) else {
        return Ok(None);
    };
    let root = Beneath::open(dir)?;
    let stored = std::fs::canonicalize(dir)?.join(&name);
    let file = match root.file(&name, Access::Read) {
        Ok(file) => file,
        Err(OpenError::Outside) => return Ok(None),
        Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(OpenError::Io(e)) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Ok(None);
    }
    Ok(Some(Opened {
        file: Arc::new(file),
        name,
        stored,
        size: meta.len(),
        stamp: FileStamp::of(&meta),
    }))
}

/// [`open`] on the blocking pool.
pub async fn open_off_runtime(dir: &Path, path: &Path) -> std::io::Result<Option<Opened>> {
    let (dir, path) = (dir.to_owned(), path.to_owned());
    tokio::task::spawn_blocking(move || open(&dir, &path))
        .await
        .map_err(std::io::Error::other)?
}

/// SHA-256 (lower-case hex) and length of an open file, on the blocking pool.
pub async fn sha256(file: Arc<File>) -> std::io::Result<(String, u64)> {
    tokio::task::spawn_blocking(move || racklift_confined::sha256_hex(&file))
        .await
        .map_err(std::io::Error::other)?
}

/// What to do with a file whose handle shows `now`, recorded as `recorded`, with what this process learnt of
/// `now` by hashing (`Some(true)`: it matched).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Serve,
    Refuse,
    Hash,
}

/// The rule, pure: the recorded stamp or a stamp hashed and matched serves; a stamp hashed and not matched
/// refuses; anything else is hashed first.
pub fn decide(now: &FileStamp, recorded: Option<&str>, learnt: Option<bool>) -> Decision {
    match (recorded == Some(now.as_str()), learnt) {
        (true, _) | (false, Some(true)) => Decision::Serve,
        (false, Some(false)) => Decision::Refuse,
        (false, None) => Decision::Hash,
    }
}

/// The outcome of [`Rechecks::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The recorded stamp, or one already hashed and matched here.
    Unchanged,
    /// Hashed now and matched: record this stamp.
    Rehashed(FileStamp),
    /// The bytes no longer have the recorded digest.
    Changed,
}

/// Stamps hashed by this process, by file key, and one lock so a file is hashed by one request at a time.
#[derive(Clone, Default)]
pub struct Rechecks {
    learnt: Arc<Mutex<HashMap<String, (FileStamp, bool)>>>,
    hashing: Arc<tokio::sync::Mutex<()>>,
}

impl Rechecks {
    fn learnt(&self, key: &str, now: &FileStamp) -> Option<bool> {
        let learnt = self.learnt.lock().unwrap_or_else(|p| p.into_inner());
        learnt
            .get(key)
            .filter(|(stamp, _)| stamp == now)
            .map(|(_, ok)| *ok)
    }

    /// Whether `opened` still holds the bytes whose digest is `expected`, recorded with stamp `recorded`; `key`
    /// names the file (`image/<id>`, `update/<uuid>/<filename>`).
    pub async fn check(
        &self,
        key: &str,
        opened: &Opened,
        recorded: Option<&str>,
        expected: &str,
    ) -> std::io::Result<Verdict> {
        match decide(&opened.stamp, recorded, self.learnt(key, &opened.stamp)) {
            Decision::Serve => return Ok(Verdict::Unchanged),
            Decision::Refuse => return Ok(Verdict::Changed),
            Decision::Hash => {}
        }
        let _one_at_a_time = self.hashing.lock().await;
        if let Some(ok) = self.learnt(key, &opened.stamp) {
            return Ok(if ok { Verdict::Unchanged } else { Verdict::Changed });
        }
        let (digest, _) = sha256(opened.file.clone()).await?;
        let matches = digest == expected;
        tracing::warn!(
            file = key,
            matches,
            "file changed since it was hashed; hashed again"
        );
        self.learnt
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_owned(), (opened.stamp.clone(), matches));
        Ok(if matches {
            Verdict::Rehashed(opened.stamp.clone())
        } else {
            Verdict::Changed
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_served_on_its_recorded_stamp_or_after_a_matching_hash() {
        let now = FileStamp::stored("1:2:3:4.000000000:5.000000000".to_owned());
        let cases = [
            (Some(now.as_str()), None, Decision::Serve),
            (Some(now.as_str()), Some(false), Decision::Serve),
            (Some("other"), None, Decision::Hash),
            (None, None, Decision::Hash),
            (Some("other"), Some(true), Decision::Serve),
            (None, Some(false), Decision::Refuse),
        ];
        for (recorded, learnt, want) in cases {
            assert_eq!(decide(&now, recorded, learnt), want, "{recorded:?} {learnt:?}");
        }
    }
}
