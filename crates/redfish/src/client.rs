//! The client core: the per-call deadline, the per-BMC limiter, the fencing
//! header, polite in-process retries and tracing. Operations live in their own modules and
//! go through [`BmcClient::request`].

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use base64::Engine as _;
use http_body_util::Full;
use hyper::Method;
use hyper::body::Bytes;
use hyper::header::{self, HeaderValue};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{OnceCell, Semaphore};
use tracing::Instrument;
use url::Url;

pub use crate::config::{BmcConfig, FENCE_HEADER, Fence, RetryPolicy};
use crate::discovery;
use crate::error::{Error, Result};
pub(crate) use crate::reply::Reply;
use crate::secret::Credentials;
use crate::tls::{client_config, is_certificate_error};
use crate::transport::{BoxError, Endpoint, exchange};

/// A Redfish client for one BMC. Cheap to clone; clones share the endpoint (address and TLS
/// configuration), the discovered URIs and the BMC's limiter. Each call has a connection of its
/// own (see `transport`).
#[derive(Clone)]
pub struct BmcClient {
    inner: Arc<Inner>,
    fence: Option<Fence>,
    deadline: Duration,
}

struct Inner {
    endpoint: Endpoint,
    base: Url,
    server: String,
    credentials: Credentials,
    permits: Arc<Semaphore>,
    retry: RetryPolicy,
    system: OnceCell<String>,
    system_hint: Option<String>,
    manager: OnceCell<Option<String>>,
    /// The bounded `vendor` label of this client's metrics.
    vendor: &'static str,
}

impl fmt::Debug for BmcClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BmcClient")
            .field("server", &self.inner.server)
            .field("base", &self.inner.base.as_str())
            .field("credentials", &self.inner.credentials)
            .field("fence", &self.fence)
            .field("deadline", &self.deadline)
            .finish()
    }
}

/// How a request may be repeated in-process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Idempotency {
    /// GETs and desired-state actions (ForceOff, eject, PATCHing the same value).
    Idempotent,
    /// Anything whose repetition could do something twice (ForceRestart, POST to a collection).
    Once,
}

/// A request to send.
pub(crate) struct Req<'a> {
    pub method: Method,
    pub path: &'a str,
    pub body: Option<&'a Value>,
    pub if_match: Option<&'a str>,
    pub idempotency: Idempotency,
}

impl BmcClient {
    /// Builds a client. Fails only on an unusable configuration (bad URL, bad CA bundle).
    pub fn new(config: BmcConfig) -> Result<Self> {
        let mut base = Url::parse(&config.base_url).map_err(|e| Error::Config {
            reason: format!("base URL {:?}: {e}", config.base_url),
        })?;
        if !matches!(base.scheme(), "https" | "http") || base.host().is_none() {
            return Err(Error::Config {
                reason: format!("base URL {:?}: need http(s)://host", config.base_url),
            });
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let tls = client_config(&config.tls, &config.server)?;
        let endpoint = Endpoint::new(&base, tls, config.connect_timeout)?;
        let permits = config.limiter.for_host(base.as_str());
        Ok(Self {
            inner: Arc::new(Inner {
                endpoint,
                base,
                server: config.server,
                credentials: config.credentials,
                permits,
                retry: config.retry,
                system: OnceCell::new(),
                system_hint: config.system_path,
                manager: OnceCell::new(),
                vendor: racklift_metrics::vendor(config.vendor.as_deref()),
            }),
            fence: None,
            deadline: config.call_deadline,
        })
    }

    /// A handle that sends `fence` on every request. Mutations require one.
    pub fn with_fence(&self, fence: Fence) -> Self {
        Self {
            fence: Some(fence),
            ..self.clone()
        }
    }

    /// A handle whose operations get `deadline` (InsertMedia on Upload BMCs: 20 min).
    pub fn with_deadline(&self, deadline: Duration) -> Self {
        Self {
            deadline,
            ..self.clone()
        }
    }

    /// The server name this client was built for.
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// The fencing token this handle carries.
    pub fn fence(&self) -> Option<Fence> {
        self.fence
    }

    /// The per-operation deadline of this handle.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// The vendor label this client's metrics carry (`unknown` without a vendor hint).
    pub fn vendor(&self) -> &'static str {
        self.inner.vendor
    }

