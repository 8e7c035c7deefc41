//! The IncusOS installer booted from virtual media.
//!
//! The installer reads the attached media over HTTP with `Range` requests, the way the BMC would pass the host's
//! reads through: boot reads at the start and the end of the image, then the bulk (early in the install for most
//! BMCs, spread over the whole install for a Lenovo-like one). An Upload BMC copied the image at insert and
//! reads nothing more; it keeps from its copy what the installer needs to find the seed ([`CachedCopy`]).
//!
//! What it does is decided by the seed, read as IncusOS reads it (`incus-osd/internal/seed`,
//! `internal/install`): the GPT from the boot read gives partition 2, the start of partition 2 is read through
//! the same media URL and holds the seed's tar archive ([`crate::seed`]).
//!
//! - No seed data or no `install` file: the live image runs and never installs
//!   ([`OsPhase::LiveWithoutInstallSeed`]); IncusOS reports "unable to begin install without seed
//!   configuration" on read-only media and waits.
//! - No partition 2, an unreadable archive or an `install` file that does not decode: the install fails with
//!   the reason ([`OsPhase::InstallFailed`]).
//! - Otherwise it installs to the machine's one disk (`target.id` must match it; a disk already installed needs
//!   `force_install`), copies the seed without `install.*` onto it, and at the end of stage 1 reboots
//!   (`force_reboot`) or waits for the media to be ejected.
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
use crate::machine::OsPhase;
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
    let (total, decision) = if mode == MediaRead::Upload {
        let Some(copy) = cached else {
            return fail(bmc, generation, "the media was not copied at insert".to_owned());
        };
        let decision = match (seed::partition2(&copy.head), copy.seed_area) {
            (Err(e), _) => Decision::Fail(e.to_string()),
            (Ok(_), None) => Decision::Fail("the copy holds no seed partition".to_owned()),
            (Ok(_), Some((_, area))) => decide(&area),
        };
        (copy.size, decision)
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
        let decision = match seed::partition2(&head) {
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
        (total, decision)
    };
    let (seed_install, files) = match decision {
        Decision::Install(install, files) => (*install, files),
        Decision::Live(why) => return stay(bmc, generation, OsPhase::LiveWithoutInstallSeed(why)),
        Decision::Fail(why) => return fail(bmc, generation, why),
    };
    {
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
        m.phase = OsPhase::Installing;
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
        m.os.install_fresh(files.without_install());
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
