//! The update catalog as IncusOS reads it (its `operations-center` provider): `GET /1.0/provisioning/updates`,
//! `…/{uuid}/files` and `…/{uuid}/files/{filename...}`, every answer in the Incus envelope
//! ([`crate::incus_envelope`]), errors included.
//!
//! Served without authentication, as Operations Center serves them (its `isAuthenticationRequired` exempts every
//! `GET` under `/1.0/provisioning/updates`): a freshly installed IncusOS checks for updates on its first start-up
//! before Incus exists, so it has no client certificate to present yet, and it installs Incus from the answer.
//! The catalog holds nothing secret: published OS images and applications, signed by their publisher.
//!
//! A caller presenting the TLS client certificate a server registered with (its fingerprint in
//! `servers.client_certificate_sha256`, seen as [`racklift_listener::PeerCertificate`]) is recognised as that
//! server, and a server whose cluster runs a restricted rolling update is offered only what the run covers.

use axum::body::Body;
use axum::extract::{FromRequestParts, Path, RawQuery, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use chrono::{DateTime, Utc};
use racklift_listener::PeerCertificate;
use racklift_store::{Update, UpdateFile};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio_util::io::ReaderStream;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::AppState;
use crate::incus_envelope::{IncusError, IncusErrorBody, IncusResponse};
use crate::media::{RangePlan, plan_ranges};

/// Who reads the update catalog: a registered server, by its client certificate, or anyone else.
#[derive(Debug)]
pub enum UpdateReader {
    /// A registered server, by its client certificate.
    Server(String),
    /// No certificate, or one no server registered with: a fresh IncusOS, an operator, a mirror.
    Anonymous,
}

impl UpdateReader {
    /// For the log: the server's name, or `-`.
    fn name(&self) -> &str {
        match self {
            UpdateReader::Server(name) => name,
            UpdateReader::Anonymous => "-",
        }
    }
}

impl FromRequestParts<AppState> for UpdateReader {
    type Rejection = IncusError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        if let Some(certificate) = parts.extensions.get::<PeerCertificate>()
            && let Some(server) = state
                .store
                .server_by_client_certificate(&certificate.sha256)
                .await?
        {
            return Ok(UpdateReader::Server(server));
        }
        Ok(UpdateReader::Anonymous)
    }
}

/// An update as listed with `recursion=1`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UpdateView {
    #[schema(value_type = Uuid)]
    pub uuid: Uuid,
    #[schema(example = "202612010000")]
    pub version: String,
    #[schema(example = json!(["stable"]))]
    pub channels: Vec<String>,
    pub published_at: DateTime<Utc>,
}

impl From<Update> for UpdateView {
    fn from(u: Update) -> UpdateView {
        UpdateView {
            uuid: u.uuid,
            version: u.version,
            channels: u.channels,
            published_at: u.published_at,
        }
    }
}

/// A file of an update, as IncusOS reads it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UpdateFileView {
    #[schema(example = "IncusOS_202612010000.efi.gz")]
    pub filename: String,
    pub size: i64,
    /// `os` or an application name.
    #[schema(example = "os")]
    pub component: String,
    #[serde(rename = "type")]
    #[schema(example = "update-efi")]
    pub file_type: String,
    /// `x86_64`, `aarch64`, or empty for any.
    #[schema(example = "x86_64")]
    pub architecture: String,
    pub sha256: String,
}

impl From<UpdateFile> for UpdateFileView {
    fn from(f: UpdateFile) -> UpdateFileView {
        UpdateFileView {
            filename: f.filename,
            size: f.size_bytes,
            component: f.component,
            file_type: f.file_type,
            architecture: f.architecture,
            sha256: f.sha256,
        }
    }
}

/// The deepest `recursion` Incus defines.
const MAX_RECURSION: u8 = 2;

/// `recursion=1` (or 2) lists the updates themselves; without it, their URLs (the Incus convention).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    #[param(minimum = 0, maximum = 2)]
    recursion: Option<u8>,
}

/// The list of updates: URLs without `recursion`, the updates with `recursion=1`.
#[derive(Serialize)]
#[serde(untagged)]
pub enum UpdateList {
    Urls(Vec<String>),
    Updates(Vec<UpdateView>),
}

/// `anyOf`, not the `oneOf` a derive would write: an empty list is both forms at once.
impl utoipa::PartialSchema for UpdateList {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{AnyOfBuilder, ArrayBuilder, ObjectBuilder, Type};
        AnyOfBuilder::new()
            .item(ArrayBuilder::new().items(ObjectBuilder::new().schema_type(Type::String)))
            .item(ArrayBuilder::new().items(utoipa::openapi::Ref::from_schema_name(UpdateView::name())))
            .description(Some(
                "The list of updates: URLs without `recursion`, the updates with `recursion=1`.",
            ))
            .into()
    }
}

impl ToSchema for UpdateList {
    fn schemas(schemas: &mut Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>)>) {
        schemas.push((
            UpdateView::name().into(),
            <UpdateView as utoipa::PartialSchema>::schema(),
        ));
        <UpdateView as ToSchema>::schemas(schemas);
    }
}

