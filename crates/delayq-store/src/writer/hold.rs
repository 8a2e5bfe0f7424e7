//! Journal entries wait a little before they commit, so that the changes of a
//! job that moves on quickly share one commit.
//!
//! Nobody waits for a journal entry, but every commit costs: SQLite writes each
//! page it touched into the WAL whole, however few rows changed it. A job due
//! now is promoted, popped and finished within a few milliseconds; committed as
//! they came, its `ready`, `reserved` and `finished` each rewrote the job's row
//! page, two pages of the state index and a page of the history index, in three
//! commits. Held back until the finish (or any other write somebody waits for
//! concerning the job) commits, they are applied together: one row change and
//! three history lines on neighbouring index entries.
//!
//! Order is kept per job: an entry is held only while no write of its job
//! commits, and a job's held entries commit before anything newer of it. Only
//! the order between different jobs' entries changes, which delayq never reads.
//! A write somebody waits for takes the held entries of its jobs along, in front
//! of it: a state change, an insert (an id pushed again once its job ended) or
//! a replace. Pushes arrive all the time, and were they to take every entry
//! along, nothing would be held while producers are busy. A deletion of every
//! live job, a purge, a flush, a close and the retry of a failed batch take
//! every held entry along.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use delayq_common::{Job, JobId};
use tokio::time::Instant;

use super::task::Write;
use crate::store::StateChange;

/// The longest a journal entry waits for its job's next write before it
/// commits anyway (with whatever commits next). Long enough for a worker that
/// finishes the jobs of one pop one after another, each ack waiting for a
/// commit: were its later jobs' `reserved` entries to commit alone, each
/// commit would write more, take longer and let even more entries miss their
/// ack, until the acks fall behind.
pub(super) const JOURNAL_HOLD: Duration = Duration::from_millis(100);

/// One journal entry held back.
enum Entry {
    /// A state change.
    Change(StateChange),
    /// A job of a journaled insert (a group's delivery, see [`super::fold`]).
    Insert(Box<Job>),
}

impl Entry {
    fn id(&self) -> &JobId {
        match self {
            Entry::Change(change) => &change.id,
            Entry::Insert(job) => &job.id,
        }
    }
}

/// The journal entries held back, oldest first.
#[derive(Default)]
pub(super) struct Held {
    entries: VecDeque<(Instant, Entry)>,
}

impl Held {
    /// When the oldest entry has waited long enough.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.entries.front().map(|(since, _)| *since + JOURNAL_HOLD)
    }

    /// Every held entry, as journal writes in order.
    pub(super) fn take_all(&mut self) -> Vec<Write> {
        journal(self.entries.drain(..).map(|(_, entry)| entry))
    }

    /// Returns what commits now, in order: `retained` (a failed batch's journal
    /// entries, retried) and the held entries that are due or whose job `fresh`
    /// writes, then `fresh` less the journal entries that wait. `closing` takes
    /// everything.
    ///
    /// A write of a job also takes along the held entries of its groups'
    /// deliveries: the fan-out journals a job's end after the inserts of its
    /// deliveries, and they must not commit after it.
    pub(super) fn release(
        &mut self,
        retained: Vec<Write>,
        fresh: Vec<Write>,
        closing: bool,
        now: Instant,
    ) -> Vec<Write> {
        let takes_everything = fresh.iter().any(|write| {
            matches!(
                write,
                Write::DeleteAllLive { .. } | Write::Purge { .. } | Write::Flush { .. } | Write::Close { .. }
            )
        });
        let mut out = Vec::with_capacity(fresh.len() + 1);
        if closing || !retained.is_empty() || takes_everything {
            out.extend(retained);
            out.extend(self.take_all());
            out.extend(fresh);
            return out;
        }
        let journaled = fresh.iter().any(|write| write.journaled() > 0);
        if self.entries.is_empty() && !journaled {
            // Nothing held and nothing new that could wait: a batch of pushes
            // and acks goes as it came, without gathering the ids it writes.
            return fresh;
        }
        let mut awaited: HashSet<JobId> = HashSet::new();
        for write in &fresh {
            match write {
                Write::Record { changes, reply: Some(_) } => {
                    awaited.extend(changes.iter().map(|change| change.id.clone()));
                }
                Write::Insert { jobs, reply: Some(_) } => awaited.extend(jobs.iter().map(|job| job.id.clone())),
                Write::Replace { job, .. } => {
                    awaited.insert(job.id.clone());
                }
                _ => {}
            }
        }
        let is_awaited =
            |id: &JobId| awaited.contains(id) || id.group_parts().is_some_and(|(of, _)| awaited.contains(&of));
        let (due, kept): (VecDeque<_>, VecDeque<_>) =
            self.entries.drain(..).partition(|(since, entry)| *since + JOURNAL_HOLD <= now || is_awaited(entry.id()));
        self.entries = kept;
        out.extend(journal(due.into_iter().map(|(_, entry)| entry)));
        for write in fresh {
            let entries: Vec<Entry> = match write {
                Write::Record { changes, reply: None } => changes.into_iter().map(Entry::Change).collect(),
                Write::Insert { jobs, reply: None } => {
                    jobs.into_iter().map(|job| Entry::Insert(Box::new(job))).collect()
                }
                write => {
                    out.push(write);
                    continue;
                }
            };
            let (now_entries, later): (Vec<_>, Vec<_>) = entries.into_iter().partition(|entry| is_awaited(entry.id()));
            self.entries.extend(later.into_iter().map(|entry| (now, entry)));
            out.extend(journal(now_entries));
        }
        out
    }
}

