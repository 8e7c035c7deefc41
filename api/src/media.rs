//! `GET/HEAD /media/{secret}/{file}`: the installation image, with HTTP Range (single and multipart) because
//! BMCs read virtual media block by block. Every byte actually sent is recorded per deployment and client
//! address: the install-idle signal of a `force` deployment is computed from those distinct bytes.
//!
//! What is served is the composed image: the catalog image with the deployment's seed archive laid over the start
//! of partition 2 (`racklift_media`), every other byte as the file holds it. No per-deployment copy is made; the
//! ETag names the image's and the seed's digests, so it is stable for one deployment and differs between two.
//!
//! No bearer auth: a BMC cannot send one. The 256-bit secret in the path is the credential.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{Extensions, HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, BoxStream, StreamExt};
use http_range_header::RangeUnsatisfiableError;
use racklift_listener::files::{FileBody, FileSource, Part};
use racklift_media::{Overlay, SeedArchive};
use racklift_store::{MediaRead, Store, StoreError};
use tokio_util::sync::CancellationToken;

use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::media_targets::Resolved;

/// Bytes per file read: each is a hop to the blocking pool, so fewer, larger reads cost less per byte served.
const READ_CHUNK: usize = 1024 * 1024;

/// More ranges than this in one request is abuse, not a BMC.
pub const MAX_RANGES: usize = 64;

/// Unflushed `[start, end)` ranges by (deployment id, client address).
type Buffer = HashMap<(i64, String), Vec<(u64, u64)>>;

/// Ranges served since the last flush, coalesced per (deployment, source) while they arrive in order.
#[derive(Clone, Default)]
pub struct Recorder {
    inner: Arc<Mutex<Buffer>>,
}

impl Recorder {
    fn record(&self, deployment_id: i64, source: &str, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let ranges = map.entry((deployment_id, source.to_owned())).or_default();
        match ranges.last_mut() {
            Some(last) if last.1 == start => last.1 = end,
            _ => ranges.push((start, end)),
        }
    }

    fn take(&self) -> Vec<MediaRead> {
        let map = std::mem::take(&mut *self.inner.lock().unwrap_or_else(|p| p.into_inner()));
        let at = chrono::Utc::now();
        map.into_iter()
            .map(|((deployment_id, source), ranges)| MediaRead {
                deployment_id,
                source,
                ranges,
                at,
            })
            .collect()
    }

    /// Writes everything buffered; on failure the batch is put back so the next flush retries it.
    pub async fn flush(&self, store: &Store, max_ranges: usize) -> Result<(), StoreError> {
        let batch = self.take();
        if batch.is_empty() {
            return Ok(());
        }
        if let Err(e) = store.record_media_reads(&batch, max_ranges).await {
            for r in batch {
                for (s, e) in r.ranges {
                    self.record(r.deployment_id, &r.source, s, e);
                }
            }
            return Err(e);
        }
        Ok(())
    }
}

/// Flushes every `media.flush_interval` until `shutdown`.
pub async fn flush_loop(state: AppState, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(state.config.media.flush_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(error) = state.flush_media_reads().await {
            tracing::warn!(%error, "media read flush failed; retrying at the next tick");
        }
    }
}

/// What the media URL with `secret` leads to in the database: `None` for an unknown or finished deployment, or
/// one without a seed.
async fn resolve(state: &AppState, secret: &str) -> Result<Option<Resolved>, Unanswered> {
    let Some(target) = state
        .store
        .media_target(secret)
        .await
        .map_err(Unanswered::Failed)?
    else {
        return Ok(None);
    };
    if target.finished {
        return Ok(None);
    }
    let (Some(seed_offset), Some(seed)) = (target.seed_offset, target.seed_archive) else {
        // Made before media carried seeds: a server installing from it would never register.
        tracing::error!(
            deployment_id = target.deployment_id,
            "deployment has no seed; media not served"
        );
        return Ok(None);
    };
    let seed = SeedArchive::new(seed);
    let etag = racklift_media::compose::etag(&target.image_sha256, &seed);
    let image_sha256 = target.image_sha256;
    let overlay = Arc::new(Overlay {
        offset: u64::try_from(seed_offset).unwrap_or(u64::MAX),
        bytes: seed.bytes.into(),
    });
    Ok(Some(Resolved {
        deployment_id: target.deployment_id,
        image_id: target.image_id,
        stored_path: target.path,
        image_sha256,
        file_stamp: target.file_stamp,
        overlay,
        etag,
    }))
}

/// Why the database gave no resolution.
#[derive(Debug, thiserror::Error)]
enum Unanswered {
    #[error(transparent)]
    Failed(StoreError),
    #[error("the database did not answer within {:?}", crate::media_targets::ASK_FOR)]
    Late,
}

