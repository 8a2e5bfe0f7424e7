//! `reserve` and `reserve-with-timeout`: the next job of the watched tubes,
//! waiting for one as long as the client asked; `DEADLINE_SOON` when a job
//! this connection holds is within a second of its ttr, as beanstalkd.
//! `reserve-job`: one job by its id.

use std::sync::Arc;
use std::time::Duration;

use delayq_common::{Job, Topic};
use delayq_queue::service::MAX_POP_WAIT;
use delayq_queue::QueueError;
use tokio::time::Instant;
use tracing::warn;

use crate::mapping::{beanstalk_id, job_id};
use crate::reply;
use crate::session::{refused, Held, Session};
use crate::shared::Shared;

/// How close to its ttr a held job makes `reserve` answer `DEADLINE_SOON`.
const SAFETY_MARGIN: Duration = Duration::from_secs(1);
/// How often a `reserve` that watches several tubes looks at each, per tube
/// watched (the queue waits on one topic at a time), up to [`MAX_POLL`].
const POLL: Duration = Duration::from_millis(5);
/// The longest pause between two looks of a `reserve` on many tubes.
const MAX_POLL: Duration = Duration::from_millis(100);

impl Session {
    /// Reserves the next job of the watched tubes, waiting up to `timeout`
    /// (forever without one). Every round looks before it answers
    /// `DEADLINE_SOON` or `TIMED_OUT`, as beanstalkd hands out a ready job first.
    pub(crate) async fn reserve(&mut self, timeout: Option<Duration>) -> Vec<u8> {
        self.become_worker();
        let _waiting = Waiting::new(Arc::clone(&self.shared), self.watched.clone());
        let give_up = timeout.map(|timeout| Instant::now() + timeout);
        let topics: Vec<Topic> = self.watched.iter().filter_map(|tube| Topic::parse(tube.as_str()).ok()).collect();
        loop {
            let now = Instant::now();
            let mut wait = give_up.map_or(MAX_POP_WAIT, |at| at.saturating_duration_since(now)).min(MAX_POP_WAIT);
            let margin = self.soonest_margin();
            let deadline_soon = margin.is_some_and(|margin| margin <= now);
            if let Some(margin) = margin {
                wait = wait.min(margin.saturating_duration_since(now));
            }
            let looked = match topics.as_slice() {
                // One tube: the queue looks first, then waits on it, in one call.
                [only] => self.reserve_in(only, wait).await,
                _ => self.reserve_now(&topics).await,
            };
            match looked {
                Ok(Some(reply)) | Err(reply) => return reply,
                Ok(None) => {}
            }
            if deadline_soon {
                return reply::DEADLINE_SOON.to_vec();
            }
            let now = Instant::now();
            if give_up.is_some_and(|at| at <= now) {
                return reply::TIMED_OUT.to_vec();
            }
            if topics.len() != 1 {
                let tubes = u32::try_from(topics.len()).unwrap_or(u32::MAX).max(1);
                let pause = POLL.saturating_mul(tubes).min(MAX_POLL);
                tokio::time::sleep(pause.min(wait)).await;
            }
        }
    }

    /// `reserve-job`: reserves a ready, delayed or buried job by its id,
    /// whatever tube it is in; a reserved job is not found.
    pub(crate) async fn reserve_job(&mut self, id: u64) -> Vec<u8> {
        self.become_worker();
        let Some(job_id) = job_id(id) else { return reply::NOT_FOUND.to_vec() };
        match self.queue().reserve_job(&job_id).await {
            Ok(job) => {
                let deadline = Instant::now() + job.ttr;
                self.reserved.insert(id, Held { id: job.id.clone(), attempt: job.attempt, deadline });
                reply::job("RESERVED", id, job.body.as_bytes())
            }
            Err(error) => refused(error),
        }
    }

    /// Reserves a job of `topic`, waiting up to `wait` for one.
    async fn reserve_in(&mut self, topic: &Topic, wait: Duration) -> Result<Option<Vec<u8>>, Vec<u8>> {
        match self.queue().pop(topic, 1, wait).await {
            Ok(jobs) => Ok(self.hand_out(jobs).await),
            // Too many long-polls at once: this one looks without waiting, then again shortly.
            Err(QueueError::Busy { .. }) => {
                let found = self.reserve_now(std::slice::from_ref(topic)).await?;
                if found.is_none() {
                    tokio::time::sleep(POLL.min(wait)).await;
                }
                Ok(found)
            }
            Err(error) => Err(refused(error)),
        }
    }

    /// Reserves a job of the first watched tube that has one ready, without waiting.
    async fn reserve_now(&mut self, topics: &[Topic]) -> Result<Option<Vec<u8>>, Vec<u8>> {
        for topic in topics {
            let jobs = self.queue().pop(topic, 1, Duration::ZERO).await.map_err(refused)?;
            if let Some(reply) = self.hand_out(jobs).await {
                return Ok(Some(reply));
            }
        }
        Ok(None)
    }

    /// Hands out the popped job, noting its reservation. A job whose id is
    /// no beanstalk id (pushed over REST under a name of its own) cannot be
    /// named by the client: it is given back with its backoff instead.
    async fn hand_out(&mut self, jobs: Vec<Job>) -> Option<Vec<u8>> {
        let job = jobs.into_iter().next()?;
        let Some(id) = beanstalk_id(&job.id) else {
            warn!(job_id = %job.id, topic = %job.topic, "a job without a numeric id cannot be reserved over beanstalk");
            if let Err(error) = self.queue().nack(&job.id, Some(job.attempt), None).await {
                warn!(job_id = %job.id, error = %error, "failed to give back a job");
            }
            return None;
        };
        let deadline = Instant::now() + job.ttr;
        self.reserved.insert(id, Held { id: job.id.clone(), attempt: job.attempt, deadline });
        Some(reply::job("RESERVED", id, job.body.as_bytes()))
    }

    /// Returns when the held job closest to its ttr enters the safety margin;
    /// reservations whose ttr ran out are forgotten (the queue redelivers them).
    fn soonest_margin(&mut self) -> Option<Instant> {
        let now = Instant::now();
        self.reserved.retain(|_, held| held.deadline > now);
        self.reserved.values().map(|held| held.deadline.checked_sub(SAFETY_MARGIN).unwrap_or(now)).min()
    }
}

/// Counts a connection as waiting on its watched tubes while it reserves.
struct Waiting {
    shared: Arc<Shared>,
    tubes: Vec<String>,
}

impl Waiting {
    fn new(shared: Arc<Shared>, tubes: Vec<String>) -> Waiting {
        for tube in &tubes {
            shared.change_tube(tube, |use_| use_.waiting += 1);
        }
        Waiting { shared, tubes }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        for tube in &self.tubes {
            self.shared.change_tube(tube, |use_| use_.waiting = use_.waiting.saturating_sub(1));
        }
    }
}
