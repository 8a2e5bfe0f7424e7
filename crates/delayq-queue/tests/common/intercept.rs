//! A scheduler that hands every call to a real backend except the few a test
//! takes over, to make the backend fail or a race happen at an exact moment.
//!
//! The real backend still does the work; the test only chooses when a call
//! fails or what runs just before it. Each test names what it takes over in
//! an [`Intercept`] of its own and leaves the rest to the defaults.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use delayq_common::{Job, JobId, Timestamp, Topic};
use delayq_queue::{HorizonMarks, MemoryUse, Promotion, QueueResult, RestoreFence, Scheduler, TopicStats};
use tokio::sync::Notify;

/// The calls a test may take over; by default each goes to `inner` unchanged.
#[async_trait]
pub trait Intercept: Send + Sync + 'static {
    async fn schedule_batch(&self, inner: &dyn Scheduler, jobs: &[Job]) -> QueueResult<Vec<QueueResult<()>>> {
        inner.schedule_batch(jobs).await
    }
    async fn restore(&self, inner: &dyn Scheduler, job: &Job) -> QueueResult<bool> {
        inner.restore(job).await
    }
    async fn restore_batch(&self, inner: &dyn Scheduler, jobs: &[Job], fence: &RestoreFence) -> QueueResult<Vec<bool>> {
        inner.restore_batch(jobs, fence).await
    }
    async fn replace(&self, inner: &dyn Scheduler, job: &Job) -> QueueResult<Job> {
        inner.replace(job).await
    }
    async fn finish(&self, inner: &dyn Scheduler, id: &JobId, attempt: Option<u32>) -> QueueResult<Job> {
        inner.finish(id, attempt).await
    }
    async fn delete(&self, inner: &dyn Scheduler, id: &JobId) -> QueueResult<Job> {
        inner.delete(id).await
    }
    async fn delete_batch(&self, inner: &dyn Scheduler, ids: &[JobId]) -> QueueResult<u64> {
        inner.delete_batch(ids).await
    }
    async fn clear(&self, inner: &dyn Scheduler) -> QueueResult<u64> {
        inner.clear().await
    }
}

/// `inner` with the calls `intercept` takes over; dereferences to the
/// intercept, so a test reaches its switches and records directly.
pub struct Intercepted<I> {
    inner: Arc<dyn Scheduler>,
    intercept: I,
}

impl<I: Intercept> Intercepted<I> {
    pub fn new(inner: Arc<dyn Scheduler>, intercept: I) -> Intercepted<I> {
        Intercepted { inner, intercept }
    }
}

impl<I> Deref for Intercepted<I> {
    type Target = I;

    fn deref(&self) -> &I {
        &self.intercept
    }
}

#[async_trait]
impl<I: Intercept> Scheduler for Intercepted<I> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    async fn schedule(&self, job: &Job) -> QueueResult<()> {
        self.inner.schedule(job).await
    }
    async fn schedule_batch(&self, jobs: &[Job]) -> QueueResult<Vec<QueueResult<()>>> {
        self.intercept.schedule_batch(&*self.inner, jobs).await
    }
    async fn restore(&self, job: &Job) -> QueueResult<bool> {
        self.intercept.restore(&*self.inner, job).await
    }
    async fn open_restore(&self) -> QueueResult<RestoreFence> {
        self.inner.open_restore().await
    }
    async fn restore_batch(&self, jobs: &[Job], fence: &RestoreFence) -> QueueResult<Vec<bool>> {
        self.intercept.restore_batch(&*self.inner, jobs, fence).await
    }
    fn is_external(&self) -> bool {
        self.inner.is_external()
    }
    fn holds_payloads(&self) -> bool {
        self.inner.holds_payloads()
    }
    async fn check_intact(&self) -> QueueResult<bool> {
        self.inner.check_intact().await
    }
    async fn admit_until(&self, until: Timestamp) -> QueueResult<Option<Timestamp>> {
        self.inner.admit_until(until).await
    }
    async fn mark_loaded(&self, until: Timestamp) -> QueueResult<()> {
        self.inner.mark_loaded(until).await
    }
    async fn horizon(&self) -> QueueResult<Option<HorizonMarks>> {
        self.inner.horizon().await
    }
    async fn memory_use(&self) -> QueueResult<Option<MemoryUse>> {
        self.inner.memory_use().await
    }
    async fn replace(&self, job: &Job) -> QueueResult<Job> {
        self.intercept.replace(&*self.inner, job).await
    }
    async fn reserve(&self, topic: &Topic, count: usize, wait: Duration) -> QueueResult<Vec<Job>> {
        self.inner.reserve(topic, count, wait).await
    }
    async fn finish(&self, id: &JobId, attempt: Option<u32>) -> QueueResult<Job> {
        self.intercept.finish(&*self.inner, id, attempt).await
    }
    async fn nack(&self, id: &JobId, attempt: Option<u32>, delay: Duration) -> QueueResult<Job> {
        self.inner.nack(id, attempt, delay).await
    }
    async fn touch(&self, id: &JobId, attempt: Option<u32>) -> QueueResult<Job> {
        self.inner.touch(id, attempt).await
    }
    async fn delete(&self, id: &JobId) -> QueueResult<Job> {
        self.intercept.delete(&*self.inner, id).await
    }
    async fn delete_batch(&self, ids: &[JobId]) -> QueueResult<u64> {
        self.intercept.delete_batch(&*self.inner, ids).await
    }
    async fn get(&self, id: &JobId) -> QueueResult<Option<Job>> {
        self.inner.get(id).await
    }
    async fn promote_due(&self, now: Timestamp, max_batch: usize) -> QueueResult<Promotion> {
        self.inner.promote_due(now, max_batch).await
    }
    fn fence(&self, epoch: u64) {
        self.inner.fence(epoch);
    }
    fn wakeup(&self) -> Arc<Notify> {
        self.inner.wakeup()
    }
    async fn stats(&self) -> QueueResult<Vec<TopicStats>> {
        self.inner.stats().await
    }
    async fn clear(&self) -> QueueResult<u64> {
        self.intercept.clear(&*self.inner).await
    }
    async fn ping(&self) -> QueueResult<()> {
        self.inner.ping().await
    }
}
