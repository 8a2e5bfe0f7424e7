//! Extractors that turn every kind of bad input into an [`ApiError`] naming
//! the problem: query parameters, JSON bodies and path segments.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::{Bytes, HttpBody};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::header::CONTENT_LENGTH;
use axum::http::request::Parts;
use delayq_common::{ErrorKind, InvalidField, JobId, JobState, Topic};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::app::AppState;
use crate::error::ApiError;
use crate::limits::BodyLimit;

/// The spellings a job id may have in a query string, in order of preference.
const JOB_ID_PARAMS: [&str; 3] = ["jobId", "JobId", "id"];

/// The query parameters of a request; an empty value counts as absent.
pub(crate) struct Params(HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Params, ApiError> {
        match Query::<HashMap<String, String>>::from_request_parts(parts, state).await {
            Ok(Query(params)) => Ok(Params(params)),
            Err(_) => Err(ApiError::invalid("query string is not valid")),
        }
    }
}

impl Params {
    /// Returns a parameter, treating `?name=` like an absent one.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str).filter(|value| !value.is_empty())
    }

    /// Returns a required parameter.
    pub(crate) fn required(&self, name: &'static str) -> Result<&str, ApiError> {
        self.get(name).ok_or_else(|| ApiError::invalid(format!("{name} is required")))
    }

    /// Returns the job id given as `jobId`, `JobId` or `id`, if any.
    pub(crate) fn optional_job_id(&self) -> Result<Option<JobId>, ApiError> {
        for name in JOB_ID_PARAMS {
            if let Some(value) = self.get(name) {
                return parse_job_id(name, value).map(Some);
            }
        }
        Ok(None)
    }

    /// Returns the job id given as `jobId`, `JobId` or `id`.
    pub(crate) fn job_id(&self) -> Result<JobId, ApiError> {
        self.optional_job_id()?.ok_or_else(|| ApiError::invalid("jobId is required"))
    }

    /// Returns the required `topic`.
    pub(crate) fn topic(&self) -> Result<Topic, ApiError> {
        Ok(Topic::parse(self.required("topic")?)?)
    }

    /// Returns an integer parameter in `min..=max`, or `default` when absent.
    pub(crate) fn integer_in(&self, name: &'static str, min: u64, max: u64, default: u64) -> Result<u64, ApiError> {
        let Some(text) = self.get(name) else {
            return Ok(default);
        };
        let out_of_range = || ApiError::invalid(format!("{name} must be from {min} to {max}"));
        match text.parse::<i128>() {
            Ok(value) if value < i128::from(min) || value > i128::from(max) => Err(out_of_range()),
            Ok(value) => u64::try_from(value).map_err(|_| out_of_range()),
            Err(_) => Err(ApiError::invalid(format!("{name} must be an integer from {min} to {max}"))),
        }
    }

    /// Returns the optional `attempt`: the delivery a consumer holds, as its pop returned it.
    pub(crate) fn optional_attempt(&self) -> Result<Option<u32>, ApiError> {
        if self.get("attempt").is_none() {
            return Ok(None);
        }
        let attempt = self.integer_in("attempt", 1, u64::from(u32::MAX), 1)?;
        Ok(Some(u32::try_from(attempt).map_err(|_| ApiError::invalid("attempt is too large"))?))
    }

    /// Returns an optional duration in milliseconds, `>= 0`.
    pub(crate) fn optional_millis(&self, name: &'static str) -> Result<Option<Duration>, ApiError> {
        let Some(text) = self.get(name) else {
            return Ok(None);
        };
        match text.parse::<i128>() {
            Ok(value) if value < 0 => Err(ApiError::invalid(format!("{name} must be >= 0"))),
            Ok(value) => u64::try_from(value)
                .map(|millis| Some(Duration::from_millis(millis)))
                .map_err(|_| ApiError::invalid(format!("{name} is too large"))),
            Err(_) => Err(ApiError::invalid(format!("{name} must be an integer number of milliseconds"))),
        }
    }

    /// Returns a boolean parameter (`true`/`false`, `1`/`0`), or `default` when absent.
    pub(crate) fn flag(&self, name: &'static str, default: bool) -> Result<bool, ApiError> {
        let Some(text) = self.get(name) else {
            return Ok(default);
        };
        match text.to_ascii_lowercase().as_str() {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err(ApiError::invalid(format!("{name} must be true or false"))),
        }
    }

    /// Returns the optional `state`.
    pub(crate) fn state(&self) -> Result<Option<JobState>, ApiError> {
        let Some(text) = self.get("state") else {
            return Ok(None);
        };
        text.parse::<JobState>().map(Some).map_err(|unknown| ApiError::invalid(format!("state {unknown}")))
    }
}

/// Validates a job id, naming the parameter it came in.
pub(crate) fn parse_job_id(name: &'static str, value: &str) -> Result<JobId, ApiError> {
    JobId::parse(value).map_err(|invalid| InvalidField::new(name, invalid.reason).into())
}

