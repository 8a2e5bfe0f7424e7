//! A journaled insert takes along the state changes of its jobs that follow it
//! in the same batch: the row is inserted as those changes leave it, and their
//! history lines follow the insert's own.
//!
//! A journaled insert is a job made by delayq itself, not a push somebody waits
//! for: a consumer group's delivery, which is handed out at once and held in
//! the journal ([`super::hold`]) until its ack commits. By then its `reserved`
//! and `finished` changes are in the same batch, and the three writes of its
//! row (insert, move, move) become one insert; the changes of a live row are
//! the costliest statement of a commit, since each moves the row in every index
//! that holds its state.
//!
//! The row ends as applying the writes one by one would leave it, with the same
//! history: a change applies to a live row when it moves it forward
//! ([`moves_forward_from`]); one that would take it back leaves it and is still
//! recorded; one after the row ended neither applies nor is recorded. Folding
//! stops at a job's next insert or replace, and before any write that is not an
//! insert or a state change. Should the insert be refused (a live job holds the
//! id), its changes are applied to that row instead, as they would have been.

use std::collections::{HashMap, HashSet};

use delayq_common::{Job, JobId};

use super::task::Write;
use super::{moves_forward_from, LogRow};
use crate::store::StateChange;

/// One job of a journaled insert with the changes folded into it.
pub(super) struct FoldedJob {
    /// The job as it is inserted: in the state its folded changes leave it.
    pub(super) job: Job,
    /// The history lines of its insert and of its folded changes, in order.
    pub(super) lines: Vec<LogRow>,
    /// The folded changes, to apply on their own should the insert be refused.
    pub(super) changes: Vec<StateChange>,
}

/// The folding of one batch.
#[derive(Default)]
pub(super) struct Folding {
    /// The jobs of each journaled insert that took changes along, by the
    /// index of its write, all of the write's jobs in order.
    inserts: HashMap<usize, Vec<FoldedJob>>,
    /// The changes taken along, by the index of their write and their index in it.
    taken: HashSet<(usize, usize)>,
}

impl Folding {
    /// Folds the changes of `writes` into the journaled inserts before them.
    pub(super) fn of(writes: &[Write]) -> Folding {
        let mut folding = Folding::default();
        // The journaled inserts whose jobs still take changes, by job id.
        let mut open: HashMap<&JobId, (usize, usize)> = HashMap::new();
        for (index, write) in writes.iter().enumerate() {
            match write {
                Write::Insert { jobs, reply: None } => {
                    for (position, job) in jobs.iter().enumerate() {
                        open.insert(&job.id, (index, position));
                    }
                }
                Write::Insert { jobs, reply: Some(_) } => {
                    for job in jobs {
                        open.remove(&job.id);
                    }
                }
                Write::Replace { job, .. } => {
                    open.remove(&job.id);
                }
                Write::Record { changes, .. } => {
                    for (position, change) in changes.iter().enumerate() {
                        let Some(&(insert, job)) = open.get(&change.id) else { continue };
                        let folded = folding.inserts.entry(insert).or_insert_with(|| unfolded(writes.get(insert)));
                        if let Some(folded) = folded.get_mut(job) {
                            fold(folded, change);
                            folding.taken.insert((index, position));
                        }
                    }
                }
                _ => break,
            }
        }
        folding
    }

    /// Returns the jobs of the journaled insert at `index` that took changes
    /// along, when it took any.
    pub(super) fn insert(&self, index: usize) -> Option<&[FoldedJob]> {
        self.inserts.get(&index).map(Vec::as_slice)
    }

    /// Returns whether the change at `position` of the write at `index` was taken along.
    pub(super) fn is_taken(&self, index: usize, position: usize) -> bool {
        self.taken.contains(&(index, position))
    }
}

/// The jobs of a journaled insert, nothing folded in yet.
fn unfolded(write: Option<&Write>) -> Vec<FoldedJob> {
    let Some(Write::Insert { jobs, .. }) = write else { return Vec::new() };
    jobs.iter().map(|job| FoldedJob { job: job.clone(), lines: vec![LogRow::of(job)], changes: Vec::new() }).collect()
}

