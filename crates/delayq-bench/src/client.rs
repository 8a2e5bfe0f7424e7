//! The HTTP client of the load generator: a pool of keep-alive HTTP/1.1
//! connections driven through hyper's connection API (no per-request work
//! beyond writing the request and reading the answer, so the driver's own CPU
//! stays small next to the server's), pre-built URLs, and answers read only as
//! far as each workload needs.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use crate::error::{BenchError, BenchResult};

/// How long any single request may take; longer than the longest long-poll.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How much of an unexpected answer goes into an error message.
const ERROR_BODY_CHARS: usize = 300;
/// The marker of a refused item in a `/push/batch` answer.
const BATCH_ERROR_MARKER: &[u8] = b"\"error\":";

type Connection = SendRequest<Full<Bytes>>;

/// A delayq server reached over HTTP/1.1 with a pool of keep-alive connections.
#[derive(Clone)]
pub(crate) struct BenchClient {
    pool: Arc<Pool>,
    base_url: String,
    push_url: String,
    batch_url: String,
}

/// Idle connections to the server, one request at a time on each.
struct Pool {
    /// `host:port`, for connecting and the `Host` header.
    authority: String,
    host: HeaderValue,
    idle: Mutex<Vec<Connection>>,
    max_idle: usize,
}

/// A job handed out by `/pop`, with only the fields the workloads read.
#[derive(Debug, Deserialize)]
pub(crate) struct PoppedJob {
    /// The job id, for `/finish`.
    pub(crate) id: String,
    /// The due time the server holds, in epoch ms.
    #[serde(rename = "runAt")]
    pub(crate) run_at_ms: u64,
    /// The body as pushed.
    pub(crate) body: String,
    /// The consumer group of a group's delivery; absent on a topic without groups.
    #[serde(default)]
    pub(crate) group: Option<String>,
}

#[derive(Deserialize)]
struct Envelope<T> {
    data: T,
}

/// The live counts of one topic in `/stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TopicCounts {
    /// Jobs waiting for their due time.
    pub(crate) delay: u64,
    /// Jobs due and not popped.
    pub(crate) ready: u64,
    /// Jobs popped and not finished.
    pub(crate) reserved: u64,
}

impl BenchClient {
    /// Returns a client of `server` (`http://host:port`) keeping up to `pool_size` idle connections.
    ///
    /// # Errors
    /// Returns [`BenchError::Invalid`] when `server` is not a plain `http://host:port` URL.
    pub(crate) fn new(server: &str, pool_size: usize) -> BenchResult<BenchClient> {
        let base_url = server.trim_end_matches('/').to_owned();
        let authority = base_url
            .strip_prefix("http://")
            .filter(|authority| !authority.is_empty() && !authority.contains('/'))
            .ok_or_else(|| BenchError::Invalid(format!("server must be http://host:port, not {server}")))?
            .to_owned();
        let host = HeaderValue::from_str(&authority)
            .map_err(|error| BenchError::Invalid(format!("server {server}: {error}")))?;
        let pool = Pool { authority, host, idle: Mutex::new(Vec::new()), max_idle: pool_size.max(1) };
        let push_url = format!("{base_url}/push");
        let batch_url = format!("{base_url}/push/batch");
        Ok(BenchClient { pool: Arc::new(pool), base_url, push_url, batch_url })
    }

    /// Returns `path` (with its query) on the server.
    pub(crate) fn url(&self, path_and_query: &str) -> String {
        format!("{}{path_and_query}", self.base_url)
    }

    /// Opens `connections` keep-alive connections at once, so no workload pays for
    /// connecting inside its timed phase.
    ///
    /// # Errors
    /// Returns the first failure of a `/health` request.
    pub(crate) async fn open_connections(&self, connections: usize) -> BenchResult<()> {
        let mut requests = JoinSet::new();
        let health_url = self.url("/health");
        for _ in 0..connections {
            let client = self.clone();
            let url = health_url.clone();
            requests.spawn(async move { client.send(Method::GET, &url, None).await });
        }
        while let Some(joined) = requests.join_next().await {
            let (status, body) =
                joined.map_err(|error| BenchError::Invalid(format!("warm-up task failed: {error}")))??;
            expect_ok(&health_url, status, &body)?;
        }
        Ok(())
    }

