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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::tests::job;

    #[tokio::test]
    async fn confirms_every_job() {
        let jobs = [job("1", "t", None), job("2", "t", Some("s"))];
        let outcomes = LogSink::new().publish(&jobs).await;
        assert_eq!(outcomes, [Ok(()), Ok(())]);
        assert!(LogSink::new().publish(&[]).await.is_empty());
    }
}
