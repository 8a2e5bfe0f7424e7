//! Group commit, shared by the SQL backends.
//!
//! One writer task per store owns the write connection. Callers queue writes on
//! an unbounded channel; the task takes whatever is queued (up to
//! [`MAX_BATCH_ROWS`]), applies it in submission order inside ONE transaction,
//! commits, then answers every waiting caller through its oneshot. Journal
//! entries (state changes, and the inserts of consumer groups' deliveries)
//! ride the same channel without a reply; a journaled insert takes along the
//! changes of its jobs that reach the same batch (see `fold`). They may wait up to
//! [`hold::JOURNAL_HOLD`] for a later write of their job, so that a job's quick
//! succession of changes shares one commit (see `hold`); per job, the order
//! of all writes is the submission order, and [`GroupCommitWriter::flush`]
//! commits everything submitted before it.
//!
//! Each write is judged alone: a refused insert (id or business key held by a
//! live job) is an outcome of that write, not a failure of the batch. Only a
//! database failure fails the batch; then every durable caller gets
//! [`StoreError::Unavailable`] and the journal entries are kept and retried with
//! backoff ahead of anything newer, until they commit or the store is closed.
//!
//! The journal is bounded: the handle counts the state changes journaled and
//! not yet committed (queued, held or retained after a failure), and
//! [`GroupCommitWriter::check_journal_room`] refuses once they reach the bound,
//! so that callers stop adding to it while the database is down.
//!
//! The SQL lives behind [`BatchDialect`]; this module knows only ordering,
//! batching, retries and replies.
//!
//! Layout: this module holds the dialect seam and the callers' handle; `task`
//! holds the writer task (batching, applying, retrying); `reply` answers the
//! callers of a batch; `hold` decides which journal entries wait.

/// The SQL condition under which a state change applies to a live row, given
/// the row's and the change's status and attempt as SQL expressions: an ending
/// state always; a live state only forward (a later attempt, or the same attempt
/// in the same or a later state: delay, ready, reserved). A change that arrives
/// after a later one of the same job (journals are written in the background, by
/// every node) would otherwise take the row back, e.g. to ready after reserved.
macro_rules! moves_forward {
    ($row_status:expr, $row_attempt:expr, $status:expr, $attempt:expr) => {
        concat!(
            "(",
            $status,
            " NOT IN ('delay', 'ready', 'reserved') OR ",
            $row_attempt,
            " < ",
            $attempt,
            " OR (",
            $row_attempt,
            " = ",
            $attempt,
            " AND CASE ",
            $row_status,
            " WHEN 'delay' THEN 0 WHEN 'ready' THEN 1 ELSE 2 END",
            " <= CASE ",
            $status,
            " WHEN 'delay' THEN 0 WHEN 'ready' THEN 1 ELSE 2 END))"
        )
    };
}
pub(crate) use moves_forward;

/// The order of a job's live states within one attempt, as in [`moves_forward`].
fn live_rank(state: JobState) -> u8 {
    match state {
        JobState::Delay => 0,
        JobState::Ready => 1,
        _ => 2,
    }
}

/// [`moves_forward`] for a live row read under its lock: whether `change`
/// applies to a row in `row_state` at `row_attempt`.
pub(crate) fn moves_forward_from(row_state: JobState, row_attempt: i64, change: &StateChange) -> bool {
    !change.state.is_live()
        || (row_attempt, live_rank(row_state)) <= (i64::from(change.attempt), live_rank(change.state))
}

mod collapse;
mod fold;
mod hold;
mod reply;
mod task;
mod transaction;

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use delayq_common::{Job, JobId, JobState, Timestamp, Topic};
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

pub(crate) use self::collapse::collapse;
use self::task::{Reply, Write, WriterTask};
use crate::store::{BoxError, StateChange, StoreError};

/// The outcome of each job of an insert: written, or refused on its own.
pub(crate) type InsertOutcomes = Vec<Result<(), StoreError>>;

/// One row of `job_log`; the dialect adds its node and host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LogRow {
    pub(crate) job_id: JobId,
    pub(crate) state: JobState,
    pub(crate) attempt: u32,
    pub(crate) at: Timestamp,
}

impl LogRow {
    /// The line of `job` as it was just written.
    pub(crate) fn of(job: &Job) -> LogRow {
        LogRow { job_id: job.id.clone(), state: job.state, attempt: job.attempt, at: job.updated_at }
    }

    /// The line of `change`, once applied.
    pub(crate) fn of_change(change: &StateChange) -> LogRow {
        LogRow { job_id: change.id.clone(), state: change.state, attempt: change.attempt, at: change.at }
    }
}

