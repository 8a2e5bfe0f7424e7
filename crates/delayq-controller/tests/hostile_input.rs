//! Property test of the request parsers: whatever JSON value is sent as a
//! body and whatever query string, push, batch push, pop and finish (and
//! their Youzan aliases) answer 200 or a 4xx whose message names a field —
//! never a panic, never a 5xx.

#![allow(clippy::unwrap_used)]

mod common;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use common::{assert_envelope, TestApp};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Number, Value};

/// The job fields a refusal may name.
const JOB_FIELDS: [&str; 14] = [
    "topic",
    "id",
    "body",
    "delay",
    "runAt",
    "createTime",
    "ttr",
    "priority",
    "maxRetries",
    "retryBackoff",
    "ttl",
    "subtopic",
    "bizKey",
    "replace",
];

/// The other fields, parameters and parts of a request a refusal may name.
const OTHER_NAMED: [&str; 12] = [
    "jobId",
    "JobId",
    "jobs",
    "job",
    "result",
    "count",
    "timeout",
    "request body",
    "query string",
    "path",
    "state",
    "attempt",
];

/// Whether a refusal's message names a field, parameter or part of the request.
fn names_a_field(message: &str) -> bool {
    JOB_FIELDS.iter().chain(&OTHER_NAMED).any(|name| message.contains(name))
}

/// A key of a generated object, so that generated objects often look like
/// jobs: a job field, or `status`, which a push may carry but which is
/// ignored, so no refusal names it.
fn job_field() -> impl Strategy<Value = &'static str> {
    prop::sample::select(JOB_FIELDS.iter().copied().chain(["status"]).collect::<Vec<_>>())
}

/// The query parameters the routes read.
const PARAMS: [&str; 9] = ["topic", "count", "timeout", "jobId", "JobId", "id", "delay", "bizKey", "attempt"];

/// Values at and past the edges of every integer field.
const EDGE_INTEGERS: [i128; 14] = [
    0,
    1,
    -1,
    99,
    100,
    30_000,
    30_001,
    86_400_000,
    86_400_001,
    i64::MAX as i128,
    i64::MIN as i128,
    u64::MAX as i128,
    u32::MAX as i128 + 1,
    63_072_000_001,
];

/// Strings that are valid names, almost valid, or hostile.
const EDGE_STRINGS: [&str; 14] = [
    "",
    "t",
    "b",
    "order.created",
    "a b",
    "a/b",
    "x\u{0}y",
    "\u{1F600}",
    "%zz",
    "..",
    "null",
    "1e3",
    "-",
    "\u{202E}rtl",
];

/// Query values that are integers, near-integers or percent garbage.
const EDGE_QUERY_VALUES: [&str; 18] = [
    "",
    "0",
    "1",
    "-1",
    "100",
    "101",
    "30001",
    "99999999999999999999999",
    "1e3",
    "1.5",
    "0x10",
    "t",
    "a%20b",
    "%",
    "%zz",
    "%ff%fe",
    "%00",
    "+",
];

fn string_value() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(EDGE_STRINGS.to_vec()).prop_map(str::to_owned),
        2 => prop::collection::vec(any::<char>(), 0..16).prop_map(String::from_iter),
        1 => (1usize..300).prop_map(|length| "x".repeat(length)),
    ]
}

fn number_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(EDGE_INTEGERS.to_vec())
            .prop_map(|integer| { serde_json::from_str::<Value>(&integer.to_string()).unwrap_or(Value::Null) }),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|float| Number::from_f64(float).map_or(Value::Null, Value::Number)),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number_value(),
        string_value().prop_map(Value::String),
    ]
}

/// Any JSON value, with objects keyed mostly by job fields.
fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 8, |inner| {
        let key = prop_oneof![
            3 => job_field().prop_map(str::to_owned),
            1 => string_value(),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((key, inner), 0..10).prop_map(|pairs| Value::Object(Map::from_iter(pairs))),
        ]
    })
}

/// An object that is often a valid job and often wrong in one field.
fn job_like() -> impl Strategy<Value = Value> {
    let field = job_field();
    (prop::collection::vec((field, leaf()), 0..6), any::<bool>()).prop_map(|(fields, base)| {
        let mut job = Map::new();
        if base {
            job.insert("topic".to_owned(), Value::from("prop"));
            job.insert("body".to_owned(), Value::from("b"));
        }
        for (name, value) in fields {
            job.insert(name.to_owned(), value);
        }
        Value::Object(job)
    })
}

fn body_value() -> impl Strategy<Value = Value> {
    prop_oneof![json_value(), job_like()]
}

fn batch_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => json_value(),
        3 => prop::collection::vec(prop_oneof![job_like(), json_value()], 0..20)
            .prop_map(|jobs| serde_json::json!({ "jobs": jobs })),
    ]
}

