//! The job endpoints over a real queue: push, batch, pop, finish, nack, touch,
//! delete and the lookups.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use common::{now_ms, TestApp};
use serde_json::{json, Value};

const POP_FIELDS: [&str; 9] = ["id", "topic", "subtopic", "body", "attempt", "runAt", "ttr", "priority", "bizKey"];

fn keys(value: &Value) -> BTreeSet<String> {
    value.as_object().unwrap().keys().cloned().collect()
}

#[tokio::test]
async fn push_then_pop_returns_the_job_with_exactly_the_pop_fields() {
    let app = TestApp::new().await;
    let before = now_ms();
    let reply = app.post("/push", Some(&json!({"topic": "t", "body": "hello", "ttr": 5000, "bizKey": "k1"}))).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(keys(reply.data()), ["id", "runAt"].map(String::from).into());
    let id = reply.data()["id"].as_str().unwrap().to_owned();
    assert!(id.chars().all(|c| c.is_ascii_digit()), "generated ids are decimal snowflakes: {id}");
    assert!(reply.data()["runAt"].as_u64().unwrap() >= before);

    let jobs = app.pop("t", 1, 2000).await;
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    assert_eq!(keys(job), POP_FIELDS.map(String::from).into());
    assert_eq!(job["id"], id.as_str());
    assert_eq!((job["topic"].as_str(), job["body"].as_str()), (Some("t"), Some("hello")));
    assert_eq!(
        (job["attempt"].as_u64(), job["ttr"].as_u64(), job["priority"].as_u64()),
        (Some(1), Some(5000), Some(1))
    );
    assert_eq!(job["bizKey"], "k1");
    assert_eq!(job["subtopic"], Value::Null);
}

#[tokio::test]
async fn pop_accepts_post_honours_count_and_answers_an_empty_array() {
    let app = TestApp::new().await;
    for n in 0..3 {
        app.push(json!({"topic": "many", "body": format!("b{n}")})).await;
    }
    let reply = app.post("/pop?topic=many&count=2&timeout=1000", None).await;
    assert_eq!(reply.data().as_array().unwrap().len(), 2);
    assert_eq!(app.pop("many", 5, 1000).await.len(), 1);
    assert_eq!(app.pop("many", 5, 0).await, Vec::<Value>::new());
}

#[tokio::test]
async fn pop_long_polls_until_timeout_or_a_job_arrives() {
    let app = TestApp::new().await;
    let started = Instant::now();
    assert!(app.pop("quiet", 1, 300).await.is_empty());
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(280) && waited < Duration::from_secs(5), "{waited:?}");

    app.push(json!({"topic": "soon", "body": "b", "delay": 200})).await;
    let started = Instant::now();
    let jobs = app.pop("soon", 1, 5000).await;
    assert_eq!(jobs.len(), 1);
    assert!(started.elapsed() < Duration::from_secs(3), "the pop returns when the job falls due");
}

#[tokio::test]
async fn finish_stores_the_result_and_get_shows_state_and_history() {
    let app = TestApp::new().await;
    let id = app.push(json!({"topic": "t", "body": "b"})).await;
    app.pop("t", 1, 2000).await;
    let reply = app.post(&format!("/finish?jobId={id}"), Some(&json!({"result": "done"}))).await;
    assert_eq!((reply.status, reply.data()), (StatusCode::OK, &json!({"id": id})));

    let job = app.get(&format!("/jobs/{id}")).await;
    assert_eq!(job.status, StatusCode::OK);
    let data = job.data();
    assert_eq!((data["state"].as_str(), data["result"].as_str()), (Some("finished"), Some("done")));
    for field in ["attempt", "runAt", "createTime", "topic", "body", "ttr", "priority"] {
        assert!(data.get(field).is_some(), "{field} missing: {data}");
    }
    let history = data["history"].as_array().unwrap();
    assert!(!history.is_empty());
    for entry in history {
        assert_eq!(keys(entry), ["at", "attempt", "node", "state"].map(String::from).into());
    }
    assert_eq!(history.last().unwrap()["state"], "finished");
}

#[tokio::test]
async fn finish_is_a_conflict_unless_reserved_and_a_404_for_unknown_jobs() {
    let app = TestApp::new().await;
    let id = app.push(json!({"topic": "t", "body": "b", "delay": 60000})).await;
    app.post(&format!("/finish?jobId={id}"), None).await.assert_error(StatusCode::CONFLICT, "not reserved");
    app.post("/finish?jobId=nope", None).await.assert_error(StatusCode::NOT_FOUND, "nope");
    app.post("/finish", None).await.assert_error(StatusCode::BAD_REQUEST, "jobId is required");
    let bad_result = app.post(&format!("/finish?jobId={id}"), Some(&json!({"result": 5}))).await;
    bad_result.assert_error(StatusCode::BAD_REQUEST, "result must be a string");
}

