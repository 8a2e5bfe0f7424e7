//! The response envelope and [`ApiError`], the one place where a failure
//! becomes an HTTP status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use delayq_common::{ErrorKind, InvalidField};
use delayq_queue::{QueueError, INTERNAL_MESSAGE};
use serde::Serialize;
use serde_json::Value;
use tracing::error;
use utoipa::ToSchema;

/// The message of every successful response.
const OK_MESSAGE: &str = "ok";

/// The result of a handler.
pub(crate) type ApiResult = Result<Response, ApiError>;

/// `{"success", "message", "data"}`, the shape of every response.
#[derive(Serialize, ToSchema)]
pub(crate) struct Envelope<'a, T: Serialize> {
    /// `true` with a `200`.
    success: bool,
    /// `ok` on success, else what went wrong.
    message: &'a str,
    /// The result.
    data: T,
}

/// Returns `200` with `data` in a successful envelope.
pub(crate) fn ok<T: Serialize>(data: T) -> ApiResult {
    envelope(StatusCode::OK, true, OK_MESSAGE, data)
}

/// Returns an envelope with any status, for responses that carry data on failure (`/ready`).
pub(crate) fn envelope<T: Serialize>(status: StatusCode, success: bool, message: &str, data: T) -> ApiResult {
    let body = serde_json::to_vec(&Envelope { success, message, data }).map_err(|cause| {
        error!(error = %cause, "response could not be serialized");
        ApiError::internal()
    })?;
    Ok(json_response(status, body))
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A failed request: a status and a message for the client, never internal detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    /// Creates an error of `kind` with a message for the client.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ApiError {
        ApiError { status: status_of(kind), message: message.into() }
    }

    /// Creates an error with an explicit status (`404` for routes, `405`).
    pub(crate) fn with_status(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into() }
    }

    /// A `400` whose message names the offending field.
    pub(crate) fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Invalid, message)
    }

    /// A `500`; the caller has logged the cause.
    pub(crate) fn internal() -> ApiError {
        ApiError::new(ErrorKind::Internal, INTERNAL_MESSAGE)
    }

    /// Returns the HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// Returns the message shown to the client.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Returns the HTTP status of a kind of failure.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<QueueError> for ApiError {
    fn from(error: QueueError) -> ApiError {
        ApiError::new(error.kind(), error.public_message())
    }
}

impl From<InvalidField> for ApiError {
    fn from(invalid: InvalidField) -> ApiError {
        ApiError::new(invalid.kind(), invalid.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let envelope = Envelope { success: false, message: &self.message, data: Value::Null };
        // Serializing a struct of a bool, a string and null cannot fail.
        let body = serde_json::to_vec(&envelope).unwrap_or_default();
        let mut response = json_response(self.status, body);
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_truthful_status() {
        assert_eq!(status_of(ErrorKind::Invalid), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(ErrorKind::TooLarge), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(status_of(ErrorKind::NotFound), StatusCode::NOT_FOUND);
        assert_eq!(status_of(ErrorKind::Conflict), StatusCode::CONFLICT);
        assert_eq!(status_of(ErrorKind::Unauthenticated), StatusCode::UNAUTHORIZED);
        assert_eq!(status_of(ErrorKind::Forbidden), StatusCode::FORBIDDEN);
        assert_eq!(status_of(ErrorKind::Unavailable), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(status_of(ErrorKind::Internal), StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn invalid_fields_keep_their_message_and_size_status() {
        let form: ApiError = InvalidField::new("delay", "must be >= 0").into();
        assert_eq!((form.status(), form.message()), (StatusCode::BAD_REQUEST, "delay must be >= 0"));
        let size: ApiError = InvalidField::too_large("body", "must be at most 1 bytes").into();
        assert_eq!(size.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[test]
    fn deliveries_are_named_by_their_job_and_group() {
        let (Ok(id), Ok(group)) = (delayq_common::JobId::parse("a"), delayq_common::Group::parse("g")) else {
            panic!("valid names")
        };
        let wrong: ApiError =
            QueueError::WrongState { id: id.for_group(&group), state: delayq_common::JobState::Finished }.into();
        assert_eq!((wrong.status(), wrong.message()), (StatusCode::CONFLICT, "job a in group g is finished"));
        let stale: ApiError = QueueError::StaleAttempt { id: id.for_group(&group), attempt: 1, current: 2 }.into();
        assert_eq!(stale.message(), "job a in group g is at attempt 2, not 1");
        let plain: ApiError = QueueError::WrongState { id, state: delayq_common::JobState::Dead }.into();
        assert_eq!(plain.message(), "job a is dead");
    }

    #[test]
    fn backend_errors_name_the_backend_only() {
        let error = QueueError::Unavailable { backend: "redis", source: "connection refused at 10.0.0.1".into() };
        let api: ApiError = error.into();
        assert_eq!((api.status(), api.message()), (StatusCode::SERVICE_UNAVAILABLE, "redis is unavailable"));
    }
}
