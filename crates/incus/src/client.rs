//! The client core: envelopes, the per-call deadline, the per-server slot, the fencing header, polite retries of
//! GETs and tracing. The typed operations live in `api.rs` and go through [`IncusClient::call`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, header};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;
use tokio_rustls::TlsConnector;
use tracing::Instrument;
use url::Url;

use crate::config::{FENCE_HEADER, Fence, IncusConfig, RetryPolicy};
use crate::error::{Error, Result};
use crate::limiter::Slot;
use crate::tls::{CertPin, PinState, client_config};
use crate::transport::{Answer, Endpoint, Failure, TlsEndpoint, exchange};

/// A client for one IncusOS server's Incus API. Cheap to clone; clones share the observed pin and the server's
/// slot.
#[derive(Clone)]
pub struct IncusClient {
    inner: Arc<Inner>,
    fence: Option<Fence>,
}

struct Inner {
    server: String,
    base: Url,
    endpoint: Endpoint,
    slot: Arc<Slot>,
    call_deadline: Duration,
    retry: RetryPolicy,
    pins: Option<Arc<PinState>>,
}

impl fmt::Debug for IncusClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IncusClient")
            .field("server", &self.inner.server)
            .field("base", &self.inner.base.as_str())
            .field("fence", &self.fence)
            .finish()
    }
}

/// A decoded success envelope.
#[derive(Debug)]
pub(crate) enum Reply {
    /// `type: sync`: the resource is in `metadata`.
    Sync(Value),
    /// `type: async`: an operation was created at `operation`.
    Async { operation: String },
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    operation: String,
    #[serde(default)]
    metadata: Value,
    #[serde(default)]
    error: String,
    #[serde(default)]
    error_code: u16,
}

impl Reply {
    /// The sync metadata as `T`; an async answer where a resource was expected is a protocol error.
    pub fn into_sync<T: DeserializeOwned>(self, path: &str) -> Result<T> {
        match self {
            Self::Sync(metadata) => serde_json::from_value(metadata).map_err(|source| Error::Protocol {
                path: path.to_owned(),
                what: "metadata is not the resource expected".into(),
                source: Some(source),
            }),
            Self::Async { .. } => Err(Error::Protocol {
                path: path.to_owned(),
                what: "async answer where a sync one was expected".into(),
                source: None,
            }),
        }
    }
}

/// Turns an answer into a reply or an error: a non-2xx status or an error envelope is [`Error::Http`] with the
/// envelope's message; a body that is no envelope is [`Error::Protocol`].
pub(crate) fn decode(method: &'static str, path: &str, answer: &Answer) -> Result<Reply> {
    let parsed = serde_json::from_slice::<Envelope>(&answer.body);
    let http = |status: u16, message: String| Error::Http {
        method,
        path: path.to_owned(),
        status,
        message,
    };
    if !(200..300).contains(&answer.status) {
        let message = match &parsed {
            Ok(env) if !env.error.is_empty() => env.error.clone(),
            // A proxy's page or an empty body: its start is all there is to show.
            _ => String::from_utf8_lossy(&answer.body).chars().take(200).collect(),
        };
        return Err(http(answer.status, message));
    }
    let env = parsed.map_err(|source| Error::Protocol {
        path: path.to_owned(),
        what: "body is not an Incus envelope".into(),
        source: Some(source),
    })?;
    match env.kind.as_str() {
        "sync" => Ok(Reply::Sync(env.metadata)),
        "async" if !env.operation.is_empty() => Ok(Reply::Async {
            operation: env.operation,
        }),
        "error" => {
            let status = if env.error_code == 0 {
                answer.status
            } else {
                env.error_code
            };
            Err(http(status, env.error))
        }
        other => Err(Error::Protocol {
            path: path.to_owned(),
            what: format!("envelope type {other:?}"),
            source: None,
        }),
    }
}

/// The exchange of one attempt and the server's slot, in that order: struct fields drop in declaration order, so
/// when a deadline drops this future the exchange (and with it the connection's socket) is gone before the slot
/// is released, and the next caller cannot reach the server while a timed-out call's connection is still open.
struct Permitted<F> {
    exchange: Pin<Box<F>>,
    _slot: OwnedSemaphorePermit,
}

impl<F: Future> Future for Permitted<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.get_mut().exchange.as_mut().poll(cx)
    }
}

/// A request of one call, reusable across retries.
pub(crate) struct Req {
    pub method: Method,
    pub url: Url,
    pub body: Option<Value>,
}

