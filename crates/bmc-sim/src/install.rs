//! The IncusOS installer booted from virtual media.
//!
//! The installer reads the attached media over HTTP with `Range` requests, the way the BMC would pass the host's
//! reads through: boot reads at the start and the end of the image, then the bulk (early in the install for most
//! BMCs, spread over the whole install for a Lenovo-like one). An Upload BMC copied the image at insert and
//! reads nothing more; it keeps from its copy what the installer needs to find the seed ([`CachedCopy`]).
//!
//! The firmware boots it only from a device of the class the image was made for ([`bootable_media`]): it reads
//! the head of each inserted image and finds a GPT at LBA 1 of the device's block size (2048 for a CD drive, 512
//! for a USB stick), so IncusOS's `.iso` boots from a CD slot and its `.img` from a USB slot, and nothing else.
//!
//! What it does is decided by the seed, read as IncusOS reads it (`incus-osd/internal/seed`,
//! `internal/install`): the GPT from the boot read, found through the media's own sector size, gives partition
//! 2 and the version the media carries; the start of partition 2 is read through the same media URL and holds
//! the seed's tar archive ([`crate::seed`]).
//!
//! - No seed data or no `install` file: the live image runs and never installs
//!   ([`OsPhase::LiveWithoutInstallSeed`]); IncusOS reports "unable to begin install without seed
//!   configuration" on read-only media and waits.
//! - No partition 2, an unreadable archive or an `install` file that does not decode: the install fails with
//!   the reason ([`OsPhase::InstallFailed`]).
//! - Otherwise it installs to the machine's one disk (`target.id` must match it; a disk already installed needs
//!   `force_install`), copies the seed without `install.*` onto it, and at the end of stage 1 reboots
//!   (`force_reboot`) or waits for the media to be ejected.
//! - The very version the media carries already installed (`internal/install/install.go`, the same-version
//!   check): without `force_install` nothing is installed; with it, `force_install_confirmation` must be the
//!   first six characters of the installed machine-id, else the installer stops with IncusOS's message naming
//!   the value; with it, the installer wipes the disk and reboots, and the next boot installs.
//!
//! A read the media server does not answer (refused, reset, an HTTP error) is retried before the installer sees
//! an I/O error, the way nbdkit's retry filter retries a failed read by default: five times, 2 s after the
//! first failure and doubling, about a minute in all ([`READ_RETRY_DELAYS`]). A media server restarted, or one
//! briefly unable to answer, costs the install nothing; one away for longer fails it. Media ejected under the
//! installer fails it at once: the BMC knows there is nothing to read.

use std::ops::Range;
use std::time::Duration;

use reqwest::header::{CONTENT_RANGE, RANGE};

use crate::bmc::Bmc;
use crate::driver::{AfterInstall, Halt, current};
use crate::machine::{DeviceClass, OsPhase};
use crate::profile::MediaRead;
use crate::seed::{self, Install, SEED_READ_BYTES, SeedError, SeedFiles};

/// Size of one bulk read.
const CHUNK: u64 = 1 << 20;
/// Size of the boot reads at the start and the end of the image (the GPT is within the first).
const BOOT_READ: u64 = 64 << 10;
/// Slices the idle part of an install is checked in (media removed while still read from breaks it).
const IDLE_SLICES: u32 = 10;
/// The waits before each retry of a failed media read (simulated time): nbdkit-retry-filter's defaults
/// (`retries=5`, `retry-delay=2`, `retry-exponential=yes`).
const READ_RETRY_DELAYS: [Duration; 5] = [
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
    Duration::from_secs(16),
    Duration::from_secs(32),
];
/// What IncusOS shows when it boots from read-only media without an install seed (`CheckSystemRequirements`).
const NO_INSTALL_SEED: &str = "unable to begin install without seed configuration";
/// The seconds IncusOS waits after wiping an installation of the same version before it reboots ("Wiping
/// existing version of IncusOS, then rebooting in five seconds to run actual installation").
const WIPE_REBOOT_DELAY: Duration = Duration::from_secs(5);

/// What an Upload BMC keeps of the image it copied at insert: its size, its first bytes (the GPT) and the start
/// of partition 2 (the seed). Not the whole image: a fleet of simulated BMCs holds no multi-GB copies.
#[derive(Clone, Debug, Default)]
pub struct CachedCopy {
    pub size: u64,
    head: Vec<u8>,
    /// The start of partition 2 and the bytes copied from there, when the GPT has one.
    seed_area: Option<(u64, Vec<u8>)>,
}

