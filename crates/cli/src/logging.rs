//! Logs go to stderr as text or JSON, filtered by `RUST_LOG` (default `info`), or to a file when a command's
//! screen is taken (`racklift up --demo` on a terminal).

use std::path::Path;
use std::sync::Mutex;

use anyhow::Context;
use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

pub fn init(format: Format, file: Option<&Path>) -> anyhow::Result<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    // A log line that cannot be written (the terminal was closed) is dropped: the default reports it with
    // `eprintln!`, which panics on the same closed stderr, and a panic in the signal handler's task would
    // leave `racklift up` running with its PostgreSQL after a hangup.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .log_internal_errors(false);
    match file {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening the log file {}", path.display()))?;
            let builder = builder.with_ansi(false).with_writer(Mutex::new(file));
            match format {
                Format::Text => builder.init(),
                Format::Json => builder.json().flatten_event(true).init(),
            }
        }
        None => {
            let builder = builder.with_writer(std::io::stderr);
            match format {
                Format::Text => builder.init(),
                Format::Json => builder.json().flatten_event(true).init(),
            }
        }
    }
    Ok(())
}