impl From<Unanswered> for ApiError {
    fn from(e: Unanswered) -> ApiError {
        match e {
            Unanswered::Failed(e) => e.into(),
            Unanswered::Late => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
                e.to_string(),
            ),
        }
    }
}

/// The resolution to serve `secret` with: one made within [`crate::media_targets::TARGET_TTL`], else the
/// database's answer; when the database cannot answer, the last one it gave (see [`crate::media_targets`]).
async fn target(state: &AppState, secret: &str, now: std::time::Instant) -> Result<Arc<Resolved>, ApiError> {
    if let Some(target) = state.media_targets.get(secret, now) {
        return Ok(target);
    }
    // With a resolution to fall back on, the database gets ASK_FOR to answer; without one, as long as it takes.
    let asked = match state.media_targets.last_known(secret, now) {
        Some(_) => tokio::time::timeout(crate::media_targets::ASK_FOR, resolve(state, secret))
            .await
            .unwrap_or_else(|_| Err(Unanswered::Late)),
        None => resolve(state, secret).await,
    };
    match asked {
        Ok(Some(resolved)) => {
            let target = Arc::new(resolved);
            state.media_targets.put(secret, target.clone(), now);
            Ok(target)
        }
        Ok(None) => {
            state.media_targets.forget(secret);
            Err(not_found())
        }
        Err(error) => match state.media_targets.last_known(secret, now) {
            Some(target) => {
                state.media_targets.stood_in(secret, now);
                // Debug, not warn: an installer sends thousands of reads, and the outage is reported by the
                // read-recording flush and every other request that needs the database.
                tracing::debug!(deployment_id = target.deployment_id, %error,
                    "database unavailable; serving the media as last resolved");
                Ok(target)
            }
            None => Err(error.into()),
        },
    }
}

fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such media")
}

/// The image of `target`, opened beneath the images directory at every request (the directory may have changed
/// since the image was registered, or the file been replaced by a link out of it), and its size; refused when
/// its bytes are no longer those of its SHA-256. The handle opened here is what is read.
async fn open_image(state: &AppState, target: &Resolved) -> Result<(std::fs::File, u64), ApiError> {
    let image_id = target.image_id;
    let stored = std::path::Path::new(&target.stored_path);
    let opened = crate::image_files::open_off_runtime(&state.config.images_dir, stored)
        .await
        .map_err(|e| {
            tracing::error!(deployment_id = target.deployment_id, image_id, error = %e, "image file unreadable");
            ApiError::internal(format!("image {image_id} is not readable"))
        })?
        .ok_or_else(|| {
            tracing::error!(deployment_id = target.deployment_id, image_id,
                "image not a regular file inside the images directory; not served");
            not_found()
        })?;
    let key = format!("image/{image_id}");
    let verdict = state
        .rechecks
        .check(&key, &opened, target.file_stamp.as_deref(), &target.image_sha256)
        .await
        .map_err(|e| {
            tracing::error!(deployment_id = target.deployment_id, image_id, error = %e, "image file unreadable");
            ApiError::internal(format!("image {image_id} is not readable"))
        })?;
    match verdict {
        crate::image_files::Verdict::Unchanged => {}
        crate::image_files::Verdict::Rehashed(stamp) => {
            if let Err(error) = state.store.restamp_image(image_id, stamp.as_str()).await {
                tracing::warn!(image_id, %error,
                    "could not record the image's new stamp; it is hashed again at the next start");
            }
        }
        crate::image_files::Verdict::Changed => {
            tracing::error!(
                deployment_id = target.deployment_id,
                image_id,
                "image file changed since it was registered; not served"
            );
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "image_changed",
                format!(
                    "image {image_id} changed since it was registered and no longer has its SHA-256; register it again"
                ),
            ));
        }
    }
    let size = opened.size;
    let file = Arc::try_unwrap(opened.file)
        .or_else(|shared| shared.try_clone())
        .map_err(|e| ApiError::internal(format!("image {image_id} is not readable: {e}")))?;
    Ok((file, size))
}

/// One request's image: the file its check opened, the seed laid over it, and where what is sent is recorded.
/// The plain media listener sends it with `sendfile` ([`racklift_listener::files`]); the API's own listener
/// through [`file_part`].
struct MediaSource {
    file: std::fs::File,
    overlay: Arc<Overlay>,
    recorder: Recorder,
    deployment_id: i64,
    source: Arc<str>,
}

impl FileSource for MediaSource {
    fn file(&self) -> &std::fs::File {
        &self.file
    }

