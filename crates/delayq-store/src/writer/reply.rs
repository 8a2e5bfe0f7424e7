//! Answering the callers of a batch: each committed write gets its outcome,
//! and on a failure every durable caller gets the error while the journal
//! entries are handed back to be retried.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use super::task::{Outcome, Write};
use tracing::warn;

use crate::store::StoreError;

/// Sends each committed write its outcome; a caller that went away is ignored.
pub(super) fn answer(writes: Vec<Write>, outcomes: Vec<Outcome>) {
    debug_assert_eq!(writes.len(), outcomes.len());
    for (write, outcome) in writes.into_iter().zip(outcomes) {
        match (write, outcome) {
            (Write::Insert { reply: Some(reply), .. }, Outcome::Inserted(results)) => {
                let _gone = reply.send(Ok(results));
            }
            (Write::Insert { jobs, reply: None }, Outcome::Inserted(results)) => {
                for (job, result) in jobs.iter().zip(results) {
                    if let Err(refused) = result {
                        warn!(job_id = %job.id, error = %refused, "a journaled insert was refused");
                    }
                }
            }
            (Write::Replace { reply, .. }, Outcome::Replaced(result)) => {
                let _gone = reply.send(result);
            }
            (Write::DeleteAllLive { reply, .. }, Outcome::Deleted(ids)) => {
                let _gone = reply.send(Ok(ids));
            }
            (Write::Purge { reply, .. }, Outcome::Purged(purged)) => {
                let _gone = reply.send(Ok(purged));
            }
            (Write::Record { reply: Some(reply), .. } | Write::Flush { reply }, Outcome::Done) => {
                let _gone = reply.send(Ok(()));
            }
            (Write::Record { reply: None, .. } | Write::Close { .. }, _) => {}
            (write, _) => {
                debug_assert!(false, "outcome does not match its write");
                drop(write);
            }
        }
    }
}

/// Tells every durable caller the batch failed; returns the journal entries, in order.
pub(super) fn fail(writes: Vec<Write>, backend: &'static str, cause: SharedError) -> Vec<Write> {
    let unavailable = || StoreError::Unavailable { backend, source: Box::new(cause.clone()) };
    let mut retained = Vec::new();
    for write in writes {
        match write {
            Write::Insert { reply: Some(reply), .. } => {
                let _gone = reply.send(Err(unavailable()));
            }
            Write::Replace { reply, .. } | Write::Flush { reply } | Write::Record { reply: Some(reply), .. } => {
                let _gone = reply.send(Err(unavailable()));
            }
            Write::DeleteAllLive { reply, .. } => {
                let _gone = reply.send(Err(unavailable()));
            }
            Write::Purge { reply, .. } => {
                let _gone = reply.send(Err(unavailable()));
            }
            journal @ (Write::Record { reply: None, .. } | Write::Insert { reply: None, .. }) => retained.push(journal),
            Write::Close { .. } => {}
        }
    }
    retained
}

/// One database error reported to every caller of the failed batch.
#[derive(Clone, Debug)]
pub(super) struct SharedError(pub(super) Arc<dyn StdError + Send + Sync>);

impl fmt::Display for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl StdError for SharedError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}
