//! The consumers of every node on a prefix, in one hash (`<prefix>:consumers`):
//! a field per node, holding that node's consumers as it last published them.

use std::collections::HashMap;

use delayq_common::Timestamp;

use super::RedisScheduler;
use crate::consumers::{decode_views, encode_views, ConsumerView};
use crate::error::QueueResult;

impl RedisScheduler {
    /// [`crate::Scheduler::share_consumers`]: writes this node's field, reads
    /// every field, and drops the fields of nodes none of whose consumers was
    /// seen since `forget_before` (a node that stopped; one still running
    /// writes its field again on its next publication).
    pub(super) async fn share_node_consumers(
        &self,
        node: &str,
        local: &[ConsumerView],
        forget_before: Timestamp,
    ) -> QueueResult<Vec<ConsumerView>> {
        let runner = &self.runner;
        let key = format!("{}:consumers", runner.prefix);
        let mut pipeline = redis::pipe();
        if local.is_empty() {
            pipeline.cmd("HDEL").arg(&key).arg(node).ignore();
        } else {
            pipeline.cmd("HSET").arg(&key).arg(node).arg(encode_views(local)).ignore();
        }
        pipeline.cmd("HGETALL").arg(&key);
        let (fields,): (HashMap<String, String>,) = runner.connection.query_pipeline(&pipeline, runner.timeout).await?;
        let mut views = local.to_vec();
        let mut gone = Vec::new();
        for (other, text) in fields.iter().filter(|(other, _)| other.as_str() != node) {
            let before = views.len();
            views.extend(decode_views(other, text).into_iter().filter(|view| view.last_seen >= forget_before));
            if views.len() == before {
                gone.push(other.as_str());
            }
        }
        if !gone.is_empty() {
            runner.connection.query::<()>(redis::cmd("HDEL").arg(&key).arg(&gone), runner.timeout).await?;
        }
        Ok(views)
    }
}
