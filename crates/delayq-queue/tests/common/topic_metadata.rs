//! Checks that a topic's metadata in Redis (its code and live counts in each
//! shard's `{prefix:shard}:m` hash) lives only while the topic has live jobs,
//! run against standalone Redis and Redis Cluster alike.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_common::{Job, JobId, JobState, Timestamp, Topic};
use delayq_queue::{QueueError, Scheduler};
use redis::{Cmd, FromRedisValue};

use super::{connect, job, topic, unique_prefix};

/// A plain connection to the Redis (or cluster) a scheduler uses, to read its keys.
pub enum Inspector {
    Standalone(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Inspector {
    /// Connects to one URL, or to a cluster through comma-separated seeds.
    pub async fn connect(urls: &str) -> Inspector {
        let seeds: Vec<&str> = urls.split(',').map(str::trim).filter(|url| !url.is_empty()).collect();
        if let [url] = seeds.as_slice() {
            let client = redis::Client::open(*url).expect("redis url");
            Inspector::Standalone(client.get_multiplexed_async_connection().await.expect("connect"))
        } else {
            let client = redis::cluster::ClusterClient::new(seeds).expect("cluster seeds");
            Inspector::Cluster(client.get_async_connection().await.expect("connect to the cluster"))
        }
    }

    async fn query<T: FromRedisValue>(&mut self, command: &Cmd) -> T {
        let outcome = match self {
            Inspector::Standalone(connection) => command.query_async(connection).await,
            Inspector::Cluster(connection) => command.query_async(connection).await,
        };
        outcome.unwrap_or_else(|error| panic!("{command:?}: {error}"))
    }

    /// Returns every field of each shard's metadata hash.
    pub async fn metadata(&mut self, prefix: &str, shards: usize) -> Vec<HashMap<String, String>> {
        let mut all = Vec::with_capacity(shards);
        for shard in 0..shards {
            all.push(self.query(redis::cmd("HGETALL").arg(format!("{{{prefix}:{shard}}}:m"))).await);
        }
        all
    }

    /// Returns the per-topic fields of every shard (codes `#n`/`#c` and live
    /// counts `d`/`r`/`x`), leaving out the shard's own (`#last`, `@…`).
    pub async fn topic_fields(&mut self, prefix: &str, shards: usize) -> HashSet<String> {
        let mut fields = HashSet::new();
        for (shard, meta) in self.metadata(prefix, shards).await.into_iter().enumerate() {
            for field in meta.into_keys() {
                if field != "#last" && !field.starts_with('@') {
                    fields.insert(format!("{shard}/{field}"));
                }
            }
        }
        fields
    }

    /// Returns the fields of `topic` (its code, its name by code, its counts) in any shard.
    pub async fn fields_of(&mut self, prefix: &str, shards: usize, topic: &Topic) -> Vec<String> {
        let mut found = Vec::new();
        for (shard, meta) in self.metadata(prefix, shards).await.into_iter().enumerate() {
            for (field, value) in meta {
                let names_topic = field.strip_prefix('#').is_some_and(|rest| {
                    rest.strip_prefix('n') == Some(topic.as_str()) || (rest.starts_with('c') && value == topic.as_str())
                });
                let counts_topic = ["d", "r", "x"].iter().any(|letter| field == format!("{letter}{topic}"));
                if names_topic || counts_topic {
                    found.push(format!("{shard}/{field}={value}"));
                }
            }
        }
        found.sort();
        found
    }

    /// Returns the highest code any shard gave so far (`#last`).
    pub async fn last_code(&mut self, prefix: &str, shards: usize) -> u64 {
        let metas = self.metadata(prefix, shards).await;
        metas.iter().filter_map(|meta| meta.get("#last")?.parse().ok()).max().unwrap_or(0)
    }

    /// Returns how many of the ready queues `{prefix:shard}:r:<topic>` of `topics` exist.
    pub async fn ready_queues(&mut self, prefix: &str, shards: usize, topics: &[Topic]) -> u64 {
        let mut existing = 0;
        for shard in 0..shards {
            for topic in topics {
                existing +=
                    self.query::<u64>(redis::cmd("EXISTS").arg(format!("{{{prefix}:{shard}}}:r:{topic}"))).await;
            }
        }
        existing
    }
}

/// The shard of a job id, as the scheduler computes it (64-bit FNV-1a of the id).
pub fn shard_of(id: &str, shards: usize) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % shards as u64) as usize
}

