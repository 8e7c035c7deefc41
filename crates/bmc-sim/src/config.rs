//! Simulator configuration: how many servers, which vendor personalities, credentials and the
//! nominal machine timings that the time scale compresses.

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The vendor behaviour a simulated BMC reproduces (see `reference/redfish.md` §9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Personality {
    /// DMTF `public-rackmount1`-like: everything standard and present.
    Generic,
    /// iDRAC9-like: media on the System and the Manager, the whole image copied at insert while
    /// `TransferMethod` reads null, BIOS jobs as task monitors, no `BootProgress`.
    Dell,
    /// iLO5-like: media under the Manager only (plus OEM actions), `Image: ""` when empty, no listed
    /// override targets, boot-override changes refused during POST, no `LastResetTime`, no key databases.
    Hpe,
    /// XCC-like: ten PATCH-only media slots listed under the System and the Manager, override
    /// `Once`/`Disabled` only, media streamed through the whole install.
    Lenovo,
    /// Supermicro-like: reset types only via ActionInfo (`PowerCycle`, no `PushPowerButton`), no
    /// `BootProgress`, three slots without an eject action while empty, System media link into the Manager.
    Supermicro,
}

impl Personality {
    /// Every personality, in the order `mix` assigns them round-robin.
    pub const ALL: [Personality; 5] = [
        Personality::Generic,
        Personality::Dell,
        Personality::Hpe,
        Personality::Lenovo,
        Personality::Supermicro,
    ];

    /// The lower-case name used on the command line and in control responses.
    pub fn as_str(self) -> &'static str {
        match self {
            Personality::Generic => "generic",
            Personality::Dell => "dell",
            Personality::Hpe => "hpe",
            Personality::Lenovo => "lenovo",
            Personality::Supermicro => "supermicro",
        }
    }
}

/// Which personalities the fleet gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PersonalityChoice {
    /// Every server has this personality.
    Single(Personality),
    /// Round-robin over [`Personality::ALL`]: server `i` gets `ALL[i % 5]`.
    Mix,
}

impl PersonalityChoice {
    /// The personality of server `index`.
    pub fn for_index(self, index: usize) -> Personality {
        match self {
            PersonalityChoice::Single(p) => p,
            PersonalityChoice::Mix => Personality::ALL[index % Personality::ALL.len()],
        }
    }
}

/// A personality name that is not one of the known ones.
#[derive(Debug, thiserror::Error)]
#[error("unknown personality {0:?} (expected generic, dell, hpe, lenovo, supermicro or mix)")]
pub struct UnknownPersonality(pub String);

impl FromStr for PersonalityChoice {
    type Err = UnknownPersonality;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("mix") {
            return Ok(PersonalityChoice::Mix);
        }
        Personality::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s))
            .map(PersonalityChoice::Single)
            .ok_or_else(|| UnknownPersonality(s.to_owned()))
    }
}

/// Nominal (unscaled) durations of what a machine does. The simulator multiplies each by
/// [`SimConfig::time_scale`], so a 25-minute install takes 1.5 s at a scale of 0.001.
#[derive(Clone, Debug)]
pub struct Timings {
    /// `PoweringOn` before `On`.
    pub power_on: Duration,
    /// `PoweringOff` before `Off`.
    pub power_off: Duration,
    /// Each of the six POST `BootProgress` states.
    pub post_stage: Duration,
    /// `OSBootStarted` to `OSRunning` for the installed OS.
    pub os_boot: Duration,
    /// Install stage 1, from the installer starting until it is done.
    pub install: Duration,
    /// `OSRunning` to the installed OS's start-up update check: its daemon bringing up the network, storage and
    /// services (then Incus starts and the server registers).
    pub registration_delay: Duration,
    /// A failed start-up (a seed it cannot read, a failed registration) to the next one: the IncusOS daemon sleeps
    /// 15 s, exits and systemd starts it again, which runs its whole start-up (update check included) again.
    pub daemon_restart: Duration,
    /// How long a Dell-like BMC keeps reporting `Inserted` after an eject.
    pub stale_inserted_after_eject: Duration,
    /// How long a time-based task (secure-boot reset) stays running.
    pub task: Duration,
    /// Window after a power-off in which the `power_on_conflict` fault answers 409.
    pub power_on_conflict_window: Duration,
    /// Incus evacuate / restore operations.
    pub incus_operation: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            power_on: Duration::from_secs(3),
            power_off: Duration::from_secs(2),
            post_stage: Duration::from_secs(5),
            os_boot: Duration::from_secs(20),
            install: Duration::from_secs(25 * 60),
            registration_delay: Duration::from_secs(30),
            daemon_restart: Duration::from_secs(15),
            stale_inserted_after_eject: Duration::from_secs(10),
            task: Duration::from_secs(10),
            power_on_conflict_window: Duration::from_secs(60),
            incus_operation: Duration::from_secs(30),
        }
    }
}

/// Everything [`crate::Sim::start`] needs.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Number of simulated servers (each with its own BMC path prefix).
    pub servers: usize,
    /// Personality assignment.
    pub personality: PersonalityChoice,
    /// Address to bind; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Serve HTTPS with a freshly generated self-signed certificate.
    pub tls: bool,
    /// Multiplier applied to every [`Timings`] duration (1.0 = real time).
    pub time_scale: f64,
    /// Basic-auth user name accepted by every BMC.
    pub username: String,
    /// Basic-auth password accepted by every BMC.
    pub password: String,
    /// Server names are `<name_prefix>-<index, 4 digits>`.
    pub name_prefix: String,
    /// Nominal machine timings.
    pub timings: Timings,
}

impl SimConfig {
    /// `servers` BMCs on `127.0.0.1:0`, plain HTTP, real time, credentials `admin`/`password`.
    pub fn new(servers: usize, personality: PersonalityChoice) -> Self {
        SimConfig {
            servers,
            personality,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: false,
            time_scale: 1.0,
            username: "admin".to_owned(),
            password: "password".to_owned(),
            name_prefix: "sim".to_owned(),
            timings: Timings::default(),
        }
    }

    /// Builder-style setter for [`SimConfig::time_scale`].
    pub fn with_time_scale(mut self, scale: f64) -> Self {
        self.time_scale = scale;
        self
    }

    /// A rack for whole deployments at `scale`: as [`SimConfig::with_time_scale`], but each POST stage lasts at
    /// least half a real second. Real POSTs take minutes; a deployment polls every second, and the reboot that
    /// ends install stage 1 must leave it time to eject the media before the server boots it a second time.
    pub fn for_deployments(servers: usize, personality: PersonalityChoice, scale: f64) -> Self {
        let mut config = SimConfig::new(servers, personality).with_time_scale(scale);
        config.timings.post_stage = config
            .timings
            .post_stage
            .max(Duration::from_secs_f64(0.5 / scale.max(1e-6)));
        config
    }

    /// Builder-style setter for [`SimConfig::tls`].
    pub fn with_tls(mut self, tls: bool) -> Self {
        self.tls = tls;
        self
    }
}
