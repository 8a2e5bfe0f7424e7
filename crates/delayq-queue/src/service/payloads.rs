//! The payloads of popped jobs, read from the store for a scheduler that
//! holds none ([`Scheduler::holds_payloads`]). The pops of many consumers
//! arrive together; their reads share one statement ([`crate::combine`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use delayq_common::{Job, JobId};
use delayq_store::{JobStore, StoreError};

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
