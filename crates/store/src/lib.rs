//! Every SQL statement outside the queue. The API and the workers see typed records and typed errors; the SQL
//! lives here so a schema change is one crate's business.
//!
//! Writes that a lease holder makes are fenced: a deployment's machine is written only if its `seq` is still
//! the one the worker read, and a server's BMC fence only moves forward. Each checks `rows_affected`.

mod bmc_actions;
mod catalog;
mod clusters;
mod deployments;
mod error;
mod events;
mod identity;
mod install_config;
mod media;
mod registration;
pub mod rfc3339;
mod servers;
mod triage;
mod ui_sessions;
mod updates;

pub use bmc_actions::{BMC_ACTION_KIND, BmcAction, BmcActionPayload, bmc_action_request_key};
pub use catalog::{
    ApiToken, ApiTokenInfo, BiosProfile, Image, ImageFile, ImageFormat, NewBiosProfile, NewImage, NewSeed,
    NewToken, PUBLIC_ADDRESS, ProvisioningToken, Role, Seed,
};
pub use clusters::{
    Cluster, ClusterOperation, ClusterStep, EndpointTrust, IncusEndpoint, NewCluster, OperationControl,
    OperationStatus, RestoreMode, RunUpdate,
};
pub use deployments::{DeploymentRecord, DeploymentStep, NewDeployment, STEP_KIND, queue_error, step_job};
pub use error::StoreError;
pub use events::Event;
pub use identity::{CLIENT_IDENTITY_NAME, ClientIdentity};
pub use media::{ApiFacts, MediaRead, MediaTarget};
pub use registration::{
    ExpectedName, Registered, RegistrationRefused, RegistrationRequest, Repin, SelfUpdate,
    registration_name_accepted,
};
pub use servers::{NewServer, Server, ServerStatus, ServerUpdate, advance_fence};
pub use triage::actions::{Canceled, Retried, TriageError};
pub use triage::bulk::{BulkRetry, Skipped};
pub use triage::{
    Cursor, DeadLetter, DeadLetterDetail, DeadLetterFilter, DeadLetterGroup, DeadLetterPage,
    DeadLetterSummary, LiveJob, StateDuration, StateSpan, StuckDeployment, TriageAction, TriageStatus,
    redact, redact_text,
};
pub use ui_sessions::NewUiSession;
pub use updates::{NewUpdate, Update, UpdateFile};

use sqlx::PgPool;

/// The store: a pool and the statements.
#[derive(Clone, Debug)]
pub struct Store {
    pool: PgPool,
}

impl Store {
    pub fn new(pool: PgPool) -> Store {
        Store { pool }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// Lower-case hex SHA-256, for API token digests.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(data);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A random URL-safe secret of 32 bytes (256 bits), for media URLs and API tokens.
pub fn new_secret() -> String {
    use rand::Rng;
    let bytes: [u8; 32] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
