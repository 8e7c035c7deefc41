-- Install media in both formats IncusOS publishes, and the boot target chosen for each deployment's media.
--
-- IncusOS's `.img` is a GPT disk with 512-byte sectors, booted from a USB stick; its `.iso` is the same disk
-- recreated with 2048-byte sectors (`scripts/convert-img-to-iso.sh`), booted from a CD drive. An image records
-- which one its partition table was found with: `disk` (512 or 4096) or `cd` (2048). Images registered before
-- were read at 512 or 4096 bytes only, so they are disks.
ALTER TABLE images
    ADD COLUMN format text NOT NULL DEFAULT 'disk' CHECK (format IN ('disk', 'cd'));

-- The Redfish `BootSourceOverrideTarget` the deployment's media boots with (`Cd` for a CD image in a CD/DVD
-- slot, `Usb` for a disk image in a USBStick slot), chosen at pre-flight with the slot in `media_slot`, so a
-- restarted worker boots the same way. Null for deployments made before: they booted `Cd`.
ALTER TABLE deployments
    ADD COLUMN boot_target text CHECK (boot_target IN ('Cd', 'Usb'));
