use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::{serve, PutFloorArgs, Store};

fn args(store: &str, log: std::path::PathBuf) -> PutFloorArgs {
    PutFloorArgs {
        listen: "127.0.0.1:0".into(),
        store: store.into(),
        log,
        ring_mib: 1,
        redis_url: None,
        redis_prefix: delayq_testkit::unique_name("put_floor"),
    }
}

/// Starts the floor on `args`' store; returns a connection to it.
async fn start(args: &PutFloorArgs) -> BufReader<TcpStream> {
    // Opening a database store runs a runtime of its own, so not on this one's thread.
    let opening = args.clone();
    let store =
        tokio::task::spawn_blocking(move || Store::open(&opening)).await.expect("open").expect("the store opens");
    let (sender, receiver) = mpsc::unbounded_channel();
    std::thread::spawn(move || store.commit_loop(receiver));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(serve(listener, sender));
    BufReader::new(TcpStream::connect(address).await.expect("connect"))
}

/// Sends `bytes` and reads `lines` answer lines.
async fn exchange(connection: &mut BufReader<TcpStream>, bytes: &[u8], lines: usize) -> Vec<String> {
    connection.get_mut().write_all(bytes).await.expect("send");
    let mut answers = Vec::new();
    for _ in 0..lines {
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(10), connection.read_line(&mut line))
            .await
            .expect("an answer in time")
            .expect("read");
        answers.push(line.trim_end().to_owned());
    }
    answers
}

#[tokio::test]
async fn a_put_is_in_the_appended_log_before_it_is_inserted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("floor.log");
    let mut connection = start(&args("file", log.clone())).await;
    let answers = exchange(&mut connection, b"use t\r\nput 0 0 60 5\r\nhello\r\nput 1 2 60 3\r\nabc\r\n", 3).await;
    assert_eq!(answers, ["USING t", "INSERTED 1", "INSERTED 2"]);
    let written = std::fs::read(&log).expect("the log");
    assert_eq!(written, b"put 0 0 60 5\r\nhello\r\nput 1 2 60 3\r\nabc\r\n");
    let stats = exchange(&mut connection, b"stats-tube t\r\n", 6).await;
    assert!(stats.first().is_some_and(|line| line.starts_with("OK ")), "{stats:?}");
    assert!(stats.contains(&"current-jobs-delayed: 2".to_owned()), "{stats:?}");
}

#[tokio::test]
async fn the_ring_log_keeps_its_size_and_wraps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("ring.log");
    let mut connection = start(&args("ring", log.clone())).await;
    assert_eq!(std::fs::metadata(&log).expect("the ring").len(), 1 << 20);
    let body = "x".repeat(400_000);
    let put = format!("put 0 0 60 {}\r\n{body}\r\n", body.len());
    for id in 1..=3 {
        assert_eq!(exchange(&mut connection, put.as_bytes(), 1).await, [format!("INSERTED {id}")]);
    }
    let written = std::fs::read(&log).expect("the ring");
    assert_eq!(written.len(), 1 << 20, "the ring never grows");
    assert!(written.starts_with(put.as_bytes()), "the third put wrapped to the start");
}

#[tokio::test]
async fn a_body_without_its_crlf_and_an_unknown_command_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut connection = start(&args("file", dir.path().join("floor.log"))).await;
    let answers = exchange(&mut connection, b"put 0 0 60 2\r\nabcd\r\nfrobnicate\r\n", 3).await;
    assert_eq!(answers, ["EXPECTED_CRLF", "UNKNOWN_COMMAND", "UNKNOWN_COMMAND"]);
    assert!(Store::open(&args("tape", dir.path().join("x"))).is_err(), "an unknown store is refused");
}

#[tokio::test]
async fn a_put_is_in_mariadb_and_redis_before_it_is_inserted() {
    let (Some(mysql_url), Some(redis_url)) =
        (delayq_testkit::service("DELAYQ_TEST_MYSQL_URL"), delayq_testkit::service("DELAYQ_TEST_REDIS_URL"))
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut floor = args(&mysql_url, dir.path().join("unused"));
    floor.redis_url = Some(redis_url.clone());
    let mut connection = start(&floor).await;
    let body = delayq_testkit::unique_name("body");
    let put = format!("put 0 0 60 {}\r\n{body}\r\n", body.len());
    let answer = exchange(&mut connection, put.as_bytes(), 1).await;
    let id: i64 = answer
        .first()
        .and_then(|line| line.strip_prefix("INSERTED "))
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("INSERTED <id>, got {answer:?}"));

    let mut database = <sqlx::MySqlConnection as sqlx::Connection>::connect(&mysql_url).await.expect("MariaDB");
    let record: Vec<u8> = sqlx::query_scalar("SELECT record FROM delayq_put_floor WHERE id = ?")
        .bind(id)
        .fetch_one(&mut database)
        .await
        .expect("the row");
    assert_eq!(record, put.as_bytes());

    let client = redis::Client::open(redis_url.as_str()).expect("Redis URL");
    let mut redis = client.get_multiplexed_async_connection().await.expect("Redis");
    let jobs_key = format!("{}:jobs", floor.redis_prefix);
    let due_key = format!("{}:due", floor.redis_prefix);
    let scheduled: Option<Vec<u8>> =
        redis::cmd("HGET").arg(&jobs_key).arg(id).query_async(&mut redis).await.expect("HGET");
    let due: Option<f64> = redis::cmd("ZSCORE").arg(&due_key).arg(id).query_async(&mut redis).await.expect("ZSCORE");
    let _: i64 = redis::cmd("DEL").arg(&jobs_key).arg(&due_key).query_async(&mut redis).await.expect("DEL");
    assert_eq!(scheduled.as_deref(), Some(put.as_bytes()));
    assert_eq!(due, Some(id as f64));
}
