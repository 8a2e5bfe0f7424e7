//! Crash points for tests: a debug build armed with `DELAYQ_FAILPOINT=<name>`
//! aborts the process at that point, the way a `kill -9` or a power cut would.
//!
//! Release builds compile every crash point to nothing, so the variable has
//! no effect there.

/// Between the store write of a push and its scheduler write.
pub const PUSH_AFTER_STORE: &str = "push-after-store";

/// Aborts the process when the crash point `name` is armed (debug builds only).
#[cfg(debug_assertions)]
pub(crate) fn crash_if_armed(name: &str) {
    static ARMED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let armed = ARMED.get_or_init(|| std::env::var("DELAYQ_FAILPOINT").ok().filter(|name| !name.is_empty()));
    if armed.as_deref() == Some(name) {
        eprintln!("failpoint {name} reached: aborting");
        std::process::abort();
    }
}

/// Does nothing: crash points exist in debug builds only.
#[cfg(not(debug_assertions))]
pub(crate) fn crash_if_armed(_name: &str) {}
