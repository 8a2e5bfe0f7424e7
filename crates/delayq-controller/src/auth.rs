//! Bearer-token auth: off when no token is configured; otherwise every route
//! but `/health` needs a known token, and the admin routes an admin token.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use delayq_common::ErrorKind;

use crate::app::{AppState, ControllerConfig};
use crate::error::ApiError;

/// What a request's credentials allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    User,
    Admin,
}

/// Lets a request through when it carries any configured token.
pub(crate) async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match authenticate(&state.config, request.headers()) {
        Ok(_) => next.run(request).await,
        Err(refusal) => axum::response::IntoResponse::into_response(refusal),
    }
}

/// Lets a request through when it carries an admin token.
pub(crate) async fn require_admin(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match authenticate(&state.config, request.headers()) {
        Ok(None | Some(Access::Admin)) => next.run(request).await,
        Ok(Some(Access::User)) => ApiError::new(ErrorKind::Forbidden, "admin token is required").into_response(),
        Err(refusal) => axum::response::IntoResponse::into_response(refusal),
    }
}

/// Returns what the request may do: `None` when auth is off.
fn authenticate(config: &ControllerConfig, headers: &HeaderMap) -> Result<Option<Access>, ApiError> {
    if !config.auth_enabled() {
        return Ok(None);
    }
    let Some(token) = bearer_token(headers) else {
        return Err(ApiError::new(ErrorKind::Unauthenticated, "authorization is required: Bearer <token>"));
    };
    if config.admin_tokens.iter().any(|known| same_token(known, token)) {
        return Ok(Some(Access::Admin));
    }
    if config.tokens.iter().any(|known| same_token(known, token)) {
        return Ok(Some(Access::User));
    }
    Err(ApiError::new(ErrorKind::Unauthenticated, "token is not valid"))
}

/// Returns the token of an `Authorization: Bearer <token>` header.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Compares tokens in time independent of where they differ.
fn same_token(known: &str, given: &str) -> bool {
    if known.len() != given.len() {
        return false;
    }
    known.bytes().zip(given.bytes()).fold(0u8, |difference, (a, b)| difference | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(AUTHORIZATION, value);
        }
        headers
    }

    #[test]
    fn reads_bearer_tokens_only() {
        assert_eq!(bearer_token(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("bearer  abc ")), Some("abc"));
        assert_eq!(bearer_token(&headers("Basic abc")), None);
        assert_eq!(bearer_token(&headers("Bearer ")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }

    #[test]
    fn compares_whole_tokens() {
        assert!(same_token("secret", "secret"));
        assert!(!same_token("secret", "secreT"));
        assert!(!same_token("secret", "secret2"));
    }
}
