//! `racklift token …`: the API's bearer tokens, made, listed and revoked straight in the database named by
//! `DATABASE_URL` rather than through the API. That is how the first admin token of a fresh installation is made
//! (no token exists yet to call the API with), and how a lost admin token is replaced by whoever can reach the
//! database.

use std::time::Duration;

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use racklift_store::{ApiTokenInfo, Role, Store, StoreError};
use serde_json::json;

use crate::db;
use crate::output::{age, print_json, table};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: TokenCommand,
}

#[derive(clap::Subcommand)]
enum TokenCommand {
    /// Make a token and print its secret. Only a digest is stored: the secret is shown this once.
    Create {
        /// A name for the token, unique; the API records it with every action taken with the token.
        #[arg(long)]
        name: String,
        /// viewer (reads), operator (deploys and triage) or admin (everything, the catalog included).
        #[arg(long, value_parser = parse_role)]
        role: Role,
        /// Stop accepting the token after this long, e.g. 12h, 30d, 1h30m. Without it the token lasts until
        /// revoked.
        #[arg(long, value_name = "DURATION", value_parser = parse_expires_in)]
        expires_in: Option<Duration>,
        /// Print {"name", "role", "expires_at", "token"} as JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// List the tokens (never their secrets), expired ones included.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Delete a token: the API refuses it from the next request on.
    Revoke {
        /// The token's name, as `racklift token list` shows it.
        name: String,
    },
}

/// Longer would be a typo more likely than an intent, and a name is shown in every table and audit record.
const MAX_NAME_CHARS: usize = 64;

fn parse_role(s: &str) -> Result<Role, String> {
    Role::parse(s).ok_or_else(|| format!("{s:?} is not a role: expected viewer, operator or admin"))
}

fn parse_expires_in(s: &str) -> Result<Duration, String> {
    let d =
        humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 12h or 30d: {e}"))?;
    if d.is_zero() {
        return Err(format!(
            "{s:?} would expire the token at once: give a duration longer than zero, or leave --expires-in out \
             for a token that lasts until revoked"
        ));
    }
    Ok(d)
}

fn check_name(name: &str) -> anyhow::Result<()> {
    let chars = name.chars().count();
    if chars == 0 || chars > MAX_NAME_CHARS || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        bail!(
            "token name {name:?} is not valid: it must be 1 to {MAX_NAME_CHARS} characters without spaces or \
             control characters"
        );
    }
    Ok(())
}

/// When a token made now with `expires_in` stops working. The local clock: the CLI runs beside the database it
/// writes to, and a few seconds of skew do not matter for expiries of hours or days.
fn expiry(now: DateTime<Utc>, expires_in: Duration) -> anyhow::Result<DateTime<Utc>> {
    chrono::TimeDelta::from_std(expires_in)
        .ok()
        .and_then(|delta| now.checked_add_signed(delta))
        .with_context(|| {
            format!(
                "--expires-in {} is too far in the future",
                humantime::format_duration(expires_in)
            )
        })
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    // Validate before connecting, so a typo is reported without waiting on the database.
    if let TokenCommand::Create { name, .. } = &args.command {
        check_name(name)?;
    }
    let pool = db::connect(&db::require_database_url()?, 2).await?;
    db::migrate(&pool).await?;
    let store = Store::new(pool);
    match args.command {
        TokenCommand::Create {
            name,
            role,
            expires_in,
            json,
        } => create(&store, &name, role, expires_in, json).await,
        TokenCommand::List { json } => list(&store, json).await,
        TokenCommand::Revoke { name } => {
            let revoked = store
                .revoke_api_token(&name)
                .await
                .with_context(|| format!("revoking API token {name:?}"))?;
            if !revoked {
                bail!("no API token is named {name:?}; `racklift token list` shows the names");
            }
            println!("revoked API token {name:?}");
            Ok(())
        }
    }
}

