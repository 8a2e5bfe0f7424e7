//! The fan-out: a due job of a topic with groups is reserved like any job,
//! its deliveries are written to the store and scheduled, and only then is
//! the job itself finished (see [`crate::fan_out`] for the task that runs it).
//!
//! Every step can be cut short (a crash, a Redis that lost its data, a store
//! outage): the job then stays reserved and comes back after its ttr, and the
//! fan-out runs again. It writes no delivery twice (those the store holds are
//! only brought back into the scheduler when live), so a group never gets a
//! job twice from one fan-out and never loses one.

use std::collections::{HashMap, HashSet};

use super::*;

impl DelayQueue {
    /// Reserves up to `count` due jobs of `topic` to fan out to its groups,
    /// waiting up to `wait` for the first; journals the reservations.
    pub async fn reserve_to_fan_out(&self, topic: &Topic, count: usize, wait: Duration) -> QueueResult<Vec<Job>> {
        self.store.check_journal_room()?;
        let (jobs, _) = self.reserve_journaled(topic, count, wait).await?;
        Ok(jobs)
    }

    /// Hands `reserved` jobs of `topic` to the groups the topic has now (or
    /// those of them each job's push named): creates each group's delivery,
    /// then finishes the job. Returns how many deliveries it created.
    ///
    /// # Errors
    /// When the store or the scheduler fails; the jobs not finished come back
    /// after their ttr and are fanned out again.
    pub async fn fan_out(&self, topic: &Topic, reserved: Vec<Job>) -> QueueResult<usize> {
        let groups = self.groups_of(topic).await;
        if groups.is_empty() {
            // Its last group was dropped since the reserve: the jobs go back to
            // the topic, whose pops take them without a group again.
            for job in reserved {
                self.nack(&job.id, Some(job.attempt), Some(Duration::ZERO)).await?;
            }
            return Ok(0);
        }
        let _id_guard = self.id_locks.lock_all(reserved.iter().map(|job| &job.id)).await;
        let now = Timestamp::now();
        let ids: Vec<JobId> = reserved.iter().map(|job| job.id.clone()).collect();
        // Which deliveries the store holds already (a fan-out cut short) is read
        // with the jobs themselves: every one a job could have, in one read.
        let possible = ids.iter().flat_map(|id| groups.iter().map(|group| id.for_group(group)));
        let wanted: Vec<JobId> = ids.iter().cloned().chain(possible).collect();
        let (written, jobs): (Vec<Job>, Vec<Job>) =
            self.store.get_many(&wanted).await?.into_iter().partition(|job| job.id.group_parts().is_some());
        let written: HashSet<JobId> = written.into_iter().map(|job| job.id).collect();
        let mut stored: HashMap<JobId, Job> = jobs.into_iter().map(|job| (job.id.clone(), job)).collect();
        let mut handed = Vec::with_capacity(reserved.len());
        let mut deliveries = Vec::new();
        for held in reserved {
            let Some(job) = stored.remove(&held.id) else {
                warn!(job_id = %held.id, "a job reserved to fan out is not in the store");
                continue;
            };
            if !job.state.is_live() {
                // Ended through another node after it was reserved.
                self.forget_in_scheduler(&held.id).await?;
                continue;
            }
            let job = job.with_live_state(&held);
            let named = |group: &&Group| job.groups.is_empty() || job.groups.contains(group);
            deliveries.extend(groups.iter().filter(named).map(|group| delivery_of(&job, group, now)));
            handed.push(job);
        }
        // Those the store holds already were written by a fan-out cut short.
        let (again, fresh): (Vec<Job>, Vec<Job>) =
            deliveries.into_iter().partition(|delivery| written.contains(&delivery.id));
        self.bring_back(again).await?;
        // A restore does not fall between the scheduler's and the store's
        // writes of the deliveries, nor between the job's finish in each.
        let _transition = self.transitions.read().await;
        let created = if self.scheduler.holds_payloads() {
            let created = self.journal_deliveries(fresh).await?;
            self.finish_handed(handed, now, Commit::Journaled).await?;
            created
        } else {
            let created = self.create_deliveries(fresh).await?;
            self.finish_handed(handed, now, Commit::Awaited).await?;
            created
        };
        Ok(created)
    }

