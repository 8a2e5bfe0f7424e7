//! The Kafka sink: an idempotent producer with `acks=all`; a delivery report is the confirmation.
//!
//! Kafka topic names are 1 to 249 characters of `a-z A-Z 0-9 . _ -` (and not
//! `.` or `..`). A topic template that expands to anything else for one job
//! fails that job alone, before anything is sent.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use delayq_common::{redact, Job};
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;

use crate::error::SinkError;
use crate::sink::{message_headers, Sink, Template};

const KIND: &str = "kafka";
/// The longest Kafka topic name.
const MAX_TOPIC_CHARS: usize = 249;
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
    /// A malformed topic template (or one whose fixed text no Kafka topic name
    /// can hold), a fixed property overridden, or a property librdkafka refuses.
    pub fn new(
        brokers: &str,
        topic: &str,
        properties: &BTreeMap<String, String>,
        timeout: Duration,
    ) -> Result<KafkaSink, SinkError> {
        let topic = Template::parse("kafka_topic", topic)?;
        check_topic_template(&topic).map_err(|reason| SinkError::Invalid { field: "kafka_topic", reason })?;
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
            .map_err(|error| SinkError::Invalid { field: "kafka_properties", reason: config_error_reason(&error) })?;
        Ok(KafkaSink { producer, topic, timeout })
    }
}

/// Describes a refused producer config; librdkafka quotes the refused value,
/// which is withheld when its property looks secret (`sasl.password`).
fn config_error_reason(error: &KafkaError) -> String {
    match error {
        KafkaError::ClientConfig(_, description, key, value) if redact::is_sensitive_key(key) => {
            let description = redact::scrub(description, value, redact::REDACTED);
            format!("{key}: {description} (value withheld)")
        }
        other => other.to_string(),
    }
}

/// Returns the record key: the subtopic, else the job id.
pub(crate) fn record_key(job: &Job) -> &str {
    job.subtopic.as_deref().filter(|subtopic| !subtopic.is_empty()).unwrap_or(job.id.as_str())
}

/// Checks a topic name against Kafka's rules; returns why it breaks them.
fn check_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("is empty".to_owned());
    }
    if name == "." || name == ".." {
        return Err(format!("{name:?} is reserved"));
    }
    // Every allowed character is one byte, so counting bytes counts characters.
    if name.len() > MAX_TOPIC_CHARS {
        return Err(format!("is {} bytes long; Kafka allows at most {MAX_TOPIC_CHARS}", name.len()));
    }
    if !name.chars().all(is_topic_char) {
        return Err("may only contain a-z A-Z 0-9 . _ -".to_owned());
    }
    Ok(())
}

fn is_topic_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// Refuses a template that cannot expand to a valid topic name for any job.
fn check_topic_template(template: &Template) -> Result<(), String> {
    if template.is_fixed() {
        let name: String = template.literals().collect();
        return check_topic_name(&name).map_err(|reason| format!("the topic name {reason}"));
    }
    let fixed_chars: usize = template.literals().map(str::len).sum();
    if !template.literals().all(|literal| literal.chars().all(is_topic_char)) {
        return Err("may only contain a-z A-Z 0-9 . _ - besides its placeholders".to_owned());
    }
    if fixed_chars > MAX_TOPIC_CHARS {
        return Err(format!("has {fixed_chars} characters besides its placeholders; Kafka allows {MAX_TOPIC_CHARS}"));
    }
    Ok(())
}

/// Returns the job's topic name, or why Kafka could not take it.
fn topic_of(template: &Template, job: &Job) -> Result<String, SinkError> {
    let name = template.expand(job);
    check_topic_name(&name)
        .map_err(|reason| SinkError::Rejected { sink: KIND, reason: format!("the expanded topic name {reason}") })?;
    Ok(name)
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
        let topics: Vec<Result<String, SinkError>> = jobs.iter().map(|job| topic_of(&self.topic, job)).collect();
        let mut pending = Vec::with_capacity(jobs.len());
        for (job, topic) in jobs.iter().zip(&topics) {
            let topic = match topic {
                Ok(topic) => topic,
                Err(refused) => {
                    // Only this job fails; nothing of it was sent.
                    pending.push(Err(refused.clone()));
                    continue;
                }
            };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::tests::job;

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(check_topic_name("delayq.order-close_v2").is_ok());
        assert!(check_topic_name(&"a".repeat(249)).is_ok());
        for bad in ["", ".", "..", "order:close", "a b", "café"] {
            assert!(check_topic_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_topic_name(&"a".repeat(250)).unwrap_err().contains("250 bytes"));
    }

    #[test]
    fn templates_that_can_never_be_a_topic_are_refused_naming_the_field() {
        let refused = |template: &str| {
            let error = KafkaSink::new("127.0.0.1:9092", template, &BTreeMap::new(), Duration::from_secs(1)).err();
            matches!(error, Some(SinkError::Invalid { field: "kafka_topic", .. }))
        };
        assert!(refused("due:{topic}"));
        assert!(refused(".."));
        assert!(refused(&format!("{}{{topic}}", "a".repeat(250))));
        assert!(refused(&"a".repeat(250)));
        assert!(!refused("delayq-{topic}-due"));
        assert!(!refused("audit"));
    }

    #[test]
    fn a_refused_secret_property_is_named_without_its_value() {
        let error = KafkaError::ClientConfig(
            rdkafka::types::RDKafkaConfRes::RD_KAFKA_CONF_INVALID,
            "Invalid value \"kafka-s3cret\" for configuration property \"sasl.password\"".to_owned(),
            "sasl.password".to_owned(),
            "kafka-s3cret".to_owned(),
        );
        let reason = config_error_reason(&error);
        assert!(reason.contains("sasl.password") && !reason.contains("kafka-s3cret"), "{reason}");
        // librdkafka's own refusal, whatever it refuses in this build.
        for key in ["sasl.password", "ssl.key.password", "sasl.oauthbearer.config"] {
            let properties = BTreeMap::from([(key.to_owned(), "kafka-s3cret".to_owned())]);
            if let Err(error) = KafkaSink::new("127.0.0.1:9092", "{topic}", &properties, Duration::from_secs(1)) {
                assert!(!error.to_string().contains("kafka-s3cret"), "{error}");
            }
        }
    }

    #[test]
    fn a_job_whose_expanded_topic_is_invalid_is_refused() {
        let template = Template::parse("kafka_topic", "due-{subtopic}").unwrap();
        assert_eq!(topic_of(&template, &job("1", "t", Some("eu"))).unwrap(), "due-eu");
        for subtopic in ["😀".repeat(64), "a b".to_owned(), "x".repeat(246)] {
            let error = topic_of(&template, &job("1", "t", Some(&subtopic))).unwrap_err();
            assert!(matches!(error, SinkError::Rejected { sink: "kafka", .. }), "{error}");
            assert!(!error.maybe_delivered());
        }
        // A delayq topic may hold ':', a Kafka topic may not.
        let by_topic = Template::parse("kafka_topic", "{topic}").unwrap();
        assert!(topic_of(&by_topic, &job("1", "order:eu", None)).is_err());
    }
}
