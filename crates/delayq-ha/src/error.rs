//! Errors of the leadership layer.

/// Why a leadership operation failed.
#[derive(Debug, thiserror::Error)]
pub enum HaError {
    /// The configuration cannot work.
    #[error("invalid leadership config: {field}: {reason}")]
    Invalid {
        /// The offending field.
        field: &'static str,
        /// Why it is refused.
        reason: String,
    },
    /// There is no ZooKeeper session right now (never connected, or reconnecting).
    #[error("zookeeper is not connected")]
    NotConnected,
    /// ZooKeeper did not answer in time.
    #[error("zookeeper did not answer within {0:?}")]
    Timeout(std::time::Duration),
    /// ZooKeeper answered with an error or the connection broke.
    #[error("zookeeper is unavailable")]
    Unavailable {
        /// The client error.
        #[source]
        source: zookeeper_client::Error,
    },
}
