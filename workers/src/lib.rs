//! Job handlers, one module per job kind. Handlers execute; `crates/deploy` decides.

pub mod probe;

use racklift_queue::Registry;

/// Every handler a `racklift worker` runs.
pub fn registry() -> Registry {
    probe::register(Registry::new())
}
