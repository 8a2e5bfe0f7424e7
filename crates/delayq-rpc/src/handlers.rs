//! The unary operations: extract, call [`DelayQueue`], map the result. Each
//! mirrors its REST handler, refusals and messages included. Tokens and message
//! sizes were checked before the request was decoded (`guard`).

use std::sync::Arc;
use std::time::Duration;

use delayq_common::{ErrorKind, Group, InvalidField, JobId, Timestamp};
use delayq_queue::service::{MAX_BATCH_PUSH, MAX_POP_COUNT, MAX_POP_WAIT};
use delayq_queue::{ConsumerKey, DelayQueue, Pushed, QueueResult};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::convert::{
    self, full_job, history_entry, job_id, optional_group, optional_job_id_named, parse_push, reserved_job, topic,
};
use crate::pb::v1 as pb;
use crate::pb::v1::delay_queue_service_server::DelayQueueService;
use crate::status::{
    delivery_status, invalid, invalid_field, job_not_found, not_reserved, of_kind, queue_code_and_message, queue_status,
};
use crate::subscribe::Subscriptions;

/// The gRPC service over a [`DelayQueue`].
pub struct RpcServer {
    queue: Arc<DelayQueue>,
    subscriptions: Arc<Subscriptions>,
    /// The largest `result` of a Finish, in bytes.
    max_result_bytes: usize,
}

impl RpcServer {
    pub(crate) fn new(queue: Arc<DelayQueue>, subscriptions: Arc<Subscriptions>, max_result_bytes: usize) -> RpcServer {
        RpcServer { queue, subscriptions, max_result_bytes }
    }

    /// Resolves the job named by an id, or else by topic and business key; `id_name` is
    /// the REST name of the id (`jobId` of `/delete`, `id` of `/jobs/{id}`).
    async fn target(&self, id_name: &'static str, id: &str, topic: &str, biz_key: &str) -> Result<JobId, Status> {
        if let Some(id) = optional_job_id_named(id_name, id)? {
            return Ok(id);
        }
        if topic.is_empty() && biz_key.is_empty() {
            return Err(invalid("jobId is required (or topic and bizKey)"));
        }
        let topic = convert::topic(topic)?;
        if biz_key.is_empty() {
            return Err(invalid("bizKey is required"));
        }
        self.queue.resolve_biz_key(&topic, biz_key).await.map_err(queue_status)
    }
}

/// Returns the id under which `group`'s delivery of job `id` (the job itself
/// without a group) is held, for the Subscribe streams' accounting.
fn held_id(id: &JobId, group: Option<&Group>) -> JobId {
    group.map_or_else(|| id.clone(), |group| id.for_group(group))
}

fn group_name(group: Option<&Group>) -> Option<String> {
    group.map(ToString::to_string)
}

fn pushed_reply(pushed: Pushed) -> pb::PushReply {
    pb::PushReply { id: pushed.id.into(), run_at: i64::try_from(pushed.run_at.as_millis()).unwrap_or(i64::MAX) }
}

fn batch_item(outcome: QueueResult<Pushed>) -> pb::PushBatchItem {
    let outcome = match outcome {
        Ok(pushed) => pb::push_batch_item::Outcome::Pushed(pushed_reply(pushed)),
        Err(error) => {
            let (code, message) = queue_code_and_message(&error);
            pb::push_batch_item::Outcome::Error(pb::PushError { code: code as i32, message })
        }
    };
    pb::PushBatchItem { outcome: Some(outcome) }
}

#[tonic::async_trait]
impl DelayQueueService for RpcServer {
    async fn push(&self, request: Request<pb::PushRequest>) -> Result<Response<pb::PushReply>, Status> {
        let request = request.into_inner();
        let limits = self.queue.settings().limits;
        let push = parse_push(&request, &limits, Timestamp::now()).map_err(invalid_field)?;
        let pushed = self.queue.push(push).await.map_err(queue_status)?;
        Ok(Response::new(pushed_reply(pushed)))
    }

