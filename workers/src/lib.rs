//! Job handlers, one module per job kind. Handlers execute; `crates/deploy` decides.

pub mod bmc_action;
pub mod cluster_step;
pub mod deploy_bmc;
pub mod deploy_step;
pub mod probe;

use racklift_queue::Registry;

pub use deploy_step::DeployStep;

/// The benchmark and test handlers every `racklift worker` runs.
pub fn registry() -> Registry {
    probe::register(Registry::new())
}

/// Every handler: the deployment step, cluster operations and ad-hoc BMC actions included.
pub fn full_registry(step: DeployStep) -> Registry {
    let actions = bmc_action::BmcActionHandler {
        store: step.store.clone(),
        clients: step.clients.clone(),
        call_deadline: std::time::Duration::from_secs(step.config.step_call_timeout_secs),
    };
    let clusters = cluster_step::ClusterStepHandler {
        clients: step.clients.clone(),
        store: step.store.clone(),
        config: step.config.clone(),
        incus: std::sync::Arc::new(racklift_bmc_access::incus::IncusAccess::new(
            step.store.clone(),
            racklift_bmc_access::incus::IncusSettings {
                call_timeout: std::time::Duration::from_secs(step.config.rolling.incus_call_timeout_secs),
                allow_plain_http: false,
            },
        )),
    };
    registry()
        .register(racklift_store::STEP_KIND, move |ctx| step.clone().run(ctx))
        .register(
            <racklift_store::ClusterStep as racklift_queue::JobPayload>::KIND,
            move |ctx| clusters.clone().run(ctx),
        )
        .register(racklift_store::BMC_ACTION_KIND, move |ctx| {
            actions.clone().run(ctx)
        })
}
