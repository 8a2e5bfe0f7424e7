//! The scheduler conformance suite against the in-process backend.
//!
//! Every test gets a scheduler of its own, so the exclusive checks (those
//! that wipe the whole backend) run too.

use std::sync::Arc;

use delayq_queue::{MemoryScheduler, Scheduler};

async fn memory() -> Option<Arc<dyn Scheduler>> {
    Some(Arc::new(MemoryScheduler::new()))
}

delayq_queue::scheduler_conformance!(memory());

mod exclusive {
    use super::*;

    delayq_queue::scheduler_conformance!(exclusive: memory());
}