/// The history lines the writer adds for `jobs` just written with `outcomes`:
/// one per job written, none when the dialect writes them itself
/// ([`BatchDialect::logs_written_jobs`]).
pub(crate) fn written_lines<'j, D: BatchDialect + ?Sized>(
    dialect: &D,
    jobs: &'j [&Job],
    outcomes: &'j [Result<(), StoreError>],
) -> impl Iterator<Item = LogRow> + 'j {
    let logs_itself = dialect.logs_written_jobs();
    jobs.iter()
        .zip(outcomes)
        .filter(move |(_, outcome)| !logs_itself && outcome.is_ok())
        .map(|(job, _)| LogRow::of(job))
}

/// The statements of one SQL dialect, each run inside the batch transaction.
///
/// A method returns `Err` only for a database failure, which rolls the whole
/// batch back; a refusal that concerns one write is its `Ok(Err(..))`.
/// Which ended jobs a purge deletes.
#[derive(Clone, Debug)]
pub(crate) enum PurgeOf {
    /// Those that ended before this instant, oldest end first (retention).
    EndedBefore(Timestamp),
    /// The dead jobs of this topic.
    DeadOf(Topic),
    /// This job, if it is dead.
    DeadJob(JobId),
}

#[async_trait]
pub(crate) trait BatchDialect: Send + Sync + 'static {
    /// An open transaction on the write connection; dropping it rolls back.
    type Tx: Send;

    /// The backend name used in [`StoreError::Unavailable`], logs and metrics.
    const BACKEND: &'static str;

    /// Starts a write transaction.
    async fn begin(&self) -> Result<Self::Tx, BoxError>;

    /// Inserts `job` unless a live job holds its id ([`StoreError::IdTaken`])
    /// or its business key ([`StoreError::BizKeyTaken`]); a terminal row with
    /// the same id is overwritten.
    async fn insert_job(&self, tx: &mut Self::Tx, job: &Job) -> Result<Result<(), StoreError>, BoxError>;

    /// Inserts `jobs` in order, each judged as by [`BatchDialect::insert_job`]
    /// (one outcome per job); a dialect may write them in fewer statements.
    async fn insert_jobs(&self, tx: &mut Self::Tx, jobs: &[&Job]) -> Result<InsertOutcomes, BoxError> {
        let mut outcomes = Vec::with_capacity(jobs.len());
        for job in jobs {
            outcomes.push(self.insert_job(tx, job).await?);
        }
        Ok(outcomes)
    }

    /// Overwrites the live row of `job.id` ([`StoreError::NotFound`] when there
    /// is none, [`StoreError::BizKeyTaken`] when another live job holds the key).
    async fn replace_job(&self, tx: &mut Self::Tx, job: &Job) -> Result<Result<(), StoreError>, BoxError>;

    /// Applies `change` to the row of a live job; returns `false` when the job
    /// is unknown or has ended (ended jobs never move). A change that would take
    /// a live job back ([`moves_forward`]) leaves the row as it is and returns
    /// `true`: it happened, so the history records it.
    async fn change_state(&self, tx: &mut Self::Tx, change: &StateChange) -> Result<bool, BoxError>;

    /// Applies `changes` in order, each as by [`BatchDialect::change_state`];
    /// returns whether each applied. A dialect may apply many in one statement.
    async fn change_states(&self, tx: &mut Self::Tx, changes: &[&StateChange]) -> Result<Vec<bool>, BoxError> {
        let mut applied = Vec::with_capacity(changes.len());
        for change in changes {
            applied.push(self.change_state(tx, change).await?);
        }
        Ok(applied)
    }

    /// Marks every live row deleted at `at`; returns the id and attempt of each.
    async fn delete_all_live(&self, tx: &mut Self::Tx, at: Timestamp) -> Result<Vec<(JobId, u32)>, BoxError>;

    /// Deletes up to `limit` rows of the ended jobs `of` selects, with their
    /// history rows; returns how many jobs.
    async fn purge(&self, tx: &mut Self::Tx, of: &PurgeOf, limit: usize) -> Result<u64, BoxError>;

    /// Appends history rows, in order, inside the transaction.
    async fn append_log(&self, tx: &mut Self::Tx, log: &[LogRow]) -> Result<(), BoxError>;

    /// Appends the batch's history rows, in order, and commits the transaction
    /// (a dialect may send both in one round trip).
    async fn commit(&self, tx: Self::Tx, log: &[LogRow]) -> Result<(), BoxError>;

    /// Whether the dialect writes the history line of every job it inserts or
    /// replaces itself, in the statement that writes the row: the writer then
    /// leaves those lines out of the log it hands to [`BatchDialect::commit`].
    fn logs_written_jobs(&self) -> bool {
        false
    }

    /// Inserts `jobs` as [`BatchDialect::insert_jobs`] does and commits: the
    /// whole transaction of a batch of nothing but pushes. A dialect may send
    /// it in one round trip.
    async fn insert_jobs_and_commit(&self, mut tx: Self::Tx, jobs: &[&Job]) -> Result<InsertOutcomes, BoxError> {
        let outcomes = self.insert_jobs(&mut tx, jobs).await?;
        let log: Vec<LogRow> = written_lines(self, jobs, &outcomes).collect();
        self.commit(tx, &log).await?;
        Ok(outcomes)
    }

    /// Returns whether a failed batch may be run again at once: the database
    /// rolled it back for a passing reason, such as losing a deadlock to
    /// another process writing the same tables.
    fn is_retryable(&self, _error: &BoxError) -> bool {
        false
    }
}

