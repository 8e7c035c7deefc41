//! Compressed images: IncusOS publishes `IncusOS_<version>.img.gz` and `.iso.gz` (its `Makefile`, `gzip -1`).
//!
//! The media server answers Range requests from the image's own bytes, which a gzip stream cannot give without
//! reading it from the start. So a compressed image is decompressed once, when it enters the catalog, into a
//! file beside it (the name without `.gz`), and that file is what is served and overlaid with each
//! deployment's seed, as Operations Center gunzips its stored image before laying the seed over it
//! (`internal/provisioning/adapter/flasher/flasher.go`, `GenerateSeededImage`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The gzip magic (RFC 1952, ID1 ID2).
const MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Whether the open `file` is a gzip stream, by its first two bytes (not its name); positioned reads, so the
/// handle's offset is left alone.
pub fn is_gzip(file: &std::fs::File) -> std::io::Result<bool> {
    let mut head = [0u8; 2];
    let mut reader = At { file, at: 0 };
    let mut read = 0;
    while read < head.len() {
        match reader.read(&mut head[read..])? {
            0 => return Ok(false),
            n => read += n,
        }
    }
    Ok(head == MAGIC)
}

/// An open file read from `at` onwards with positioned reads.
struct At<'a> {
    file: &'a std::fs::File,
    at: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = std::os::unix::fs::FileExt::read_at(self.file, buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// Where the decompressed copy of `path` goes: beside it, without `.gz` (`x.iso.gz` → `x.iso`); a compressed
/// file not named `.gz` gets `.raw` appended instead.
pub fn raw_path(path: &Path) -> PathBuf {
    match path.to_str().and_then(|p| p.strip_suffix(".gz")) {
        Some(stripped) if !stripped.is_empty() && !stripped.ends_with('/') => PathBuf::from(stripped),
        _ => {
            let mut name = path.as_os_str().to_owned();
            name.push(".raw");
            PathBuf::from(name)
        }
    }
}

/// What decompressing wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gunzipped {
    /// The decompressed file.
    pub path: PathBuf,
    /// Its size.
    pub size: u64,
    /// Lower-case hex SHA-256 of its bytes.
    pub sha256: String,
}

/// Decompresses the gzip file open as `input`, whose path is `src`, to [`raw_path`]`(src)`: read from the handle
/// (the file that was checked, whatever its path leads to now), written to a temporary file in the same directory
/// and renamed over the destination once complete and synced, so a reader never sees half an image and a
/// failed decompression leaves nothing behind. Concatenated gzip members are read as one stream, as `gunzip`
/// reads them.
pub fn gunzip_beside(input: &std::fs::File, src: &Path) -> std::io::Result<Gunzipped> {
    let dest = raw_path(src);
    let dir = dest.parent().unwrap_or(Path::new("."));
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.partial", std::process::id()));
    let result = (|| {
        let mut input = flate2::read::MultiGzDecoder::new(std::io::BufReader::new(At { file: input, at: 0 }));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = input.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])?;
            size += n as u64;
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, &dest)?;
        let sha256 = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
        Ok(Gunzipped {
            path: dest.clone(),
            size,
            sha256,
        })
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_raw_copy_goes_beside_the_compressed_file_without_gz() {
        let cases = [
            ("/images/IncusOS_1.iso.gz", "/images/IncusOS_1.iso"),
            ("/images/IncusOS_1.img.gz", "/images/IncusOS_1.img"),
            ("/images/image", "/images/image.raw"),
            ("/images/.gz", "/images/.gz.raw"),
        ];
        for (src, want) in cases {
            assert_eq!(raw_path(Path::new(src)), PathBuf::from(want), "{src}");
        }
    }

    #[test]
    fn a_gzip_image_is_decompressed_beside_itself_and_only_gzip_is_taken_for_it() {
        let dir = std::env::temp_dir().join(format!("racklift-gz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let raw: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
        let src = dir.join("IncusOS_1.img.gz");
        // Two members, as `cat a.gz b.gz` makes: both are the image.
        let mut compressed = Vec::new();
        for half in raw.chunks(raw.len() / 2 + 1) {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(half).unwrap();
            compressed.extend(enc.finish().unwrap());
        }
        std::fs::write(&src, &compressed).unwrap();
        let open = |p: &Path| std::fs::File::open(p).unwrap();
        assert!(is_gzip(&open(&src)).unwrap());
        let out = gunzip_beside(&open(&src), &src).unwrap();
        assert_eq!(out.path, dir.join("IncusOS_1.img"));
        assert_eq!(out.size, raw.len() as u64);
        assert_eq!(std::fs::read(&out.path).unwrap(), raw);
        let digest: String = Sha256::digest(&raw).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(out.sha256, digest);
        assert!(!is_gzip(&open(&out.path)).unwrap());

        // A truncated stream fails and leaves no partial file.
        let cut = dir.join("cut.img.gz");
        std::fs::write(&cut, &compressed[..compressed.len() / 3]).unwrap();
        assert!(gunzip_beside(&open(&cut), &cut).is_err());
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".partial"))
            .collect();
        assert!(leftovers.is_empty());
        assert!(!dir.join("cut.img").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
