//! The composed image: the catalog image with a seed archive laid over the start of partition 2.

use std::io::{Read, Write};
use std::sync::Arc;

use crate::layout::ImageLayout;
use crate::seed::SeedArchive;

/// A seed archive placed at its offset in the image. Applying it to any range of the image's bytes gives that
/// range of the composed image, so Range requests (single or multipart) need no per-deployment copy.
#[derive(Debug, Clone)]
pub struct Overlay {
    pub offset: u64,
    pub bytes: Arc<[u8]>,
}

impl Overlay {
    pub fn new(layout: &ImageLayout, archive: &SeedArchive) -> Overlay {
        Overlay {
            offset: layout.seed_offset,
            bytes: archive.bytes.clone().into(),
        }
    }

    /// Replaces the bytes of `chunk` (which holds the image's bytes from `chunk_offset`) that the seed covers.
    pub fn apply(&self, chunk_offset: u64, chunk: &mut [u8]) {
        let seed_end = self.offset + self.bytes.len() as u64;
        let chunk_end = chunk_offset + chunk.len() as u64;
        let start = chunk_offset.max(self.offset);
        let end = chunk_end.min(seed_end);
        if start >= end {
            return;
        }
        let (c, s, n) = (
            (start - chunk_offset) as usize,
            (start - self.offset) as usize,
            (end - start) as usize,
        );
        chunk[c..c + n].copy_from_slice(&self.bytes[s..s + n]);
    }

    /// Whether the range `[start, end)` of the image touches the seed (for the read path: a chunk that does
    /// not is passed through untouched).
    pub fn touches(&self, start: u64, end: u64) -> bool {
        start < self.offset + self.bytes.len() as u64 && self.offset < end
    }
}

/// Copies `image` to `out` with the seed laid over partition 2; returns the bytes written (the image's size).
pub fn write_composed<R: Read, W: Write>(
    mut image: R,
    overlay: &Overlay,
    mut out: W,
) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    loop {
        let n = image.read(&mut buf)?;
        if n == 0 {
            break;
        }
        overlay.apply(offset, &mut buf[..n]);
        out.write_all(&buf[..n])?;
        offset += n as u64;
    }
    out.flush()?;
    Ok(offset)
}

/// The media's strong validator for one deployment: the image's and the seed's digests, so it changes when
/// either does and two deployments of one image never share it.
pub fn etag(image_sha256: &str, archive: &SeedArchive) -> String {
    let short = |s: &str| s.get(..16).unwrap_or(s).to_owned();
    format!("\"{}-{}\"", short(image_sha256), short(&archive.sha256))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_range_of_the_overlay_equals_that_range_of_the_composed_image() {
        let image: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        let overlay = Overlay {
            offset: 1000,
            bytes: vec![0xEE; 700].into(),
        };
        let mut composed = Vec::new();
        assert_eq!(
            write_composed(&image[..], &overlay, &mut composed).expect("compose"),
            4096
        );
        assert!(composed[1000..1700].iter().all(|b| *b == 0xEE));
        assert_eq!(composed[..1000], image[..1000]);
        assert_eq!(composed[1700..], image[1700..]);
        for (start, len) in [
            (0, 1000),
            (990, 20),
            (1699, 2),
            (1000, 700),
            (0, 4096),
            (1700, 1),
            (500, 3000),
        ] {
            let mut chunk = image[start..start + len].to_vec();
            overlay.apply(start as u64, &mut chunk);
            assert_eq!(chunk, composed[start..start + len], "range {start}+{len}");
            assert_eq!(
                overlay.touches(start as u64, (start + len) as u64),
                chunk != image[start..start + len]
            );
        }
    }
}
