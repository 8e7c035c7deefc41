//! racklift's Redfish client: typed operations against one BMC over hyper + rustls.
//!
//! What it owns: the Redfish wire protocol and its vendor fallbacks (reset types via
//! ActionInfo, Once → Continuous boot override, InsertMedia → OEM → PATCH, settings objects,
//! key databases, task monitors), TLS verification and pinning, the per-BMC one-call limit
//! (a call's slot held until its connection is closed, see `transport`),
//! the per-call deadline and error classification.
//!
//! What it deliberately does not do: retry durably (the job queue does, with backoff as a
//! future `run_at`), decide deployment transitions (crates/deploy), or hold sessions (Basic
//! auth on every request, so a crashed worker leaks nothing).
//!
//! Every request carries the caller's fencing token in [`FENCE_HEADER`]; a mutation without
//! a token fails with [`Error::NoFence`] before anything is sent.

mod bios;
mod boot;
mod client;
mod config;
#[doc(hidden)]
pub mod decode_paths;
mod discovery;
mod error;
mod limiter;
mod media;
mod model;
mod reply;
mod secret;
mod secure_boot;
mod system;
mod task;
mod tls;
mod transport;

pub use bios::{
    AttributeEntry, AttributeProblem, AttributeRegistry, AttributeType, AttributeValue, Bios, StageOutcome,
    rejected_attributes,
};
pub use boot::{
    BootOverrideOutcome, BootSettings, BootSourceOverrideEnabled, BootSourceOverrideMode,
    BootSourceOverrideTarget,
};
pub use client::{BmcClient, BmcConfig, FENCE_HEADER, Fence, RetryPolicy};
pub use error::{Error, ErrorClass, ExtendedInfo, Result, message_suffix};
pub use limiter::HostLimiter;
pub use media::{
    EjectMethod, ImageKind, InsertMethod, InsertOutcome, MediaSlot, MediaType, SlotChoice, SlotExpectation,
    SlotOwner, SlotReadBack, SlotRef, SlotRefusal, TransferMethod, VirtualMedia, choose_slot,
};
pub use model::{ActionInfo, ActionParameter, ActionRef, Link, SettingsInfo};
pub use secret::{Credentials, Secret};
pub use secure_boot::{
    KeyCertificate, KeyDatabase, KeyDatabaseAccess, KeySignature, ListedDatabase, ResetKeysType, SecureBoot,
    SecureBootMode,
};
pub use system::{
    BootProgress, BootProgressState, PowerOutcome, PowerState, ResetOutcome, ResetType, SystemInfo,
};
pub use task::{TaskMonitor, TaskPoll, TaskState};
pub use tls::{Pin, TlsMode};