#[tokio::test]
async fn nack_redelivers_with_a_higher_attempt_and_dead_when_out_of_retries() {
    let app = TestApp::new().await;
    let id = app.push(json!({"topic": "t", "body": "b", "maxRetries": 1})).await;
    app.pop("t", 1, 2000).await;
    let reply = app.post(&format!("/nack?JobId={id}&delay=0"), None).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(keys(reply.data()), ["id", "runAt", "state"].map(String::from).into());
    let again = app.pop("t", 1, 3000).await;
    assert_eq!(again[0]["attempt"], 2);
    let dead = app.post(&format!("/nack?id={id}"), None).await;
    assert_eq!(dead.data()["state"], "dead");
    app.post(&format!("/nack?jobId={id}&delay=-5"), None).await.assert_error(StatusCode::BAD_REQUEST, "delay");
}

#[tokio::test]
async fn an_ended_job_is_a_conflict_naming_its_state_and_an_unknown_one_a_404() {
    let app = TestApp::new().await;
    let id = app.push(json!({"topic": "ended", "body": "b"})).await;
    app.pop("ended", 1, 2000).await;
    let finished = app.post(&format!("/finish?jobId={id}"), None).await;
    assert_eq!(finished.status, StatusCode::OK, "{}", finished.body);
    let again = app.post(&format!("/finish?jobId={id}"), None).await;
    again.assert_error(StatusCode::CONFLICT, &format!("job {id} is finished, not reserved"));
    app.get(&format!("/delete?jobId={id}")).await.assert_error(StatusCode::CONFLICT, &format!("job {id} is finished"));
    app.post("/touch?jobId=never-was", None).await.assert_error(StatusCode::NOT_FOUND, "no job never-was");
    app.get("/delete?jobId=never-was").await.assert_error(StatusCode::NOT_FOUND, "no job never-was");
}

#[tokio::test]
async fn a_named_attempt_acts_only_on_that_delivery() {
    let app = TestApp::new().await;
    let id = app.push(json!({"topic": "deliveries", "body": "b"})).await;
    let popped = app.pop("deliveries", 1, 2000).await;
    assert_eq!(popped[0]["attempt"], 1);
    for operation in ["finish", "nack", "touch"] {
        let stale = app.post(&format!("/{operation}?jobId={id}&attempt=2"), None).await;
        stale.assert_error(StatusCode::CONFLICT, &format!("job {id} is at attempt 1, not 2"));
    }
    app.post(&format!("/finish?jobId={id}&attempt=0"), None).await.assert_error(StatusCode::BAD_REQUEST, "attempt");
    app.post(&format!("/finish?jobId={id}&attempt=x"), None).await.assert_error(StatusCode::BAD_REQUEST, "attempt");
    let touched = app.post(&format!("/touch?jobId={id}&attempt=1"), None).await;
    assert_eq!(touched.status, StatusCode::OK, "{}", touched.body);
    let finished = app.post(&format!("/finish?jobId={id}&attempt=1"), None).await;
    assert_eq!(finished.status, StatusCode::OK, "{}", finished.body);
}

#[tokio::test]
async fn touch_needs_a_reserved_job() {
    let app = TestApp::new().await;
    let id = app.push(json!({"topic": "t", "body": "b"})).await;
    app.post(&format!("/touch?jobId={id}"), None).await.assert_error(StatusCode::CONFLICT, "reserved");
    app.pop("t", 1, 2000).await;
    let reply = app.post(&format!("/touch?jobId={id}"), None).await;
    assert_eq!((reply.status, reply.data()), (StatusCode::OK, &json!({"id": id})));
}