/// `[start, end]` of `url`: the bytes received and the total size if known.
async fn read_range(bmc: &Bmc, url: &str, start: u64, end: u64) -> Result<(Vec<u8>, Option<u64>), String> {
    let resp = bmc
        .shared
        .http
        .get(url)
        .header(RANGE, format!("bytes={start}-{end}"))
        .send()
        .await
        .map_err(|e| format!("reading {url}: {e}"))?;
    let status = resp.status();
    if !status.is_success() {
        return Err(format!("reading {url}: HTTP {status}"));
    }
    let total = resp
        .headers()
        .get(CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.rsplit('/').next())
        .and_then(|t| t.parse::<u64>().ok());
    let body = resp.bytes().await.map_err(|e| format!("reading {url}: {e}"))?;
    let len = body.len() as u64;
    let total = if status.as_u16() == 206 { total } else { Some(len) };
    let mut m = bmc.machine();
    m.counters.media_range_requests += 1;
    m.counters.media_bytes_read += len;
    Ok((body.to_vec(), total))
}

/// [`read_range`] of the media the installer booted from, retried after [`READ_RETRY_DELAYS`]. The inner error
/// is what the installer reports: the last failure, or the media taken away between two tries.
async fn read_media(
    bmc: &Bmc,
    generation: u64,
    slot: usize,
    url: &str,
    start: u64,
    end: u64,
) -> Result<Result<(Vec<u8>, Option<u64>), String>, Halt> {
    let mut delays = READ_RETRY_DELAYS.iter();
    loop {
        let error = match read_range(bmc, url, start, end).await {
            Ok(read) => return Ok(Ok(read)),
            Err(error) => error,
        };
        let Some(delay) = delays.next() else {
            return Ok(Err(error));
        };
        bmc.machine().counters.media_read_retries += 1;
        bmc.shared.clock.sleep(*delay).await?;
        if !media_present(bmc, generation, slot, url)? {
            return Ok(Err(MEDIA_GONE.to_owned()));
        }
    }
}

/// What the installer reports when the media it reads from is ejected.
const MEDIA_GONE: &str = "I/O error: the media disappeared";

/// The part of partition 2 the installer reads for the seed.
fn seed_window(partition: &Range<u64>) -> Range<u64> {
    partition.start..partition.end.min(partition.start + SEED_READ_BYTES)
}

/// Copy the whole image (an Upload BMC's InsertMedia), keeping what the seed needs.
pub async fn upload(bmc: &Bmc, url: &str) -> Result<CachedCopy, String> {
    let (first, total) = read_range(bmc, url, 0, CHUNK - 1).await?;
    let total = total.unwrap_or(first.len() as u64);
    let head = first[..first.len().min(BOOT_READ as usize)].to_vec();
    let window = seed::partition2(&head).ok().map(|p| seed_window(&p));
    let mut seed_area = window.as_ref().map(|w| (w.start, Vec::new()));
    let mut keep = |offset: u64, bytes: &[u8]| {
        if let (Some(w), Some((_, area))) = (&window, &mut seed_area) {
            let from = w.start.max(offset);
            let to = w.end.min(offset + bytes.len() as u64);
            if from < to {
                area.extend_from_slice(&bytes[(from - offset) as usize..(to - offset) as usize]);
            }
        }
    };
    keep(0, &first);
    let mut offset = first.len() as u64;
    while offset < total {
        let (bytes, _) = read_range(bmc, url, offset, (offset + 4 * CHUNK).min(total) - 1).await?;
        if bytes.is_empty() {
            return Err(format!("reading {url}: empty range at {offset}"));
        }
        keep(offset, &bytes);
        offset += bytes.len() as u64;
    }
    Ok(CachedCopy {
        size: total,
        head,
        seed_area,
    })
}

/// What the firmware can boot at the end of POST: for each media slot, the class of device it presents its
/// image as ([`DeviceClass::of_slot`], from the profile's `MediaTypes` for the slot) when the head of the image
/// holds a GPT at LBA 1 of that class's block size, `None` otherwise (empty, unreadable, or made for the other
/// class). An override to `Hdd` reads nothing: the disk is booted whatever the media.
pub async fn bootable_media(bmc: &Bmc, generation: u64) -> Result<Vec<Option<DeviceClass>>, Halt> {
    let (slots, to_disk) = {
        let m = current(bmc, generation)?;
        let to_disk = m.boot_override.enabled != "Disabled" && m.boot_override.target == "Hdd";
        let slots: Vec<Option<(String, Option<CachedCopy>)>> = m
            .media
            .iter()
            .map(|s| {
                s.has_media()
                    .then(|| (s.image.clone().unwrap_or_default(), s.cached.clone()))
            })
            .collect();
        (slots, to_disk)
    };
    let mut out = vec![None; slots.len()];
    if to_disk {
        return Ok(out);
    }
    for (i, slot) in slots.into_iter().enumerate() {
        let Some((image, cached)) = slot else { continue };
        let types: Vec<&str> = bmc
            .profile
            .slots
            .iter()
            .filter(|s| s.state == i)
            .flat_map(|s| s.media_types.iter().copied())
            .collect();
        let Some(class) = DeviceClass::of_slot(&types, &image) else {
            continue;
        };
        let head = match (bmc.profile.media_read, cached) {
            (MediaRead::Upload, Some(copy)) => Some(copy.head),
            (MediaRead::Upload, None) => None,
            _ => read_media(bmc, generation, i, &image, 0, BOOT_READ - 1)
                .await?
                .ok()
                .map(|(head, _)| head),
        };
        let boots = head
            .and_then(|h| seed::read_gpt(&h).ok())
            .is_some_and(|gpt| gpt.sector_size == class.block_size());
        out[i] = boots.then_some(class);
    }
    Ok(out)
}

