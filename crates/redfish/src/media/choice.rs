//! Which virtual media slot an image goes into, and the boot override that boots it: a pure decision from the
//! image's kind, the slots' `MediaTypes` and the targets the BMC lists.
//!
//! A CD image (GPT with 2048-byte sectors) boots only from a drive that presents 2048-byte blocks, a CD/DVD
//! drive, and the override that boots it is `Cd`; a disk image (512-byte sectors) boots only from a drive with
//! 512-byte blocks, a USB stick, with `Usb` (Redfish `VirtualMedia.MediaType`: `CD`, `DVD`, `USBStick`;
//! `ComputerSystem.BootSource`: `Cd` "boot from the CD or DVD", `Usb` "boot from a system BIOS-specified USB
//! device"). A slot offering both is the BMC's to present either way; it is listed as suitable for both.

use super::{MediaSlot, MediaType, SlotRef};
use crate::boot::BootSourceOverrideTarget;

/// What kind of drive an image needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    /// Boots from a CD/DVD drive (2048-byte logical blocks).
    Cd,
    /// Boots from a USB stick (512-byte logical blocks).
    Disk,
}

impl ImageKind {
    /// The media type a slot must list, in words for a refusal.
    pub fn needs(self) -> &'static str {
        match self {
            ImageKind::Cd => "CD or DVD",
            ImageKind::Disk => "USBStick",
        }
    }

    /// The boot override that boots this kind of image from its slot.
    pub fn boot_target(self) -> BootSourceOverrideTarget {
        match self {
            ImageKind::Cd => BootSourceOverrideTarget::Cd,
            ImageKind::Disk => BootSourceOverrideTarget::Usb,
        }
    }

    /// Whether a slot listing `types` can present this kind of image.
    pub fn fits(self, types: &[MediaType]) -> bool {
        types.iter().any(|t| match self {
            ImageKind::Cd => matches!(t, MediaType::CD | MediaType::DVD),
            ImageKind::Disk => matches!(t, MediaType::USBStick),
        })
    }
}

/// The slot chosen and how to boot it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotChoice {
    pub slot: SlotRef,
    pub target: BootSourceOverrideTarget,
}

/// Why no slot can boot the image.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SlotRefusal {
    #[error("the BMC reports no virtual media device")]
    NoSlots,
    #[error("the BMC has no virtual media device {device:?}; it has {}", describe(.available))]
    NotFound {
        device: String,
        available: Vec<(String, Vec<String>)>,
    },
    #[error(
        "virtual media device {device:?} takes {}, and this image needs {needs}",
        types_text(.media_types)
    )]
    Unsuitable {
        device: String,
        media_types: Vec<String>,
        needs: &'static str,
    },
    #[error("no virtual media device of the BMC takes {needs}, which this image needs; it has {}", describe(.available))]
    NoneSuitable {
        needs: &'static str,
        available: Vec<(String, Vec<String>)>,
    },
    #[error("the BMC does not offer boot target {target} (it lists {})", .allowed.join(", "))]
    TargetNotOffered {
        target: BootSourceOverrideTarget,
        allowed: Vec<String>,
    },
}

fn types_text(types: &[String]) -> String {
    if types.is_empty() {
        "no media types".to_owned()
    } else {
        types.join(", ")
    }
}