/// Runs timer rounds until nothing due is left.
async fn promote_all(scheduler: &dyn Scheduler) {
    let started = Instant::now();
    loop {
        let round = scheduler.promote_due(Timestamp::now(), 1_000).await.expect("promote_due");
        if round.changed.is_empty() && !round.more {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "timer rounds never ran out");
    }
}

/// Reserves the one ready job of `topic`, waiting for it briefly.
async fn reserve_one(scheduler: &dyn Scheduler, topic: &Topic) -> Job {
    let mut reserved = scheduler.reserve(topic, 1, Duration::from_secs(2)).await.expect("reserve");
    assert_eq!(reserved.len(), 1, "one ready job of {topic}");
    reserved.remove(0)
}

fn id(text: &str) -> JobId {
    JobId::parse(text).expect("valid id")
}

/// 1,000 topics whose jobs end every way a job can (deleted, finished,
/// nacked past its retries, expired unpopped, dead after its ttr), and a
/// push refused as a conflict, leave no code, name or count behind in any
/// shard, no ready queue, and no line in `stats`; a topic with a live job
/// keeps its metadata.
pub async fn check_ended_topics_leave_no_metadata(urls: &str) {
    const TOPICS: usize = 1_000;
    let prefix = unique_prefix();
    let scheduler = connect(urls, &prefix).await;
    let shards = scheduler.shards();
    let mut inspector = Inspector::connect(urls).await;
    let kept = topic("meta.kept");
    scheduler.schedule(&job("1", &kept, Timestamp::now().plus(Duration::from_secs(600)), 4)).await.expect("schedule");
    let baseline = inspector.topic_fields(&prefix, shards).await;
    assert!(!baseline.is_empty(), "the live topic has metadata");

    let topics: Vec<Topic> = (0..TOPICS).map(|n| topic(&format!("meta.ended.{n}"))).collect();
    let now = Timestamp::now();
    let jobs: Vec<Job> = topics
        .iter()
        .enumerate()
        .map(|(n, topic)| {
            let mut job = job(&(1_000 + n).to_string(), topic, now, 4);
            match n % 5 {
                // Deleted while delayed.
                0 => job.run_at = now.plus(Duration::from_secs(600)),
                // Nacked with no retries left, or left to its 1 ms ttr: dead.
                2 => job.max_retries = 0,
                4 => (job.max_retries, job.ttr) = (0, Duration::from_millis(1)),
                // Expired unpopped: its ttl passed before any pop.
                3 => (job.run_at, job.ttl) = (Timestamp::from_millis(now.as_millis() - 10), Duration::from_millis(1)),
                _ => {}
            }
            job
        })
        .collect();
    for chunk in jobs.chunks(250) {
        for outcome in scheduler.schedule_batch(chunk).await.expect("schedule_batch") {
            outcome.expect("scheduled");
        }
    }
    let during = inspector.topic_fields(&prefix, shards).await;
    assert!(during.len() >= baseline.len() + 3 * TOPICS, "each topic has a code, a name and a count");

    for (n, job) in jobs.iter().enumerate() {
        match n % 5 {
            0 => drop(scheduler.delete(&job.id).await.expect("delete")),
            1 => {
                let reserved = reserve_one(&scheduler, &job.topic).await;
                scheduler.finish(&reserved.id, None).await.expect("finish");
            }
            2 => {
                let reserved = reserve_one(&scheduler, &job.topic).await;
                let nacked = scheduler.nack(&reserved.id, None, Duration::ZERO).await.expect("nack");
                assert_eq!(nacked.state, JobState::Dead);
            }
            4 => drop(reserve_one(&scheduler, &job.topic).await),
            _ => {}
        }
    }
    // A push refused because its id is taken gives its topic no lasting code.
    let refused = job("1", &topic("meta.refused"), Timestamp::now(), 4);
    assert!(matches!(scheduler.schedule(&refused).await, Err(QueueError::Conflict(_))));
    tokio::time::sleep(Duration::from_millis(20)).await;
    promote_all(&scheduler).await;
    for job in &jobs {
        assert_eq!(scheduler.get(&job.id).await.expect("get"), None, "{} ended", job.id);
    }

    let left = inspector.topic_fields(&prefix, shards).await;
    let extra: Vec<&String> = left.difference(&baseline).take(10).collect();
    assert!(extra.is_empty(), "ended topics left metadata behind ({} fields), e.g. {extra:?}", left.len());
    assert_eq!(left, baseline, "the live topic kept its metadata");
    let sample: Vec<Topic> = topics.iter().step_by(10).cloned().collect();
    assert_eq!(inspector.ready_queues(&prefix, shards, &sample).await, 0, "no ready queue is left");
    let stats = scheduler.stats().await.expect("stats");
    assert_eq!(stats.iter().map(|line| line.topic.as_str()).collect::<Vec<_>>(), [kept.as_str()]);
    assert_eq!(stats[0].delay, 1);
}

