//! The code each Redis shard gave each topic, as this node last heard it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use delayq_common::Job;
use redis::Value;

use super::codec::CodecError;
use super::keys::ShardKeys;
use super::reply;

/// Topic codes one shard's cache holds at most; past that, it starts over.
const CACHED_TOPIC_CODES: usize = 4096;

/// By shard: the code the shard gave each topic, as schedule.lua last
/// told. A call whose topics all have one sends records that carry it,
/// which saves the script two copies of each record. Such a code can be
/// stale (a shard frees a topic's code with its last job); schedule.lua
/// checks each against the shard and replaces a stale one, so nothing
/// here is trusted unchecked. Nothing maps codes back to names on this
/// side: scripts reply with topic names.
pub(super) struct TopicCodes {
    by_shard: Vec<Mutex<HashMap<String, u64>>>,
}

/// The topic codes of one schedule call: each distinct topic's, and each job's.
pub(super) struct CallCodes<'a> {
    pub(super) topics: Vec<(&'a str, u64)>,
    pub(super) jobs: Vec<u64>,
}

impl TopicCodes {
    /// An empty cache for `shards` shards.
    pub(super) fn new(shards: usize) -> TopicCodes {
        TopicCodes { by_shard: (0..shards).map(|_| Mutex::new(HashMap::new())).collect() }
    }

    /// The codes of every topic of `jobs` when this node knows them all.
    pub(super) fn cached<'a>(&self, shard: &ShardKeys, jobs: &[&'a Job]) -> Option<CallCodes<'a>> {
        let known = self.codes_of(shard);
        let mut codes = CallCodes { topics: Vec::new(), jobs: Vec::with_capacity(jobs.len()) };
        for job in jobs {
            let topic = job.topic.as_str();
            let code = match codes.topics.iter().find(|(seen, _)| *seen == topic) {
                Some(&(_, code)) => code,
                None => {
                    let code = *known.get(topic)?;
                    codes.topics.push((topic, code));
                    code
                }
            };
            codes.jobs.push(code);
        }
        Some(codes)
    }

    /// Keeps the `topic, code, ...` pairs a schedule call returned.
    pub(super) fn learn(&self, shard: &ShardKeys, pairs: Vec<Value>) -> Result<(), CodecError> {
        if pairs.is_empty() {
            return Ok(());
        }
        let mut known = self.codes_of(shard);
        let mut pairs = pairs.into_iter();
        while let Some(topic) = pairs.next() {
            let topic = String::from_utf8(reply::bytes(topic)?).map_err(|_| CodecError("topic"))?;
            let code = u64::try_from(reply::int(&reply::next(&mut pairs)?)?).map_err(|_| CodecError("topic code"))?;
            if known.len() >= CACHED_TOPIC_CODES && !known.contains_key(&topic) {
                known.clear();
            }
            known.insert(topic, code);
        }
        Ok(())
    }

    #[allow(clippy::indexing_slicing, reason = "`by_shard` has one map per shard, in the order of `shards`")]
    fn codes_of(&self, shard: &ShardKeys) -> MutexGuard<'_, HashMap<String, u64>> {
        self.by_shard[shard.index].lock().unwrap_or_else(PoisonError::into_inner)
    }
}
