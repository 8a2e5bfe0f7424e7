//! The sinks, and [`build_sink`], the one place that names them.

mod kafka;
mod log;
mod rabbitmq;
mod webhook;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub use self::kafka::KafkaSink;
pub use self::log::LogSink;
pub use self::rabbitmq::RabbitSink;
pub use self::webhook::{sign as webhook_signature, WebhookSink, SIGNATURE_HEADER};
use crate::error::SinkError;
use crate::sink::Sink;

/// What to build a sink from: one route's destination settings.
#[derive(Clone, Debug, PartialEq, Eq)]
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
