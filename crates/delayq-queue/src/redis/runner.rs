//! The calls of the Redis scheduler on one shard: each is one script run
//! (atomic in Redis), with its arguments built and its reply read here.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayq_common::{Job, JobId, JobState, Timestamp, Topic};
use redis::{Script, ScriptInvocation, Value};

use super::codec::{self, CodecError};
use super::connection::{bounded, unavailable, RedisConnection, TimedOut};
use super::keys::{self, ShardKeys};
use super::notify::Signals;
use super::reply::{self, Status};
use super::scripts::Scripts;
use super::topic_codes::TopicCodes;
use crate::error::{QueueError, QueueResult};
use crate::scheduler::{reservation_deadline, waiting_state};

/// What a schedule call did with one job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Added {
    /// The shard holds it now.
    Yes,
    /// The shard held a job of this id already (or ended it since the restore's fence).
    Held,
    /// A new job due beyond the shard's horizon: left to the store.
    BeyondHorizon,
}

/// Shared state of one Redis scheduler instance.
pub(crate) struct ScriptRunner {
    pub(super) connection: RedisConnection,
    pub(super) scripts: Scripts,
    pub(super) shards: Vec<ShardKeys>,
    /// The prefix of keys and channels.
    pub(super) prefix: String,
    /// The bound on each Redis call.
    pub(super) timeout: Duration,
    pub(super) signals: Arc<Signals>,
    /// Where the next cross-shard walk starts, so no shard is always last.
    rotation: AtomicUsize,
    /// The leader epoch promote rounds carry (0: none).
    pub(super) fence: AtomicU64,
    /// The code each shard gave each topic ([`TopicCodes`]).
    topic_codes: TopicCodes,
}

/// Where jobs handed to the schedule script come from.
#[derive(Clone, Copy)]
enum Arrival {
    /// A push: the job waits for its due time.
    New,
    /// The store: a reserved job keeps its reservation. Carries the restore
    /// fence (0: none), see `lua/index.lua`.
    Restored(u64),
}

/// What `finish` and `delete` require of the job.
#[derive(Clone, Copy)]
pub(super) enum Removal {
    /// A reserved job; of this delivery when one is named.
    Finish(Option<u32>),
    /// Any live job.
    Delete,
}

impl ScriptRunner {
    pub(super) fn new(
        connection: RedisConnection,
        shards: Vec<ShardKeys>,
        prefix: String,
        timeout: Duration,
        signals: Arc<Signals>,
    ) -> ScriptRunner {
        let topic_codes = TopicCodes::new(shards.len());
        ScriptRunner {
            connection,
            scripts: Scripts::new(),
            topic_codes,
            shards,
            prefix,
            timeout,
            signals,
            rotation: AtomicUsize::new(0),
            fence: AtomicU64::new(0),
        }
    }

    /// Returns the shard of `id`.
    #[allow(clippy::indexing_slicing, reason = "`keys::shard_of` is below the shard count, which is at least 1")]
    pub(super) fn shard_of(&self, id: &JobId) -> &ShardKeys {
        &self.shards[keys::shard_of(id, self.shards.len())]
    }

    /// Returns the shard a cross-shard walk starts at, advancing the rotation.
    pub(super) fn next_start(&self) -> usize {
        self.rotation.fetch_add(1, Ordering::Relaxed) % self.shards.len()
    }

    /// Adds jobs of one shard that it does not hold, unless they are due
    /// beyond its horizon; returns what became of each.
    pub(super) async fn schedule(&self, shard: &ShardKeys, jobs: &[&Job], now: Timestamp) -> QueueResult<Vec<Added>> {
        self.add(shard, jobs, now, Arrival::New).await
    }