    async fn push_batch(&self, request: Request<pb::PushBatchRequest>) -> Result<Response<pb::PushBatchReply>, Status> {
        let request = request.into_inner();
        if request.jobs.len() > MAX_BATCH_PUSH {
            return Err(invalid(format!("jobs must have at most {MAX_BATCH_PUSH} entries")));
        }
        let limits = self.queue.settings().limits;
        let now = Timestamp::now();
        let pushes = request.jobs.iter().map(|job| parse_push(job, &limits, now)).collect();
        let outcomes = self.queue.push_batch(pushes).await.map_err(queue_status)?;
        Ok(Response::new(pb::PushBatchReply { items: outcomes.into_iter().map(batch_item).collect() }))
    }

    async fn delete(&self, request: Request<pb::DeleteRequest>) -> Result<Response<pb::DeleteReply>, Status> {
        let request = request.into_inner();
        let id = self.target("jobId", &request.id, &request.topic, &request.biz_key).await?;
        let group = optional_group(request.group.as_deref())?;
        let queue = &self.queue;
        queue
            .on_delivery(&id, group.as_ref(), |delivery| async move { queue.delete(&delivery).await })
            .await
            .map_err(|error| delivery_status(error, group.as_ref(), queue_status))?;
        self.subscriptions.released(&held_id(&id, group.as_ref()));
        Ok(Response::new(pb::DeleteReply { id: id.into(), group: group_name(group.as_ref()) }))
    }

    async fn pop(&self, request: Request<pb::PopRequest>) -> Result<Response<pb::PopReply>, Status> {
        let request = request.into_inner();
        let topic = topic(&request.topic)?;
        let count = convert::integer_in("count", request.count, 1, MAX_POP_COUNT as u64, 1)?;
        let max_wait_ms = MAX_POP_WAIT.as_millis() as u64;
        let timeout_ms = convert::integer_in("timeout", request.timeout_ms, 0, max_wait_ms, 0)?;
        let wait = Duration::from_millis(timeout_ms);
        let consumer = convert::optional_consumer(request.consumer.as_deref())?;
        let group = optional_group(request.group.as_deref())?;
        let jobs = self
            .queue
            .pop_for(consumer.as_ref(), &topic, group.as_ref(), count as usize, wait)
            .await
            .map_err(queue_status)?;
        Ok(Response::new(pb::PopReply { jobs: jobs.into_iter().map(reserved_job).collect() }))
    }

    async fn finish(&self, request: Request<pb::FinishRequest>) -> Result<Response<pb::FinishReply>, Status> {
        let request = request.into_inner();
        let id = job_id(&request.id)?;
        let group = optional_group(request.group.as_deref())?;
        let attempt = convert::optional_attempt(request.attempt)?;
        if request.result.as_ref().is_some_and(|result| result.len() > self.max_result_bytes) {
            let limit = self.max_result_bytes;
            return Err(invalid_field(InvalidField::too_large("result", format!("must be at most {limit} bytes"))));
        }
        let (queue, result) = (&self.queue, request.result);
        queue
            .on_delivery(&id, group.as_ref(), |delivery| async move { queue.finish(&delivery, attempt, result).await })
            .await
            .map_err(|error| delivery_status(error, group.as_ref(), not_reserved))?;
        self.subscriptions.released(&held_id(&id, group.as_ref()));
        Ok(Response::new(pb::FinishReply { id: id.into(), group: group_name(group.as_ref()) }))
    }

    async fn nack(&self, request: Request<pb::NackRequest>) -> Result<Response<pb::NackReply>, Status> {
        let request = request.into_inner();
        let id = job_id(&request.id)?;
        let group = optional_group(request.group.as_deref())?;
        let delay = convert::optional_millis("delay", request.delay_ms)?;
        let attempt = convert::optional_attempt(request.attempt)?;
        let queue = &self.queue;
        let job = queue
            .on_delivery(&id, group.as_ref(), |delivery| async move { queue.nack(&delivery, attempt, delay).await })
            .await
            .map_err(|error| delivery_status(error, group.as_ref(), not_reserved))?;
        self.subscriptions.released(&held_id(&id, group.as_ref()));
        let run_at = i64::try_from(job.run_at.as_millis()).unwrap_or(i64::MAX);
        let state = convert::state(job.state);
        let (id, group) = convert::shown_id(job);
        Ok(Response::new(pb::NackReply { id, run_at, state, group }))
    }