fn parse_uuid(text: &str) -> Result<Uuid, IncusError> {
    text.parse().map_err(|_| IncusError::not_found("update"))
}

/// The published updates, highest version first (IncusOS takes the first one on its channel). No authentication.
#[utoipa::path(get, path = "/1.0/provisioning/updates", tag = "provisioning",
    security((), ("incus_client_certificate" = [])),
    params(ListQuery),
    responses(
        (status = 200, description = "Update URLs, or with `recursion=1` the updates (Incus envelope)",
            body = IncusResponse<UpdateList>),
        (status = 400, description = "`recursion` is not a number from 0 to 2 (Incus envelope)", body = IncusErrorBody),
        (status = 422, description = "The path or query holds a NUL character (`%00`)", body = crate::error::ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    _: UpdateReader,
    RawQuery(query): RawQuery,
) -> Result<IncusResponse<UpdateList>, IncusError> {
    let q: ListQuery = serde_urlencoded::from_str(query.as_deref().unwrap_or_default())
        .map_err(|e| IncusError::new(StatusCode::BAD_REQUEST, format!("query: {e}")))?;
    if q.recursion.is_some_and(|r| r > MAX_RECURSION) {
        return Err(IncusError::new(
            StatusCode::BAD_REQUEST,
            format!("query: recursion must be 0 to {MAX_RECURSION}"),
        )
        .with_detail("invalid_field", "recursion"));
    }
    let updates = state.store.updates().await?;
    let list = if q.recursion.unwrap_or(0) >= 1 {
        UpdateList::Updates(updates.into_iter().map(UpdateView::from).collect())
    } else {
        UpdateList::Urls(
            updates
                .iter()
                .map(|u| format!("/1.0/provisioning/updates/{}", u.uuid))
                .collect(),
        )
    };
    Ok(IncusResponse::sync(list))
}

/// One update. No authentication.
#[utoipa::path(get, path = "/1.0/provisioning/updates/{uuid}", tag = "provisioning",
    security((), ("incus_client_certificate" = [])),
    params(("uuid" = Uuid, Path, description = "The update")),
    responses(
        (status = 200, description = "The update (Incus envelope)", body = IncusResponse<UpdateView>),
        (status = 404, description = "No such update (Incus envelope)", body = IncusErrorBody),
        (status = 422, description = "The path or query holds a NUL character (`%00`)", body = crate::error::ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    Path(uuid): Path<String>,
) -> Result<IncusResponse<UpdateView>, IncusError> {
    let uuid = parse_uuid(&uuid)?;
    let update = state
        .store
        .update(uuid)
        .await?
        .ok_or_else(|| IncusError::not_found("update"))?;
    Ok(IncusResponse::sync(UpdateView::from(update)))
}

/// The files of an update. No authentication; a registered server whose cluster runs a restricted rolling update
/// (by its client certificate) is offered only the components the run covers.
#[utoipa::path(get, path = "/1.0/provisioning/updates/{uuid}/files", tag = "provisioning",
    security((), ("incus_client_certificate" = [])),
    params(("uuid" = Uuid, Path, description = "The update")),
    responses(
        (status = 200, description = "Its files (Incus envelope)", body = IncusResponse<Vec<UpdateFileView>>),
        (status = 404, description = "No such update (Incus envelope)", body = IncusErrorBody),
        (status = 422, description = "The path or query holds a NUL character (`%00`)", body = crate::error::ErrorBody)))]
pub async fn files(
    State(state): State<AppState>,
    reader: UpdateReader,
    Path(uuid): Path<String>,
) -> Result<IncusResponse<Vec<UpdateFileView>>, IncusError> {
    let uuid = parse_uuid(&uuid)?;
    if state.store.update(uuid).await?.is_none() {
        return Err(IncusError::not_found("update"));
    }
    let files = state.store.update_files(uuid).await?;
    // A server whose cluster stages an update restricted to the OS or to some applications is offered only
    // those components: IncusOS stages whatever its provider offers, so this is where the restriction holds.
    let restricted = match &reader {
        UpdateReader::Server(server) => state
            .store
            .live_operation_of_member(server)
            .await?
            .map(|op| op.run.kind),
        UpdateReader::Anonymous => None,
    };
    let offered: Vec<UpdateFileView> = files
        .into_iter()
        .filter(|f| restricted.as_ref().is_none_or(|kind| kind.covers(&f.component)))
        .map(UpdateFileView::from)
        .collect();
    tracing::debug!(reader = reader.name(), update = %uuid, files = offered.len(), "update files listed");
    Ok(IncusResponse::sync(offered))
}