    /// Adds jobs of one shard from the store unless it holds them (a reserved
    /// one stays reserved until its ttr deadline) or ended them since `fence`
    /// (the Redis time its restore window opened at, 0 for none); returns
    /// whether each was added.
    pub(super) async fn restore(
        &self,
        shard: &ShardKeys,
        jobs: &[&Job],
        now: Timestamp,
        fence: u64,
    ) -> QueueResult<Vec<bool>> {
        let added = self.add(shard, jobs, now, Arrival::Restored(fence)).await?;
        Ok(added.into_iter().map(|added| added == Added::Yes).collect())
    }

    /// Runs `horizon.lua` on one shard: `admit` or `loaded` raise a mark to
    /// `until`, `read` changes nothing; returns the marks after the call.
    pub(super) async fn horizon(
        &self,
        shard: &ShardKeys,
        operation: &str,
        until: Timestamp,
    ) -> QueueResult<(Option<u64>, Option<u64>)> {
        let mut invocation = self.scripts.horizon.prepare_invoke();
        invocation.key(&shard.meta).arg(operation).arg(until.as_millis());
        let reply = self.run(&invocation).await?;
        let parse = || -> Result<(Option<u64>, Option<u64>), CodecError> {
            let mut items = reply::array(reply)?.into_iter();
            let admit = reply::instant(&reply::next(&mut items)?)?;
            let loaded = reply::instant(&reply::next(&mut items)?)?;
            Ok((admit, loaded))
        };
        parse().map_err(unavailable)
    }

    /// Opens (or extends) the restore window of one shard; returns its Redis time in ms.
    pub(super) async fn open_restore(&self, shard: &ShardKeys) -> QueueResult<u64> {
        let invocation = self.invocation(&self.scripts.restoring, shard, Timestamp::now());
        let reply = self.run(&invocation).await?;
        let opened_at = reply::int(&reply).map_err(unavailable)?;
        u64::try_from(opened_at).map_err(|_| unavailable(CodecError("restore window")))
    }

    /// One schedule call: with the topic codes this node knows when it knows
    /// every topic's, which the script checks (and corrects, telling us).
    async fn add(&self, shard: &ShardKeys, jobs: &[&Job], now: Timestamp, arrival: Arrival) -> QueueResult<Vec<Added>> {
        let codes = self.topic_codes.cached(shard, jobs);
        let codes = codes.as_ref();
        let mut invocation = self.invocation(&self.scripts.schedule, shard, now);
        let fence = match arrival {
            Arrival::New => 0,
            Arrival::Restored(fence) => fence,
        };
        invocation.arg(fence);
        let topics = codes.map_or(&[][..], |codes| &codes.topics);
        invocation.arg(topics.len());
        for (topic, code) in topics {
            invocation.arg(*topic).arg(*code);
        }
        let mut record = Vec::with_capacity(160);
        for (index, job) in jobs.iter().enumerate() {
            let code = codes.and_then(|codes| codes.jobs.get(index).copied());
            push_job_args(&mut invocation, job, now, arrival, code, &mut record);
        }
        let reply = self.run(&invocation).await?;
        let parse = || -> Result<Vec<Added>, CodecError> {
            let mut items = reply::array(reply)?.into_iter();
            let added = reply::array(reply::next(&mut items)?)?;
            self.apply_signals(shard, &mut items)?;
            self.topic_codes.learn(shard, reply::array(reply::next(&mut items)?)?)?;
            added
                .iter()
                .map(|flag| match reply::int(flag)? {
                    0 => Ok(Added::Held),
                    1 => Ok(Added::Yes),
                    2 => Ok(Added::BeyondHorizon),
                    _ => Err(CodecError("schedule reply")),
                })
                .collect()
        };
        let added = parse().map_err(unavailable)?;
        if added.len() != jobs.len() {
            return Err(unavailable(CodecError("reply")));
        }
        Ok(added)
    }

