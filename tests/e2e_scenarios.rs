//! One scenario of a job's life, written once against [`Face`] and run through
//! both faces of one `delayq serve` process: REST (`API.md`) and gRPC
//! (`crates/delayq-rpc/proto/delayq.proto`). Each run asserts what it expects
//! and records a transcript of normalised outcomes (states, attempts, counts,
//! error kinds and messages); the two transcripts must be equal step by step.

mod common;

use std::fmt::Debug;
use std::time::{Duration, Instant};

use common::{now_ms, unique_name, Server};
use delayq_rpc::pb::v1 as pb;
use delayq_rpc::pb::v1::delay_queue_service_client::DelayQueueServiceClient;
use serde_json::{json, Map, Value};
use tonic::transport::Channel;

const USER_TOKEN: &str = "scenario-user-token";
const ADMIN_TOKEN: &str = "scenario-admin-token";
/// How long a poll for an eventual state may take before the test fails.
const SETTLE: Duration = Duration::from_secs(10);

/// What kind of refusal a call met, the same for both faces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Invalid,
    NotFound,
    /// The id or business key is held by a live job.
    Taken,
    /// The job is in a state that does not allow the operation.
    WrongState,
    Unauthenticated,
    Forbidden,
    Other,
}

/// A refused call: its kind and the message the client was given.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Failure {
    kind: Kind,
    message: String,
}

type Outcome<T> = Result<T, Failure>;

/// One job to push; `None` fields are left out.
#[derive(Clone, Debug, Default)]
struct NewJob {
    topic: String,
    id: Option<String>,
    body: Option<String>,
    delay_ms: Option<i64>,
    ttr_ms: Option<i64>,
    priority: Option<i64>,
    biz_key: Option<String>,
}

impl NewJob {
    fn new(topic: &str, body: &str) -> NewJob {
        NewJob { topic: topic.to_owned(), body: Some(body.to_owned()), ..NewJob::default() }
    }

    fn id(self, id: &str) -> NewJob {
        NewJob { id: Some(id.to_owned()), ..self }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Pushed {
    id: String,
    run_at: i64,
}

/// A job as a pop hands it out.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Popped {
    id: String,
    body: String,
    attempt: u32,
    priority: u32,
    ttr_ms: i64,
    run_at: i64,
    biz_key: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Nacked {
    run_at: i64,
    state: String,
}

/// A job as a lookup shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Details {
    state: String,
    attempt: u32,
    run_at: i64,
    result: Option<String>,
    biz_key: Option<String>,
    /// (state, attempt), oldest first.
    history: Vec<(String, u32)>,
}

/// Counts of one topic's jobs per state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    delay: u64,
    ready: u64,
    reserved: u64,
    finished: u64,
    deleted: u64,
}

/// The operations of the scenario, implemented once per face.
trait Face: Clone {
    fn name(&self) -> &'static str;
    /// Returns the same face sending `token` (empty: no token).
    fn with_token(&self, token: &str) -> Self;
    async fn push(&self, job: &NewJob) -> Outcome<Pushed>;
    async fn pop(&self, topic: &str, count: Option<i64>, timeout_ms: Option<i64>) -> Outcome<Vec<Popped>>;
    async fn finish(&self, id: &str, result: Option<&str>) -> Outcome<()>;
    async fn nack(&self, id: &str, delay_ms: Option<i64>) -> Outcome<Nacked>;
    async fn touch(&self, id: &str) -> Outcome<()>;
    async fn delete(&self, id: &str) -> Outcome<()>;
    async fn delete_by_biz_key(&self, topic: &str, biz_key: &str) -> Outcome<()>;
    async fn get(&self, id: &str) -> Outcome<Details>;
    async fn get_by_biz_key(&self, topic: &str, biz_key: &str) -> Outcome<Details>;
    async fn restore(&self) -> Outcome<u64>;
    async fn restore_job(&self, id: &str) -> Outcome<()>;
    async fn counts(&self, topic: &str) -> Outcome<Counts>;
}

// ---------------------------------------------------------------------------
// REST

#[derive(Clone)]
struct Rest {
    http: reqwest::Client,
    base_url: String,
    token: String,
}

impl Rest {
    fn new(base_url: &str, token: &str) -> Rest {
        Rest { http: reqwest::Client::new(), base_url: base_url.to_owned(), token: token.to_owned() }
    }

