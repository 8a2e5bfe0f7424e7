//! Bearer-token auth: off when no token is configured; otherwise every route
//! but `/health` needs a known token, and the admin routes an admin token.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use delayq_common::auth::{bearer_token, Access, Tokens};
use delayq_common::ErrorKind;

use crate::app::AppState;
use crate::error::ApiError;

/// Lets a request through when it carries any configured token.
pub(crate) async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match authenticate(&state.tokens, request.headers()) {
        Ok(_) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// Lets a request through when it carries an admin token.
pub(crate) async fn require_admin(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match authenticate(&state.tokens, request.headers()) {
        Ok(None | Some(Access::Admin)) => next.run(request).await,
        Ok(Some(Access::User)) => ApiError::new(ErrorKind::Forbidden, "admin token is required").into_response(),
        Err(refusal) => refusal.into_response(),
    }
}

/// Returns what the request may do: `None` when auth is off.
fn authenticate(tokens: &Tokens, headers: &HeaderMap) -> Result<Option<Access>, ApiError> {
    if !tokens.enabled() {
        return Ok(None);
    }
    let Some(token) = headers.get(AUTHORIZATION).and_then(|value| bearer_token(value.as_bytes())) else {
        return Err(ApiError::new(ErrorKind::Unauthenticated, "authorization is required: Bearer <token>"));
    };
    match tokens.access(token) {
        Some(access) => Ok(Some(access)),
        None => Err(ApiError::new(ErrorKind::Unauthenticated, "token is not valid")),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderValue, StatusCode};

    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(AUTHORIZATION, value);
        }
        headers
    }

    fn kind_of(outcome: Result<Option<Access>, ApiError>) -> Result<Option<Access>, StatusCode> {
        outcome.map_err(|refusal| refusal.into_response().status())
    }

    #[test]
    fn off_without_tokens() {
        assert_eq!(kind_of(authenticate(&Tokens::default(), &HeaderMap::new())), Ok(None));
    }

    #[test]
    fn users_admins_and_refusals() {
        let tokens = Tokens::new(&["secret".into()], &["root-secret".into()]);
        assert_eq!(kind_of(authenticate(&tokens, &headers("Bearer secret"))), Ok(Some(Access::User)));
        assert_eq!(kind_of(authenticate(&tokens, &headers("bearer  root-secret "))), Ok(Some(Access::Admin)));
        for refused in ["Bearer secreT", "Bearer secret2", "Basic secret", "Bearer "] {
            assert_eq!(kind_of(authenticate(&tokens, &headers(refused))), Err(StatusCode::UNAUTHORIZED), "{refused}");
        }
        assert_eq!(kind_of(authenticate(&tokens, &HeaderMap::new())), Err(StatusCode::UNAUTHORIZED));
    }
}