    async fn touch(&self, request: Request<pb::TouchRequest>) -> Result<Response<pb::TouchReply>, Status> {
        let request = request.into_inner();
        let id = job_id(&request.id)?;
        let group = optional_group(request.group.as_deref())?;
        let attempt = convert::optional_attempt(request.attempt)?;
        let queue = &self.queue;
        let job = queue
            .on_delivery(&id, group.as_ref(), |delivery| async move { queue.touch(&delivery, attempt).await })
            .await
            .map_err(|error| delivery_status(error, group.as_ref(), not_reserved))?;
        self.subscriptions.touched(&held_id(&id, group.as_ref()), job.ttr);
        Ok(Response::new(pb::TouchReply { id: id.into(), group: group_name(group.as_ref()) }))
    }

    async fn get_job(&self, request: Request<pb::GetJobRequest>) -> Result<Response<pb::GetJobReply>, Status> {
        let request = request.into_inner();
        let id = self.target("id", &request.id, &request.topic, &request.biz_key).await?;
        let group = optional_group(request.group.as_deref())?;
        let queue = &self.queue;
        let details = queue
            .on_delivery(&id, group.as_ref(), |delivery| async move { queue.get(&delivery).await })
            .await
            .map_err(|error| delivery_status(error, group.as_ref(), |error| job_not_found(error, &id)))?;
        let history = details.history.into_iter().map(history_entry).collect();
        let deliveries = details.deliveries.into_iter().map(convert::delivery).collect();
        Ok(Response::new(pb::GetJobReply { job: Some(full_job(details.job)), history, deliveries }))
    }

    async fn run_job(&self, request: Request<pb::JobRequest>) -> Result<Response<pb::PushReply>, Status> {
        let id = job_id(&request.into_inner().id)?;
        let pushed = self.queue.run_now(&id).await.map_err(|error| job_not_found(error, &id))?;
        Ok(Response::new(pushed_reply(pushed)))
    }

    async fn retry_job(&self, request: Request<pb::JobRequest>) -> Result<Response<pb::PushReply>, Status> {
        let id = job_id(&request.into_inner().id)?;
        let pushed = self.queue.retry_dead(&id).await.map_err(|error| job_not_found(error, &id))?;
        Ok(Response::new(pushed_reply(pushed)))
    }

    async fn pause_topic(&self, request: Request<pb::TopicRequest>) -> Result<Response<pb::TopicReply>, Status> {
        let topic = topic(&request.into_inner().topic)?;
        self.queue.pause(&topic).await.map_err(queue_status)?;
        Ok(Response::new(pb::TopicReply { topic: topic.to_string(), paused: true }))
    }

    async fn resume_topic(&self, request: Request<pb::TopicRequest>) -> Result<Response<pb::TopicReply>, Status> {
        let topic = topic(&request.into_inner().topic)?;
        self.queue.resume(&topic).await.map_err(queue_status)?;
        Ok(Response::new(pb::TopicReply { topic: topic.to_string(), paused: false }))
    }

    async fn retry_dead(&self, request: Request<pb::TopicRequest>) -> Result<Response<pb::CountReply>, Status> {
        let topic = topic(&request.into_inner().topic)?;
        let count = self.queue.retry_dead_of_topic(&topic).await.map_err(queue_status)?;
        Ok(Response::new(pb::CountReply { count }))
    }

    async fn delete_dead(&self, request: Request<pb::TopicRequest>) -> Result<Response<pb::CountReply>, Status> {
        let topic = topic(&request.into_inner().topic)?;
        let count = self.queue.delete_dead_of_topic(&topic).await.map_err(queue_status)?;
        Ok(Response::new(pb::CountReply { count }))
    }

    async fn restore(&self, request: Request<pb::RestoreRequest>) -> Result<Response<pb::RestoreReply>, Status> {
        let request = request.into_inner();
        let include_overdue = request.expire.unwrap_or(true);
        let restored = self.queue.restore(!include_overdue).await.map_err(queue_status)?;
        Ok(Response::new(pb::RestoreReply { restored }))
    }

