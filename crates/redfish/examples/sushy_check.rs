//! Drives the client against a running sushy-tools emulator (fake driver) and exits non-zero
//! on the first failed expectation. Run by `ops/sushy-test`, which starts the emulator and an
//! image server:
//!
//! ```text
//! cargo run -p racklift-redfish --example sushy_check -- <sushy-url> <image-url>
//! ```

use std::time::{Duration, Instant};

use racklift_redfish::{
    BmcClient, BmcConfig, BootSourceOverrideEnabled, BootSourceOverrideTarget, Credentials, Fence,
    PowerState, TlsMode,
};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn ensure(cond: bool, what: impl std::fmt::Display) -> Res<()> {
    if cond {
        println!("ok   {what}");
        Ok(())
    } else {
        Err(format!("FAIL {what}").into())
    }
}

/// Polls `read` until `want` holds; the emulator lands power changes after 1–11 s.
async fn wait_power(client: &BmcClient, want: PowerState, limit: Duration) -> Res<()> {
    let started = Instant::now();
    loop {
        let state = client.read_system().await?.power_state;
        if state.as_ref() == Some(&want) {
            return ensure(
                true,
                format!("power state {want} after {} ms", started.elapsed().as_millis()),
            );
        }
        if started.elapsed() > limit {
            return ensure(
                false,
                format!("power state {want} within {limit:?} (last: {state:?})"),
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn run(url: &str, image: &str) -> Res<()> {
    let mut config = BmcConfig::new(
        "sushy",
        url,
        Credentials::new("admin", "password"),
        TlsMode::InsecureNoVerify,
    );
    config.call_deadline = Duration::from_secs(60);
    let client = BmcClient::new(config)?.with_fence(Fence(1));

    let system = client.read_system().await?;
    ensure(
        system.power_state.is_some(),
        format!("read system {} (power {:?})", system.id, system.power_state),
    )?;
    ensure(
        system.last_reset_time.is_none(),
        "sushy reports no LastResetTime (read as unknown)",
    )?;

    let allowed = client.allowed_reset_types().await?;
    println!("info reset types advertised: {allowed:?}");

    // Power: off, on, and the "already there" short cut.
    client.power_off().await?;
    wait_power(&client, PowerState::Off, Duration::from_secs(30)).await?;
    let again = client.power_off().await?;
    ensure(
        again == racklift_redfish::PowerOutcome::AlreadyThere,
        "power off again sends nothing",
    )?;
    client.power_on().await?;
    wait_power(&client, PowerState::On, Duration::from_secs(30)).await?;
    let restart = client.force_restart().await?;
    println!("info restart sent as {}", restart.reset_type);
    wait_power(&client, PowerState::On, Duration::from_secs(30)).await?;

    // Boot override: Once preferred; sushy reports Continuous whatever it was given.
    let outcome = client
        .set_boot_override(BootSourceOverrideTarget::Cd, None)
        .await?;
    println!(
        "info boot override accepted {} (reported {:?})",
        outcome.accepted, outcome.reported
    );
    ensure(
        matches!(
            outcome.accepted,
            BootSourceOverrideEnabled::Once | BootSourceOverrideEnabled::Continuous
        ),
        "boot override accepted",
    )?;
    let boot = client.read_boot().await?;
    ensure(
        boot.target == Some(BootSourceOverrideTarget::Cd),
        format!("boot target reads Cd ({:?})", boot.target),
    )?;
    ensure(
        client.clear_boot_override(BootSourceOverrideTarget::Cd).await?,
        "boot override cleared",
    )?;
    let boot = client.read_boot().await?;
    ensure(
        boot.enabled == Some(BootSourceOverrideEnabled::Disabled)
            || boot.target == Some(BootSourceOverrideTarget::None),
        format!(
            "override disabled after clear ({:?}/{:?})",
            boot.enabled, boot.target
        ),
    )?;

    // Virtual media: pick, clear, insert (sushy downloads the image), read back, eject.
    let slot = client.select_cd_slot().await?;
    println!("info selected slot {} ({})", slot.slot, slot.media.odata_id);
    let ejected = client.eject_media(&slot.slot).await?;
    println!("info pre-clear eject: {ejected:?}");
    ensure(
        !client.read_media(&slot.slot).await?.has_media(),
        "slot empty before insert",
    )?;
    let inserted = client
        .with_deadline(Duration::from_secs(120))
        .insert_media(&slot.slot, image)
        .await?;
    println!("info inserted via {:?}", inserted.method);
    let media = client.read_media(&slot.slot).await?;
    ensure(
        media.holds(image),
        format!(
            "slot holds the image (Inserted {:?}, Image {:?})",
            media.inserted, media.image
        ),
    )?;
    println!("info TransferMethod {:?}", media.transfer_method);
    let again = client.insert_media(&slot.slot, image).await?;
    ensure(
        again.method == racklift_redfish::InsertMethod::AlreadyInserted,
        "insert again is a no-op",
    )?;
    let ejected = client.eject_media(&slot.slot).await?;
    println!("info ejected via {ejected:?}");
    ensure(
        !client.read_media(&slot.slot).await?.has_media(),
        "slot empty after eject",
    )?;
    let ejected = client.eject_media(&slot.slot).await?;
    println!("info second eject: {ejected:?} (nothing inserted is success)");

    // BIOS: the fake driver has none (no `Bios` link), which must read as unsupported.
    match client.read_bios().await {
        Err(e) if e.class() == racklift_redfish::ErrorClass::Unsupported => {
            println!("info no BIOS resource on this emulator driver ({e})");
        }
        Err(e) => return Err(e.into()),
        Ok(bios) => {
            ensure(
                !bios.attributes.is_empty(),
                format!("BIOS read ({} attributes)", bios.attributes.len()),
            )?;
            if let Some((name, _)) = bios.attributes.iter().find(|(_, v)| v.is_string()) {
                let mut staged = serde_json::Map::new();
                staged.insert(name.clone(), serde_json::json!("RackliftStaged"));
                let stage = client.stage_bios_attributes(staged).await?;
                println!("info staged {name} to {}", stage.written_to);
                let pending = client.pending_bios_attributes().await?;
                ensure(pending.contains_key(name), format!("{name} pending"))?;
            }
        }
    }

    // Mutations without a fencing token never leave the client.
    let unfenced = BmcClient::new(BmcConfig::new(
        "sushy",
        url,
        Credentials::new("admin", "password"),
        TlsMode::InsecureNoVerify,
    ))?;
    // The system is on (checked above), so this would send ForceOff.
    let err = unfenced.power_off().await;
    ensure(
        matches!(err, Err(racklift_redfish::Error::NoFence)),
        format!("unfenced mutation refused ({err:?})"),
    )?;
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(url), Some(image)) = (args.next(), args.next()) else {
        eprintln!("usage: sushy_check <sushy-url> <image-url>");
        std::process::exit(2);
    };
    match run(&url, &image).await {
        Ok(()) => println!("sushy_check: all checks passed"),
        Err(e) => {
            let mut msg = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                msg.push_str(&format!(": {s}"));
                source = s.source();
            }
            eprintln!("sushy_check: {msg}");
            std::process::exit(1);
        }
    }
}
