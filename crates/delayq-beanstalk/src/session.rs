//! One connection's state (the tube it uses, the tubes it watches, the jobs
//! it holds reserved) and the commands, each mapped onto [`DelayQueue`].
//!
//! The reservations are the only job state this crate keeps: beanstalkd ties
//! a reservation to its connection, so the jobs a connection holds are given
//! back when it closes. Each is named by the delivery (`attempt`) it was
//! handed out as, so a job whose ttr ran out and that went to another worker
//! is never touched through the stale reservation.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use delayq_common::{JobId, JobState, PushInput, PushRequest, TimeUnit, Timestamp, Topic};
use delayq_queue::{DelayQueue, QueueError};
use tokio::time::Instant;
use tracing::warn;

use crate::command::Command;
use crate::mapping::{beanstalk_id, job_id, priority_of, state_name, ttr_of, MAX_RETRIES};
use crate::reply;
use crate::shared::Shared;

/// The tube every connection uses and watches at first.
pub(crate) const DEFAULT_TUBE: &str = "default";
/// How many jobs `kick` reads at a time.
const KICK_PAGE: usize = 500;
/// The most tubes one connection may watch: each is looked at while it
/// reserves, so the bound keeps one client from making every wait costly.
pub(crate) const MAX_WATCHED_TUBES: usize = 256;
/// How many ready jobs `peek-ready` looks among for the most urgent.
const PEEK_READY_PAGE: usize = 1_000;

/// A job this connection holds reserved.
#[derive(Clone, Debug)]
pub(crate) struct Held {
    pub(crate) id: JobId,
    pub(crate) attempt: u32,
    /// When its ttr runs out, as this connection counts it.
    pub(crate) deadline: Instant,
}

pub(crate) struct Session {
    pub(crate) shared: Arc<Shared>,
    pub(crate) used: String,
    pub(crate) watched: Vec<String>,
    pub(crate) reserved: HashMap<u64, Held>,
    producer: bool,
    worker: bool,
}

impl Session {
    pub(crate) fn new(shared: Arc<Shared>) -> Session {
        shared.change_tube(DEFAULT_TUBE, |tube| {
            tube.using += 1;
            tube.watching += 1;
        });
        Session {
            shared,
            used: DEFAULT_TUBE.to_owned(),
            watched: vec![DEFAULT_TUBE.to_owned()],
            reserved: HashMap::new(),
            producer: false,
            worker: false,
        }
    }

    pub(crate) fn queue(&self) -> &DelayQueue {
        &self.shared.queue
    }

    /// Runs every command but `put` and `reserve` (which read and wait on the
    /// connection) and `quit`.
    pub(crate) async fn execute(&mut self, command: Command) -> Vec<u8> {
        match command {
            Command::Use(tube) => self.use_tube(tube),
            Command::Watch(tube) => self.watch(tube),
            Command::Ignore(tube) => self.ignore(&tube),
            Command::ListTubeUsed => reply::line(&format!("USING {}", self.used)),
            Command::ListTubesWatched => reply::name_list(self.watched.iter().map(String::as_str)),
            Command::Delete(id) => self.delete(id).await,
            Command::Release { id, pri: _, delay } => self.release(id, delay).await,
            Command::Bury { id, pri: _ } => self.bury(id).await,
            Command::Touch(id) => self.touch(id).await,
            Command::Peek(id) => self.peek(id).await,
            Command::PeekReady => self.peek_first(JobState::Ready).await,
            Command::PeekDelayed => self.peek_first(JobState::Delay).await,
            Command::PeekBuried => self.peek_first(JobState::Dead).await,
            Command::Kick(bound) => self.kick(bound).await,
            Command::KickJob(id) => self.kick_job(id).await,
            Command::ReserveJob(id) => self.reserve_job(id).await,
            Command::StatsJob(id) => self.stats_job(id).await,
            Command::StatsTube(tube) => self.stats_tube(&tube).await,
            Command::Stats => self.stats().await,
            Command::ListTubes => self.list_tubes().await,
            Command::PauseTube { tube, delay } => self.pause_tube(&tube, delay).await,
            Command::Put { .. } | Command::Reserve(_) | Command::Quit => reply::INTERNAL_ERROR.to_vec(),
        }
    }