    /// Sends a request and returns `data`, or the refusal.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Value>,
    ) -> Outcome<Value> {
        let mut request = self.http.request(method, format!("{}{path}", self.base_url)).query(query);
        if !self.token.is_empty() {
            request = request.bearer_auth(&self.token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("rest request");
        let status = response.status().as_u16();
        let envelope: Value = response.json().await.expect("a JSON envelope");
        assert_eq!(envelope["success"], status == 200, "envelope agrees with status {status}: {envelope}");
        if status == 200 {
            return Ok(envelope["data"].clone());
        }
        let message = envelope["message"].as_str().expect("message").to_owned();
        let kind = match status {
            400 => Kind::Invalid,
            404 => Kind::NotFound,
            409 if is_wrong_state_message(&message) => Kind::WrongState,
            409 => Kind::Taken,
            401 => Kind::Unauthenticated,
            403 => Kind::Forbidden,
            _ => Kind::Other,
        };
        Err(Failure { kind, message })
    }
}

/// REST folds both conflicts into 409; a wrong state is worded "job {id} is {state}…".
fn is_wrong_state_message(message: &str) -> bool {
    let states = ["delay", "ready", "reserved", "finished", "deleted", "dead", "expired"];
    message.starts_with("job ") && states.iter().any(|state| message.contains(&format!(" is {state}")))
}

fn string(value: &Value) -> String {
    value.as_str().unwrap_or_else(|| panic!("a string: {value}")).to_owned()
}

fn integer(value: &Value) -> i64 {
    value.as_i64().unwrap_or_else(|| panic!("an integer: {value}"))
}

fn optional_string(value: &Value) -> Option<String> {
    value.as_str().map(str::to_owned)
}

fn rest_counts(value: &Value) -> Counts {
    let count = |state: &str| value[state].as_u64().unwrap_or(0);
    Counts {
        delay: count("delay"),
        ready: count("ready"),
        reserved: count("reserved"),
        finished: count("finished"),
        deleted: count("deleted"),
    }
}

/// Reads a job as `GET /jobs/{id}` shows it.
fn rest_details(data: &Value) -> Details {
    let history = data["history"]
        .as_array()
        .expect("history")
        .iter()
        .map(|entry| (string(&entry["state"]), integer(&entry["attempt"]) as u32))
        .collect();
    Details {
        state: string(&data["state"]),
        attempt: integer(&data["attempt"]) as u32,
        run_at: integer(&data["runAt"]),
        result: optional_string(&data["result"]),
        biz_key: optional_string(&data["bizKey"]),
        history,
    }
}

impl Face for Rest {
    fn name(&self) -> &'static str {
        "rest"
    }

    fn with_token(&self, token: &str) -> Rest {
        Rest { token: token.to_owned(), ..self.clone() }
    }

    async fn push(&self, job: &NewJob) -> Outcome<Pushed> {
        let mut fields = Map::new();
        fields.insert("topic".into(), json!(job.topic));
        let optional = [
            ("id", job.id.as_ref().map(|id| json!(id))),
            ("body", job.body.as_ref().map(|body| json!(body))),
            ("delay", job.delay_ms.map(|delay| json!(delay))),
            ("ttr", job.ttr_ms.map(|ttr| json!(ttr))),
            ("priority", job.priority.map(|priority| json!(priority))),
            ("bizKey", job.biz_key.as_ref().map(|key| json!(key))),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                fields.insert(name.into(), value);
            }
        }
        let data = self.call(reqwest::Method::POST, "/push", &[], Some(Value::Object(fields))).await?;
        Ok(Pushed { id: string(&data["id"]), run_at: integer(&data["runAt"]) })
    }

    async fn pop(&self, topic: &str, count: Option<i64>, timeout_ms: Option<i64>) -> Outcome<Vec<Popped>> {
        let mut query = vec![("topic", topic.to_owned())];
        query.extend(count.map(|count| ("count", count.to_string())));
        query.extend(timeout_ms.map(|timeout| ("timeout", timeout.to_string())));
        let data = self.call(reqwest::Method::GET, "/pop", &query, None).await?;
        let jobs = data.as_array().expect("an array of jobs");
        Ok(jobs
            .iter()
            .map(|job| Popped {
                id: string(&job["id"]),
                body: string(&job["body"]),
                attempt: integer(&job["attempt"]) as u32,
                priority: integer(&job["priority"]) as u32,
                ttr_ms: integer(&job["ttr"]),
                run_at: integer(&job["runAt"]),
                biz_key: optional_string(&job["bizKey"]),
            })
            .collect())
    }

    async fn finish(&self, id: &str, result: Option<&str>) -> Outcome<()> {
        let body = result.map(|result| json!({ "result": result }));
        let data = self.call(reqwest::Method::POST, "/finish", &[("jobId", id.to_owned())], body).await?;
        assert_eq!(data["id"], id);
        Ok(())
    }

    async fn nack(&self, id: &str, delay_ms: Option<i64>) -> Outcome<Nacked> {
        let mut query = vec![("jobId", id.to_owned())];
        query.extend(delay_ms.map(|delay| ("delay", delay.to_string())));
        let data = self.call(reqwest::Method::POST, "/nack", &query, None).await?;
        assert_eq!(data["id"], id);
        Ok(Nacked { run_at: integer(&data["runAt"]), state: string(&data["state"]) })
    }

    async fn touch(&self, id: &str) -> Outcome<()> {
        let data = self.call(reqwest::Method::POST, "/touch", &[("jobId", id.to_owned())], None).await?;
        assert_eq!(data["id"], id);
        Ok(())
    }

    async fn delete(&self, id: &str) -> Outcome<()> {
        let data = self.call(reqwest::Method::GET, "/delete", &[("jobId", id.to_owned())], None).await?;
        assert_eq!(data["id"], id);
        Ok(())
    }

    async fn delete_by_biz_key(&self, topic: &str, biz_key: &str) -> Outcome<()> {
        let query = [("topic", topic.to_owned()), ("bizKey", biz_key.to_owned())];
        self.call(reqwest::Method::POST, "/delete", &query, None).await.map(drop)
    }

    async fn get(&self, id: &str) -> Outcome<Details> {
        let path = format!("/jobs/{id}");
        let data = self.call(reqwest::Method::GET, &path, &[], None).await?;
        Ok(rest_details(&data))
    }

    async fn get_by_biz_key(&self, topic: &str, biz_key: &str) -> Outcome<Details> {
        let query = [("topic", topic.to_owned()), ("bizKey", biz_key.to_owned())];
        let data = self.call(reqwest::Method::GET, "/jobs", &query, None).await?;
        Ok(rest_details(&data))
    }

    async fn restore(&self) -> Outcome<u64> {
        let data = self.call(reqwest::Method::GET, "/reStore", &[("expire", "true".into())], None).await?;
        Ok(data["restored"].as_u64().expect("restored"))
    }

    async fn restore_job(&self, id: &str) -> Outcome<()> {
        let data = self.call(reqwest::Method::GET, "/reStoreJob", &[("jobId", id.to_owned())], None).await?;
        assert_eq!(data["id"], id);
        Ok(())
    }

    async fn counts(&self, topic: &str) -> Outcome<Counts> {
        let data = self.call(reqwest::Method::GET, "/stats", &[], None).await?;
        Ok(rest_counts(&data["topics"][topic]))
    }
}