/// The handle callers use to reach the writer task. A clone reaches the same task.
#[derive(Clone)]
pub(crate) struct GroupCommitWriter {
    sender: mpsc::UnboundedSender<Write>,
    backend: &'static str,
    commits: Arc<AtomicU64>,
    /// Journaled state changes not committed yet; the task takes off what commits.
    journal_backlog: Arc<AtomicUsize>,
    journal_max: usize,
}

impl GroupCommitWriter {
    /// Starts the writer task on a thread of its own (see [`run_on_own_thread`]),
    /// with a journal of at most `journal_max` uncommitted state changes.
    pub(crate) fn spawn<D: BatchDialect>(dialect: D, journal_max: usize) -> GroupCommitWriter {
        let (sender, receiver) = mpsc::unbounded_channel();
        let commits = Arc::new(AtomicU64::new(0));
        let journal_backlog = Arc::new(AtomicUsize::new(0));
        let backend = D::BACKEND;
        let task = WriterTask {
            dialect,
            receiver,
            commits: Arc::clone(&commits),
            journal_backlog: Arc::clone(&journal_backlog),
        };
        run_on_own_thread(backend, task.run());
        GroupCommitWriter { sender, backend, commits, journal_backlog, journal_max }
    }

    /// Returns how many journaled state changes are not committed yet.
    pub(crate) fn journal_backlog(&self) -> usize {
        self.journal_backlog.load(Ordering::Relaxed)
    }

    /// Refuses when the journal holds `journal_max` state changes or more.
    pub(crate) fn check_journal_room(&self) -> Result<(), StoreError> {
        let backlog = self.journal_backlog();
        if backlog < self.journal_max {
            return Ok(());
        }
        let reason = format!("the journal is full: {backlog} state changes wait for the database");
        Err(StoreError::Unavailable { backend: self.backend, source: reason.into() })
    }

    /// Returns how many transactions the writer has committed.
    pub(crate) fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Returns the counter behind [`GroupCommitWriter::commits`], for a task that follows it.
    pub(crate) fn commit_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.commits)
    }

    pub(crate) async fn insert(&self, jobs: Vec<Job>) -> Result<InsertOutcomes, StoreError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        self.call(|reply| Write::Insert { jobs, reply: Some(reply) }).await
    }

    /// [`GroupCommitWriter::insert`], sent to the task before it returns.
    pub(crate) fn insert_queued(
        &self,
        jobs: Vec<Job>,
    ) -> impl Future<Output = Result<InsertOutcomes, StoreError>> + Send + 'static {
        let answer = (!jobs.is_empty()).then(|| self.submit(|reply| Write::Insert { jobs, reply: Some(reply) }));
        async move {
            match answer {
                Some(answer) => answer.await,
                None => Ok(Vec::new()),
            }
        }
    }

    /// Queues an insert nobody waits for, held like a journal entry.
    pub(crate) fn journal_insert(&self, jobs: Vec<Job>) {
        if !jobs.is_empty() {
            self.send_journaled(Write::Insert { jobs, reply: None });
        }
    }

    pub(crate) async fn replace(&self, job: Job) -> Result<(), StoreError> {
        self.call(|reply| Write::Replace { job: Box::new(job), reply }).await
    }

    pub(crate) async fn record(&self, changes: Vec<StateChange>) -> Result<(), StoreError> {
        if changes.is_empty() {
            return Ok(());
        }
        self.call(|reply| Write::Record { changes, reply: Some(reply) }).await
    }

    pub(crate) fn journal(&self, changes: Vec<StateChange>) {
        if !changes.is_empty() {
            self.send_journaled(Write::Record { changes, reply: None });
        }
    }

    /// Sends a journal write, counted in the backlog until it commits.
    fn send_journaled(&self, write: Write) {
        let count = write.journaled();
        self.journal_backlog.fetch_add(count, Ordering::Relaxed);
        if self.sender.send(write).is_err() {
            self.journal_backlog.fetch_sub(count, Ordering::Relaxed);
            warn!(backend = self.backend, dropped = count, "journal entries after close are dropped");
        }
    }

    pub(crate) async fn purge(&self, of: PurgeOf, limit: usize) -> Result<u64, StoreError> {
        if limit == 0 {
            return Ok(0);
        }
        self.call(|reply| Write::Purge { of, limit, reply }).await
    }

    pub(crate) async fn delete_all_live(&self, at: Timestamp) -> Result<Vec<JobId>, StoreError> {
        self.call(|reply| Write::DeleteAllLive { at, reply }).await
    }

    pub(crate) async fn flush(&self) -> Result<(), StoreError> {
        self.call(|reply| Write::Flush { reply }).await
    }

    /// Commits (or gives up on) everything queued before, then stops the task.
    pub(crate) async fn close(&self) {
        let (reply, done) = oneshot::channel();
        if self.sender.send(Write::Close { reply }).is_ok() {
            let _stopped = done.await;
        }
    }

    async fn call<T: Send + 'static>(&self, write: impl FnOnce(Reply<T>) -> Write) -> Result<T, StoreError> {
        self.submit(write).await
    }

    /// Sends a write to the task now; the future answers when it is done.
    fn submit<T: Send + 'static>(
        &self,
        write: impl FnOnce(Reply<T>) -> Write,
    ) -> impl Future<Output = Result<T, StoreError>> + Send + 'static {
        let (reply, answer) = oneshot::channel();
        let backend = self.backend;
        let sent = self.sender.send(write(reply)).is_ok();
        async move {
            if !sent {
                return Err(closed(backend));
            }
            answer.await.map_err(|_| closed(backend))?
        }
    }
}

