//! The frame every page shares, and the small pieces pages repeat: times,
//! counts, state badges, action buttons, messages and error pages.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use delayq_common::{JobState, Timestamp};
use maud::{html, Markup, DOCTYPE};

use super::session::Viewer;
use crate::error::ApiError;

/// What the frame around a page needs.
pub(crate) struct Frame<'a> {
    /// The page title, after "delayq · ".
    pub(crate) title: &'a str,
    /// Whether the navigation is shown (not on the login page).
    pub(crate) nav: bool,
    /// Whether the page refreshes its content every few seconds.
    pub(crate) refresh: bool,
    /// Who is looking (for the logout button).
    pub(crate) viewer: Option<&'a Viewer>,
}

/// Renders `body` in the frame.
pub(crate) fn render(frame: &Frame<'_>, body: Markup) -> Html<String> {
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "delayq · " (frame.title) }
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/console" { "delayq" }
                    @if frame.nav {
                        nav {
                            a href="/console" { "Overview" }
                            a href="/console/topics" { "Topics" }
                            a href="/console/forwarding" { "Forwarding" }
                        }
                        form.search method="get" action="/console/search" {
                            input type="search" name="id" placeholder="job id" aria-label="job id";
                            button type="submit" { "Find" }
                        }
                        @if let Some(viewer) = frame.viewer.filter(|viewer| viewer.signed_in()) {
                            form.logout method="post" action="/console/logout" {
                                input type="hidden" name="csrf" value=(viewer.csrf);
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main id="content" data-refresh=[frame.refresh.then_some("5000")] { (body) }
            }
        }
    };
    Html(page.into_string())
}

/// Renders a page for `viewer` (setting its CSRF cookie when new).
pub(crate) fn page(viewer: &Viewer, title: &str, refresh: bool, body: Markup) -> Response {
    let frame = Frame { title, nav: true, refresh, viewer: Some(viewer) };
    viewer.finish(render(&frame, body).into_response())
}

/// An error page with `status` and `message`.
pub(crate) fn error_page(status: StatusCode, message: &str) -> Response {
    let body = html! {
        section.error {
            h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("error")) }
            p.flash.error role="alert" { (message) }
            p { a href="/console" { "Back to the overview" } }
        }
    };
    let frame = Frame { title: "error", nav: true, refresh: false, viewer: None };
    (status, render(&frame, body)).into_response()
}

/// The error page of a failure the API would answer with `error`.
pub(crate) fn api_error_page(error: impl Into<ApiError>) -> Response {
    let error = error.into();
    error_page(error.status(), error.message())
}

/// A button that posts `action` with the CSRF token; `confirm` asks first.
pub(crate) fn action_button(viewer: &Viewer, action: &str, label: &str, confirm: Option<&str>) -> Markup {
    html! {
        form.action method="post" action=(action) data-confirm=[confirm] {
            input type="hidden" name="csrf" value=(viewer.csrf);
            button type="submit" { (label) }
        }
    }
}

/// A message that an action left (`?done=`), from a fixed list so that a
/// link cannot put words on the page.
pub(crate) fn flash(done: Option<&str>) -> Markup {
    let message = match done {
        Some("paused") => "Paused: nothing is handed out until it is resumed.",
        Some("resumed") => "Resumed.",
        Some("retried") => "Ready again: the job will be delivered with its attempts counted from 1.",
        Some("retried-dead") => "Every dead job of the topic is ready again.",
        Some("deleted-dead") => "Every dead job of the topic is deleted.",
        Some("deleted") => "Deleted.",
        Some("run") => "Due now.",
        Some("rescheduled") => "The due time is changed.",
        Some("cleared") => "Every live job is deleted.",
        _ => return html! {},
    };
    html! { p.flash role="status" { (message) } }
}

/// A job state as a badge.
pub(crate) fn state_badge(state: JobState) -> Markup {
    html! { span class=(format!("badge state-{}", state.as_str())) { (state.as_str()) } }
}

/// An instant as UTC text, to the millisecond.
pub(crate) fn instant(at: Timestamp) -> String {
    let time = std::time::UNIX_EPOCH + Duration::from_millis(at.as_millis());
    humantime::format_rfc3339_millis(time).to_string()
}

/// How far an instant is from now, in words ("in 5m 3s", "2h ago").
pub(crate) fn relative(at: Timestamp, now: Timestamp) -> String {
    let (ahead, span) = if at.as_millis() >= now.as_millis() { (true, at.since(now)) } else { (false, now.since(at)) };
    let rounded = Duration::from_secs(span.as_secs());
    let words = if rounded.is_zero() { "now".to_owned() } else { humantime::format_duration(rounded).to_string() };
    match (ahead, rounded.is_zero()) {
        (_, true) => words,
        (true, false) => format!("in {words}"),
        (false, false) => format!("{words} ago"),
    }
}

/// A count with thousands separators.
pub(crate) fn count(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A duration in ms or s, for lateness.
pub(crate) fn short_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 1_000 {
        format!("{millis} ms")
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_get_separators() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_000), "1,000");
        assert_eq!(count(1_234_567), "1,234,567");
    }

    #[test]
    fn relative_times_read_both_ways() {
        let now = Timestamp::from_millis(1_000_000);
        assert_eq!(relative(Timestamp::from_millis(1_065_000), now), "in 1m 5s");
        assert_eq!(relative(Timestamp::from_millis(940_000), now), "1m ago");
        assert_eq!(relative(now, now), "now");
    }
}
