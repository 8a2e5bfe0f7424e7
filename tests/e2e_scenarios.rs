//! One scenario of a job's life, written once against [`Face`] and run through
//! both faces of one `delayq serve` process: REST (`API.md`) and gRPC
//! (`crates/delayq-rpc/proto/delayq.proto`). Each run asserts what it expects
//! and records a transcript of normalised outcomes (states, attempts, counts,
//! error kinds and messages); the two transcripts must be equal step by step.

mod common;
#[path = "scenarios/grpc.rs"]
mod grpc;
#[path = "scenarios/rest.rs"]
mod rest;
#[path = "scenarios/steps.rs"]
mod steps;

use std::fmt::Debug;
use std::time::{Duration, Instant};

use common::{now_ms, unique_name, Server};
use delayq_rpc::pb::v1 as pb;
use delayq_rpc::pb::v1::delay_queue_service_client::DelayQueueServiceClient;
use serde_json::{json, Map, Value};
use tonic::transport::Channel;

use grpc::Grpc;
use rest::Rest;
use steps::scenario;

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