    /// Runs one operation under this handle's deadline, in a span with `server` and `fence`, and records it in
    /// `racklift_bmc_call_duration_seconds` (every outcome) and `racklift_bmc_call_errors_total` (failures, by
    /// class). An operation is what the caller asked for, with its requests and polite retries, so the numbers
    /// match what a deployment step waits for.
    pub(crate) async fn within<T>(
        &self,
        operation: &'static str,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let started = Instant::now();
        // On the heap: an operation's state nests every request it makes, and a caller polling it on a small
        // stack (a test's thread, a debug build) must not carry it inline.
        let result = Box::pin(self.within_deadline(operation, fut)).await;
        let metrics = racklift_metrics::global();
        let vendor = self.inner.vendor;
        metrics
            .bmc_call_duration
            .with_label_values(&[vendor, operation])
            .observe(started.elapsed().as_secs_f64());
        if let Err(error) = &result {
            metrics
                .bmc_call_errors
                .with_label_values(&[vendor, error.class().as_str()])
                .inc();
        }
        result
    }

    async fn within_deadline<T>(
        &self,
        operation: &'static str,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let span = tracing::debug_span!("redfish", operation, server = %self.inner.server, fence = self.fence.map(|f| f.0));
        match tokio::time::timeout(self.deadline, fut).instrument(span).await {
            Ok(result) => result,
            Err(_) => {
                tracing::debug!(
                    server = %self.inner.server,
                    fence = self.fence.map(|f| f.0),
                    operation,
                    deadline_ms = self.deadline.as_millis() as u64,
                    "redfish call deadline exceeded"
                );
                Err(Error::Deadline {
                    operation,
                    deadline: self.deadline,
                })
            }
        }
    }

    /// Sends a request, retrying idempotent ones politely.
    pub(crate) async fn request(&self, req: Req<'_>) -> Result<Reply> {
        if req.method != Method::GET && req.method != Method::HEAD && self.fence.is_none() {
            return Err(Error::NoFence);
        }
        let retry = self.inner.retry;
        if req.idempotency == Idempotency::Once || retry.max_retries == 0 {
            return self.attempt(&req).await;
        }
        let policy = ExponentialBuilder::default()
            .with_min_delay(retry.min_delay)
            .with_max_delay(retry.max_delay)
            .with_max_times(retry.max_retries)
            .with_jitter();
        (|| self.attempt(&req))
            .retry(policy)
            .sleep(tokio::time::sleep)
            .when(|e: &Error| e.is_retryable())
            .notify(|e: &Error, after: Duration| {
                tracing::debug!(server = %self.inner.server, error = %e, retry_in_ms = after.as_millis() as u64, "redfish retry");
            })
            .await
    }

