//! Who is looking and what they may do.
//!
//! With tokens configured the console asks for one once and keeps it in an
//! `HttpOnly; SameSite=Strict` cookie scoped to `/console`; every page and
//! action checks it as the API checks its bearer token (`delayq_common::auth`).
//! Every state-changing request also carries the CSRF token of the page it
//! came from: a random value the console keeps in a second cookie of its own
//! and writes into each form (double submit). A page of another site can
//! neither read it nor send the cookies along (`SameSite=Strict`).

use axum::extract::rejection::FormRejection;
use axum::extract::State;
use axum::http::header::{COOKIE, LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Form;
use delayq_common::auth::Access;
use maud::html;
use serde::Deserialize;
use subtle::ConstantTimeEq;

use super::layout::{self, Frame};
use crate::app::AppState;

/// The cookie that holds the token, hex-encoded.
const TOKEN_COOKIE: &str = "delayq_console_token";
/// The cookie that holds the CSRF token.
const CSRF_COOKIE: &str = "delayq_console_csrf";
/// How many random bytes a CSRF token has.
const CSRF_BYTES: usize = 16;
/// The longest token the login form takes (far above any sensible token).
const MAX_TOKEN_LEN: usize = 4_096;

/// The person looking at a page, as far as the console can tell.
#[derive(Clone, Debug)]
pub(crate) struct Viewer {
    /// What their token allows; `None` when auth is off.
    access: Option<Access>,
    /// The CSRF token forms carry.
    pub(crate) csrf: String,
    /// Whether the CSRF cookie must be set with the response.
    new_csrf: bool,
    /// Whether actions are shown at all (`console.read_only` hides them).
    pub(crate) can_act: bool,
}

impl Viewer {
    /// Whether an admin action (clear everything) is allowed.
    pub(crate) fn is_admin(&self) -> bool {
        matches!(self.access, None | Some(Access::Admin))
    }

    /// Whether a token cookie was given (auth is on): a logout button then makes sense.
    pub(crate) fn signed_in(&self) -> bool {
        self.access.is_some()
    }

    /// Adds the CSRF cookie to `response` when the request had none.
    pub(crate) fn finish(&self, mut response: Response) -> Response {
        if self.new_csrf {
            if let Ok(value) = HeaderValue::from_str(&cookie(CSRF_COOKIE, &self.csrf)) {
                response.headers_mut().append(SET_COOKIE, value);
            }
        }
        response
    }
}

/// Returns who is looking, or the response to send instead: the login page
/// when auth is on and no valid token came along.
pub(crate) fn viewer(state: &AppState, headers: &HeaderMap) -> Result<Viewer, Response> {
    let (csrf, new_csrf) = match cookie_value(headers, CSRF_COOKIE).filter(|value| is_csrf_token(value)) {
        Some(csrf) => (csrf.to_owned(), false),
        None => match new_csrf_token() {
            Some(csrf) => (csrf, true),
            None => return Err(layout::error_page(StatusCode::SERVICE_UNAVAILABLE, "no randomness available")),
        },
    };
    let can_act = !state.config.console.read_only;
    if !state.tokens.enabled() {
        return Ok(Viewer { access: None, csrf, new_csrf, can_act });
    }
    let token = cookie_value(headers, TOKEN_COOKIE).and_then(decode_hex);
    let access =
        token.as_deref().and_then(|token| std::str::from_utf8(token).ok()).and_then(|t| state.tokens.access(t));
    let viewer = Viewer { access, csrf, new_csrf, can_act };
    if viewer.access.is_some() {
        return Ok(viewer);
    }
    let message = if token.is_some() { "the token is not valid" } else { "a token is required" };
    Err(viewer.finish(login_form(StatusCode::UNAUTHORIZED, &viewer.csrf, Some(message))))
}

/// Checks a state-changing request: the console must allow actions, the
/// viewer must be signed in (when auth is on), the form's CSRF token must be
/// the cookie's, and an admin action needs an admin token.
pub(crate) fn actor(state: &AppState, headers: &HeaderMap, form_csrf: &str, admin: bool) -> Result<Viewer, Response> {
    if state.config.console.read_only {
        return Err(layout::error_page(StatusCode::FORBIDDEN, "the console is read-only"));
    }
    let viewer = viewer(state, headers)?;
    let cookie_csrf = cookie_value(headers, CSRF_COOKIE).unwrap_or("");
    let matches = !cookie_csrf.is_empty() && bool::from(cookie_csrf.as_bytes().ct_eq(form_csrf.as_bytes()));
    if viewer.new_csrf || !matches {
        return Err(layout::error_page(
            StatusCode::FORBIDDEN,
            "the form is stale or came from elsewhere: reload the page",
        ));
    }
    if admin && !viewer.is_admin() {
        return Err(layout::error_page(StatusCode::FORBIDDEN, "an admin token is required"));
    }
    Ok(viewer)
}

/// `GET /console/login`.
pub(crate) async fn login_page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match viewer(&state, &headers) {
        // Signed in already, or auth is off.
        Ok(viewer) => viewer.finish(see_other("/console")),
        Err(login) => login,
    }
}

