//! The web console driven by a real headless Chromium against the real
//! binary: the overview shows what `/stats` reports, jobs are found by id
//! and business key, a dead job is retried from its page and popped, a paused
//! topic hands out nothing until resumed, auth refuses without a token and
//! keeps non-admins from clearing, and read-only mode shows no action. Each
//! test saves a screenshot (see `browser::screenshot_dir`).

mod browser;
mod common;

use std::time::Duration;

use browser::Browser;
use common::{unique_name, Client, Server};
use delayq_testkit::eventually;
use serde_json::{json, Value};

const STATES: [&str; 7] = ["delay", "ready", "reserved", "finished", "deleted", "dead", "expired"];
const USER_TOKEN: &str = "console-user-token";
const ADMIN_TOKEN: &str = "console-admin-token";

async fn push(client: &Client, job: Value) -> String {
    let (status, body) = client.post("/push", &job).await.expect("push");
    assert_eq!(status, 200, "push {job}: {body}");
    body["data"]["id"].as_str().expect("id").to_owned()
}

async fn pop_ids(client: &Client, topic: &str) -> Vec<String> {
    let (status, body) = client.post_empty(&format!("/pop?topic={topic}&count=10")).await.expect("pop");
    assert_eq!(status, 200, "pop: {body}");
    body["data"].as_array().expect("jobs").iter().map(|job| job["id"].as_str().unwrap_or("").to_owned()).collect()
}

async fn job_state(client: &Client, id: &str) -> String {
    let (_, body) = client.get(&format!("/jobs/{id}")).await.expect("get job");
    body["data"]["state"].as_str().unwrap_or("").to_owned()
}

/// A job of `topic` that is dead: no retries, its one delivery let run out.
async fn dead_job(client: &Client, topic: &str, body: &str) -> String {
    let id = push(client, json!({"topic": topic, "body": body, "ttr": 100, "maxRetries": 0})).await;
    let popped = eventually(Duration::from_secs(10), || async { pop_ids(client, topic).await.contains(&id) }).await;
    assert!(popped, "the job is delivered once");
    let died = eventually(Duration::from_secs(10), || async { job_state(client, &id).await == "dead" }).await;
    assert!(died, "the job is dead after its ttr ran out with no retry left");
    id
}

