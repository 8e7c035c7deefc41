//! Typed views of the Incus and IncusOS resources racklift reads. Decoding is tolerant: unknown fields are
//! ignored, missing ones default, and status strings racklift does not know are kept as `Other` rather than
//! failing a rolling update over a new Incus release's wording.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `GET /1.0/cluster`: this server's view of its cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    /// This member's name in the cluster (empty when not clustered).
    #[serde(default)]
    pub server_name: String,
    /// Whether clustering is enabled on this server.
    #[serde(default)]
    pub enabled: bool,
}

/// `GET /1.0`: the Incus server's own description. Only what racklift reads to learn a cluster's certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    #[serde(default)]
    pub environment: ServerEnvironment,
}

/// `GET /1.0` → `environment`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerEnvironment {
    /// The PEM certificate the server serves its API with: the cluster's once it is clustered.
    #[serde(default)]
    pub certificate: String,
    /// Whether the server is a cluster member.
    #[serde(default)]
    pub server_clustered: bool,
    #[serde(default)]
    pub server_name: String,
}

/// One member of `GET /1.0/cluster/members`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMember {
    #[serde(default)]
    pub server_name: String,
    /// The member's cluster address, `https://host:port`.
    #[serde(default)]
    pub url: String,
    #[serde(default)]
    pub roles: Vec<String>,
    #[serde(default)]
    pub status: MemberStatus,
    /// Incus's explanation of the status (`Fully operational`, `No heartbeat for ...`).
    #[serde(default)]
    pub message: String,
}

/// A member's status, as Incus spells it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum MemberStatus {
    Online,
    Evacuated,
    Offline,
    /// An evacuation in progress.
    Evacuating,
    /// A restore in progress.
    Restoring,
    /// A status this client does not know, kept verbatim (empty when absent).
    Other(String),
    /// No status in the answer.
    #[default]
    Unknown,
}

impl MemberStatus {
    /// The wire string.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Online => "Online",
            Self::Evacuated => "Evacuated",
            Self::Offline => "Offline",
            Self::Evacuating => "Evacuating",
            Self::Restoring => "Restoring",
            Self::Other(s) => s,
            Self::Unknown => "",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "Online" => Self::Online,
            "Evacuated" => Self::Evacuated,
            "Offline" => Self::Offline,
            "Evacuating" => Self::Evacuating,
            "Restoring" => Self::Restoring,
            "" => Self::Unknown,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for MemberStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for MemberStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for MemberStatus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = Option::<String>::deserialize(deserializer)?;
        Ok(s.as_deref().map_or(Self::Unknown, Self::parse))
    }
}

/// The operation an async call created: its id and its URL on the server.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OperationRef {
    /// The operation's UUID, what [`IncusClient::operation`](crate::IncusClient::operation) takes.
    pub id: String,
    /// The server's path for it, `/1.0/operations/<id>`.
    pub url: String,
}

impl OperationRef {
    /// The id is the last segment of the URL the envelope names.
    pub(crate) fn from_url(url: &str) -> Option<Self> {
        let id = url.trim_end_matches('/').rsplit('/').next()?;
        (!id.is_empty()).then(|| Self {
            id: id.to_owned(),
            url: url.to_owned(),
        })
    }
}

/// `GET /1.0/operations/{id}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    #[serde(default)]
    pub id: String,
    /// `task`, `websocket` or `token`.
    #[serde(default)]
    pub class: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub status: OperationStatus,
    /// Incus's numeric status: 103 running, 200 success, 400 failure, 401 cancelled.
    #[serde(default)]
    pub status_code: u16,
    /// Why the operation failed (empty unless it did).
    #[serde(default)]
    pub err: String,
    #[serde(default)]
    pub may_cancel: bool,
}

impl Operation {
    /// Whether the operation has finished, one way or the other.
    pub fn is_final(&self) -> bool {
        matches!(
            self.status,
            OperationStatus::Success | OperationStatus::Failure | OperationStatus::Cancelled
        )
    }
}

/// An operation's status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum OperationStatus {
    Pending,
    Running,
    Cancelling,
    Success,
    Failure,
    Cancelled,
    /// A status this client does not know, kept verbatim.
    Other(String),
    /// No status in the answer.
    #[default]
    Unknown,
}

impl OperationStatus {
    /// The wire string.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Pending => "Pending",
            Self::Running => "Running",
            Self::Cancelling => "Cancelling",
            Self::Success => "Success",
            Self::Failure => "Failure",
            Self::Cancelled => "Cancelled",
            Self::Other(s) => s,
            Self::Unknown => "",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "Pending" => Self::Pending,
            "Running" => Self::Running,
            "Cancelling" => Self::Cancelling,
            "Success" => Self::Success,
            "Failure" => Self::Failure,
            "Cancelled" => Self::Cancelled,
            "" => Self::Unknown,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for OperationStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for OperationStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for OperationStatus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = Option::<String>::deserialize(deserializer)?;
        Ok(s.as_deref().map_or(Self::Unknown, Self::parse))
    }
}

/// `GET /os/1.0`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsInfo {
    #[serde(default)]
    pub environment: OsEnvironment,
}

/// The running and staged OS versions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsEnvironment {
    #[serde(default)]
    pub os_name: String,
    #[serde(default)]
    pub os_version: String,
    /// The version the next boot runs; equal to `os_version` when nothing is staged.
    #[serde(default)]
    pub os_version_next: String,
    /// Whole seconds since the server booted (`/proc/uptime`'s integer part). IncusOS sends an integer; its API
    /// documentation shows a string, also read. Absent from servers older than the field.
    #[serde(
        default,
        deserialize_with = "uptime_seconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub uptime: Option<u64>,
}