/// A topic whose metadata was freed works as any new topic when jobs come
/// back, on the node that still remembers its old code and on a fresh one:
/// priorities, finish, nack, ttr redelivery, and its metadata goes again
/// once its jobs end.
pub async fn check_topic_pushed_again_after_freeing(urls: &str) {
    let prefix = unique_prefix();
    let node = connect(urls, &prefix).await;
    let shards = node.shards();
    let mut inspector = Inspector::connect(urls).await;
    let queue = topic("meta.again");
    // The node learns the topic's code in the shard of each id below.
    let first: Vec<Job> = (0..20)
        .map(|n| job(&(10 + n).to_string(), &queue, Timestamp::now().plus(Duration::from_secs(600)), 4))
        .collect();
    for outcome in node.schedule_batch(&first).await.expect("schedule_batch") {
        outcome.expect("scheduled");
    }
    for job in &first {
        node.schedule(&job_with_id(job, &format!("{}00", job.id))).await.expect("schedule");
    }
    let held = inspector.fields_of(&prefix, shards, &queue).await;
    assert!(!held.is_empty(), "a live topic has metadata");
    for job in &first {
        node.delete(&job.id).await.expect("delete");
        node.delete(&id(&format!("{}00", job.id))).await.expect("delete");
    }
    assert_eq!(inspector.fields_of(&prefix, shards, &queue).await, Vec::<String>::new(), "freed with its last job");

    let fresh_node = connect(urls, &prefix).await;
    for (round, pusher) in [&node, &fresh_node].into_iter().enumerate() {
        let ids = |n: u64| (100 * (round as u64 + 1) + n).to_string();
        // Priorities: 3, 0, 2 pushed in that order come back 0, 2, 3.
        let ready: Vec<Job> = [3u8, 0, 2]
            .iter()
            .enumerate()
            .map(|(n, &priority)| {
                let mut job = job(&ids(n as u64), &queue, Timestamp::now(), 4);
                job.priority = priority;
                job
            })
            .collect();
        // Single pushes, so a node's remembered code is what it sends.
        for job in &ready {
            pusher.schedule(job).await.expect("schedule");
        }
        for job in &ready {
            let got = node.get(&job.id).await.expect("get").expect("held");
            assert_eq!((got.topic.as_str(), got.state), (queue.as_str(), JobState::Ready));
        }
        // Reserved by the node that pushed them: it knows at once which shards
        // hold them, while another node learns it from a message that may not
        // have arrived yet (and a pop takes from the shards it knows of).
        let popped = pusher.reserve(&queue, 3, Duration::ZERO).await.expect("reserve");
        assert_eq!(popped.iter().map(|job| job.priority).collect::<Vec<_>>(), [0, 2, 3]);
        assert!(popped.iter().all(|job| job.topic == queue));

        // finish, then nack and ttr redelivery of the topic's only live job,
        // which takes it out and files it again within one script call.
        fresh_node.finish(&popped[0].id, None).await.expect("finish");
        node.finish(&popped[2].id, None).await.expect("finish");
        let nacked = node.nack(&popped[1].id, None, Duration::ZERO).await.expect("nack");
        assert_eq!((nacked.state, nacked.attempt), (JobState::Ready, 2));
        let again = reserve_one(&node, &queue).await;
        assert_eq!((again.id.clone(), again.attempt), (popped[1].id.clone(), 2));
        node.finish(&again.id, None).await.expect("finish");
        let mut short = job(&ids(9), &queue, Timestamp::now(), 4);
        short.ttr = Duration::from_millis(50);
        pusher.schedule(&short).await.expect("schedule");
        let first_delivery = reserve_one(&node, &queue).await;
        assert_eq!((first_delivery.id.clone(), first_delivery.attempt), (short.id.clone(), 1));
        tokio::time::sleep(Duration::from_millis(80)).await;
        promote_all(&node).await;
        let redelivered = reserve_one(&node, &queue).await;
        assert_eq!((redelivered.id.clone(), redelivered.attempt), (short.id.clone(), 2));
        let stats = node.stats().await.expect("stats");
        let line = stats.iter().find(|line| line.topic == queue).expect("the topic is in stats");
        assert_eq!((line.delay, line.ready, line.reserved), (0, 0, 1));
        node.finish(&redelivered.id, None).await.expect("finish");
        assert_eq!(inspector.fields_of(&prefix, shards, &queue).await, Vec::<String>::new(), "freed again");
        assert!(node.stats().await.expect("stats").iter().all(|line| line.topic != queue));
    }
}

