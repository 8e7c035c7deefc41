//! A small HTTP client for the racklift API, used by the operator commands. It exists so every command turns
//! transport failures and the API's error shape into the same one-line messages, instead of each command
//! interpreting reqwest errors on its own.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use reqwest::{Method, RequestBuilder, Response};
use serde_json::Value;

/// Where the bearer token is read from when `--token-file` is not given: an operator's own config, so the
/// secret never appears on a command line (and so in `ps` or the shell history).
const DEFAULT_TOKEN_FILE: &str = ".config/racklift/token";

/// The environment variable holding the bearer token; it wins over any file.
pub const TOKEN_ENV: &str = "RACKLIFT_TOKEN";

/// Where the operator commands find the API and its token; flattened into every client command.
#[derive(clap::Args)]
pub struct ApiArgs {
    /// The racklift API to talk to.
    #[arg(
        long,
        global = true,
        env = "RACKLIFT_API",
        default_value = "https://127.0.0.1:7878"
    )]
    api: String,
    /// A file holding the API bearer token (default ~/.config/racklift/token if it exists). RACKLIFT_TOKEN
    /// wins over any file; the token is never taken from a flag so it stays out of process listings.
    #[arg(long, global = true, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// PEM certificates to trust for the API instead of the system's roots (as curl's --cacert): a self-signed
    /// API certificate, such as the one `racklift up` generates in its data directory, or a private CA.
    #[arg(long, global = true, env = "RACKLIFT_CA_CERT", value_name = "PATH")]
    ca_cert: Option<PathBuf>,
}

impl ApiArgs {
    pub fn client(&self) -> anyhow::Result<Client> {
        Client::with_ca(&self.api, self.token_file.as_deref(), self.ca_cert.as_deref())
    }
}

/// An authenticated connection to one API. Cloning is cheap (the connection pool is shared).
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
    /// Where the token came from, named in "unauthenticated" errors so the operator knows what to fix.
    token_source: String,
}

impl Client {
    /// A client for `base` (e.g. `https://127.0.0.1:7878`) with the token from the environment or a file,
    /// trusting `ca_cert` (PEM) for the API instead of the system's roots when given.
    pub fn with_ca(base: &str, token_file: Option<&Path>, ca_cert: Option<&Path>) -> anyhow::Result<Client> {
        let (token, token_source) = load_token(token_file)?;
        let mut http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60));
        if let Some(path) = ca_cert {
            let pem = std::fs::read(path).with_context(|| format!("reading --ca-cert {}", path.display()))?;
            // As curl's --cacert: these certificates instead of the system's roots (the platform verifier
            // does not take a self-signed server certificate as an extra root).
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("--ca-cert {}", path.display()))?;
            if certs.is_empty() {
                anyhow::bail!("--ca-cert {}: no certificate in the file", path.display());
            }
            http = http.tls_certs_only(certs);
        }
        let http = http.build()?;
        Ok(Client {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token,
            token_source,
        })
    }

    /// `GET {base}{path}` and its JSON body.
    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.send(Method::GET, path, |r| r).await
    }

    /// `GET {base}{path}?{query}`, the query encoded by reqwest (filters may hold any character).
    pub async fn get_query(&self, path: &str, query: &[(&str, String)]) -> Result<Value, ClientError> {
        self.send(Method::GET, path, |r| r.query(query)).await
    }

    /// `POST {base}{path}` with a JSON body; `configure` adds headers.
    pub async fn post(
        &self,
        path: &str,
        body: &Value,
        configure: impl FnOnce(RequestBuilder) -> RequestBuilder,
    ) -> Result<Value, ClientError> {
        self.send(Method::POST, path, |r| configure(r.json(body))).await
    }

    /// `PUT {base}{path}` with a JSON body.
    pub async fn put(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.send(Method::PUT, path, |r| r.json(body)).await
    }

    /// `DELETE {base}{path}`; the API answers 204, read as `null`.
    pub async fn delete(&self, path: &str) -> Result<Value, ClientError> {
        self.send(Method::DELETE, path, |r| r).await
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        configure: impl FnOnce(RequestBuilder) -> RequestBuilder,
    ) -> Result<Value, ClientError> {
        let request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        let response = configure(request).send().await.map_err(|e| {
            if e.is_builder() {
                ClientError::Other(anyhow!("invalid API URL {:?}: {}", self.base, root_cause(&e)))
            } else {
                ClientError::Unreachable(anyhow!(
                    "cannot reach the racklift API at {}: {}",
                    self.base,
                    root_cause(&e)
                ))
            }
        })?;
        if response.status().is_success() {
            return read_json(response)
                .await
                .map_err(|e| ClientError::Other(anyhow!("{method} {path}: {e}")));
        }
        Err(ClientError::Other(self.api_error(&method, path, response).await))
    }

    /// The API's `{"error":{"code","message","field"}}` as one line; anything else (a proxy's HTML page) is
    /// reported by status with the start of its body.
    async fn api_error(&self, method: &Method, path: &str, response: Response) -> anyhow::Error {
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        let parsed: Option<Value> = serde_json::from_str(&text).ok();
        let Some(error) = parsed.as_ref().and_then(|v| v.get("error")) else {
            let start: String = text.trim().chars().take(200).collect();
            return anyhow!("{method} {path} failed with HTTP {status}: {start}");
        };
        let code = error["code"].as_str().unwrap_or("unknown");
        let message = error["message"].as_str().unwrap_or("");
        let mut line = format!("{code}: {message}");
        if let Some(field) = error["field"].as_str() {
            line.push_str(&format!(" (field {field})"));
        }
        if code == "unauthenticated" {
            line.push_str(&format!("; the token came from {}", self.token_source));
        }
        anyhow!("{line} [HTTP {}]", status.as_u16())
    }
}