    /// Sends a request and reads the whole answer, so the connection goes back to the pool.
    async fn send(&self, method: Method, url: &str, json: Option<Bytes>) -> BenchResult<(u16, Bytes)> {
        let http_error =
            |source: Box<dyn std::error::Error + Send + Sync>| BenchError::Http { url: url.to_owned(), source };
        let path = url.strip_prefix(&self.base_url).filter(|path| path.starts_with('/')).unwrap_or(url);
        let mut request = Request::builder().method(method).uri(path).header(HOST, self.pool.host.clone());
        if json.is_some() {
            request = request.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        let request = request.body(Full::new(json.unwrap_or_default())).map_err(|error| http_error(error.into()))?;
        let exchange = async {
            let mut connection = self.pool.take().await?;
            let response = connection.send_request(request).await?;
            let status = response.status().as_u16();
            let body = response.into_body().collect().await?.to_bytes();
            self.pool.give_back(connection);
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, body))
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
            Ok(answer) => answer.map_err(http_error),
            Err(elapsed) => Err(http_error(elapsed.into())),
        }
    }

    async fn post_json(&self, url: &str, payload: Bytes) -> BenchResult<(u16, Bytes)> {
        self.send(Method::POST, url, Some(payload)).await
    }

    /// Pushes one pre-serialized job; `Ok(false)` when the server refused it.
    ///
    /// # Errors
    /// Returns [`BenchError::Http`] when the request itself failed.
    pub(crate) async fn push(&self, payload: Bytes) -> BenchResult<bool> {
        let (status, _) = self.post_json(&self.push_url, payload).await?;
        Ok(status == 200)
    }

    /// Sends one pre-serialized `/push` body; returns the answer's status and body.
    ///
    /// # Errors
    /// Returns [`BenchError::Http`] when the request itself failed.
    pub(crate) async fn push_status(&self, payload: Bytes) -> BenchResult<(u16, Bytes)> {
        self.post_json(&self.push_url, payload).await
    }

    /// Pushes a pre-serialized `{"jobs":[…]}` of `job_count` jobs; returns how many were refused.
    ///
    /// # Errors
    /// Returns [`BenchError::Http`] when the request itself failed.
    pub(crate) async fn push_batch(&self, payload: Bytes, job_count: usize) -> BenchResult<usize> {
        let (status, body) = self.post_json(&self.batch_url, payload).await?;
        if status != 200 {
            return Ok(job_count);
        }
        Ok(count_batch_errors(&body))
    }

    /// Sends a pop whose URL the caller built once; returns the raw answer.
    ///
    /// # Errors
    /// Returns [`BenchError::Http`] or [`BenchError::Status`].
    pub(crate) async fn pop_raw(&self, pop_url: &str) -> BenchResult<Bytes> {
        let (status, body) = self.send(Method::GET, pop_url, None).await?;
        expect_ok(pop_url, status, &body)?;
        Ok(body)
    }

    /// Acknowledges a popped job, or `group`'s delivery of it; `Ok(false)` when the
    /// server refused.
    ///
    /// # Errors
    /// Returns [`BenchError::Http`] when the request itself failed.
    pub(crate) async fn finish(&self, job_id: &str, group: Option<&str>) -> BenchResult<bool> {
        let url = self.url(&finish_path(job_id, group));
        let (status, _) = self.send(Method::POST, &url, None).await?;
        Ok(status == 200)
    }

    /// Declares consumer group `group` of `topic`.
    ///
    /// # Errors
    /// Returns [`BenchError::Http`], or [`BenchError::Status`] for any answer but 200.
    pub(crate) async fn declare_group(&self, topic: &str, group: &str) -> BenchResult<()> {
        let url = self.url(&group_path(topic, group));
        let (status, body) = self.send(Method::PUT, &url, None).await?;
        expect_ok(&url, status, &body)
    }

    /// Deletes a live job.
    ///
    /// # Errors
    /// Returns [`BenchError::Http`] or [`BenchError::Status`].
    pub(crate) async fn delete(&self, job_id: &str) -> BenchResult<()> {
        let url = self.url(&format!("/delete?jobId={job_id}"));
        let (status, body) = self.send(Method::POST, &url, None).await?;
        expect_ok(&url, status, &body)
    }

    /// Calls `/clearAll`; returns how many jobs were cleared when the server says.
    ///
    /// # Errors
    /// Returns [`BenchError::Http`] or [`BenchError::Status`].
    pub(crate) async fn clear_all(&self) -> BenchResult<Option<u64>> {
        let url = self.url("/clearAll");
        let (status, body) = self.send(Method::POST, &url, None).await?;
        expect_ok(&url, status, &body)?;
        let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        Ok(answer.pointer("/data/cleared").and_then(Value::as_u64))
    }

    /// Pushes one throw-away job to `topic` and deletes it, so the server's push path is warm.
    ///
    /// # Errors
    /// Returns any failure of the push or the delete.
    pub(crate) async fn warm_push(&self, topic: &str, body: &str) -> BenchResult<()> {
        let item = crate::body::push_item(topic, crate::body::DueTime::DelayMs(3_600_000), body);
        let (status, answer) = self.post_json(&self.push_url, Bytes::from(item)).await?;
        expect_ok(&self.push_url, status, &answer)?;
        let pushed: Envelope<Value> = parse_json(&self.push_url, &answer)?;
        let Some(job_id) = pushed.data.get("id").and_then(Value::as_str) else {
            return Err(protocol(&self.push_url, "no data.id in the push answer"));
        };
        self.delete(job_id).await
    }

    /// Returns the live counts of `topic` from `/stats`.
    ///
    /// # Errors
    /// Returns a request failure, or [`BenchError::Protocol`] when the topic is not found.
    pub(crate) async fn topic_counts(&self, topic: &str) -> BenchResult<TopicCounts> {
        let (url, stats) = self.stats().await?;
        find_topic_counts(&stats, topic).ok_or_else(|| protocol(&url, &format!("no counts for topic {topic}")))
    }

    /// Returns the horizon's loaded mark from `/stats` (`data.horizon.loadedUntil`,
    /// epoch ms): every live job due by then is in the scheduler. `None` when the
    /// server shows no horizon or has loaded nothing yet.
    pub(crate) async fn horizon_loaded_until(&self) -> BenchResult<Option<u64>> {
        let (_, stats) = self.stats().await?;
        Ok(stats.pointer("/data/horizon/loadedUntil").and_then(Value::as_u64))
    }

    /// Returns `/stats`, parsed, with its URL.
    async fn stats(&self) -> BenchResult<(String, Value)> {
        let url = self.url("/stats");
        let (status, body) = self.send(Method::GET, &url, None).await?;
        expect_ok(&url, status, &body)?;
        let stats: Value = parse_json(&url, &body)?;
        Ok((url, stats))
    }
}

