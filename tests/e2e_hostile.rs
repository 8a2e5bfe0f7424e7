//! Hostile clients against the real binary: a corpus of malformed,
//! oversized and deeply nested requests sent over raw TCP, clients that never
//! finish their headers, and more connections than the server allows. After
//! each, the server must still answer promptly, serve a normal push, pop and
//! finish, and its memory must have stayed bounded.

mod common;

use std::time::{Duration, Instant};

use common::Server;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The most the server's peak resident memory may exceed its resident memory
/// before the corpus. The corpus sends at most [`CONCURRENT_BIG`] requests of
/// up to [`BIG_BODY`] bytes at once; each costs the body (held once as read)
/// plus at most one job's worth of parsed values, so their share is about
/// 4 × 16 MiB. The rest is room for the allocator keeping freed pages. A
/// server that turned a 15 MiB body of tiny entries into values would need
/// several hundred MiB for each.
const PEAK_GROWTH_BOUND_KB: u64 = 200 * 1024;
/// Bodies sent together to press on memory.
const CONCURRENT_BIG: usize = 4;
/// Just under the default request ceiling (16 MiB).
const BIG_BODY: usize = 15 * 1024 * 1024;

/// Reads a field (`VmRSS`, `VmHWM`) of `/proc/<pid>/status`, in kB.
fn proc_status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

fn address(server: &Server) -> String {
    server.base_url.trim_start_matches("http://").to_owned()
}

/// What came back on a connection.
struct Outcome {
    answer: Vec<u8>,
    /// Whether the server closed (or reset) the connection.
    closed: bool,
}

/// Sends raw bytes on a new connection and collects what comes back until
/// the server closes it, the answer stops for a moment, or `wait` passes.
async fn exchange_raw(addr: &str, request: &[u8], wait: Duration) -> Outcome {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    // The server may answer and close before the whole request is written.
    let _ = stream.write_all(request).await;
    let deadline = tokio::time::Instant::now() + wait;
    let mut answer = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let until = if answer.is_empty() {
            deadline
        } else {
            deadline.min(tokio::time::Instant::now() + Duration::from_millis(300))
        };
        match tokio::time::timeout_at(until, stream.read(&mut buffer)).await {
            Ok(Ok(0) | Err(_)) => return Outcome { answer, closed: true },
            Ok(Ok(read)) => answer.extend_from_slice(buffer.get(..read).unwrap_or_default()),
            Err(_) => return Outcome { answer, closed: false },
        }
    }
}

