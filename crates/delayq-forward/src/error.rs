//! The errors of sinks.

/// Why a job was not delivered, or a sink could not be built.
///
/// The variant tells whether the broker may have the message anyway: only
/// [`SinkError::Unconfirmed`] can lead to a duplicate when the job is retried.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    /// The message was not handed to the broker (not connected, reconnecting).
    #[error("{sink} is unavailable: {reason}")]
    Unavailable {
        /// The sink type.
        sink: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// The broker or endpoint refused the message (nack, returned, non-2xx), or
    /// the sink refused it unsent: its destination breaks a protocol limit.
    #[error("{sink} refused the message: {reason}")]
    Rejected {
        /// The sink type.
        sink: &'static str,
        /// What it said.
        reason: String,
    },
    /// The message was sent but no confirmation came (connection lost, timeout):
    /// the broker may hold it, so a retry may duplicate it.
    #[error("{sink} did not confirm the message: {reason}")]
    Unconfirmed {
        /// The sink type.
        sink: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// The sink's settings are invalid.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The setting.
        field: &'static str,
        /// Why.
        reason: String,
    },
}

impl SinkError {
    /// Returns whether the broker may hold the message despite the failure.
    pub fn maybe_delivered(&self) -> bool {
        matches!(self, SinkError::Unconfirmed { .. })
    }
}
