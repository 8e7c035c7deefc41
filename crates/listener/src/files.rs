//! A plain-HTTP/1.1 server for routers whose answers are mostly the bytes of a file: the media listener, where
//! BMCs read installation images by the gigabyte.
//!
//! hyper writes a body from memory, so serving a file through it costs two copies per byte (the page cache into a
//! buffer, the buffer into the socket) and most of the server's CPU. Here the router still decides every answer
//! (routing, status, headers, errors, middleware), but an answer carrying a [`FileBody`] extension has its body
//! written by this server: the file's bytes with `sendfile(2)`, straight from the page cache to the socket, and
//! only the bytes the source patches (a deployment's seed over its image) read, patched and written from memory.
//!
//! The connection handling is deliberately small: requests without bodies (a request announcing one is answered,
//! then its connection closed, since the body is never read), keep-alive and pipelining, HTTP/1.0 and 1.1. A head
//! whose framing RFC 9112 refuses (a `Transfer-Encoding`, differing `Content-Length`s, obsolete line folding: see
//! `head`) is answered 400 in the API's error shape and its connection closed, so no byte after it is taken for a
//! request. The limits are those of [`crate::serve`]: the header read timeout (also between requests), the
//! connection cap with its per-peer share and early close of silent connections ([`crate::admission`]), and
//! graceful shutdown; and a client that takes no byte for [`SEND_STALL_TIMEOUT`] is closed.
//!
//! Like nginx's `sendfile on` without thread pools, a read of a page not in the cache waits for the disk on the
//! runtime thread that sends it; an image read by a rack of BMCs stays cached.

use std::future::Future;
use std::ops::Range;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::{self, HeaderMap, Method, Request, Response, StatusCode, header};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::Limits;
use crate::admission::{Admission, Admitted};

mod head;

use head::{BadHead, HeadParts, MAX_HEAD_BYTES, Parsed, parse_head};

/// A client that accepts no byte of an answer for this long is gone: its connection is closed.
pub const SEND_STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest wait for a closing client to finish sending (see `Connection::linger`), at most the header timeout.
const LINGER: Duration = Duration::from_secs(2);

/// Most bytes read and dropped from a closing client.
const LINGER_BYTES: usize = 1024 * 1024;

/// Bytes handed to one `sendfile` call: large enough that the syscall's cost vanishes, small enough that one
/// connection cannot hold a runtime thread for long.
const SEND_CHUNK: usize = 4 * 1024 * 1024;

/// Most bytes of a non-file answer (an error's JSON): what the router answers here is small.
const MAX_BUFFERED_BODY: usize = 1024 * 1024;

/// One piece of a file answer's body, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// Bytes made in memory (a multipart boundary and its headers).
    Bytes(Bytes),
    /// `len` bytes of the source's file from `offset`.
    File { offset: u64, len: u64 },
}

/// The file behind a [`FileBody`], and what is done to its bytes on the way out.
pub trait FileSource: Send + Sync + 'static {
    /// The open file: read where the answer was made, so what is sent is the file that was checked.
    fn file(&self) -> &std::fs::File;
    /// The byte range of the file this source changes on the way out; those bytes are read, handed to
    /// [`FileSource::patch`] and written, every other byte is sent as the file holds it.
    fn patched(&self) -> Option<Range<u64>>;
    /// Changes `buf`, the file's bytes from `offset`.
    fn patch(&self, offset: u64, buf: &mut [u8]);
    /// `len` bytes from `offset` were handed to the connection.
    fn sent(&self, offset: u64, len: u64);
}

