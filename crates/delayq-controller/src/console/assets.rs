//! The stylesheet and the script, hand-written and compiled into the binary.

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;

const STYLESHEET: &str = include_str!("assets/console.css");
const SCRIPT: &str = include_str!("assets/console.js");
/// Assets change only with the binary; an hour of caching spares the refreshes.
const CACHING: &str = "public, max-age=3600";

/// `GET /console/assets/console.css`.
pub(crate) async fn stylesheet() -> impl IntoResponse {
    ([(CONTENT_TYPE, "text/css; charset=utf-8"), (CACHE_CONTROL, CACHING)], STYLESHEET)
}

/// `GET /console/assets/console.js`.
pub(crate) async fn script() -> impl IntoResponse {
    ([(CONTENT_TYPE, "text/javascript; charset=utf-8"), (CACHE_CONTROL, CACHING)], SCRIPT)
}
