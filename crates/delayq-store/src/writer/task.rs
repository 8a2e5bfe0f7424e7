//! The writer task: takes queued writes in batches, applies each batch in one
//! transaction, answers the callers and retries journal entries.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayq_common::{Job, JobId, Timestamp};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::{debug, error, warn};

use super::fold::Folding;
use super::hold::Held;
use super::reply::{answer, fail, SharedError};
use super::transaction::{split_outcomes, Transaction};
use super::{BatchDialect, InsertOutcomes, PurgeOf};
use crate::metrics;
use crate::store::{BoxError, StateChange, StoreError};

/// The most rows (jobs or state changes) one transaction takes; a single larger
/// write still goes in whole.
const MAX_BATCH_ROWS: usize = 4096;
/// The first pause before retrying a failed journal batch.
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(20);
/// The longest pause between retries of a failed journal batch.
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How many more times journal entries are tried once the store is closing.
const CLOSE_ATTEMPTS: u32 = 3;
/// How many times a batch the dialect calls retryable is run again.
const RETRYABLE_ATTEMPTS: u32 = 8;
/// The longest pause before running such a batch again. Each pause is drawn at
/// random below a ceiling that starts at 1 ms and doubles up to this: two nodes
/// whose batches deadlocked, run again at once, tended to deadlock again, and
/// under contention six collisions in a row failed a batch now and then.
const RETRYABLE_PAUSE_MAX: Duration = Duration::from_millis(32);

pub(super) type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

/// One queued write and the caller waiting for it.
pub(super) enum Write {
    /// `reply` is `None` for a journaled insert ([`super::fold`]), which
    /// nobody waits for; a job of it that is refused is only logged.
    Insert {
        jobs: Vec<Job>,
        reply: Option<Reply<InsertOutcomes>>,
    },
    Replace {
        job: Box<Job>,
        reply: Reply<()>,
    },
    /// `reply` is `None` for a journal entry, which nobody waits for.
    Record {
        changes: Vec<StateChange>,
        reply: Option<Reply<()>>,
    },
    DeleteAllLive {
        at: Timestamp,
        reply: Reply<Vec<JobId>>,
    },
    Purge {
        of: PurgeOf,
        limit: usize,
        reply: Reply<u64>,
    },
    Flush {
        reply: Reply<()>,
    },
    Close {
        reply: oneshot::Sender<()>,
    },
}

impl Write {
    fn rows(&self) -> usize {
        match self {
            Write::Insert { jobs, .. } => jobs.len(),
            Write::Record { changes, .. } => changes.len(),
            _ => 1,
        }
    }

    fn touches_database(&self) -> bool {
        !matches!(self, Write::Flush { .. } | Write::Close { .. })
    }

    /// The state changes or jobs of a journal write (nobody waits for it), else 0.
    pub(super) fn journaled(&self) -> usize {
        match self {
            Write::Record { changes, reply: None } => changes.len(),
            Write::Insert { jobs, reply: None } => jobs.len(),
            _ => 0,
        }
    }
}

/// What applying one write produced, before it is sent back.
pub(super) enum Outcome {
    Inserted(InsertOutcomes),
    Replaced(Result<(), StoreError>),
    Deleted(Vec<JobId>),
    Purged(u64),
    Done,
}

/// The writes of one transaction.
#[derive(Default)]
struct Batch {
    writes: Vec<Write>,
    rows: usize,
    close: Option<oneshot::Sender<()>>,
}

impl Batch {
    fn admit(&mut self, write: Write) {
        if let Write::Close { reply } = write {
            self.close = Some(reply);
            return;
        }
        self.rows += write.rows();
        self.writes.push(write);
    }

    fn is_full(&self) -> bool {
        self.close.is_some() || self.rows >= MAX_BATCH_ROWS
    }

    fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.close.is_none()
    }
}

pub(super) struct WriterTask<D> {
    pub(super) dialect: D,
    pub(super) receiver: mpsc::UnboundedReceiver<Write>,
    pub(super) commits: Arc<AtomicU64>,
    /// The handle's count of uncommitted journal entries, taken down as they commit.
    pub(super) journal_backlog: Arc<AtomicUsize>,
}

