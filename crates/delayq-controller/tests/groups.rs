//! Consumer groups over REST: a topic's declared groups each get their own
//! delivery of every job that falls due, with its own state and attempt;
//! `group=` picks one delivery on every job route, and no answer shows a
//! delivery under any name but its job's id and topic with its group.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use axum::http::{Method, StatusCode};
use common::{Reply, TestApp};
use serde_json::{json, Value};

async fn put(app: &TestApp, uri: &str) -> Reply {
    app.send(Method::PUT, uri, None, None).await
}

async fn delete(app: &TestApp, uri: &str) -> Reply {
    app.send(Method::DELETE, uri, None, None).await
}

/// Declares each of `groups` of `topic`, asserting each is new.
async fn declare(app: &TestApp, topic: &str, groups: &[&str]) {
    for group in groups {
        let declared = put(app, &format!("/topics/{topic}/groups/{group}")).await;
        assert_eq!(declared.status, StatusCode::OK, "{}", declared.body);
        assert_eq!(declared.data(), &json!({"topic": topic, "group": group, "created": true}));
    }
}

/// Pops one delivery of `group`, waiting for the fan-out.
async fn pop_in(app: &TestApp, topic: &str, group: &str) -> Vec<Value> {
    let reply = app.get(&format!("/pop?topic={topic}&group={group}&timeout=5000")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    reply.data().as_array().unwrap().clone()
}

/// Waits until job `id` is handed to its groups: a delivery may be popped a
/// moment before the fan-out ends the job.
async fn wait_until_handed_out(app: &TestApp, id: &str) {
    let finished = delayq_testkit::eventually(Duration::from_secs(5), || async {
        app.get(&format!("/jobs/{id}")).await.data()["state"] == "finished"
    })
    .await;
    assert!(finished, "job {id} was not handed to its groups");
}

/// Returns the delivery of `group` that `GET /jobs/{id}` lists.
fn delivery<'a>(job: &'a Value, group: &str) -> &'a Value {
    let deliveries = job["deliveries"].as_array().unwrap_or_else(|| panic!("no deliveries: {job}"));
    deliveries.iter().find(|delivery| delivery["group"] == group).unwrap_or_else(|| panic!("no {group}: {job}"))
}

/// No answer may show the delivery form `X/g` of an id or a topic.
fn assert_no_internal_names(value: &Value) {
    let text = value.to_string();
    assert!(!text.contains("/billing") && !text.contains("/audit"), "an internal name leaked: {text}");
}

