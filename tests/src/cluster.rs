//! A rack whose servers are deployed, registered and formed into one Incus cluster, as an operator would have it
//! before asking racklift for a rolling operation: the cluster is formed by its administrator (the simulator's
//! control API stands in for `incus cluster join`), then created in racklift through the API.

use std::time::Duration;

use racklift_bmc_sim::{Personality, PersonalityChoice};
use racklift_deploy::{Config, State};
use serde_json::{Value, json};

use crate::rack::Rack;

/// The cluster's name, in the simulator and in racklift.
pub const CLUSTER: &str = "c1";

pub struct ClusterRack {
    pub rack: Rack,
    pub names: Vec<String>,
}

impl ClusterRack {
    /// `servers` generic servers at time scale 0.002, deployed, clustered and created in racklift with no
    /// post-restore delay.
    pub async fn start(servers: usize) -> ClusterRack {
        ClusterRack::start_with(servers, Config::for_simulation(0.002)).await
    }

    /// As [`ClusterRack::start`], the API and workers running `config`.
    pub async fn start_with(servers: usize, config: Config) -> ClusterRack {
        let rack = Rack::start_with_config(
            servers,
            PersonalityChoice::Single(Personality::Generic),
            0.002,
            config,
        )
        .await;
        rack.deploy_all().await;
        let names = form_cluster(&rack, servers, Duration::from_secs(120), Some(0)).await;
        ClusterRack { rack, names }
    }

    /// POSTs `body` to `path` as the admin; the status and the JSON answer.
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .rack
            .http
            .post(format!("{}{path}", self.rack.api_url))
            .bearer_auth(&self.rack.catalog.admin_token)
            .json(&body)
            .send()
            .await
            .expect("the API answers");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Starts `action` (`update`, `reboot`, `cancel-operation`, `pause`, `resume`) on the cluster.
    pub async fn action(&self, action: &str, body: Value) -> (u16, Value) {
        self.post(&format!("/1.0/provisioning/clusters/{CLUSTER}:{action}"), body)
            .await
    }

    /// The cluster as the API shows it.
    pub async fn show(&self) -> Value {
        self.rack
            .http
            .get(format!(
                "{}/1.0/provisioning/clusters/{CLUSTER}",
                self.rack.api_url
            ))
            .bearer_auth(&self.rack.catalog.admin_token)
            .send()
            .await
            .expect("the API answers")
            .json()
            .await
            .expect("a cluster view")
    }

    /// Waits until the cluster's operation satisfies `done` and returns the cluster's view; on timeout fails
    /// with the last view.
    pub async fn wait_for(&self, what: &str, limit: Duration, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let view = self.show().await;
            if done(&view["operation"]) {
                return view;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what} not reached within {limit:?}:\n{view:#}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the operation is no longer running.
    pub async fn wait_ended(&self, limit: Duration) -> Value {
        self.wait_for("the operation's end", limit, |op| {
            op["status"].as_str().is_some_and(|s| s != "running")
        })
        .await
    }

    /// The member (hostname) name of server `i` in the simulator's cluster audit.
    pub fn hostname(&self, i: usize) -> String {
        self.rack.sim.truth(i)["os"]["hostname"]
            .as_str()
            .expect("an installed server has a hostname")
            .to_owned()
    }
}

/// Every member was asked exactly once to evacuate, reboot and restore (those of `kept_evacuated`, evacuated
/// before the run, only to reboot), never two were out at once beside those, and every Incus mutation carried a
/// current fence.
pub fn assert_rolled_once_each(c: &ClusterRack, kept_evacuated: &[usize]) {
    let audit = c.rack.sim.cluster_audit(CLUSTER).expect("the cluster's audit");
    let extra = kept_evacuated.len() as u32;
    assert_eq!(audit.max_evacuated_at_once, 1 + extra, "{audit:#?}");
    assert_eq!(audit.unfenced_mutations, 0, "{audit:#?}");
    assert!(audit.stale_mutations.is_empty(), "{audit:#?}");
    for (i, name) in c.names.iter().enumerate() {
        let counts = &audit.members[&c.hostname(i)];
        assert_eq!(counts.reboots, 1, "{name}: {audit:#?}");
        let (evacuations, restores) = if kept_evacuated.contains(&i) {
            (0, 0)
        } else {
            (1, 1)
        };
        assert_eq!(counts.evacuations, evacuations, "{name}: {audit:#?}");
        assert_eq!(counts.restores, restores, "{name}: {audit:#?}");
    }
}

/// The status of a cluster view's operation, `none` without one.
pub fn op_status(view: &Value) -> &str {
    view["operation"]["status"].as_str().unwrap_or("none")
}

/// Budgets short enough for a failing step to end a run within a test.
/// Waits for servers `0..members` of `rack` (deployments already requested) to complete, forms them into
/// [`CLUSTER`] in the simulator (as its administrator would) and creates it in racklift, with the cluster's own
/// post-restore delay if given; the cluster audit starts empty. Returns the members' names.
pub async fn form_cluster(
    rack: &Rack,
    members: usize,
    limit: Duration,
    post_restore_delay_secs: Option<u64>,
) -> Vec<String> {
    let mut names = Vec::new();
    for i in 0..members {
        let name = rack.sim.name(i).to_owned();
        let d = rack.wait_finished(&name, limit).await;
        assert_eq!(
            d.deployment.machine.state,
            State::Completed,
            "{name}: {:?}\n{}",
            d.deployment.machine.failure,
            rack.event_log(&name).await
        );
        names.push(name);
    }
    rack.sim
        .form_cluster(CLUSTER, &(0..members).collect::<Vec<_>>())
        .expect("the simulated servers form a cluster");
    let mut body = json!({"name": CLUSTER, "servers": names});
    if let Some(delay) = post_restore_delay_secs {
        body["post_restore_delay_secs"] = json!(delay);
    }
    let r = rack
        .admin(reqwest::Method::POST, "/1.0/provisioning/clusters")
        .json(&body)
        .send()
        .await
        .expect("the API answers");
    let status = r.status().as_u16();
    assert_eq!(status, 201, "{}", r.text().await.unwrap_or_default());
    rack.sim.reset_cluster_audit(CLUSTER);
    names
}

/// Starts a rolling reboot of [`CLUSTER`] through the API.
pub async fn start_reboot(rack: &Rack) {
    let r = rack
        .admin(
            reqwest::Method::POST,
            format!("/1.0/provisioning/clusters/{CLUSTER}:reboot"),
        )
        .json(&json!({}))
        .send()
        .await
        .expect("the API answers");
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap_or_default());
}

pub fn short_budgets() -> Config {
    let mut config = Config::for_simulation(0.002);
    config.rolling.reboot_timeout_secs = 8;
    config.rolling.evacuate_timeout_secs = 8;
    config.rolling.restore_timeout_secs = 8;
    config.rolling.health_gate_timeout_secs = 4;
    config.rolling.step_retries = 2;
    config
}
