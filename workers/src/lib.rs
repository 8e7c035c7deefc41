//! Job handlers, one module per job kind. Handlers execute; `crates/deploy` decides.

pub mod bmc_access;
pub mod deploy_bmc;
pub mod deploy_step;
pub mod probe;

use racklift_queue::Registry;

pub use deploy_step::DeployStep;

/// The benchmark and test handlers every `racklift worker` runs.
pub fn registry() -> Registry {
    probe::register(Registry::new())
}

/// Every handler, the deployment step included.
pub fn full_registry(step: DeployStep) -> Registry {
    registry().register(racklift_store::STEP_KIND, move |ctx| step.clone().run(ctx))
}
