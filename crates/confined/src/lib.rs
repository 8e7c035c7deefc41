//! Files opened beneath a directory: the secrets directory (BMC passwords) and the images directory (catalog
//! images, update files).
//!
//! Checking a path and then opening it by name is a race: a directory on the way can be swapped for a symbolic
//! link in between, and `O_NOFOLLOW` guards only the last component. So a name is resolved by the kernel from
//! the directory's open handle, in one step:
//!
//! - `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` (Linux 5.6 and later): symbolic links that stay
//!   beneath the directory are followed (a Kubernetes Secret volume's `..data` links), anything that would leave
//!   it at any moment of the resolution (`..` above it, an absolute link, a `/proc` link) fails with `EXDEV`
//!   or `ELOOP`, whatever is swapped meanwhile;
//! - where the kernel has no `openat2` (`ENOSYS`, or a seccomp filter's `EPERM`), one `openat(2)` per component
//!   from the handle of the last, each with `O_NOFOLLOW`: a symbolic link anywhere on the way is refused.
//!
//! Either way what is returned is an open handle, and whatever is checked afterwards (type, size, digest) is
//! checked on that handle. [`FileStamp`] and [`sha256_hex`] say whether a file's bytes are still the ones a
//! digest was taken of.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// How many times a resolution the kernel asks to retry (`EAGAIN`: a rename raced with `..`) is tried.
const RETRIES: usize = 16;

/// Why a name was not opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The name leads outside the directory (or, on a kernel without `openat2`, through a symbolic link).
    #[error("the name leads outside the directory")]
    Outside,
    /// Anything else the open said: not found, permission, ...
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// How a name is resolved beneath the directory: the kernel's `openat2`, or the portable walk. Public so the
/// walk, which this machine's kernel would never take, can be tested too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    /// `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`, falling back to [`Resolver::Walk`] when the
    /// kernel does not have it.
    Kernel,
    /// One `openat` per component with `O_NOFOLLOW`.
    Walk,
}

/// What an open is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reading: `O_RDONLY | O_NONBLOCK | O_NOCTTY` (a FIFO does not wait for a writer, a terminal is not adopted).
    Read,
    /// Looking only (`O_PATH`): `fstat` works, reading does not, and nothing is opened that opening could affect.
    Look,
}

impl Access {
    fn flags(self) -> OFlags {
        match self {
            Access::Read => OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Access::Look => OFlags::PATH | OFlags::CLOEXEC,
        }
    }
}

/// A directory held open, whose names are resolved beneath it.
#[derive(Debug)]
pub struct Beneath {
    dir: OwnedFd,
}

impl Beneath {
    /// Opens the directory `dir` itself; links in `dir` are the site's configuration and are followed.
    pub fn open(dir: &Path) -> io::Result<Beneath> {
        let dir = rustix::fs::open(
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Beneath { dir })
    }

    /// Opens `name`, a relative path, beneath the directory.
    pub fn file(&self, name: &Path, access: Access) -> Result<File, OpenError> {
        self.file_using(name, access, Resolver::Kernel)
    }

    /// [`Beneath::file`] with the resolver chosen.
    pub fn file_using(&self, name: &Path, access: Access, resolver: Resolver) -> Result<File, OpenError> {
        if name.as_os_str().is_empty() || name.is_absolute() {
            return Err(OpenError::Outside);
        }
        if resolver == Resolver::Kernel {
            match self.kernel(name, access) {
                Err(Errno::NOSYS | Errno::PERM) => {}
                Err(Errno::XDEV | Errno::LOOP) => return Err(OpenError::Outside),
                Err(e) => return Err(OpenError::Io(e.into())),
                Ok(fd) => return Ok(File::from(fd)),
            }
        }
        self.walk(name, access)
    }

    fn kernel(&self, name: &Path, access: Access) -> Result<OwnedFd, Errno> {
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        let mut tries = 0;
        loop {
            match rustix::fs::openat2(&self.dir, name, access.flags(), Mode::empty(), resolve) {
                Err(Errno::AGAIN) if tries < RETRIES => tries += 1,
                other => return other,
            }
        }
    }