fn describe(slots: &[(String, Vec<String>)]) -> String {
    if slots.is_empty() {
        return "none".to_owned();
    }
    slots
        .iter()
        .map(|(name, types)| format!("{name} ({})", types_text(types)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn listing(slots: &[MediaSlot]) -> Vec<(String, Vec<String>)> {
    slots
        .iter()
        .map(|s| {
            (
                s.slot.to_string(),
                s.media
                    .media_types
                    .iter()
                    .map(|t| t.as_str().to_owned())
                    .collect(),
            )
        })
        .collect()
}

/// Chooses the slot for an image of `kind` among `slots` (in the BMC's order, the System's first) and the boot
/// target that boots it. `device` names a slot (`system:CD1`, or its bare `Id`): it is taken if it fits and
/// refused otherwise; without it, the first slot that fits. `allowed_targets` is the BMC's
/// `BootSourceOverrideTarget@Redfish.AllowableValues`, when it lists one: a target it does not list cannot
/// boot the media.
pub fn choose_slot(
    kind: ImageKind,
    slots: &[MediaSlot],
    device: Option<&str>,
    allowed_targets: Option<&[String]>,
) -> Result<SlotChoice, SlotRefusal> {
    if slots.is_empty() {
        return Err(SlotRefusal::NoSlots);
    }
    let chosen = match device {
        Some(device) => {
            let slot = slots
                .iter()
                .find(|s| s.slot.id == device || s.slot.to_string() == device)
                .ok_or_else(|| SlotRefusal::NotFound {
                    device: device.to_owned(),
                    available: listing(slots),
                })?;
            if !kind.fits(&slot.media.media_types) {
                return Err(SlotRefusal::Unsuitable {
                    device: device.to_owned(),
                    media_types: slot
                        .media
                        .media_types
                        .iter()
                        .map(|t| t.as_str().to_owned())
                        .collect(),
                    needs: kind.needs(),
                });
            }
            slot
        }
        None => slots
            .iter()
            .find(|s| kind.fits(&s.media.media_types))
            .ok_or_else(|| SlotRefusal::NoneSuitable {
                needs: kind.needs(),
                available: listing(slots),
            })?,
    };
    let target = kind.boot_target();
    if let Some(allowed) = allowed_targets
        && !allowed.iter().any(|a| a == target.as_str())
    {
        return Err(SlotRefusal::TargetNotOffered {
            target,
            allowed: allowed.to_vec(),
        });
    }
    Ok(SlotChoice {
        slot: chosen.slot.clone(),
        target,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::{SlotOwner, VirtualMedia};

    fn slot(owner: SlotOwner, id: &str, types: &[&str]) -> MediaSlot {
        MediaSlot {
            slot: SlotRef {
                owner,
                id: id.to_owned(),
            },
            media: VirtualMedia {
                id: id.to_owned(),
                media_types: types.iter().map(|t| MediaType::from(*t)).collect(),
                ..VirtualMedia::default()
            },
        }
    }

    /// The slots of the captured BMCs (`MediaTypes` as they list them).
    fn dell() -> Vec<MediaSlot> {
        vec![
            slot(SlotOwner::System, "1", &["CD", "DVD", "USBStick"]),
            slot(SlotOwner::Manager, "CD", &["CD", "DVD"]),
            slot(SlotOwner::Manager, "RemovableDisk", &["USBStick"]),
        ]
    }
    fn hpe() -> Vec<MediaSlot> {
        vec![
            slot(SlotOwner::Manager, "1", &["Floppy", "USBStick"]),
            slot(SlotOwner::Manager, "2", &["CD", "DVD"]),
        ]
    }
    fn cd_only() -> Vec<MediaSlot> {
        vec![slot(SlotOwner::System, "CD1", &["CD", "DVD"])]
    }
    fn usb_only() -> Vec<MediaSlot> {
        vec![slot(SlotOwner::Manager, "USB1", &["USBStick"])]
    }

    #[test]
    fn the_slot_and_boot_target_follow_the_image_kind() {
        use BootSourceOverrideTarget as T;
        use ImageKind::{Cd, Disk};
        let all: Vec<String> = ["None", "Cd", "Usb", "Hdd"].map(String::from).to_vec();
        let no_usb: Vec<String> = ["None", "Pxe", "Floppy", "Cd", "Hdd"].map(String::from).to_vec();
        type Want = Result<(&'static str, T), &'static str>;
        /// (name, image kind, slots, named device, listed targets, wanted slot and target or refusal text)
        type Case<'a> = (
            &'a str,
            ImageKind,
            Vec<MediaSlot>,
            Option<&'a str>,
            Option<&'a [String]>,
            Want,
        );
        let cases: Vec<Case> = vec![
            (
                "iso, CD slot",
                Cd,
                cd_only(),
                None,
                Some(&all),
                Ok(("system:CD1", T::Cd)),
            ),
            (
                "img, USB slot",
                Disk,
                usb_only(),
                None,
                Some(&all),
                Ok(("manager:USB1", T::Usb)),
            ),
            (
                "iso, HPE: the CD slot after the USB one",
                Cd,
                hpe(),
                None,
                None,
                Ok(("manager:2", T::Cd)),
            ),
            (
                "img, HPE: the Floppy/USBStick slot",
                Disk,
                hpe(),
                None,
                None,
                Ok(("manager:1", T::Usb)),
            ),
            (
                "iso, Dell: the first, which takes CDs",
                Cd,
                dell(),
                None,
                None,
                Ok(("system:1", T::Cd)),
            ),
            (
                "img, Dell named device",
                Disk,
                dell(),
                Some("RemovableDisk"),
                None,
                Ok(("manager:RemovableDisk", T::Usb)),
            ),
            (
                "img, only a CD slot",
                Disk,
                cd_only(),
                None,
                Some(&all),
                Err("no virtual media device"),
            ),
            (
                "iso, only a USB slot",
                Cd,
                usb_only(),
                None,
                None,
                Err("takes CD or DVD"),
            ),
            (
                "iso into a named USB slot",
                Cd,
                dell(),
                Some("RemovableDisk"),
                None,
                Err("takes USBStick"),
            ),
            (
                "img into a named CD slot",
                Disk,
                dell(),
                Some("manager:CD"),
                None,
                Err("takes CD, DVD"),
            ),
            (
                "unknown device",
                Cd,
                dell(),
                Some("EXT9"),
                None,
                Err("no virtual media device \"EXT9\""),
            ),
            (
                "img, Usb not offered",
                Disk,
                dell(),
                None,
                Some(&no_usb),
                Err("boot target Usb"),
            ),
            ("no slots", Cd, vec![], None, None, Err("no virtual media device")),
        ];
        for (name, kind, slots, device, allowed, want) in cases {
            let got = choose_slot(kind, &slots, device, allowed);
            match (got, want) {
                (Ok(choice), Ok((slot, target))) => {
                    assert_eq!(choice.slot.to_string(), slot, "{name}");
                    assert_eq!(choice.target, target, "{name}");
                }
                (Err(e), Err(text)) => assert!(e.to_string().contains(text), "{name}: {e}"),
                (got, want) => panic!("{name}: got {got:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn a_refusal_lists_the_slots_the_bmc_has() {
        let e = choose_slot(ImageKind::Disk, &cd_only(), None, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no virtual media device of the BMC takes USBStick, which this image needs; it has system:CD1 (CD, DVD)"
        );
    }
}
