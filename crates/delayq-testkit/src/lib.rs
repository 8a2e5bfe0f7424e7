//! What the tests of every delayq crate share about the services they need.
//!
//! A test that needs a service (Redis, MariaDB, RabbitMQ, ZooKeeper, a
//! program such as `redis-server` or `python3`) finds it through a
//! `DELAYQ_TEST_*` variable or on the machine. When it is missing the test
//! prints `skipped: <why>` and passes, so plain `cargo test` works anywhere;
//! with `DELAYQ_TEST_REQUIRE_SERVICES=1`, as `scripts/test.sh` sets, a missing
//! service fails the test instead, so a suite cannot pass by skipping.
//!
//! Used only by tests (and by the conformance suites behind the `testsuite`
//! features); nothing here is part of the server.
//!
//! Layout:
//! - this file: the service gate ([`service`], [`skip`]), [`unique_name`] and
//!   [`free_port`];
//! - `clock`: [`tokio_clock`], a [`delayq_common::Clock`] that follows tokio's
//!   clock, for timing logic tested on a paused runtime;
//! - `eventually`: [`eventually`], polling until a condition holds;
//! - `proxy`: [`FaultProxy`], a TCP proxy whose [`Link`] a test cuts or freezes;
//! - `redis`: [`RedisProcess`], a private `redis-server` a test may empty,
//!   stop or restart;
//! - `job`: [`job`] and [`job_created_at`], jobs with plain test values;
//! - `conformance`: [`conformance_tests!`], a conformance suite as one test
//!   per check, and [`backend_or_skip`].

// Code reachable from a request, a broker reply or a database row must not panic (docs/contributing.md, "Panics").
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic, clippy::unreachable)
)]

mod clock;
mod conformance;
mod eventually;
mod job;
mod proxy;
mod redis;

pub use clock::tokio_clock;
pub use conformance::backend_or_skip;
pub use eventually::{eventually, Settled};
pub use job::{job, job_created_at, job_id, topic};
pub use proxy::{FaultProxy, Link};
pub use redis::RedisProcess;

/// The variable that turns a skipped test into a failure when it is `1`.
pub const REQUIRE_SERVICES: &str = "DELAYQ_TEST_REQUIRE_SERVICES";

/// Whether a missing service fails the test (`DELAYQ_TEST_REQUIRE_SERVICES=1`).
pub fn services_required() -> bool {
    std::env::var(REQUIRE_SERVICES).is_ok_and(|value| value == "1")
}

/// Skips the calling test because of `reason`: prints `skipped: <reason>`.
///
/// # Panics
/// When services are required ([`services_required`]): the test fails, naming `reason`.
#[track_caller]
pub fn skip(reason: &str) {
    assert!(!services_required(), "{reason}, and {REQUIRE_SERVICES}=1");
    println!("skipped: {reason}");
}

/// Returns the value of the service variable `variable` (a URL, a connect
/// string), or `None` after [`skip`] when it is unset or blank.
///
/// # Panics
/// When the variable is missing and services are required.
#[track_caller]
pub fn service(variable: &str) -> Option<String> {
    match std::env::var(variable) {
        Ok(value) if !value.trim().is_empty() => Some(value),
        _ => {
            skip(&format!("{variable} is not set"));
            None
        }
    }
}

/// Returns a name no other test, test run or process uses, for databases, key
/// prefixes, topics and queues: `<stem>_<pid>_<ms>_<sequence>`, in characters
/// each of those accepts.
pub fn unique_name(stem: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let millis = std::time::UNIX_EPOCH.elapsed().unwrap_or_default().as_millis() % 100_000_000_000;
    let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    format!("{stem}_{}_{millis}_{sequence}", std::process::id())
}

/// Returns a TCP port of 127.0.0.1 that was free a moment ago (the system
/// chose it), for a server or proxy the test starts.
///
/// # Panics
/// When no port can be bound.
#[allow(clippy::panic, reason = "a test that cannot bind a port cannot run; this fails it")]
pub fn free_port() -> u16 {
    let bound = std::net::TcpListener::bind("127.0.0.1:0").and_then(|listener| listener.local_addr());
    match bound {
        Ok(address) => address.port(),
        Err(error) => panic!("no free port on 127.0.0.1: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_names_differ_and_ports_are_free() {
        let (first, second) = (unique_name("t"), unique_name("t"));
        assert_ne!(first, second);
        assert!(first.starts_with("t_") && first.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "{first}");
        let port = free_port();
        assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(), "port {port} is free");
    }

    #[test]
    fn a_set_variable_is_returned() {
        // A variable of this test alone, so no other test sees it change.
        let variable = "DELAYQ_TESTKIT_SELF_TEST_SET";
        std::env::set_var(variable, "redis://127.0.0.1:1");
        assert_eq!(service(variable).as_deref(), Some("redis://127.0.0.1:1"));
    }

    #[test]
    fn a_missing_variable_skips_or_fails_as_required() {
        let variable = "DELAYQ_TESTKIT_SELF_TEST_NEVER_SET";
        std::env::set_var(variable, "  ");
        let outcome = std::panic::catch_unwind(|| service(variable));
        if services_required() {
            let Err(panic) = outcome else { panic!("a blank variable must fail when services are required") };
            let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(message.contains(variable) && message.contains(REQUIRE_SERVICES), "{message}");
        } else {
            assert!(matches!(outcome, Ok(None)), "a blank variable is a skip");
        }
    }
}