    /// GET and parse.
    pub(crate) async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.get(path).await?.json(path)
    }

    /// GET, keeping headers (ETag).
    pub(crate) async fn get(&self, path: &str) -> Result<Reply> {
        self.request(Req {
            method: Method::GET,
            path,
            body: None,
            if_match: None,
            idempotency: Idempotency::Idempotent,
        })
        .await
    }

    /// POST a JSON body.
    pub(crate) async fn post(&self, path: &str, body: &Value, idempotency: Idempotency) -> Result<Reply> {
        self.request(Req {
            method: Method::POST,
            path,
            body: Some(body),
            if_match: None,
            idempotency,
        })
        .await
    }

    /// PATCH a JSON body, with `If-Match` when an ETag is known. On 412 the resource changed since it was read:
    /// it is read again and the PATCH sent once more with the new tag; when the BMC still shows the tag it just
    /// refused (some reject their own ETags), once more without `If-Match`. On 428 (the BMC requires a
    /// precondition) the tag is read and sent.
    pub(crate) async fn patch(&self, path: &str, body: &Value, etag: Option<&str>) -> Result<Reply> {
        let req = |if_match| Req {
            method: Method::PATCH,
            path,
            body: Some(body),
            if_match,
            idempotency: Idempotency::Idempotent,
        };
        match self.request(req(etag)).await {
            Err(e) if matches!(e.status(), Some(412 | 428)) => {
                let fresh = self.get(path).await.ok().and_then(|r| r.etag());
                match fresh {
                    Some(tag) if etag != Some(tag.as_str()) => {
                        tracing::debug!(
                            server = self.server(),
                            path,
                            "PATCH again with the resource's new ETag"
                        );
                        self.request(req(Some(&tag))).await
                    }
                    _ if e.status() == Some(412) => self.request(req(None)).await,
                    _ => Err(e),
                }
            }
            other => other,
        }
    }

    /// DELETE a resource.
    pub(crate) async fn delete(&self, path: &str) -> Result<Reply> {
        self.request(Req {
            method: Method::DELETE,
            path,
            body: None,
            if_match: None,
            idempotency: Idempotency::Idempotent,
        })
        .await
    }

    /// Resolves a link against the base URL and refuses links to another origin, so a
    /// BMC cannot make the client send its credentials elsewhere.
    fn resolve(&self, path: &str) -> Result<Url> {
        let base = &self.inner.base;
        let url = if path.starts_with('/') && base.path() != "/" && !path.starts_with(base.path()) {
            // A simulator serving many BMCs under prefixes may hand out root-relative links.
            base.join(path.trim_start_matches('/'))
        } else {
            base.join(path)
        }
        .map_err(|e| Error::Refused {
            what: format!("link {path:?}: {e}"),
        })?;
        if url.origin() != base.origin() {
            return Err(Error::Refused {
                what: format!("link {path:?} leaves the BMC's origin"),
            });
        }
        Ok(url)
    }

    /// One HTTP exchange under the BMC's permit. The permit goes into the exchange, which gives it back only
    /// once the exchange's connection is gone (see `transport`), so a call dropped at its deadline keeps the BMC's
    /// slot until the BMC has closed the abandoned request's connection.
    async fn attempt(&self, req: &Req<'_>) -> Result<Reply> {
        let url = self.resolve(req.path)?;
        let method = req.method.as_str();
        let request = self.build(req, &url).map_err(|source| Error::Transport {
            method: method.to_owned(),
            path: req.path.to_owned(),
            source,
        })?;
        let permit = self
            .inner
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::Config {
                reason: "per-BMC limiter closed".into(),
            })?;
        let started = Instant::now();
        let outcome = exchange(&self.inner.endpoint, request, permit).await;
        let duration_ms = started.elapsed().as_millis() as u64;
        let fence = self.fence.map(|f| f.0);
        let server = self.inner.server.as_str();
        match outcome {
            Ok(answer) => {
                let reply = Reply::from_answer(answer);
                tracing::debug!(
                    server,
                    method,
                    path = req.path,
                    bmc_status = reply.status.as_u16(),
                    duration_ms,
                    fence,
                    "redfish request"
                );
                reply.checked(method, req.path)
            }
            Err(source) => {
                tracing::debug!(server, method, path = req.path, duration_ms, fence, error = %source, "redfish request failed");
                let (method, path) = (method.to_owned(), req.path.to_owned());
                if is_certificate_error(source.as_ref()) {
                    Err(Error::Tls { method, path, source })
                } else {
                    Err(Error::Transport { method, path, source })
                }
            }
        }
    }

    /// The HTTP request for `req` at `url`: origin-form target, `Host`, Basic auth (marked sensitive, so it is
    /// never printed), JSON `Accept`, the fence and `If-Match` when set, and a JSON body. Fails only on a
    /// header value that is not one (an ETag with control characters), which reqwest also reported as a
    /// transport failure.
    fn build(&self, req: &Req<'_>, url: &Url) -> std::result::Result<hyper::Request<Full<Bytes>>, BoxError> {
        let target = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        };
        let creds = &self.inner.credentials;
        let basic = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            creds.username,
            creds.password.expose()
        ));
        let mut authorization = HeaderValue::try_from(format!("Basic {basic}"))?;
        authorization.set_sensitive(true);
        let mut builder = hyper::Request::builder()
            .method(req.method.clone())
            .uri(target)
            .header(header::HOST, self.inner.endpoint.host_header())
            .header(header::AUTHORIZATION, authorization)
            .header(header::ACCEPT, "application/json");
        if let Some(fence) = self.fence {
            builder = builder.header(FENCE_HEADER, fence.0);
        }
        if let Some(etag) = req.if_match {
            builder = builder.header(header::IF_MATCH, etag);
        }
        let body = match req.body {
            Some(body) => {
                builder = builder.header(header::CONTENT_TYPE, "application/json");
                Bytes::from(serde_json::to_vec(body)?)
            }
            None => Bytes::new(),
        };
        Ok(builder.body(Full::new(body))?)
    }

    /// The URI of the ComputerSystem this client manages (see [`BmcConfig::system_path`]), discovered once per
    /// client. What the deploy pre-flight calls to refuse a BMC whose System is ambiguous or misnamed.
    pub async fn system_uri(&self) -> Result<String> {
        self.within("system_uri", self.system_path()).await
    }

    /// The managed ComputerSystem's URI: the configured member, else the only member of `Systems`, else the only
    /// one that could be the host. Discovered once per client.
    pub(crate) async fn system_path(&self) -> Result<String> {
        self.inner
            .system
            .get_or_try_init(|| discovery::resolve(self, self.inner.system_hint.as_deref()))
            .await
            .cloned()
    }

    /// The manager of the system: `Links.ManagedBy[0]`, else the first of `Managers`.
    /// `None` when the BMC lists no manager.
    pub(crate) async fn manager_path(&self) -> Result<Option<String>> {
        self.inner
            .manager
            .get_or_try_init(|| async {
                let system_path = self.system_path().await?;
                let system: Value = self.get_json(&system_path).await?;
                if let Some(link) = system
                    .pointer("/Links/ManagedBy/0/@odata.id")
                    .and_then(Value::as_str)
                {
                    return Ok(Some(link.to_owned()));
                }
                let root: crate::model::ServiceRoot = self.get_json("/redfish/v1/").await?;
                match root.managers {
                    Some(managers) => first_member(self, &managers.odata_id, "Manager").await.map(Some),
                    None => Ok(None),
                }
            })
            .await
            .cloned()
    }
}

