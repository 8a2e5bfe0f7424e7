//! The sinks, and [`build_sink`], the one place that names them.

mod kafka;
mod log;
mod rabbitmq;
mod webhook;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use delayq_common::redact;

pub use self::kafka::KafkaSink;
pub use self::log::LogSink;
pub use self::rabbitmq::RabbitSink;
pub use self::webhook::{sign as webhook_signature, WebhookSink, SIGNATURE_HEADER};
use crate::error::SinkError;
use crate::sink::Sink;

/// What to build a sink from: one route's destination settings.
///
/// Its `Debug` output hides the secrets: URL passwords, the webhook secret,
/// the values of secret-looking Kafka properties.
#[derive(Clone, PartialEq, Eq)]
pub enum SinkSpec {
    /// Writes each due job to the log (the embedded default's stand-in for a broker).
    Log,
    /// POSTs each job as JSON to `url`.
    Webhook {
        /// The endpoint.
        url: String,
        /// The HMAC-SHA256 key of the `delayq-signature` header.
        secret: Option<String>,
        /// How long one request may take.
        timeout: Duration,
    },
    /// Publishes persistent messages with publisher confirms.
    Rabbitmq {
        /// The `amqp://` URL.
        url: String,
        /// The exchange (`""` is the default exchange).
        exchange: String,
        /// The routing key template.
        routing_key: String,
        /// How long connecting or a confirm may take.
        timeout: Duration,
    },
    /// Produces records with an idempotent producer and `acks=all`.
    Kafka {
        /// The bootstrap servers, comma-separated.
        brokers: String,
        /// The topic template.
        topic: String,
        /// Extra librdkafka producer properties.
        properties: BTreeMap<String, String>,
        /// How long a delivery report may take (`message.timeout.ms`).
        timeout: Duration,
    },
}

impl std::fmt::Debug for SinkSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SinkSpec::Log => f.write_str("Log"),
            SinkSpec::Webhook { url, secret, timeout } => f
                .debug_struct("Webhook")
                .field("url", &redact::url(url))
                .field("secret", &secret.as_ref().map(|_| redact::REDACTED))
                .field("timeout", timeout)
                .finish(),
            SinkSpec::Rabbitmq { url, exchange, routing_key, timeout } => f
                .debug_struct("Rabbitmq")
                .field("url", &redact::url(url))
                .field("exchange", exchange)
                .field("routing_key", routing_key)
                .field("timeout", timeout)
                .finish(),
            SinkSpec::Kafka { brokers, topic, properties, timeout } => {
                let properties: BTreeMap<&str, &str> = properties
                    .iter()
                    .map(|(key, value)| {
                        let shown = if redact::is_sensitive_key(key) { redact::REDACTED } else { value.as_str() };
                        (key.as_str(), shown)
                    })
                    .collect();
                f.debug_struct("Kafka")
                    .field("brokers", brokers)
                    .field("topic", topic)
                    .field("properties", &properties)
                    .field("timeout", timeout)
                    .finish()
            }
        }
    }
}

/// Builds the sink a spec describes. Brokers are not contacted here: a sink
/// connects on first use and reconnects by itself, so a broker that is down at
/// start delays delivery without failing the start.
///
/// # Errors
/// [`SinkError::Invalid`] naming the setting that is malformed.
pub fn build_sink(spec: &SinkSpec) -> Result<Arc<dyn Sink>, SinkError> {
    Ok(match spec {
        SinkSpec::Log => Arc::new(LogSink::new()),
        SinkSpec::Webhook { url, secret, timeout } => Arc::new(WebhookSink::new(url, secret.as_deref(), *timeout)?),
        SinkSpec::Rabbitmq { url, exchange, routing_key, timeout } => {
            Arc::new(RabbitSink::new(url, exchange, routing_key, *timeout)?)
        }
        SinkSpec::Kafka { brokers, topic, properties, timeout } => {
            Arc::new(KafkaSink::new(brokers, topic, properties, *timeout)?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_debug_output_holds_no_secret() {
        let specs = [
            SinkSpec::Webhook {
                url: "https://u:url-s3cret@hooks.example/due?token=query-s3cret".to_owned(),
                secret: Some("hmac-s3cret".to_owned()),
                timeout: Duration::from_secs(1),
            },
            SinkSpec::Rabbitmq {
                url: "amqp://guest:amqp-s3cret@rabbit:5672/%2f".to_owned(),
                exchange: "delayq".to_owned(),
                routing_key: "{topic}".to_owned(),
                timeout: Duration::from_secs(1),
            },
            SinkSpec::Kafka {
                brokers: "kafka:9092".to_owned(),
                topic: "{topic}".to_owned(),
                properties: BTreeMap::from([
                    ("sasl.password".to_owned(), "sasl-s3cret".to_owned()),
                    ("linger.ms".to_owned(), "5".to_owned()),
                ]),
                timeout: Duration::from_secs(1),
            },
        ];
        for spec in specs {
            let printed = format!("{spec:?}");
            assert!(!printed.contains("s3cret"), "{printed}");
        }
        let printed = format!(
            "{:?}",
            SinkSpec::Kafka {
                brokers: "kafka:9092".to_owned(),
                topic: "{topic}".to_owned(),
                properties: BTreeMap::from([("linger.ms".to_owned(), "5".to_owned())]),
                timeout: Duration::from_secs(1),
            }
        );
        assert!(printed.contains("\"linger.ms\": \"5\""), "{printed}");
    }
}
