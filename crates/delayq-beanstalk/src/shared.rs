//! What the connections share: the queue, the limits, which tubes they use,
//! watch and wait on, the timed pauses, and the counters `stats` shows. None
//! of it is job state: jobs live in the queue alone.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use delayq_common::Topic;
use delayq_queue::DelayQueue;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

use crate::server::BeanstalkConfig;

/// How the connections use one tube.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TubeUse {
    pub(crate) using: u64,
    pub(crate) watching: u64,
    pub(crate) waiting: u64,
}

/// A pause given by `pause-tube`, resumed by this node when it runs out.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pause {
    pub(crate) delay: Duration,
    pub(crate) until: Instant,
    generation: u64,
}

/// Counts of connections by kind, as `stats` shows them.
#[derive(Debug, Default)]
pub(crate) struct ConnectionCounts {
    pub(crate) current: AtomicU64,
    pub(crate) total: AtomicU64,
    pub(crate) producers: AtomicU64,
    pub(crate) workers: AtomicU64,
}

pub(crate) struct Shared {
    pub(crate) queue: Arc<DelayQueue>,
    pub(crate) config: BeanstalkConfig,
    pub(crate) shutdown: CancellationToken,
    pub(crate) started: Instant,
    pub(crate) connections: ConnectionCounts,
    tubes: Mutex<HashMap<String, TubeUse>>,
    pauses: Mutex<HashMap<String, Pause>>,
    pause_generation: AtomicU64,
    pause_tasks: TaskTracker,
    commands: Mutex<BTreeMap<&'static str, u64>>,
}

impl Shared {
    pub(crate) fn new(queue: Arc<DelayQueue>, config: BeanstalkConfig, shutdown: CancellationToken) -> Shared {
        Shared {
            queue,
            config,
            shutdown,
            started: Instant::now(),
            connections: ConnectionCounts::default(),
            tubes: Mutex::new(HashMap::new()),
            pauses: Mutex::new(HashMap::new()),
            pause_generation: AtomicU64::new(0),
            pause_tasks: TaskTracker::new(),
            commands: Mutex::new(BTreeMap::new()),
        }
    }

    /// The largest job body accepted: the queue's own limit, as on REST.
    pub(crate) fn max_job_size(&self) -> usize {
        self.queue.settings().limits.max_body_bytes
    }

    /// Applies `change` to the use of `tube`, forgetting a tube nobody uses.
    pub(crate) fn change_tube(&self, tube: &str, change: impl FnOnce(&mut TubeUse)) {
        let mut tubes = lock(&self.tubes);
        let entry = tubes.entry(tube.to_owned()).or_default();
        change(entry);
        if entry.using == 0 && entry.watching == 0 && entry.waiting == 0 {
            tubes.remove(tube);
        }
    }

    /// Returns the tubes some connection uses or watches, with their use.
    pub(crate) fn tubes_in_use(&self) -> HashMap<String, TubeUse> {
        lock(&self.tubes).clone()
    }

    /// Counts one command for `stats`.
    pub(crate) fn count_command(&self, name: &'static str) {
        *lock(&self.commands).entry(name).or_default() += 1;
    }

    /// Returns how many times `name` was run.
    pub(crate) fn command_count(&self, name: &str) -> u64 {
        lock(&self.commands).get(name).copied().unwrap_or(0)
    }

    /// Returns the pause of `tube` under way, if any.
    pub(crate) fn pause_of(&self, tube: &str) -> Option<Pause> {
        lock(&self.pauses).get(tube).copied()
    }

    /// Pauses `topic` for `delay`, then resumes it (a later pause of the same
    /// tube replaces this one). On shutdown the pause ends early: a pause a
    /// node no longer times must not outlive it.
    pub(crate) async fn pause_for(self: &Arc<Self>, topic: Topic, delay: Duration) -> delayq_queue::QueueResult<()> {
        self.queue.pause(&topic).await?;
        let generation = self.pause_generation.fetch_add(1, Ordering::Relaxed) + 1;
        let pause = Pause { delay, until: Instant::now() + delay, generation };
        lock(&self.pauses).insert(topic.as_str().to_owned(), pause);
        let shared = Arc::clone(self);
        self.pause_tasks.spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep_until(pause.until) => {}
                _ = shared.shutdown.cancelled() => {}
            }
            let current = {
                let mut pauses = lock(&shared.pauses);
                let current = pauses.get(topic.as_str()).is_some_and(|held| held.generation == generation);
                if current {
                    pauses.remove(topic.as_str());
                }
                current
            };
            if current {
                if let Err(error) = shared.queue.resume(&topic).await {
                    warn!(topic = %topic, error = %error, "failed to resume a paused tube");
                }
            }
        });
        Ok(())
    }

    /// Waits until the pauses under way are resumed (the caller cancelled the token).
    pub(crate) async fn resume_paused(&self) {
        self.pause_tasks.close();
        self.pause_tasks.wait().await;
    }
}

/// Locks a short critical section; a panic elsewhere leaves counts that are still usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
