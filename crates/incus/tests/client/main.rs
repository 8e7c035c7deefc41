//! The Incus client against a local TLS server: mutual TLS and pinning, envelopes, deadlines, retries and the
//! per-server limit. One binary, so the test server and its certificates build once.

mod envelopes;
mod limits;
mod support;
mod tls;
