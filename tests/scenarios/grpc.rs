//! The scenario's gRPC face: `crates/delayq-rpc/proto/delayq.proto`.

use super::*;

#[derive(Clone)]
pub(super) struct Grpc {
    client: DelayQueueServiceClient<Channel>,
    token: String,
}

impl Grpc {
    pub(super) async fn connect(addr: &str, token: &str) -> Grpc {
        let channel = common::grpc_channel(addr).await;
        Grpc { client: DelayQueueServiceClient::new(channel), token: token.to_owned() }
    }

    async fn get_job(&self, message: pb::GetJobRequest) -> Outcome<Details> {
        let reply = self.client.clone().get_job(self.request(message)).await.map_err(failure)?.into_inner();
        let job = reply.job.expect("the job");
        let history = reply.history.into_iter().map(|entry| (state_name(entry.state), entry.attempt)).collect();
        Ok(Details {
            state: state_name(job.state),
            attempt: job.attempt,
            run_at: job.run_at,
            result: job.result,
            biz_key: job.biz_key,
            history,
        })
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if !self.token.is_empty() {
            let value = format!("Bearer {}", self.token).parse().expect("ascii metadata");
            request.metadata_mut().insert("authorization", value);
        }
        request
    }
}

fn failure(status: tonic::Status) -> Failure {
    let kind = match status.code() {
        tonic::Code::InvalidArgument => Kind::Invalid,
        tonic::Code::NotFound => Kind::NotFound,
        tonic::Code::AlreadyExists => Kind::Taken,
        tonic::Code::FailedPrecondition => Kind::WrongState,
        tonic::Code::Unauthenticated => Kind::Unauthenticated,
        tonic::Code::PermissionDenied => Kind::Forbidden,
        _ => Kind::Other,
    };
    Failure { kind, message: status.message().to_owned() }
}

/// Returns the lowercase name of a proto state (`JOB_STATE_DELAY` is `delay`).
fn state_name(state: i32) -> String {
    let state = pb::JobState::try_from(state).expect("a known state");
    state.as_str_name().trim_start_matches("JOB_STATE_").to_ascii_lowercase()
}

impl Face for Grpc {
    fn name(&self) -> &'static str {
        "grpc"
    }

    fn with_token(&self, token: &str) -> Grpc {
        Grpc { token: token.to_owned(), ..self.clone() }
    }

    async fn push(&self, job: &NewJob) -> Outcome<Pushed> {
        let message = pb::PushRequest {
            topic: job.topic.clone(),
            id: job.id.clone(),
            body: job.body.clone(),
            delay_ms: job.delay_ms,
            ttr_ms: job.ttr_ms,
            priority: job.priority,
            biz_key: job.biz_key.clone(),
            ..pb::PushRequest::default()
        };
        let reply = self.client.clone().push(self.request(message)).await.map_err(failure)?.into_inner();
        Ok(Pushed { id: reply.id, run_at: reply.run_at })
    }

    async fn pop(&self, topic: &str, count: Option<i64>, timeout_ms: Option<i64>) -> Outcome<Vec<Popped>> {
        let message = pb::PopRequest { topic: topic.to_owned(), count, timeout_ms, consumer: None, group: None };
        let reply = self.client.clone().pop(self.request(message)).await.map_err(failure)?.into_inner();
        Ok(reply
            .jobs
            .into_iter()
            .map(|job| Popped {
                id: job.id,
                body: job.body,
                attempt: job.attempt,
                priority: job.priority,
                ttr_ms: job.ttr_ms,
                run_at: job.run_at,
                biz_key: job.biz_key,
            })
            .collect())
    }

    async fn finish(&self, id: &str, result: Option<&str>) -> Outcome<()> {
        let message =
            pb::FinishRequest { id: id.to_owned(), result: result.map(str::to_owned), attempt: None, group: None };
        let reply = self.client.clone().finish(self.request(message)).await.map_err(failure)?.into_inner();
        assert_eq!(reply.id, id);
        Ok(())
    }

    async fn nack(&self, id: &str, delay_ms: Option<i64>) -> Outcome<Nacked> {
        let message = pb::NackRequest { id: id.to_owned(), delay_ms, attempt: None, group: None };
        let reply = self.client.clone().nack(self.request(message)).await.map_err(failure)?.into_inner();
        assert_eq!(reply.id, id);
        Ok(Nacked { run_at: reply.run_at, state: state_name(reply.state) })
    }

    async fn touch(&self, id: &str) -> Outcome<()> {
        let message = pb::TouchRequest { id: id.to_owned(), attempt: None, group: None };
        let reply = self.client.clone().touch(self.request(message)).await.map_err(failure)?.into_inner();
        assert_eq!(reply.id, id);
        Ok(())
    }

    async fn delete(&self, id: &str) -> Outcome<()> {
        let message = pb::DeleteRequest { id: id.to_owned(), ..pb::DeleteRequest::default() };
        let reply = self.client.clone().delete(self.request(message)).await.map_err(failure)?.into_inner();
        assert_eq!(reply.id, id);
        Ok(())
    }

    async fn delete_by_biz_key(&self, topic: &str, biz_key: &str) -> Outcome<()> {
        let message =
            pb::DeleteRequest { topic: topic.to_owned(), biz_key: biz_key.to_owned(), ..pb::DeleteRequest::default() };
        self.client.clone().delete(self.request(message)).await.map_err(failure).map(drop)
    }

    async fn get(&self, id: &str) -> Outcome<Details> {
        self.get_job(pb::GetJobRequest { id: id.to_owned(), ..pb::GetJobRequest::default() }).await
    }

    async fn get_by_biz_key(&self, topic: &str, biz_key: &str) -> Outcome<Details> {
        let message =
            pb::GetJobRequest { topic: topic.to_owned(), biz_key: biz_key.to_owned(), ..pb::GetJobRequest::default() };
        self.get_job(message).await
    }

    async fn restore(&self) -> Outcome<u64> {
        let message = pb::RestoreRequest { expire: Some(true) };
        let reply = self.client.clone().restore(self.request(message)).await.map_err(failure)?.into_inner();
        Ok(reply.restored)
    }

    async fn restore_job(&self, id: &str) -> Outcome<()> {
        let message = pb::RestoreJobRequest { id: id.to_owned() };
        let reply = self.client.clone().restore_job(self.request(message)).await.map_err(failure)?.into_inner();
        assert_eq!(reply.id, id);
        Ok(())
    }

    async fn counts(&self, topic: &str) -> Outcome<Counts> {
        let reply = self.client.clone().stats(self.request(pb::StatsRequest {})).await.map_err(failure)?.into_inner();
        let counts = reply.topics.get(topic).copied().unwrap_or_default();
        Ok(Counts {
            delay: counts.delay,
            ready: counts.ready,
            reserved: counts.reserved,
            finished: counts.finished,
            deleted: counts.deleted,
        })
    }
}
