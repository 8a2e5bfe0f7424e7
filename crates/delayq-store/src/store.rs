//! The `JobStore` trait: the durable source of truth for every job.

use std::error::Error as StdError;

use async_trait::async_trait;
use delayq_common::{ErrorKind, Group, Job, JobId, JobState, Timestamp, Topic};

use crate::identity::StoreId;

/// A boxed error from a driver, kept as the source of [`StoreError::Unavailable`].
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// The outcome of a write already queued ([`JobStore::insert_queued`]).
pub type QueuedWrite<T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, StoreError>> + Send>>;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A live job already has this id.
    #[error("job {0} already exists")]
    IdTaken(JobId),
    /// A live job of the topic already has this business key.
    #[error("bizKey {biz_key} of topic {topic} is taken by live job {id}")]
    BizKeyTaken {
        /// The topic.
        topic: Topic,
        /// The business key.
        biz_key: String,
        /// The live job holding it (empty when the backend cannot tell).
        id: String,
    },
    /// No such job (or no live one where a live one is required).
    #[error("no job {0}")]
    NotFound(JobId),
    /// The database cannot be reached or refused the operation.
    #[error("{backend} is unavailable")]
    Unavailable {
        /// `sqlite` or `mysql`.
        backend: &'static str,
        /// What the driver said.
        #[source]
        source: BoxError,
    },
    /// A row could not be read back into a job (a bug or a hand-edited row).
    #[error("stored job is corrupt: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// Returns how a caller should classify this failure.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::IdTaken(_) | StoreError::BizKeyTaken { .. } => ErrorKind::Conflict,
            StoreError::NotFound(_) => ErrorKind::NotFound,
            StoreError::Unavailable { .. } => ErrorKind::Unavailable,
            StoreError::Corrupt(_) => ErrorKind::Internal,
        }
    }
}

/// One state change of one job, as it is written to `job` and `job_log`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateChange {
    /// The job.
    pub id: JobId,
    /// The state it entered.
    pub state: JobState,
    /// Its attempt number after the change.
    pub attempt: u32,
    /// Its due time after the change.
    pub run_at: Timestamp,
    /// When the change happened.
    pub at: Timestamp,
    /// The consumer's result, for `finished`.
    pub result: Option<String>,
}

impl StateChange {
    /// Describes `job` as it is now (its state, attempt and due time) at `at`.
    pub fn of(job: &Job, at: Timestamp) -> StateChange {
        StateChange {
            id: job.id.clone(),
            state: job.state,
            attempt: job.attempt,
            run_at: job.run_at,
            at,
            result: job.result.clone(),
        }
    }
}

/// One line of a job's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// The state entered.
    pub state: JobState,
    /// The attempt number after the change.
    pub attempt: u32,
    /// When.
    pub at: Timestamp,
    /// Which node recorded it.
    pub node: String,
}

/// Where a listing continues: after the job with this due time and id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListCursor {
    /// The due time of the last job returned.
    pub run_at: Timestamp,
    /// The id of the last job returned.
    pub id: JobId,
}

/// The width of the due-time buckets the store indexes live jobs by, in ms
/// (2^13, about 8 s). Jobs due within one bucket are indexed in id order, so
/// pushes append to each bucket's end instead of landing on a random page of
/// the index; a restore and the horizon's loader read whole buckets.
pub const DUE_BUCKET_MS: u64 = 8192;

/// How far beyond its last write a job must be due to be indexed in a coarse
/// bucket ([`job_bucket`]): one day.
pub const FAR_AHEAD_MS: u64 = 86_400_000;

/// How many due-time buckets one coarse bucket spans (2^9 buckets, 2^22 ms,
/// about 70 minutes).
pub const COARSE_BUCKETS: u64 = 512;

/// Returns the due-time bucket of an instant.
pub fn due_bucket(at: Timestamp) -> u64 {
    at.as_millis() / DUE_BUCKET_MS
}

