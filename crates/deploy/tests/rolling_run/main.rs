//! A whole rolling run of a cluster (spec 001): launch rules, the rolling reboot and the rolling update driven
//! tick by tick against a small in-test cluster model, the ends of a run, the health gate, cancel and relaunch.
//!
//! No I/O and no clock: every tick is at `t(secs)`, and the clock only moves to the times the run asks for.

#[path = "../common/mod.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::t;
use racklift_deploy::Time;
use racklift_deploy::rolling::{RollingConfig, RollingState as RS, RollingStep as St, ServerUpdate};
use racklift_deploy::rolling_run::{
    BmcBoot, BootTime, LaunchRefused, MemberFacts, MemberStatus as MS, Phase, RollingRun, RunDecision,
    RunKind, RunServer, RunSettings, SkipRefused, decide_run,
};

mod fixtures;
mod model;

use fixtures::*;
use model::*;
use update::update_cluster;

mod cancel;
mod ends;
mod explain;
mod gate;
mod launch;
mod reads;
mod reboot;
mod relaunch;
mod update;