#[tokio::test]
async fn delete_accepts_three_id_spellings_both_methods_and_biz_keys() {
    let app = TestApp::new().await;
    for (param, method) in [("jobId", Method::GET), ("JobId", Method::POST), ("id", Method::GET)] {
        let id = app.push(json!({"topic": "t", "body": "b", "delay": 60000})).await;
        let reply = app.send(method, &format!("/delete?{param}={id}"), None, None).await;
        assert_eq!((reply.status, reply.data()), (StatusCode::OK, &json!({"id": id})), "{param}");
        app.get(&format!("/delete?{param}={id}"))
            .await
            .assert_error(StatusCode::CONFLICT, &format!("job {id} is deleted"));
    }
    let id = app.push(json!({"topic": "t", "body": "b", "bizKey": "order-9"})).await;
    let reply = app.get("/delete?topic=t&bizKey=order-9").await;
    assert_eq!(reply.data(), &json!({"id": id}));
    app.get("/delete?topic=t&bizKey=order-9").await.assert_error(StatusCode::NOT_FOUND, "order-9");
    app.get("/delete?topic=t").await.assert_error(StatusCode::BAD_REQUEST, "bizKey is required");
    app.get("/delete").await.assert_error(StatusCode::BAD_REQUEST, "jobId is required");
}

#[tokio::test]
async fn duplicate_ids_and_live_biz_keys_are_conflicts() {
    let app = TestApp::new().await;
    app.push(json!({"topic": "t", "id": "same", "body": "b", "bizKey": "k"})).await;
    let duplicate = app.post("/push", Some(&json!({"topic": "t", "id": "same", "body": "b"}))).await;
    duplicate.assert_error(StatusCode::CONFLICT, "same");
    let taken = app.post("/push", Some(&json!({"topic": "t", "body": "b", "bizKey": "k"}))).await;
    taken.assert_error(StatusCode::CONFLICT, "k");
}

#[tokio::test]
async fn replace_reschedules_a_waiting_job_keeping_its_id_and_refuses_a_reserved_one() {
    let app = TestApp::new().await;
    app.push(json!({"topic": "r", "id": "r1", "body": "old", "delay": 60000})).await;
    assert!(app.pop("r", 1, 0).await.is_empty());
    let reply = app.post("/push", Some(&json!({"topic": "r", "id": "r1", "body": "new", "replace": true}))).await;
    assert_eq!((reply.status, reply.data()["id"].as_str()), (StatusCode::OK, Some("r1")));
    let jobs = app.pop("r", 1, 2000).await;
    assert_eq!((jobs.len(), jobs[0]["body"].as_str()), (1, Some("new")));
    let reserved = app.post("/push", Some(&json!({"topic": "r", "id": "r1", "body": "x", "replace": true}))).await;
    reserved.assert_error(StatusCode::CONFLICT, "reserved");
}

