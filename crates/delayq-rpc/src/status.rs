//! The one place where a failure becomes a gRPC status.
//!
//! Codes follow [`ErrorKind`], with one refinement the REST face folds into
//! `409`: a job in the wrong state is `FAILED_PRECONDITION`, an id or business
//! key held by a live job is `ALREADY_EXISTS`. A body over the size limit is
//! `INVALID_ARGUMENT` rather than `RESOURCE_EXHAUSTED`: resending it cannot
//! succeed, and clients treat `RESOURCE_EXHAUSTED` as retryable. Messages are
//! those of the REST API; internal detail is logged, never returned, and a
//! group's delivery is named by its job and group, never by its own id.

use delayq_common::{ErrorKind, Group, InvalidField, JobId};
use delayq_queue::QueueError;
use tonic::{Code, Status};

/// Returns the gRPC code of a kind of failure (`Conflict` as `ALREADY_EXISTS`;
/// a wrong state is refined to `FAILED_PRECONDITION` by [`queue_status`]).
pub fn code_of(kind: ErrorKind) -> Code {
    match kind {
        ErrorKind::Invalid | ErrorKind::TooLarge => Code::InvalidArgument,
        ErrorKind::NotFound => Code::NotFound,
        ErrorKind::Conflict => Code::AlreadyExists,
        ErrorKind::Unauthenticated => Code::Unauthenticated,
        ErrorKind::Forbidden => Code::PermissionDenied,
        ErrorKind::Unavailable => Code::Unavailable,
        ErrorKind::Internal => Code::Internal,
    }
}

/// Returns the code of a queue failure.
fn queue_code(error: &QueueError) -> Code {
    match error {
        QueueError::WrongState { .. } | QueueError::StaleAttempt { .. } => Code::FailedPrecondition,
        other => code_of(other.kind()),
    }
}

/// Returns the status of a queue failure.
pub(crate) fn queue_status(error: QueueError) -> Status {
    Status::new(queue_code(&error), error.public_message())
}

/// Returns the code and message of a queue failure, for one item of a batch.
pub(crate) fn queue_code_and_message(error: &QueueError) -> (Code, String) {
    (queue_code(error), error.public_message())
}

/// Returns the status of an invalid field; the message names the field.
pub(crate) fn invalid_field(invalid: InvalidField) -> Status {
    Status::new(code_of(invalid.kind()), invalid.to_string())
}

/// Returns an `INVALID_ARGUMENT` status.
pub(crate) fn invalid(message: impl Into<String>) -> Status {
    Status::new(code_of(ErrorKind::Invalid), message)
}

/// Returns a status of `kind` with a message.
pub(crate) fn of_kind(kind: ErrorKind, message: impl Into<String>) -> Status {
    Status::new(code_of(kind), message)
}

/// Words a wrong-state refusal of finish, nack and touch as "not reserved", as REST does.
pub(crate) fn not_reserved(error: QueueError) -> Status {
    match error {
        QueueError::WrongState { id, state } => {
            Status::new(Code::FailedPrecondition, QueueError::not_reserved_message(&id, state))
        }
        other => queue_status(other),
    }
}

/// Returns the status of a failed call on `group`'s delivery of a job (the
/// job itself without a group), else `otherwise`'s. With a group, a conflict
/// can only mean that the job has no delivery to it: a precondition, like a
/// wrong state, not an id taken.
pub(crate) fn delivery_status(
    error: QueueError,
    group: Option<&Group>,
    otherwise: impl FnOnce(QueueError) -> Status,
) -> Status {
    match error {
        QueueError::Conflict(message) if group.is_some() => Status::new(Code::FailedPrecondition, message),
        other => otherwise(other),
    }
}

/// Words a missing job of a lookup without the "live" of the queue's message, as REST does.
pub(crate) fn job_not_found(error: QueueError, id: &JobId) -> Status {
    match error {
        QueueError::NotFound(_) => Status::new(Code::NotFound, QueueError::NotFound(id.clone()).to_string()),
        other => queue_status(other),
    }
}

