//! What the two SQL stores share: the one [`JobStore`] implementation over
//! the group-commit writer and a [`Reads`], the mapping of rows and the
//! binding of values. What differs between the dialects is their SQL (and
//! what each backend adds: SQLite's checkpoints, MySQL's statement deadline).
//!
//! Layout: `rows` maps rows to jobs, `binds` binds jobs, state changes and
//! history lines to statements, `reads` holds the reads.

pub(crate) mod binds;
pub(crate) mod reads;
pub(crate) mod rows;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use async_trait::async_trait;
use delayq_common::{Group, Job, JobId, JobState, Timestamp, Topic};

use self::reads::{JobsRead, Reads};
use crate::identity::StoreId;
use crate::options::StoreOptions;
use crate::retention::RetentionTask;
use crate::store::{
    DueCount, DueCursor, JobStore, ListCursor, LogEntry, QueuedWrite, StateChange, StateCount, StoreError,
    MAX_DELIVERIES,
};
use crate::writer::{BatchDialect, GroupCommitWriter, InsertOutcomes, PurgeOf};

/// The parts of a store over SQL: its identity, its reads, the writer and the
/// retention task.
pub(crate) struct SqlStore {
    backend: &'static str,
    store_id: StoreId,
    reads: Box<dyn Reads>,
    writer: GroupCommitWriter,
    retention: Option<RetentionTask>,
}

impl SqlStore {
    /// Starts the writer over `dialect` with the journal bound of `options`,
    /// and the retention task when they ask for one.
    pub(crate) fn start<D: BatchDialect>(
        store_id: StoreId,
        reads: impl Reads,
        dialect: D,
        options: &StoreOptions,
    ) -> SqlStore {
        let writer = GroupCommitWriter::spawn(dialect, options.journal_max);
        let retention = RetentionTask::spawn(writer.clone(), options.retention, options.purge_interval);
        SqlStore { backend: D::BACKEND, store_id, reads: Box::new(reads), writer, retention }
    }

    /// Returns how many transactions the writer has committed.
    pub(crate) fn commits(&self) -> u64 {
        self.writer.commits()
    }

    /// Returns the counter behind [`SqlStore::commits`], for a task that follows it.
    pub(crate) fn commit_counter(&self) -> Arc<AtomicU64> {
        self.writer.commit_counter()
    }
}

/// A store made of a [`SqlStore`] and what its backend adds; it is a
/// [`JobStore`] through the implementation below.
#[async_trait]
pub(crate) trait OverSql: Send + Sync + 'static {
    /// Returns the shared parts.
    fn sql(&self) -> &SqlStore;

    /// Closes what the backend adds, after the shared parts.
    async fn close_own(&self);
}