/// Why a request failed. Unreachable is separate so `--wait` can ride out an API restart.
#[derive(Debug)]
pub enum ClientError {
    Unreachable(anyhow::Error),
    Other(anyhow::Error),
}

impl From<ClientError> for anyhow::Error {
    fn from(e: ClientError) -> anyhow::Error {
        match e {
            ClientError::Unreachable(e) | ClientError::Other(e) => e,
        }
    }
}

async fn read_json(response: Response) -> anyhow::Result<Value> {
    let bytes = response.bytes().await.context("reading the response")?;
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&bytes).context("the response is not JSON")
}

/// The innermost error: for a refused connection "Connection refused (os error 111)" rather than reqwest's
/// "error sending request for url (…)", which says nothing an operator can act on.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}

/// The bearer token and where it came from: `RACKLIFT_TOKEN`, else `token_file`, else the default file if it
/// exists. Never a flag value, so the secret stays out of process listings.
fn load_token(token_file: Option<&Path>) -> anyhow::Result<(String, String)> {
    if let Ok(token) = std::env::var(TOKEN_ENV)
        && !token.trim().is_empty()
    {
        return Ok((token.trim().to_owned(), TOKEN_ENV.to_owned()));
    }
    let default = std::env::var_os("HOME").map(|home| PathBuf::from(home).join(DEFAULT_TOKEN_FILE));
    let path = match (token_file, &default) {
        (Some(path), _) => path.to_owned(),
        (None, Some(path)) if path.exists() => path.clone(),
        _ => bail!(
            "no API token: set {TOKEN_ENV}, or write the token to ~/{DEFAULT_TOKEN_FILE} (or a file named by \
             --token-file)"
        ),
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow!("cannot read the API token from {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        bail!(
            "the token file {} is empty: write the API token into it, or set {TOKEN_ENV}",
            path.display()
        );
    }
    Ok((token.to_owned(), format!("the file {}", path.display())))
}

/// An answer decoded into the named type the API serialised it from, for the tables and key-value views (`--json`
/// prints the answer itself).
pub fn decode<T: serde::de::DeserializeOwned>(answer: &Value) -> anyhow::Result<T> {
    T::deserialize(answer).context("the API's answer does not have the shape this racklift expects")
}
