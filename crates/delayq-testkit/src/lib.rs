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

// Code reachable from a request, a broker reply or a database row must not panic (docs/contributing.md, "Panics").
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic, clippy::unreachable)
)]

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

#[cfg(test)]
mod tests {
    use super::*;

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
