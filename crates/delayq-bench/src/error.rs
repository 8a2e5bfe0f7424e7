//! The one error type of the load generator.

/// Why a benchmark step failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BenchError {
    /// A parameter or an input is unusable.
    #[error("{0}")]
    Invalid(String),
    /// An HTTP request could not be sent or its answer not read.
    #[error("request to {url} failed")]
    Http {
        /// The request's address.
        url: String,
        /// What the connection or the HTTP exchange reported.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The server answered with an unexpected status.
    #[error("{url} answered {status}: {body}")]
    Status {
        /// The request's address.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The start of the answer's body.
        body: String,
    },
    /// An answer could not be understood.
    #[error("unexpected answer from {from}: {detail}")]
    Protocol {
        /// Who answered.
        from: String,
        /// What was wrong with it.
        detail: String,
    },
    /// A file, a socket or `/proc` failed.
    #[error("failed to {action}")]
    Io {
        /// What was being done.
        action: String,
        /// What the OS reported.
        #[source]
        source: std::io::Error,
    },
}

/// The result of a benchmark step.
pub(crate) type BenchResult<T> = Result<T, BenchError>;

impl BenchError {
    /// Wraps an I/O error with the action that failed.
    pub(crate) fn io(action: impl Into<String>, source: std::io::Error) -> BenchError {
        BenchError::Io { action: action.into(), source }
    }
}