impl Part {
    /// Its bytes in the body.
    pub fn len(&self) -> u64 {
        match self {
            Part::Bytes(bytes) => bytes.len() as u64,
            Part::File { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The response extension that has this server write the body: `parts`, in order, their lengths adding up to the
/// answer's `Content-Length`. The response's own body is then not read (an answer made for hyper as well carries
/// both).
#[derive(Clone)]
pub struct FileBody {
    pub source: Arc<dyn FileSource>,
    pub parts: Arc<[Part]>,
}

/// Serves `app` over plain HTTP on `listener` within `limits` until `shutdown` completes, writing the bodies of
/// [`FileBody`] answers from their files; then lets answers in progress finish. Handlers see the peer as
/// `ConnectInfo<SocketAddr>`, as with [`crate::serve`].
pub async fn serve_files(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let admission = Admission::new(limits);
    let tracker = TaskTracker::new();
    let stopping = CancellationToken::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let admitted = tokio::select! {
            admitted = admission.admit(peer.ip().to_canonical()) => admitted,
            () = &mut shutdown => break,
        };
        // Past the peer's share: closed at once (dropped), so it never waits in front of other clients.
        let Some(admitted) = admitted else { continue };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let stopping = stopping.clone();
        tracker.spawn(async move {
            let connection = Connection {
                stream,
                peer,
                app,
                limits,
                stopping,
                admitted,
                buf: Vec::with_capacity(4096),
            };
            // A client that hangs up, stalls or sends garbage is no error of the server's.
            if let Err(error) = connection.run().await {
                tracing::debug!(%peer, %error, "media connection ended");
            }
        });
    }
    drop(listener);
    stopping.cancel();
    tracker.close();
    tracker.wait().await;
    Ok(())
}

/// What the head of one request says, beside the request handed to the router.
struct Head {
    request: Request<Body>,
    keep_alive: bool,
}

/// What the client sent next.
enum Next {
    Request(Box<Head>),
    /// The connection closed between requests.
    Closed,
    /// A head that cannot be served: answered, then the connection closed.
    Bad(BadHead),
}

struct Connection {
    stream: TcpStream,
    peer: std::net::SocketAddr,
    app: Router,
    limits: Limits,
    stopping: CancellationToken,
    /// The connection's slot, and whether it has completed a request (see [`crate::admission`]).
    admitted: Admitted,
    /// Bytes read and not yet parsed: the start of the next request of a pipelining client.
    buf: Vec<u8>,
}

impl Connection {
    async fn run(mut self) -> std::io::Result<()> {
        let admitted = self.admitted.clone();
        loop {
            let (stopping, idle) = (self.stopping.clone(), self.buf.is_empty());
            let next = tokio::select! {
                biased;
                // Chosen to make room before its first request (`admission`): closed without an answer.
                () = admitted.evicted() => return Ok(()),
                next = tokio::time::timeout(self.limits.header_read_timeout, self.read_head()) => next,
                // Idle between requests when the server stops: closed now. A request under way is answered.
                () = stopping.cancelled(), if idle => return Ok(()),
            };
            let head = match next {
                Err(_elapsed) => return Ok(()),
                Ok(next) => match next? {
                    Next::Request(head) => *head,
                    Next::Closed => return Ok(()),
                    Next::Bad(bad) => {
                        let mut answer = response_head(bad.status(), &json(), Some(bad.body().len()), false);
                        answer.extend_from_slice(&bad.body());
                        send(self.stream.write_all(&answer)).await?;
                        // Nothing after a refused head is read as a request.
                        return self.linger().await;
                    }
                },
            };
            if !admitted.prove() {
                return Ok(());
            }
            let keep_alive = head.keep_alive && !self.stopping.is_cancelled();
            let method = head.request.method().clone();
            let response = match self.app.clone().oneshot(head.request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            self.answer(&method, response, keep_alive).await?;
            if !keep_alive {
                return self.linger().await;
            }
        }
    }

    /// Closes the connection after its last answer without discarding that answer: the write side is shut (the
    /// client reads the answer, then the end), and what the client still sends (a body this server never reads)
    /// is read and dropped for up to [`LINGER`], since closing a socket with unread bytes resets the connection,
    /// and a reset can destroy an answer not yet delivered.
    async fn linger(mut self) -> std::io::Result<()> {
        self.stream.shutdown().await?;
        let drain = async {
            let mut sink = [0u8; 16 * 1024];
            let mut left = LINGER_BYTES;
            while left > 0 {
                match self.stream.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => left = left.saturating_sub(n),
                }
            }
        };
        let _ = tokio::time::timeout(LINGER.min(self.limits.header_read_timeout), drain).await;
        Ok(())
    }

    /// Reads until a whole request head is buffered and parses it.
    async fn read_head(&mut self) -> std::io::Result<Next> {
        loop {
            match parse_head(&self.buf) {
                Parsed::Complete(consumed, parts) => {
                    self.buf.drain(..consumed);
                    return Ok(Next::Request(Box::new(self.head_of(parts))));
                }
                Parsed::Bad(bad) => return Ok(Next::Bad(bad)),
                Parsed::Partial if self.buf.len() >= MAX_HEAD_BYTES => {
                    return Ok(Next::Bad(BadHead::TooLarge));
                }
                Parsed::Partial => {}
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).await?;
            if n == 0 {
                // Between requests a close is the client's way to end; inside a head it is a broken request.
                return if self.buf.is_empty() {
                    Ok(Next::Closed)
                } else {
                    Err(std::io::ErrorKind::UnexpectedEof.into())
                };
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn head_of(&self, parts: Box<HeadParts>) -> Head {
        let HeadParts {
            method,
            uri,
            http10,
            headers,
            has_body,
        } = *parts;
        let connection = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|t| t.trim().to_ascii_lowercase())
            .collect::<Vec<_>>();
        let wants = |token: &str| connection.iter().any(|t| t == token);
        // A body is never read here, so after a request that announces one the connection cannot be reused.
        let keep_alive = !has_body
            && if http10 {
                wants("keep-alive")
            } else {
                !wants("close")
            };
        let mut request = Request::new(Body::empty());
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        *request.version_mut() = if http10 {
            http::Version::HTTP_10
        } else {
            http::Version::HTTP_11
        };
        *request.headers_mut() = headers;
        request.extensions_mut().insert(ConnectInfo(self.peer));
        Head { request, keep_alive }
    }

    /// Writes `response` to the client: its file parts from the file, any other body from memory.
    async fn answer(
        &mut self,
        method: &Method,
        response: Response<Body>,
        keep_alive: bool,
    ) -> std::io::Result<()> {
        let (parts, body) = response.into_parts();
        let bodiless = method == Method::HEAD
            || parts.status.is_informational()
            || parts.status == StatusCode::NO_CONTENT
            || parts.status == StatusCode::NOT_MODIFIED;
        let file = parts.extensions.get::<FileBody>().cloned();
        match file {
            Some(file) => {
                drop(body);
                let head = response_head(parts.status, &parts.headers, None, keep_alive);
                send(self.stream.write_all(&head)).await?;
                if !bodiless {
                    self.send_parts(&file).await?;
                }
            }
            None => {
                let bytes = axum::body::to_bytes(body, MAX_BUFFERED_BODY)
                    .await
                    .map_err(std::io::Error::other)?;
                let length = (!parts.headers.contains_key(header::CONTENT_LENGTH)).then_some(bytes.len());
                let mut head = response_head(parts.status, &parts.headers, length, keep_alive);
                if !bodiless {
                    head.extend_from_slice(&bytes);
                }
                send(self.stream.write_all(&head)).await?;
            }
        }
        Ok(())
    }

    async fn send_parts(&mut self, body: &FileBody) -> std::io::Result<()> {
        for part in body.parts.iter() {
            match part {
                Part::Bytes(bytes) => send(self.stream.write_all(bytes)).await?,
                Part::File { offset, len } => {
                    let end = offset + len;
                    for (range, patched) in split_patched(*offset..end, body.source.patched()) {
                        if patched {
                            self.send_patched(body.source.as_ref(), range).await?;
                        } else {
                            self.send_file(body.source.as_ref(), range).await?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// `range` of the file with `sendfile`, as the socket takes it.
    async fn send_file(&mut self, source: &dyn FileSource, range: Range<u64>) -> std::io::Result<()> {
        let mut offset = range.start;
        while offset < range.end {
            let count = chunk(offset, range.end);
            let stream = &self.stream;
            let sent = send(stream.async_io(Interest::WRITABLE, || {
                let mut at = offset;
                rustix::fs::sendfile(stream.as_fd(), source.file().as_fd(), Some(&mut at), count)
                    .map_err(std::io::Error::from)
            }))
            .await?;
            if sent == 0 {
                // The file shrank under the answer: the promised length cannot be kept.
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the file is shorter than when the answer began",
                ));
            }
            source.sent(offset, sent as u64);
            offset += sent as u64;
        }
        Ok(())
    }

    /// `range` of the file read, patched by the source and written: the few bytes that differ from the file.
    async fn send_patched(&mut self, source: &dyn FileSource, range: Range<u64>) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let mut offset = range.start;
        while offset < range.end {
            let want = chunk(offset, range.end);
            let mut buf = vec![0u8; want];
            let mut filled = 0;
            while filled < want {
                match source.file().read_at(&mut buf[filled..], offset + filled as u64) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            if filled == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the file is shorter than when the answer began",
                ));
            }
            buf.truncate(filled);
            source.patch(offset, &mut buf);
            send(self.stream.write_all(&buf)).await?;
            source.sent(offset, filled as u64);
            offset += filled as u64;
        }
        Ok(())
    }
}

/// Bytes to move in one call from `offset` towards `end`: at most [`SEND_CHUNK`].
fn chunk(offset: u64, end: u64) -> usize {
    usize::try_from(end - offset)
        .unwrap_or(SEND_CHUNK)
        .min(SEND_CHUNK)
}

/// `write` bounded by [`SEND_STALL_TIMEOUT`].
async fn send<T>(write: impl Future<Output = std::io::Result<T>>) -> std::io::Result<T> {
    tokio::time::timeout(SEND_STALL_TIMEOUT, write)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "the client took no bytes"))?
}

/// `range` cut where it meets `patched`: the pieces in order, each marked whether it lies in the patched range.
fn split_patched(range: Range<u64>, patched: Option<Range<u64>>) -> Vec<(Range<u64>, bool)> {
    let Some(p) = patched.filter(|p| p.start < range.end && range.start < p.end) else {
        return vec![(range, false)];
    };
    let inner = range.start.max(p.start)..range.end.min(p.end);
    let mut pieces = Vec::with_capacity(3);
    if range.start < inner.start {
        pieces.push((range.start..inner.start, false));
    }
    pieces.push((inner.clone(), true));
    if inner.end < range.end {
        pieces.push((inner.end..range.end, false));
    }
    pieces
}

/// The status line and headers of an answer; `length` sets `Content-Length` when the headers lack it.
fn response_head(
    status: StatusCode,
    headers: &HeaderMap,
    length: Option<usize>,
    keep_alive: bool,
) -> Vec<u8> {
    let mut head = Vec::with_capacity(512);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        if name == header::CONNECTION || name == header::TRANSFER_ENCODING {
            continue;
        }
        line(&mut head, name.as_str().as_bytes(), value.as_bytes());
    }
    if let Some(length) = length {
        line(&mut head, b"content-length", length.to_string().as_bytes());
    }
    if !headers.contains_key(header::DATE) {
        let date = httpdate::fmt_http_date(std::time::SystemTime::now());
        line(&mut head, b"date", date.as_bytes());
    }
    if !keep_alive {
        line(&mut head, b"connection", b"close");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// The headers of a JSON answer.
fn json() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    headers
}

fn line(head: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    head.extend_from_slice(name);
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests;