/// Returns the bucket the store indexes a live job by: the bucket of its due
/// time, or, for a job due more than [`FAR_AHEAD_MS`] after its last write
/// (`updated_at`), the first bucket of its coarse bucket. Jobs pushed far
/// ahead land at the ends of a few coarse buckets instead of on random pages
/// all over the index. A job is never indexed after its due time, and a job
/// written far ahead is indexed beyond every horizon the loader can have
/// reached at that write (the configuration's longest horizon keeps a coarse
/// bucket's span and more below [`FAR_AHEAD_MS`]), so the loader still reads it
/// in time. The schema computes the same value (`sql/*/0006_*`).
pub fn job_bucket(run_at: Timestamp, updated_at: Timestamp) -> u64 {
    let bucket = due_bucket(run_at);
    if run_at.as_millis().saturating_sub(updated_at.as_millis()) > FAR_AHEAD_MS {
        bucket / COARSE_BUCKETS * COARSE_BUCKETS
    } else {
        bucket
    }
}

/// Returns the last instant of a due-time bucket.
pub fn bucket_end(bucket: u64) -> Timestamp {
    Timestamp::from_millis(bucket.saturating_add(1).saturating_mul(DUE_BUCKET_MS).saturating_sub(1))
}

/// Where a walk over live jobs by due-time bucket continues: after the job
/// with id `id` in bucket `bucket`, in `(bucket, id)` order. An empty `id`
/// takes in the whole bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DueCursor {
    /// The bucket the last job read is indexed by ([`job_bucket`]).
    pub bucket: u64,
    /// The id of the last job read, or empty.
    pub id: String,
}

impl DueCursor {
    /// Starts before every job.
    pub fn start() -> DueCursor {
        DueCursor::default()
    }

    /// Starts at the first job of `bucket`.
    pub fn at_bucket(bucket: u64) -> DueCursor {
        DueCursor { bucket, id: String::new() }
    }

    /// Continues after `job`.
    pub fn after(job: &Job) -> DueCursor {
        DueCursor { bucket: job_bucket(job.run_at, job.updated_at), id: job.id.as_str().to_owned() }
    }
}

/// The most deliveries [`JobStore::deliveries_of`] returns for one job: far
/// more groups than a topic is expected to declare, while one read stays small.
pub const MAX_DELIVERIES: usize = 1_000;

/// What [`JobStore::count_live_due`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DueCount {
    /// The live jobs of the topic among the entries read.
    pub jobs: u64,
    /// Whether every entry of the range was read; when not, `jobs` is a lower bound.
    pub complete: bool,
}

/// How many jobs of a topic are in a state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateCount {
    /// The topic.
    pub topic: Topic,
    /// The state.
    pub state: JobState,
    /// The number of jobs.
    pub count: u64,
}

