//! Restore on one node while another node ends jobs, on Redis and MySQL: a
//! job another node finishes between restore's read of the store and its
//! write to the scheduler is never handed to a consumer again.
//!
//! Two `DelayQueue`s share one Redis prefix and one MySQL database, as two
//! `delayq serve` processes do. Node A's scheduler is wrapped so that node B
//! pops and finishes the topic's jobs just before A's restore writes the page
//! it read (when the store still called them ready), and a consumer of node B
//! pops again right after that write.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::intercept::{Intercept, Intercepted};
use delayq_common::{Job, JobId, Snowflake, Topic};
use delayq_queue::{DelayQueue, QueueResult, QueueSettings, RestoreFence, Scheduler};
use delayq_store::{JobStore, MysqlStore};

mod common;

const JOBS: usize = 20;
const POP_WAIT: Duration = Duration::from_millis(500);

/// What node A's scheduler does around its first restore write: node B consumes.
struct ConsumedDuringRestore {
    other_node: Arc<DelayQueue>,
    topic: Topic,
    armed: AtomicBool,
    /// What node B finished before the restore write.
    finished: Mutex<Vec<JobId>>,
    /// What node B's consumer got right after it.
    popped_after: Mutex<Vec<JobId>>,
}

impl ConsumedDuringRestore {
    /// Node B pops every ready job of the topic and finishes it.
    async fn consume_on_other_node(&self) -> Vec<JobId> {
        let popped = self.other_node.pop(&self.topic, JOBS, Duration::ZERO).await.expect("pop on node b");
        for job in &popped {
            self.other_node.finish(&job.id, Some(job.attempt), None).await.expect("finish on node b");
        }
        popped.into_iter().map(|job| job.id).collect()
    }

    async fn around_restore_write<T>(&self, write: impl std::future::Future<Output = T>) -> T {
        if !self.armed.swap(false, Ordering::SeqCst) {
            return write.await;
        }
        let finished = self.consume_on_other_node().await;
        *self.finished.lock().expect("lock") = finished;
        let written = write.await;
        // A wait, so that node B's consumer hears of jobs another node made ready.
        let popped = self.other_node.pop(&self.topic, JOBS, POP_WAIT).await.expect("pop on node b");
        *self.popped_after.lock().expect("lock") = popped.into_iter().map(|job| job.id).collect();
        written
    }
}

#[async_trait]
impl Intercept for ConsumedDuringRestore {
    async fn restore(&self, inner: &dyn Scheduler, job: &Job) -> QueueResult<bool> {
        self.around_restore_write(inner.restore(job)).await
    }
    async fn restore_batch(&self, inner: &dyn Scheduler, jobs: &[Job], fence: &RestoreFence) -> QueueResult<Vec<bool>> {
        self.around_restore_write(inner.restore_batch(jobs, fence)).await
    }
}

/// The URL of the database `store` works in, on the server of `admin_url`.
fn database_url(admin_url: &str, store: &MysqlStore) -> String {
    let name = store.scratch_database().expect("a scratch store names its database");
    let base = admin_url.rsplit_once('/').map_or(admin_url, |(base, _)| base);
    format!("{base}/{name}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_finished_on_another_node_during_restore_is_not_delivered_again() {
    let (Some(redis_url), Some(mysql_url)) =
        (delayq_testkit::service("DELAYQ_TEST_REDIS_URL"), delayq_testkit::service("DELAYQ_TEST_MYSQL_URL"))
    else {
        return;
    };
    let prefix = common::unique_prefix();
    let topic = common::topic(&format!("restore.nodes.{}", prefix.replace([':', '-'], "_")));
    let store_a = MysqlStore::open_scratch(&mysql_url, "a".to_owned()).await.expect("store of node a");
    let store_b = MysqlStore::open(&database_url(&mysql_url, &store_a), "b".to_owned()).await.expect("store of node b");
    let node_b = Arc::new(DelayQueue::new(
        Arc::new(common::connect(&redis_url, &prefix).await),
        Arc::new(store_b),
        Snowflake::new(2),
        QueueSettings::default(),
    ));
    let consumed_during_restore = ConsumedDuringRestore {
        other_node: Arc::clone(&node_b),
        topic: topic.clone(),
        armed: AtomicBool::new(false),
        finished: Mutex::default(),
        popped_after: Mutex::default(),
    };
    let scheduler_a =
        Arc::new(Intercepted::new(Arc::new(common::connect(&redis_url, &prefix).await), consumed_during_restore));
    let store_a: Arc<dyn JobStore> = Arc::new(store_a);
    let node_a = DelayQueue::new(
        Arc::clone(&scheduler_a) as Arc<dyn Scheduler>,
        Arc::clone(&store_a),
        Snowflake::new(1),
        QueueSettings::default(),
    );

    for index in 0..JOBS {
        let request = common::push_request(&topic, None, format!("job {index}"), Duration::ZERO);
        node_b.push(request).await.expect("push on node b");
    }
    scheduler_a.armed.store(true, Ordering::SeqCst);
    let added = node_a.reconcile().await.expect("reconcile on node a");

    let finished = scheduler_a.finished.lock().expect("lock").clone();
    assert_eq!(finished.len(), JOBS, "node b consumed every job between the store read and the restore write");
    let popped_after = scheduler_a.popped_after.lock().expect("lock").clone();
    assert!(popped_after.is_empty(), "finished jobs delivered again: {popped_after:?}");
    assert_eq!(added, 0, "restore counts no ended job as put back");
    let late = node_b.pop(&topic, JOBS, POP_WAIT).await.expect("pop on node b");
    assert!(late.is_empty(), "finished jobs came back after the restore: {late:?}");
    for id in &finished {
        let stored = store_a.get(id).await.expect("read store").expect("the job is stored");
        assert!(stored.state.is_terminal(), "job {id} is {} in the store", stored.state);
    }
    node_b.close().await;
    node_a.close().await;
}