/// Is the media the installer booted from still there?
fn media_present(bmc: &Bmc, generation: u64, slot: usize, image: &str) -> Result<bool, Halt> {
    let m = current(bmc, generation)?;
    let s = &m.media[slot];
    Ok(s.has_media() && s.image.as_deref() == Some(image))
}

fn stay(bmc: &Bmc, generation: u64, phase: OsPhase) -> Result<AfterInstall, Halt> {
    current(bmc, generation)?.phase = phase;
    Ok(AfterInstall::Stay)
}

fn fail(bmc: &Bmc, generation: u64, why: String) -> Result<AfterInstall, Halt> {
    stay(bmc, generation, OsPhase::InstallFailed(why))
}

/// What the seed tells the installer to do.
enum Decision {
    Install(Box<Install>, SeedFiles),
    Live(String),
    Fail(String),
}

/// Decide from the bytes at the start of partition 2.
fn decide(partition: &[u8]) -> Decision {
    let files = match SeedFiles::from_partition(partition) {
        Ok(files) => files,
        Err(e @ SeedError::NoSeedData) => return Decision::Live(format!("{NO_INSTALL_SEED} ({e})")),
        Err(e) => return Decision::Fail(e.to_string()),
    };
    match files.install() {
        Ok(Some(install)) => Decision::Install(Box::new(install), files),
        Ok(None) => Decision::Live(NO_INSTALL_SEED.to_owned()),
        Err(e) => Decision::Fail(format!("reading the install seed: {e}")),
    }
}

/// The one disk of the simulated machine, as `/dev/disk/by-id` names it.
pub fn disk_id(bmc: &Bmc) -> String {
    format!("nvme-SIM_NVMe_{}", bmc.serial)
}