    /// One component at a time from the directory's handle, none of them a link, none `..`.
    fn walk(&self, name: &Path, access: Access) -> Result<File, OpenError> {
        let components: Vec<&std::ffi::OsStr> = name
            .components()
            .filter_map(|c| match c {
                Component::CurDir => None,
                Component::Normal(part) => Some(Ok(part)),
                _ => Some(Err(OpenError::Outside)),
            })
            .collect::<Result<_, _>>()?;
        let Some((last, parents)) = components.split_last() else {
            return Err(OpenError::Outside);
        };
        let mut at: Option<OwnedFd> = None;
        for part in parents {
            let from = at.as_ref().map_or(self.dir.as_fd(), |fd| fd.as_fd());
            // `O_PATH | O_NOFOLLOW` opens a link itself, which its type then refuses.
            let next = rustix::fs::openat(
                from,
                *part,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(refused_link)?;
            let kind = rustix::fs::FileType::from_raw_mode(
                rustix::fs::fstat(&next).map_err(io::Error::from)?.st_mode,
            );
            match kind {
                rustix::fs::FileType::Directory => at = Some(next),
                rustix::fs::FileType::Symlink => return Err(OpenError::Outside),
                _ => return Err(OpenError::Io(Errno::NOTDIR.into())),
            }
        }
        let from = at.as_ref().map_or(self.dir.as_fd(), |fd| fd.as_fd());
        let fd = rustix::fs::openat(from, *last, access.flags() | OFlags::NOFOLLOW, Mode::empty())
            .map_err(refused_link)?;
        let file = File::from(fd);
        // With `O_PATH`, `O_NOFOLLOW` opens a link itself instead of failing.
        if file.metadata()?.file_type().is_symlink() {
            return Err(OpenError::Outside);
        }
        Ok(file)
    }
}

/// `ELOOP` (a link as the last component, opened `O_NOFOLLOW`) is a link refused; anything else is the open's
/// own error.
fn refused_link(e: Errno) -> OpenError {
    match e {
        Errno::LOOP => OpenError::Outside,
        other => OpenError::Io(other.into()),
    }
}

/// `path` as a name relative to the directory `dir`: a relative path as it is, an absolute one when it is under
/// `dir` as configured or as canonicalised; `None` for an absolute path elsewhere (or `dir` itself).
pub fn relative_name(dir: &Path, path: &Path) -> Option<PathBuf> {
    if !path.is_absolute() {
        return (!path.as_os_str().is_empty()).then(|| path.to_owned());
    }
    let canonical = std::fs::canonicalize(dir).ok();
    [Some(dir), canonical.as_deref()]
        .into_iter()
        .flatten()
        .find_map(|d| path.strip_prefix(d).ok())
        .filter(|rest| !rest.as_os_str().is_empty())
        .map(Path::to_owned)
}

/// What identifies a file's bytes without reading them: device, inode, size, and the modification and change
/// times in nanoseconds. A rewrite in place keeps the size and the inode but moves the change time, which no
/// caller can set back; a file replaced by rename is another inode. Stored as text, compared as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileStamp(String);

impl FileStamp {
    /// The stamp of an open file's metadata.
    pub fn of(meta: &std::fs::Metadata) -> FileStamp {
        FileStamp(format!(
            "{}:{}:{}:{}.{:09}:{}.{:09}",
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec()
        ))
    }

    /// A stamp as stored.
    pub fn stored(text: String) -> FileStamp {
        FileStamp(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Lower-case hex SHA-256 and length of `file`'s bytes, read with positioned reads from its start (the handle's
/// offset is left alone, so a handle shared with other readers is fine).
pub fn sha256_hex(file: &File) -> io::Result<(String, u64)> {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let n = match file.read_at(&mut buf, len) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        len += n as u64;
    }
    let hex = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((hex, len))
}

#[cfg(test)]
mod tests;
