//! Per-id mutual exclusion for the operations that write a job to the store
//! and then to the scheduler.
//!
//! Each of push (with a caller-chosen id), finish, nack, delete and replace is
//! two writes, store first. Two of them on the same id must not interleave:
//! a `/delete` whose scheduler step lands after a re-`/push` of the same id
//! would take the new job out of the scheduler while the store keeps it live,
//! and on the embedded server nothing would ever schedule it again. Holding the
//! id's lock across both writes orders them within this process; across
//! nodes, the leader's reconciliation puts back what a race there leaves out.
//!
//! Ids hash onto a fixed set of stripes, so memory does not grow with the
//! number of ids; two ids that share a stripe merely wait for each other.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use delayq_common::JobId;
use tokio::sync::{Mutex, MutexGuard};

/// How many stripes the ids share.
const STRIPES: usize = 1024;

/// Striped locks keyed by job id.
pub(crate) struct IdLocks {
    stripes: Vec<Mutex<()>>,
    hasher: RandomState,
}

/// Holds the lock of one or several ids until dropped.
pub(crate) struct IdGuard<'a> {
    _guards: Vec<MutexGuard<'a, ()>>,
}

impl IdLocks {
    /// Creates the stripes.
    pub(crate) fn new() -> IdLocks {
        IdLocks { stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(), hasher: RandomState::new() }
    }

    /// Waits for the lock of `id`.
    pub(crate) async fn lock(&self, id: &JobId) -> IdGuard<'_> {
        self.lock_all([id]).await
    }

    /// Waits for the locks of every id, taken in stripe order so that two
    /// callers locking overlapping sets never wait for each other in a cycle.
    pub(crate) async fn lock_all<'i>(&self, ids: impl IntoIterator<Item = &'i JobId>) -> IdGuard<'_> {
        let mut stripes: Vec<usize> = ids.into_iter().map(|id| self.stripe_of(id)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards = Vec::with_capacity(stripes.len());
        for stripe in stripes {
            if let Some(lock) = self.stripes.get(stripe) {
                guards.push(lock.lock().await);
            }
        }
        IdGuard { _guards: guards }
    }

    fn stripe_of(&self, id: &JobId) -> usize {
        (self.hasher.hash_one(id.as_str()) % STRIPES as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn id(value: &str) -> JobId {
        JobId::parse(value).unwrap()
    }

    #[tokio::test]
    async fn one_id_is_held_by_one_caller_at_a_time() {
        let locks = IdLocks::new();
        let first = locks.lock(&id("a")).await;
        let waited = tokio::time::timeout(Duration::from_millis(50), locks.lock(&id("a"))).await;
        assert!(waited.is_err(), "a second lock of the same id waits");
        drop(first);
        let again = tokio::time::timeout(Duration::from_millis(50), locks.lock(&id("a"))).await;
        assert!(again.is_ok(), "the id is free once the guard is dropped");
    }

    #[tokio::test]
    async fn overlapping_sets_do_not_deadlock() {
        let locks = std::sync::Arc::new(IdLocks::new());
        let ids: Vec<JobId> = (0..200).map(|n| id(&format!("job-{n}"))).collect();
        let reversed: Vec<JobId> = ids.iter().rev().cloned().collect();
        let tasks = (0..8).map(|round| {
            let locks = std::sync::Arc::clone(&locks);
            let set = if round % 2 == 0 { ids.clone() } else { reversed.clone() };
            tokio::spawn(async move {
                for _ in 0..20 {
                    let _guard = locks.lock_all(&set).await;
                    tokio::task::yield_now().await;
                }
            })
        });
        let all = futures::future::join_all(tasks);
        tokio::time::timeout(Duration::from_secs(10), all).await.expect("no deadlock");
    }
}