    /// Swaps a waiting job for `job`; returns it as scheduled.
    pub(super) async fn replace(&self, job: &Job, now: Timestamp) -> QueueResult<Job> {
        let shard = self.shard_of(&job.id);
        let mut invocation = self.invocation(&self.scripts.replace, shard, now);
        push_job_args(&mut invocation, job, now, Arrival::New, None, &mut Vec::with_capacity(160));
        let reply = self.run(&invocation).await?;
        self.on_status(&job.id, reply, |items| {
            let record = reply::bytes(reply::next(items)?)?;
            self.apply_signals(shard, items)?;
            codec::decode_record(job.id.clone(), job.topic.clone(), &record)
        })
    }

    /// Pops up to `count` ready jobs of `topic` from one shard and reserves them;
    /// returns them and how many ready jobs the shard has left.
    pub(super) async fn reserve(&self, shard: &ShardKeys, topic: &Topic, count: usize) -> QueueResult<(Vec<Job>, u64)> {
        let now = Timestamp::now();
        let mut invocation = self.invocation(&self.scripts.reserve, shard, now);
        invocation.key(shard.ready(topic.as_str())).arg(topic.as_str()).arg(count);
        let reply = self.run(&invocation).await?;
        let parse = || -> Result<(Vec<Job>, u64), CodecError> {
            let mut items = reply::array(reply)?.into_iter();
            let jobs = reply::jobs_of_topic(reply::next(&mut items)?, topic)?;
            let left = reply::int(&reply::next(&mut items)?)?;
            self.apply_signals(shard, &mut items)?;
            Ok((jobs, u64::try_from(left).unwrap_or(0)))
        };
        parse().map_err(unavailable)
    }

    /// Finishes or deletes jobs of one shard, each judged alone; returns each as it was.
    pub(super) async fn remove(
        &self,
        shard: &ShardKeys,
        removals: &[(&JobId, Removal)],
    ) -> QueueResult<Vec<QueueResult<Job>>> {
        let mut invocation = self.invocation(&self.scripts.remove, shard, Timestamp::now());
        for (id, removal) in removals {
            let (mode, attempt) = match removal {
                Removal::Finish(attempt) => ("finish", attempt_arg(*attempt)),
                Removal::Delete => ("delete", String::new()),
            };
            invocation.arg(keys::encode_id(id)).arg(mode).arg(attempt);
        }
        let reply = self.run(&invocation).await?;
        let replies = reply::array(reply).map_err(unavailable)?;
        if replies.len() != removals.len() {
            return Err(unavailable(CodecError("reply")));
        }
        Ok(removals
            .iter()
            .zip(replies)
            .map(|((id, _), reply)| self.on_status(id, reply, |items| reply::job((*id).clone(), items)))
            .collect())
    }

    /// Restarts the ttr of a reserved job; returns it.
    pub(super) async fn touch(&self, id: &JobId, attempt: Option<u32>) -> QueueResult<Job> {
        let shard = self.shard_of(id);
        let mut invocation = self.invocation(&self.scripts.touch, shard, Timestamp::now());
        invocation.arg(keys::encode_id(id)).arg(attempt_arg(attempt));
        let reply = self.run(&invocation).await?;
        self.on_status(id, reply, |items| reply::job(id.clone(), items))
    }