/// The durable job store: one row per job (`job`) and one per transition (`job_log`).
///
/// Contract every backend keeps:
/// - A write that returns `Ok` is durable (committed); concurrent writes may share
///   one transaction (group commit), but each caller's outcome is its own.
/// - Writes are applied in the order they were submitted from one process,
///   [`JobStore::journal`] included, so a background journal entry submitted
///   before a durable write is never applied after it.
/// - `id` is unique among live jobs: inserting over a terminal row replaces it
///   (the history continues); `(topic, biz_key)` is unique among live jobs.
/// - Every successful insert and state change appends a `job_log` row.
/// - An ended job is kept, with its history, until [`JobStore::purge_ended`]
///   removes it (the store's retention task calls it, see [`StoreOptions`](crate::StoreOptions)).
/// - The store never knows the scheduler.
#[async_trait]
pub trait JobStore: Send + Sync + 'static {
    /// Returns the backend name (`sqlite`, `mysql`).
    fn backend(&self) -> &'static str;

    /// Returns the identity of the database this store writes to, read when
    /// the store opened: every store on the same database (nodes sharing one
    /// MySQL database, processes opening one SQLite file) reports the same id,
    /// a store on another database another one, and it never changes.
    fn store_id(&self) -> &StoreId;

    /// Inserts new jobs durably, each judged alone.
    ///
    /// # Errors
    /// The outer error when nothing could be written (the database is down);
    /// an inner [`StoreError::IdTaken`] or [`StoreError::BizKeyTaken`] per refused job.
    async fn insert(&self, jobs: Vec<Job>) -> Result<Vec<Result<(), StoreError>>, StoreError>;

    /// [`JobStore::insert`], queued before this call returns: every write
    /// submitted after it (a journal entry, a record) is applied after the
    /// insert, in the same commit or a later one. So a caller may make the
    /// jobs visible elsewhere at once and await the outcome after; a change
    /// of the jobs made there cannot reach the store before their rows.
    fn insert_queued(&self, jobs: Vec<Job>) -> QueuedWrite<Vec<Result<(), StoreError>>>;

    /// Overwrites the content of a live job (a `replace` push) durably.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when no live job has this id;
    /// [`StoreError::BizKeyTaken`] when the new business key is held by another live job.
    async fn replace(&self, job: Job) -> Result<(), StoreError>;

    /// Inserts new jobs in the background, held like journal entries and
    /// counted in the journal's backlog: for jobs delayq makes itself (a
    /// consumer group's deliveries), never for a push somebody waits for. A
    /// job refused (a live job holds its id) is logged and left out.
    ///
    /// Writes submitted after this call apply after the insert. The state
    /// changes of a job that reach the writer while its insert is still held
    /// may be written with it: the row is inserted as they leave it, with the
    /// same history. A write of job `X` that somebody waits for takes along
    /// the held inserts of its deliveries `X/<group>`; and since entries are
    /// held in order, a job's end journaled after its deliveries never
    /// commits before them.
    fn journal_insert(&self, jobs: Vec<Job>);

    /// Records state changes durably; returns once they are committed.
    async fn record(&self, changes: Vec<StateChange>) -> Result<(), StoreError>;

    /// Records state changes in the background, after everything submitted before.
    ///
    /// Failed background writes are retried until they succeed or the store is
    /// closed. The journal takes what it is given; callers keep it bounded by
    /// asking [`JobStore::check_journal_room`] before the operation that journals.
    fn journal(&self, changes: Vec<StateChange>);

    /// Returns how many journaled state changes are not committed yet.
    fn journal_backlog(&self) -> usize;

    /// Checks that the journal holds fewer state changes than its bound.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] naming the backend when the journal is full:
    /// the database has not taken the changes journaled so far.
    fn check_journal_room(&self) -> Result<(), StoreError>;

    /// Waits until every change submitted so far is committed.
    async fn flush(&self) -> Result<(), StoreError>;

    /// Returns the job with this id, in whatever state.
    async fn get(&self, id: &JobId) -> Result<Option<Job>, StoreError>;

    /// Returns the jobs with these ids that exist, in whatever state and in
    /// no particular order (an id named twice comes back once).
    async fn get_many(&self, ids: &[JobId]) -> Result<Vec<Job>, StoreError>;

    /// Returns the newest `limit` lines of the job's history, oldest first.
    async fn history(&self, id: &JobId, limit: usize) -> Result<Vec<LogEntry>, StoreError>;

    /// Returns the live job of `topic` with this business key.
    async fn find_live_by_biz_key(&self, topic: &Topic, biz_key: &str) -> Result<Option<Job>, StoreError>;

    /// Lists jobs of a topic in a state, oldest due first, after `cursor`.
    async fn list(
        &self,
        topic: &Topic,
        state: JobState,
        limit: usize,
        cursor: Option<&ListCursor>,
    ) -> Result<Vec<Job>, StoreError>;

    /// Lists jobs of a topic in a state by id, after the id `after`: each page
    /// is a seek in the listing index, so its cost does not grow with the jobs
    /// of the topic (the console's listing; ids the queue assigns follow push order).
    async fn list_by_id(
        &self,
        topic: &Topic,
        state: JobState,
        limit: usize,
        after: Option<&JobId>,
    ) -> Result<Vec<Job>, StoreError>;

    /// Returns up to `limit` live jobs after `after` whose due-time bucket is
    /// at most `through` ([`due_bucket`]), in `(bucket, id)` order: a restore's
    /// and the horizon loader's read.
    ///
    /// Each page is a seek in an index of live jobs by due-time bucket, so its
    /// cost does not grow with the jobs before `after` or after `through`.
    async fn live_jobs_due(&self, after: &DueCursor, through: u64, limit: usize) -> Result<Vec<Job>, StoreError>;

    /// Counts the live jobs of `topic` (of every topic when `None`) indexed in
    /// the due-time buckets `from..to` ([`job_bucket`]), reading at most `scan`
    /// entries of the index of live jobs by due time: the cost is bounded
    /// however many jobs are due, and [`DueCount::complete`] says whether the
    /// read covered the whole range.
    async fn count_live_due(
        &self,
        topic: Option<&Topic>,
        from: u64,
        to: u64,
        scan: usize,
    ) -> Result<DueCount, StoreError>;

    /// Marks every live job deleted at `at` (journaled); returns their ids.
    async fn delete_all_live(&self, at: Timestamp) -> Result<Vec<JobId>, StoreError>;

    /// Counts jobs per topic and state (states with no job are left out).
    ///
    /// Its cost follows the live jobs and the topics with ended jobs, never the
    /// number of ended jobs: live states are counted from an index that holds
    /// live jobs only, ended ones read from a table of counts the writer keeps.
    async fn counts(&self) -> Result<Vec<StateCount>, StoreError>;

    /// Deletes up to `limit` jobs that ended before `ended_before`, with their
    /// history, oldest end first; returns how many it deleted. Their ids are
    /// then unknown, as if no job ever had them.
    async fn purge_ended(&self, ended_before: Timestamp, limit: usize) -> Result<u64, StoreError>;

    /// Deletes up to `limit` dead jobs of `topic`, with their history; returns
    /// how many it deleted. Their ids are then unknown, as after
    /// [`JobStore::purge_ended`].
    async fn purge_dead(&self, topic: &Topic, limit: usize) -> Result<u64, StoreError>;

    /// Deletes job `id` with its history if it is dead; returns whether it
    /// did. Its id is then unknown, as after [`JobStore::purge_dead`].
    async fn purge_dead_job(&self, id: &JobId) -> Result<bool, StoreError>;

    /// Checks that the database answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Returns the topics paused now, by name.
    async fn paused_topics(&self) -> Result<Vec<Topic>, StoreError>;

    /// Pauses `topic` at `at` (a paused one stays as it is) or resumes it (a
    /// running one too).
    async fn set_paused(&self, topic: &Topic, paused: bool, at: Timestamp) -> Result<(), StoreError>;

    /// Returns the consumer groups declared now, by topic, then name.
    async fn groups(&self) -> Result<Vec<(Topic, Group)>, StoreError>;

    /// Declares `group` of `topic` at `at` (`declared`; a declared one keeps its
    /// instant) or drops it; returns whether that changed anything.
    async fn set_group(&self, topic: &Topic, group: &Group, declared: bool, at: Timestamp) -> Result<bool, StoreError>;

    /// Returns every group's delivery of job `id` (the rows whose id is
    /// `id/group`, see [`JobId::for_group`]), in any state, by id: at most
    /// [`MAX_DELIVERIES`], the first by id.
    async fn deliveries_of(&self, id: &JobId) -> Result<Vec<Job>, StoreError>;

    /// Flushes the journal and closes the connections.
    async fn close(&self);
}