impl Req {
    /// The path and query, for errors and tracing.
    fn path(&self) -> String {
        match self.url.query() {
            Some(q) => format!("{}?{q}", self.url.path()),
            None => self.url.path().to_owned(),
        }
    }
}

impl IncusClient {
    /// Builds a client. Fails only on an unusable configuration: a bad URL, `http://` without the opt-in, an
    /// unreadable client identity. Nothing is sent.
    pub fn new(config: IncusConfig) -> Result<Self> {
        let base = Url::parse(&config.base_url).map_err(|e| Error::Config {
            reason: format!("base URL {:?}: {e}", config.base_url),
        })?;
        let (authority, name) = Endpoint::parse(&base)?;
        let (tls, pins) = match base.scheme() {
            "https" => {
                let pins = Arc::new(PinState::new(config.trust));
                let tls = client_config(&config.identity, pins.clone(), &config.server)?;
                let endpoint = TlsEndpoint {
                    connector: TlsConnector::from(Arc::new(tls)),
                    name,
                    pins: pins.clone(),
                };
                (Some(endpoint), Some(pins))
            }
            "http" if config.allow_plain_http => (None, None),
            "http" => return Err(Error::PlainHttp { url: config.base_url }),
            other => {
                return Err(Error::Config {
                    reason: format!("base URL {:?}: scheme {other:?}, need https", config.base_url),
                });
            }
        };
        let slot = config.limiter.slot(&config.server);
        Ok(Self {
            inner: Arc::new(Inner {
                endpoint: Endpoint {
                    authority,
                    tls,
                    connect_timeout: config.connect_timeout,
                },
                server: config.server,
                base,
                slot,
                call_deadline: config.call_deadline,
                retry: config.retry,
                pins,
            }),
            fence: None,
        })
    }

    /// A handle that sends `fence` in [`FENCE_HEADER`] on every mutation.
    pub fn with_fence(&self, fence: Fence) -> Self {
        Self {
            fence: Some(fence),
            ..self.clone()
        }
    }

    /// The fencing token this handle carries.
    pub fn fence(&self) -> Option<Fence> {
        self.fence
    }

    /// The server name this client was built for.
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// The per-call deadline.
    pub fn call_deadline(&self) -> Duration {
        self.inner.call_deadline
    }

    /// The SHA-256 of the certificate the server presented, once a handshake has completed (`None` before, and
    /// always in the insecure mode and over plain HTTP). Under first use this is what the caller stores and pins
    /// from then on.
    pub fn observed_pin(&self) -> Option<CertPin> {
        self.inner.pins.as_ref().and_then(|p| p.observed())
    }

    /// A URL on the server from a fixed path and percent-encoded segments.
    pub(crate) fn url(&self, path: &str, segments: &[&str]) -> Url {
        let mut url = self.inner.base.clone();
        url.set_query(None);
        url.set_fragment(None);
        url.set_path(path);
        if !segments.is_empty()
            && let Ok(mut parts) = url.path_segments_mut()
        {
            parts.pop_if_empty().extend(segments);
        }
        url
    }

    /// Runs one operation under `deadline`, in a span with `server` and `fence`. The deadline covers waiting for
    /// the server's slot, connecting and retrying.
    pub(crate) async fn within<T>(
        &self,
        operation: &'static str,
        deadline: Duration,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let fence = self.fence.map(|f| f.0);
        let server = self.inner.server.as_str();
        let span = tracing::debug_span!("incus", operation, server, fence);
        let started = Instant::now();
        let result = match tokio::time::timeout(deadline, fut).instrument(span).await {
            Ok(result) => result,
            Err(_) => Err(Error::Deadline { operation, deadline }),
        };
        let duration_ms = started.elapsed().as_millis() as u64;
        match &result {
            Ok(_) => tracing::debug!(server, operation, fence, duration_ms, status = "ok", "incus call"),
            Err(e) => tracing::debug!(
                server,
                operation,
                fence,
                duration_ms,
                status = e.class().as_str(),
                error = %e,
                "incus call failed"
            ),
        }
        result
    }

