//! Fault injection, set per server through `PUT /control/servers/<name>/faults` or
//! [`crate::SimHandle::set_faults`]. Request-level faults hit the Redfish request before it is
//! routed; behaviour faults change what the machine or a resource does. The Incus side has its own
//! request-level fields (`incus_*`), so that a test can break one API without the other, and its own
//! behaviour faults for the cluster operations.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The fault set of one server. Every field defaults to "off".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    // --- request level ---
    /// Accept the connection and never answer.
    pub hang: bool,
    /// Answer with this status (5xx) and a `GeneralError` body.
    pub status: Option<u16>,
    /// Answer 503 with the iDRAC `RAC0218` "maximum number of user sessions" message.
    pub busy: bool,
    /// Close the connection without an answer.
    pub reset_connection: bool,
    /// Delay every answer by this many milliseconds (real time, not scaled).
    pub slow_ms: u64,
    /// Request-level faults hit only POST/PATCH/PUT/DELETE.
    pub only_mutations: bool,
    /// Request-level faults hit only GETs.
    pub only_gets: bool,
    /// Request-level faults hit this many requests, then clear themselves.
    pub remaining: Option<u32>,
    // --- behaviour ---
    /// Accept power-offs (204) and do nothing.
    pub ignore_power_off: bool,
    /// As `ignore_power_off`, for this many power-offs only: each one that finds the server on and is
    /// accepted without effect counts down, and power-offs act again at zero (a BMC dropping a command).
    pub ignore_next_power_offs: u32,
    /// Power-on answers 409 `ActionParameterValueConflict` within the window after a power-off.
    pub power_on_conflict: bool,
    /// Task monitors answer 404 from the start.
    pub forget_task_monitors: bool,
    /// InsertMedia fails with this iDRAC message (`SYS446` or `RAC0904`).
    pub insert_error: Option<String>,
    /// Inserts (InsertMedia, the OEM action or a PATCH) are answered 204 and dropped: the slot keeps reading
    /// `Inserted: false` and no `Image`, as a PowerEdge R670's iDRAC does in dell/terraform-provider-redfish#331
    /// (InsertMedia answered 204 No Content, the CD slot read back empty).
    pub drop_insert: bool,
    /// Staged BIOS values are dropped at the reset instead of applied.
    pub drop_bios_apply: bool,
    /// Stage 1 ends without the reboot (and without waiting for an eject).
    pub halt_after_install: bool,
    /// The next eject of a running server's media is answered (204) but lands only once the server has booted
    /// from that media again, as when an eject reaches the BMC after the POST of the reboot that ends install
    /// stage 1: the slot reads inserted until then. Clears itself with that eject.
    pub late_eject: bool,
    /// Hide `BootProgress`.
    pub no_boot_progress: bool,
    /// No Bios resource: the System links none and its paths answer 404, as on some of DMTF's mockups and
    /// sushy-tools' fake driver.
    pub no_bios: bool,
    /// Hide `LastResetTime`.
    pub no_last_reset_time: bool,
    /// More members of `Systems` after the server's own, as on BMCs that list a DPU (`SystemType: DPU`) or a
    /// baseboard System beside the host (NVIDIA GH200/GB200 boards, DPU-carrying servers). They answer GET only.
    pub extra_systems: Vec<ExtraSystem>,
    /// Boot-override changes answer 400 while the machine is in POST.
    pub refuse_override_during_post: bool,
    /// Session creation answers 503 RAC0218 once this many sessions are open.
    pub session_limit: Option<u32>,
    /// Mutations carrying `If-Match` (other than `*`) answer 412: the BMC rejects its own ETags.
    pub reject_if_match: bool,
    /// Reads carry their ETag only as the body's `@odata.etag`, not in the `ETag` header (the Redfish
    /// specification requires the header only on ManagerAccount reads).
    pub etag_header_absent: bool,
    /// The next N writes carrying `If-Match` race another client's write: every tag of the BMC moves on between
    /// the read the tag came from and the write, so the write answers 412 and a fresh read shows a new tag.
    pub foreign_writes: u32,
    // --- Incus API, request level (after the TLS handshake, before authorization) ---
    /// The Incus API accepts the request and never answers.
    pub incus_hang: bool,
    /// The Incus API answers with this status (5xx) in the Incus error envelope.
    pub incus_status: Option<u16>,
    /// The Incus API closes the connection without an answer.
    pub incus_reset: bool,
    /// The Incus request faults hit this many requests, then clear themselves.
    pub incus_remaining: Option<u32>,
    // --- Incus, behaviour ---
    /// An evacuation's operation stays `Running` (the member evacuating) until a restore or a reboot ends it.
    pub evacuate_hangs: bool,
    /// An evacuation's operation ends `Failure` and the member is back `Online` (Incus reverts the state).
    pub evacuate_fails: bool,
    /// A restore's operation ends `Failure` and the member stays `Evacuated` (Incus reverts the state).
    pub restore_fails: bool,
    /// After `POST /os/1.0/system/:reboot` the machine goes down and halts in firmware at every boot while this
    /// is set: the OS never comes up again.
    pub reboot_never_returns: bool,
    /// The member's network is gone while the machine runs: every member reports it `Offline` and its own Incus
    /// port closes connections at once.
    pub member_offline: bool,
}