#[tokio::test]
async fn each_group_gets_its_own_delivery_with_its_own_state() {
    let app = TestApp::new().await;
    declare(&app, "orders", &["billing", "audit"]).await;
    let again = put(&app, "/topics/orders/groups/billing").await;
    assert_eq!(again.data()["created"], false, "declared already");
    assert_eq!(app.get("/topics/orders/groups").await.data(), &json!(["audit", "billing"]));

    let id = app.push(json!({"topic": "orders", "id": "order-1", "body": "close", "bizKey": "k-1"})).await;
    let billing = pop_in(&app, "orders", "billing").await;
    let audit = pop_in(&app, "orders", "audit").await;
    wait_until_handed_out(&app, &id).await;
    for (group, popped) in [("billing", &billing), ("audit", &audit)] {
        assert_eq!(popped.len(), 1, "{group}: {popped:?}");
        let job = &popped[0];
        assert_eq!((job["id"].as_str(), job["topic"].as_str()), (Some(id.as_str()), Some("orders")), "{job}");
        assert_eq!(
            (job["group"].as_str(), job["body"].as_str(), job["attempt"].as_u64()),
            (Some(group), Some("close"), Some(1))
        );
        assert_eq!(job["bizKey"], Value::Null, "a delivery does not carry the job's business key");
    }

    let finished = app.post(&format!("/finish?jobId={id}&group=billing"), Some(&json!({"result": "paid"}))).await;
    assert_eq!(finished.data(), &json!({"id": id, "group": "billing"}));
    let nacked = app.post(&format!("/nack?jobId={id}&group=audit&delay=60000&attempt=1"), None).await;
    assert_eq!(nacked.status, StatusCode::OK, "{}", nacked.body);
    assert_eq!(
        (&nacked.data()["id"], &nacked.data()["group"], &nacked.data()["state"]),
        (&json!(id), &json!("audit"), &json!("delay"))
    );

    let job = app.get(&format!("/jobs/{id}")).await;
    assert_eq!(job.data()["state"], "finished", "the job ends once handed to its groups");
    assert!(job.data().get("group").is_none(), "{}", job.body);
    let paid = delivery(job.data(), "billing");
    assert_eq!((&paid["state"], &paid["attempt"], &paid["result"]), (&json!("finished"), &json!(1), &json!("paid")));
    assert!(paid["history"].as_array().is_some_and(|lines| !lines.is_empty()), "{paid}");
    let retried = delivery(job.data(), "audit");
    assert_eq!((&retried["state"], &retried["attempt"]), (&json!("delay"), &json!(2)));
    assert_no_internal_names(&job.body);

    let one = app.get(&format!("/jobs/{id}?group=audit")).await;
    let shown = one.data();
    assert_eq!(
        (&shown["id"], &shown["topic"], &shown["group"], &shown["state"]),
        (&json!(id), &json!("orders"), &json!("audit"), &json!("delay"))
    );
    assert_no_internal_names(&one.body);
    let listed = app.get("/jobs?topic=orders&group=audit&state=delay").await;
    assert_eq!(listed.data()["jobs"].as_array().map(Vec::len), Some(1), "{}", listed.body);
    assert_eq!((&listed.data()["jobs"][0]["id"], &listed.data()["jobs"][0]["group"]), (&json!(id), &json!("audit")));

    app.post(&format!("/finish?jobId={id}&group=billing"), None)
        .await
        .assert_error(StatusCode::CONFLICT, &format!("job {id} in group billing is finished, not reserved"));
    app.post(&format!("/finish?jobId={id}"), None).await.assert_error(StatusCode::CONFLICT, "finished");
}

#[tokio::test]
async fn group_refusals_name_the_field_and_tell_missing_deliveries_from_missing_jobs() {
    let app = TestApp::new().await;
    declare(&app, "mail", &["a"]).await;
    app.get("/pop?topic=mail").await.assert_error(StatusCode::BAD_REQUEST, "group");
    app.get("/pop?topic=mail&group=no*pe").await.assert_error(StatusCode::BAD_REQUEST, "group may only contain");
    put(&app, "/topics/no%20pe/groups/a").await.assert_error(StatusCode::BAD_REQUEST, "topic");
    put(&app, "/topics/mail/groups/no*pe").await.assert_error(StatusCode::BAD_REQUEST, "group");
    app.get("/topics/no*pe/groups").await.assert_error(StatusCode::BAD_REQUEST, "topic");

    let id = app.push(json!({"topic": "mail", "body": "b"})).await;
    assert_eq!(pop_in(&app, "mail", "a").await.len(), 1);
    for route in ["/finish", "/nack", "/touch", "/delete"] {
        let reply = app.post(&format!("{route}?jobId={id}&group=other"), None).await;
        reply.assert_error(StatusCode::CONFLICT, "group other");
        assert_no_internal_names(&reply.body);
        app.post(&format!("{route}?jobId=ghost&group=a"), None).await.assert_error(StatusCode::NOT_FOUND, "ghost");
        app.post(&format!("{route}?jobId={id}&group=a*"), None).await.assert_error(StatusCode::BAD_REQUEST, "group");
    }
    app.get(&format!("/jobs/{id}?group=other")).await.assert_error(StatusCode::CONFLICT, "group other");
    app.get("/jobs/ghost?group=a").await.assert_error(StatusCode::NOT_FOUND, "ghost");

    delete(&app, "/topics/mail/groups/nope").await.assert_error(StatusCode::NOT_FOUND, "group nope");
    let dropped = delete(&app, "/topics/mail/groups/a").await;
    assert_eq!(dropped.data(), &json!({"topic": "mail", "group": "a"}));
    assert_eq!(app.get("/topics/mail/groups").await.data(), &json!([]));
    let held = app.post(&format!("/touch?jobId={id}&group=a"), None).await;
    assert_eq!(held.status, StatusCode::OK, "a dropped group's deliveries keep going: {}", held.body);
}