// ---------------------------------------------------------------------------
// gRPC

#[derive(Clone)]
struct Grpc {
    client: DelayQueueServiceClient<Channel>,
    token: String,
}

impl Grpc {
    async fn connect(addr: &str, token: &str) -> Grpc {
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

// ---------------------------------------------------------------------------
// The scenario

/// The steps one face went through, with the face's own names replaced by `<tag>`
/// and generated ids by their aliases.
struct Transcript {
    face: &'static str,
    tag: String,
    aliases: Vec<(String, &'static str)>,
    lines: Vec<String>,
}

impl Transcript {
    fn new(face: &'static str, tag: &str) -> Transcript {
        Transcript { face, tag: tag.to_owned(), aliases: Vec::new(), lines: Vec::new() }
    }

    /// Writes `alias` instead of `text` from now on (for generated ids).
    fn alias(&mut self, text: &str, alias: &'static str) {
        self.aliases.push((text.to_owned(), alias));
    }

    fn normalise(&self, text: &str) -> String {
        let mut text = text.replace(&self.tag, "<tag>");
        for (original, alias) in &self.aliases {
            text = text.replace(original, alias);
        }
        text
    }

    /// Records a fact of a step.
    fn note(&mut self, step: &str, fact: impl Debug) {
        let line = self.normalise(&format!("{step}: {fact:?}"));
        self.lines.push(line);
    }

    /// Records a step that must succeed and returns its value.
    fn ok<T: Debug>(&mut self, step: &str, outcome: Outcome<T>) -> T {
        match outcome {
            Ok(value) => {
                self.lines.push(format!("{step}: ok"));
                value
            }
            Err(failure) => panic!("[{}] {step}: refused: {failure:?}", self.face),
        }
    }

    /// Records a step that must be refused with `kind` and `message` (`<tag>` stands for the tag).
    fn refused<T: Debug>(&mut self, step: &str, outcome: Outcome<T>, kind: Kind, message: &str) {
        let failure = match outcome {
            Ok(value) => panic!("[{}] {step}: accepted: {value:?}", self.face),
            Err(failure) => failure,
        };
        let seen = Failure { kind: failure.kind, message: self.normalise(&failure.message) };
        assert_eq!(seen, Failure { kind, message: message.to_owned() }, "[{}] {step}", self.face);
        self.note(step, seen);
    }
}

/// Polls `get` until `done` accepts the job (the journal is written off the request path).
async fn settled_details<F: Face>(face: &F, id: &str, done: impl Fn(&Details) -> bool) -> Details {
    let started = Instant::now();
    loop {
        let details = face.get(id).await.unwrap_or_else(|failure| panic!("[{}] get {id}: {failure:?}", face.name()));
        if done(&details) {
            return details;
        }
        assert!(started.elapsed() < SETTLE, "[{}] job {id} did not settle: {details:?}", face.name());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls the counts of `topic` until `done` accepts them.
async fn settled_counts<F: Face>(face: &F, topic: &str, done: impl Fn(&Counts) -> bool) -> Counts {
    let started = Instant::now();
    loop {
        let counts = face.counts(topic).await.unwrap_or_else(|failure| panic!("[{}] stats: {failure:?}", face.name()));
        if done(&counts) {
            return counts;
        }
        assert!(started.elapsed() < SETTLE, "[{}] counts of {topic} did not settle: {counts:?}", face.name());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn states(details: &Details) -> Vec<&str> {
    details.history.iter().map(|(state, _)| state.as_str()).collect()
}

/// Runs the whole scenario through `face`; every id and topic starts with `tag`.
async fn scenario<F: Face>(face: F, tag: &str) -> Transcript {
    let mut t = Transcript::new(face.name(), tag);
    refusals(&face, tag, &mut t).await;
    push_and_lookup(&face, tag, &mut t).await;
    pop_with_count(&face, tag, &mut t).await;
    long_poll(&face, tag, &mut t).await;
    nack_with_delay(&face, tag, &mut t).await;
    touch_extends_ttr(&face, tag, &mut t).await;
    delete_and_restore(&face, tag, &mut t).await;
    auth(&face, tag, &mut t).await;
    t
}

/// Bad input names the field; unknown ids are not found; nothing changes.
async fn refusals<F: Face>(face: &F, tag: &str, t: &mut Transcript) {
    let topic = format!("{tag}.refusals");
    let job = NewJob::new(&topic, "b");
    let cases = [
        (NewJob { topic: "bad topic".into(), ..job.clone() }, "topic may only contain A-Z a-z 0-9 . _ : -"),
        (NewJob { body: None, ..job.clone() }, "body is required"),
        (NewJob { delay_ms: Some(-1), ..job.clone() }, "delay must be >= 0"),
        (NewJob { ttr_ms: Some(99), ..job.clone() }, "ttr must be from 100 ms to 86400000 ms"),
        (NewJob { priority: Some(5), ..job.clone() }, "priority must be from 0 to 4"),
        (job.clone().id("a b"), "id may only contain A-Z a-z 0-9 . _ : -"),
    ];
    for (index, (bad, message)) in cases.into_iter().enumerate() {
        t.refused(&format!("push invalid #{index}"), face.push(&bad).await, Kind::Invalid, message);
    }
    t.refused("pop count 0", face.pop(&topic, Some(0), None).await, Kind::Invalid, "count must be from 1 to 100");
    let too_long = face.pop(&topic, None, Some(30_001)).await;
    t.refused("pop timeout too long", too_long, Kind::Invalid, "timeout must be from 0 to 30000");
    t.refused("pop without topic", face.pop("", None, None).await, Kind::Invalid, "topic is required");
    t.refused(
        "finish bad id",
        face.finish("a b", None).await,
        Kind::Invalid,
        "jobId may only contain A-Z a-z 0-9 . _ : -",
    );
    t.refused("finish without id", face.finish("", None).await, Kind::Invalid, "jobId is required");
    t.refused("get bad id", face.get("a b").await, Kind::Invalid, "id may only contain A-Z a-z 0-9 . _ : -");
    let nack = face.nack(&format!("{tag}-nope"), Some(-1)).await;
    t.refused("nack negative delay", nack, Kind::Invalid, "delay must be >= 0");

    let unknown = format!("{tag}-nope");
    let not_live = "no job <tag>-nope";
    t.refused("finish unknown", face.finish(&unknown, None).await, Kind::NotFound, not_live);
    t.refused("nack unknown", face.nack(&unknown, None).await, Kind::NotFound, not_live);
    t.refused("touch unknown", face.touch(&unknown).await, Kind::NotFound, not_live);
    t.refused("delete unknown", face.delete(&unknown).await, Kind::NotFound, not_live);
    t.refused("get unknown", face.get(&unknown).await, Kind::NotFound, "no job <tag>-nope");
    t.refused("restore unknown", face.restore_job(&unknown).await, Kind::NotFound, not_live);
    let by_key = face.delete_by_biz_key(&topic, "no-such-key").await;
    t.refused(
        "delete unknown bizKey",
        by_key,
        Kind::NotFound,
        "no live job of topic <tag>.refusals has bizKey no-such-key",
    );
    let counts = face.counts(&topic).await;
    t.note("nothing was stored", t.normalise(&format!("{counts:?}")));
    assert_eq!(counts, Ok(Counts::default()), "[{}] refusals changed nothing", face.name());
}

/// Push with and without delay, duplicates of ids and business keys, lookups and counts.
async fn push_and_lookup<F: Face>(face: &F, tag: &str, t: &mut Transcript) {
    let topic = format!("{tag}.push");
    let before = now_ms() as i64;
    let now = t.ok("push due now", face.push(&NewJob::new(&topic, "now")).await);
    let after = now_ms() as i64;
    t.note("generated id is a decimal snowflake", now.id.parse::<u64>().is_ok());
    t.note("due now", (before..=after + 5).contains(&now.run_at));

    let later_id = format!("{tag}-later");
    let later_job = NewJob { delay_ms: Some(60_000), ..NewJob::new(&topic, "later").id(&later_id) };
    let before = now_ms() as i64;
    let later = t.ok("push delayed", face.push(&later_job).await);
    t.note("delayed id", t.normalise(&later.id));
    t.note("due in a minute", (before + 60_000..=now_ms() as i64 + 60_005).contains(&later.run_at));
    let duplicate = face.push(&later_job).await;
    t.refused("push duplicate id", duplicate, Kind::Taken, "job <tag>-later already exists");

    let keyed = NewJob { biz_key: Some("order-1".into()), delay_ms: Some(60_000), ..NewJob::new(&topic, "keyed") };
    let first = t.ok("push bizKey", face.push(&keyed).await);
    t.alias(&first.id, "<keyed-id>");
    let again = face.push(&NewJob { body: Some("other".into()), ..keyed.clone() }).await;
    let taken = "bizKey order-1 of topic <tag>.push is taken by live job <keyed-id>";
    t.refused("push duplicate bizKey", again, Kind::Taken, taken);
    let keyed_details = t.ok("get bizKey job", face.get(&first.id).await);
    t.note("bizKey job", (&keyed_details.state, keyed_details.biz_key.as_deref()));
    let by_key = t.ok("get by bizKey", face.get_by_biz_key(&topic, "order-1").await);
    t.note("the same job by its bizKey", by_key == keyed_details);
    assert_eq!(by_key, keyed_details, "[{}] lookup by bizKey", face.name());
    let unknown_key = face.get_by_biz_key(&topic, "order-2").await;
    t.refused("get unknown bizKey", unknown_key, Kind::NotFound, "no live job of topic <tag>.push has bizKey order-2");
    let without_topic = face.delete_by_biz_key("", "order-1").await;
    t.refused("delete bizKey without topic", without_topic, Kind::Invalid, "topic is required");
    let nothing = face.delete("").await;
    t.refused("delete without id", nothing, Kind::Invalid, "jobId is required (or topic and bizKey)");

    let details = t.ok("get delayed", face.get(&later_id).await);
    t.note("delayed job", (&details.state, details.attempt, details.run_at == later.run_at, &details.result));
    assert_eq!(details.state, "delay");
    assert_eq!(details.run_at, later.run_at);
    let wrong = "job <tag>-later is delay, not reserved";
    t.refused("finish delayed", face.finish(&later_id, None).await, Kind::WrongState, wrong);
    t.refused("touch delayed", face.touch(&later_id).await, Kind::WrongState, wrong);
    t.refused("nack delayed", face.nack(&later_id, None).await, Kind::WrongState, wrong);

    let counts = settled_counts(face, &topic, |counts| counts.ready == 1).await;
    t.note("counts after pushes", counts);
    assert_eq!(counts, Counts { delay: 2, ready: 1, ..Counts::default() });
}

/// Pop with a count takes the most urgent jobs first; finish ends them with their history.
async fn pop_with_count<F: Face>(face: &F, tag: &str, t: &mut Transcript) {
    let topic = format!("{tag}.batch");
    for (name, priority) in [("p2", 2), ("p0", 0), ("p1", 1)] {
        let job = NewJob { priority: Some(priority), ..NewJob::new(&topic, name).id(&format!("{tag}-{name}")) };
        t.ok(&format!("push {name}"), face.push(&job).await);
    }
    settled_counts(face, &topic, |counts| counts.ready == 3).await;
    let first = t.ok("pop 2", face.pop(&topic, Some(2), Some(0)).await);
    let seen: Vec<(String, u32, u32)> =
        first.iter().map(|job| (t.normalise(&job.id), job.attempt, job.priority)).collect();
    t.note("pop 2 gives the most urgent", &seen);
    assert_eq!(seen, [("<tag>-p0".to_owned(), 1, 0), ("<tag>-p1".to_owned(), 1, 1)], "[{}]", face.name());
    assert!(first.iter().all(|job| job.ttr_ms == 30_000 && job.biz_key.is_none() && job.run_at > 0));
    let rest = t.ok("pop 5", face.pop(&topic, Some(5), Some(0)).await);
    let seen: Vec<String> = rest.iter().map(|job| t.normalise(&job.id)).collect();
    t.note("pop 5 gives what is left", &seen);
    assert_eq!(seen, ["<tag>-p2"]);
    let empty = t.ok("pop empty", face.pop(&topic, Some(5), Some(0)).await);
    t.note("nothing left", empty.len());
    assert!(empty.is_empty());

    let counts = settled_counts(face, &topic, |counts| counts.reserved == 3).await;
    t.note("counts while reserved", counts);
    let p0 = format!("{tag}-p0");
    t.ok("finish p0 with result", face.finish(&p0, Some("done")).await);
    t.ok("finish p1", face.finish(&format!("{tag}-p1"), None).await);
    t.ok("finish p2", face.finish(&format!("{tag}-p2"), None).await);
    t.refused("finish twice", face.finish(&p0, None).await, Kind::WrongState, "job <tag>-p0 is finished, not reserved");
    let details = settled_details(face, &p0, |details| states(details).last() == Some(&"finished")).await;
    t.note("finished job", (&details.state, details.attempt, &details.result, &details.history));
    assert_eq!(details.state, "finished");
    assert_eq!(details.result.as_deref(), Some("done"));
    assert_eq!(states(&details), ["ready", "reserved", "finished"], "[{}] a job due at once starts ready", face.name());
    let counts = settled_counts(face, &topic, |counts| counts.finished == 3).await;
    t.note("counts after finish", counts);
    assert_eq!(counts, Counts { finished: 3, ..Counts::default() });
    let restore = face.restore_job(&p0).await;
    t.refused("restore finished", restore, Kind::WrongState, "job <tag>-p0 is finished");
}

/// A pop with a timeout waits for the first job to fall due.
async fn long_poll<F: Face>(face: &F, tag: &str, t: &mut Transcript) {
    let topic = format!("{tag}.wait");
    let id = format!("{tag}-wait");
    t.ok("push due in 700 ms", face.push(&NewJob { delay_ms: Some(700), ..NewJob::new(&topic, "w").id(&id) }).await);
    let started = Instant::now();
    let popped = t.ok("long poll", face.pop(&topic, Some(1), Some(10_000)).await);
    let waited = started.elapsed();
    t.note("long poll got the job", popped.iter().map(|job| t.normalise(&job.id)).collect::<Vec<_>>());
    t.note(
        "long poll waited for the due time",
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(8),
    );
    assert_eq!(popped.len(), 1, "[{}]", face.name());
    assert!(waited >= Duration::from_millis(500), "[{}] popped after {waited:?}, before it was due", face.name());
    let quick = Instant::now();
    let empty = t.ok("short poll", face.pop(&topic, Some(1), Some(300)).await);
    t.note("short poll gives up", (empty.len(), quick.elapsed() >= Duration::from_millis(250)));
    t.ok("finish waited job", face.finish(&id, None).await);
}

/// A nack with a delay redelivers the job after it, with attempt + 1.
async fn nack_with_delay<F: Face>(face: &F, tag: &str, t: &mut Transcript) {
    let topic = format!("{tag}.retry");
    let id = format!("{tag}-retry");
    t.ok("push retry", face.push(&NewJob::new(&topic, "r").id(&id)).await);
    let first = t.ok("pop retry", face.pop(&topic, Some(1), Some(5_000)).await);
    t.note("first delivery", first.iter().map(|job| job.attempt).collect::<Vec<_>>());
    let before = now_ms() as i64;
    let nacked = t.ok("nack 800 ms", face.nack(&id, Some(800)).await);
    t.note("nacked", (&nacked.state, (before + 800..=now_ms() as i64 + 805).contains(&nacked.run_at)));
    assert_eq!(nacked.state, "delay");
    let details = t.ok("get nacked", face.get(&id).await);
    t.note("nacked job", (&details.state, details.run_at == nacked.run_at));
    let early = t.ok("pop before the retry", face.pop(&topic, Some(1), Some(0)).await);
    t.note("not yet due", early.len());
    assert!(early.is_empty(), "[{}] redelivered before its nack delay", face.name());
    let again = t.ok("pop the retry", face.pop(&topic, Some(1), Some(10_000)).await);
    let attempts: Vec<u32> = again.iter().map(|job| job.attempt).collect();
    t.note("second delivery", &attempts);
    assert_eq!(attempts, [2], "[{}]", face.name());
    assert!(now_ms() as i64 >= nacked.run_at);
    t.ok("finish retry", face.finish(&id, None).await);
    let details = settled_details(face, &id, |details| states(details).last() == Some(&"finished")).await;
    // Compared as a set: a promotion and the long poll it wakes journal concurrently, so
    // their order in the history is not fixed (the store orders it by arrival).
    let mut history = details.history.clone();
    history.sort();
    t.note("retried history", &history);
    let expected = [("delay", 2), ("finished", 2), ("ready", 1), ("ready", 2), ("reserved", 1), ("reserved", 2)];
    let expected: Vec<(String, u32)> = expected.iter().map(|(state, attempt)| (state.to_string(), *attempt)).collect();
    assert_eq!(history, expected, "[{}]", face.name());
    assert_eq!(details.attempt, 2);
}

/// A touch restarts the ttr clock; without one the job comes back after its ttr.
async fn touch_extends_ttr<F: Face>(face: &F, tag: &str, t: &mut Transcript) {
    let topic = format!("{tag}.touch");
    let id = format!("{tag}-touch");
    let job = NewJob { ttr_ms: Some(5_000), ..NewJob::new(&topic, "t").id(&id) };
    t.ok("push ttr 5 s", face.push(&job).await);
    let popped = t.ok("pop touch", face.pop(&topic, Some(1), Some(5_000)).await);
    t.note("popped with its ttr", popped.iter().map(|job| (job.attempt, job.ttr_ms)).collect::<Vec<_>>());
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    t.ok("touch", face.touch(&id).await);
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    // 6 s after the pop (1 s past its first ttr), 3 s after the touch: still reserved, first delivery.
    let details = t.ok("get touched", face.get(&id).await);
    t.note("still reserved", (&details.state, details.attempt));
    assert_eq!((details.state.as_str(), details.attempt), ("reserved", 1), "[{}] touch did not extend", face.name());
    let redelivered = t.ok("pop after the ttr", face.pop(&topic, Some(1), Some(10_000)).await);
    let attempts: Vec<u32> = redelivered.iter().map(|job| job.attempt).collect();
    t.note("redelivered after the ttr", &attempts);
    assert_eq!(attempts, [2], "[{}]", face.name());
    t.ok("finish touched", face.finish(&id, None).await);
}

/// Delete by id and by business key; restore puts a live job back as it was.
async fn delete_and_restore<F: Face>(face: &F, tag: &str, t: &mut Transcript) {
    let topic = format!("{tag}.delete");
    let id = format!("{tag}-gone");
    t.ok("push to delete", face.push(&NewJob { delay_ms: Some(60_000), ..NewJob::new(&topic, "g").id(&id) }).await);
    t.ok("delete", face.delete(&id).await);
    let details = settled_details(face, &id, |details| states(details).last() == Some(&"deleted")).await;
    t.note("deleted job", (&details.state, &details.history));
    assert_eq!(details.state, "deleted");
    t.refused("delete twice", face.delete(&id).await, Kind::WrongState, "job <tag>-gone is deleted");

    let reserved_id = format!("{tag}-busy");
    t.ok("push to delete while reserved", face.push(&NewJob::new(&topic, "b").id(&reserved_id)).await);
    t.ok("pop to delete", face.pop(&topic, Some(1), Some(5_000)).await);
    t.ok("delete reserved", face.delete(&reserved_id).await);
    let deleted = face.finish(&reserved_id, None).await;
    t.refused("finish deleted", deleted, Kind::WrongState, "job <tag>-busy is deleted, not reserved");

    let keyed = NewJob { biz_key: Some("k1".into()), delay_ms: Some(60_000), ..NewJob::new(&topic, "k") };
    t.ok("push keyed", face.push(&keyed).await);
    t.ok("delete by bizKey", face.delete_by_biz_key(&topic, "k1").await);
    t.ok("bizKey is free again", face.push(&keyed).await);

    let kept = format!("{tag}-kept");
    let pushed = t.ok(
        "push to restore",
        face.push(&NewJob { delay_ms: Some(60_000), ..NewJob::new(&topic, "r").id(&kept) }).await,
    );
    t.ok("restore job", face.restore_job(&kept).await);
    let details = t.ok("get restored", face.get(&kept).await);
    t.note("restored job unchanged", (&details.state, details.run_at == pushed.run_at));
    assert_eq!((details.state.as_str(), details.run_at), ("delay", pushed.run_at));
    let restored = t.ok("restore all", face.restore().await);
    t.note("restore covers the live jobs", restored >= 2);
    let counts = settled_counts(face, &topic, |counts| counts.deleted == 3).await;
    t.note("counts after deletes", counts);
    assert_eq!(counts, Counts { delay: 2, deleted: 3, ..Counts::default() });
}

/// Calls without a valid token are refused; admin calls need an admin token.
async fn auth<F: Face>(face: &F, tag: &str, t: &mut Transcript) {
    let job = NewJob::new(&format!("{tag}.auth"), "a");
    let missing = face.with_token("").push(&job).await;
    t.refused("no token", missing, Kind::Unauthenticated, "authorization is required: Bearer <token>");
    let wrong = face.with_token("wrong-token").push(&job).await;
    t.refused("wrong token", wrong, Kind::Unauthenticated, "token is not valid");
    let user = face.with_token(USER_TOKEN);
    t.ok("user token pushes", user.push(&job).await);
    t.refused("user token restores", user.restore().await, Kind::Forbidden, "admin token is required");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_and_grpc_give_the_same_outcomes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = format!("[\"{USER_TOKEN}\"]");
    let admin_tokens = format!("[\"{ADMIN_TOKEN}\"]");
    let env = [("DELAYQ_AUTH__TOKENS", tokens.as_str()), ("DELAYQ_AUTH__ADMIN_TOKENS", admin_tokens.as_str())];
    let server = Server::start(dir.path(), &env).await;
    let rest = Rest::new(&server.base_url, ADMIN_TOKEN);
    let grpc = Grpc::connect(&server.grpc_addr, ADMIN_TOKEN).await;

    let rest_tag = unique_name("rest").replace('_', "");
    let grpc_tag = unique_name("grpc").replace('_', "");
    let (rest_run, grpc_run) = tokio::join!(scenario(rest, &rest_tag), scenario(grpc, &grpc_tag));

    for (step, (rest_line, grpc_line)) in rest_run.lines.iter().zip(&grpc_run.lines).enumerate() {
        assert_eq!(rest_line, grpc_line, "step {step}: REST and gRPC differ");
    }
    assert_eq!(rest_run.lines.len(), grpc_run.lines.len(), "both faces ran every step");
    let refusals = rest_run.lines.iter().filter(|line| line.contains("Failure")).count();
    println!("{} steps ({refusals} refusals), the same outcome through REST and gRPC", rest_run.lines.len());
    assert!(server.terminate().await, "server exits cleanly");
}
