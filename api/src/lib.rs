//! The HTTP API.