    fn patched(&self) -> Option<std::ops::Range<u64>> {
        let len = self.overlay.bytes.len() as u64;
        (len > 0).then(|| self.overlay.offset..self.overlay.offset.saturating_add(len))
    }

    fn patch(&self, offset: u64, buf: &mut [u8]) {
        self.overlay.apply(offset, buf);
    }

    fn sent(&self, offset: u64, len: u64) {
        racklift_metrics::global().media_bytes_served.inc_by(len);
        self.recorder
            .record(self.deployment_id, &self.source, offset, offset + len);
    }
}

/// Reads `[start, start + len)` of the open image as a stream that records each chunk as it is handed to the
/// connection, so an aborted transfer only counts what was sent. Positioned reads (`pread`) of [`READ_CHUNK`]
/// bytes, one blocking-pool hop each, on the one file the request opened: the parts of a multipart answer share
/// it, and no seek is shared between them.
fn file_part(media: Arc<MediaSource>, start: u64, len: u64) -> BoxStream<'static, std::io::Result<Bytes>> {
    let end = start + len;
    stream::try_unfold(start, move |offset| {
        let media = media.clone();
        async move {
            if offset >= end {
                return Ok(None);
            }
            let want = usize::try_from(end - offset)
                .unwrap_or(READ_CHUNK)
                .min(READ_CHUNK);
            let reader = media.clone();
            let (mut buf, len) = tokio::task::spawn_blocking(move || read_at(&reader.file, offset, want))
                .await
                .map_err(std::io::Error::other)??;
            if len == 0 {
                // The file shrank under the request: the promised length cannot be kept.
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the image file is shorter than when the request began",
                ));
            }
            // Only the chunks over the seed are changed; every other byte goes out as read.
            media.patch(offset, &mut buf[..len]);
            media.sent(offset, len as u64);
            Ok(Some((crate::read_buffers::freeze(buf, len), offset + len as u64)))
        }
    })
    .boxed()
}

/// Up to `want` bytes of `file` from `offset` (fewer only at its end), in a recycled buffer.
fn read_at(file: &std::fs::File, offset: u64, want: usize) -> std::io::Result<(Vec<u8>, usize)> {
    use std::os::unix::fs::FileExt;
    let mut buf = crate::read_buffers::take(READ_CHUNK);
    let mut filled = 0;
    while filled < want {
        match file.read_at(&mut buf[filled..want], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok((buf, filled))
}

/// What a request's `Range` header asks of a file of `size` bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangePlan {
    /// No `Range`, or one that cannot be read: the whole file with 200 (RFC 9110 lets a server ignore a Range
    /// it cannot parse).
    Whole,
    /// 206 with these ranges: never empty, each inside the file, at most `max_ranges` of them.
    Parts(Vec<RangeInclusive<u64>>),
    /// 416: nothing asked for lies inside the file, or the request is refused (too many ranges, more than one
    /// overlap, absurdly long numbers).
    Unsatisfiable,
}

/// Turns a `Range` header value (its raw bytes, as a client sent them) into what to serve of a file of `size`
/// bytes. Pure, so the fuzz targets in `tests/fuzz.rs` can hold it to its contract with any input.
#[doc(hidden)]
pub fn plan_ranges(value: Option<&[u8]>, size: u64, max_ranges: usize) -> RangePlan {
    // A value with bytes outside visible ASCII and tab (what `HeaderValue::to_str` accepts) is not a range this
    // server can read: the whole file.
    let visible = |v: &&[u8]| v.iter().all(|b| *b == b'\t' || (b' '..=b'~').contains(b));
    let Some(value) = value.filter(visible).and_then(|v| std::str::from_utf8(v).ok()) else {
        return RangePlan::Whole;
    };
    let limit = NonZeroUsize::new(max_ranges).unwrap_or(NonZeroUsize::MIN);
    match http_range_header::parse_range_header_with_max_ranges(value, limit).and_then(|p| p.validate(size)) {
        // An empty file has no bytes to range over (only a suffix range passes validation, selecting nothing).
        Ok(ranges) if ranges.is_empty() => RangePlan::Whole,
        Ok(ranges) => RangePlan::Parts(ranges),
        Err(RangeUnsatisfiableError::Invalid(_)) => RangePlan::Whole,
        Err(_) => RangePlan::Unsatisfiable,
    }
}

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

/// The installation image of a running deployment, for its BMC: byte ranges (RFC 9110), HEAD for the size.
/// The path's secret is the capability; it stops working when the deployment ends.
#[utoipa::path(method(get, head), path = "/media/{secret}/{file}", tag = "service",
    params(("secret" = String, Path, description = "The deployment's media secret"),
        ("file" = String, Path, example = "incusos.img", description = "Any file name (BMCs want an extension)"),
        ("Range" = Option<String>, Header, description = "bytes=…")),
    responses(
        (status = 200, description = "The whole image", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 206, description = "The ranges asked for", content_type = "application/octet-stream",
            body = Vec<u8>),
        (status = 404, description = "Unknown or finished deployment", body = ErrorBody),
        (status = 416, description = "No range is satisfiable", body = ErrorBody),
        (status = 503, description = "The image changed since it was registered and no longer has its SHA-256 \
            (`image_changed`)", body = ErrorBody)))]
