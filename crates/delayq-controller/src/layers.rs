//! Cross-cutting responses and middleware: unknown routes, wrong methods,
//! panics, and the per-route HTTP metrics.

use std::any::Any;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::error;

use crate::error::ApiError;

/// Requests served, by method, matched route and status.
pub const HTTP_REQUESTS: &str = "delayq_http_requests_total";
/// Request latency in seconds, by method and matched route.
pub const HTTP_DURATION: &str = "delayq_http_request_duration_seconds";
/// The route label of requests that matched no route.
const UNMATCHED_ROUTE: &str = "unmatched";

/// The `404` of a path that is no route.
pub(crate) async fn route_not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::with_status(StatusCode::NOT_FOUND, format!("no route {method} {}", uri.path()))
}

/// The `405` of a route called with a method it does not serve.
pub(crate) async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::with_status(StatusCode::METHOD_NOT_ALLOWED, format!("method {method} is not allowed on {}", uri.path()))
}

/// Turns a panic in a handler into a `500` envelope; the panic is logged.
pub(crate) fn panic_response(panic: Box<dyn Any + Send + 'static>) -> Response {
    let detail = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    error!(panic = detail, "request handler panicked");
    ApiError::internal().into_response()
}

/// Counts every request and times it, labelled by the matched route (not the
/// raw path, which would make a label per job id).
pub(crate) async fn record_http_metrics(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = match request.extensions().get::<MatchedPath>() {
        Some(matched) => matched.as_str().to_owned(),
        None => UNMATCHED_ROUTE.to_owned(),
    };
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!(HTTP_REQUESTS, "method" => method.clone(), "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!(HTTP_DURATION, "method" => method, "route" => route).record(started.elapsed().as_secs_f64());
    response
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::routing::get;
    use axum::Router;
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    use tower_http::catch_panic::CatchPanicLayer;

    use super::*;

    async fn broken_handler() -> &'static str {
        panic!("bug in a handler")
    }

    #[tokio::test]
    async fn a_panic_becomes_a_500_envelope() {
        let app = Router::new().route("/boom", get(broken_handler)).layer(CatchPanicLayer::custom(panic_response));
        let Ok(request) = axum::http::Request::builder().uri("/boom").body(Body::empty()) else {
            panic!("valid request")
        };
        let Ok(response) = app.oneshot(request).await;
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let Ok(body) = response.into_body().collect().await else { panic!("readable body") };
        let envelope: serde_json::Value = serde_json::from_slice(&body.to_bytes()).unwrap_or_default();
        assert_eq!(envelope, serde_json::json!({"success": false, "message": "internal error", "data": null}));
    }
}
