//! Job handlers.