fn job_with_id(job: &Job, id_text: &str) -> Job {
    Job { id: id(id_text), ..job.clone() }
}

/// Pushes racing the delete of a topic's last job, from two nodes (one of
/// which remembers the topic's code from before it was freed): every pushed
/// job keeps its topic and is counted in `stats`, whichever way each race
/// goes; codes are freed and given anew along the way, and nothing is left
/// once every job ended.
pub async fn check_pushes_racing_the_last_delete(urls: &str) {
    const ROUNDS: usize = 100;
    const RACERS: usize = 6;
    let prefix = unique_prefix();
    let pusher = Arc::new(connect(urls, &prefix).await);
    let deleter = Arc::new(connect(urls, &prefix).await);
    let shards = pusher.shards();
    let mut inspector = Inspector::connect(urls).await;
    let queue = topic("meta.race");
    // Every id of the check in one shard, so the races happen there.
    let mut same_shard = (1_000_000u64..).map(|n| n.to_string()).filter(|id| shard_of(id, shards) == 0);
    for round in 0..ROUNDS {
        let last = job(&same_shard.next().expect("an id"), &queue, Timestamp::now().plus(Duration::from_secs(600)), 4);
        pusher.schedule(&last).await.expect("schedule the last job");
        // Ready racers: a delete that emptied the topic's delay count must not
        // free the code they carry.
        let racers: Vec<Job> =
            (0..RACERS).map(|_| job(&same_shard.next().expect("an id"), &queue, Timestamp::now(), 4)).collect();
        let delete = {
            let (deleter, id) = (Arc::clone(&deleter), last.id.clone());
            tokio::spawn(async move { deleter.delete(&id).await })
        };
        let pushes: Vec<_> = racers
            .iter()
            .enumerate()
            .map(|(n, job)| {
                // Half from the node that remembers the code, half from the other.
                let node = if n % 2 == 0 { Arc::clone(&pusher) } else { Arc::clone(&deleter) };
                let job = job.clone();
                tokio::spawn(async move { node.schedule(&job).await })
            })
            .collect();
        delete.await.expect("delete task").expect("delete");
        for push in pushes {
            push.await.expect("push task").expect("push");
        }
        for racer in &racers {
            let held = deleter.get(&racer.id).await.expect("get").expect("held");
            assert_eq!((held.topic.as_str(), held.state), (queue.as_str(), JobState::Ready), "round {round}");
        }
        let stats = pusher.stats().await.expect("stats");
        let line = stats.iter().find(|line| line.topic == queue).expect("the topic is in stats");
        assert_eq!((line.delay, line.ready, line.reserved), (0, RACERS as u64, 0), "round {round}");
        for (n, racer) in racers.iter().enumerate() {
            let node = if n % 2 == 0 { &deleter } else { &pusher };
            node.delete(&racer.id).await.expect("delete");
        }
    }
    assert_eq!(inspector.fields_of(&prefix, shards, &queue).await, Vec::<String>::new(), "nothing left");
    assert!(inspector.last_code(&prefix, shards).await > 1, "the topic's code was freed and given anew");
}