    /// Stores a job in the used tube; answers `INSERTED` once it is durable.
    pub(crate) async fn put(&mut self, pri: u32, delay: Duration, ttr: Duration, body: Vec<u8>) -> Vec<u8> {
        if !self.producer {
            self.producer = true;
            self.shared.connections.producers.fetch_add(1, Ordering::Relaxed);
        }
        if self.shared.shutdown.is_cancelled() {
            return reply::DRAINING.to_vec();
        }
        // delayq keeps bodies as text.
        let Ok(body) = String::from_utf8(body) else { return reply::BAD_FORMAT.to_vec() };
        let input = PushInput {
            topic: Some(self.used.clone()),
            body: Some(body),
            delay: Some(millis(delay)),
            ttr: Some(millis(ttr_of(ttr))),
            priority: Some(i64::from(priority_of(pri))),
            max_retries: Some(MAX_RETRIES as i64),
            ..PushInput::default()
        };
        let limits = self.queue().settings().limits;
        let request = match PushRequest::validate(input, TimeUnit::Millis, &limits, Timestamp::now()) {
            Ok(request) => request,
            Err(_) => return reply::BAD_FORMAT.to_vec(),
        };
        match self.queue().push(request).await {
            Ok(pushed) => match beanstalk_id(&pushed.id) {
                Some(id) => reply::line(&format!("INSERTED {id}")),
                None => reply::INTERNAL_ERROR.to_vec(),
            },
            Err(error) => refused(error),
        }
    }

    fn use_tube(&mut self, tube: String) -> Vec<u8> {
        if Topic::parse(tube.as_str()).is_err() {
            return reply::BAD_FORMAT.to_vec();
        }
        self.shared.change_tube(&self.used, |use_| use_.using = use_.using.saturating_sub(1));
        self.shared.change_tube(&tube, |use_| use_.using += 1);
        self.used = tube;
        reply::line(&format!("USING {}", self.used))
    }

    fn watch(&mut self, tube: String) -> Vec<u8> {
        if Topic::parse(tube.as_str()).is_err() {
            return reply::BAD_FORMAT.to_vec();
        }
        if !self.watched.contains(&tube) {
            if self.watched.len() >= MAX_WATCHED_TUBES {
                return reply::OUT_OF_MEMORY.to_vec();
            }
            self.shared.change_tube(&tube, |use_| use_.watching += 1);
            self.watched.push(tube);
        }
        reply::line(&format!("WATCHING {}", self.watched.len()))
    }

    fn ignore(&mut self, tube: &str) -> Vec<u8> {
        if let Some(position) = self.watched.iter().position(|watched| watched == tube) {
            if self.watched.len() < 2 {
                return reply::NOT_IGNORED.to_vec();
            }
            self.watched.remove(position);
            self.shared.change_tube(tube, |use_| use_.watching = use_.watching.saturating_sub(1));
        }
        reply::line(&format!("WATCHING {}", self.watched.len()))
    }

    /// Deletes a job this connection holds (it is finished), or a ready,
    /// delayed or buried one; a job another connection holds is not found.
    async fn delete(&mut self, id: u64) -> Vec<u8> {
        if let Some(held) = self.held(id) {
            return match self.queue().finish(&held.id, Some(held.attempt), None).await {
                Ok(_) => {
                    self.reserved.remove(&id);
                    reply::DELETED.to_vec()
                }
                Err(error) => self.refused_held(id, error),
            };
        }
        let Some(job_id) = job_id(id) else { return reply::NOT_FOUND.to_vec() };
        let job = match self.queue().get(&job_id).await {
            Ok(details) => details.job,
            Err(error) => return refused(error),
        };
        let deleted = match job.state {
            JobState::Delay | JobState::Ready => self.queue().delete(&job_id).await.map(|_| ()),
            JobState::Dead => self.queue().delete_dead(&job_id).await,
            _ => return reply::NOT_FOUND.to_vec(),
        };
        match deleted {
            Ok(_) => reply::DELETED.to_vec(),
            Err(error) => refused(error),
        }
    }