    /// Sends a request and decodes its envelope, retrying GETs politely; POSTs go exactly once.
    pub(crate) async fn send(&self, req: Req) -> Result<Reply> {
        let retry = self.inner.retry;
        if req.method != Method::GET || retry.max_retries == 0 {
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
            .when(|e: &Error| {
                matches!(
                    e.class(),
                    crate::ErrorClass::Transport | crate::ErrorClass::Busy | crate::ErrorClass::Server
                )
            })
            .notify(|e: &Error, after: Duration| {
                tracing::debug!(
                    server = %self.inner.server,
                    error = %e,
                    retry_in_ms = after.as_millis() as u64,
                    "incus retry"
                );
            })
            .await
    }

    /// One exchange under the server's slot.
    async fn attempt(&self, req: &Req) -> Result<Reply> {
        let method: &'static str = if req.method == Method::GET { "GET" } else { "POST" };
        let path = req.path();
        let request = self.build(req, &path)?;
        let slot = self.inner.slot.acquire().await;
        let started = Instant::now();
        let outcome = Permitted {
            exchange: Box::pin(exchange(&self.inner.endpoint, request)),
            _slot: slot,
        }
        .await;
        let duration_ms = started.elapsed().as_millis() as u64;
        let server = self.inner.server.as_str();
        let fence = self.fence.map(|f| f.0);
        match outcome {
            Ok(answer) => {
                tracing::debug!(
                    server,
                    method,
                    path,
                    status = answer.status,
                    duration_ms,
                    fence,
                    "incus request"
                );
                decode(method, &path, &answer)
            }
            Err(failure) => {
                let error = match failure {
                    Failure::Transport(source) => Error::Transport { method, path, source },
                    Failure::Tls(source) => Error::Tls { method, path, source },
                    Failure::Pin { expected, presented } => Error::PinMismatch { expected, presented },
                };
                tracing::debug!(server, method, duration_ms, fence, status = error.class().as_str(), error = %error, "incus request failed");
                Err(error)
            }
        }
    }

    fn build(&self, req: &Req, path: &str) -> Result<hyper::Request<Full<Bytes>>> {
        let mut builder = hyper::Request::builder()
            .method(req.method.clone())
            .uri(path)
            .header(header::HOST, &self.inner.endpoint.authority)
            .header(header::ACCEPT, "application/json")
            .header(
                header::USER_AGENT,
                concat!("racklift-incus/", env!("CARGO_PKG_VERSION")),
            );
        if req.method != Method::GET
            && let Some(fence) = self.fence
        {
            builder = builder.header(FENCE_HEADER, fence.0);
        }
        let body = match &req.body {
            Some(value) => {
                builder = builder.header(header::CONTENT_TYPE, "application/json");
                Bytes::from(serde_json::to_vec(value).map_err(|e| Error::Config {
                    reason: format!("request body: {e}"),
                })?)
            }
            None => Bytes::new(),
        };
        builder.body(Full::new(body)).map_err(|e| Error::Config {
            reason: format!("request {path}: {e}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status,
            body: Bytes::from(body.to_owned()),
        }
    }

    #[test]
    fn decodes_envelopes() {
        let sync = decode(
            "GET",
            "/1.0/cluster",
            &answer(
                200,
                r#"{"type":"sync","status":"Success","status_code":200,"metadata":{"a":1}}"#,
            ),
        )
        .expect("sync");
        assert!(matches!(sync, Reply::Sync(ref m) if m["a"] == 1));
        let r#async = decode(
            "POST",
            "/x",
            &answer(
                202,
                r#"{"type":"async","status":"Operation created","status_code":100,"operation":"/1.0/operations/abc","metadata":{}}"#,
            ),
        )
        .expect("async");
        assert!(matches!(r#async, Reply::Async { ref operation } if operation == "/1.0/operations/abc"));
    }

    #[test]
    fn error_answers_keep_the_envelope_message() {
        let cases = [
            (
                403,
                r#"{"type":"error","error":"not authorized","error_code":403}"#,
                403,
                "not authorized",
            ),
            (
                200,
                r#"{"type":"error","error":"odd","error_code":500}"#,
                500,
                "odd",
            ),
            (502, "<html>bad gateway</html>", 502, "<html>bad gateway</html>"),
        ];
        for (status, body, want_status, want_message) in cases {
            let err = decode("GET", "/x", &answer(status, body)).expect_err(body);
            assert_eq!(err.status(), Some(want_status), "{body}");
            assert_eq!(err.message(), Some(want_message), "{body}");
        }
        for body in ["not json", r#"{"type":"weird"}"#, r#"{"type":"async"}"#] {
            let err = decode("GET", "/x", &answer(200, body)).expect_err(body);
            assert_eq!(err.class(), crate::ErrorClass::Protocol, "{body}");
        }
    }
}