impl Pool {
    /// Returns an idle connection that is still open, or a new one.
    async fn take(&self) -> Result<Connection, Box<dyn std::error::Error + Send + Sync>> {
        loop {
            let idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
            match idle {
                Some(mut connection) if !connection.is_closed() => {
                    if connection.ready().await.is_ok() {
                        return Ok(connection);
                    }
                }
                Some(_) => {}
                None => break,
            }
        }
        let stream = TcpStream::connect(&self.authority).await?;
        stream.set_nodelay(true)?;
        let (connection, driver) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            // Ends when the connection closes; its requests see the error.
            let _closed = driver.await;
        });
        Ok(connection)
    }

    fn give_back(&self, connection: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < self.max_idle {
            idle.push(connection);
        }
    }
}

/// Returns the `/pop` path and query that long-polls `topic`, or `group`'s deliveries of it.
pub(crate) fn pop_path(topic: &str, group: Option<&str>, count: usize, timeout_ms: u64) -> String {
    match group {
        Some(group) => format!("/pop?topic={topic}&group={group}&count={count}&timeout={timeout_ms}"),
        None => format!("/pop?topic={topic}&count={count}&timeout={timeout_ms}"),
    }
}

/// Returns the `/finish` path and query of job `job_id`, or of `group`'s delivery of it.
fn finish_path(job_id: &str, group: Option<&str>) -> String {
    match group {
        Some(group) => format!("/finish?jobId={job_id}&group={group}"),
        None => format!("/finish?jobId={job_id}"),
    }
}

/// Returns the path that declares consumer group `group` of `topic`.
fn group_path(topic: &str, group: &str) -> String {
    format!("/topics/{topic}/groups/{group}")
}

/// Parses the jobs of a `/pop` answer.
///
/// # Errors
/// Returns [`BenchError::Protocol`] when the answer is not the documented envelope.
pub(crate) fn parse_popped(pop_url: &str, answer: &[u8]) -> BenchResult<Vec<PoppedJob>> {
    let envelope: Envelope<Vec<PoppedJob>> = parse_json(pop_url, answer)?;
    Ok(envelope.data)
}

fn parse_json<T: for<'de> Deserialize<'de>>(url: &str, answer: &[u8]) -> BenchResult<T> {
    serde_json::from_slice(answer).map_err(|error| protocol(url, &error.to_string()))
}

fn protocol(url: &str, detail: &str) -> BenchError {
    BenchError::Protocol { from: url.to_owned(), detail: detail.to_owned() }
}

fn expect_ok(url: &str, status: u16, body: &[u8]) -> BenchResult<()> {
    if status == 200 {
        return Ok(());
    }
    let text: String = String::from_utf8_lossy(body).chars().take(ERROR_BODY_CHARS).collect();
    Err(BenchError::Status { url: url.to_owned(), status, body: text })
}