    async fn restore_job(
        &self,
        request: Request<pb::RestoreJobRequest>,
    ) -> Result<Response<pb::RestoreJobReply>, Status> {
        let request = request.into_inner();
        let id = job_id(&request.id)?;
        let job = self.queue.restore_job(&id).await.map_err(queue_status)?;
        Ok(Response::new(pb::RestoreJobReply { id: job.id.into() }))
    }

    async fn clear_all(&self, _request: Request<pb::ClearAllRequest>) -> Result<Response<pb::ClearAllReply>, Status> {
        let cleared = self.queue.clear_all().await.map_err(queue_status)?;
        Ok(Response::new(pb::ClearAllReply { cleared }))
    }

    async fn stats(&self, _request: Request<pb::StatsRequest>) -> Result<Response<pb::StatsReply>, Status> {
        let stats = self.queue.stats().await.map_err(queue_status)?;
        let consumers = self.queue.consumers().await.map_err(queue_status)?;
        let groups = self.queue.groups().await;
        Ok(Response::new(convert::stats_reply(stats, consumers, &groups)))
    }

    async fn heartbeat(&self, request: Request<pb::HeartbeatRequest>) -> Result<Response<pb::HeartbeatReply>, Status> {
        let request = request.into_inner();
        let consumer =
            convert::optional_consumer(Some(&request.consumer))?.ok_or_else(|| invalid("consumer is required"))?;
        let key = ConsumerKey {
            consumer,
            topic: topic(&request.topic)?,
            group: convert::optional_group(request.group.as_deref())?,
        };
        self.queue.heartbeat(&key);
        let forget_after_ms =
            u64::try_from(self.queue.settings().forget_consumers_after.as_millis()).unwrap_or(u64::MAX);
        Ok(Response::new(pb::HeartbeatReply { forget_after_ms }))
    }

    async fn declare_group(
        &self,
        request: Request<pb::GroupRequest>,
    ) -> Result<Response<pb::DeclareGroupReply>, Status> {
        let (topic, group) = topic_and_group(request.into_inner())?;
        let created = self.queue.declare_group(&topic, &group).await.map_err(queue_status)?;
        Ok(Response::new(pb::DeclareGroupReply { topic: topic.into(), group: group.into(), created }))
    }

    async fn drop_group(&self, request: Request<pb::GroupRequest>) -> Result<Response<pb::DropGroupReply>, Status> {
        let (topic, group) = topic_and_group(request.into_inner())?;
        if !self.queue.drop_group(&topic, &group).await.map_err(queue_status)? {
            return Err(of_kind(ErrorKind::NotFound, format!("topic {topic} has no group {group}")));
        }
        Ok(Response::new(pb::DropGroupReply { topic: topic.into(), group: group.into() }))
    }

    async fn list_groups(&self, request: Request<pb::TopicRequest>) -> Result<Response<pb::GroupList>, Status> {
        let topic = topic(&request.into_inner().topic)?;
        Ok(Response::new(convert::group_list(&self.queue.groups_of(&topic).await)))
    }

    type SubscribeStream = ReceiverStream<Result<pb::ReservedJob, Status>>;

    async fn subscribe(
        &self,
        request: Request<pb::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let request = request.into_inner();
        let topic = topic(&request.topic)?;
        let max_in_flight =
            convert::integer_in("maxInFlight", request.max_in_flight, 1, crate::subscribe::MAX_IN_FLIGHT as u64, 1)?;
        let consumer = convert::optional_consumer(request.consumer.as_deref())?;
        let group = optional_group(request.group.as_deref())?;
        let stream =
            self.subscriptions.start(Arc::clone(&self.queue), topic, group, consumer, max_in_flight as usize)?;
        Ok(Response::new(stream))
    }
}

/// Validates the topic and group of a request, naming the one refused.
fn topic_and_group(request: pb::GroupRequest) -> Result<(delayq_common::Topic, Group), Status> {
    let topic = topic(&request.topic)?;
    let group = optional_group(Some(&request.group))?.ok_or_else(|| invalid("group is required"))?;
    Ok((topic, group))
}
