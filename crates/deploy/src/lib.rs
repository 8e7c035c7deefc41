//! The deployment state machine as pure code.
//!
//! This crate decides; it never acts. A worker hands it the persisted [`Deployment`], the
//! [`Facts`] it just observed and the time, and gets back a [`Step`]: the machine to persist (in
//! one fenced write) and the [`Decision`] to execute. Keeping I/O and the clock out is what lets
//! every rule be tested exhaustively and replayed deterministically, and what lets any stateless
//! worker pick a deployment up after a crash: the decision depends on nothing it could have lost.
//!
//! - [`table`]: the state table the dispatcher and the documentation diagram both come from.
//! - [`decide()`], [`apply_outcome`], [`run_until_blocked`]: the dispatcher.
//! - [`ranges`]: distinct-bytes media read progress.
//! - [`rolling`]: the rolling update / reboot table.
//! - [`mermaid`]: the diagrams generated from the tables.
//! - [`triage`]: where a failed deployment may be resumed, and how overdue a live one is.
//! - [`profile_match`]: which BIOS profiles apply to a server, from its record and its BMC's reports.
//! - [`certificates`], [`secure_boot`]: the shipped secure boot certificates, and judging the key
//!   databases against them.
//!
//! A worker's lease, in outline (observation, persistence and the BMC call are the worker's):
//!
//! ```
//! use chrono::{TimeZone, Utc};
//! use racklift_deploy::{Config, Decision, Deployment, Facts, Jitter, Outcome, Plan, apply_outcome, decide};
//!
//! let cfg = Config::default();
//! let now = Utc.timestamp_opt(1_800_000_000, 0).unwrap();
//! let mut d = Deployment::new(Plan::default(), now);
//! for _ in 0..cfg.max_transitions_per_tick {
//!     let facts = Facts::default(); // observe: BMC reads + database, unknown where a read failed
//!     let step = decide(&d, &facts, now, &cfg);
//!     d.machine = step.machine; // persist if step.changed, fenced on the old seq
//!     match step.decision {
//!         Decision::Act { action: _, call_deadline_secs: _ } => {
//!             let outcome = Outcome::Succeeded; // issue the action under its call deadline
//!             let step = apply_outcome(&d, &outcome, now, &cfg, Jitter::new(0.5));
//!             d.machine = step.machine; // persist; on Decision::Retry { at } reschedule the job
//!         }
//!         Decision::Continue => continue,
//!         Decision::Snooze { .. } | Decision::Retry { .. } | Decision::Finished(_) => break,
//!     }
//! }
//! assert_eq!(d.machine.state, racklift_deploy::State::CheckBIOS);
//! ```

pub mod bios;
pub mod certificates;
pub mod config;
mod decide;
pub mod decision;
pub mod eject;
pub mod explain;
pub mod facts;
mod install;
pub mod mermaid;
pub mod profile_match;
pub mod ranges;
pub mod reboot;
pub mod record;
pub mod rolling;
pub mod rolling_run;
pub mod rolling_window;
pub mod secure_boot;
pub mod table;
pub mod triage;

pub use config::Config;
pub use decide::{apply_outcome, decide, run_until_blocked};
pub use decision::{Action, Cause, Decision, Failure, Jitter, Outcome, Step, Terminal, Transition};
pub use facts::Facts;
pub use record::{Deployment, Machine, Plan};
pub use table::State;
pub use triage::{ResumeError, resume_at};

/// Points in time are arguments, never read from a clock inside this crate.
pub type Time = chrono::DateTime<chrono::Utc>;

/// A configuration value that would make the state machine stall or never time out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("{field} must be greater than zero")]
    Zero { field: &'static str },
    #[error("retry backoff cap ({cap_secs} s) is below its base ({base_secs} s)")]
    BackoffCapBelowBase { base_secs: u64, cap_secs: u64 },
    #[error("media progress needs at least 2 ranges to coalesce, got {ranges}")]
    TooFewRanges { ranges: usize },
    #[error(
        "missed_eject_grace_secs ({grace_secs} s) must be below registration_timeout_secs ({registration_secs} s)"
    )]
    GraceNotBelowRegistration { grace_secs: u64, registration_secs: u64 },
}

/// A state name that is not in the table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown state {name:?}")]
pub struct UnknownState {
    pub name: String,
}
