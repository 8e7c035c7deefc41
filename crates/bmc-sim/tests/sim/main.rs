//! Integration tests: the simulator driven over real sockets with plain reqwest.

mod common;
mod faults_audit;
mod lifecycle;
mod personalities;
mod registration;
mod resources;
mod seed;
mod seeded;
