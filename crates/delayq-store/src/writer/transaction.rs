//! The transaction of one batch: the writes applied in order, journaled
//! inserts with the changes folded into them, and the history lines gathered
//! for the commit.

use std::collections::HashSet;
use std::ops::Range;

use delayq_common::{Job, JobId, JobState, Timestamp};
use tracing::debug;

use super::fold::{FoldedJob, Folding};
use super::task::{Outcome, Write};
use super::{written_lines, BatchDialect, InsertOutcomes, LogRow, PurgeOf};
use crate::store::{BoxError, StateChange, StoreError};

/// The transaction of one batch, and the history lines its writes gather
/// for the commit.
pub(super) struct Transaction<'d, D: BatchDialect> {
    dialect: &'d D,
    tx: D::Tx,
    log: Vec<LogRow>,
}

impl<'d, D: BatchDialect> Transaction<'d, D> {
    /// Starts gathering the writes of a batch in `tx`.
    pub(super) fn new(dialect: &'d D, tx: D::Tx) -> Self {
        Transaction { dialect, tx, log: Vec::new() }
    }

    /// Inserts the jobs of the consecutive insert writes `run` of `writes` in
    /// one dialect call, journaled ones with the changes `folding` took along;
    /// returns one [`Outcome::Inserted`] per write.
    pub(super) async fn insert_jobs(
        &mut self,
        writes: &[Write],
        run: Range<usize>,
        folding: &Folding,
    ) -> Result<Vec<Outcome>, BoxError> {
        let mut jobs: Vec<&Job> = Vec::new();
        let mut folded_of: Vec<Option<&FoldedJob>> = Vec::new();
        let mut counts = Vec::with_capacity(run.len());
        for index in run {
            let own = match writes.get(index) {
                Some(Write::Insert { jobs, .. }) => jobs.as_slice(),
                _ => &[],
            };
            match folding.insert(index) {
                Some(folded) => {
                    jobs.extend(folded.iter().map(|folded| &folded.job));
                    folded_of.extend(folded.iter().map(Some));
                    counts.push(folded.len());
                }
                None => {
                    jobs.extend(own);
                    folded_of.extend(own.iter().map(|_| None));
                    counts.push(own.len());
                }
            }
        }
        self.log_earlier_lines_first(&jobs).await?;
        let results = self.dialect.insert_jobs(&mut self.tx, &jobs).await?;
        let logs_itself = self.dialect.logs_written_jobs();
        let mut unplaced: Vec<&StateChange> = Vec::new();
        for ((job, folded), result) in jobs.iter().zip(&folded_of).zip(&results) {
            match (folded, result) {
                (Some(folded), Ok(())) => self.log.extend(folded.lines.iter().cloned()),
                // A live job holds the id: the changes go to its row, as they would have.
                (Some(folded), Err(_)) => unplaced.extend(folded.changes.iter()),
                (None, Ok(())) if !logs_itself => self.log.push(LogRow::of(job)),
                (None, _) => {}
            }
        }
        self.apply_changes(&unplaced).await?;
        split_outcomes(&counts, results)
    }

    pub(super) async fn replace_job(&mut self, job: &Job) -> Result<Result<(), StoreError>, BoxError> {
        self.log_earlier_lines_first(&[job]).await?;
        let outcome = self.dialect.replace_job(&mut self.tx, job).await?;
        self.log.extend(written_lines(self.dialect, &[job], std::slice::from_ref(&outcome)));
        Ok(outcome)
    }

    /// Before `jobs` are written: a dialect that writes their history lines
    /// itself ([`BatchDialect::logs_written_jobs`]) puts them ahead of the lines
    /// gathered so far, so those go first should they concern the same ids (an
    /// ended job's last line before the line of its id's new job, or of its
    /// replacement).
    async fn log_earlier_lines_first(&mut self, jobs: &[&Job]) -> Result<(), BoxError> {
        if !self.dialect.logs_written_jobs() || self.log.is_empty() {
            return Ok(());
        }
        let ids: HashSet<&JobId> = jobs.iter().map(|job| &job.id).collect();
        if self.log.iter().any(|row| ids.contains(&row.job_id)) {
            self.write_gathered_lines().await?;
        }
        Ok(())
    }

    /// Writes the history lines gathered so far.
    async fn write_gathered_lines(&mut self) -> Result<(), BoxError> {
        self.dialect.append_log(&mut self.tx, &self.log).await?;
        self.log.clear();
        Ok(())
    }

    /// Applies the changes of the consecutive record writes `run` of `writes`
    /// that `folding` did not take along, in one dialect call.
    pub(super) async fn change_states(
        &mut self,
        writes: &[Write],
        run: Range<usize>,
        folding: &Folding,
    ) -> Result<(), BoxError> {
        let mut changes: Vec<&StateChange> = Vec::new();
        for index in run {
            let Some(Write::Record { changes: own, .. }) = writes.get(index) else { continue };
            changes.extend(
                own.iter()
                    .enumerate()
                    .filter(|(position, _)| !folding.is_taken(index, *position))
                    .map(|(_, change)| change),
            );
        }
        self.apply_changes(&changes).await
    }

    /// Applies `changes` in one dialect call and logs each that applied.
    async fn apply_changes(&mut self, changes: &[&StateChange]) -> Result<(), BoxError> {
        if changes.is_empty() {
            return Ok(());
        }
        let applied = self.dialect.change_states(&mut self.tx, changes).await?;
        if applied.len() != changes.len() {
            return Err(format!("{} outcomes for {} state changes", applied.len(), changes.len()).into());
        }
        for (change, applied) in changes.iter().zip(applied) {
            if applied {
                self.log.push(LogRow::of_change(change));
            } else {
                debug!(job_id = %change.id, state = %change.state, "state change for an unknown or ended job ignored");
            }
        }
        Ok(())
    }

    pub(super) async fn delete_all_live(&mut self, at: Timestamp) -> Result<Vec<JobId>, BoxError> {
        let deleted = self.dialect.delete_all_live(&mut self.tx, at).await?;
        let mut ids = Vec::with_capacity(deleted.len());
        for (job_id, attempt) in deleted {
            self.log.push(LogRow { job_id: job_id.clone(), state: JobState::Deleted, attempt, at });
            ids.push(job_id);
        }
        Ok(ids)
    }

    pub(super) async fn purge(&mut self, of: &PurgeOf, limit: usize) -> Result<u64, BoxError> {
        // The lines gathered so far go in first: should one concern a job this
        // purge deletes, it goes with it.
        if !self.log.is_empty() {
            self.write_gathered_lines().await?;
        }
        self.dialect.purge(&mut self.tx, of, limit).await
    }

    /// Writes the gathered history lines and commits.
    pub(super) async fn commit(self) -> Result<(), BoxError> {
        self.dialect.commit(self.tx, &self.log).await
    }
}

/// Hands each insert write the outcomes of its own jobs, `per_write` of them.
pub(super) fn split_outcomes(per_write: &[usize], results: InsertOutcomes) -> Result<Vec<Outcome>, BoxError> {
    let expected: usize = per_write.iter().sum();
    if results.len() != expected {
        return Err(format!("{} outcomes for {expected} inserted jobs", results.len()).into());
    }
    let mut results = results.into_iter();
    Ok(per_write.iter().map(|count| Outcome::Inserted(results.by_ref().take(*count).collect())).collect())
}