    /// Gives a held job back, ready after `delay`; a job out of retries is buried.
    async fn release(&mut self, id: u64, delay: Duration) -> Vec<u8> {
        let Some(held) = self.held(id) else { return reply::NOT_FOUND.to_vec() };
        match self.queue().nack(&held.id, Some(held.attempt), Some(delay)).await {
            Ok(job) => {
                self.reserved.remove(&id);
                if job.state == JobState::Dead {
                    reply::BURIED.to_vec()
                } else {
                    reply::RELEASED.to_vec()
                }
            }
            Err(error) => self.refused_held(id, error),
        }
    }

    async fn bury(&mut self, id: u64) -> Vec<u8> {
        let Some(held) = self.held(id) else { return reply::NOT_FOUND.to_vec() };
        match self.queue().bury(&held.id, Some(held.attempt)).await {
            Ok(_) => {
                self.reserved.remove(&id);
                reply::BURIED.to_vec()
            }
            Err(error) => self.refused_held(id, error),
        }
    }

    async fn touch(&mut self, id: u64) -> Vec<u8> {
        let Some(held) = self.held(id) else { return reply::NOT_FOUND.to_vec() };
        match self.queue().touch(&held.id, Some(held.attempt)).await {
            Ok(job) => {
                if let Some(held) = self.reserved.get_mut(&id) {
                    held.deadline = Instant::now() + job.ttr;
                }
                reply::TOUCHED.to_vec()
            }
            Err(error) => self.refused_held(id, error),
        }
    }

    /// Returns the reservation of `id` this connection holds, if its ttr has not run out.
    fn held(&mut self, id: u64) -> Option<Held> {
        let now = Instant::now();
        self.reserved.retain(|_, held| held.deadline > now);
        self.reserved.get(&id).cloned()
    }

    /// Answers a refused operation on a held job; a reservation that is over
    /// (its ttr ran out, or the job ended) is forgotten.
    fn refused_held(&mut self, id: u64, error: QueueError) -> Vec<u8> {
        if matches!(error, QueueError::NotFound(_) | QueueError::WrongState { .. } | QueueError::StaleAttempt { .. }) {
            self.reserved.remove(&id);
        }
        refused(error)
    }

    async fn peek(&self, id: u64) -> Vec<u8> {
        let Some(job_id) = job_id(id) else { return reply::NOT_FOUND.to_vec() };
        match self.queue().get(&job_id).await {
            Ok(details) if state_name(details.job.state).is_some() => {
                reply::job("FOUND", id, details.job.body.as_bytes())
            }
            Ok(_) => reply::NOT_FOUND.to_vec(),
            Err(error) => refused(error),
        }
    }

    /// `peek-ready`, `peek-delayed`, `peek-buried`: the job of the used tube
    /// in `state` a client would meet first: the ready job `reserve` hands
    /// out next (the most urgent, then the one due first), the delayed job
    /// due first, the buried job buried first.
    async fn peek_first(&self, state: JobState) -> Vec<u8> {
        let Ok(topic) = Topic::parse(self.used.as_str()) else { return reply::NOT_FOUND.to_vec() };
        // Listings run in due order; the most urgent ready job is among the first page.
        let limit = if state == JobState::Ready { PEEK_READY_PAGE } else { 1 };
        let page = match self.queue().list(&topic, state, limit, None).await {
            Ok(page) => page,
            Err(error) => return refused(error),
        };
        // A job pushed over REST under a name of its own cannot be named here.
        let first = page.jobs.iter().filter_map(|job| Some((beanstalk_id(&job.id)?, job))).min_by_key(|(_, job)| {
            if state == JobState::Ready {
                (job.priority, job.run_at)
            } else {
                (0, job.run_at)
            }
        });
        match first {
            Some((id, job)) => reply::job("FOUND", id, job.body.as_bytes()),
            None => reply::NOT_FOUND.to_vec(),
        }
    }

    /// Kicks up to `bound` buried jobs of the used tube, or, when none is
    /// buried, up to `bound` delayed ones.
    async fn kick(&self, bound: u32) -> Vec<u8> {
        let Ok(topic) = Topic::parse(self.used.as_str()) else { return reply::line("KICKED 0") };
        let bound = bound as usize;
        let kicked = match self.kick_in_state(&topic, JobState::Dead, bound).await {
            Ok(0) => self.kick_in_state(&topic, JobState::Delay, bound).await,
            other => other,
        };
        match kicked {
            Ok(kicked) => reply::line(&format!("KICKED {kicked}")),
            Err(error) => refused(error),
        }
    }

