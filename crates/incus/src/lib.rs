//! racklift's client for one IncusOS server's Incus API, used by the workers that run rolling reboots and
//! updates of clusters.
//!
//! What it owns: the Incus envelope (sync, async operations, errors), typed views of cluster members,
//! operations, OS versions, update state and applications; mutual TLS with racklift's client certificate and the
//! server's self-signed certificate trusted by pin or on first use; the per-call deadline; polite retries of
//! GETs; one call in flight per server; error classification.
//!
//! What it deliberately does not do: retry POSTs (an evacuation or a reboot sent twice is the caller's decision),
//! retry durably (the job queue does), poll operations to completion (the caller waits in persisted steps), or
//! decide anything about a rolling update.
//!
//! Mutations carry the caller's fencing token in [`FENCE_HEADER`] when the handle has one
//! ([`IncusClient::with_fence`]), so the simulator and audits can spot a stale worker.

mod api;
mod client;
mod config;
mod error;
mod limiter;
mod model;
mod tls;
mod transport;

pub use client::IncusClient;
pub use config::{FENCE_HEADER, Fence, IncusConfig, RetryPolicy};
pub use error::{BoxError, Error, ErrorClass, Result};
pub use limiter::ServerLimiter;
pub use model::{
    ApplicationState, Cluster, ClusterMember, MemberStatus, Operation, OperationRef, OperationStatus,
    OsEnvironment, OsInfo, ServerEnvironment, ServerInfo, UpdateInfo, UpdateState,
};
pub use tls::{CertPin, ClientIdentity, ServerTrust};