#[cfg(test)]
mod tests {
    use delayq_common::JobState;
    use delayq_store::StoreError;

    use super::*;
    use delayq_queue::INTERNAL_MESSAGE;

    fn id(value: &str) -> JobId {
        match JobId::parse(value) {
            Ok(id) => id,
            Err(invalid) => panic!("{invalid}"),
        }
    }

    #[test]
    fn every_kind_has_a_code() {
        assert_eq!(code_of(ErrorKind::Invalid), Code::InvalidArgument);
        assert_eq!(code_of(ErrorKind::TooLarge), Code::InvalidArgument);
        assert_eq!(code_of(ErrorKind::NotFound), Code::NotFound);
        assert_eq!(code_of(ErrorKind::Conflict), Code::AlreadyExists);
        assert_eq!(code_of(ErrorKind::Unauthenticated), Code::Unauthenticated);
        assert_eq!(code_of(ErrorKind::Forbidden), Code::PermissionDenied);
        assert_eq!(code_of(ErrorKind::Unavailable), Code::Unavailable);
        assert_eq!(code_of(ErrorKind::Internal), Code::Internal);
    }

    #[test]
    fn conflicts_split_into_taken_and_wrong_state() {
        let taken = queue_status(QueueError::Store(StoreError::IdTaken(id("a"))));
        assert_eq!((taken.code(), taken.message()), (Code::AlreadyExists, "job a already exists"));
        let scheduler_taken = queue_status(QueueError::Conflict("job a already exists".into()));
        assert_eq!(scheduler_taken.code(), Code::AlreadyExists);
        let wrong = queue_status(QueueError::WrongState { id: id("a"), state: JobState::Ready });
        assert_eq!((wrong.code(), wrong.message()), (Code::FailedPrecondition, "job a is ready"));
        let reworded = not_reserved(QueueError::WrongState { id: id("a"), state: JobState::Delay });
        assert_eq!(reworded.message(), "job a is delay, not reserved");
    }

    #[test]
    fn deliveries_are_named_by_their_job_and_group() {
        let Ok(group) = delayq_common::Group::parse("g") else { panic!("valid group") };
        let delivery = id("a").for_group(&group);
        let wrong = queue_status(QueueError::WrongState { id: delivery.clone(), state: JobState::Dead });
        assert_eq!((wrong.code(), wrong.message()), (Code::FailedPrecondition, "job a in group g is dead"));
        let reworded = not_reserved(QueueError::WrongState { id: delivery.clone(), state: JobState::Finished });
        assert_eq!(reworded.message(), "job a in group g is finished, not reserved");
        let stale = queue_status(QueueError::StaleAttempt { id: delivery, attempt: 1, current: 3 });
        assert_eq!(stale.message(), "job a in group g is at attempt 3, not 1");
        let missing = || QueueError::Conflict("job a (finished) has no delivery to group g".into());
        assert_eq!(delivery_status(missing(), Some(&group), queue_status).code(), Code::FailedPrecondition);
        assert_eq!(delivery_status(missing(), None, queue_status).code(), Code::AlreadyExists);
    }

    #[test]
    fn internals_are_not_leaked() {
        let backend = QueueError::Unavailable { backend: "redis", source: "refused at 10.0.0.1:6379".into() };
        let status = queue_status(backend);
        assert_eq!((status.code(), status.message()), (Code::Unavailable, "redis is unavailable"));
        let corrupt = queue_status(QueueError::Store(StoreError::Corrupt("row 7: bad json".into())));
        assert_eq!((corrupt.code(), corrupt.message()), (Code::Internal, INTERNAL_MESSAGE));
    }

    #[test]
    fn size_errors_are_invalid_arguments_with_the_field_message() {
        let status = invalid_field(InvalidField::too_large("body", "must be at most 1 bytes"));
        assert_eq!((status.code(), status.message()), (Code::InvalidArgument, "body must be at most 1 bytes"));
        let lookup = job_not_found(QueueError::NotFound(id("x")), &id("x"));
        assert_eq!((lookup.code(), lookup.message()), (Code::NotFound, "no job x"));
    }
}