/// A file of an update: the whole file, or one byte range (RFC 9110); HEAD for its size. Several ranges in one
/// request are refused (416): IncusOS fetches whole files, and a resuming client asks for one tail. No
/// authentication. The file name is the rest of the path, slashes included (`x86_64/incus.raw.gz`), as IncusOS
/// appends it unescaped; the document spells the parameter `{filename}`.
#[utoipa::path(method(get, head), path = "/1.0/provisioning/updates/{uuid}/files/{*filename}", tag = "provisioning",
    security((), ("incus_client_certificate" = [])),
    params(("uuid" = Uuid, Path, description = "The update"),
        ("filename" = String, Path, example = "x86_64/incus.raw.gz",
            description = "A file of the update, its `/` as sent (not escaped)"),
        ("Range" = Option<String>, Header, description = "bytes=…")),
    responses(
        (status = 200, description = "The file", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 206, description = "The range asked for", content_type = "application/octet-stream",
            body = Vec<u8>),
        (status = 404, description = "No such update or file (Incus envelope)", body = IncusErrorBody),
        (status = 416, description = "The range is not satisfiable (Incus envelope)", body = IncusErrorBody),
        (status = 503, description = "The file changed since it was published and no longer has the SHA-256 the \
            catalog offers (Incus envelope)", body = IncusErrorBody),
        (status = 422, description = "The path or query holds a NUL character (`%00`)", body = crate::error::ErrorBody)))]
pub async fn download(
    State(state): State<AppState>,
    reader: UpdateReader,
    Path((uuid, filename)): Path<(String, String)>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, IncusError> {
    let uuid = parse_uuid(&uuid)?;
    let file = state
        .store
        .update_file(uuid, &filename)
        .await?
        .ok_or_else(|| IncusError::not_found("update file"))?;
    // Opened beneath the images directory at every request, as catalog images are, and served only while it
    // holds the bytes of the SHA-256 the listing offers.
    let opened = crate::image_files::open_off_runtime(
        &state.config.images_dir,
        std::path::Path::new(&file.path),
    )
    .await
    .map_err(|e| {
        tracing::error!(update = %uuid, filename = %file.filename, error = %e, "update file unreadable");
        IncusError::internal()
    })?
    .ok_or_else(|| {
        tracing::error!(update = %uuid, filename = %file.filename,
                "update file not a regular file inside the images directory; not served");
        IncusError::not_found("update file")
    })?;
    let size = opened.size;
    let verdict = if size != file.size_bytes as u64 {
        crate::image_files::Verdict::Changed
    } else {
        let key = format!("update/{uuid}/{}", file.filename);
        state
            .rechecks
            .check(&key, &opened, file.file_stamp.as_deref(), &file.sha256)
            .await
            .map_err(|e| {
                tracing::error!(update = %uuid, filename = %file.filename, error = %e, "update file unreadable");
                IncusError::internal()
            })?
    };
    match verdict {
        crate::image_files::Verdict::Unchanged => {}
        crate::image_files::Verdict::Rehashed(stamp) => {
            if let Err(error) = state
                .store
                .restamp_update_file(uuid, &file.filename, stamp.as_str())
                .await
            {
                tracing::warn!(update = %uuid, filename = %file.filename, %error,
                    "could not record the file's new stamp; it is hashed again at the next start");
            }
        }
        crate::image_files::Verdict::Changed => {
            tracing::error!(update = %uuid, filename = %file.filename, size, expected = file.size_bytes,
                "update file changed since it was published; not served");
            return Err(IncusError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "update file {} changed since it was published and no longer has its SHA-256; publish it again",
                    file.filename
                ),
            ));
        }
    }
    let (status, start, len) =
        match plan_ranges(headers.get(header::RANGE).map(HeaderValue::as_bytes), size, 1) {
            RangePlan::Whole => (StatusCode::OK, 0, size),
            RangePlan::Parts(ranges) if ranges.len() == 1 => {
                let (s, e) = (*ranges[0].start(), *ranges[0].end());
                (StatusCode::PARTIAL_CONTENT, s, e - s + 1)
            }
            RangePlan::Parts(_) | RangePlan::Unsatisfiable => {
                let mut resp = axum::response::IntoResponse::into_response(IncusError::new(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    format!("the file is {size} bytes; one range at most"),
                ));
                resp.headers_mut().insert(
                    header::CONTENT_RANGE,
                    HeaderValue::from_str(&format!("bytes */{size}"))
                        .unwrap_or(HeaderValue::from_static("bytes */0")),
                );
                return Ok(resp);
            }
        };
    let mut builder = Response::builder()
        .status(status)
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CONTENT_LENGTH, len);
    if status == StatusCode::PARTIAL_CONTENT {
        builder = builder.header(
            header::CONTENT_RANGE,
            format!("bytes {start}-{}/{size}", start + len - 1),
        );
    }
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        let handle = opened.file.try_clone().map_err(|e| {
            tracing::error!(update = %uuid, filename = %file.filename, error = %e, "update file unreadable");
            IncusError::internal()
        })?;
        let mut reader = tokio::fs::File::from_std(handle);
        reader
            .seek(std::io::SeekFrom::Start(start))
            .await
            .map_err(|_| IncusError::internal())?;
        Body::from_stream(ReaderStream::with_capacity(reader.take(len), 64 * 1024))
    };
    tracing::debug!(update = %uuid, filename = %file.filename, reader = reader.name(), status = status.as_u16(), len,
        "update file request");
    builder.body(body).map_err(|_| IncusError::internal())
}