    /// Brings back into the scheduler the deliveries a fan-out cut short
    /// wrote that are still live.
    async fn bring_back(&self, again: Vec<Job>) -> QueueResult<()> {
        for delivery in again {
            match self.restore_job(&delivery.id).await {
                Ok(_) | Err(QueueError::WrongState { .. } | QueueError::NotFound(_)) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Journals the insert of new deliveries and schedules them, for a
    /// scheduler that holds their payloads; returns how many. The caller holds
    /// [`DelayQueue::transitions`] and journals the jobs' end after this.
    ///
    /// Nobody waits for a delivery's row: it is held in the journal until the
    /// delivery's ack (or the hold's end) and written with the changes that
    /// reached it by then ([`JobStore::journal_insert`]), usually one insert
    /// of a finished row instead of an insert and two moves. The job's end,
    /// journaled after, never commits before its deliveries, so a crash loses
    /// neither: it only brings the job back, fanned out again, and a delivery
    /// whose ack had committed is not made twice.
    async fn journal_deliveries(&self, fresh: Vec<Job>) -> QueueResult<usize> {
        if fresh.is_empty() {
            return Ok(0);
        }
        self.store.journal_insert(fresh.clone());
        scheduled_or_there(self.scheduler.schedule_batch(&fresh).await?)?;
        Ok(fresh.len())
    }

    /// Stores and schedules new deliveries, for a scheduler whose pops read
    /// the payloads from the store; returns how many it created. The caller
    /// holds [`DelayQueue::transitions`].
    ///
    /// The store's insert is queued first and awaited after the scheduler has
    /// the deliveries, so a consumer may reserve one while its row commits:
    /// what the consumer then changes (the pop's journal, an ack) is queued
    /// after the insert and commits with it or after it
    /// ([`JobStore::insert_queued`]). The pop reads the payload from the store
    /// under the delivery's payload lock, held here until the row is in.
    /// Should the insert fail, the deliveries leave the scheduler again, and
    /// the job, not finished, is fanned out again after its ttr.
    async fn create_deliveries(&self, fresh: Vec<Job>) -> QueueResult<usize> {
        if fresh.is_empty() {
            return Ok(0);
        }
        let fresh_ids: Vec<JobId> = fresh.iter().map(|delivery| delivery.id.clone()).collect();
        let _payloads = self.payload_locks.lock_all(&fresh_ids).await;
        let insert = self.store.insert_queued(fresh.clone());
        let scheduled = self.scheduler.schedule_batch(&fresh).await;
        let outcomes = match insert.await {
            Ok(outcomes) => outcomes,
            Err(error) => {
                if let Err(left) = self.scheduler.delete_batch(&fresh_ids).await {
                    warn!(
                        error = &left as &dyn std::error::Error,
                        "deliveries whose rows were not written stay scheduled"
                    );
                }
                return Err(error.into());
            }
        };
        let mut created = 0;
        for (delivery, outcome) in fresh.iter().zip(outcomes) {
            match outcome {
                Ok(()) => created += 1,
                // Another fan-out of the job wrote it: its row stands.
                Err(refused) => warn!(job_id = %delivery.id, error = %refused, "a group's delivery was refused"),
            }
        }
        scheduled_or_there(scheduled?)?;
        Ok(created)
    }

    /// Finishes the jobs whose deliveries exist now: in the store (`commit`),
    /// then in the scheduler. The caller holds [`DelayQueue::transitions`].
    async fn finish_handed(&self, handed: Vec<Job>, now: Timestamp, commit: Commit) -> QueueResult<()> {
        if handed.is_empty() {
            return Ok(());
        }
        let changes = handed
            .iter()
            .map(|job| {
                let finished = Job { state: JobState::Finished, updated_at: now, ..job.clone() };
                StateChange::of(&finished, now)
            })
            .collect();
        match commit {
            Commit::Awaited => self.store.record(changes).await?,
            Commit::Journaled => self.store.journal(changes),
        }
        // All at once: a scheduler that combines concurrent calls (Redis) then
        // finishes the batch in one round trip instead of one per job.
        let finishes = handed.iter().map(|job| self.scheduler.finish(&job.id, Some(job.attempt)));
        for outcome in futures::future::join_all(finishes).await {
            match outcome {
                // Deleted meanwhile, or its ttr ran out and it is fanned out again
                // (which creates nothing twice).
                Ok(_)
                | Err(QueueError::NotFound(_) | QueueError::WrongState { .. } | QueueError::StaleAttempt { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        queue_metrics::record_fan_out(handed.len());
        Ok(())
    }
}

/// Checks the outcomes of scheduling deliveries: each is scheduled, or was
/// there already (a fan-out cut short put it there).
fn scheduled_or_there(outcomes: Vec<QueueResult<()>>) -> QueueResult<()> {
    for outcome in outcomes {
        match outcome {
            Ok(()) | Err(QueueError::Conflict(_)) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// How a fan-out writes the end of the jobs it handed out.
#[derive(Clone, Copy)]
enum Commit {
    /// Committed before the scheduler finishes them: their deliveries were committed first.
    Awaited,
    /// Journaled behind their deliveries' journaled inserts.
    Journaled,
}

/// Returns `group`'s delivery of `job`, due when the job was, created at `now`.
/// It leaves the business key with the job: a key names one live job of a
/// topic, and the job's next push under that key may fall due while this
/// delivery is still live.
fn delivery_of(job: &Job, group: &Group, now: Timestamp) -> Job {
    Job {
        id: job.id.for_group(group),
        topic: job.topic.for_group(group),
        biz_key: None,
        groups: Vec::new(),
        attempt: 1,
        state: JobState::Ready,
        result: None,
        updated_at: now,
        ..job.clone()
    }
}