/// `uptime` as a JSON integer or a string of digits; anything else is taken as not reported.
fn uptime_seconds<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Uptime {
        Number(u64),
        Text(String),
        Other(serde::de::IgnoredAny),
    }
    Ok(match Option::<Uptime>::deserialize(deserializer)? {
        Some(Uptime::Number(n)) => Some(n),
        Some(Uptime::Text(t)) => t.trim().parse().ok(),
        Some(Uptime::Other(_)) | None => None,
    })
}

impl OsInfo {
    /// The staged version, when one differs from the running one (a reboot would apply it).
    pub fn staged_version(&self) -> Option<&str> {
        let env = &self.environment;
        (!env.os_version_next.is_empty() && env.os_version_next != env.os_version)
            .then_some(env.os_version_next.as_str())
    }
}

/// `GET /os/1.0/system/update`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateInfo {
    /// The update policy (channel, frequency, auto reboot). Kept as JSON: racklift sets it through the seed, and
    /// reads it only to show it.
    #[serde(default)]
    pub config: serde_json::Value,
    #[serde(default)]
    pub state: UpdateState,
}

/// What the update manager last did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateState {
    /// When the server last checked for updates (RFC 3339, as the server wrote it), if ever.
    #[serde(default)]
    pub last_check: Option<String>,
    /// The manager's status line (`Update check completed`, `Downloading ...`).
    #[serde(default)]
    pub status: String,
    /// Whether a staged update waits for a reboot.
    #[serde(default)]
    pub needs_reboot: bool,
}

/// `GET /os/1.0/applications/<name>`: only the running version is read.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct Application {
    #[serde(default)]
    pub state: ApplicationState,
}

/// An installed application's versions: the one running, and the ones it has (a staged update among them) that
/// a restart or the next boot may switch to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ApplicationState {
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub available_versions: Vec<String>,
}

impl ApplicationState {
    /// The newest version the application runs or has staged.
    pub fn newest(&self) -> Option<&str> {
        self.available_versions
            .iter()
            .map(String::as_str)
            .chain(self.version.as_deref())
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_statuses_round_trip_and_keep_unknown_words() {
        let cases = [
            ("Online", MemberStatus::Online),
            ("Evacuated", MemberStatus::Evacuated),
            ("Offline", MemberStatus::Offline),
            ("Evacuating", MemberStatus::Evacuating),
            ("Restoring", MemberStatus::Restoring),
            ("Blocked", MemberStatus::Other("Blocked".into())),
        ];
        for (wire, status) in cases {
            let json = serde_json::to_string(wire).expect("json");
            assert_eq!(
                serde_json::from_str::<MemberStatus>(&json).expect("status"),
                status
            );
            assert_eq!(serde_json::to_string(&status).expect("json"), json);
        }
        let member: ClusterMember =
            serde_json::from_str(r#"{"server_name":"n1","status":null}"#).expect("member");
        assert_eq!(member.status, MemberStatus::Unknown);
    }

    #[test]
    fn operations_and_versions_decode_tolerantly() {
        let op: Operation = serde_json::from_str(
            r#"{"id":"abc","class":"task","status":"Failure","status_code":400,"err":"boom","extra":1}"#,
        )
        .expect("op");
        assert!(op.is_final());
        assert_eq!((op.status, op.err.as_str()), (OperationStatus::Failure, "boom"));
        let running: Operation = serde_json::from_str(r#"{"status":"Running"}"#).expect("op");
        assert!(!running.is_final());
        let os: OsInfo = serde_json::from_str(
            r#"{"environment":{"os_name":"IncusOS","os_version":"202501010000","os_version_next":"202502010000"}}"#,
        )
        .expect("os");
        assert_eq!(os.staged_version(), Some("202502010000"));
        let same: OsInfo =
            serde_json::from_str(r#"{"environment":{"os_version":"1","os_version_next":"1"}}"#).expect("os");
        assert_eq!(same.staged_version(), None);
        assert_eq!(
            OperationRef::from_url("/1.0/operations/5e3a").map(|o| o.id),
            Some("5e3a".into())
        );
        assert_eq!(OperationRef::from_url(""), None);
    }

    /// `GET /os/1.0` as IncusOS renders it (`incus-osd/internal/rest/api_root.go:162-174`: every key of its
    /// `environment` map, `uptime` an `int64`), and as its API documentation's example shows it (a string).
    #[test]
    fn the_os_root_reads_uptime_as_incusos_sends_it() {
        let upstream = r#"{"environment":{"hostname":"af94e64e-1993-41b6-8f10-a8eebb828fce",
            "machine_id":"af94e64e199341b68f10a8eebb828fce","os_name":"IncusOS","os_version":"202511041601",
            "os_version_next":"202511152230","system_is_ready":true,"uptime":3237039,
            "os_version_alternate":"202511162345"}}"#;
        let os: OsInfo = serde_json::from_str(upstream).expect("os");
        assert_eq!(os.environment.uptime, Some(3_237_039));
        assert_eq!(os.staged_version(), Some("202511152230"));
        let cases = [
            (r#""uptime":"3237039""#, Some(3_237_039)),
            (r#""uptime":0"#, Some(0)),
            (r#""uptime":null"#, None),
            (r#""uptime":-1"#, None),
            (r#""uptime":"soon""#, None),
            (r#""os_name":"IncusOS""#, None),
        ];
        for (field, uptime) in cases {
            let os: OsInfo = serde_json::from_str(&format!(r#"{{"environment":{{{field}}}}}"#)).expect(field);
            assert_eq!(os.environment.uptime, uptime, "{field}");
        }
    }
}