/// A ComputerSystem of [`Faults::extra_systems`], served at `/redfish/v1/Systems/<id>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtraSystem {
    /// Its `Id` and last URI segment, such as `Bluefield_0` or `HGX_Baseboard_0`.
    pub id: String,
    /// Its `SystemType`: `DPU`, `Physical`, `Virtual`, `OS`…
    pub system_type: String,
}

/// What an Incus request-level fault does to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncusFault {
    Hang,
    Reset,
    Status(u16),
}

/// What a request-level fault does to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestFault {
    Hang,
    Reset,
    Status(u16),
    Busy,
}

impl Faults {
    /// Whether this power-off of a running server is to be dropped, spending one of
    /// `ignore_next_power_offs` if so.
    pub fn take_ignored_power_off(&mut self) -> bool {
        if self.ignore_next_power_offs == 0 {
            return false;
        }
        self.ignore_next_power_offs -= 1;
        true
    }

    /// The request-level fault for this request (spending one of `remaining`), plus the delay.
    pub fn take_request_fault(&mut self, is_mutation: bool) -> (Option<Duration>, Option<RequestFault>) {
        let slow = (self.slow_ms > 0).then(|| Duration::from_millis(self.slow_ms));
        let fault = if self.hang {
            Some(RequestFault::Hang)
        } else if self.reset_connection {
            Some(RequestFault::Reset)
        } else if self.busy {
            Some(RequestFault::Busy)
        } else {
            self.status.map(RequestFault::Status)
        };
        if fault.is_none() && slow.is_none() {
            return (None, None);
        }
        if (self.only_mutations && !is_mutation) || (self.only_gets && is_mutation) {
            return (None, None);
        }
        if let Some(n) = self.remaining.as_mut() {
            if *n == 0 {
                return (None, None);
            }
            *n -= 1;
            if *n == 0 {
                self.hang = false;
                self.reset_connection = false;
                self.busy = false;
                self.status = None;
                self.slow_ms = 0;
                self.remaining = None;
            }
        }
        (slow, fault)
    }

    /// The Incus request-level fault for this request, spending one of `incus_remaining`.
    pub fn take_incus_fault(&mut self) -> Option<IncusFault> {
        let fault = if self.incus_hang {
            IncusFault::Hang
        } else if self.incus_reset {
            IncusFault::Reset
        } else {
            IncusFault::Status(self.incus_status?)
        };
        if let Some(n) = self.incus_remaining.as_mut() {
            if *n == 0 {
                return None;
            }
            *n -= 1;
            if *n == 0 {
                self.incus_hang = false;
                self.incus_reset = false;
                self.incus_status = None;
                self.incus_remaining = None;
            }
        }
        Some(fault)
    }
}