/// Counts the `{"error":…}` items of a batch answer without parsing it.
fn count_batch_errors(answer: &[u8]) -> usize {
    answer.windows(BATCH_ERROR_MARKER.len()).filter(|window| *window == BATCH_ERROR_MARKER).count()
}

/// Finds the counts of `topic` in a `/stats` answer: `data.topics.<topic>` first, else
/// any object under a key equal to the topic that has a numeric `delay`.
fn find_topic_counts(stats: &Value, topic: &str) -> Option<TopicCounts> {
    if let Some(counts) = stats.pointer("/data/topics").and_then(|topics| topics.get(topic)) {
        return counts_of(counts);
    }
    search_topic(stats, topic)
}

fn search_topic(value: &Value, topic: &str) -> Option<TopicCounts> {
    match value {
        Value::Object(fields) => {
            if let Some(counts) = fields.get(topic).and_then(counts_of) {
                return Some(counts);
            }
            fields.values().find_map(|child| search_topic(child, topic))
        }
        Value::Array(items) => items.iter().find_map(|item| {
            let names_topic = item.get("topic").and_then(Value::as_str) == Some(topic);
            if names_topic {
                counts_of(item)
            } else {
                search_topic(item, topic)
            }
        }),
        _ => None,
    }
}

fn counts_of(value: &Value) -> Option<TopicCounts> {
    let count = |field: &str| value.get(field).and_then(Value::as_u64).unwrap_or(0);
    value.get("delay").and_then(Value::as_u64)?;
    Some(TopicCounts { delay: count("delay"), ready: count("ready"), reserved: count("reserved") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_counts_come_from_data_topics() {
        let stats = serde_json::json!({"success": true, "data": {
            "topics": {"a": {"delay": 3, "ready": 1, "reserved": 0, "finished": 9}},
            "totals": {"delay": 3}
        }});
        assert_eq!(find_topic_counts(&stats, "a"), Some(TopicCounts { delay: 3, ready: 1, reserved: 0 }));
        assert_eq!(find_topic_counts(&stats, "b"), None);
    }

    #[test]
    fn topic_counts_are_found_in_other_shapes() {
        let listed = serde_json::json!({"data": {"queues": [{"topic": "a", "delay": 5}]}});
        assert_eq!(find_topic_counts(&listed, "a"), Some(TopicCounts { delay: 5, ready: 0, reserved: 0 }));
        let nested = serde_json::json!({"data": {"live": {"a": {"delay": 2, "ready": 7}}}});
        assert_eq!(find_topic_counts(&nested, "a"), Some(TopicCounts { delay: 2, ready: 7, reserved: 0 }));
    }

    #[test]
    fn batch_errors_are_counted() {
        let answer = br#"{"success":true,"data":[{"id":"1","runAt":5},{"error":"delay must be >= 0"},{"error":"x"}]}"#;
        assert_eq!(count_batch_errors(answer), 2);
        assert_eq!(count_batch_errors(b"{}"), 0);
    }

    #[test]
    fn popped_jobs_parse_from_the_envelope() {
        let answer = br#"{"success":true,"message":"ok","data":[{"id":"9","topic":"t","subtopic":null,
            "body":"{\"i\":1,\"due\":5,\"pad\":\"\"}","attempt":0,"runAt":5,"ttr":30000,"priority":1,"bizKey":null}]}"#;
        let Ok(jobs) = parse_popped("pop", answer) else { panic!("valid answer") };
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].id, "9");
        assert_eq!(jobs[0].run_at_ms, 5);
        assert_eq!(crate::body::parse_body_fields(&jobs[0].body), Some((1, 5)));
        assert_eq!(jobs[0].group, None);
    }

    #[test]
    fn a_group_delivery_names_its_group() {
        let answer = br#"{"success":true,"data":[{"id":"9","topic":"t","group":"g1","body":"b","runAt":5}]}"#;
        let Ok(jobs) = parse_popped("pop", answer) else { panic!("valid answer") };
        assert_eq!(jobs[0].group.as_deref(), Some("g1"));
    }

    #[test]
    fn urls_name_the_group_only_when_there_is_one() {
        assert_eq!(pop_path("t", None, 100, 1000), "/pop?topic=t&count=100&timeout=1000");
        assert_eq!(pop_path("t", Some("g3"), 100, 1000), "/pop?topic=t&group=g3&count=100&timeout=1000");
        assert_eq!(finish_path("42", None), "/finish?jobId=42");
        assert_eq!(finish_path("42", Some("g0")), "/finish?jobId=42&group=g0");
        assert_eq!(group_path("bench-1", "g9"), "/topics/bench-1/groups/g9");
    }
}