/// A query string of known and unknown parameters, repeated keys and garbage.
fn query() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        4 => prop::sample::select(PARAMS.to_vec()).prop_map(str::to_owned),
        1 => prop::sample::select(EDGE_QUERY_VALUES.to_vec()).prop_map(str::to_owned),
    ];
    let value = prop_oneof![
        4 => prop::sample::select(EDGE_QUERY_VALUES.to_vec()).prop_map(str::to_owned),
        1 => prop::collection::vec(prop::sample::select(b"abz019%&=+-._~:;,!$'()*".to_vec()), 0..12)
            .prop_map(|bytes| String::from_utf8(bytes).unwrap_or_default()),
    ];
    prop::collection::vec((name, value, any::<bool>()), 0..6).prop_map(|pairs| {
        let parts: Vec<String> = pairs
            .into_iter()
            .map(|(name, value, with_equals)| if with_equals { format!("{name}={value}") } else { name })
            .collect();
        parts.join("&")
    })
}

/// One request to one of the parsers under test.
#[derive(Clone, Debug)]
enum Case {
    Push(Value),
    Batch(Value),
    Pop(String),
    Finish(String, Option<Value>),
    YouzanPush(String, Value),
    YouzanPop(String, String),
    RawBody(&'static str, Vec<u8>),
}

impl Case {
    fn route(&self) -> &'static str {
        match self {
            Case::Push(_) => "push",
            Case::Batch(_) => "batch",
            Case::Pop(_) => "pop",
            Case::Finish(..) => "finish",
            Case::YouzanPush(..) => "youzan push",
            Case::YouzanPop(..) => "youzan pop",
            Case::RawBody(..) => "raw body",
        }
    }
}

fn case() -> impl Strategy<Value = Case> {
    let topic_segment = prop::sample::select(vec!["prop", "a%20b", "%zz", "x.y", "-", "%F0%9F%98%80"]);
    prop_oneof![
        3 => body_value().prop_map(Case::Push),
        3 => batch_value().prop_map(Case::Batch),
        2 => query().prop_map(|query| Case::Pop(format!("topic=prop&{query}"))),
        1 => query().prop_map(Case::Pop),
        2 => (query(), prop::option::of(body_value())).prop_map(|(query, body)| Case::Finish(query, body)),
        1 => (topic_segment.clone(), body_value()).prop_map(|(topic, body)| Case::YouzanPush(topic.to_owned(), body)),
        1 => (topic_segment, query()).prop_map(|(topic, query)| Case::YouzanPop(topic.to_owned(), query)),
        1 => (
            prop::sample::select(vec!["/push", "/push/batch", "/finish?jobId=x", "/topic/prop/job"]),
            prop::collection::vec(any::<u8>(), 0..64),
        )
            .prop_map(|(path, bytes)| Case::RawBody(path, bytes)),
    ]
}

/// Turns a case into a request; `None` when its query is not a valid URI at all.
fn request(case: &Case) -> Option<Request<Body>> {
    let json = |value: &Value| Some(value.to_string().into_bytes());
    let (method, uri, body) = match case {
        Case::Push(value) => (Method::POST, "/push".to_owned(), json(value)),
        Case::Batch(value) => (Method::POST, "/push/batch".to_owned(), json(value)),
        Case::Pop(query) => (Method::GET, format!("/pop?{query}"), None),
        Case::Finish(query, value) => (Method::POST, format!("/finish?{query}"), value.as_ref().and_then(json)),
        Case::YouzanPush(topic, value) => (Method::POST, format!("/topic/{topic}/job"), json(value)),
        Case::YouzanPop(topic, query) => (Method::GET, format!("/topic/{topic}/job?{query}"), None),
        Case::RawBody(path, bytes) => (Method::POST, (*path).to_owned(), Some(bytes.clone())),
    };
    let mut builder = Request::builder().method(method).uri(uri);
    if body.is_some() {
        builder = builder.header(header::CONTENT_TYPE, "application/json");
    }
    builder.body(body.map_or_else(Body::empty, Body::from)).ok()
}

#[test]
fn any_body_and_query_gets_200_or_a_4xx_naming_a_field() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let app = runtime.block_on(TestApp::new());
    let config = Config { cases: 400, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new(config);
    let accepted = std::sync::Mutex::new(std::collections::BTreeMap::<&str, usize>::new());
    let outcome = runner.run(&case(), |case| {
        let Some(request) = request(&case) else {
            return Ok(());
        };
        let (status, bytes) = runtime.block_on(app.exchange_request(request));
        if status == StatusCode::OK {
            *accepted.lock().unwrap().entry(case.route()).or_default() += 1;
        }
        let envelope: Value = serde_json::from_slice(&bytes)
            .map_err(|_| TestCaseError::fail(format!("{status}: not JSON: {}", String::from_utf8_lossy(&bytes))))?;
        assert_envelope(status, &envelope);
        prop_assert!(status == StatusCode::OK || status.is_client_error(), "{status} for {case:?}: {envelope}");
        if status != StatusCode::OK {
            let message = envelope["message"].as_str().unwrap_or_default();
            prop_assert!(names_a_field(message), "{message:?} names no field, for {case:?}");
        }
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
    // The generators reach past the parsers: every route accepted some requests.
    let accepted = accepted.into_inner().unwrap();
    for route in ["push", "batch", "pop"] {
        assert!(accepted.get(route).is_some_and(|count| *count > 0), "no {route} was accepted: {accepted:?}");
    }
}