async fn first_member(client: &BmcClient, collection: &str, what: &str) -> Result<String> {
    let members: crate::model::Collection = client.get_json(collection).await?;
    members
        .members
        .into_iter()
        .next()
        .map(|l| l.odata_id)
        .ok_or_else(|| Error::Unsupported {
            what: format!("{what} (empty collection {collection})"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::TlsMode;

    fn client(base: &str) -> BmcClient {
        let config = BmcConfig::new(
            "srv-1",
            base,
            Credentials::new("root", "calvin-secret"),
            TlsMode::WebPkiRoots,
        );
        BmcClient::new(config).expect("client")
    }

    #[test]
    fn debug_redacts_the_password() {
        let c = client("https://10.0.0.1");
        let debug = format!("{c:?}");
        assert!(!debug.contains("calvin-secret"), "{debug}");
        assert!(debug.contains("srv-1"));
    }

    #[test]
    fn resolves_links_and_refuses_other_origins() {
        let c = client("https://10.0.0.1:8443");
        assert_eq!(
            c.resolve("/redfish/v1/Systems/1").expect("ok").as_str(),
            "https://10.0.0.1:8443/redfish/v1/Systems/1"
        );
        assert!(c.resolve("https://evil.example/redfish/v1").is_err());
        let prefixed = client("http://127.0.0.1:9000/bmc/7");
        assert_eq!(
            prefixed.resolve("/redfish/v1/").expect("ok").as_str(),
            "http://127.0.0.1:9000/bmc/7/redfish/v1/"
        );
        assert_eq!(
            prefixed
                .resolve("/bmc/7/redfish/v1/Systems/1")
                .expect("ok")
                .as_str(),
            "http://127.0.0.1:9000/bmc/7/redfish/v1/Systems/1"
        );
    }

    #[test]
    fn rejects_bad_base_urls() {
        let bad = BmcConfig::new("s", "ftp://x", Credentials::new("u", "p"), TlsMode::WebPkiRoots);
        assert!(matches!(BmcClient::new(bad), Err(Error::Config { .. })));
    }

    #[tokio::test]
    async fn mutations_need_a_fence() {
        let c = client("https://10.0.0.1");
        let err = c
            .post("/redfish/v1/x", &serde_json::json!({}), Idempotency::Once)
            .await
            .expect_err("no fence");
        assert!(matches!(err, Error::NoFence));
        assert_eq!(c.with_fence(Fence(7)).fence(), Some(Fence(7)));
    }
}
