//! How a conformance suite (the scheduler's, the store's) becomes tests: one
//! `#[tokio::test]` per check, each on a backend of its own, skipped through
//! the service gate when the backend is not configured.
//!
//! The suites differ in their checks and backends, not in how a check is
//! run, so that is written once here and every suite skips the same way.

use std::future::Future;

/// Awaits `factory`, the backend conformance check `check` runs on. When it
/// gives none (its service is not configured) the check is skipped through
/// [`skip`](crate::skip): it passes, or fails when services are required.
pub async fn backend_or_skip<B>(check: &str, factory: impl Future<Output = Option<B>>) -> Option<B> {
    let backend = factory.await;
    if backend.is_none() {
        crate::skip(&format!("{check}: the backend is not configured"));
    }
    backend
}

/// Expands to one `#[tokio::test]` per check of a conformance suite.
///
/// Each test awaits `factory` (an expression of type
/// `impl Future<Output = Option<B>>`, evaluated once per test), binds the
/// backend to the name given before it, calls `suite::check(backend.clone())`
/// and then runs the `after` block, if any (closing the backend, say). A
/// factory that gives `None` skips the test ([`backend_or_skip`]).
///
/// `suite` is the module holding the checks, written `$crate::testsuite` by the
/// macro of the crate that owns the suite. The calling crate needs `tokio`
/// (with `macros` and `rt-multi-thread`) among its dev-dependencies.
///
/// ```ignore
/// delayq_testkit::conformance_tests! {
///     suite: $crate::testsuite,
///     backend: store = $factory,
///     worker_threads: 4,
///     after: { store.close().await },
///     checks: [check_insert_get_round_trip, check_replace],
/// }
/// ```
#[macro_export]
macro_rules! conformance_tests {
    (
        suite: $krate:tt :: $suite:ident,
        backend: $backend:ident = $factory:expr,
        worker_threads: $threads:tt,
        checks: [$($check:ident),+ $(,)?] $(,)?
    ) => {
        $crate::conformance_tests! {
            suite: $krate::$suite,
            backend: $backend = $factory,
            worker_threads: $threads,
            after: {},
            checks: [$($check),+],
        }
    };
    (
        suite: $krate:tt :: $suite:ident,
        backend: $backend:ident = $factory:expr,
        worker_threads: $threads:tt,
        after: $after:block,
        checks: [$($check:ident),+ $(,)?] $(,)?
    ) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = $threads)]
            async fn $check() {
                let ::std::option::Option::Some($backend) =
                    $crate::backend_or_skip(::std::stringify!($check), $factory).await
                else {
                    return;
                };
                $krate::$suite::$check(::std::clone::Clone::clone(&$backend)).await;
                $after
            }
        )+
    };
}