/// A request body that must be a JSON object.
pub(crate) struct JsonObject(pub(crate) Map<String, Value>);

impl FromRequest<AppState> for JsonObject {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<JsonObject, ApiError> {
        let bytes = read_body(request, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ApiError::invalid("request body is required: a JSON object"));
        }
        parse_object(&bytes).map(JsonObject)
    }
}

/// A request body that may be empty, else must be a JSON object.
pub(crate) struct OptionalJsonObject(pub(crate) Option<Map<String, Value>>);

impl FromRequest<AppState> for OptionalJsonObject {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<OptionalJsonObject, ApiError> {
        let bytes = read_body(request, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJsonObject(None));
        }
        parse_object(&bytes).map(|object| OptionalJsonObject(Some(object)))
    }
}

/// A request body read whole, within the route's limit, not parsed.
pub(crate) struct RawBody(pub(crate) Bytes);

impl FromRequest<AppState> for RawBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<RawBody, ApiError> {
        read_body(request, state).await.map(RawBody)
    }
}

/// Reads the body within the route's limit ([`BodyLimit`]).
///
/// A declared `Content-Length` over the limit is refused before a byte of
/// the body is read. The content type is not checked: mykit-style clients and
/// `curl -d` send JSON under other content types, and a body that is not JSON
/// is refused anyway.
async fn read_body(request: Request, state: &AppState) -> Result<Bytes, ApiError> {
    let limit = request.extensions().get::<BodyLimit>().map_or(state.config.max_request_bytes, |limit| limit.0);
    let too_large = || ApiError::new(ErrorKind::TooLarge, format!("request body must be at most {limit} bytes"));
    let declared = declared_length(&request).max(request.body().size_hint().lower());
    if usize::try_from(declared).map_or(true, |declared| declared > limit) {
        return Err(too_large());
    }
    // Frames are appended as they arrive, into room for the announced length,
    // so the body is held once rather than as frames plus their copy.
    let mut bytes = Vec::with_capacity(usize::try_from(declared).unwrap_or(0));
    let mut body = Limited::new(request.into_body(), limit);
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    bytes.extend_from_slice(data);
                }
            }
            Err(error) if error.is::<LengthLimitError>() => return Err(too_large()),
            Err(_) => return Err(ApiError::invalid("request body could not be read")),
        }
    }
    Ok(Bytes::from(bytes))
}

/// The body length a request announces in `Content-Length` (0 when absent or unreadable).
fn declared_length(request: &Request) -> u64 {
    let header = request.headers().get(CONTENT_LENGTH).and_then(|value| value.to_str().ok());
    header.and_then(|text| text.trim().parse::<u64>().ok()).unwrap_or(0)
}

fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err(ApiError::invalid("request body must be a JSON object")),
        Err(cause) => Err(ApiError::invalid(format!("request body is not valid JSON: {cause}"))),
    }
}

/// Path segments; a segment that does not decode is a `400`.
pub(crate) struct ApiPath<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<ApiPath<T>, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(ApiPath(value)),
            Err(_) => Err(ApiError::invalid("path is not valid")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Params {
        Params(pairs.iter().map(|(name, value)| (name.to_string(), value.to_string())).collect())
    }

    #[test]
    fn job_id_has_three_spellings() {
        for name in JOB_ID_PARAMS {
            let id = params(&[(name, "a-1")]).job_id().map(|id| id.to_string());
            assert_eq!(id, Ok("a-1".to_owned()), "{name}");
        }
        assert_eq!(params(&[]).job_id().map_err(|error| error.message().to_owned()), Err("jobId is required".into()));
        let bad = params(&[("JobId", "a b")]).job_id().map_err(|error| error.message().to_owned());
        assert_eq!(bad, Err("JobId may only contain A-Z a-z 0-9 . _ : -".into()));
    }

    #[test]
    fn integers_name_the_parameter_and_range() {
        let message = |value: &str| {
            params(&[("count", value)]).integer_in("count", 1, 100, 1).map_err(|error| error.message().to_owned())
        };
        assert_eq!(message("5"), Ok(5));
        assert_eq!(message(""), Ok(1));
        assert_eq!(message("0"), Err("count must be from 1 to 100".into()));
        assert_eq!(message("-3"), Err("count must be from 1 to 100".into()));
        assert_eq!(message("101"), Err("count must be from 1 to 100".into()));
        assert_eq!(message("x"), Err("count must be an integer from 1 to 100".into()));
    }

    #[test]
    fn flags_and_states() {
        assert_eq!(params(&[("expire", "FALSE")]).flag("expire", true), Ok(false));
        assert!(params(&[("expire", "maybe")]).flag("expire", true).is_err());
        assert_eq!(params(&[("state", "dead")]).state(), Ok(Some(JobState::Dead)));
        let unknown = params(&[("state", "gone")]).state().map_err(|error| error.message().to_owned());
        assert_eq!(
            unknown,
            Err("state must be one of delay, ready, reserved, finished, deleted, dead, expired".into())
        );
    }
}
