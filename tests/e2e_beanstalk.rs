//! The beanstalkd face against the real binary: a producer and workers run
//! every command over TCP on the embedded deployment and on Redis + MariaDB
//! (with `DELAYQ_TEST_REDIS_URL` and `DELAYQ_TEST_MYSQL_URL`), including a
//! worker that dies holding a reservation; `INSERTED` survives a kill -9;
//! hostile input gets beanstalkd's errors and leaves the connection serving;
//! the connection cap, the idle timeout and the exposure guard hold.

use std::time::{Duration, Instant};

use delayq_testkit::{free_port, service, unique_name};

#[path = "beanstalk/client.rs"]
mod client;
mod common;

use client::{value, Beanstalk};
use common::Server;

/// Starts a node with the beanstalk listener on a free port; returns it and the address.
async fn start(dir: &std::path::Path, env: &[(&str, &str)]) -> (Server, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut env = env.to_vec();
    env.push(("DELAYQ_BEANSTALK_ADDR", &addr));
    (Server::start(dir, &env).await, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_round_trips_on_the_embedded_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, addr) = start(dir.path(), &[]).await;
    round_trip(&addr).await;
    assert!(server.terminate().await, "a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_round_trips_on_redis_and_mariadb() {
    let (Some(redis_url), Some(mysql_url)) = (service("DELAYQ_TEST_REDIS_URL"), service("DELAYQ_TEST_MYSQL_URL"))
    else {
        return;
    };
    let name = unique_name("dq_e2e_beanstalk");
    let database_url = common::fresh_database(&mysql_url, &name, None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, addr) = start(dir.path(), &common::distributed_env(&redis_url, &database_url, &name, "b1")).await;
    round_trip(&addr).await;
    assert!(server.terminate().await, "a clean shutdown");
}

/// A producer and workers through every command of the producer and worker set.
async fn round_trip(addr: &str) {
    let mut producer = Beanstalk::connect(addr).await;
    let mut worker = Beanstalk::connect(addr).await;
    assert_eq!(producer.command("use jobs").await, "USING jobs");
    assert_eq!(producer.command("list-tube-used").await, "USING jobs");
    let parked = producer.put(1024, "60", 60, "parked").await;
    assert_eq!(producer.command_with_data("peek-delayed").await.1, Some(b"parked".to_vec()));
    let urgent = producer.put(0, "0", 60, "urgent").await;
    let normal = producer.put(1024, "0", 60, "normal").await;
    let later_put = Instant::now();
    let later = producer.put(65536, "0.400", 60, "later").await;

    let stats = producer.stats(&format!("stats-job {normal}")).await;
    assert_eq!(value(&stats, "id"), normal.to_string());
    assert_eq!(value(&stats, "tube"), "jobs");
    assert_eq!(value(&stats, "state"), "ready");
    assert_eq!(value(&stats, "pri"), "1024");
    assert_eq!(value(&stats, "ttr"), "60");
    assert_eq!(value(&producer.stats(&format!("stats-job {parked}")).await, "state"), "delayed");
    let (found, body) = producer.command_with_data(&format!("peek {normal}")).await;
    assert_eq!((found, body), (format!("FOUND {normal} 6"), Some(b"normal".to_vec())));
    assert_eq!(producer.command_with_data("peek-ready").await.0, format!("FOUND {urgent} 6"));

    assert_eq!(worker.command("watch jobs").await, "WATCHING 2");
    assert_eq!(worker.command("ignore default").await, "WATCHING 1");
    assert_eq!(worker.command("ignore jobs").await, "NOT_IGNORED");
    assert_eq!(worker.command_with_data("list-tubes-watched").await.1, Some(b"---\n- jobs\n".to_vec()));

    // The most urgent first, whatever the order of the puts.
    assert_eq!(worker.reserve(5).await, Ok((urgent, "urgent".to_owned())));
    let stats = worker.stats(&format!("stats-job {urgent}")).await;
    assert_eq!((value(&stats, "state"), value(&stats, "reserves")), ("reserved", "1"));
    assert_eq!(worker.command(&format!("touch {urgent}")).await, "TOUCHED");
    assert_eq!(producer.command(&format!("delete {urgent}")).await, "NOT_FOUND", "another connection's job");
    assert_eq!(producer.command(&format!("release {urgent} 0 0")).await, "NOT_FOUND");
    assert_eq!(worker.command(&format!("release {urgent} 0 0")).await, "RELEASED");
    assert_eq!(worker.reserve(5).await, Ok((urgent, "urgent".to_owned())));
    assert_eq!(worker.command(&format!("bury {urgent} 0")).await, "BURIED");
    assert_eq!(producer.command_with_data("peek-buried").await.0, format!("FOUND {urgent} 6"));
    assert_eq!(value(&producer.stats(&format!("stats-job {urgent}")).await, "state"), "buried");
    let tube = producer.stats("stats-tube jobs").await;
    assert_eq!(value(&tube, "name"), "jobs");
    assert_eq!(value(&tube, "current-jobs-buried"), "1");
    assert_eq!(value(&tube, "current-watching"), "1");
    assert_eq!(producer.command("kick 10").await, "KICKED 1");
    assert_eq!(worker.reserve(5).await, Ok((urgent, "urgent".to_owned())));
    assert_eq!(worker.command(&format!("delete {urgent}")).await, "DELETED");
    assert_eq!(producer.command_with_data(&format!("peek {urgent}")).await.0, "NOT_FOUND");

    assert_eq!(worker.reserve(5).await, Ok((normal, "normal".to_owned())));
    assert_eq!(worker.command(&format!("delete {normal}")).await, "DELETED");
    assert_eq!(worker.reserve(5).await, Ok((later, "later".to_owned())));
    assert!(later_put.elapsed() >= Duration::from_millis(400), "a fractional delay is kept to the millisecond");
    assert_eq!(worker.command(&format!("delete {later}")).await, "DELETED");
    assert_eq!(worker.reserve(0).await, Err("TIMED_OUT".to_owned()));
    assert_eq!(producer.command(&format!("kick-job {parked}")).await, "KICKED");
    assert_eq!(worker.reserve(5).await, Ok((parked, "parked".to_owned())));
    assert_eq!(worker.command(&format!("delete {parked}")).await, "DELETED");
    assert_eq!(producer.command(&format!("delete {parked}")).await, "NOT_FOUND");
    assert_eq!(worker.command(&format!("reserve-job {parked}")).await, "NOT_FOUND", "deleted");
    let by_id = producer.put(1024, "60", 60, "by-id").await;
    let (reserved, body) = worker.command_with_data(&format!("reserve-job {by_id}")).await;
    assert_eq!((reserved, body), (format!("RESERVED {by_id} 5"), Some(b"by-id".to_vec())), "a delayed job by id");
    assert_eq!(worker.command(&format!("reserve-job {by_id}")).await, "NOT_FOUND", "reserved already");
    assert_eq!(worker.command(&format!("delete {by_id}")).await, "DELETED");

    // A reservation whose ttr runs out is over: the job is ready for the next
    // reserve, and the old reservation is gone.
    let expires = producer.put(1024, "0", 1, "expires").await;
    assert_eq!(worker.reserve(5).await, Ok((expires, "expires".to_owned())));
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(worker.command(&format!("touch {expires}")).await, "NOT_FOUND", "the ttr ran out");
    assert_eq!(worker.reserve(5).await, Ok((expires, "expires".to_owned())));
    assert_eq!(worker.command(&format!("delete {expires}")).await, "DELETED");

    // A paused tube hands out nothing until the pause runs out.
    assert_eq!(producer.command("pause-tube jobs 1").await, "PAUSED");
    assert_eq!(producer.command("pause-tube nosuchtube 1").await, "NOT_FOUND");
    let paused_at = Instant::now();
    let held = producer.put(1024, "0", 60, "held").await;
    assert_eq!(worker.reserve(0).await, Err("TIMED_OUT".to_owned()));
    assert_eq!(worker.reserve(10).await, Ok((held, "held".to_owned())));
    assert!(paused_at.elapsed() >= Duration::from_millis(900), "held for the pause: {:?}", paused_at.elapsed());

    // A worker that dies holding a reservation gives it back at once, not after its ttr.
    drop(worker);
    let mut survivor = Beanstalk::connect(addr).await;
    assert_eq!(survivor.command("watch jobs").await, "WATCHING 2");
    let died_at = Instant::now();
    assert_eq!(survivor.reserve(20).await, Ok((held, "held".to_owned())));
    assert!(died_at.elapsed() < Duration::from_secs(10), "released on close, not after the 60 s ttr");
    assert_eq!(survivor.command(&format!("delete {held}")).await, "DELETED");

    let stats = producer.stats("stats").await;
    assert!(value(&stats, "cmd-put").parse::<u64>().expect("a count") >= 5);
    assert!(value(&stats, "current-connections").parse::<u64>().expect("a count") >= 2);
    assert_eq!(value(&stats, "current-jobs-ready"), "0");
    let tubes = producer.command_with_data("list-tubes").await.1.expect("a list");
    let tubes = String::from_utf8(tubes).expect("yaml");
    assert!(tubes.starts_with("---\n- default\n") && tubes.contains("- jobs\n"), "{tubes}");
    producer.send(b"quit\r\n").await;
    assert!(producer.closed().await, "quit closes the connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_gets_beanstalkd_errors_and_the_connection_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, addr) = start(dir.path(), &[]).await;
    let mut client = Beanstalk::connect(&addr).await;
    assert_eq!(client.command("bogus").await, "UNKNOWN_COMMAND");
    assert_eq!(client.command("put -1 0 1 1").await, "BAD_FORMAT");
    assert_eq!(client.command("delete abc").await, "BAD_FORMAT");
    assert_eq!(client.command("delete 999999").await, "NOT_FOUND");
    assert_eq!(client.command("use bad*name").await, "BAD_FORMAT");
    assert_eq!(client.command("stats\0").await, "BAD_FORMAT");
    client.send(b"put 0 0 10 4\r\nabcdef\r\n").await;
    assert_eq!(client.line().await, "EXPECTED_CRLF");
    assert_eq!(client.line().await, "UNKNOWN_COMMAND", "the bytes after the body are the next line");
    client.send(b"put 0 0 10 70000\r\n").await;
    client.send(&vec![b'x'; 70_002]).await;
    assert_eq!(client.line().await, "JOB_TOO_BIG");
    client.send(b"put 0 0 10 2\r\n\xff\xfe\r\n").await;
    assert_eq!(client.line().await, "BAD_FORMAT", "a body that is not UTF-8");
    client.send(&vec![b'y'; 1_000_000]).await;
    client.send(b"\r\n").await;
    assert_eq!(client.line().await, "BAD_FORMAT", "a line past 224 bytes");
    assert_eq!(client.command("list-tube-used").await, "USING default", "still serving");
    for tube in 1..256 {
        assert_eq!(client.command(&format!("watch t{tube}")).await, format!("WATCHING {}", tube + 1));
    }
    assert_eq!(client.command("watch one-too-many").await, "OUT_OF_MEMORY", "at most 256 tubes watched");
    assert_eq!(client.command("reserve-with-timeout 0").await, "TIMED_OUT", "a reserve over them all");
    assert_eq!(client.command("peek-ready").await, "NOT_FOUND", "nothing refused was stored");
    client.send(b"put 0 4294967295 1 1\r\nx\r\n").await;
    assert_eq!(client.line().await, "BAD_FORMAT", "a delay past limits.max_delay_ms");
    assert_eq!(client.command("pause-tube default 4294967295").await, "PAUSED", "the longest pause");
    assert_eq!(client.command("reserve-with-timeout 0").await, "TIMED_OUT");
    assert!(server.terminate().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inserted_job_survives_a_kill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port().to_string();
    let addr = format!("127.0.0.1:{port}");
    let env = [("DELAYQ_BEANSTALK_ADDR", addr.as_str())];
    let server = Server::start(dir.path(), &env).await;
    let mut producer = Beanstalk::connect(&addr).await;
    let id = producer.put(1024, "0", 60, "kept").await;
    server.kill9().await;
    let server = Server::start(dir.path(), &env).await;
    let mut worker = Beanstalk::connect(&addr).await;
    assert_eq!(worker.reserve(10).await, Ok((id, "kept".to_owned())));
    assert!(server.terminate().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_wait_and_silent_ones_are_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [("DELAYQ_BEANSTALK__MAX_CONNECTIONS", "2"), ("DELAYQ_BEANSTALK__IDLE_TIMEOUT_MS", "1500")];
    let (server, addr) = start(dir.path(), &env).await;
    let mut first = Beanstalk::connect(&addr).await;
    let mut second = Beanstalk::connect(&addr).await;
    assert_eq!(first.command("list-tube-used").await, "USING default");
    assert_eq!(second.command("list-tube-used").await, "USING default");
    let mut third = Beanstalk::connect(&addr).await;
    third.send(b"list-tube-used\r\n").await;
    let waiting = tokio::time::timeout(Duration::from_millis(500), third.line()).await;
    assert!(waiting.is_err(), "the third connection is not served while two are open");
    first.send(b"quit\r\n").await;
    assert_eq!(third.line().await, "USING default", "served once one closes");
    // Silent past the idle timeout: closed by the server.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert!(second.closed().await, "an idle connection is closed");
    assert!(server.terminate().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_beanstalk_listener_beyond_loopback_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let addr = format!("0.0.0.0:{}", free_port());
    let output = common::serve_until_exit(dir.path(), &[("DELAYQ_BEANSTALK_ADDR", &addr)]).await;
    assert!(!output.status.success(), "refused");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("beanstalk.allow_remote"), "the refusal names the way out: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_jobs_are_seen_over_beanstalk_and_one_without_a_numeric_id_is_given_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, addr) = start(dir.path(), &[]).await;
    let client = server.client();
    let push = serde_json::json!({"topic": "mixed", "body": "from rest", "priority": 0});
    let (status, pushed) = client.post("/push", &push).await.expect("push");
    assert_eq!(status, 200, "{pushed}");
    let rest_id: u64 = pushed["data"]["id"].as_str().and_then(|id| id.parse().ok()).expect("a numeric id");
    let mut worker = Beanstalk::connect(&addr).await;
    assert_eq!(worker.command("watch mixed").await, "WATCHING 2");
    assert_eq!(worker.reserve(5).await, Ok((rest_id, "from rest".to_owned())), "a generated id is a beanstalk id");
    assert_eq!(worker.command(&format!("delete {rest_id}")).await, "DELETED");
    let (status, finished) = client.get(&format!("/jobs/{rest_id}")).await.expect("get");
    assert_eq!((status, finished["data"]["state"].as_str()), (200, Some("finished")), "{finished}");

    let named = serde_json::json!({"topic": "mixed", "id": "order-1", "body": "named"});
    let (status, pushed) = client.post("/push", &named).await.expect("push");
    assert_eq!(status, 200, "{pushed}");
    assert_eq!(worker.reserve(1).await, Err("TIMED_OUT".to_owned()), "a job without a numeric id is not handed out");
    let (_, job) = client.get("/jobs/order-1").await.expect("get");
    let state = job["data"]["state"].as_str();
    assert!(matches!(state, Some("delay" | "ready")), "given back, still waiting: {job}");
    assert!(job["data"]["attempt"].as_u64().is_some_and(|attempt| attempt >= 2), "each give-back counts: {job}");
    assert!(server.terminate().await);
}
