//! A BMC's answer as the operations read it: status, the headers they use (`Location`, `Retry-After`, `ETag`),
//! and the body, checked into [`Error::Status`] when it is not a success.

use std::time::Duration;

use hyper::StatusCode;
use hyper::header;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result, parse_error_body};
use crate::transport::Answer;

/// A BMC answer with a success status.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: StatusCode,
    pub location: Option<String>,
    pub retry_after: Option<Duration>,
    pub etag: Option<String>,
    pub body: Vec<u8>,
}

impl Reply {
    /// The reply of a complete answer, with the headers the operations read.
    pub(crate) fn from_answer(answer: Answer) -> Self {
        let header = |name| {
            answer
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let location = header(header::LOCATION);
        let etag = header(header::ETAG);
        let retry_after = header(header::RETRY_AFTER)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        Self {
            status: answer.status,
            location,
            retry_after,
            etag,
            body: answer.body.to_vec(),
        }
    }

    /// The reply itself when its status is a success, else [`Error::Status`] with what the BMC's error body says.
    pub fn checked(self, method: &str, path: &str) -> Result<Self> {
        if self.status.is_success() {
            return Ok(self);
        }
        let (message_id, extended) = parse_error_body(&self.body);
        Err(Error::Status {
            method: method.to_owned(),
            path: path.to_owned(),
            status: self.status.as_u16(),
            message_id,
            extended,
            retry_after: self.retry_after,
        })
    }

    /// The resource's ETag: the `ETag` header, else the body's `@odata.etag` (which some BMCs send alone).
    pub fn etag(&self) -> Option<String> {
        #[derive(serde::Deserialize)]
        struct Tagged {
            #[serde(rename = "@odata.etag")]
            etag: Option<String>,
        }
        self.etag.clone().or_else(|| {
            serde_json::from_slice::<Tagged>(&self.body)
                .ok()
                .and_then(|t| t.etag)
        })
    }

    /// Parses the body, naming `path` on failure.
    pub fn json<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        serde_json::from_slice(&self.body).map_err(|source| Error::Decode {
            path: path.to_owned(),
            source,
        })
    }
}