impl<D: BatchDialect> WriterTask<D> {
    pub(super) async fn run(mut self) {
        let mut retained: Vec<Write> = Vec::new();
        let mut held = Held::default();
        // A write that ended a retry pause: newer than what is held.
        let mut arrived: Option<Write> = None;
        let mut backoff = RETRY_BACKOFF_MIN;
        loop {
            let mut batch = Batch::default();
            if let Some(write) = arrived.take() {
                batch.admit(write);
            }
            if retained.is_empty() && batch.is_empty() {
                match held.deadline() {
                    None => {
                        let Some(write) = self.receiver.recv().await else { return };
                        batch.admit(write);
                    }
                    Some(deadline) => tokio::select! {
                        () = tokio::time::sleep_until(deadline) => {}
                        write = self.receiver.recv() => match write {
                            Some(write) => batch.admit(write),
                            None => {
                                self.close_with(held.take_all().into_iter().collect()).await;
                                return;
                            }
                        },
                    },
                }
            }
            while !batch.is_full() {
                let Ok(write) = self.receiver.try_recv() else { break };
                batch.admit(write);
            }
            let writes =
                held.release(std::mem::take(&mut retained), batch.writes, batch.close.is_some(), Instant::now());
            if writes.is_empty() && batch.close.is_none() {
                continue;
            }
            batch.writes = writes;
            let close = batch.close.take();
            retained = self.commit(batch.writes).await;
            if let Some(reply) = close {
                self.close_with(retained).await;
                let _closed = reply.send(());
                return;
            }
            if retained.is_empty() {
                backoff = RETRY_BACKOFF_MIN;
            } else if self.receiver.is_closed() {
                // The store was dropped without close: nobody can flush any more.
                retained.extend(held.take_all());
                self.close_with(retained).await;
                return;
            } else {
                // A new write ends the pause: its caller learns at once whether
                // the database is back, instead of waiting out the backoff.
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    write = self.receiver.recv() => arrived = write,
                }
                backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
            }
        }
    }

    /// Applies and answers `writes`; returns the journal entries to retry.
    async fn commit(&self, writes: Vec<Write>) -> Vec<Write> {
        if writes.is_empty() {
            return writes;
        }
        let started = Instant::now();
        let mut applied = self.apply(&writes).await;
        for attempt in 0..RETRYABLE_ATTEMPTS {
            match &applied {
                Err(error) if self.dialect.is_retryable(error) => {
                    let pause = retry_pause(attempt);
                    debug!(
                        backend = D::BACKEND,
                        cause = %error,
                        pause_us = pause.as_micros() as u64,
                        "store batch rolled back, running it again"
                    );
                    tokio::time::sleep(pause).await;
                    applied = self.apply(&writes).await;
                }
                _ => break,
            }
        }
        match applied {
            Ok(outcomes) => {
                if writes.iter().any(Write::touches_database) {
                    self.commits.fetch_add(1, Ordering::Relaxed);
                    let rows = writes.iter().filter(|write| write.touches_database()).map(Write::rows).sum();
                    metrics::record_commit(D::BACKEND, rows, started.elapsed());
                }
                let journaled: usize = writes.iter().map(Write::journaled).sum();
                self.journal_backlog.fetch_sub(journaled, Ordering::Relaxed);
                answer(writes, outcomes);
                Vec::new()
            }
            Err(source) => {
                let backend = D::BACKEND;
                warn!(backend, writes = writes.len(), cause = %source, "store batch failed");
                fail(writes, backend, SharedError(Arc::from(source)))
            }
        }
    }

    /// Tries the remaining journal entries a few more times before the task stops.
    async fn close_with(&self, mut retained: Vec<Write>) {
        let mut backoff = RETRY_BACKOFF_MIN;
        for _ in 0..CLOSE_ATTEMPTS {
            if retained.is_empty() {
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
            retained = self.commit(retained).await;
        }
        let dropped: usize = retained.iter().map(Write::rows).sum();
        self.journal_backlog.fetch_sub(retained.iter().map(Write::journaled).sum(), Ordering::Relaxed);
        if dropped > 0 {
            error!(backend = D::BACKEND, dropped, "journal entries lost at close");
        }
    }

    /// Runs every write in one transaction, in order.
    async fn apply(&self, writes: &[Write]) -> Result<Vec<Outcome>, BoxError> {
        if !writes.iter().any(Write::touches_database) {
            return Ok(writes.iter().map(|_| Outcome::Done).collect());
        }
        let dialect = &self.dialect;
        let tx = dialect.begin().await?;
        if writes.iter().all(|write| matches!(write, Write::Insert { .. })) {
            // Nothing but pushes: the dialect may insert and commit in one go.
            let per_write = inserted_jobs(writes.iter());
            let jobs: Vec<&Job> = per_write.iter().flat_map(|jobs| jobs.iter()).collect();
            let results = dialect.insert_jobs_and_commit(tx, &jobs).await?;
            let counts: Vec<usize> = per_write.iter().map(|jobs| jobs.len()).collect();
            return split_outcomes(&counts, results);
        }
        // A dialect that writes the history line of each job it inserts would
        // write a folded job's line in its final state: nothing is folded there.
        let folding = if dialect.logs_written_jobs() { Folding::default() } else { Folding::of(writes) };
        let mut transaction = Transaction::new(dialect, tx);
        let mut outcomes = Vec::with_capacity(writes.len());
        let mut index = 0;
        while let Some(write) = writes.get(index) {
            // Consecutive inserts (many callers' pushes, journaled inserts) go to
            // the dialect together, so it can write them in few statements;
            // consecutive state changes (many callers' and the journal's) too.
            let run_of = |same: fn(&Write) -> bool| writes.iter().skip(index).take_while(|next| same(next)).count();
            let outcome = match write {
                Write::Insert { .. } => {
                    let run = run_of(|next| matches!(next, Write::Insert { .. }));
                    outcomes.extend(transaction.insert_jobs(writes, index..index + run, &folding).await?);
                    index += run;
                    continue;
                }
                Write::Record { .. } => {
                    let run = run_of(|next| matches!(next, Write::Record { .. }));
                    transaction.change_states(writes, index..index + run, &folding).await?;
                    outcomes.extend((0..run).map(|_| Outcome::Done));
                    index += run;
                    continue;
                }
                Write::Replace { job, .. } => Outcome::Replaced(transaction.replace_job(job).await?),
                Write::DeleteAllLive { at, .. } => Outcome::Deleted(transaction.delete_all_live(*at).await?),
                Write::Purge { of, limit, .. } => Outcome::Purged(transaction.purge(of, *limit).await?),
                Write::Flush { .. } | Write::Close { .. } => Outcome::Done,
            };
            outcomes.push(outcome);
            index += 1;
        }
        transaction.commit().await?;
        Ok(outcomes)
    }
}

