//! The payloads of popped jobs, read from the store for a scheduler that
//! holds none ([`Scheduler::holds_payloads`]). The pops of many consumers
//! arrive together; their reads share one statement ([`crate::combine`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use delayq_common::{Job, JobId};
use delayq_store::{JobStore, StoreError};
use tracing::warn;

use super::DelayQueue;
use crate::combine::{Group, Sender};
use crate::error::{QueueError, QueueResult};

/// The longest a pop waits for the payloads of what it reserved.
const READ_DEADLINE: Duration = Duration::from_secs(10);

/// The store, as the sender of payload reads.
pub(super) struct PayloadStore {
    pub(super) store: Arc<dyn JobStore>,
}

impl PayloadStore {
    fn unavailable(&self, why: &str) -> QueueError {
        QueueError::Store(StoreError::Unavailable { backend: self.store.backend(), source: why.into() })
    }
}

impl Sender for PayloadStore {
    fn deadline(&self) -> Duration {
        READ_DEADLINE
    }

    fn timed_out(&self) -> QueueError {
        self.unavailable("no answer to a read of payloads in time")
    }

    fn stopped(&self) -> QueueError {
        self.unavailable("the task reading payloads stopped")
    }
}

/// The reads of the pops that arrive together: each asks for the stored
/// jobs of the ids it reserved and gets, for each id in its order, the job
/// the store has (`None` where it has none).
pub(super) struct Payloads;

impl Group for Payloads {
    type Sender = PayloadStore;
    type Request = Vec<JobId>;
    type Outcome = Vec<Option<Job>>;

    async fn send(sender: &PayloadStore, requests: &[Vec<JobId>]) -> QueueResult<Vec<QueueResult<Vec<Option<Job>>>>> {
        let ids: Vec<JobId> = requests.iter().flatten().cloned().collect();
        let mut stored: HashMap<JobId, Job> =
            sender.store.get_many(&ids).await?.into_iter().map(|job| (job.id.clone(), job)).collect();
        // A job is reserved by one pop only, so each id is asked for once.
        Ok(requests.iter().map(|ids| Ok(ids.iter().map(|id| stored.remove(id)).collect())).collect())
    }
}

impl DelayQueue {
    /// Returns the reserved jobs with their payloads, read from the store
    /// (for a scheduler that does not hold them), in the same order. The store
    /// has every job the scheduler holds (it is written first); one it lacks
    /// was never acknowledged to anyone, and is taken out and not delivered.
    ///
    /// Under the payload locks of the jobs, so that a replace refused because
    /// the job was reserved meanwhile has put the old payload back first.
    pub(super) async fn with_payloads(&self, reserved: Vec<Job>) -> QueueResult<Vec<Job>> {
        let ids: Vec<JobId> = reserved.iter().map(|job| job.id.clone()).collect();
        let stored = {
            let _payloads = self.payload_locks.lock_all(&ids).await;
            self.payloads.call(ids).await?
        };
        let mut whole = Vec::with_capacity(reserved.len());
        for (job, stored) in reserved.into_iter().zip(stored) {
            match stored {
                Some(row) => whole.push(row.with_live_state(&job)),
                None => {
                    warn!(job_id = %job.id, "a reserved job has no row in the store; it is not delivered");
                    self.forget_in_scheduler(&job.id).await?;
                }
            }
        }
        Ok(whole)
    }

    /// Returns a job the scheduler holds with its payload: as it is, from a
    /// scheduler that holds payloads, else with the store's.
    pub(super) async fn with_payload(&self, held: Job) -> QueueResult<Job> {
        if self.scheduler.holds_payloads() {
            return Ok(held);
        }
        match self.store.get(&held.id).await? {
            Some(stored) => Ok(stored.with_live_state(&held)),
            None => Err(QueueError::NotFound(held.id)),
        }
    }

    /// Returns what the store should hold after a write the scheduler refused:
    /// the job as the scheduler holds it now (`current`), with the payload it
    /// has, or, from a scheduler that holds none, the payload of `before`
    /// (the job as the store held it before the write).
    pub(super) fn as_scheduled(&self, before: &Job, current: Job) -> Job {
        if self.scheduler.holds_payloads() {
            current
        } else {
            before.clone().with_live_state(&current)
        }
    }
}
