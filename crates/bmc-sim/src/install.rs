//! The IncusOS installer and the registration callback.
//!
//! The installer reads the attached media over HTTP with `Range` requests, the way the BMC
//! would pass the host's reads through: boot reads at the start and the end of the image, then
//! the bulk (early in the install for most BMCs, spread over the whole install for a
//! Lenovo-like one). An Upload BMC already copied the image at insert and reads nothing more.
//! At the end of stage 1 it reboots (seed with `force_reboot`) or waits for the media to be
//! ejected; the installed OS then calls the registration URL with its token.

use std::time::Duration;

use reqwest::header::{CONTENT_RANGE, RANGE};
use serde_json::json;

use crate::bmc::Bmc;
use crate::driver::{AfterInstall, Halt, current};
use crate::machine::OsPhase;
use crate::profile::MediaRead;

/// Size of one bulk read.
const CHUNK: u64 = 1 << 20;
/// Size of the boot reads at the start and the end of the image.
const BOOT_READ: u64 = 64 << 10;
/// Slices the idle part of an install is checked in (media removed while still read from breaks it).
const IDLE_SLICES: u32 = 10;

/// Read `[start, end]` of `url`. Returns the bytes received and the total size if known.
async fn read_range(bmc: &Bmc, url: &str, start: u64, end: u64) -> Result<(u64, Option<u64>), String> {
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
    Ok((len, total))
}

/// Copy the whole image (an Upload BMC's InsertMedia). Returns its size.
pub async fn upload(bmc: &Bmc, url: &str) -> Result<u64, String> {
    let (first, total) = read_range(bmc, url, 0, CHUNK - 1).await?;
    let total = total.unwrap_or(first);
    let mut offset = first;
    while offset < total {
        let (n, _) = read_range(bmc, url, offset, (offset + 4 * CHUNK).min(total) - 1).await?;
        if n == 0 {
            return Err(format!("reading {url}: empty range at {offset}"));
        }
        offset += n;
    }
    Ok(total)
}

/// The seed settings carried in the image URL query, if any.
fn from_query(image: &str, key: &str) -> Option<String> {
    let url = reqwest::Url::parse(image).ok()?;
    url.query_pairs()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// Is the media the installer booted from still there?
fn media_present(bmc: &Bmc, generation: u64, slot: usize, image: &str) -> Result<bool, Halt> {
    let m = current(bmc, generation)?;
    let s = &m.media[slot];
    Ok(s.has_media() && s.image.as_deref() == Some(image))
}

fn fail(bmc: &Bmc, generation: u64, why: String) -> Result<AfterInstall, Halt> {
    current(bmc, generation)?.phase = OsPhase::InstallFailed(why);
    Ok(AfterInstall::Stay)
}

/// Run the installer booted from media slot `slot`.
pub async fn run(bmc: &Bmc, generation: u64, slot: usize) -> Result<AfterInstall, Halt> {
    let shared = bmc.shared.clone();
    let clock = &shared.clock;
    let install = shared.timings.install;
    let (image, cached) = {
        let mut m = current(bmc, generation)?;
        m.counters.installer_runs += 1;
        if m.os.installed {
            // A second boot of the installer finds no install target and idles.
            m.phase = OsPhase::InstallerNoTarget;
            return Ok(AfterInstall::Stay);
        }
        m.phase = OsPhase::Installing;
        let s = &m.media[slot];
        (s.image.clone().unwrap_or_default(), s.cached_bytes)
    };
    let mode = bmc.profile.media_read;
    let mut idle = install;
    if mode == MediaRead::Upload {
        if cached == 0 {
            return fail(bmc, generation, "the media was not copied at insert".to_owned());
        }
    } else {
        let total = match read_range(bmc, &image, 0, BOOT_READ - 1).await {
            Ok((n, total)) => total.unwrap_or(n),
            Err(e) => return fail(bmc, generation, e),
        };
        if total > BOOT_READ
            && let Err(e) = read_range(bmc, &image, total.saturating_sub(BOOT_READ), total - 1).await
        {
            return fail(bmc, generation, e);
        }
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
                return fail(bmc, generation, "I/O error: the media disappeared".to_owned());
            }
            let start = k * CHUNK;
            let end = ((k + 1) * CHUNK).min(total).saturating_sub(1);
            if start <= end
                && let Err(e) = read_range(bmc, &image, start, end).await
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
            return fail(bmc, generation, "I/O error: the media disappeared".to_owned());
        }
    }
    // Stage 1 done.
    let force_reboot = {
        let mut m = current(bmc, generation)?;
        m.os.installed = true;
        if m.install.token.is_none() {
            m.install.token = from_query(&image, "token");
        }
        if m.install.registration_url.is_none() {
            m.install.registration_url = from_query(&image, "registration_url");
        }
        let from_url = from_query(&image, "force_reboot").is_none_or(|v| v != "false" && v != "0");
        let force = m.install.force_reboot.unwrap_or(from_url);
        if bmc.faults().halt_after_install {
            m.phase = OsPhase::Halted;
            return Ok(AfterInstall::Stay);
        }
        if !force {
            m.phase = OsPhase::WaitingForEject;
        }
        force
    };
    if force_reboot {
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

/// The installed OS registers itself with its token, retrying a few times.
pub async fn register(bmc: &Bmc, generation: u64) -> Result<(), Halt> {
    let shared = bmc.shared.clone();
    shared.clock.sleep(shared.timings.registration_delay).await?;
    let (url, token) = {
        let m = current(bmc, generation)?;
        if m.os.registered {
            return Ok(());
        }
        let url = m
            .install
            .registration_url
            .clone()
            .or_else(|| shared.registration_url.clone());
        (url, m.install.token.clone().unwrap_or_default())
    };
    let Some(url) = url else { return Ok(()) };
    let Ok(mut target) = reqwest::Url::parse(&url) else {
        return Ok(());
    };
    target.query_pairs_mut().append_pair("token", &token);
    let body = json!({
        "name": bmc.name,
        "serial": bmc.serial,
        "uuid": bmc.uuid,
        "token": token,
        "incus_url": format!("{}/incus/{}", shared.base_url, bmc.name),
    });
    for _ in 0..5 {
        current(bmc, generation)?.counters.registration_attempts += 1;
        let ok = shared
            .http
            .post(target.clone())
            .json(&body)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ok {
            current(bmc, generation)?.os.registered = true;
            return Ok(());
        }
        shared.clock.sleep(Duration::from_secs(10)).await?;
    }
    Ok(())
}