    async fn kick_in_state(&self, topic: &Topic, state: JobState, bound: usize) -> Result<usize, QueueError> {
        let mut kicked = 0;
        let mut cursor = None;
        while kicked < bound {
            let page = self.queue().list(topic, state, KICK_PAGE.min(bound - kicked), cursor).await?;
            for job in &page.jobs {
                let outcome = match state {
                    JobState::Dead => self.queue().retry_dead(&job.id).await.map(|_| ()),
                    _ => self.queue().run_now(&job.id).await.map(|_| ()),
                };
                match outcome {
                    Ok(()) => kicked += 1,
                    // Moved meanwhile (kicked by another connection, reserved, deleted).
                    Err(QueueError::WrongState { .. } | QueueError::NotFound(_) | QueueError::Conflict(_)) => {}
                    Err(error) => return Err(error),
                }
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        Ok(kicked)
    }

    async fn kick_job(&self, id: u64) -> Vec<u8> {
        let Some(job_id) = job_id(id) else { return reply::NOT_FOUND.to_vec() };
        let state = match self.queue().get(&job_id).await {
            Ok(details) => details.job.state,
            Err(error) => return refused(error),
        };
        let kicked = match state {
            JobState::Dead => self.queue().retry_dead(&job_id).await.map(|_| ()),
            JobState::Delay => self.queue().run_now(&job_id).await.map(|_| ()),
            _ => return reply::NOT_FOUND.to_vec(),
        };
        match kicked {
            Ok(()) => reply::KICKED.to_vec(),
            Err(error) => refused(error),
        }
    }

    async fn pause_tube(&self, tube: &str, delay: Duration) -> Vec<u8> {
        let Ok(topic) = Topic::parse(tube) else { return reply::NOT_FOUND.to_vec() };
        match self.tube_exists(tube).await {
            Ok(true) => {}
            Ok(false) => return reply::NOT_FOUND.to_vec(),
            Err(error) => return refused(error),
        }
        match self.shared.pause_for(topic, delay).await {
            Ok(()) => reply::PAUSED.to_vec(),
            Err(error) => refused(error),
        }
    }

    /// Notes that this connection reserved: `stats` counts it as a worker.
    pub(crate) fn become_worker(&mut self) {
        if !self.worker {
            self.worker = true;
            self.shared.connections.workers.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Ends the connection: gives back every job it holds (ready at once, as
    /// beanstalkd does) and leaves its tubes.
    pub(crate) async fn close(mut self) {
        for (_, held) in self.reserved.drain() {
            match self.shared.queue.nack(&held.id, Some(held.attempt), Some(Duration::ZERO)).await {
                // Its ttr ran out or it ended meanwhile: nothing to give back.
                Ok(_)
                | Err(QueueError::NotFound(_) | QueueError::WrongState { .. } | QueueError::StaleAttempt { .. }) => {}
                Err(error) => {
                    warn!(job_id = %held.id, error = %error, "failed to release a job of a closed connection")
                }
            }
        }
        self.shared.change_tube(&self.used, |use_| use_.using = use_.using.saturating_sub(1));
        for tube in &self.watched {
            self.shared.change_tube(tube, |use_| use_.watching = use_.watching.saturating_sub(1));
        }
        let connections = &self.shared.connections;
        if self.producer {
            connections.producers.fetch_sub(1, Ordering::Relaxed);
        }
        if self.worker {
            connections.workers.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Answers an operation the queue refused. Backend failures are logged and
/// answered `INTERNAL_ERROR`, beanstalkd's only server-side error.
pub(crate) fn refused(error: QueueError) -> Vec<u8> {
    match error {
        QueueError::NotFound(_)
        | QueueError::WrongState { .. }
        | QueueError::StaleAttempt { .. }
        | QueueError::BizKeyNotFound { .. } => reply::NOT_FOUND.to_vec(),
        QueueError::Invalid(_) => reply::BAD_FORMAT.to_vec(),
        error => {
            warn!(error = %error, "beanstalk command failed");
            reply::INTERNAL_ERROR.to_vec()
        }
    }
}