    /// Gives a reserved job back after `delay`; returns it after the change.
    pub(super) async fn nack(&self, id: &JobId, attempt: Option<u32>, delay: Duration) -> QueueResult<Job> {
        let shard = self.shard_of(id);
        let now = Timestamp::now();
        let mut invocation = self.invocation(&self.scripts.nack, shard, now);
        let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX).min(1 << 52);
        invocation.arg(keys::encode_id(id)).arg(delay_ms).arg(attempt_arg(attempt));
        let reply = self.run(&invocation).await?;
        self.on_status(id, reply, |items| {
            let mut job = reply::job(id.clone(), items)?;
            let state = codec::state_of_code(reply::int(&reply::next(items)?)?)?;
            if state == JobState::Dead {
                job.state = state;
                job.updated_at = now;
            }
            self.apply_signals(shard, items)?;
            Ok(job)
        })
    }

    /// Reads jobs of one shard; `None` for each one it does not hold.
    pub(super) async fn get(&self, shard: &ShardKeys, ids: &[&JobId]) -> QueueResult<Vec<Option<Job>>> {
        let mut invocation = self.invocation(&self.scripts.get, shard, Timestamp::now());
        for id in ids {
            invocation.arg(keys::encode_id(id));
        }
        let reply = self.run(&invocation).await?;
        let replies = reply::array(reply).map_err(unavailable)?;
        if replies.len() != ids.len() {
            return Err(unavailable(CodecError("reply")));
        }
        ids.iter()
            .zip(replies)
            .map(|(id, reply)| {
                if reply == Value::Nil {
                    return Ok(None);
                }
                let mut items = reply::array(reply)?.into_iter();
                reply::job((*id).clone(), &mut items).map(Some)
            })
            .collect::<Result<_, CodecError>>()
            .map_err(unavailable)
    }

    /// Applies at most `limit` due entries of one shard at `now`; returns the
    /// changed jobs and the shard's earliest instant afterwards.
    pub(super) async fn promote(
        &self,
        shard: &ShardKeys,
        now: Timestamp,
        limit: usize,
    ) -> QueueResult<(Vec<Job>, Option<u64>)> {
        let mut invocation = self.invocation(&self.scripts.promote, shard, now);
        invocation.arg(limit).arg(self.fence.load(Ordering::Acquire));
        let reply = self.run(&invocation).await?;
        let parse = || -> Result<(Vec<Job>, Option<u64>), CodecError> {
            let mut items = reply::array(reply)?.into_iter();
            let changed = reply::changed_jobs(reply::next(&mut items)?, now)?;
            let next_due = reply::instant(&reply::next(&mut items)?)?;
            // The timer learns the next instant from the reply; only ready hints matter here.
            let _wake = reply::next(&mut items)?;
            for topic in reply::topics(reply::next(&mut items)?)? {
                self.signals.on_ready(shard.index, &topic);
            }
            Ok((changed, next_due))
        };
        parse().map_err(unavailable)
    }

    /// Removes every job of one shard; returns how many there were.
    pub(super) async fn clear(&self, shard: &ShardKeys) -> QueueResult<u64> {
        let invocation = self.invocation(&self.scripts.clear, shard, Timestamp::now());
        let reply = self.run(&invocation).await?;
        let cleared = reply::int(&reply).map_err(unavailable)?;
        Ok(u64::try_from(cleared).unwrap_or(0))
    }

    /// Returns whether a shard carries the data `epoch`, marking it with it when not.
    pub(super) async fn mark(&self, shard: &ShardKeys, epoch: &str) -> QueueResult<bool> {
        let mut invocation = self.scripts.mark.prepare_invoke();
        invocation.key(&shard.meta).arg(epoch);
        let reply = self.run(&invocation).await?;
        Ok(reply::int(&reply).map_err(unavailable)? == 1)
    }

    /// Returns the metadata fields of one shard; live counts are `(state letter + topic, count)`.
    pub(super) async fn meta(&self, shard: &ShardKeys) -> QueueResult<Vec<(String, String)>> {
        self.connection.query(redis::cmd("HGETALL").arg(&shard.meta), self.timeout).await
    }

    /// Returns the scores of the first `count` ready jobs of `topic` in one shard.
    pub(super) async fn peek_ready(&self, shard: &ShardKeys, topic: &Topic, count: usize) -> QueueResult<Vec<u64>> {
        let last = count.saturating_sub(1);
        let mut command = redis::cmd("ZRANGE");
        command.arg(shard.ready(topic.as_str())).arg(0).arg(last).arg("WITHSCORES");
        let flat: Vec<Vec<u8>> = self.connection.query(&command, self.timeout).await?;
        flat.iter()
            .skip(1)
            .step_by(2)
            .map(|score| {
                let score = std::str::from_utf8(score).ok().and_then(|text| text.parse::<f64>().ok());
                score.map(|score| score as u64).ok_or_else(|| unavailable(CodecError("score")))
            })
            .collect()
    }

    /// Starts a script call on `shard` with the common KEYS and ARGV (lib.lua).
    fn invocation<'a>(&self, script: &'a Script, shard: &ShardKeys, now: Timestamp) -> ScriptInvocation<'a> {
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&shard.jobs)
            .key(&shard.timeline)
            .key(&shard.meta)
            .arg(&self.signals.origin)
            .arg(now.as_millis())
            .arg(&self.prefix)
            .arg(shard.index);
        invocation
    }

    async fn run(&self, invocation: &ScriptInvocation<'_>) -> QueueResult<Value> {
        let mut connection = self.connection.clone();
        bounded(self.timeout, invocation.invoke_async(&mut connection)).await
    }

    /// Applies the trailing `wake due, readied topics` of a reply on this node.
    fn apply_signals(&self, shard: &ShardKeys, items: &mut impl Iterator<Item = Value>) -> Result<(), CodecError> {
        if let Some(due) = reply::instant(&reply::next(items)?)? {
            self.signals.on_wake(due, shard.index);
        }
        for topic in reply::topics(reply::next(items)?)? {
            self.signals.on_ready(shard.index, &topic);
        }
        Ok(())
    }

    /// Maps a one-job reply: `done` reads the rest of a successful one.
    fn on_status<T>(
        &self,
        id: &JobId,
        reply: Value,
        done: impl FnOnce(&mut std::vec::IntoIter<Value>) -> Result<T, CodecError>,
    ) -> QueueResult<T> {
        match reply::status(reply).map_err(unavailable)? {
            Status::Done(mut items) => done(&mut items).map_err(unavailable),
            Status::NotFound => Err(QueueError::NotFound(id.clone())),
            Status::WrongState(state) => Err(QueueError::WrongState { id: id.clone(), state }),
            Status::StaleAttempt(current) => {
                // Only a caller that named a delivery gets this reply, and it named one.
                Err(QueueError::StaleAttempt { id: id.clone(), attempt: 0, current })
            }
        }
    }
}