/// Journal writes of `entries`, in order: each run of state changes one
/// write, each run of inserted jobs another.
fn journal(entries: impl IntoIterator<Item = Entry>) -> Vec<Write> {
    let mut writes: Vec<Write> = Vec::new();
    for entry in entries {
        match (writes.last_mut(), entry) {
            (Some(Write::Record { changes, reply: None }), Entry::Change(change)) => changes.push(change),
            (Some(Write::Insert { jobs, reply: None }), Entry::Insert(job)) => jobs.push(*job),
            (_, Entry::Change(change)) => writes.push(Write::Record { changes: vec![change], reply: None }),
            (_, Entry::Insert(job)) => writes.push(Write::Insert { jobs: vec![*job], reply: None }),
        }
    }
    writes
}

#[cfg(test)]
mod tests {
    use delayq_common::{JobId, JobState, Timestamp, Topic};
    use tokio::sync::oneshot;

    use super::*;
    use crate::testsuite::sample_job;

    fn change(id: &str, state: JobState) -> StateChange {
        StateChange {
            id: JobId::parse(id.to_owned()).expect("a valid id"),
            state,
            attempt: 1,
            run_at: Timestamp::from_millis(0),
            at: Timestamp::from_millis(0),
            result: None,
        }
    }

    fn journal_of(changes: &[(&str, JobState)]) -> Write {
        Write::Record { changes: changes.iter().map(|(id, state)| change(id, *state)).collect(), reply: None }
    }

    fn awaited(id: &str, state: JobState) -> Write {
        let (reply, _answer) = oneshot::channel();
        Write::Record { changes: vec![change(id, state)], reply: Some(reply) }
    }

    /// A state change write: whether somebody waits for it, and its (id, state) pairs.
    type Shape = (bool, Vec<(String, JobState)>);

    /// Each write's shape; `None` for a write that is not a state change.
    fn shape(writes: &[Write]) -> Vec<Option<Shape>> {
        writes
            .iter()
            .map(|write| match write {
                Write::Record { changes, reply } => Some((
                    reply.is_some(),
                    changes.iter().map(|change| (change.id.as_str().to_owned(), change.state)).collect(),
                )),
                _ => None,
            })
            .collect()
    }

    fn entry(id: &str, state: JobState) -> (String, JobState) {
        (id.to_owned(), state)
    }

    #[tokio::test]
    async fn entries_wait_until_their_job_commits_or_their_time_is_up() {
        let mut held = Held::default();
        let t0 = Instant::now();
        let fresh = vec![journal_of(&[("a", JobState::Ready), ("b", JobState::Ready)])];
        assert!(held.release(Vec::new(), fresh, false, t0).is_empty(), "nothing commits yet");
        assert_eq!(held.deadline(), Some(t0 + JOURNAL_HOLD));

        let later = t0 + JOURNAL_HOLD / 2;
        let fresh = vec![journal_of(&[("a", JobState::Reserved)]), awaited("a", JobState::Finished)];
        let out = held.release(Vec::new(), fresh, false, later);
        assert_eq!(
            shape(&out),
            [
                Some((false, vec![entry("a", JobState::Ready)])),
                Some((false, vec![entry("a", JobState::Reserved)])),
                Some((true, vec![entry("a", JobState::Finished)])),
            ],
            "a's entries commit in order, in front of its finish; b's keeps waiting"
        );

        let fresh = vec![journal_of(&[("c", JobState::Ready)])];
        let out = held.release(Vec::new(), fresh, false, t0 + JOURNAL_HOLD);
        assert_eq!(shape(&out), [Some((false, vec![entry("b", JobState::Ready)]))], "b's time is up, c's is not");
        assert_eq!(held.deadline(), Some(t0 + JOURNAL_HOLD + JOURNAL_HOLD));
    }

