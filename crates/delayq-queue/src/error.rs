//! The errors of the delay queue and its scheduler backends.

use delayq_common::{ErrorKind, InvalidField, JobId, JobState, Topic};
use delayq_store::{BoxError, StoreError};
use tracing::{error, warn};

/// What a client is told of a failure inside delayq; the detail goes to the log.
pub const INTERNAL_MESSAGE: &str = "internal error";

/// Why a queue operation failed.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The request is invalid; nothing changed.
    #[error(transparent)]
    Invalid(#[from] InvalidField),
    /// No job with this id, live or ended.
    #[error("no job {0}")]
    NotFound(JobId),
    /// No live job of the topic has this business key.
    #[error("no live job of topic {topic} has bizKey {biz_key}")]
    BizKeyNotFound {
        /// The topic.
        topic: Topic,
        /// The business key.
        biz_key: String,
    },
    /// The job is in a state that does not allow the operation.
    #[error("{} is {state}", job_named(id))]
    WrongState {
        /// The job.
        id: JobId,
        /// Its current state.
        state: JobState,
    },
    /// A finish, nack or touch named a delivery (`attempt`) that is no longer the job's current one.
    #[error("{} is at attempt {current}, not {attempt}", job_named(id))]
    StaleAttempt {
        /// The job.
        id: JobId,
        /// The delivery the caller holds.
        attempt: u32,
        /// The job's current delivery.
        current: u32,
    },
    /// Too many callers wait at once (long-polls past `limits.max_waiters`).
    #[error("too many consumers are waiting: at most {limit} long-polls at once")]
    Busy {
        /// The configured cap.
        limit: usize,
    },
    /// The id or business key is held by a live job.
    #[error("{0}")]
    Conflict(String),
    /// The scheduler backend cannot be reached.
    #[error("{backend} is unavailable")]
    Unavailable {
        /// `memory`, `redis`.
        backend: &'static str,
        /// What the driver said.
        #[source]
        source: BoxError,
    },
    /// The durable store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl QueueError {
    /// Returns what a client may be told about this failure, the same on
    /// every face (REST, gRPC): a refusal's own message, only the name of a
    /// backend that is unavailable, and [`INTERNAL_MESSAGE`] for a failure
    /// inside delayq. What it may not be told is logged here.
    pub fn public_message(&self) -> String {
        match self.kind() {
            ErrorKind::Unavailable => {
                warn!(error = self as &dyn std::error::Error, "backend unavailable");
                // The Display of both unavailable variants is "{backend} is unavailable".
                self.to_string()
            }
            ErrorKind::Internal => {
                error!(error = self as &dyn std::error::Error, "request failed");
                INTERNAL_MESSAGE.to_owned()
            }
            _ => self.to_string(),
        }
    }

    /// The wording of a finish, nack or touch refused because the job is in
    /// `state`, not reserved.
    pub fn not_reserved_message(id: &JobId, state: JobState) -> String {
        format!("{} is {state}, not reserved", job_named(id))
    }

    /// Returns how a caller should classify this failure.
    pub fn kind(&self) -> ErrorKind {
        match self {
            QueueError::Invalid(invalid) => invalid.kind(),
            QueueError::NotFound(_) | QueueError::BizKeyNotFound { .. } => ErrorKind::NotFound,
            QueueError::WrongState { .. } | QueueError::StaleAttempt { .. } | QueueError::Conflict(_) => {
                ErrorKind::Conflict
            }
            QueueError::Unavailable { .. } | QueueError::Busy { .. } => ErrorKind::Unavailable,
            QueueError::Store(store) => store.kind(),
        }
    }

    /// Returns an unavailable error like this one (same backend, its cause as
    /// text), for each of several callers that one failed call answers.
    pub(crate) fn unavailable_copy(&self) -> QueueError {
        match self {
            QueueError::Store(StoreError::Unavailable { backend, source }) => {
                QueueError::Store(StoreError::Unavailable { backend, source: source.to_string().into() })
            }
            QueueError::Unavailable { backend, source } => {
                QueueError::Unavailable { backend, source: source.to_string().into() }
            }
            other => QueueError::Unavailable { backend: "queue", source: other.to_string().into() },
        }
    }
}

/// Names job `id` in a message as clients know it: `job X`, and a group's
/// delivery of it ([`JobId::for_group`]) `job X in group g`, never by the
/// delivery's own id.
fn job_named(id: &JobId) -> String {
    match id.group_parts() {
        Some((job, group)) => format!("job {job} in group {group}"),
        None => format!("job {id}"),
    }
}

/// The result of a queue or scheduler operation.
pub type QueueResult<T> = Result<T, QueueError>;

#[cfg(test)]
mod tests {
    use delayq_common::Group;

    use super::*;

    #[test]
    fn a_groups_delivery_is_named_by_its_job_and_group() {
        let (id, billing) = (JobId::parse("a").unwrap(), Group::parse("billing").unwrap());
        assert_eq!(job_named(&id.for_group(&billing)), "job a in group billing");
        let wrong = QueueError::WrongState { id: id.for_group(&billing), state: JobState::Dead };
        assert_eq!(wrong.public_message(), "job a in group billing is dead");
        assert_eq!(QueueError::not_reserved_message(&id, JobState::Ready), "job a is ready, not reserved");
    }
}
