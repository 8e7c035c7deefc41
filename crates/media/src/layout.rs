//! Where the seed goes: partition 2 of the image's GUID partition table, found through the image's own logical
//! sector size.
//!
//! IncusOS publishes two images of one build (`scripts/convert-img-to-iso.sh` of IncusOS): `.img`, the mkosi
//! raw disk with 512-byte sectors, for USB sticks; and `.iso`, the same five partitions recreated on a copy
//! attached with `losetup --sector-size 2048`, a GPT disk with 2048-byte logical sectors (no ISO 9660) for CD
//! drives. The GPT header sits at LBA 1 of whichever sector size the image was made with, so it is looked for
//! at 512, 2048 and 4096 bytes; the sector size found is what a drive must present to boot the image, and so
//! the image's [`MediaFormat`].

use std::io::{Read, Seek, SeekFrom, Write};

/// The largest seed archive racklift writes, and so the least room partition 2 must offer. A seed is a handful
/// of small YAML files (install target, provider, certificates, a network config): a megabyte is generous.
pub const MAX_SEED_BYTES: u64 = 1 << 20;

/// The logical sector sizes a GPT is looked for with, in order: the raw `.img` (512), the `.iso` (2048), 4Kn
/// disks (4096).
pub const SECTOR_SIZES: [u64; 3] = [512, 2048, 4096];

/// How a drive must present an image for its firmware to find the GPT and boot it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MediaFormat {
    /// A disk image (512- or 4096-byte sectors): IncusOS's `.img`, booted from a (virtual) USB stick.
    Disk,
    /// A GPT with 2048-byte sectors: IncusOS's `.iso`, booted from a (virtual) CD/DVD drive.
    Cd,
}

impl MediaFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            MediaFormat::Disk => "disk",
            MediaFormat::Cd => "cd",
        }
    }

    pub fn parse(s: &str) -> Option<MediaFormat> {
        match s {
            "disk" => Some(MediaFormat::Disk),
            "cd" => Some(MediaFormat::Cd),
            _ => None,
        }
    }

    /// The format a drive with `sector_size`-byte logical blocks boots: CD drives have 2048-byte blocks.
    pub fn of_sector_size(sector_size: u64) -> MediaFormat {
        if sector_size == 2048 {
            MediaFormat::Cd
        } else {
            MediaFormat::Disk
        }
    }

    /// The file extension IncusOS publishes this format with (`.iso`, `.img`); BMCs want one in the media URL.
    pub fn extension(self) -> &'static str {
        match self {
            MediaFormat::Disk => "img",
            MediaFormat::Cd => "iso",
        }
    }
}

/// The facts of an image the media server needs, read once when the image enters the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLayout {
    /// Bytes in the image file.
    pub size: u64,
    /// The logical sector size the GPT was written with.
    pub sector_size: u64,
    /// Byte offset of partition 2: where the seed archive starts.
    pub seed_offset: u64,
    /// Bytes partition 2 holds.
    pub seed_capacity: u64,
}

/// Why an image cannot carry a seed.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("reading the image")]
    Io(#[from] std::io::Error),
    #[error(
        "the image has no GUID partition table at 512-, 2048- or 4096-byte sectors (IncusOS images are GPT disk \
         images)"
    )]
    NotGpt(#[source] gptman::Error),
    #[error("the image has no partition 2, where IncusOS reads its seed")]
    NoSeedPartition,
    #[error("partition 2 holds {capacity} bytes; a seed needs {needed}")]
    SeedPartitionTooSmall { capacity: u64, needed: u64 },
    #[error("partition 2 ends past the end of the image ({end} > {size} bytes)")]
    SeedPartitionOutside { end: u64, size: u64 },
}