#[tokio::test]
async fn a_push_may_name_its_groups_and_a_delete_cancels_every_delivery() {
    let app = TestApp::new().await;
    declare(&app, "audit.log", &["a", "b"]).await;
    let only_a = app.push(json!({"topic": "audit.log", "body": "for a", "groups": ["a"]})).await;
    let popped = pop_in(&app, "audit.log", "a").await;
    assert_eq!(popped[0]["id"], only_a.as_str());
    wait_until_handed_out(&app, &only_a).await;
    let none = app.get("/pop?topic=audit.log&group=b&timeout=300").await;
    assert_eq!(none.data(), &json!([]), "b was not named");
    let job = app.get(&format!("/jobs/{only_a}")).await;
    assert_eq!(job.data()["groups"], json!(["a"]));
    let groups: Vec<&Value> =
        job.data()["deliveries"].as_array().unwrap().iter().map(|entry| &entry["group"]).collect();
    assert_eq!(groups, [&json!("a")]);
    app.post("/push", Some(&json!({"topic": "t", "body": "b", "groups": ["x/y"]})))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "groups");

    let both = app.push(json!({"topic": "audit.log", "body": "for both"})).await;
    assert_eq!(pop_in(&app, "audit.log", "b").await[0]["id"], both.as_str());
    wait_until_handed_out(&app, &both).await;
    let deleted = app.post(&format!("/delete?jobId={both}"), None).await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.body);
    let job = app.get(&format!("/jobs/{both}")).await;
    for group in ["a", "b"] {
        assert_eq!(delivery(job.data(), group)["state"], "deleted", "{}", job.body);
    }
}

#[tokio::test]
async fn stats_list_the_groups_and_count_deliveries_by_topic_and_group() {
    let app = TestApp::new().await;
    declare(&app, "orders", &["billing"]).await;
    let id = app.push(json!({"topic": "orders", "body": "b"})).await;
    assert_eq!(pop_in(&app, "orders", "billing").await.len(), 1);
    wait_until_handed_out(&app, &id).await;
    let stats = app.get("/stats").await;
    let data = stats.data();
    assert_eq!(data["groups"], json!({"orders": ["billing"]}));
    assert_eq!(data["deliveries"]["orders"]["billing"]["reserved"], 1, "{data}");
    assert_eq!(data["topics"]["orders"]["finished"], 1, "{data}");
    assert_no_internal_names(&stats.body);
}

#[tokio::test]
async fn a_dead_delivery_is_retried_in_its_group_alone() {
    let app = TestApp::new().await;
    declare(&app, "notify", &["mail", "sms"]).await;
    let id = app.push(json!({"topic": "notify", "body": "hi", "maxRetries": 0})).await;
    pop_in(&app, "notify", "mail").await;
    let nacked = app.post(&format!("/nack?jobId={id}&group=mail"), None).await;
    assert_eq!(nacked.data()["state"], "dead", "{}", nacked.body);
    app.post(&format!("/jobs/{id}/retry"), None).await.assert_error(StatusCode::CONFLICT, "finished");

    let retried = app.post(&format!("/jobs/{id}/retry?group=mail"), None).await;
    assert_eq!(retried.status, StatusCode::OK, "{}", retried.body);
    assert_eq!(retried.data()["id"], id.as_str(), "shown as its job");
    let again = pop_in(&app, "notify", "mail").await;
    assert_eq!((again[0]["id"].as_str(), again[0]["attempt"].as_u64()), (Some(id.as_str()), Some(1)));
    let sms = app.get(&format!("/jobs/{id}?group=sms")).await;
    assert_eq!(sms.data()["state"], "ready", "sms's delivery never moved: {}", sms.body);

    let dead_topic = app.post("/topics/notify/dead/retry?group=sms", None).await;
    assert_eq!(dead_topic.data(), &json!({"retried": 0}), "{}", dead_topic.body);
    app.post("/topics/notify/dead/retry?group=a%20b", None).await.assert_error(StatusCode::BAD_REQUEST, "group");
}
