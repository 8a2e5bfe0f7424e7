//! The log sink: each due job becomes a log line (never its body).

use async_trait::async_trait;
use delayq_common::Job;
use tracing::info;

use crate::error::SinkError;
use crate::sink::Sink;

/// Writes each due job's id, topic and attempt to the log; always confirms.
#[derive(Debug, Default)]
pub struct LogSink;

impl LogSink {
    /// Creates the sink.
    pub fn new() -> LogSink {
        LogSink
    }
}

#[async_trait]
impl Sink for LogSink {
    fn kind(&self) -> &'static str {
        "log"
    }

    async fn publish(&self, jobs: &[Job]) -> Vec<Result<(), SinkError>> {
        for job in jobs {
            info!(job_id = %job.id, topic = %job.topic, attempt = job.attempt, run_at = %job.run_at, "job due");
        }
        jobs.iter().map(|_| Ok(())).collect()
    }
}