/// The image's GPT, read with the first sector size of [`SECTOR_SIZES`] whose LBA 1 (or last LBA, for the
/// backup) holds a GPT signature. Another error at a size is not "try the next": a damaged table is reported.
pub fn find_gpt<R: Read + Seek + ?Sized>(image: &mut R) -> Result<gptman::GPT, gptman::Error> {
    let mut last = gptman::Error::InvalidSignature;
    for size in SECTOR_SIZES {
        match gptman::GPT::read_from(image, size) {
            Ok(gpt) => return Ok(gpt),
            Err(gptman::Error::InvalidSignature) => last = gptman::Error::InvalidSignature,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

impl ImageLayout {
    /// Reads the partition table of `image` (512-, 2048- or 4096-byte sectors) and checks partition 2 can hold a
    /// seed of [`MAX_SEED_BYTES`] inside the image.
    pub fn read<R: Read + Seek>(image: &mut R) -> Result<ImageLayout, LayoutError> {
        let size = image.seek(SeekFrom::End(0))?;
        image.seek(SeekFrom::Start(0))?;
        let gpt = find_gpt(image).map_err(LayoutError::NotGpt)?;
        let Some(p) = gpt
            .iter()
            .find(|(i, _)| *i == 2)
            .map(|(_, p)| p)
            .filter(|p| p.is_used())
        else {
            return Err(LayoutError::NoSeedPartition);
        };
        let seed_offset = p.starting_lba * gpt.sector_size;
        let seed_capacity = p.size().map_err(LayoutError::NotGpt)? * gpt.sector_size;
        let end = seed_offset + seed_capacity;
        if end > size {
            return Err(LayoutError::SeedPartitionOutside { end, size });
        }
        if seed_capacity < MAX_SEED_BYTES {
            return Err(LayoutError::SeedPartitionTooSmall {
                capacity: seed_capacity,
                needed: MAX_SEED_BYTES,
            });
        }
        Ok(ImageLayout {
            size,
            sector_size: gpt.sector_size,
            seed_offset,
            seed_capacity,
        })
    }

    /// How a drive must present the image to boot it.
    pub fn format(&self) -> MediaFormat {
        MediaFormat::of_sector_size(self.sector_size)
    }
}

/// The GPT partition type IncusOS's images give the seed partition is not what readers go by (they take
/// partition 2 by number); Linux filesystem data is a neutral choice for generated images.
const LINUX_DATA: [u8; 16] = [
    0xaf, 0x3d, 0xc6, 0x0f, 0x83, 0x84, 0x72, 0x47, 0x8e, 0x79, 0x3d, 0x69, 0xd8, 0x47, 0x7d, 0xe4,
];
const EFI_SYSTEM: [u8; 16] = [
    0x28, 0x73, 0x2a, 0xc1, 0x1f, 0xf8, 0xd2, 0x11, 0xba, 0x4b, 0x00, 0xa0, 0xc9, 0x3e, 0xc9, 0x3b,
];

/// The IncusOS version demo images carry: the version the simulated machines ship with.
pub const DEMO_VERSION: &str = "202611010000";

/// What a demo image is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoImage {
    /// Bytes in the image (at least 2 MiB, and a multiple of the sector size is not needed).
    pub size: u64,
    /// 512 for an `.img`, 2048 for an `.iso`.
    pub sector_size: u64,
    /// The IncusOS version, written where a real image has it: the name of its `/usr` partition,
    /// `<ImageId>_<ImageVersion>` (IncusOS's `mkosi.repart/12-usr.conf`, `Label=%M_%A`; `ImageId=IncusOS`).
    pub version: String,
}

impl DemoImage {
    /// An `.img` (512-byte sectors) of `size` bytes carrying [`DEMO_VERSION`].
    pub fn img(size: u64) -> DemoImage {
        DemoImage {
            size,
            sector_size: 512,
            version: DEMO_VERSION.to_owned(),
        }
    }

    /// An `.iso` (2048-byte sectors, as `convert-img-to-iso.sh` makes it) of `size` bytes carrying
    /// [`DEMO_VERSION`].
    pub fn iso(size: u64) -> DemoImage {
        DemoImage {
            sector_size: 2048,
            ..DemoImage::img(size)
        }
    }
}

/// Writes a disk image laid out like an IncusOS install image, for demos, tests and benchmarks: a protective
/// MBR, a GPT with `spec.sector_size`-byte sectors holding partition 1 (ESP, 1/8 of the disk), partition 2 (the
/// seed partition, [`MAX_SEED_BYTES`], zeroed) and partition 3 (the rest, named `IncusOS_<version>` as IncusOS
/// names its `/usr` partition), every other byte from `fill`. `spec.size` must leave room for all three (at
/// least 2 MiB).
pub fn write_demo_image<W: Read + Write + Seek>(
    out: &mut W,
    spec: &DemoImage,
    mut fill: impl FnMut(&mut [u8]),
) -> std::io::Result<ImageLayout> {
    let size = spec.size;
    let sector = spec.sector_size;
    if !SECTOR_SIZES.contains(&sector) {
        return Err(std::io::Error::other(format!(
            "a demo image has 512-, 2048- or 4096-byte sectors, not {sector}"
        )));
    }
    // Partitions start on 4 KiB boundaries (what 4Kn disks and most tools want), not the usual 1 MiB, so a
    // small test image still has room.
    let align = (4096 / sector).max(1);
    if size < 2 << 20 {
        return Err(std::io::Error::other("a demo image needs at least 2 MiB"));
    }
    // The payload first, so the table written afterwards is not overwritten.
    out.seek(SeekFrom::Start(0))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut written = 0u64;
    while written < size {
        let n = (size - written).min(buf.len() as u64) as usize;
        fill(&mut buf[..n]);
        out.write_all(&buf[..n])?;
        written += n as u64;
    }
    let mut gpt = gptman::GPT::new_from(out, sector, *b"racklift-demo-im").map_err(std::io::Error::other)?;
    let first = gpt.header.first_usable_lba.next_multiple_of(align);
    let esp_end = first + (size / sector / 8).next_multiple_of(align);
    let seed_end = esp_end + MAX_SEED_BYTES / sector;
    let entry = |type_guid: [u8; 16], id: u8, start: u64, end: u64, name: &str| gptman::GPTPartitionEntry {
        partition_type_guid: type_guid,
        unique_partition_guid: [id; 16],
        starting_lba: start,
        ending_lba: end,
        attribute_bits: 0,
        partition_name: name.into(),
    };
    gpt[1] = entry(EFI_SYSTEM, 1, first, esp_end - 1, "esp");
    gpt[2] = entry(LINUX_DATA, 2, esp_end, seed_end - 1, "seed-data");
    gpt[3] = entry(
        LINUX_DATA,
        3,
        seed_end,
        gpt.header.last_usable_lba,
        &format!("IncusOS_{}", spec.version),
    );
    gptman::GPT::write_protective_mbr_into(out, sector).map_err(std::io::Error::other)?;
    gpt.write_into(out).map_err(std::io::Error::other)?;
    // The seed partition of a fresh image holds no seed.
    out.seek(SeekFrom::Start(esp_end * sector))?;
    out.write_all(&vec![0u8; MAX_SEED_BYTES as usize])?;
    out.flush()?;
    ImageLayout::read(out).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    #[test]
    fn a_demo_image_has_a_seed_partition_the_reader_finds() {
        let mut disk = Cursor::new(Vec::new());
        let layout =
            write_demo_image(&mut disk, &DemoImage::img((3 << 20) + 17), |b| b.fill(0xAB)).expect("image");
        assert_eq!(layout.size, (3 << 20) + 17);
        assert_eq!(layout.seed_capacity, MAX_SEED_BYTES);
        assert_eq!(layout.seed_offset % 4096, 0);
        let bytes = disk.into_inner();
        // Outside the table and the seed partition, the payload is what `fill` gave.
        assert_eq!(bytes[layout.size as usize - 64 * 1024], 0xAB);
        assert!(
            bytes[layout.seed_offset as usize..][..1024]
                .iter()
                .all(|b| *b == 0)
        );
        assert_eq!(
            ImageLayout::read(&mut Cursor::new(bytes))
                .expect("read")
                .seed_offset,
            layout.seed_offset
        );
    }

    /// Each sector size IncusOS images and disks come in is found, partition 2 located through it, and the
    /// format is what a drive of that block size boots.
    #[test]
    fn the_gpt_is_found_at_each_sector_size_and_gives_the_format() {
        let cases = [
            (512, MediaFormat::Disk),
            (2048, MediaFormat::Cd),
            (4096, MediaFormat::Disk),
        ];
        for (sector_size, format) in cases {
            let spec = DemoImage {
                sector_size,
                ..DemoImage::img(4 << 20)
            };
            let mut disk = Cursor::new(Vec::new());
            let written = write_demo_image(&mut disk, &spec, |b| b.fill(0x5A)).expect("image");
            let read = ImageLayout::read(&mut disk).expect("read");
            assert_eq!(read, written, "{sector_size}");
            assert_eq!(read.sector_size, sector_size);
            assert_eq!(read.format(), format, "{sector_size}");
            assert_eq!(read.seed_offset % sector_size, 0);
            assert_eq!(read.seed_capacity, MAX_SEED_BYTES);
            // The header is at LBA 1 of that sector size, and nowhere a smaller size would look.
            let bytes = disk.into_inner();
            assert_eq!(&bytes[sector_size as usize..][..8], b"EFI PART");
            for smaller in SECTOR_SIZES.iter().filter(|s| **s < sector_size) {
                assert_ne!(&bytes[*smaller as usize..][..8], b"EFI PART");
            }
            // The version is the name of the usr partition, as IncusOS names it.
            let gpt = find_gpt(&mut Cursor::new(&bytes)).expect("gpt");
            assert_eq!(gpt[3].partition_name.as_str(), "IncusOS_202611010000");
        }
        assert!(
            write_demo_image(
                &mut Cursor::new(Vec::new()),
                &DemoImage {
                    sector_size: 1024,
                    ..DemoImage::img(4 << 20)
                },
                |_| {}
            )
            .is_err()
        );
    }

    #[test]
    fn images_that_cannot_carry_a_seed_are_refused_with_the_reason() {
        let mut plain = Cursor::new(vec![0u8; 4 << 20]);
        assert!(matches!(
            ImageLayout::read(&mut plain),
            Err(LayoutError::NotGpt(_))
        ));

        // A GPT with one partition only.
        let mut disk = Cursor::new(vec![0u8; 8 << 20]);
        let mut gpt = gptman::GPT::new_from(&mut disk, 512, [7; 16]).expect("gpt");
        gpt[1] = gptman::GPTPartitionEntry {
            partition_type_guid: LINUX_DATA,
            unique_partition_guid: [1; 16],
            starting_lba: 2048,
            ending_lba: 4095,
            attribute_bits: 0,
            partition_name: "one".into(),
        };
        gpt.write_into(&mut disk).expect("write");
        assert!(matches!(
            ImageLayout::read(&mut disk),
            Err(LayoutError::NoSeedPartition)
        ));

        // Partition 2 too small for a seed.
        gpt[2] = gptman::GPTPartitionEntry {
            partition_type_guid: LINUX_DATA,
            unique_partition_guid: [2; 16],
            starting_lba: 4096,
            ending_lba: 4096 + 127,
            attribute_bits: 0,
            partition_name: "tiny".into(),
        };
        gpt.write_into(&mut disk).expect("write");
        assert!(matches!(
            ImageLayout::read(&mut disk),
            Err(LayoutError::SeedPartitionTooSmall { capacity: 65536, .. })
        ));
    }
}