/// The script argument naming the delivery a caller holds: empty for any.
fn attempt_arg(attempt: Option<u32>) -> String {
    attempt.map(|attempt| attempt.to_string()).unwrap_or_default()
}

/// Where a job goes: the state it is scheduled in, its score (run_at when
/// delayed; priority and run_at when ready; a restored reservation keeps its
/// ttr deadline) and its ttl expiry (0 unless ready with a ttl).
fn placement(job: &Job, now: Timestamp, arrival: Arrival) -> (JobState, u64, u64) {
    if let (Arrival::Restored(_), Some(deadline)) = (arrival, reservation_deadline(job)) {
        return (JobState::Reserved, deadline.as_millis().min(codec::LUA_MAX), 0);
    }
    match waiting_state(job.run_at, now) {
        JobState::Ready => (JobState::Ready, codec::ready_score(job), codec::expiry_millis(job)),
        state => (state, codec::due_millis(job), 0),
    }
}

/// Appends one job as schedule.lua and replace.lua read it: id, topic,
/// record (placed at `now`, with `topic_code` if known), score, expiry.
fn push_job_args(
    invocation: &mut ScriptInvocation<'_>,
    job: &Job,
    now: Timestamp,
    arrival: Arrival,
    topic_code: Option<u64>,
    record: &mut Vec<u8>,
) {
    let (state, score, expiry) = placement(job, now, arrival);
    record.clear();
    codec::encode_record(job, state, topic_code, record);
    invocation.arg(keys::encode_id(&job.id)).arg(job.topic.as_str()).arg(record.as_slice()).arg(score).arg(expiry);
}

impl crate::combine::Sender for ScriptRunner {
    fn deadline(&self) -> Duration {
        self.timeout
    }

    fn timed_out(&self) -> QueueError {
        unavailable(TimedOut(self.timeout))
    }

    fn stopped(&self) -> QueueError {
        unavailable("the task sending to Redis stopped")
    }
}
