//! What a client is built from: the server's name and address, racklift's client identity, how the server's
//! certificate is trusted, the deadlines, the polite retry bounds and the per-server limiter.

use std::fmt;
use std::time::Duration;

use crate::limiter::ServerLimiter;
use crate::tls::{ClientIdentity, ServerTrust};

/// Header carrying the caller's fencing token on every mutation.
pub const FENCE_HEADER: &str = "x-racklift-fence";

/// A fencing token from the job queue. Tokens only grow; a mutation carries the token of the lease it is made
/// under, so the simulator (and audits) can spot a stale worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(pub i64);

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Bounds for the polite retries of single idempotent calls (GETs). Not durable retries: a second or so to ride
/// over a restarting daemon or a dropped connection, always inside the call's deadline.
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

/// Everything needed to talk to one IncusOS server.
#[derive(Clone, Debug)]
pub struct IncusConfig {
    /// The server's name: the key of the per-server limiter and the `server` tracing field.
    pub server: String,
    /// The server's `connection_url`, `https://host:port`. Any path is ignored: Incus serves from the root.
    pub base_url: String,
    /// Refuse `http://` unless this is set (a local simulator without TLS); an `http://` URL sends no client
    /// certificate and checks no pin.
    pub allow_plain_http: bool,
    /// racklift's client certificate and key, presented on every connection (mutual TLS).
    pub identity: ClientIdentity,
    /// How the server's certificate is trusted: its pin, first use, or not at all.
    pub trust: ServerTrust,
    /// Deadline of one call, waiting for the server's slot, connections and retries included.
    pub call_deadline: Duration,
    /// TCP + TLS connect timeout of one attempt.
    pub connect_timeout: Duration,
    /// In-process retries of GETs. POSTs are never retried by the client.
    pub retry: RetryPolicy,
    /// The per-server limiter registry ([`ServerLimiter::global`] unless a test wants its own).
    pub limiter: ServerLimiter,
}

impl IncusConfig {
    /// A configuration with the defaults: https only, 30 s call deadline, 10 s connect, polite retries, the
    /// global limiter.
    pub fn new(
        server: impl Into<String>,
        base_url: impl Into<String>,
        identity: ClientIdentity,
        trust: ServerTrust,
    ) -> Self {
        Self {
            server: server.into(),
            base_url: base_url.into(),
            allow_plain_http: false,
            identity,
            trust,
            call_deadline: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            retry: RetryPolicy::POLITE,
            limiter: ServerLimiter::global().clone(),
        }
    }
}
