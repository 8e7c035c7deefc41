/// What a store call can fail with. Conflicts and missing rows are distinct so the API can answer 404 / 409.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{what} {name:?} not found")]
    NotFound { what: &'static str, name: String },
    #[error("{what} {name:?} already exists")]
    Conflict { what: &'static str, name: String },
    /// A fenced write found its row changed by someone newer; the caller must stop.
    #[error("stale write to {what} {name:?}: a newer holder moved it on")]
    Stale { what: &'static str, name: String },
    #[error("stored {what} is not valid")]
    Corrupt {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// The request's idempotency key was used, within its retention, for another request; `existing_job` is
    /// what that one made.
    #[error("idempotency key {key:?} was used for another request (job {existing_job})")]
    IdempotencyKeyReused { key: String, existing_job: i64 },
    /// Generating racklift's client identity failed (the key generator or the certificate encoder).
    #[error("generating the client identity")]
    Identity(#[source] rcgen::Error),
    #[error("queue")]
    Queue(#[source] racklift_queue::QueueError),
    #[error("database")]
    Db(#[from] sqlx::Error),
}

/// PostgreSQL's codes for text it cannot store: a NUL byte (`character_not_in_repertoire`), or a character the
/// encoding lacks (`untranslatable_character`).
const INVALID_TEXT_CODES: [&str; 2] = ["22021", "22P05"];

impl StoreError {
    /// The database refused a text value it cannot store: the caller's input, not a fault of the store.
    pub fn is_invalid_text(&self) -> bool {
        matches!(self, StoreError::Db(sqlx::Error::Database(db))
            if db.code().is_some_and(|c| INVALID_TEXT_CODES.contains(&c.as_ref())))
    }

    /// The database could not be reached or would not take writes for now (a restart, a failover, a standby):
    /// worth a retry by the client, unlike a bug.
    pub fn is_unavailable(&self) -> bool {
        let db = match self {
            StoreError::Db(e) | StoreError::Queue(racklift_queue::QueueError::Database(e)) => e,
            _ => return false,
        };
        match db {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_) => true,
            // Connection exceptions (08…), operator intervention (57…: shutting down, starting up) and a write
            // refused by a server in recovery (25006).
            sqlx::Error::Database(d) => d
                .code()
                .is_some_and(|c| c.starts_with("08") || c.starts_with("57") || c.as_ref() == "25006"),
            _ => false,
        }
    }

    /// Maps a unique violation to `Conflict`, anything else to `Db`.
    pub(crate) fn on_unique(what: &'static str, name: &str) -> impl FnOnce(sqlx::Error) -> StoreError {
        let name = name.to_owned();
        move |e| match &e {
            sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::Conflict { what, name },
            _ => StoreError::Db(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_database_is_unavailable_and_a_bug_is_not() {
        let io = || sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        let cases = [
            ("connection reset", StoreError::Db(io()), true),
            ("pool timed out", StoreError::Db(sqlx::Error::PoolTimedOut), true),
            (
                "through the queue",
                StoreError::Queue(racklift_queue::QueueError::Database(io())),
                true,
            ),
            ("no row", StoreError::Db(sqlx::Error::RowNotFound), false),
            (
                "not found",
                StoreError::NotFound {
                    what: "server",
                    name: "s1".into(),
                },
                false,
            ),
        ];
        for (name, e, unavailable) in cases {
            assert_eq!(e.is_unavailable(), unavailable, "{name}");
        }
    }
}
