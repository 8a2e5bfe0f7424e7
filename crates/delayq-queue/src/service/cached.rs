//! A value the service reads from the store and trusts for a while (the paused
//! topics, the consumer groups): each node reads it again at most every
//! [`FRESH_FOR`], so a change made through another node holds here within that.

use std::future::Future;

use tokio::time::Instant;

use super::*;

/// How long a node trusts a value it read from the store.
pub(super) const FRESH_FOR: Duration = Duration::from_secs(1);

/// A value as this node last read it from the store.
pub(super) struct Cached<T> {
    read: std::sync::Mutex<Option<(Arc<T>, Instant)>>,
    /// Held by the one caller reading the value again.
    reading: Mutex<()>,
}

impl<T> Default for Cached<T> {
    fn default() -> Cached<T> {
        Cached { read: std::sync::Mutex::new(None), reading: Mutex::new(()) }
    }
}

impl<T: Default + Send + Sync> Cached<T> {
    fn fresh(&self) -> Option<Arc<T>> {
        let read = self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        read.as_ref().filter(|(_, at)| at.elapsed() < FRESH_FOR).map(|(value, _)| Arc::clone(value))
    }

    fn last(&self) -> Arc<T> {
        let read = self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        read.as_ref().map(|(value, _)| Arc::clone(value)).unwrap_or_default()
    }

    /// Takes `value` as read now; returns it.
    pub(super) fn remember(&self, value: T) -> Arc<T> {
        let value = Arc::new(value);
        let mut read = self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *read = Some((Arc::clone(&value), Instant::now()));
        value
    }

    /// Returns the value read at most [`FRESH_FOR`] ago, reading it with
    /// `reread` (which remembers it) when it is older. While the store cannot
    /// be read, the value last read (the default, if it never was) stands, so
    /// that pops keep being served from the scheduler.
    pub(super) async fn get<F, Fut>(&self, what: &'static str, reread: F) -> Arc<T>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = QueueResult<Arc<T>>>,
    {
        if let Some(value) = self.fresh() {
            return value;
        }
        let _reading = self.reading.lock().await;
        if let Some(value) = self.fresh() {
            return value;
        }
        match reread().await {
            Ok(value) => value,
            Err(error) => {
                warn!(error = &error as &dyn std::error::Error, "could not read the {what}");
                let last = self.last();
                let mut read = self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                *read = Some((Arc::clone(&last), Instant::now()));
                last
            }
        }
    }
}
