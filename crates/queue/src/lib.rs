//! The durable, fenced job queue.
