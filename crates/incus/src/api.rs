//! The typed calls. Each is one operation under the call deadline (its own for `wait_operation`); GETs may be
//! retried within it, POSTs go exactly once: an evacuation or a reboot sent twice is the caller's decision, made
//! by its state machine after it has observed the server again.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use hyper::Method;
use serde_json::Value;

use crate::client::{IncusClient, Reply, Req};
use crate::error::{Error, Result};
use crate::model::{
    Application, ApplicationState, Cluster, ClusterMember, Operation, OperationRef, OsInfo, ServerInfo,
    UpdateInfo,
};

/// The deadline of a `wait_operation(timeout)`: the server answers after at most `timeout`, and the exchange
/// itself gets a whole call deadline on top.
pub(crate) fn wait_deadline(timeout: Duration, call_deadline: Duration) -> Duration {
    Duration::from_secs(wait_seconds(timeout)) + call_deadline
}

/// Incus takes whole seconds; round up so a short wait is not a zero (immediate) one.
fn wait_seconds(timeout: Duration) -> u64 {
    timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0)
}

/// `POST /1.0/cluster/members/{name}/state`.
#[derive(serde::Serialize)]
struct MemberStatePost<'a> {
    action: &'a str,
    mode: &'a str,
}

impl IncusClient {
    /// A GET of a sync resource. The URL is built before the future, so the future borrows only `self`.
    fn get<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        segments: &[&str],
        query: Option<&str>,
    ) -> impl Future<Output = Result<T>> + '_ {
        let mut url = self.url(path, segments);
        url.set_query(query);
        async move {
            let shown = url.path().to_owned();
            self.send(Req {
                method: Method::GET,
                url,
                body: None,
            })
            .await?
            .into_sync(&shown)
        }
    }

    async fn post(&self, path: &str, segments: &[&str], body: Option<Value>) -> Result<(Reply, String)> {
        let url = self.url(path, segments);
        let shown = url.path().to_owned();
        let reply = self
            .send(Req {
                method: Method::POST,
                url,
                body,
            })
            .await?;
        Ok((reply, shown))
    }

    /// `GET /1.0`: the certificate the server says it serves and whether it is clustered.
    pub async fn server_info(&self) -> Result<ServerInfo> {
        self.within("server_info", self.call_deadline(), self.get("/1.0", &[], None))
            .await
    }

    /// This server's cluster view: its member name and whether clustering is on.
    pub async fn cluster(&self) -> Result<Cluster> {
        self.within(
            "cluster",
            self.call_deadline(),
            self.get("/1.0/cluster", &[], None),
        )
        .await
    }

    /// Every member of the cluster, with its status.
    pub async fn members(&self) -> Result<Vec<ClusterMember>> {
        let fut = self.get("/1.0/cluster/members", &[], Some("recursion=1"));
        self.within("members", self.call_deadline(), fut).await
    }

    /// One member by name (404 → [`ErrorClass::NotFound`](crate::ErrorClass::NotFound)).
    pub async fn member(&self, name: &str) -> Result<ClusterMember> {
        let fut = self.get("/1.0/cluster/members", &[name], None);
        self.within("member", self.call_deadline(), fut).await
    }

    /// Starts evacuating a member: its instances move or stop per their policy. Returns the operation to wait on.
    pub async fn evacuate(&self, name: &str) -> Result<OperationRef> {
        self.within(
            "evacuate",
            self.call_deadline(),
            self.member_state(name, "evacuate", ""),
        )
        .await
    }

    /// Starts restoring an evacuated member. Returns the operation to wait on.
    /// `mode` is Incus's restore mode: `""` moves the member's instances back and starts them, `"skip"` leaves
    /// them where the evacuation put them.
    pub async fn restore(&self, name: &str, mode: &str) -> Result<OperationRef> {
        self.within(
            "restore",
            self.call_deadline(),
            self.member_state(name, "restore", mode),
        )
        .await
    }

    async fn member_state(&self, name: &str, action: &str, mode: &str) -> Result<OperationRef> {
        let body =
            serde_json::to_value(MemberStatePost { action, mode }).expect("a struct of strings serialises");
        let (reply, path) = self
            .post("/1.0/cluster/members", &[name, "state"], Some(body))
            .await?;
        match reply {
            Reply::Async { operation } => OperationRef::from_url(&operation).ok_or_else(|| Error::Protocol {
                path,
                what: format!("operation URL {operation:?}"),
                source: None,
            }),
            Reply::Sync(_) => Err(Error::Protocol {
                path,
                what: "sync answer where an operation was expected".into(),
                source: None,
            }),
        }
    }

    /// An operation's current state.
    /// The operations this member holds, whatever their status (`GET /1.0/operations?recursion=1`).
    pub async fn operations(&self) -> Result<Vec<Operation>> {
        let fut = async {
            let groups: BTreeMap<String, Vec<Operation>> =
                self.get("/1.0/operations", &[], Some("recursion=1")).await?;
            Ok(groups.into_values().flatten().collect())
        };
        self.within("operations", self.call_deadline(), fut).await
    }

    pub async fn operation(&self, id: &str) -> Result<Operation> {
        let fut = self.get("/1.0/operations", &[id], None);
        self.within("operation", self.call_deadline(), fut).await
    }

    /// Waits on the server for an operation to finish, up to `timeout` (whole seconds, rounded up), and returns
    /// its state then, finished or not. Runs under its own deadline: `timeout` plus the call deadline.
    pub async fn wait_operation(&self, id: &str, timeout: Duration) -> Result<Operation> {
        let query = format!("timeout={}", wait_seconds(timeout));
        let fut = self.get("/1.0/operations", &[id, "wait"], Some(&query));
        let deadline = wait_deadline(timeout, self.call_deadline());
        self.within("wait_operation", deadline, fut).await
    }

    /// The running and staged OS versions.
    pub async fn os(&self) -> Result<OsInfo> {
        self.within("os", self.call_deadline(), self.get("/os/1.0", &[], None))
            .await
    }

    /// The update policy and the update manager's state.
    pub async fn update_state(&self) -> Result<UpdateInfo> {
        let fut = self.get("/os/1.0/system/update", &[], None);
        self.within("update_state", self.call_deadline(), fut).await
    }

    /// Asks the server to check for updates now; it stages what the manager offers.
    pub async fn check_update(&self) -> Result<()> {
        self.within(
            "check_update",
            self.call_deadline(),
            self.post_sync("/os/1.0/system/update/:check"),
        )
        .await
    }

    /// Reboots the server (a staged version becomes the running one). The server may drop the connection as it
    /// goes down, which surfaces as a transport error: the caller confirms the reboot by observing the server.
    pub async fn reboot(&self) -> Result<()> {
        self.within(
            "reboot",
            self.call_deadline(),
            self.post_sync("/os/1.0/system/:reboot"),
        )
        .await
    }

    async fn post_sync(&self, path: &str) -> Result<()> {
        let (reply, path) = self.post(path, &[], None).await?;
        reply.into_sync::<Value>(&path).map(drop)
    }

    /// The installed applications and their running versions (`None` when the server does not say).
    pub async fn applications(&self) -> Result<BTreeMap<String, ApplicationState>> {
        let fut = async {
            let urls: Vec<String> = self.get("/os/1.0/applications", &[], None).await?;
            let mut versions = BTreeMap::new();
            for url in urls {
                let Some(name) = url
                    .trim_end_matches('/')
                    .rsplit('/')
                    .next()
                    .filter(|n| !n.is_empty())
                else {
                    continue;
                };
                let app: Application = self.get("/os/1.0/applications", &[name], None).await?;
                versions.insert(name.to_owned(), app.state);
            }
            Ok(versions)
        };
        self.within("applications", self.call_deadline(), fut).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_rounds_up_and_adds_the_call_deadline() {
        let call = Duration::from_secs(5);
        let cases = [(0, 0, 5), (1_000, 1, 6), (1_200, 2, 7), (60_000, 60, 65)];
        for (timeout_ms, seconds, deadline_s) in cases {
            let timeout = Duration::from_millis(timeout_ms);
            assert_eq!(wait_seconds(timeout), seconds, "{timeout_ms}");
            assert_eq!(
                wait_deadline(timeout, call),
                Duration::from_secs(deadline_s),
                "{timeout_ms}"
            );
        }
    }
}
