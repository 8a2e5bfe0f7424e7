//! The console's guards, request by request: bad input gets a clear error
//! page and changes nothing, a form without the page's CSRF token is refused,
//! read-only mode refuses every action, auth works as the API's does, and a
//! console turned off is not routed. (The pages in a browser:
//! tests/e2e_console.rs at the repository root.)

#![allow(clippy::unwrap_used)]

mod common;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use common::{TestApp, ADMIN_TOKEN, USER_TOKEN};
use delayq_common::{JobId, Topic};
use http_body_util::BodyExt;
use serde_json::json;
use tower::ServiceExt;

/// A response's status, `Set-Cookie` headers and body.
struct Page {
    status: StatusCode,
    cookies: Vec<String>,
    location: Option<String>,
    headers: axum::http::HeaderMap,
    body: String,
}

async fn request(app: &TestApp, method: Method, uri: &str, cookie: Option<&str>, form: Option<&str>) -> Page {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, cookie);
    }
    if form.is_some() {
        request = request.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    }
    let request = request.body(form.map(|form| Body::from(form.to_owned())).unwrap_or_else(Body::empty)).unwrap();
    let response = app.router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let cookies =
        response.headers().get_all(header::SET_COOKIE).iter().map(|v| v.to_str().unwrap().to_owned()).collect();
    let location = response.headers().get(header::LOCATION).map(|v| v.to_str().unwrap().to_owned());
    let headers = response.headers().clone();
    let body = String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    Page { status, cookies, location, headers, body }
}

async fn get(app: &TestApp, uri: &str, cookie: Option<&str>) -> Page {
    request(app, Method::GET, uri, cookie, None).await
}

async fn post(app: &TestApp, uri: &str, cookie: &str, form: &str) -> Page {
    request(app, Method::POST, uri, Some(cookie), Some(form)).await
}

/// The CSRF token a first view hands out, as the cookie to send back.
async fn csrf_of(app: &TestApp, cookie: Option<&str>) -> String {
    let page = get(app, "/console/forwarding", cookie).await;
    let set = page.cookies.iter().find(|cookie| cookie.starts_with("delayq_console_csrf=")).expect("a CSRF cookie");
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Path=/console"), "{set}");
    set.trim_start_matches("delayq_console_csrf=").split(';').next().unwrap().to_owned()
}

fn hex(text: &str) -> String {
    text.bytes().map(|byte| format!("{byte:02x}")).collect()
}

async fn is_paused(app: &TestApp, topic: &str) -> bool {
    app.queue.paused_topics().await.contains(&Topic::parse(topic.to_owned()).unwrap())
}