#[async_trait]
impl<S: OverSql> JobStore for S {
    fn backend(&self) -> &'static str {
        self.sql().backend
    }

    fn store_id(&self) -> &StoreId {
        &self.sql().store_id
    }

    async fn insert(&self, jobs: Vec<Job>) -> Result<InsertOutcomes, StoreError> {
        self.sql().writer.insert(jobs).await
    }

    fn insert_queued(&self, jobs: Vec<Job>) -> QueuedWrite<InsertOutcomes> {
        Box::pin(self.sql().writer.insert_queued(jobs))
    }

    async fn replace(&self, job: Job) -> Result<(), StoreError> {
        self.sql().writer.replace(job).await
    }

    async fn record(&self, changes: Vec<StateChange>) -> Result<(), StoreError> {
        self.sql().writer.record(changes).await
    }

    fn journal_insert(&self, jobs: Vec<Job>) {
        self.sql().writer.journal_insert(jobs);
    }

    fn journal(&self, changes: Vec<StateChange>) {
        self.sql().writer.journal(changes);
    }

    fn journal_backlog(&self) -> usize {
        self.sql().writer.journal_backlog()
    }

    fn check_journal_room(&self) -> Result<(), StoreError> {
        self.sql().writer.check_journal_room()
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.sql().writer.flush().await
    }

    async fn get(&self, id: &JobId) -> Result<Option<Job>, StoreError> {
        let jobs = self.sql().reads.jobs(JobsRead::Id(id)).await?;
        Ok(jobs.into_iter().next())
    }

    async fn get_many(&self, ids: &[JobId]) -> Result<Vec<Job>, StoreError> {
        // Each id once, so that no two statements return the same row.
        let mut unique: Vec<&JobId> = ids.iter().collect();
        unique.sort_unstable();
        unique.dedup();
        let mut jobs = Vec::with_capacity(unique.len());
        for chunk in unique.chunks(reads::MAX_IDS_PER_READ) {
            jobs.extend(self.sql().reads.jobs(JobsRead::Ids(chunk)).await?);
        }
        Ok(jobs)
    }

    async fn history(&self, id: &JobId, limit: usize) -> Result<Vec<LogEntry>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.sql().reads.history(id, limit).await
    }

    async fn find_live_by_biz_key(&self, topic: &Topic, biz_key: &str) -> Result<Option<Job>, StoreError> {
        let jobs = self.sql().reads.jobs(JobsRead::LiveByBizKey(topic, biz_key)).await?;
        Ok(jobs.into_iter().next())
    }

    async fn list(
        &self,
        topic: &Topic,
        state: JobState,
        limit: usize,
        cursor: Option<&ListCursor>,
    ) -> Result<Vec<Job>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.sql().reads.jobs(JobsRead::Page { topic, state, limit, cursor }).await
    }

    async fn list_by_id(
        &self,
        topic: &Topic,
        state: JobState,
        limit: usize,
        after: Option<&JobId>,
    ) -> Result<Vec<Job>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.sql().reads.jobs(JobsRead::PageById { topic, state, limit, after }).await
    }

    async fn live_jobs_due(&self, after: &DueCursor, through: u64, limit: usize) -> Result<Vec<Job>, StoreError> {
        if limit == 0 || after.bucket > through {
            return Ok(Vec::new());
        }
        self.sql().reads.jobs(JobsRead::LiveDue { after, through, limit }).await
    }

    async fn count_live_due(
        &self,
        topic: Option<&Topic>,
        from: u64,
        to: u64,
        scan: usize,
    ) -> Result<DueCount, StoreError> {
        if scan == 0 || from >= to {
            return Ok(DueCount { jobs: 0, complete: from >= to });
        }
        self.sql().reads.count_live_due(topic, from, to, scan).await
    }

    async fn delete_all_live(&self, at: Timestamp) -> Result<Vec<JobId>, StoreError> {
        self.sql().writer.delete_all_live(at).await
    }

    async fn counts(&self) -> Result<Vec<StateCount>, StoreError> {
        self.sql().reads.counts().await
    }

    async fn purge_ended(&self, ended_before: Timestamp, limit: usize) -> Result<u64, StoreError> {
        self.sql().writer.purge(PurgeOf::EndedBefore(ended_before), limit).await
    }

    async fn purge_dead(&self, topic: &Topic, limit: usize) -> Result<u64, StoreError> {
        self.sql().writer.purge(PurgeOf::DeadOf(topic.clone()), limit).await
    }

    async fn purge_dead_job(&self, id: &JobId) -> Result<bool, StoreError> {
        Ok(self.sql().writer.purge(PurgeOf::DeadJob(id.clone()), 1).await? > 0)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.sql().reads.ping().await
    }

    async fn paused_topics(&self) -> Result<Vec<Topic>, StoreError> {
        self.sql().reads.paused_topics().await
    }

    async fn set_paused(&self, topic: &Topic, paused: bool, at: Timestamp) -> Result<(), StoreError> {
        self.sql().reads.set_paused(topic, paused, at).await
    }

    async fn groups(&self) -> Result<Vec<(Topic, Group)>, StoreError> {
        self.sql().reads.groups().await
    }

    async fn set_group(&self, topic: &Topic, group: &Group, declared: bool, at: Timestamp) -> Result<bool, StoreError> {
        self.sql().reads.set_group(topic, group, declared, at).await
    }

    async fn deliveries_of(&self, id: &JobId) -> Result<Vec<Job>, StoreError> {
        self.sql().reads.deliveries_of(id, MAX_DELIVERIES).await
    }

    async fn close(&self) {
        let sql = self.sql();
        if let Some(retention) = &sql.retention {
            retention.stop();
        }
        sql.writer.close().await;
        sql.reads.close().await;
        self.close_own().await;
    }
}

/// Whether a statement failed on a unique index (an id or a business key
/// held by a live job).
pub(crate) fn is_unique_violation(error: &sqlx::Error) -> bool {
    error.as_database_error().is_some_and(|database| database.is_unique_violation())
}