fn digits(text: &str) -> u64 {
    text.chars().filter(char::is_ascii_digit).collect::<String>().parse().unwrap_or(u64::MAX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_shows_the_counts_of_stats() {
    let Some(browser) = Browser::start().await else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &[]).await;
    let client = server.client();
    let orders = unique_name("orders");
    let mails = unique_name("mails");
    for index in 0..5 {
        push(&client, json!({"topic": orders, "body": format!("{{\"order\":{index}}}"), "delay": 1_800_000})).await;
    }
    for index in 0..3 {
        push(&client, json!({"topic": mails, "body": format!("mail {index}")})).await;
    }
    let popped = eventually(Duration::from_secs(10), || async { pop_ids(&client, &mails).await.into_iter().next() })
        .await
        .expect("a ready mail is popped");
    let (status, _) = client.post_empty(&format!("/finish?jobId={popped}")).await.expect("finish");
    assert_eq!(status, 200);
    dead_job(&client, &mails, "{\"to\":\"a@example.com\"}").await;

    // Nothing moves any more: the page and /stats must agree on every state.
    let agreed = eventually(Duration::from_secs(15), || async {
        let (_, stats) = client.get("/stats").await.expect("stats");
        browser.open(&format!("{}/console", server.base_url)).await;
        let mut shown = Vec::new();
        for state in STATES {
            shown.push(digits(&browser.text(&format!(".totals td[data-state={state}]")).await));
        }
        let reported: Vec<u64> =
            STATES.iter().map(|state| stats["data"]["totals"][state].as_u64().unwrap_or(0)).collect();
        if shown == reported {
            Ok(())
        } else {
            Err(format!("page {shown:?}, /stats {reported:?}"))
        }
    })
    .await;
    assert_eq!(agreed, Ok(()), "the overview shows the counts of /stats");
    assert_eq!(digits(&browser.text(".totals td[data-state=delay]").await), 5);
    assert_eq!(browser.text("dd[data-role]").await, "standalone");
    let pushed = digits(&browser.text("text[data-event=pushed]").await);
    assert!(pushed >= 9, "the last hour counts this node's pushes: {pushed}");
    assert_eq!(browser.text("text[data-due='next hour']").await, "5", "the delayed jobs are due within the hour");
    browser.screenshot("overview").await;

    browser.open(&format!("{}/console/topics/{orders}", server.base_url)).await;
    assert_eq!(digits(&browser.text("td[data-state=delay]").await), 5);
    browser.screenshot("topic").await;
    browser.close().await;
    assert!(server.terminate().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_found_by_id_and_by_business_key() {
    let Some(browser) = Browser::start().await else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &[]).await;
    let client = server.client();
    let topic = unique_name("invoices");
    let by_id =
        push(&client, json!({"topic": topic, "body": "{\"invoice\":1,\"lines\":[1,2]}", "delay": 600_000})).await;
    let by_key =
        push(&client, json!({"topic": topic, "body": "plain text", "delay": 600_000, "bizKey": "invoice-77"})).await;

    browser.open(&format!("{}/console", server.base_url)).await;
    browser.type_into("header form.search input[name=id]", &by_id).await;
    browser.click("header form.search button").await;
    assert_eq!(browser.path().await, format!("/console/jobs/{by_id}"));
    assert_eq!(browser.text("dd[data-field=id]").await, by_id);
    assert!(browser.text("pre.body").await.contains("\"lines\": ["), "a JSON body is pretty-printed");
    browser.screenshot("job").await;

    browser.open(&format!("{}/console/topics/{topic}/jobs?state=delay", server.base_url)).await;
    assert_eq!(browser.count("tr[data-job]").await, 2, "the topic's delayed jobs are listed");
    browser.type_into("main form.search input[name=bizKey]", "invoice-77").await;
    browser.click("main form.search button").await;
    assert_eq!(browser.path().await, format!("/console/jobs/{by_key}"));
    assert_eq!(browser.text("dd[data-field=bizKey]").await, "invoice-77");

    // Its due time is changed from its page (a replace: same job, same key).
    browser.type_into("input[name=runAt]", "2099-01-02T03:04:05").await;
    browser.click("form.reschedule button").await;
    assert!(browser.text("p.flash").await.contains("due time is changed"));
    let (_, moved) = client.get(&format!("/jobs/{by_key}")).await.expect("get job");
    assert_eq!(moved["data"]["runAt"], 4_071_006_245_000u64, "due 2099-01-02T03:04:05Z");
    assert_eq!(moved["data"]["bizKey"], "invoice-77");

    // The other is run now, then popped; the rescheduled one is deleted.
    browser.open(&format!("{}/console/jobs/{by_id}", server.base_url)).await;
    browser.click(&format!("form[action='/console/jobs/{by_id}/run'] button")).await;
    assert!(browser.text("p.flash").await.contains("Due now"));
    let popped = eventually(Duration::from_secs(10), || async {
        let ids = pop_ids(&client, &topic).await;
        (!ids.is_empty()).then_some(ids)
    })
    .await;
    assert_eq!(popped, Some(vec![by_id.clone()]), "run now: due at once, the other still waits");
    browser.open(&format!("{}/console/jobs/{by_key}", server.base_url)).await;
    browser.click(&format!("form[action='/console/jobs/{by_key}/delete'] button")).await;
    assert_eq!(browser.text("dd[data-field=state]").await, "deleted");

    browser.open(&format!("{}/console/search?id=no-such-job", server.base_url)).await;
    assert!(browser.source().await.contains("404"), "an unknown id is a 404 page");
    browser.close().await;
    assert!(server.terminate().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_job_is_retried_from_its_page_and_then_popped() {
    let Some(browser) = Browser::start().await else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &[]).await;
    let client = server.client();
    let topic = unique_name("webhooks");
    let id = dead_job(&client, &topic, "{\"url\":\"https://example.com/hook\"}").await;
    dead_job(&client, &topic, "{\"url\":\"https://example.com/other\"}").await;

    browser.open(&format!("{}/console/topics/{topic}/jobs?state=dead", server.base_url)).await;
    assert_eq!(browser.count("tr[data-job]").await, 2);
    browser.screenshot("dead-letters").await;

    browser.open(&format!("{}/console/jobs/{id}", server.base_url)).await;
    assert_eq!(browser.text("dd[data-field=state]").await, "dead");
    browser.click(&format!("form[action='/console/jobs/{id}/retry'] button")).await;
    assert_eq!(browser.path().await, format!("/console/jobs/{id}"));
    assert!(browser.text("p.flash").await.contains("Ready again"));
    assert_eq!(browser.text("dd[data-field=attempt]").await, "1 of 1", "attempts count from 1 again");
    browser.screenshot("job-retried").await;

    let popped = eventually(Duration::from_secs(10), || async {
        let ids = pop_ids(&client, &topic).await;
        (!ids.is_empty()).then_some(ids)
    })
    .await
    .expect("the retried job is popped");
    assert_eq!(popped, vec![id.clone()], "the retried job is delivered, the other dead one stays dead");
    assert_eq!(job_state(&client, &id).await, "reserved");
    browser.close().await;
    assert!(server.terminate().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_topic_hands_out_nothing_until_resumed() {
    let Some(browser) = Browser::start().await else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &[]).await;
    let client = server.client();
    let topic = unique_name("reports");
    browser.open(&format!("{}/console", server.base_url)).await;
    let id = push(&client, json!({"topic": topic, "body": "due now"})).await;

    browser.open(&format!("{}/console/topics/{topic}", server.base_url)).await;
    browser.click(&format!("form[action='/console/topics/{topic}/pause'] button")).await;
    assert_eq!(browser.text("h1 .badge").await, "paused");
    browser.screenshot("topic-paused").await;
    for _ in 0..3 {
        assert!(pop_ids(&client, &topic).await.is_empty(), "a paused topic hands out nothing");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(job_state(&client, &id).await, "ready", "its job still fell due");

    browser.click(&format!("form[action='/console/topics/{topic}/resume'] button")).await;
    assert_eq!(browser.text("h1 .badge").await, "running");
    assert_eq!(pop_ids(&client, &topic).await, vec![id], "resumed, the job is handed out");
    browser.close().await;
    assert!(server.terminate().await);
}

/// Posts a console form with the given cookies and fields; returns the status.
async fn post_form(base_url: &str, path: &str, cookies: &str, fields: &[(&str, &str)]) -> u16 {
    let response = reqwest::Client::new()
        .post(format!("{base_url}{path}"))
        .header("cookie", cookies)
        .form(fields)
        .send()
        .await
        .expect("post form");
    response.status().as_u16()
}

async fn live_total(base_url: &str) -> u64 {
    let stats: Value = reqwest::Client::new()
        .get(format!("{base_url}/stats"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("stats")
        .json()
        .await
        .expect("json");
    ["delay", "ready", "reserved"].iter().map(|state| stats["data"]["totals"][state].as_u64().unwrap_or(0)).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_the_console_asks_for_a_token_and_only_admins_clear() {
    let Some(browser) = Browser::start().await else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = format!("[\"{USER_TOKEN}\"]");
    let admin_tokens = format!("[\"{ADMIN_TOKEN}\"]");
    let env = [("DELAYQ_AUTH__TOKENS", tokens.as_str()), ("DELAYQ_AUTH__ADMIN_TOKENS", admin_tokens.as_str())];
    let server = Server::start(dir.path(), &env).await;
    let base = server.base_url.clone();
    let http = reqwest::Client::new();
    let topic = unique_name("secured");
    for index in 0..3 {
        let pushed = http
            .post(format!("{base}/push"))
            .bearer_auth(USER_TOKEN)
            .json(&json!({"topic": topic, "body": format!("job {index}"), "delay": 600_000}))
            .send()
            .await
            .expect("push");
        assert_eq!(pushed.status().as_u16(), 200);
    }
    for path in ["/console", "/console/topics", &format!("/console/topics/{topic}/jobs")] {
        let refused = http.get(format!("{base}{path}")).send().await.expect("get");
        assert_eq!(refused.status().as_u16(), 401, "{path} without a token");
    }
    let forged = post_form(&base, "/console/clear", "delayq_console_csrf=00", &[("csrf", "00")]).await;
    assert_eq!(forged, 401, "no action without a token");

    browser.open(&format!("{base}/console")).await;
    assert_eq!(browser.count("input[name=token]").await, 1, "the console asks for a token");
    browser.type_into("input[name=token]", "not-a-token").await;
    browser.click("section.login button").await;
    assert!(browser.text("p.flash.error").await.contains("not valid"));
    browser.screenshot("login").await;
    browser.type_into("input[name=token]", USER_TOKEN).await;
    browser.click("section.login button").await;
    assert_eq!(browser.path().await, "/console");
    assert_eq!(digits(&browser.text(".totals td[data-state=delay]").await), 3, "signed in, the overview shows");

    browser.click("form[action='/console/clear'] button").await;
    assert!(browser.text("p.flash.error").await.contains("admin token is required"));
    browser.screenshot("clear-refused").await;
    assert_eq!(live_total(&base).await, 3, "a user token cleared nothing");

    // The cookie alone is not enough: a form must carry the page's CSRF token.
    let cookie = format!("delayq_console_token={}; delayq_console_csrf={}", hex(ADMIN_TOKEN), "ab".repeat(16));
    assert_eq!(post_form(&base, "/console/clear", &cookie, &[("csrf", "cd")]).await, 403);
    assert_eq!(post_form(&base, "/console/clear", &cookie, &[]).await, 403);
    assert_eq!(live_total(&base).await, 3, "a forged form cleared nothing");

    browser.open(&format!("{base}/console")).await;
    browser.click("form.logout button").await;
    browser.type_into("input[name=token]", ADMIN_TOKEN).await;
    browser.click("section.login button").await;
    browser.click("form[action='/console/clear'] button").await;
    assert!(browser.text("p.flash").await.contains("Every live job is deleted"));
    assert_eq!(live_total(&base).await, 0, "an admin token clears");
    browser.close().await;
    assert!(server.terminate().await);
}

fn hex(text: &str) -> String {
    text.bytes().map(|byte| format!("{byte:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_mode_shows_no_action() {
    let Some(browser) = Browser::start().await else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), &[("DELAYQ_CONSOLE__READ_ONLY", "true")]).await;
    let client = server.client();
    let topic = unique_name("audits");
    let waiting = push(&client, json!({"topic": topic, "body": "later", "delay": 600_000})).await;
    let dead = dead_job(&client, &topic, "gone").await;

    let pages = [
        "/console".to_owned(),
        "/console/topics".to_owned(),
        format!("/console/topics/{topic}"),
        format!("/console/jobs/{waiting}"),
        format!("/console/jobs/{dead}"),
    ];
    for page in &pages {
        browser.open(&format!("{}{page}", server.base_url)).await;
        assert_eq!(browser.count("main form[method=post]").await, 0, "{page} shows no action");
        assert_eq!(browser.count("main button").await, 0, "{page} shows no button");
    }
    browser.screenshot("read-only-job").await;

    // A form posted anyway changes nothing.
    browser.open(&format!("{}/console/topics/{topic}", server.base_url)).await;
    let refused = post_form(&server.base_url, &format!("/console/topics/{topic}/pause"), "", &[("csrf", "x")]).await;
    assert_eq!(refused, 403);
    let (_, stats) = client.get("/stats").await.expect("stats");
    assert_eq!(stats["data"]["paused"], json!([]), "nothing was paused");
    assert_eq!(job_state(&client, &dead).await, "dead");
    browser.close().await;
    assert!(server.terminate().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forwarding_page_shows_what_each_route_published() {
    let Some(browser) = Browser::start().await else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    // Server::start passes no --config: the file is found as config/delayq.toml in its working directory.
    std::fs::create_dir_all(dir.path().join("config")).expect("config dir");
    let route = "[[forward.routes]]\ntopics = [\"mailer.*\"]\nsink = \"log\"\nname = \"audit-log\"\n";
    std::fs::write(dir.path().join("config/delayq.toml"), route).expect("config");
    let server = Server::start(dir.path(), &[]).await;
    let client = server.client();
    for index in 0..4 {
        push(&client, json!({"topic": "mailer.welcome", "body": format!("mail {index}")})).await;
    }

    let published = eventually(Duration::from_secs(15), || async {
        browser.open(&format!("{}/console/forwarding", server.base_url)).await;
        let cells = browser.client.find_all(fantoccini::Locator::Css("tr[data-route] td")).await.expect("cells");
        let mut texts = Vec::new();
        for cell in cells {
            texts.push(cell.text().await.expect("text"));
        }
        // Published, failed, unconfirmed, dead, in flight: the batch is settled.
        (texts.get(3..) == Some(&["4", "0", "0", "0", "0"].map(String::from)[..])).then_some(texts)
    })
    .await
    .expect("the route published the four jobs, nothing failed, unconfirmed, dead or in flight");
    assert_eq!(published[..3], ["audit-log", "log", "mailer.*"], "route, sink and topics");
    browser.screenshot("forwarding").await;
    browser.close().await;
    assert!(server.terminate().await);
}
