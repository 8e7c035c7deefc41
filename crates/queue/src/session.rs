//! How racklift's database sessions are opened: every pool of every process (the API's, the workers', the
//! heartbeats', the rescuer's) is built from [`pool_options`] and [`connect_options`], so each session carries
//! the same bounds and none is missed.
//!
//! The bounds are startup parameters (`options=-c …`), so they hold from a session's first statement and survive
//! anything a transaction does. They keep a session that is cut off from its client (a network partition, a
//! frozen proxy, a stopped process) from holding its row locks past the lease that made them matter: see
//! ARCHITECTURE.md, invariant 27.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

/// Server-side limits on one session, chosen against the queue's lease time to live ([`SessionBounds::for_lease`]).
/// Derived rather than configured: each is only right in proportion to the lease, so `queue.lease_ttl_ms` moves
/// them all together and no setting can leave one behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionBounds {
    /// `idle_in_transaction_session_timeout`: a session that sits inside a transaction without sending anything
    /// this long is ended by the server, and its locks go with it. racklift never waits on anything but
    /// PostgreSQL inside a transaction (invariant 4), so only a holder that is cut off or stopped gets here.
    pub idle_in_transaction: Duration,
    /// `lock_timeout`: the longest one statement waits for a lock.
    pub lock: Duration,
    /// `statement_timeout`: the longest one statement runs, lock waits included.
    pub statement: Duration,
    /// `tcp_keepalives_idle`: silence on the server's socket before it probes the client.
    pub keepalive_idle: Duration,
    /// `tcp_keepalives_interval`: spacing of the unanswered probes.
    pub keepalive_interval: Duration,
    /// `tcp_keepalives_count`: unanswered probes before the server drops the connection.
    pub keepalive_count: u32,
    /// `tcp_user_timeout`: how long data the server sent may stay unacknowledged before it drops the connection.
    pub tcp_user_timeout: Duration,
}

impl SessionBounds {
    /// The bounds for a queue whose leases last `ttl` (heartbeats every third of it; a holder that cannot renew
    /// lets go a fifth of it, at most 3 s, before the lease runs out).
    ///
    /// - idle in transaction: a third of the lease (at least 5 s, so a busy machine that leaves a task unscheduled
    ///   for a moment mid-transaction does not lose its session), one renewal period. A lock taken under a live
    ///   lease by a holder that is then cut off is released at most that long after the lease runs out, instead
    ///   of when TCP gives up (hours): the rescuer's `SKIP LOCKED` finds the job on its next pass.
    /// - lock wait: half the lease (at least 8 s), longer than the idle bound, so a writer queued behind a
    ///   cut-off holder outlasts it and gets the row instead of failing; a wait beyond it has no healthy cause.
    /// - statement: the whole lease (at least 15 s), longer than the lock wait it includes. No statement of
    ///   racklift's takes near that; migrations, which may, lift it on their own connection.
    /// - keepalives: probed after a third of the lease of silence, every ninth, three times, and sent data
    ///   unacknowledged as long: a client that vanished from an idle session (a `LISTEN`, a pooled connection)
    ///   frees its connection slot about two thirds of a lease later instead of after about 2 h 11 min.
    ///   Keepalives are whole seconds.
    pub fn for_lease(ttl: Duration) -> SessionBounds {
        let at_least = |d: Duration, floor: Duration| d.max(floor);
        let whole_secs = |d: Duration| Duration::from_secs(d.as_secs_f64().ceil().max(1.0) as u64);
        let keepalive_idle = whole_secs(ttl / 3);
        let keepalive_interval = whole_secs(ttl / 9);
        let keepalive_count = 3;
        SessionBounds {
            idle_in_transaction: at_least(ttl / 3, Duration::from_secs(5)),
            lock: at_least(ttl / 2, Duration::from_secs(8)),
            statement: at_least(ttl, Duration::from_secs(15)),
            keepalive_idle,
            keepalive_interval,
            keepalive_count,
            tcp_user_timeout: keepalive_idle + keepalive_interval * keepalive_count,
        }
    }

    /// `options` with these bounds added to its startup parameters.
    pub fn apply(&self, options: PgConnectOptions) -> PgConnectOptions {
        options.options(self.parameters())
    }