pub async fn serve_media(
    State(state): State<AppState>,
    Path((secret, _file)): Path<(String, String)>,
    method: Method,
    headers: HeaderMap,
    extensions: Extensions,
) -> Result<Response, ApiError> {
    let target = target(&state, &secret, std::time::Instant::now()).await?;
    let (file, size) = open_image(&state, &target).await?;
    let source: Arc<str> = extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .unwrap_or_else(|| "unknown".to_owned())
        .into();
    let head = method == Method::HEAD;

    let ranges = match plan_ranges(
        headers.get(header::RANGE).map(HeaderValue::as_bytes),
        size,
        MAX_RANGES,
    ) {
        RangePlan::Whole => None,
        RangePlan::Parts(ranges) => Some(ranges),
        RangePlan::Unsatisfiable => {
            let mut resp = ApiError::new(
                StatusCode::RANGE_NOT_SATISFIABLE,
                "range_not_satisfiable",
                format!("the image is {size} bytes"),
            )
            .into_response();
            resp.headers_mut()
                .insert(header::CONTENT_RANGE, header_value(&format!("bytes */{size}")));
            resp.headers_mut()
                .insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
            return Ok(resp);
        }
    };

    let media = Arc::new(MediaSource {
        file,
        overlay: target.overlay.clone(),
        recorder: state.media_reads.clone(),
        deployment_id: target.deployment_id,
        source: source.clone(),
    });
    let mut builder = Response::builder()
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::ETAG, header_value(&target.etag));
    let (status, parts) = match ranges.as_deref() {
        None => {
            builder = builder.header(header::CONTENT_TYPE, "application/octet-stream");
            (StatusCode::OK, vec![Part::File { offset: 0, len: size }])
        }
        Some([r]) => {
            let (s, e) = (*r.start(), *r.end());
            builder = builder
                .header(header::CONTENT_TYPE, "application/octet-stream")
                .header(header::CONTENT_RANGE, format!("bytes {s}-{e}/{size}"));
            (
                StatusCode::PARTIAL_CONTENT,
                vec![Part::File {
                    offset: s,
                    len: e - s + 1,
                }],
            )
        }
        Some(many) => {
            let boundary = &racklift_store::new_secret()[..32];
            let mut parts = Vec::with_capacity(many.len() * 2 + 1);
            for r in many {
                let (s, e) = (*r.start(), *r.end());
                let head = format!(
                    "\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes {s}-{e}/{size}\r\n\r\n"
                );
                parts.push(Part::Bytes(Bytes::from(head)));
                parts.push(Part::File {
                    offset: s,
                    len: e - s + 1,
                });
            }
            parts.push(Part::Bytes(Bytes::from(format!("\r\n--{boundary}--\r\n"))));
            builder = builder.header(
                header::CONTENT_TYPE,
                format!("multipart/byteranges; boundary={boundary}"),
            );
            (StatusCode::PARTIAL_CONTENT, parts)
        }
    };
    let length: u64 = parts.iter().map(Part::len).sum();
    tracing::debug!(deployment_id = target.deployment_id, %source, status = status.as_u16(), length, "media request");
    if head {
        return builder
            .status(status)
            .header(header::CONTENT_LENGTH, length)
            .body(Body::empty())
            .map_err(|e| ApiError::internal(e.to_string()));
    }
    // Both ways to send the body: a stream of reads for hyper, and the parts for the plain media listener to
    // send from the file itself. Whichever serves the answer uses its own; the stream reads nothing unless polled.
    let reads = media.clone();
    let stream = stream::iter(parts.clone())
        .flat_map(move |part| match part {
            Part::Bytes(bytes) => stream::once(async move { Ok(bytes) }).boxed(),
            Part::File { offset, len } => file_part(reads.clone(), offset, len),
        })
        .boxed();
    let file_body = FileBody {
        source: media,
        parts: parts.into(),
    };
    builder
        .status(status)
        .header(header::CONTENT_LENGTH, length)
        .extension(file_body)
        .body(Body::from_stream(stream))
        .map_err(|e| ApiError::internal(e.to_string()))
}