/// The login form.
#[derive(Deserialize)]
pub(crate) struct LoginForm {
    token: String,
    #[serde(default)]
    csrf: String,
}

/// `POST /console/login`: keeps a valid token in the cookie.
pub(crate) async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    let cookie_csrf = cookie_value(&headers, CSRF_COOKIE).unwrap_or("");
    let Ok(Form(form)) = form else {
        return login_form(StatusCode::BAD_REQUEST, cookie_csrf, Some("the form needs a token"));
    };
    if cookie_csrf.is_empty() || !bool::from(cookie_csrf.as_bytes().ct_eq(form.csrf.as_bytes())) {
        return layout::error_page(StatusCode::FORBIDDEN, "the form is stale or came from elsewhere: reload the page");
    }
    let token = form.token.trim();
    if token.len() > MAX_TOKEN_LEN || state.tokens.access(token).is_none() {
        return login_form(StatusCode::UNAUTHORIZED, cookie_csrf, Some("the token is not valid"));
    }
    let mut response = see_other("/console");
    if let Ok(value) = HeaderValue::from_str(&cookie(TOKEN_COOKIE, &encode_hex(token.as_bytes()))) {
        response.headers_mut().append(SET_COOKIE, value);
    }
    response
}

/// The logout form.
#[derive(Deserialize)]
pub(crate) struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /console/logout`: forgets the token.
pub(crate) async fn logout(headers: HeaderMap, form: Result<Form<LogoutForm>, FormRejection>) -> Response {
    let cookie_csrf = cookie_value(&headers, CSRF_COOKIE).unwrap_or("");
    let form_csrf = form.map(|Form(form)| form.csrf).unwrap_or_default();
    if cookie_csrf.is_empty() || !bool::from(cookie_csrf.as_bytes().ct_eq(form_csrf.as_bytes())) {
        return layout::error_page(StatusCode::FORBIDDEN, "the form is stale or came from elsewhere: reload the page");
    }
    let mut response = see_other("/console/login");
    let expired = format!("{TOKEN_COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0");
    if let Ok(value) = HeaderValue::from_str(&expired) {
        response.headers_mut().append(SET_COOKIE, value);
    }
    response
}

/// The login page, with `message` above the form.
fn login_form(status: StatusCode, csrf: &str, message: Option<&str>) -> Response {
    let body = html! {
        section.login {
            h1 { "Sign in" }
            p { "This delayq node requires a token. It is kept in a cookie for this console only." }
            @if let Some(message) = message { p.flash.error role="alert" { (message) } }
            form method="post" action="/console/login" {
                input type="hidden" name="csrf" value=(csrf);
                label { "Token " input type="password" name="token" id="token" autocomplete="current-password" required; }
                button type="submit" { "Sign in" }
            }
        }
    };
    let frame = Frame { title: "Sign in", nav: false, refresh: false, viewer: None };
    (status, layout::render(&frame, body)).into_response()
}

/// A `303 See Other` to `location` (a path of the console).
pub(crate) fn see_other(location: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(LOCATION, value);
    }
    response
}

/// A cookie of the console: only sent to `/console`, never to scripts or other sites.
fn cookie(name: &str, value: &str) -> String {
    format!("{name}={value}; Path=/console; HttpOnly; SameSite=Strict")
}

/// Returns the value of the cookie `name`, if the request has it.
fn cookie_value<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

fn new_csrf_token() -> Option<String> {
    let mut bytes = [0u8; CSRF_BYTES];
    getrandom::fill(&mut bytes).ok()?;
    Some(encode_hex(&bytes))
}

fn is_csrf_token(value: &str) -> bool {
    value.len() == 2 * CSRF_BYTES && value.bytes().all(|byte| byte.is_ascii_hexdigit())
}

fn encode_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || text.len() > 2 * MAX_TOKEN_LEN {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|start| text.get(start..start + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_by_name_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(COOKIE, HeaderValue::from_static("a=1; delayq_console_csrf=abc; b=2"));
        assert_eq!(cookie_value(&headers, CSRF_COOKIE), Some("abc"));
        assert_eq!(cookie_value(&headers, TOKEN_COOKIE), None);
    }

    #[test]
    fn tokens_survive_the_hex_cookie_and_garbage_does_not_decode() {
        let token = "s3cret; with=odd chars ✓";
        assert_eq!(decode_hex(&encode_hex(token.as_bytes())).as_deref(), Some(token.as_bytes()));
        assert_eq!(decode_hex("abc"), None);
        assert_eq!(decode_hex("zz"), None);
    }

    #[test]
    fn csrf_tokens_are_random_hex() {
        let (Some(first), Some(second)) = (new_csrf_token(), new_csrf_token()) else { panic!("randomness") };
        assert!(is_csrf_token(&first) && is_csrf_token(&second));
        assert_ne!(first, second);
        assert!(!is_csrf_token("not-hex"));
    }
}
