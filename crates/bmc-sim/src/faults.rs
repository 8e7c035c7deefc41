//! Fault injection, set per server through `PUT /control/servers/<name>/faults` or
//! [`crate::SimHandle::set_faults`]. Request-level faults hit the Redfish request before it is
//! routed; behaviour faults change what the machine or a resource does.

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
    /// Staged BIOS values are dropped at the reset instead of applied.
    pub drop_bios_apply: bool,
    /// Stage 1 ends without the reboot (and without waiting for an eject).
    pub halt_after_install: bool,
    /// Hide `BootProgress`.
    pub no_boot_progress: bool,
    /// Hide `LastResetTime`.
    pub no_last_reset_time: bool,
    /// Boot-override changes answer 400 while the machine is in POST.
    pub refuse_override_during_post: bool,
    /// Session creation answers 503 RAC0218 once this many sessions are open.
    pub session_limit: Option<u32>,
    /// Mutations carrying `If-Match` (other than `*`) answer 412: the BMC rejects its own ETags.
    pub reject_if_match: bool,
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
}