/// Applies `change` to the job as the store would apply it to its row.
fn fold(folded: &mut FoldedJob, change: &StateChange) {
    folded.changes.push(change.clone());
    let job = &mut folded.job;
    if !job.state.is_live() {
        return;
    }
    if moves_forward_from(job.state, i64::from(job.attempt), change) {
        job.state = change.state;
        job.attempt = change.attempt;
        job.run_at = change.run_at;
        job.updated_at = change.at;
        job.result.clone_from(&change.result);
    }
    folded.lines.push(LogRow::of_change(change));
}

#[cfg(test)]
mod tests {
    use delayq_common::{JobState, Timestamp, Topic};
    use tokio::sync::oneshot;

    use super::*;
    use crate::testsuite::sample_job;

    fn change(job: &Job, state: JobState, attempt: u32, at_ms: u64) -> StateChange {
        StateChange {
            id: job.id.clone(),
            state,
            attempt,
            run_at: job.run_at,
            at: Timestamp::from_millis(at_ms),
            result: None,
        }
    }

    fn states(folded: &FoldedJob) -> Vec<JobState> {
        folded.lines.iter().map(|line| line.state).collect()
    }

    #[test]
    fn a_journaled_insert_takes_its_jobs_later_changes_along() {
        let topic = Topic::parse("fold".to_owned()).expect("topic");
        let (mut delivery, other) = (sample_job("d", &topic), sample_job("o", &topic));
        delivery.state = JobState::Ready;
        let writes = vec![
            Write::Insert { jobs: vec![delivery.clone()], reply: None },
            Write::Record { changes: vec![change(&other, JobState::Ready, 1, 1)], reply: None },
            Write::Record {
                changes: vec![
                    change(&delivery, JobState::Reserved, 1, 2),
                    change(&delivery, JobState::Ready, 1, 3),
                    change(&delivery, JobState::Finished, 1, 4),
                    change(&delivery, JobState::Reserved, 2, 5),
                ],
                reply: Some(oneshot::channel().0),
            },
        ];
        let folding = Folding::of(&writes);
        let folded = folding.insert(0).and_then(|jobs| jobs.first()).expect("the insert took changes");
        assert_eq!(folded.job.state, JobState::Finished);
        assert_eq!(folded.job.updated_at, Timestamp::from_millis(4));
        assert_eq!(
            states(folded),
            [JobState::Ready, JobState::Reserved, JobState::Ready, JobState::Finished],
            "a change back is recorded, one after the end is not"
        );
        assert_eq!(folded.changes.len(), 4, "every change of the job is kept for a refused insert");
        assert!(!folding.is_taken(1, 0), "another job's change stays");
        assert!((0..4).all(|position| folding.is_taken(2, position)));
    }

    #[test]
    fn folding_stops_at_a_push_of_the_id_and_at_other_writes() {
        let topic = Topic::parse("fold".to_owned()).expect("topic");
        let job = sample_job("j", &topic);
        let writes = vec![
            Write::Insert { jobs: vec![job.clone()], reply: None },
            Write::Insert { jobs: vec![job.clone()], reply: Some(oneshot::channel().0) },
            Write::Record { changes: vec![change(&job, JobState::Ready, 1, 1)], reply: None },
            Write::Insert { jobs: vec![job.clone()], reply: None },
            Write::Flush { reply: oneshot::channel().0 },
            Write::Record { changes: vec![change(&job, JobState::Ready, 1, 2)], reply: None },
        ];
        let folding = Folding::of(&writes);
        assert!(folding.insert(0).is_none() && folding.insert(3).is_none());
        assert!(!folding.is_taken(2, 0), "the change follows the push, not the journaled insert");
        assert!(!folding.is_taken(5, 0), "nothing is folded across a flush");
    }
}