/// Run the installer booted from media slot `slot`.
pub async fn run(bmc: &Bmc, generation: u64, slot: usize) -> Result<AfterInstall, Halt> {
    let shared = bmc.shared.clone();
    let clock = &shared.clock;
    let install = shared.timings.install;
    let (image, cached) = {
        let mut m = current(bmc, generation)?;
        m.counters.installer_runs += 1;
        let s = &m.media[slot];
        (s.image.clone().unwrap_or_default(), s.cached.clone())
    };
    let mode = bmc.profile.media_read;
    // The boot read and the seed, from the BMC's copy or through the media URL.
    let (total, decision, media_version) = if mode == MediaRead::Upload {
        let Some(copy) = cached else {
            return fail(bmc, generation, "the media was not copied at insert".to_owned());
        };
        let gpt = seed::read_gpt(&copy.head);
        let version = gpt.as_ref().ok().and_then(|g| g.version.clone());
        let decision = match (
            gpt.and_then(|g| g.partition2.ok_or(seed::LocateError::NoPartition2)),
            copy.seed_area,
        ) {
            (Err(e), _) => Decision::Fail(e.to_string()),
            (Ok(_), None) => Decision::Fail("the copy holds no seed partition".to_owned()),
            (Ok(_), Some((_, area))) => decide(&area),
        };
        (copy.size, decision, version)
    } else {
        let (head, total) = match read_media(bmc, generation, slot, &image, 0, BOOT_READ - 1).await? {
            Ok((head, total)) => {
                let total = total.unwrap_or(head.len() as u64);
                (head, total)
            }
            Err(e) => return fail(bmc, generation, e),
        };
        if total > BOOT_READ
            && let Err(e) = read_media(
                bmc,
                generation,
                slot,
                &image,
                total.saturating_sub(BOOT_READ),
                total - 1,
            )
            .await?
        {
            return fail(bmc, generation, e);
        }
        let gpt = seed::read_gpt(&head);
        let version = gpt.as_ref().ok().and_then(|g| g.version.clone());
        let decision = match gpt.and_then(|g| g.partition2.ok_or(seed::LocateError::NoPartition2)) {
            Err(e) => Decision::Fail(e.to_string()),
            Ok(p) if p.start >= total => {
                Decision::Fail("partition 2 lies beyond the end of the media".to_owned())
            }
            Ok(p) => {
                let w = seed_window(&p);
                match read_media(bmc, generation, slot, &image, w.start, w.end.min(total) - 1).await? {
                    Ok((area, _)) => decide(&area),
                    Err(e) => return fail(bmc, generation, e),
                }
            }
        };
        (total, decision, version)
    };
    let (seed_install, files) = match decision {
        Decision::Install(install, files) => (*install, files),
        Decision::Live(why) => return stay(bmc, generation, OsPhase::LiveWithoutInstallSeed(why)),
        Decision::Fail(why) => return fail(bmc, generation, why),
    };
    let wiped = {
        let mut m = current(bmc, generation)?;
        m.install_seed = Some(seed_install.clone());
        if let Some(target) = &seed_install.target
            && !target.id.is_empty()
            && !disk_id(bmc).contains(&target.id)
        {
            m.phase = OsPhase::InstallFailed(format!(
                "unable to determine target device (detected devices: {})",
                disk_id(bmc)
            ));
            return Ok(AfterInstall::Stay);
        }
        if m.os.installed && !seed_install.force_install {
            // The disk already holds an installation: nothing to install to.
            m.phase = OsPhase::InstallerNoTarget;
            return Ok(AfterInstall::Stay);
        }
        // The installed root (made by systemd-repart at the first boot, with the machine-id) unlocks with this
        // media's keys only when it is the same version: then a reinstall is confirmed with that machine-id, or it
        // stops here. Before its first boot there is no root to unlock, and `force_install` alone overwrites.
        let same_version = m.os.installed
            && m.os.machine_id.is_some()
            && media_version.as_deref() == Some(m.os.running_version.as_str());
        if same_version {
            let expected: String =
                m.os.machine_id
                    .as_deref()
                    .unwrap_or_default()
                    .chars()
                    .take(6)
                    .collect();
            if seed_install.force_install_confirmation != expected {
                m.phase = OsPhase::InstallFailed(format!(
                    "IncusOS is already installed on this system; to confirm overwriting, add \
                     `ForceInstallConfirmation={expected}` to the install seed and reboot"
                ));
                return Ok(AfterInstall::Stay);
            }
            // "Wiping existing version of IncusOS, then rebooting in five seconds to run actual installation."
            m.os.wipe();
        }
        m.phase = OsPhase::Installing;
        same_version
    };
    if wiped {
        clock.sleep(WIPE_REBOOT_DELAY).await?;
        return Ok(AfterInstall::Reboot);
    }
    let mut idle = install;
    if mode != MediaRead::Upload {
        let window = if mode == MediaRead::StreamSpread {
            install
        } else {
            install.mul_f64(0.3)
        };
        idle = install.saturating_sub(window);
        let chunks = total.div_ceil(CHUNK).max(1);
        let step = window.div_f64(chunks as f64);
        for k in 0..chunks {
            if !media_present(bmc, generation, slot, &image)? {
                return fail(bmc, generation, MEDIA_GONE.to_owned());
            }
            let start = k * CHUNK;
            let end = ((k + 1) * CHUNK).min(total).saturating_sub(1);
            if start <= end
                && let Err(e) = read_media(bmc, generation, slot, &image, start, end).await?
            {
                return fail(bmc, generation, e);
            }
            clock.sleep(step).await?;
        }
    }
    // Having read the whole image up front, the installer works from memory: taking the media away now no longer
    // breaks it. Streamed through the install, or cached on the BMC, the media is still being read.
    let needs_media = mode != MediaRead::StreamFront;
    for _ in 0..IDLE_SLICES {
        clock.sleep(idle / IDLE_SLICES).await?;
        if needs_media && !media_present(bmc, generation, slot, &image)? {
            return fail(bmc, generation, MEDIA_GONE.to_owned());
        }
    }
    // Stage 1 done: a fresh system on the disk, with the seed minus its install file.
    {
        let mut m = current(bmc, generation)?;
        m.os.install_fresh(files.without_install(), media_version);
        if bmc.faults().halt_after_install {
            m.phase = OsPhase::Halted;
            return Ok(AfterInstall::Stay);
        }
        if !seed_install.force_reboot {
            m.phase = OsPhase::WaitingForEject;
        }
    }
    if seed_install.force_reboot {
        return Ok(AfterInstall::Reboot);
    }
    // "Please remove the install media": reboot once it is gone.
    loop {
        clock.sleep(shared.timings.post_stage).await?;
        let m = current(bmc, generation)?;
        if !m.media[slot].has_media() {
            return Ok(AfterInstall::Reboot);
        }
    }
}
