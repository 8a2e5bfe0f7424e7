//! The Kafka sink: an idempotent producer with `acks=all`; a delivery report is the confirmation.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use delayq_common::Job;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;

use crate::error::SinkError;
use crate::sink::{message_headers, Sink, Template};

const KIND: &str = "kafka";
/// Producer properties delayq sets itself: at-least-once depends on them.
const FIXED_PROPERTIES: [&str; 4] = ["bootstrap.servers", "enable.idempotence", "acks", "message.timeout.ms"];

/// Produces each job as a record keyed by its subtopic (else its id).
pub struct KafkaSink {
    producer: FutureProducer,
    topic: Template,
    timeout: Duration,
}

impl KafkaSink {
    /// Creates the producer; librdkafka connects in the background.
    ///
    /// # Errors
    /// A malformed topic template, a fixed property overridden, or a property librdkafka refuses.
    pub fn new(
        brokers: &str,
        topic: &str,
        properties: &BTreeMap<String, String>,
        timeout: Duration,
    ) -> Result<KafkaSink, SinkError> {
        let topic = Template::parse("kafka_topic", topic)?;
        let mut config = ClientConfig::new();
        for (key, value) in properties {
            if FIXED_PROPERTIES.contains(&key.as_str()) {
                return Err(SinkError::Invalid {
                    field: "kafka_properties",
                    reason: format!("{key} is set by delayq (brokers, timeout_ms, idempotence, acks=all)"),
                });
            }
            config.set(key, value);
        }
        config
            .set("bootstrap.servers", brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("message.timeout.ms", timeout.as_millis().max(1).to_string());
        let producer: FutureProducer = config
            .create()
            .map_err(|error| SinkError::Invalid { field: "kafka_properties", reason: error.to_string() })?;
        Ok(KafkaSink { producer, topic, timeout })
    }
}

/// Returns the record key: the subtopic, else the job id.
pub(crate) fn record_key(job: &Job) -> &str {
    job.subtopic.as_deref().filter(|subtopic| !subtopic.is_empty()).unwrap_or(job.id.as_str())
}

fn classify(error: KafkaError) -> SinkError {
    let reason = error.to_string();
    match error.rdkafka_error_code() {
        // Enqueued but never acknowledged: it may have been written.
        Some(RDKafkaErrorCode::MessageTimedOut) | None => SinkError::Unconfirmed { sink: KIND, reason },
        Some(_) => SinkError::Rejected { sink: KIND, reason },
    }
}

#[async_trait]
impl Sink for KafkaSink {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn publish(&self, jobs: &[Job]) -> Vec<Result<(), SinkError>> {
        let topics: Vec<String> = jobs.iter().map(|job| self.topic.expand(job)).collect();
        let mut pending = Vec::with_capacity(jobs.len());
        for (job, topic) in jobs.iter().zip(&topics) {
            let mut headers = OwnedHeaders::new_with_capacity(4);
            for (key, value) in message_headers(job) {
                headers = headers.insert(Header { key, value: Some(value.as_str()) });
            }
            let record = FutureRecord::to(topic).key(record_key(job)).payload(job.body.as_str()).headers(headers);
            pending.push(match self.producer.send_result(record) {
                Ok(delivery) => Ok(delivery),
                // Not enqueued (queue full, unknown topic): nothing was sent.
                Err((error, _)) => Err(SinkError::Unavailable { sink: KIND, reason: error.to_string() }),
            });
        }
        // librdkafka times each record out after message.timeout.ms; the outer
        // bound only guards against a report that never comes.
        let deadline = tokio::time::Instant::now() + self.timeout + Duration::from_secs(5);
        let mut outcomes = Vec::with_capacity(jobs.len());
        for enqueued in pending {
            outcomes.push(match enqueued {
                Err(error) => Err(error),
                Ok(delivery) => match tokio::time::timeout_at(deadline, delivery).await {
                    Ok(Ok(Ok(_))) => Ok(()),
                    Ok(Ok(Err((error, _)))) => Err(classify(error)),
                    Ok(Err(_canceled)) => {
                        Err(SinkError::Unconfirmed { sink: KIND, reason: "producer dropped the report".to_owned() })
                    }
                    Err(_) => Err(SinkError::Unconfirmed { sink: KIND, reason: "no delivery report".to_owned() }),
                },
            });
        }
        outcomes
    }
}