#[tokio::test]
async fn batch_push_judges_each_job_alone() {
    let app = TestApp::new().await;
    app.push(json!({"topic": "b", "id": "taken", "body": "b"})).await;
    let batch = json!({"jobs": [
        {"topic": "b", "body": "one"},
        {"topic": "b"},
        {"topic": "b", "id": "taken", "body": "dup"},
        {"topic": "b", "body": "two", "delay": -1},
        {"topic": "b", "id": "fresh", "body": "three"},
    ]});
    let reply = app.post("/push/batch", Some(&batch)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let items = reply.data().as_array().unwrap();
    assert_eq!(items.len(), 5);
    assert_eq!(keys(&items[0]), ["id", "runAt"].map(String::from).into());
    assert_eq!(items[1], json!({"error": "body is required"}));
    assert!(items[2]["error"].as_str().unwrap().contains("taken"), "{}", items[2]);
    assert_eq!(items[3], json!({"error": "delay must be >= 0"}));
    assert_eq!(items[4]["id"], "fresh");
    assert_eq!(app.pop("b", 10, 1000).await.len(), 3);
}

#[tokio::test]
async fn batch_push_refuses_a_malformed_or_oversized_batch() {
    let app = TestApp::new().await;
    app.post("/push/batch", Some(&json!({}))).await.assert_error(StatusCode::BAD_REQUEST, "jobs is required");
    let not_array = app.post("/push/batch", Some(&json!({"jobs": {}}))).await;
    not_array.assert_error(StatusCode::BAD_REQUEST, "jobs must be an array");
    let jobs: Vec<Value> = (0..1001).map(|n| json!({"topic": "b", "body": format!("{n}")})).collect();
    let too_many = app.post("/push/batch", Some(&json!({ "jobs": jobs }))).await;
    too_many.assert_error(StatusCode::BAD_REQUEST, "jobs must have at most 1000 entries");
    assert!(app.pop("b", 1, 0).await.is_empty(), "a refused batch changes nothing");
    let empty = app.post("/push/batch", Some(&json!({"jobs": []}))).await;
    assert_eq!((empty.status, empty.data()), (StatusCode::OK, &json!([])));
}

#[tokio::test]
async fn jobs_by_biz_key_and_paged_listings() {
    let app = TestApp::new().await;
    let id = app.push(json!({"topic": "l", "body": "b", "bizKey": "order-1", "delay": 60000})).await;
    for n in 0..2 {
        app.push(json!({"topic": "l", "body": format!("{n}"), "delay": 60000 + n})).await;
    }
    let by_key = app.get("/jobs?topic=l&bizKey=order-1").await;
    assert_eq!((by_key.data()["id"].as_str(), by_key.data()["state"].as_str()), (Some(id.as_str()), Some("delay")));
    app.get("/jobs?topic=l&bizKey=missing").await.assert_error(StatusCode::NOT_FOUND, "missing");

    let first = app.get("/jobs?topic=l&state=delay&limit=2").await;
    assert_eq!(first.data()["jobs"].as_array().unwrap().len(), 2);
    let cursor = first.data()["cursor"].as_str().unwrap().to_owned();
    let second = app.get(&format!("/jobs?topic=l&state=delay&limit=2&cursor={cursor}")).await;
    assert_eq!(second.data()["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(second.data()["cursor"], Value::Null);
    let all_ids: BTreeSet<&str> = [&first, &second]
        .iter()
        .flat_map(|page| page.data()["jobs"].as_array().unwrap().iter().map(|job| job["id"].as_str().unwrap()))
        .collect();
    assert_eq!(all_ids.len(), 3, "pages neither repeat nor skip");
    let default_limit = app.get("/jobs?topic=l&state=delay").await;
    assert_eq!(default_limit.data()["jobs"].as_array().unwrap().len(), 3);
    assert_eq!(default_limit.data()["cursor"], Value::Null);
}

#[tokio::test]
async fn get_job_is_a_404_for_unknown_ids_and_a_400_for_invalid_ones() {
    let app = TestApp::new().await;
    app.get("/jobs/unknown-1").await.assert_error(StatusCode::NOT_FOUND, "unknown-1");
    app.get("/jobs/a%20b").await.assert_error(StatusCode::BAD_REQUEST, "id may only contain");
}

/// A job's history is paged: the newest 100 lines by default, `historyLimit`
/// from 0 to 1000 asks for another number; the lines stay oldest first.
#[tokio::test]
async fn get_job_shows_the_newest_history_lines_oldest_first() {
    use delayq_common::{JobId, JobState, Timestamp};
    use delayq_store::StateChange;

    let app = TestApp::new().await;
    let id = app.push(json!({"topic": "long", "body": "b", "delay": 600000})).await;
    let job_id = JobId::parse(id.clone()).unwrap();
    let job = app.queue.store().get(&job_id).await.unwrap().unwrap();
    // 150 more lines after the push's: the job stays delayed, each line one ms later.
    let changes: Vec<StateChange> = (1..=150u64)
        .map(|n| StateChange {
            id: job_id.clone(),
            state: JobState::Delay,
            attempt: 1,
            run_at: job.run_at,
            at: Timestamp::from_millis(job.updated_at.as_millis() + n),
            result: None,
        })
        .collect();
    app.queue.store().record(changes).await.unwrap();
    let newest_at = job.updated_at.as_millis() + 150;
    let history_at = |reply: &common::Reply| -> Vec<u64> {
        reply.data()["history"].as_array().unwrap().iter().map(|line| line["at"].as_u64().unwrap()).collect()
    };

    let default = app.get(&format!("/jobs/{id}")).await;
    assert_eq!(default.status, StatusCode::OK);
    let lines = history_at(&default);
    assert_eq!(lines.len(), 100, "the newest 100 by default");
    assert_eq!(lines.last(), Some(&newest_at), "the newest line is last");
    assert!(lines.windows(2).all(|pair| pair[0] < pair[1]), "oldest first: {lines:?}");

    let five = history_at(&app.get(&format!("/jobs/{id}?historyLimit=5")).await);
    assert_eq!(five, (newest_at - 4..=newest_at).collect::<Vec<_>>());
    let all = history_at(&app.get(&format!("/jobs/{id}?historyLimit=1000")).await);
    assert_eq!(all.len(), 151, "every line: the push's and the 150 changes");
    assert!(history_at(&app.get(&format!("/jobs/{id}?historyLimit=0")).await).is_empty());

    for bad in ["1001", "-1", "x"] {
        app.get(&format!("/jobs/{id}?historyLimit={bad}")).await.assert_error(StatusCode::BAD_REQUEST, "historyLimit");
    }
}