/// A random pause below `min(1 ms · 2^attempt, RETRYABLE_PAUSE_MAX)`.
fn retry_pause(attempt: u32) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let ceiling = Duration::from_millis(1).saturating_mul(1 << attempt.min(16)).min(RETRYABLE_PAUSE_MAX);
    // No two `RandomState`s share their keys, so the hash of nothing differs every time.
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    let ceiling_us = u64::try_from(ceiling.as_micros()).unwrap_or(u64::MAX).max(1);
    Duration::from_micros(random % ceiling_us)
}

/// The jobs of each insert write, in order.
fn inserted_jobs<'w>(inserts: impl Iterator<Item = &'w Write>) -> Vec<&'w [Job]> {
    inserts
        .map(|write| match write {
            Write::Insert { jobs, .. } => jobs.as_slice(),
            _ => &[],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_pauses_are_random_below_a_doubling_ceiling() {
        for attempt in 0..RETRYABLE_ATTEMPTS {
            let ceiling = Duration::from_millis(1 << attempt).min(RETRYABLE_PAUSE_MAX);
            let pauses: Vec<Duration> = (0..50).map(|_| retry_pause(attempt)).collect();
            assert!(pauses.iter().all(|pause| *pause < ceiling), "attempt {attempt}: {pauses:?}");
            let first = pauses[0];
            assert!(pauses.iter().any(|pause| *pause != first), "attempt {attempt}: not random: {pauses:?}");
        }
        assert!(retry_pause(u32::MAX) < RETRYABLE_PAUSE_MAX);
    }
}