async fn create(
    store: &Store,
    name: &str,
    role: Role,
    expires_in: Option<Duration>,
    json: bool,
) -> anyhow::Result<()> {
    let expires_at = expires_in.map(|d| expiry(Utc::now(), d)).transpose()?;
    let secret = match store.create_api_token(name, role, expires_at).await {
        Ok(secret) => secret,
        Err(StoreError::Conflict { .. }) => bail!(
            "a token named {name:?} exists already; revoke it first (`racklift token revoke {name}`) or choose \
             another name"
        ),
        Err(e) => return Err(e).with_context(|| format!("creating API token {name:?}")),
    };
    if json {
        return print_json(&json!({
            "name": name,
            "role": role,
            "expires_at": expires_at,
            "token": secret,
        }));
    }
    // The secret alone on stdout, so `$(racklift token create …)` captures just it; the notice is for the human.
    println!("{secret}");
    let lasts = match expires_at {
        Some(at) => format!(
            "expires {}",
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ),
        None => "never expires".to_owned(),
    };
    eprintln!(
        "created API token {name:?} ({}, {lasts}). Store the secret above now: it cannot be shown again.",
        role.as_str()
    );
    Ok(())
}

async fn list(store: &Store, json: bool) -> anyhow::Result<()> {
    let tokens = store.list_api_tokens().await.context("listing API tokens")?;
    if json {
        return print_json(&serde_json::to_value(&tokens)?);
    }
    print!("{}", token_table(&tokens, Utc::now()));
    Ok(())
}

fn token_table(tokens: &[ApiTokenInfo], now: DateTime<Utc>) -> String {
    let time = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let rows: Vec<[String; 4]> = tokens
        .iter()
        .map(|t| {
            let expires = match t.expires_at {
                None => "never".to_owned(),
                Some(at) if at <= now => format!("{} (expired)", time(at)),
                Some(at) => format!("{} (in {})", time(at), age((at - now).num_seconds())),
            };
            [
                t.name.clone(),
                t.role.as_str().to_owned(),
                time(t.created_at),
                expires,
            ]
        })
        .collect();
    table(["NAME", "ROLE", "CREATED", "EXPIRES"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_and_a_bad_one_is_named() {
        assert_eq!(parse_role("viewer"), Ok(Role::Viewer));
        assert_eq!(parse_role("operator"), Ok(Role::Operator));
        assert_eq!(parse_role("admin"), Ok(Role::Admin));
        let err = parse_role("root").unwrap_err();
        assert!(
            err.contains("\"root\"") && err.contains("viewer, operator or admin"),
            "{err}"
        );
    }

    #[test]
    fn expiries_parse_and_zero_is_refused() {
        assert_eq!(parse_expires_in("30d"), Ok(Duration::from_secs(30 * 86400)));
        assert_eq!(parse_expires_in("12h"), Ok(Duration::from_secs(12 * 3600)));
        assert_eq!(parse_expires_in("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_expires_in("2s"), Ok(Duration::from_secs(2)));
        for bad in ["0s", "0", "", "soon", "-1h", "5 fortnights"] {
            assert!(parse_expires_in(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(parse_expires_in("0s").unwrap_err().contains("longer than zero"));
    }

    #[test]
    fn an_expiry_too_far_out_is_an_error() {
        let now = Utc::now();
        assert_eq!(
            expiry(now, Duration::from_secs(60)).expect("a minute"),
            now + chrono::TimeDelta::seconds(60)
        );
        assert!(expiry(now, Duration::from_secs(u64::MAX)).is_err());
    }

    #[test]
    fn names_must_be_short_and_visible() {
        assert!(check_name("ci-deployer@rack1").is_ok());
        for bad in ["", "two words", "tab\there", &"x".repeat(MAX_NAME_CHARS + 1)] {
            assert!(check_name(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn the_table_shows_expiry_and_no_secret() {
        let now: DateTime<Utc> = "2026-03-01T12:00:00Z".parse().unwrap();
        let created: DateTime<Utc> = "2026-02-01T08:30:00Z".parse().unwrap();
        let tokens = [
            ApiTokenInfo {
                name: "admin".into(),
                role: Role::Admin,
                created_at: created,
                expires_at: None,
            },
            ApiTokenInfo {
                name: "ci".into(),
                role: Role::Operator,
                created_at: created,
                expires_at: Some(now + chrono::TimeDelta::hours(5)),
            },
            ApiTokenInfo {
                name: "old".into(),
                role: Role::Viewer,
                created_at: created,
                expires_at: Some(now - chrono::TimeDelta::seconds(1)),
            },
        ];
        assert_eq!(
            token_table(&tokens, now),
            "NAME   ROLE      CREATED               EXPIRES\n\
             admin  admin     2026-02-01T08:30:00Z  never\n\
             ci     operator  2026-02-01T08:30:00Z  2026-03-01T17:00:00Z (in 5h00m)\n\
             old    viewer    2026-02-01T08:30:00Z  2026-03-01T11:59:59Z (expired)\n"
        );
    }
}