#[tokio::test]
async fn bad_input_gets_an_error_page_and_changes_nothing() {
    let app = TestApp::new().await;
    let id = app.push(json!({"topic": "orders", "body": "x", "delay": 600_000})).await;
    let due = app.queue.get(&JobId::parse(&id).unwrap()).await.unwrap().job.run_at;
    for (uri, status) in [
        ("/console/topics/bad%20topic", StatusCode::BAD_REQUEST),
        ("/console/topics/orders/jobs?state=nope", StatusCode::BAD_REQUEST),
        ("/console/topics/orders/jobs?after=%00", StatusCode::BAD_REQUEST),
        (&format!("/console/jobs/{}", "a".repeat(300)), StatusCode::BAD_REQUEST),
        ("/console/jobs/no-such-job", StatusCode::NOT_FOUND),
        ("/console/search?id=no-such-job", StatusCode::NOT_FOUND),
        ("/console/search?topic=orders&bizKey=none", StatusCode::NOT_FOUND),
        ("/console/search", StatusCode::BAD_REQUEST),
    ] {
        let page = get(&app, uri, None).await;
        assert_eq!(page.status, status, "{uri}: {}", page.body);
        assert!(page.body.contains("role=\"alert\""), "{uri}: an error page with a message");
    }
    let csrf = csrf_of(&app, None).await;
    let cookie = format!("delayq_console_csrf={csrf}");
    let form = format!("csrf={csrf}&runAt=next%20tuesday");
    let refused = post(&app, &format!("/console/jobs/{id}/reschedule"), &cookie, &form).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(refused.body.contains("runAt must be a UTC time"));
    let huge = format!("csrf={csrf}&runAt={}", "9".repeat(64 * 1024));
    let too_large = post(&app, &format!("/console/jobs/{id}/reschedule"), &cookie, &huge).await;
    assert_eq!(too_large.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(app.queue.get(&JobId::parse(&id).unwrap()).await.unwrap().job.run_at, due, "the due time stays");

    let moved = post(
        &app,
        &format!("/console/jobs/{id}/reschedule"),
        &cookie,
        &format!("csrf={csrf}&runAt=2099-01-02T03:04:05"),
    )
    .await;
    assert_eq!(moved.status, StatusCode::SEE_OTHER, "{}", moved.body);
    let job = app.queue.get(&JobId::parse(&id).unwrap()).await.unwrap().job;
    assert_eq!(job.run_at.as_millis(), 4_071_006_245_000, "rescheduled, same job");
}

#[tokio::test]
async fn a_form_without_the_pages_csrf_token_is_refused() {
    let app = TestApp::new().await;
    let csrf = csrf_of(&app, None).await;
    let cookie = format!("delayq_console_csrf={csrf}");
    let other = "ab".repeat(16);
    for (cookie, form) in [
        ("", format!("csrf={csrf}")),
        (cookie.as_str(), String::new()),
        (cookie.as_str(), format!("csrf={other}")),
        ("delayq_console_csrf=zz", "csrf=zz".to_owned()),
    ] {
        let page = post(&app, "/console/topics/orders/pause", cookie, &form).await;
        assert_eq!(page.status, StatusCode::FORBIDDEN, "cookie {cookie:?}, form {form:?}");
        assert!(!is_paused(&app, "orders").await, "nothing paused");
    }
    let page = post(&app, "/console/topics/orders/pause", &cookie, &format!("csrf={csrf}")).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(page.location.as_deref(), Some("/console/topics/orders?done=paused"));
    assert!(is_paused(&app, "orders").await);
    // A view with the cookie keeps it: no new token for every page.
    let overview = get(&app, "/console", Some(&cookie)).await;
    assert!(overview.cookies.is_empty());
    // No other site may frame a page to trick a click on it.
    assert_eq!(overview.headers[header::X_FRAME_OPTIONS], "DENY");
    let policy = overview.headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(policy.contains("frame-ancestors 'none'") && policy.contains("default-src 'self'"), "{policy}");
}

#[tokio::test]
async fn read_only_mode_refuses_every_action() {
    let app = TestApp::with_config(|config| config.console.read_only = true).await;
    let id = app.push(json!({"topic": "orders", "body": "x", "delay": 600_000})).await;
    let csrf = csrf_of(&app, None).await;
    let cookie = format!("delayq_console_csrf={csrf}");
    for action in ["/console/topics/orders/pause", &format!("/console/jobs/{id}/delete"), "/console/clear"] {
        let page = post(&app, action, &cookie, &format!("csrf={csrf}")).await;
        assert_eq!(page.status, StatusCode::FORBIDDEN, "{action}");
        assert!(page.body.contains("read-only"));
    }
    assert!(!is_paused(&app, "orders").await);
    assert_eq!(app.queue.get(&JobId::parse(&id).unwrap()).await.unwrap().job.state.as_str(), "delay");
    for uri in ["/console", "/console/topics/orders", &format!("/console/jobs/{id}")] {
        let page = get(&app, uri, Some(&cookie)).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(!page.body.contains("method=\"post\""), "{uri} shows no action");
    }
}

#[tokio::test]
async fn with_auth_pages_need_a_token_and_clearing_an_admin_token() {
    let app = TestApp::with_auth().await;
    app.send(Method::POST, "/push", Some(&json!({"topic": "t", "body": "x", "delay": 600_000})), Some(USER_TOKEN))
        .await;
    let login = get(&app, "/console", None).await;
    assert_eq!(login.status, StatusCode::UNAUTHORIZED);
    assert!(login.body.contains("name=\"token\""), "the login form");
    for garbage in
        ["delayq_console_token=zz", "delayq_console_token=abc", &format!("delayq_console_token={}", hex("wrong"))]
    {
        assert_eq!(get(&app, "/console", Some(garbage)).await.status, StatusCode::UNAUTHORIZED, "{garbage}");
    }

    let csrf = csrf_of(&app, None).await;
    let signed_in = post(
        &app,
        "/console/login",
        &format!("delayq_console_csrf={csrf}"),
        &format!("csrf={csrf}&token={USER_TOKEN}"),
    )
    .await;
    assert_eq!(signed_in.status, StatusCode::SEE_OTHER);
    let token_cookie = signed_in.cookies.iter().find(|c| c.starts_with("delayq_console_token=")).unwrap();
    assert!(token_cookie.contains("HttpOnly") && token_cookie.contains("SameSite=Strict"));
    let wrong =
        post(&app, "/console/login", &format!("delayq_console_csrf={csrf}"), &format!("csrf={csrf}&token=nope")).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);

    let user = format!("delayq_console_token={}; delayq_console_csrf={csrf}", hex(USER_TOKEN));
    assert_eq!(get(&app, "/console", Some(&user)).await.status, StatusCode::OK);
    let refused = post(&app, "/console/clear", &user, &format!("csrf={csrf}")).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(refused.body.contains("admin token is required"));
    assert_eq!(app.queue.stats().await.unwrap().live.iter().map(|topic| topic.delay).sum::<u64>(), 1);

    let admin = format!("delayq_console_token={}; delayq_console_csrf={csrf}", hex(ADMIN_TOKEN));
    let cleared = post(&app, "/console/clear", &admin, &format!("csrf={csrf}")).await;
    assert_eq!(cleared.status, StatusCode::SEE_OTHER);
    assert_eq!(app.queue.stats().await.unwrap().live.iter().map(|topic| topic.delay).sum::<u64>(), 0);
}

#[tokio::test]
async fn a_console_turned_off_is_not_routed() {
    let app = TestApp::with_config(|config| config.console.enabled = false).await;
    assert_eq!(get(&app, "/console", None).await.status, StatusCode::NOT_FOUND);
    assert_eq!(get(&app, "/console/assets/console.css", None).await.status, StatusCode::NOT_FOUND);
    assert_eq!(app.get("/health").await.status, StatusCode::OK);
}
