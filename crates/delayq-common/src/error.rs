//! The one classification of failures, mapped to an HTTP status by the
//! controller and to a gRPC code by the rpc crate.

use std::fmt;

/// What kind of failure happened, from the caller's point of view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The request is invalid; nothing was changed.
    Invalid,
    /// A field or body is larger than allowed.
    TooLarge,
    /// No such job (or no live job where a live one is required).
    NotFound,
    /// The job exists but is in the wrong state, or its id / business key is taken.
    Conflict,
    /// No credentials, or unknown credentials.
    Unauthenticated,
    /// Valid credentials without the needed permission.
    Forbidden,
    /// A backend (scheduler, store, coordination) cannot be reached right now.
    Unavailable,
    /// A bug or an unexpected condition inside delayq.
    Internal,
}

/// A field that failed validation, and why.
///
/// The message always names the field: `"delay must be >= 0"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidField {
    /// The wire name of the field (`delay`, `topic`, ...).
    pub field: &'static str,
    /// Why it was refused, completing a sentence that starts with the field name.
    pub reason: String,
    /// Whether the failure is about size (`413`) rather than form (`400`).
    pub too_large: bool,
}

impl InvalidField {
    /// Creates a form error for `field`.
    pub fn new(field: &'static str, reason: impl Into<String>) -> InvalidField {
        InvalidField { field, reason: reason.into(), too_large: false }
    }

    /// Creates a size error for `field`.
    pub fn too_large(field: &'static str, reason: impl Into<String>) -> InvalidField {
        InvalidField { field, reason: reason.into(), too_large: true }
    }

    /// Returns the error kind this failure maps to.
    pub fn kind(&self) -> ErrorKind {
        if self.too_large {
            ErrorKind::TooLarge
        } else {
            ErrorKind::Invalid
        }
    }
}

impl fmt::Display for InvalidField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.field, self.reason)
    }
}

impl std::error::Error for InvalidField {}
