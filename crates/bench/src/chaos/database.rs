//! The run's PostgreSQL: a server given by `DATABASE_URL` when no fault touches the database, otherwise one the
//! run owns so it can stop, start and fail it over: a single embedded server, or (with promotions) a primary with
//! a synchronous standby behind an HAProxy TCP proxy, which clients reach instead of either server so they
//! follow the primary after a promotion.
//!
//! HAProxy's TCP check cannot tell a standby from a primary: with the primary down alone it hands clients the
//! standby (refusing every write, "read-only transaction"), and keeps those connections there once the primary
//! is back, as nothing marks the standby down. A restart of PostgreSQL while the standby still streams therefore
//! stops the standby too, after the primary, and starts it again after the primary: clients see the database
//! gone for the outage, as they would a restart behind a failover manager that routes to the primary only.
//!
//! The methods here block (they run `pg_ctl`); callers run them on a blocking-capable thread.

use std::path::Path;
use std::time::{Duration, Instant};

use racklift_pgembed::haproxy::{HaProxy, Upstream};
use racklift_pgembed::{EmbeddedPostgres, ReplicatedPostgres};

use super::ChaosError;

/// Where the run's database server comes from.
#[derive(Debug, Clone)]
pub enum DatabaseChoice {
    /// An existing server (its admin URL): nothing may stop it, so the run injects no database fault.
    External { admin_url: String },
    /// A server of the run's own, under the run's directory (a primary and a standby with promotions).
    Own,
}

/// The run's database server, and what the run may do to it.
pub struct ChaosDb {
    kind: Kind,
}

enum Kind {
    External {
        admin_url: String,
    },
    Single {
        pg: EmbeddedPostgres,
    },
    Replicated {
        /// Dropped first: nothing may reach a server through it while they stop.
        proxy: HaProxy,
        /// Boxed: the pair is far larger than the other kinds.
        pg: Box<ReplicatedPostgres>,
        /// The standby was promoted and runs alone; the old primary stays down.
        promoted: bool,
        admin_url: String,
    },
}

/// Servers' names in the proxy's configuration and stats.
const PRIMARY: &str = "primary";
const STANDBY: &str = "standby";
/// How long the standby may take to stream synchronously again after a restart.
const STREAMING: Duration = Duration::from_secs(60);

impl ChaosDb {
    /// Starts the server the run needs: `replicated` for a run with promotions.
    pub fn start(choice: &DatabaseChoice, replicated: bool, dir: &Path) -> Result<ChaosDb, ChaosError> {
        let kind = match (choice, replicated) {
            (DatabaseChoice::External { admin_url }, false) => Kind::External {
                admin_url: admin_url.clone(),
            },
            (DatabaseChoice::External { .. }, true) => {
                return Err(ChaosError::Settings(
                    "a promotion needs the run's own primary and standby, not DATABASE_URL".into(),
                ));
            }
            (DatabaseChoice::Own, false) => Kind::Single {
                pg: EmbeddedPostgres::start(dir)?,
            },
            (DatabaseChoice::Own, true) => {
                let pg = Box::new(ReplicatedPostgres::start()?);
                let proxy = HaProxy::start(&[
                    Upstream {
                        name: PRIMARY,
                        port: pg.primary().port(),
                        backup: false,
                    },
                    Upstream {
                        name: STANDBY,
                        port: pg.standby().port(),
                        backup: true,
                    },
                ])?;
                let admin_url = proxy.url_for(&pg.primary().admin_url(), pg.primary().port())?;
                Kind::Replicated {
                    proxy,
                    pg,
                    promoted: false,
                    admin_url,
                }
            }
        };
        Ok(ChaosDb { kind })
    }

    /// The admin URL clients use (through the proxy when there is one).
    pub fn admin_url(&self) -> String {
        match &self.kind {
            Kind::External { admin_url } | Kind::Replicated { admin_url, .. } => admin_url.clone(),
            Kind::Single { pg } => pg.admin_url(),
        }
    }

    /// Whether the server is `DATABASE_URL`'s rather than the run's own.
    pub fn is_external(&self) -> bool {
        matches!(self.kind, Kind::External { .. })
    }

    /// What the run runs against, for the report.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::External { .. } => "DATABASE_URL".into(),
            Kind::Single { pg } => format!("embedded PostgreSQL on port {}", pg.port()),
            Kind::Replicated { proxy, promoted, .. } => format!(
                "PostgreSQL primary and synchronous standby behind HAProxy on port {}{}",
                proxy.port(),
                if *promoted { " (standby promoted)" } else { "" }
            ),
        }
    }

    /// Stops the primary (fast shutdown: connections end, committed data is kept), and a standby still streaming
    /// from it after it (see the module's documentation).
    pub fn stop_primary(&mut self) -> Result<(), ChaosError> {
        match &self.kind {
            Kind::External { .. } => Err(external()),
            Kind::Single { pg } => Ok(pg.stop()?),
            Kind::Replicated {
                pg, promoted: true, ..
            } => Ok(pg.standby().stop()?),
            Kind::Replicated { pg, .. } => {
                pg.primary().stop()?;
                Ok(pg.standby().stop()?)
            }
        }
    }

    /// Starts what [`ChaosDb::stop_primary`] stopped, on the same ports with the same options (`pg_ctl restart`
    /// of a stopped server starts it from its recorded options): the primary, and once the proxy sends clients
    /// to it again, the standby.
    pub fn start_primary(&mut self) -> Result<(), ChaosError> {
        match &self.kind {
            Kind::External { .. } => Err(external()),
            Kind::Single { pg } => Ok(pg.restart()?),
            Kind::Replicated {
                pg, promoted: true, ..
            } => Ok(pg.standby().restart()?),
            Kind::Replicated { pg, proxy, .. } => {
                pg.primary().restart()?;
                let deadline = Instant::now() + Duration::from_secs(10);
                while !proxy.status_of(PRIMARY).starts_with("UP") && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Ok(pg.standby().restart()?)
            }
        }
    }

    /// Returns once a restarted standby streams synchronously again, so a later promotion loses nothing.
    pub fn settle(&self) -> Result<(), ChaosError> {
        match &self.kind {
            Kind::Replicated {
                pg, promoted: false, ..
            } => Ok(pg.wait_streaming(STREAMING)?),
            _ => Ok(()),
        }
    }

    /// Kills the primary as a host crash would and promotes the standby, after `detect` (the time a failover
    /// manager takes to decide). Until the promotion the proxy hands clients the standby, in recovery.
    pub fn fail_over(&mut self, detect: Duration) -> Result<(), ChaosError> {
        match &mut self.kind {
            Kind::Replicated {
                pg,
                promoted: promoted @ false,
                ..
            } => {
                pg.wait_streaming(STREAMING)?;
                pg.kill_primary()?;
                std::thread::sleep(detect);
                pg.promote()?;
                *promoted = true;
                Ok(())
            }
            _ => Err(ChaosError::Settings("this run has no standby to promote".into())),
        }
    }
}

impl Drop for ChaosDb {
    /// Stops the run's own server: an embedded PostgreSQL outlives its handle otherwise.
    fn drop(&mut self) {
        if let Kind::Single { pg } = &self.kind
            && let Err(error) = pg.stop()
        {
            tracing::warn!(error = %error, "stopping the run's PostgreSQL");
        }
    }
}

fn external() -> ChaosError {
    ChaosError::Settings("the run does not own DATABASE_URL's server and cannot stop it".into())
}
