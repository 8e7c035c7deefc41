//! The client against the racklift BMC simulator, for every personality and operation,
//! including the vendor fallbacks, fault classes, the per-BMC limiter, the fencing header and
//! TLS modes. One test binary, so the simulator and client link once.

mod bios;
mod boot;
mod common;
mod etags;
mod fallbacks;
mod faults;
mod hangs;
mod media;
mod power;
mod read_back;
mod secure_boot;
mod shapes;
mod systems;
mod tls;
