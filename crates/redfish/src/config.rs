//! What a client is built from: the BMC's address, credentials and TLS mode, the per-call deadline, the polite
//! retry bounds, and the fencing token that marks every mutation.

use std::fmt;
use std::time::Duration;

use crate::limiter::HostLimiter;
use crate::secret::Credentials;
use crate::tls::TlsMode;

/// Header carrying the caller's fencing token on every request.
pub const FENCE_HEADER: &str = "X-Racklift-Fence";

/// A fencing token from the job queue. Tokens only grow; a BMC mutation carries the token of
/// the lease it is made under, so the simulator (and audits) can spot a stale worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(pub i64);

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Bounds for the polite retries of single idempotent calls. These are not durable retries:
/// a few hundred milliseconds to smooth over a busy BMC, nothing more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 disables them).
    pub max_retries: usize,
    /// First delay; doubles per retry, with jitter.
    pub min_delay: Duration,
    /// Cap on a single delay.
    pub max_delay: Duration,
}

impl RetryPolicy {
    /// Two retries, 200 ms then about 400 ms, with jitter.
    pub const POLITE: Self = Self {
        max_retries: 2,
        min_delay: Duration::from_millis(200),
        max_delay: Duration::from_secs(2),
    };
    /// No in-process retries.
    pub const NONE: Self = Self {
        max_retries: 0,
        min_delay: Duration::ZERO,
        max_delay: Duration::ZERO,
    };
}

/// Everything needed to talk to one BMC.
#[derive(Clone, Debug)]
pub struct BmcConfig {
    /// Name of the server, for the `server` tracing field and errors.
    pub server: String,
    /// `https://host[:port]` (a path prefix is kept, for simulators serving many BMCs).
    pub base_url: String,
    /// Basic-auth credentials.
    pub credentials: Credentials,
    /// Certificate verification.
    pub tls: TlsMode,
    /// Deadline of one operation, all requests and retries included (the reference's 2 min).
    pub call_deadline: Duration,
    /// TCP + TLS connect timeout.
    pub connect_timeout: Duration,
    /// In-process retries of idempotent requests.
    pub retry: RetryPolicy,
    /// The per-BMC limiter registry ([`HostLimiter::global`] unless a test wants its own).
    pub limiter: HostLimiter,
    /// The ComputerSystem to manage, for BMCs that list several (a DPU or a baseboard beside the host): its `Id`
    /// or URI, which must be a member of `Systems`. Without it, the only member, else the only member that could
    /// be the host (`SystemType` absent or `Physical`), else [`crate::Error::AmbiguousSystem`].
    pub system_path: Option<String>,
    /// The BMC's vendor as the operator described it (the server's vendor hint), for the `vendor` label of the
    /// client's metrics: error rates and latency differ by firmware far more than by server. `unknown` when
    /// absent.
    pub vendor: Option<String>,
}

impl BmcConfig {
    /// A configuration with the reference defaults: 2 min call deadline, 30 s connect,
    /// polite retries, the global limiter, the System chosen by discovery.
    pub fn new(
        server: impl Into<String>,
        base_url: impl Into<String>,
        credentials: Credentials,
        tls: TlsMode,
    ) -> Self {
        Self {
            server: server.into(),
            base_url: base_url.into(),
            credentials,
            tls,
            call_deadline: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(30),
            retry: RetryPolicy::POLITE,
            limiter: HostLimiter::global().clone(),
            system_path: None,
            vendor: None,
        }
    }
}