/// Runs the writer task on a thread of its own, under a single-threaded runtime
/// that ends with the task (when the store closes or its last handle is dropped).
///
/// Every commit is several hops between the task and the database connection,
/// and every caller of the commit waits for all of them. On the shared runtime
/// each hop waited its turn behind the request tasks queued on the busy workers,
/// so under load a commit spent most of its wall time waiting, not working.
/// Should the thread or its runtime not start, the task runs on the current
/// runtime as before.
fn run_on_own_thread(backend: &'static str, task: impl Future<Output = ()> + Send + 'static) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            warn!(backend, %error, "the store writer runs on the shared runtime");
            tokio::spawn(task);
            return;
        }
    };
    // The task is handed over through a slot, so that it is still here to run
    // on the current runtime when no thread could be started.
    let slot = Arc::new(Mutex::new(Some(task)));
    let on_thread = Arc::clone(&slot);
    let started = std::thread::Builder::new().name(format!("{backend}-writer")).spawn(move || {
        if let Some(task) = take(&on_thread) {
            runtime.block_on(task);
        }
    });
    if let Err(error) = started {
        warn!(backend, %error, "the store writer runs on the shared runtime");
        if let Some(task) = take(&slot) {
            tokio::spawn(task);
        }
    }
}

fn take<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

fn closed(backend: &'static str) -> StoreError {
    StoreError::Unavailable { backend, source: "the store is closed".into() }
}

/// Returns this machine's host name for `job_log.host` (empty when unknown).
pub(crate) fn host_name() -> String {
    let from_env = std::env::var("HOSTNAME").ok().filter(|name| !name.trim().is_empty());
    let from_kernel = || {
        ["/proc/sys/kernel/hostname", "/etc/hostname"]
            .into_iter()
            .filter_map(|path| std::fs::read_to_string(path).ok())
            .map(|name| name.trim().to_owned())
            .find(|name| !name.is_empty())
    };
    from_env.or_else(from_kernel).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(state: JobState, attempt: u32) -> StateChange {
        let id = JobId::parse("j1").expect("valid id");
        StateChange { id, state, attempt, run_at: Timestamp::EPOCH, at: Timestamp::EPOCH, result: None }
    }

    #[test]
    fn a_live_row_moves_only_forward_and_any_row_may_end() {
        use JobState::{Delay, Finished, Ready, Reserved};
        // (row state, row attempt, change state, change attempt, applies)
        let cases = [
            (Delay, 1, Ready, 1, true),
            (Ready, 1, Reserved, 1, true),
            (Reserved, 1, Reserved, 1, true),
            (Reserved, 1, Ready, 1, false),
            (Ready, 1, Delay, 1, false),
            (Reserved, 1, Delay, 2, true),
            (Reserved, 2, Ready, 1, false),
            (Reserved, 3, Finished, 1, true),
        ];
        for (row_state, row_attempt, state, attempt, applies) in cases {
            assert_eq!(
                moves_forward_from(row_state, row_attempt, &change(state, attempt)),
                applies,
                "{row_state:?}/{row_attempt} then {state:?}/{attempt}"
            );
        }
    }
}