    #[tokio::test]
    async fn a_job_whose_older_entry_is_due_keeps_its_newer_one_behind_it() {
        let mut held = Held::default();
        let t0 = Instant::now();
        held.release(Vec::new(), vec![journal_of(&[("a", JobState::Ready)])], false, t0);
        let out = held.release(Vec::new(), vec![journal_of(&[("a", JobState::Reserved)])], false, t0 + JOURNAL_HOLD);
        assert_eq!(shape(&out), [Some((false, vec![entry("a", JobState::Ready)]))]);
        let out = held.release(Vec::new(), Vec::new(), false, t0 + JOURNAL_HOLD * 2);
        assert_eq!(shape(&out), [Some((false, vec![entry("a", JobState::Reserved)]))]);
        assert_eq!(held.deadline(), None);
    }

    #[tokio::test]
    async fn an_insert_or_a_replace_takes_along_only_the_entries_of_its_jobs() {
        let mut held = Held::default();
        let t0 = Instant::now();
        let fresh = vec![journal_of(&[("a", JobState::Expired), ("b", JobState::Ready), ("c", JobState::Ready)])];
        held.release(Vec::new(), fresh, false, t0);
        let topic = Topic::parse("t".to_owned()).expect("a valid topic");

        let (reply, _answer) = oneshot::channel();
        let insert = Write::Insert { jobs: vec![sample_job("a", &topic)], reply: Some(reply) };
        let out = held.release(Vec::new(), vec![insert], false, t0);
        assert_eq!(
            shape(&out),
            [Some((false, vec![entry("a", JobState::Expired)])), None],
            "a's entry goes in front of the insert of its id; b's and c's wait"
        );

        let (reply, _answer) = oneshot::channel();
        let replace = Write::Replace { job: Box::new(sample_job("b", &topic)), reply };
        let out = held.release(Vec::new(), vec![replace], false, t0);
        assert_eq!(shape(&out), [Some((false, vec![entry("b", JobState::Ready)])), None]);
        assert_eq!(held.deadline(), Some(t0 + JOURNAL_HOLD), "c's entry still waits");
    }

    #[tokio::test]
    async fn a_journaled_insert_waits_and_a_write_of_its_job_takes_it_along() {
        let mut held = Held::default();
        let t0 = Instant::now();
        let topic = Topic::parse("t".to_owned()).expect("a valid topic");
        let mut copy = sample_job("p", &topic);
        copy.id = copy.id.for_group(&delayq_common::Group::parse("g").expect("a valid group"));
        let fresh =
            vec![Write::Insert { jobs: vec![copy.clone()], reply: None }, journal_of(&[("p", JobState::Finished)])];
        assert!(held.release(Vec::new(), fresh, false, t0).is_empty(), "both wait");
        let out = held.release(Vec::new(), vec![awaited("q", JobState::Ready)], false, t0);
        assert_eq!(shape(&out), [Some((true, vec![entry("q", JobState::Ready)]))], "another job's write takes nothing");
        let out = held.release(Vec::new(), vec![awaited("p", JobState::Deleted)], false, t0);
        assert!(
            matches!(out.first(), Some(Write::Insert { jobs, reply: None }) if jobs.first().map(|job| &job.id) == Some(&copy.id))
        );
        assert_eq!(
            shape(&out[1..]),
            [Some((false, vec![entry("p", JobState::Finished)])), Some((true, vec![entry("p", JobState::Deleted)]))],
            "the delivery's insert, then the job's entry, then its write"
        );
        assert_eq!(held.deadline(), None);
    }

    #[tokio::test]
    async fn other_writes_retries_and_close_take_every_entry_in_front() {
        let t0 = Instant::now();
        let (reply, _answer) = oneshot::channel();
        let fresh = || vec![journal_of(&[("a", JobState::Ready)]), journal_of(&[("b", JobState::Ready)])];

        let mut held = Held::default();
        held.release(Vec::new(), fresh(), false, t0);
        let out = held.release(Vec::new(), vec![Write::Flush { reply }], false, t0);
        assert_eq!(shape(&out), [Some((false, vec![entry("a", JobState::Ready), entry("b", JobState::Ready)])), None]);

        let mut held = Held::default();
        held.release(Vec::new(), fresh(), false, t0);
        let retried = vec![journal_of(&[("a", JobState::Delay)])];
        let out = held.release(retried, vec![journal_of(&[("c", JobState::Ready)])], false, t0);
        assert_eq!(
            shape(&out),
            [
                Some((false, vec![entry("a", JobState::Delay)])),
                Some((false, vec![entry("a", JobState::Ready), entry("b", JobState::Ready)])),
                Some((false, vec![entry("c", JobState::Ready)])),
            ],
            "a retried batch goes first, then everything held, then the new writes"
        );

        let mut held = Held::default();
        held.release(Vec::new(), fresh(), false, t0);
        let out = held.release(Vec::new(), Vec::new(), true, t0);
        assert_eq!(shape(&out), [Some((false, vec![entry("a", JobState::Ready), entry("b", JobState::Ready)]))]);
        assert_eq!(held.deadline(), None);
    }
}