    /// The startup parameters that set these bounds. Timeouts are in milliseconds, keepalives in seconds
    /// (PostgreSQL's units for each setting when none is given).
    pub fn parameters(&self) -> [(&'static str, u128); 7] {
        [
            (
                "idle_in_transaction_session_timeout",
                self.idle_in_transaction.as_millis(),
            ),
            ("lock_timeout", self.lock.as_millis()),
            ("statement_timeout", self.statement.as_millis()),
            ("tcp_keepalives_idle", u128::from(self.keepalive_idle.as_secs())),
            (
                "tcp_keepalives_interval",
                u128::from(self.keepalive_interval.as_secs()),
            ),
            ("tcp_keepalives_count", u128::from(self.keepalive_count)),
            ("tcp_user_timeout", self.tcp_user_timeout.as_millis()),
        ]
    }
}

/// The connection options for `url` with `bounds` as startup parameters (after any the URL's `options` names).
///
/// sqlx opens its sockets itself and exposes no keepalive on the client's side. The client does not need one:
/// a lease holder keeps its own lease clock and lets go before the lease runs out whatever its statements are
/// doing (invariant 3), an API request has its deadline, and a session the client abandons is ended by the
/// server through these bounds.
pub fn connect_options(url: &str, bounds: &SessionBounds) -> Result<PgConnectOptions, sqlx::Error> {
    Ok(bounds.apply(PgConnectOptions::from_str(url)?))
}

/// The pool options every racklift pool starts from. Pair them with [`connect_options`] (`connect_with`).
///
/// A connection is refused when the server is a standby in recovery, so a pool only ever holds connections that
/// can write: behind a proxy that briefly routes to a standby during a failover, the pool keeps trying (up to
/// its acquire timeout) instead of handing out a connection on which every write would fail. A primary cannot
/// turn into a standby without a restart, which closes its connections, so checking once per connection is
/// enough.
///
/// A connection whose holder was dropped inside `begin()` goes back to the pool rolled back: sqlx-postgres
/// 0.9.1 counts the transaction before `BEGIN`'s round trip, so the drop guard queues the `ROLLBACK` that 0.9.0
/// skipped (launchbadge/sqlx#4393). `tests/failures/partition.rs` of this crate holds that.
pub fn pool_options() -> PgPoolOptions {
    PgPoolOptions::new().after_connect(|conn, _meta| {
        Box::pin(async move {
            let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
                .fetch_one(&mut *conn)
                .await?;
            if in_recovery {
                return Err(sqlx::Error::Protocol(
                    "the server is a standby in recovery; racklift writes, so it connects only to a primary"
                        .into(),
                ));
            }
            Ok(())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_follow_the_lease_in_order() {
        for ms in [300, 600, 3_000, 5_000, 10_000, 30_000, 120_000] {
            let ttl = Duration::from_millis(ms);
            let b = SessionBounds::for_lease(ttl);
            assert!(b.idle_in_transaction < b.lock, "{ms}: {b:?}");
            assert!(b.lock < b.statement, "{ms}: {b:?}");
            assert!(b.keepalive_idle >= Duration::from_secs(1), "{ms}: {b:?}");
            assert_eq!(
                b.tcp_user_timeout,
                b.keepalive_idle + b.keepalive_interval * b.keepalive_count
            );
        }
        let default = SessionBounds::for_lease(Duration::from_secs(30));
        assert_eq!(default.idle_in_transaction, Duration::from_secs(10));
        assert_eq!(default.lock, Duration::from_secs(15));
        assert_eq!(default.statement, Duration::from_secs(30));
        assert_eq!(default.tcp_user_timeout, Duration::from_secs(10 + 3 * 4));
    }

    #[test]
    fn bounds_are_startup_parameters() {
        let b = SessionBounds::for_lease(Duration::from_secs(30));
        let options =
            connect_options("postgres://u:p@localhost/db?options=-c%20search_path%3Dx", &b).unwrap();
        let text = options.get_options().unwrap_or_default().to_owned();
        for (name, value) in b.parameters() {
            assert!(text.contains(&format!("-c {name}={value}")), "{text}");
        }
        assert!(text.starts_with("-c search_path=x"), "{text}");
    }
}
