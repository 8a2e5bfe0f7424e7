//! The in-process scheduler backend.
/// The in-process scheduler.
pub struct MemoryScheduler;
