//! The timed side of a machine: power transitions, the POST walk through `BootProgress`, boot
//! device selection, and handing over to the installer or the installed OS.
//!
//! Every power change bumps `Machine::boot_gen` and spawns a task for the new generation; a task
//! re-checks the generation each time it takes the lock after a sleep and stops when it is stale.

use std::sync::Arc;

use crate::bmc::Bmc;
use crate::clock::Stopped;
use crate::machine::{BootDevice, Machine, OsPhase, POST_STATES, Power};
use crate::{install, os};

/// Why a boot task stopped early.
pub enum Halt {
    /// A newer power change superseded this boot.
    Superseded,
    /// The simulator is shutting down.
    Stopped,
}

impl From<Stopped> for Halt {
    fn from(_: Stopped) -> Halt {
        Halt::Stopped
    }
}

/// What the installer asks for when it ends.
pub enum AfterInstall {
    Reboot,
    Stay,
}

/// Lock the machine if `gen` is still current.
pub fn current<'a>(bmc: &'a Bmc, generation: u64) -> Result<std::sync::MutexGuard<'a, Machine>, Halt> {
    let m = bmc.machine();
    if m.boot_gen == generation {
        Ok(m)
    } else {
        Err(Halt::Superseded)
    }
}

/// Start powering on (from Off or PoweringOff).
pub fn power_on(bmc: &Arc<Bmc>, m: &mut Machine) {
    m.boot_gen += 1;
    m.power = Power::PoweringOn;
    let generation = m.boot_gen;
    let bmc = bmc.clone();
    tokio::spawn(async move {
        let _ = boot(&bmc, generation, true).await;
    });
}

/// Start powering off: running boots and installers stop at once.
pub fn power_off(bmc: &Arc<Bmc>, m: &mut Machine) {
    m.boot_gen += 1;
    m.power = Power::PoweringOff;
    m.phase = OsPhase::Down;
    m.land_pending_ejects();
    m.os.interrupted(bmc.shared.clock.now());
    m.boot_state = "None";
    let generation = m.boot_gen;
    let bmc = bmc.clone();
    tokio::spawn(async move {
        let shared = bmc.shared.clone();
        if shared.clock.sleep(shared.timings.power_off).await.is_err() {
            return;
        }
        if let Ok(mut m) = current(&bmc, generation) {
            m.power = Power::Off;
            m.powered_off_at = Some(std::time::Instant::now());
        }
    });
}

/// A warm reset (or a power-on when off).
pub fn restart(bmc: &Arc<Bmc>, m: &mut Machine) {
    if matches!(m.power, Power::Off | Power::PoweringOff) {
        return power_on(bmc, m);
    }
    m.boot_gen += 1;
    m.power = Power::On;
    // The reset takes the running OS down at once (its Incus port closes connections from now on).
    m.phase = OsPhase::Down;
    m.os.interrupted(bmc.shared.clock.now());
    let generation = m.boot_gen;
    let bmc = bmc.clone();
    tokio::spawn(async move {
        let _ = boot(&bmc, generation, false).await;
    });
}

/// Power on (optionally), then boot until the OS runs, the installer idles or nothing boots.
/// Each loop iteration is one reset: firmware self-reboots and installer reboots loop here.
async fn boot(bmc: &Arc<Bmc>, generation: u64, powering_on: bool) -> Result<(), Halt> {
    let shared = bmc.shared.clone();
    let clock = &shared.clock;
    let t = &shared.timings;
    if powering_on {
        clock.sleep(t.power_on).await?;
        current(bmc, generation)?.power = Power::On;
    }
    loop {
        let (self_reboot, task) = {
            let mut m = current(bmc, generation)?;
            let drop_bios = bmc.faults().drop_bios_apply;
            let task = m.on_reset(clock.now(), drop_bios);
            let self_reboot =
                std::mem::take(&mut m.secure_boot.keys_changed) && bmc.profile.secure_boot_self_reboot;
            (self_reboot, task)
        };
        if let Some(task) = task {
            bmc.tasks().mark_done(task, clock.now());
        }
        let mut rebooted = false;
        for (i, state) in POST_STATES.iter().enumerate().skip(1) {
            clock.sleep(t.post_stage).await?;
            current(bmc, generation)?.set_boot_state(state, clock.now());
            if self_reboot && i == 2 {
                // The firmware enrolls the new keys and resets itself.
                rebooted = true;
                break;
            }
        }
        if rebooted {
            continue;
        }
        clock.sleep(t.post_stage).await?;
        {
            let m = current(bmc, generation)?;
            if m.firmware_halt && bmc.faults().reboot_never_returns {
                // Hangs at the end of POST: no boot, no OS, until the fault is cleared and it is reset.
                return Ok(());
            }
        }
        // The firmware looks at each inserted image for a GPT it can boot from that device.
        let bootable = install::bootable_media(bmc, generation).await?;
        let device = {
            let mut m = current(bmc, generation)?;
            let now = clock.now();
            m.set_boot_state("OSBootStarted", now);
            if let Some(start) = m.boot_started {
                m.last_boot_seconds = Some((now - start).num_milliseconds() as f64 / 1000.0);
            }
            let device = m.select_boot_device(&bootable);
            if device == BootDevice::Nothing {
                m.phase = OsPhase::NoBootDevice;
            }
            device
        };
        match device {
            BootDevice::Nothing => return Ok(()),
            BootDevice::Media(slot) => {
                let after = install::run(bmc, generation, slot).await?;
                // An eject held back by the BMC lands once the media has been booted, a little later still.
                let held = current(bmc, generation)?.media.iter().any(|s| s.eject_pending);
                if held {
                    clock.sleep(t.post_stage * 2).await?;
                    current(bmc, generation)?.land_pending_ejects();
                }
                match after {
                    AfterInstall::Reboot => continue,
                    AfterInstall::Stay => return Ok(()),
                }
            }
            BootDevice::Disk => {
                current(bmc, generation)?.phase = OsPhase::OsBooting;
                clock.sleep(t.os_boot).await?;
                current(bmc, generation)?.set_boot_state("OSRunning", clock.now());
                os::start(bmc, generation).await?;
                return Ok(());
            }
        }
    }
}
