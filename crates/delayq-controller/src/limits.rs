//! Per-route request limits: how large a body each route reads, and how long
//! a request may take.

use std::time::Duration;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use delayq_common::ErrorKind;
use delayq_queue::service::{MAX_BATCH_PUSH, MAX_POP_WAIT};

use crate::app::AppState;
use crate::error::ApiError;

/// How much longer a string can be as JSON than its bytes: a control
/// character is written `\u0000`, six bytes for one.
const JSON_ESCAPE_FACTOR: usize = 6;
/// Room for a job's fields other than `body`: topic and id (128 ASCII
/// characters each), subtopic and bizKey (128 characters each, up to twelve
/// bytes apiece when escaped), 100 `retryBackoff` entries, the numbers, the
/// names and some whitespace.
const JOB_FIELDS_ALLOWANCE: usize = 8 * 1024;
/// Room for what wraps the payload of a request (`{"jobs": [ ]}`, `{"result": }`).
const ENVELOPE_ALLOWANCE: usize = 1024;

/// The routes that wait for jobs: a request there may wait up to
/// [`MAX_POP_WAIT`] on top of the request timeout.
const LONG_POLLS: [(Option<Method>, &str); 2] = [(None, "/pop"), (Some(Method::GET), "/topic/{topic}/job")];

/// The largest body a route reads, set per route as a request extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BodyLimit(pub(crate) usize);

/// The body limits of the routes that read one, derived from the job and result limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RouteLimits {
    /// One job: `/push` and the Youzan push.
    pub(crate) push: BodyLimit,
    /// Up to [`MAX_BATCH_PUSH`] jobs: `/push/batch`.
    pub(crate) batch: BodyLimit,
    /// A finish and its `result`.
    pub(crate) finish: BodyLimit,
    /// Any other route; also the ceiling of the others.
    pub(crate) other: BodyLimit,
}

impl RouteLimits {
    /// Sizes each route's limit from the largest job body and finish result,
    /// never above `max_request_bytes`.
    pub(crate) fn new(max_body_bytes: usize, max_result_bytes: usize, max_request_bytes: usize) -> RouteLimits {
        let cap = |bytes: usize| BodyLimit(bytes.min(max_request_bytes));
        let job = job_wire_bytes(max_body_bytes);
        RouteLimits {
            push: cap(job),
            batch: cap(job.saturating_mul(MAX_BATCH_PUSH).saturating_add(ENVELOPE_ALLOWANCE)),
            finish: cap(max_result_bytes.saturating_mul(JSON_ESCAPE_FACTOR).saturating_add(ENVELOPE_ALLOWANCE)),
            other: BodyLimit(max_request_bytes),
        }
    }
}

/// The most bytes one valid job can take as JSON, with every body byte escaped.
pub(crate) fn job_wire_bytes(max_body_bytes: usize) -> usize {
    max_body_bytes.saturating_mul(JSON_ESCAPE_FACTOR).saturating_add(JOB_FIELDS_ALLOWANCE)
}

/// Ends a request that takes longer than the request timeout with a `503`;
/// long polls get their longest wait on top.
pub(crate) async fn limit_request_time(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let mut limit = state.config.request_timeout;
    if is_long_poll(&request) {
        limit = limit.saturating_add(MAX_POP_WAIT);
    }
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_elapsed) => timed_out(limit).into_response(),
    }
}

fn timed_out(limit: Duration) -> ApiError {
    ApiError::new(ErrorKind::Unavailable, format!("request did not complete within {} ms", limit.as_millis()))
}

fn is_long_poll(request: &Request) -> bool {
    let Some(path) = request.extensions().get::<MatchedPath>() else {
        return false;
    };
    LONG_POLLS.iter().any(|(method, route)| {
        *route == path.as_str() && method.as_ref().is_none_or(|method| method == request.method())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_fit_escaped_payloads_under_the_request_ceiling() {
        let limits = RouteLimits::new(65_536, 65_536, 16 * 1024 * 1024);
        assert_eq!(limits.push, BodyLimit(6 * 65_536 + JOB_FIELDS_ALLOWANCE));
        assert_eq!(limits.finish, BodyLimit(6 * 65_536 + ENVELOPE_ALLOWANCE));
        assert_eq!(limits.batch, BodyLimit(16 * 1024 * 1024));
        let small = RouteLimits::new(100, 10, 16 * 1024 * 1024);
        assert_eq!(small.batch, BodyLimit(1000 * (600 + JOB_FIELDS_ALLOWANCE) + ENVELOPE_ALLOWANCE));
        let huge = RouteLimits::new(usize::MAX, usize::MAX, 1024);
        assert_eq!((huge.push, huge.batch, huge.finish), (BodyLimit(1024), BodyLimit(1024), BodyLimit(1024)));
    }

    #[test]
    fn timeouts_say_how_long_was_allowed() {
        let error = timed_out(Duration::from_millis(1500));
        assert_eq!(error.status(), axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(error.message(), "request did not complete within 1500 ms");
    }
}
