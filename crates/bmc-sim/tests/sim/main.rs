//! Integration tests: the simulator driven over real sockets with plain reqwest.

mod accounts;
mod cluster;
mod common;
mod faults_audit;
mod incus;
mod incus_faults;
mod incusos;
mod lifecycle;
mod personalities;
mod protocol;
mod registration;
mod resources;
mod seed;
mod seeded;
mod shapes;