/// The status of the first response in `answer`, if one started.
fn status_of(answer: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(answer.get(..answer.len().min(64))?).ok()?;
    text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

fn post(path: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

fn get(path_and_query: &str) -> Vec<u8> {
    format!("GET {path_and_query} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").into_bytes()
}

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// Requests a hostile client might send, each with a name for failure messages.
fn corpus() -> Vec<(&'static str, Vec<u8>)> {
    let mut corpus = broken_http();
    corpus.extend(hostile_values());
    let mut pipelined: Vec<u8> = (0..200).flat_map(|_| b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()).collect();
    pipelined.extend_from_slice(&get("/health"));
    corpus.push(("two hundred pipelined requests", pipelined));
    corpus
}

/// Requests whose HTTP framing is broken: request lines, headers, lengths, chunks.
fn broken_http() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("garbage request line", b"GARBAGE\r\n\r\n".to_vec()),
        ("binary noise", (0..=255u8).cycle().take(4096).collect()),
        ("unknown version", b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n".to_vec()),
        ("header without colon", b"GET /health HTTP/1.1\r\nHost x\r\n\r\n".to_vec()),
        ("control bytes in a header", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: \x00\x01\x7f\r\n\r\n".to_vec()),
        ("bare LF line ends", b"GET /health HTTP/1.1\nHost: x\n\n".to_vec()),
        (
            "absolute-form target",
            b"GET http://evil.example/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(),
        ),
        ("HTTP/1.0 without host", b"GET /health HTTP/1.0\r\n\r\n".to_vec()),
        (
            "oversized header",
            format!("GET /health HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(1 << 20)).into_bytes(),
        ),
        (
            "ten thousand headers",
            format!("GET /health HTTP/1.1\r\nHost: x\r\n{}\r\n", "X-H: v\r\n".repeat(10_000)).into_bytes(),
        ),
        ("megabyte target", format!("GET /pop?topic={} HTTP/1.1\r\nHost: x\r\n\r\n", "t".repeat(1 << 20)).into_bytes()),
        (
            "huge content-length, no body",
            b"POST /push HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999\r\n\r\n".to_vec(),
        ),
        (
            "content-length past u64",
            b"POST /push HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n".to_vec(),
        ),
        ("negative content-length", b"POST /push HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n".to_vec()),
        (
            "two content-lengths",
            b"POST /push HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}".to_vec(),
        ),
        (
            "bad chunk size",
            b"POST /push HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\n{}\r\n0\r\n\r\n".to_vec(),
        ),
        (
            "endless chunk size",
            b"POST /push HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFFFF\r\n".to_vec(),
        ),
    ]
}

/// Well-framed requests with hostile values: JSON, numbers, queries, paths, sizes, nesting.
fn hostile_values() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("not JSON", post("/push", b"hello")),
        ("empty body", post("/push", b"")),
        ("invalid UTF-8 in a string", post("/push", b"{\"topic\":\"t\",\"body\":\"\xff\xfe\xc0\"}")),
        ("invalid UTF-8 outside strings", post("/push", b"{\"topic\":\"t\",\xff\"body\":\"b\"}")),
        ("lone surrogate escape", post("/push", br#"{"topic":"t","body":"\ud800"}"#)),
        ("NUL in a topic", post("/push", br#"{"topic":"t\u0000","body":"b"}"#)),
        ("delay at i64::MAX", post("/push", br#"{"topic":"t","body":"b","delay":9223372036854775807}"#)),
        ("delay past i64::MAX", post("/push", br#"{"topic":"t","body":"b","delay":9223372036854775808}"#)),
        ("delay at u64::MAX", post("/push", br#"{"topic":"t","body":"b","delay":18446744073709551615}"#)),
        ("delay past u64::MAX", post("/push", br#"{"topic":"t","body":"b","delay":18446744073709551616}"#)),
        ("delay at i64::MIN", post("/push", br#"{"topic":"t","body":"b","delay":-9223372036854775808}"#)),
        ("runAt past u64::MAX", post("/push", br#"{"topic":"t","body":"b","runAt":1e400}"#)),
        ("createTime at u64::MAX", post("/push", br#"{"topic":"t","body":"b","createTime":18446744073709551615}"#)),
        ("Youzan delay at u64::MAX seconds", post("/topic/t/job", br#"{"body":"b","delay":18446744073709551615}"#)),
        ("Youzan ttr at u64::MAX seconds", post("/topic/t/job", br#"{"body":"b","ttr":18446744073709551615}"#)),
        ("float ttr", post("/push", br#"{"topic":"t","body":"b","ttr":1000.5}"#)),
        ("float priority", post("/push", br#"{"topic":"t","body":"b","priority":1.0}"#)),
        ("exponent delay", post("/push", br#"{"topic":"t","body":"b","delay":1e3}"#)),
        (
            "retryBackoff at u64::MAX",
            post("/push", br#"{"topic":"t","body":"b","retryBackoff":[18446744073709551615]}"#),
        ),
        ("duplicated JSON keys", post("/push", br#"{"topic":"t","topic":"u","body":"b","body":7}"#)),
        ("duplicated jobs key", post("/push/batch", br#"{"jobs":[],"jobs":[{"topic":"t","body":"b"}]}"#)),
        ("duplicated query keys", get("/pop?topic=a&topic=b&count=1&count=100&count=-1")),
        ("percent garbage in a query", get("/pop?topic=%zz%&count=%%%&timeout=%ff")),
        ("percent-encoded invalid UTF-8", get("/pop?topic=%ff%fe%c0%80&count=1")),
        ("percent garbage in a path", get("/jobs/%ff%fe%00")),
        ("encoded slash in a path", get("/topic/a%2Fb/job")),
        ("query of only separators", get("/pop?&&&==&=&")),
        ("listing with a garbage cursor", get("/jobs?topic=t&state=ready&cursor=%00%ff&limit=99999999999999999999")),
        ("finish with a non-string result", post("/finish?jobId=x", br#"{"result":{"a":[1,2,3]}}"#)),
        (
            "finish with an oversized result",
            post("/finish?jobId=x", format!(r#"{{"result":"{}"}}"#, "r".repeat(70_000)).as_bytes()),
        ),
        (
            "deep nesting in a push",
            post("/push", format!(r#"{{"topic":"t","body":"b","x":{}}}"#, nested(10_000)).as_bytes()),
        ),
        ("deep nesting as the body", post("/push", nested(10_000).as_bytes())),
        (
            "deep nesting in a batch entry",
            post("/push/batch", format!(r#"{{"jobs":[{}]}}"#, nested(10_000)).as_bytes()),
        ),
        ("deep nesting in a finish", post("/finish?jobId=x", format!(r#"{{"result":{}}}"#, nested(10_000)).as_bytes())),
        (
            "deep object nesting",
            post("/push", format!("{}{}", r#"{"a":"#.repeat(10_000), "}".repeat(10_000)).as_bytes()),
        ),
        (
            "huge retryBackoff array",
            post(
                "/push",
                format!(r#"{{"topic":"t","body":"b","retryBackoff":[{}]}}"#, vec!["1"; 500_000].join(",")).as_bytes(),
            ),
        ),
        (
            "a million batch entries",
            post("/push/batch", format!(r#"{{"jobs":[{}]}}"#, vec!["{}"; 1_000_000].join(",")).as_bytes()),
        ),
    ]
}

/// Batches just under the request ceiling that are cheap as bytes and
/// costly as values; that route reads bodies up to the ceiling.
fn big_bodies() -> Vec<(&'static str, Vec<u8>)> {
    let tiny_entries = format!(r#"{{"jobs":[{}]}}"#, vec!["{}"; BIG_BODY / 3].join(","));
    let one_huge_entry = format!(r#"{{"jobs":[[{}]]}}"#, vec!["0"; BIG_BODY / 2].join(","));
    let empty_arrays = format!(r#"{{"jobs":[[{}]]}}"#, vec!["[]"; BIG_BODY / 3].join(","));
    let padded_job = format!(r#"{{"topic":"big","body":"b","pad":[{}]}}"#, vec!["0"; 7_000].join(","));
    let padded_jobs = format!(r#"{{"jobs":[{}]}}"#, vec![padded_job.as_str(); 1000].join(","));
    vec![
        ("15 MiB of tiny batch entries", post("/push/batch", tiny_entries.as_bytes())),
        ("one 15 MiB batch entry of numbers", post("/push/batch", one_huge_entry.as_bytes())),
        ("one 15 MiB batch entry of empty arrays", post("/push/batch", empty_arrays.as_bytes())),
        ("1,000 padded jobs", post("/push/batch", padded_jobs.as_bytes())),
    ]
}

/// `/health` answers within a second.
async fn assert_healthy(server: &Server) {
    let started = Instant::now();
    let outcome = exchange_raw(&address(server), &get("/health"), Duration::from_secs(1)).await;
    assert_eq!(status_of(&outcome.answer), Some(200), "health: {}", String::from_utf8_lossy(&outcome.answer));
    assert!(started.elapsed() < Duration::from_secs(1), "health took {:?}", started.elapsed());
}

/// A normal push, pop and finish still work.
async fn assert_serves_jobs(server: &Server, topic: &str) {
    let client = server.client();
    let (status, pushed) = client.post("/push", &json!({"topic": topic, "body": "after"})).await.expect("push");
    assert_eq!(status, 200, "{pushed}");
    let id = pushed["data"]["id"].as_str().expect("id").to_owned();
    let (status, popped) = client.get(&format!("/pop?topic={topic}&timeout=2000")).await.expect("pop");
    assert_eq!((status, popped["data"][0]["id"].as_str()), (200, Some(id.as_str())), "{popped}");
    let (status, finished) =
        client.post(&format!("/finish?jobId={id}"), &json!({"result": "ok"})).await.expect("finish");
    assert_eq!(status, 200, "{finished}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hostile_corpus_leaves_the_server_serving_with_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let addr = address(&server);
    assert_serves_jobs(&server, "warmup").await;
    let rss_before = proc_status_kb(server.pid(), "VmRSS");

    for (name, request) in corpus() {
        let Outcome { answer, closed } = exchange_raw(&addr, &request, Duration::from_secs(5)).await;
        let status = status_of(&answer);
        assert!(status.is_none_or(|status| status < 500), "{name}: {}", String::from_utf8_lossy(&answer));
        assert!(!answer.is_empty() || closed, "{name}: neither answered nor closed within 5 s");
        if name == "huge content-length, no body" {
            assert_eq!(status, Some(413), "{name}: refused at once, not waited for");
        }
    }

    let big = big_bodies();
    for round in 0..2 {
        let owned: Vec<_> = big
            .iter()
            .cycle()
            .skip(round)
            .take(CONCURRENT_BIG)
            .map(|(name, request)| (*name, request.clone()))
            .collect();
        let sends = owned.into_iter().map(|(name, request)| {
            let addr = addr.clone();
            async move { (name, exchange_raw(&addr, &request, Duration::from_secs(30)).await) }
        });
        for (name, outcome) in common::join_spawned(sends).await {
            let status = status_of(&outcome.answer);
            let answer = String::from_utf8_lossy(outcome.answer.get(..300).unwrap_or(&outcome.answer)).into_owned();
            assert!(status.is_some_and(|status| status == 200 || status == 400), "{name}: {answer}");
        }
    }

    assert_healthy(&server).await;
    assert_serves_jobs(&server, "after-corpus").await;
    let peak = proc_status_kb(server.pid(), "VmHWM");
    assert!(
        peak <= rss_before + PEAK_GROWTH_BOUND_KB,
        "peak RSS {peak} kB grew more than {PEAK_GROWTH_BOUND_KB} kB over {rss_before} kB"
    );
    assert!(server.terminate().await, "clean shutdown after the corpus");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clients_that_never_finish_their_headers_are_disconnected() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[("DELAYQ_SERVER__HEADER_READ_TIMEOUT_MS", "1000")]).await;
    let addr = address(&server);
    let mut streams = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let mut stream = TcpStream::connect(&addr).await.expect("connect");
        stream.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n").await.expect("partial headers");
        streams.push(stream);
    }
    let opened = Instant::now();
    let waits = streams.into_iter().map(|mut stream| async move {
        let mut rest = Vec::new();
        // End of stream or a reset: either way the server closed it.
        tokio::time::timeout(Duration::from_secs(6), stream.read_to_end(&mut rest)).await.is_ok()
    });
    let closed = common::join_spawned(waits).await;
    let still_open = closed.iter().filter(|closed| !**closed).count();
    assert_eq!(still_open, 0, "connections still open {:?} after their headers stalled", opened.elapsed());
    assert_healthy(&server).await;
    assert_serves_jobs(&server, "after-slow-clients").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connections_past_the_cap_wait_until_one_closes() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("DELAYQ_SERVER__MAX_CONNECTIONS", "8"), ("DELAYQ_SERVER__HEADER_READ_TIMEOUT_MS", "30000")];
    let server = Server::start(dir.path(), &env).await;
    let addr = address(&server);
    let rss_before = proc_status_kb(server.pid(), "VmRSS");
    let mut holders = Vec::new();
    for _ in 0..8 {
        let mut stream = TcpStream::connect(&addr).await.expect("connect");
        stream.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n").await.expect("partial headers");
        holders.push(stream);
    }
    // Past the cap, each connection also sends 64 KiB of headers it never ends.
    let mut crowd = Vec::new();
    for _ in 0..500 {
        let Ok(mut stream) = TcpStream::connect(&addr).await else { break };
        let header = format!("GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: {}", "p".repeat(64 * 1024));
        let _ = tokio::time::timeout(Duration::from_millis(50), stream.write_all(header.as_bytes())).await;
        crowd.push(stream);
    }

    let mut waiting = TcpStream::connect(&addr).await.expect("connect past the cap");
    waiting.write_all(&get("/health")).await.expect("request past the cap");
    let mut answer = Vec::new();
    let early = tokio::time::timeout(Duration::from_millis(1500), waiting.read_to_end(&mut answer)).await;
    assert!(early.is_err() && answer.is_empty(), "answered past the cap: {}", String::from_utf8_lossy(&answer));
    let rss_crowded = proc_status_kb(server.pid(), "VmRSS");
    assert!(
        rss_crowded < rss_before + 16 * 1024,
        "connections past the cap cost memory: {rss_before} -> {rss_crowded} kB"
    );

    drop(crowd);
    drop(holders);
    let late = tokio::time::timeout(Duration::from_secs(5), waiting.read_to_end(&mut answer)).await;
    assert!(late.is_ok(), "the waiting connection was served once others closed");
    assert_eq!(status_of(&answer), Some(200), "{}", String::from_utf8_lossy(&answer));
    assert_healthy(&server).await;
}
