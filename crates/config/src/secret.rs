//! The database URL: the one secret the configuration holds. It is kept out of `Debug` and serialised with its
//! password replaced, so neither a log line nor `racklift config show` can print it.

use serde::{Serialize, Serializer};

use crate::ConfigError;

const REDACTED: &str = "redacted";

/// A `postgres://` URL whose password only [`DatabaseUrl::expose`] reveals.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl {
    url: String,
    /// Where it came from (`DATABASE_URL`, or the file), for error messages.
    from: String,
}

impl DatabaseUrl {
    pub(crate) fn parse(url: &str, from: &str) -> Result<DatabaseUrl, ConfigError> {
        let parsed = url::Url::parse(url).map_err(|_| ConfigError::BadDatabaseUrl {
            from: from.to_owned(),
        })?;
        if !matches!(parsed.scheme(), "postgres" | "postgresql") {
            return Err(ConfigError::BadDatabaseUrl {
                from: from.to_owned(),
            });
        }
        Ok(DatabaseUrl {
            url: url.to_owned(),
            from: from.to_owned(),
        })
    }

    /// The URL itself, to connect with.
    pub fn expose(&self) -> &str {
        &self.url
    }

    /// Where the URL came from: `DATABASE_URL` or `database.url_file PATH`.
    pub fn source(&self) -> &str {
        &self.from
    }

    /// The URL with its password (and any `password=` query parameter) replaced by `redacted`.
    pub fn redacted(&self) -> String {
        let Ok(mut parsed) = url::Url::parse(&self.url) else {
            return REDACTED.to_owned();
        };
        if parsed.password().is_some() {
            let _ = parsed.set_password(Some(REDACTED));
        }
        let query: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| {
                let v = if k.eq_ignore_ascii_case("password") {
                    REDACTED.into()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        if !query.is_empty() {
            parsed.query_pairs_mut().clear().extend_pairs(query);
        }
        parsed.to_string()
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DatabaseUrl").field(&self.redacted()).finish()
    }
}

impl Serialize for DatabaseUrl {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format!("{} (from {})", self.redacted(), self.from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_never_shows() {
        let url = DatabaseUrl::parse(
            "postgres://racklift:hunter2@db.example:5432/racklift?sslmode=require&password=hunter3",
            "DATABASE_URL",
        )
        .unwrap();
        let shown = url.redacted();
        assert!(!shown.contains("hunter"), "{shown}");
        assert!(
            shown.contains("racklift:redacted@db.example:5432/racklift"),
            "{shown}"
        );
        assert!(!format!("{url:?}").contains("hunter"));
        assert!(url.expose().contains("hunter2"));
    }

    #[test]
    fn only_postgres_urls() {
        assert!(DatabaseUrl::parse("mysql://x@y/z", "DATABASE_URL").is_err());
        assert!(DatabaseUrl::parse("not a url", "DATABASE_URL").is_err());
        assert!(DatabaseUrl::parse("postgresql://x@y/z", "DATABASE_URL").is_ok());
    }
}
