//! Calls by shard: the jobs of one operation grouped by the shard of each id,
//! one script call per shard (and chunk) all at once, and the per-job outcomes
//! put back in the caller's order. The combiners (`crate::combine`) send their
//! batches of schedules, removals and reads through here.

use delayq_common::{Job, JobId, Timestamp};
use std::future::Future;

use futures::future::join_all;

use super::codec::CodecError;
use super::connection::unavailable;
use super::keys::{self, ShardKeys};
use super::runner::{Added, Removal, ScriptRunner};
use crate::combine::Group;
use crate::error::{QueueError, QueueResult};

/// The most jobs one schedule script call carries.
pub(super) const SCHEDULE_CHUNK: usize = 256;
/// Jobs per call of the remove script.
pub(super) const REMOVE_CHUNK: usize = 256;
/// Jobs per call of the get script.
pub(super) const GET_CHUNK: usize = 256;
/// Single schedules, sent together by their combiner.
pub(super) struct Schedules;

impl Group for Schedules {
    type Sender = ScriptRunner;
    type Request = Job;
    type Outcome = ();

    fn send<'a>(
        runner: &'a ScriptRunner,
        jobs: &'a [Job],
    ) -> impl Future<Output = QueueResult<Vec<QueueResult<()>>>> + Send + 'a {
        schedule_jobs(runner, jobs)
    }
}

/// Finishes and deletes, sent together by their combiner.
pub(super) struct Removals;

impl Group for Removals {
    type Sender = ScriptRunner;
    type Request = (JobId, Removal);
    type Outcome = Job;

    fn send<'a>(
        runner: &'a ScriptRunner,
        removals: &'a [(JobId, Removal)],
    ) -> impl Future<Output = QueueResult<Vec<QueueResult<Job>>>> + Send + 'a {
        remove_jobs(runner, removals)
    }
}

/// Reads of single jobs, sent together by their combiner.
pub(super) struct Gets;

impl Group for Gets {
    type Sender = ScriptRunner;
    type Request = JobId;
    type Outcome = Option<Job>;

    async fn send(runner: &ScriptRunner, ids: &[JobId]) -> QueueResult<Vec<QueueResult<Option<Job>>>> {
        let outcomes = call_by_shard(runner, ids.iter(), GET_CHUNK, |shard, chunk| {
            let chunk_ids: Vec<&JobId> = chunk.iter().filter_map(|&position| ids.get(position)).collect();
            async move { Ok(runner.get(shard, &chunk_ids).await?.into_iter().map(Ok).collect()) }
        });
        Ok(outcomes.await)
    }
}

/// Finishes or deletes jobs, each judged alone.
pub(super) async fn remove_jobs(
    runner: &ScriptRunner,
    removals: &[(JobId, Removal)],
) -> QueueResult<Vec<QueueResult<Job>>> {
    let outcomes = call_by_shard(runner, removals.iter().map(|(id, _)| id), REMOVE_CHUNK, |shard, chunk| {
        let chunk_removals: Vec<(&JobId, Removal)> =
            chunk.iter().filter_map(|&position| removals.get(position)).map(|(id, removal)| (id, *removal)).collect();
        async move { runner.remove(shard, &chunk_removals).await }
    });
    Ok(outcomes.await)
}

/// Makes one script call per shard for the jobs `ids` name (and per `chunk` of
/// them), all at once, and puts the per-job outcomes back in the order of
/// `ids`; a call that fails fails each of its jobs.
pub(super) async fn call_by_shard<'a, T, Call, Reply>(
    runner: &'a ScriptRunner,
    ids: impl Iterator<Item = &'a JobId>,
    chunk: usize,
    call: Call,
) -> Vec<QueueResult<T>>
where
    Call: Fn(&'a ShardKeys, &[usize]) -> Reply,
    Reply: std::future::Future<Output = QueueResult<Vec<QueueResult<T>>>>,
{
    let mut count = 0;
    let calls = chunks_by_shard(runner, ids.enumerate().inspect(|&(position, _)| count = position + 1), chunk);
    let replies = join_all(calls.iter().map(|(shard, positions)| call(shard, positions))).await;
    let mut outcomes: Vec<Option<QueueResult<T>>> = (0..count).map(|_| None).collect();
    for ((_, positions), reply) in calls.iter().zip(replies) {
        let outcomes_of_call: Vec<QueueResult<T>> = match reply {
            // The runner checked that the reply has one outcome per job.
            Ok(replies) => replies,
            Err(error) => positions.iter().map(|_| Err(error.unavailable_copy())).collect(),
        };
        for (&position, outcome) in positions.iter().zip(outcomes_of_call) {
            if let Some(slot) = outcomes.get_mut(position) {
                *slot = Some(outcome);
            }
        }
    }
    outcomes.into_iter().map(|outcome| outcome.unwrap_or_else(|| Err(unavailable(CodecError("reply"))))).collect()
}

/// Groups the positions of `ids` by the shard of each id, in chunks of at most
/// `chunk` positions, in shard order.
pub(super) fn chunks_by_shard<'e, 'i>(
    runner: &'e ScriptRunner,
    ids: impl Iterator<Item = (usize, &'i JobId)>,
    chunk: usize,
) -> Vec<(&'e ShardKeys, Vec<usize>)> {
    let shards = runner.shards.len();
    let mut by_shard: Vec<Vec<usize>> = vec![Vec::new(); shards];
    for (position, id) in ids {
        // `shard_of` is below `shards`, so every position finds its shard.
        if let Some(positions) = by_shard.get_mut(keys::shard_of(id, shards)) {
            positions.push(position);
        }
    }
    runner
        .shards
        .iter()
        .zip(by_shard)
        .flat_map(|(shard, positions)| {
            positions.chunks(chunk.max(1)).map(|positions| (shard, positions.to_vec())).collect::<Vec<_>>()
        })
        .collect()
}

/// Adds new jobs, one script call per shard (and chunk); each job judged alone.
pub(super) async fn schedule_jobs(runner: &ScriptRunner, jobs: &[Job]) -> QueueResult<Vec<QueueResult<()>>> {
    let now = Timestamp::now();
    let outcomes = call_by_shard(runner, jobs.iter().map(|job| &job.id), SCHEDULE_CHUNK, |shard, chunk| {
        let chunk_jobs: Vec<&Job> = chunk.iter().filter_map(|&position| jobs.get(position)).collect();
        async move {
            let added = runner.schedule(shard, &chunk_jobs, now).await?;
            Ok(chunk_jobs
                .iter()
                .zip(added)
                .map(|(job, added)| {
                    if added == Added::Held {
                        Err(QueueError::Conflict(format!("job {} already exists", job.id)))
                    } else {
                        Ok(())
                    }
                })
                .collect())
        }
    })
    .await;
    // Redis failed every call: that is the batch's failure, not each job's.
    if outcomes.iter().all(|outcome| matches!(outcome, Err(QueueError::Unavailable { .. }))) {
        if let Some(Err(error)) = outcomes.into_iter().next() {
            return Err(error);
        }
        return Ok(Vec::new());
    }
    Ok(outcomes)
}
