//! Bearer-token auth: off when no token is configured; otherwise every route
//! but `/health` needs a known token, and the admin routes an admin token.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use delayq_common::ErrorKind;
use subtle::{Choice, ConstantTimeEq};

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
    let (admin, user) = match_token(&config.admin_tokens, &config.tokens, token, |known, given| known.ct_eq(given));
    if admin {
        return Ok(Some(Access::Admin));
    }
    if user {
        return Ok(Some(Access::User));
    }
    Err(ApiError::new(ErrorKind::Unauthenticated, "token is not valid"))
}

/// Returns whether `given` is one of the admin tokens, and whether it is one
/// of the user tokens.
///
/// Every token is compared, in full, whatever matched before: how long the
/// check takes tells nothing about which token matched or how much of one.
fn match_token(
    admin_tokens: &[String],
    user_tokens: &[String],
    given: &str,
    mut compare: impl FnMut(&[u8], &[u8]) -> Choice,
) -> (bool, bool) {
    let mut admin = Choice::from(0);
    for known in admin_tokens {
        admin |= compare(known.as_bytes(), given.as_bytes());
    }
    let mut user = Choice::from(0);
    for known in user_tokens {
        user |= compare(known.as_bytes(), given.as_bytes());
    }
    (bool::from(admin), bool::from(user))
}

/// Returns the token of an `Authorization: Bearer <token>` header.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
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

    fn tokens(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn compares_whole_tokens() {
        let compare = |known: &[u8], given: &[u8]| known.ct_eq(given);
        let admins = tokens(&["root-secret"]);
        let users = tokens(&["secret", "other"]);
        assert_eq!(match_token(&admins, &users, "secret", compare), (false, true));
        assert_eq!(match_token(&admins, &users, "root-secret", compare), (true, false));
        assert_eq!(match_token(&admins, &users, "secreT", compare), (false, false));
        assert_eq!(match_token(&admins, &users, "secret2", compare), (false, false));
        assert_eq!(match_token(&admins, &users, "", compare), (false, false));
    }

    #[test]
    fn every_token_is_compared_whatever_matches_first() {
        let admins = tokens(&["a1", "a2"]);
        let users = tokens(&["u1", "u2", "u3"]);
        for given in ["a1", "u1", "u3", "none"] {
            let mut compared = Vec::new();
            match_token(&admins, &users, given, |known, given| {
                compared.push(String::from_utf8_lossy(known).into_owned());
                known.ct_eq(given)
            });
            assert_eq!(compared, ["a1", "a2", "u1", "u2", "u3"], "given {given}");
        }
    }
}
