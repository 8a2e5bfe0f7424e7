//! The `[forward]` section: routes from topic patterns to sinks (docs/forwarding.md).

use std::collections::BTreeMap;

pub use delayq_common::defaults::{DEFAULT_FORWARD_BATCH, DEFAULT_FORWARD_TIMEOUT_MS};
use delayq_common::redact;
use serde::{Deserialize, Serialize};

/// The sink types a route may name.
pub const SINK_TYPES: [&str; 4] = ["rabbitmq", "kafka", "webhook", "log"];
/// The most jobs one forwarded batch may carry (one reserve of the queue).
pub const MAX_FORWARD_BATCH: usize = 100;

/// Forwarding of due jobs to brokers and webhooks; topics no route matches stay pull (`/pop`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ForwardConfig {
    /// The routes, tried in order; the first whose pattern matches a topic wins.
    pub routes: Vec<RouteConfig>,
}

/// One route: which topics, which sink, where to.
///
/// Keys a sink does not use are refused, so a typo or a key meant for another
/// sink type fails the start instead of being ignored.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouteConfig {
    /// Topic patterns; `*` matches any run of characters.
    pub topics: Vec<String>,
    /// `rabbitmq`, `kafka`, `webhook` or `log`.
    pub sink: String,
    /// The label of this route's metrics (`sink="…"`); default: the sink type.
    pub name: Option<String>,
    /// RabbitMQ: the `amqp://` URL; webhook: the `http(s)://` URL jobs are POSTed to.
    pub url: Option<String>,
    /// RabbitMQ: the exchange; default `""` (the default exchange).
    pub exchange: Option<String>,
    /// RabbitMQ: the routing key template; default `{topic}`.
    pub routing_key: Option<String>,
    /// Kafka: the bootstrap servers, comma-separated.
    pub brokers: Option<String>,
    /// Kafka: the topic template; default `{topic}`.
    pub kafka_topic: Option<String>,
    /// Kafka: extra librdkafka producer properties (`linger.ms`, `compression.type`, ...).
    pub kafka_properties: BTreeMap<String, String>,
    /// Webhook: the HMAC-SHA256 key of the `delayq-signature` header; unset: unsigned.
    pub secret: Option<String>,
    /// How long a publish may take before it counts as failed, in ms; default 10000.
    pub timeout_ms: Option<u64>,
    /// Jobs reserved and published at a time, 1 to 100; default 100.
    pub batch: Option<usize>,
}

impl std::fmt::Debug for RouteConfig {
    /// Shows the route without its secrets: the URL without its password (or
    /// secret query parameters), whether a webhook secret is set, and Kafka
    /// properties with the values of secret-looking keys (`sasl.password`) hidden.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let properties: BTreeMap<&str, &str> = self
            .kafka_properties
            .iter()
            .map(|(key, value)| {
                let shown = if redact::is_sensitive_key(key) { redact::REDACTED } else { value.as_str() };
                (key.as_str(), shown)
            })
            .collect();
        f.debug_struct("RouteConfig")
            .field("topics", &self.topics)
            .field("sink", &self.sink)
            .field("name", &self.name)
            .field("url", &self.url.as_deref().map(redact::url))
            .field("exchange", &self.exchange)
            .field("routing_key", &self.routing_key)
            .field("brokers", &self.brokers.as_deref().map(redact::url))
            .field("kafka_topic", &self.kafka_topic)
            .field("kafka_properties", &properties)
            .field("secret", &self.secret.as_ref().map(|_| redact::REDACTED))
            .field("timeout_ms", &self.timeout_ms)
            .field("batch", &self.batch)
            .finish()
    }
}

/// What is wrong with a route, naming the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteProblem {
    /// The key within the route (`sink`, `topics`, `routing_key`).
    pub key: &'static str,
    /// Why.
    pub reason: String,
}

impl RouteConfig {
    /// Returns the route's metrics label: its name, else its sink type.
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.sink)
    }

    /// Returns the batch size, defaulted.
    pub fn batch_or_default(&self) -> usize {
        self.batch.unwrap_or(DEFAULT_FORWARD_BATCH)
    }

    /// Returns the publish timeout in ms, defaulted.
    pub fn timeout_ms_or_default(&self) -> u64 {
        self.timeout_ms.unwrap_or(DEFAULT_FORWARD_TIMEOUT_MS)
    }

    /// Checks the route: a known sink type, its required keys, no key of another
    /// sink type, well-formed topic patterns and templates.
    ///
    /// # Errors
    /// The first problem, naming its key.
    pub fn validate(&self) -> Result<(), RouteProblem> {
        let problem = |key: &'static str, reason: String| Err(RouteProblem { key, reason });
        if !SINK_TYPES.contains(&self.sink.as_str()) {
            return problem(
                "sink",
                format!("unknown sink type {:?} (expected rabbitmq, kafka, webhook or log)", self.sink),
            );
        }
        self.validate_topics()?;
        if let Some(name) = &self.name {
            if name.is_empty() {
                return problem("name", "must not be empty".to_owned());
            }
        }
        if self.batch.is_some_and(|batch| !(1..=MAX_FORWARD_BATCH).contains(&batch)) {
            return problem("batch", format!("must be from 1 to {MAX_FORWARD_BATCH}"));
        }
        if self.timeout_ms == Some(0) {
            return problem("timeout_ms", "must be at least 1".to_owned());
        }
        self.validate_sink_keys()
    }

    fn validate_topics(&self) -> Result<(), RouteProblem> {
        if self.topics.is_empty() {
            return Err(RouteProblem { key: "topics", reason: "must list at least one topic pattern".to_owned() });
        }
        for pattern in &self.topics {
            // `topic/group` names a consumer group's deliveries.
            let well_formed = pattern.split('/').count() <= 2
                && pattern.split('/').all(|part| {
                    !part.is_empty()
                        && part.len() <= 128
                        && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-' | '*'))
                });
            if !well_formed {
                return Err(RouteProblem {
                    key: "topics",
                    reason: format!(
                        "{pattern:?} is not a topic pattern (1-128 chars of A-Z a-z 0-9 . _ : - and *, optionally \
                         followed by / and a group pattern)"
                    ),
                });
            }
        }
        Ok(())
    }

    fn validate_sink_keys(&self) -> Result<(), RouteProblem> {
        let present: [(&'static str, bool); 8] = [
            ("url", self.url.is_some()),
            ("exchange", self.exchange.is_some()),
            ("routing_key", self.routing_key.is_some()),
            ("brokers", self.brokers.is_some()),
            ("kafka_topic", self.kafka_topic.is_some()),
            ("kafka_properties", !self.kafka_properties.is_empty()),
            ("secret", self.secret.is_some()),
            ("timeout_ms", self.timeout_ms.is_some()),
        ];
        let (required, allowed): (&[&str], &[&str]) = match self.sink.as_str() {
            "rabbitmq" => (&["url"], &["url", "exchange", "routing_key", "timeout_ms"]),
            "kafka" => (&["brokers"], &["brokers", "kafka_topic", "kafka_properties", "timeout_ms"]),
            "webhook" => (&["url"], &["url", "secret", "timeout_ms"]),
            _ => (&[], &[]),
        };
        for (key, is_present) in present {
            if is_present && !allowed.contains(&key) {
                return Err(RouteProblem { key, reason: format!("does not apply to a {} sink", self.sink) });
            }
            if !is_present && required.contains(&key) {
                return Err(RouteProblem { key, reason: format!("is required for a {} sink", self.sink) });
            }
        }
        self.validate_urls()?;
        for (key, template) in [("routing_key", &self.routing_key), ("kafka_topic", &self.kafka_topic)] {
            if let Some(template) = template {
                check_template(template).map_err(|reason| RouteProblem { key, reason })?;
            }
        }
        if self.brokers.as_deref().is_some_and(|brokers| brokers.trim().is_empty()) {
            return Err(RouteProblem { key: "brokers", reason: "must not be empty".to_owned() });
        }
        Ok(())
    }

    fn validate_urls(&self) -> Result<(), RouteProblem> {
        let Some(url) = &self.url else { return Ok(()) };
        let schemes: &[&str] = match self.sink.as_str() {
            "rabbitmq" => &["amqp://", "amqps://"],
            _ => &["http://", "https://"],
        };
        if schemes.iter().any(|scheme| url.starts_with(scheme) && url.len() > scheme.len()) {
            return Ok(());
        }
        Err(RouteProblem { key: "url", reason: format!("must start with {}", schemes.join(" or ")) })
    }
}

/// Checks that a destination template uses only `{topic}`, `{subtopic}` and `{id}`.
///
/// # Errors
/// Why the template is malformed.
pub fn check_template(template: &str) -> Result<(), String> {
    delayq_common::template::parse_template(template).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(sink: &str) -> RouteConfig {
        RouteConfig { topics: vec!["order.*".to_owned()], sink: sink.to_owned(), ..RouteConfig::default() }
    }

    #[test]
    fn a_log_route_needs_only_topics() {
        assert_eq!(route("log").validate(), Ok(()));
    }

    #[test]
    fn unknown_sink_types_are_named() {
        let problem = route("kafak").validate().unwrap_err();
        assert_eq!(problem.key, "sink");
        assert!(problem.reason.contains("\"kafak\""), "{}", problem.reason);
    }

    #[test]
    fn required_and_foreign_keys_are_named() {
        assert_eq!(route("rabbitmq").validate().unwrap_err().key, "url");
        assert_eq!(route("kafka").validate().unwrap_err().key, "brokers");
        let mut webhook = route("webhook");
        webhook.url = Some("http://127.0.0.1:9000/due".to_owned());
        assert_eq!(webhook.validate(), Ok(()));
        webhook.exchange = Some("x".to_owned());
        let problem = webhook.validate().unwrap_err();
        assert_eq!((problem.key, problem.reason.as_str()), ("exchange", "does not apply to a webhook sink"));
        let mut rabbit = route("rabbitmq");
        rabbit.url = Some("http://wrong".to_owned());
        assert_eq!(rabbit.validate().unwrap_err().key, "url");
    }

    #[test]
    fn malformed_topics_batches_and_templates_are_named() {
        let mut bad = route("log");
        bad.topics = vec![];
        assert_eq!(bad.validate().unwrap_err().key, "topics");
        bad.topics = vec!["order/".to_owned()];
        assert_eq!(bad.validate().unwrap_err().key, "topics");
        bad.topics = vec!["order/a/b".to_owned()];
        assert_eq!(bad.validate().unwrap_err().key, "topics");
        bad.topics = vec!["order/*".to_owned()];
        assert!(bad.validate().is_ok(), "a group's deliveries may be routed");
        let mut batch = route("log");
        batch.batch = Some(101);
        assert_eq!(batch.validate().unwrap_err().key, "batch");
        let mut rabbit = route("rabbitmq");
        rabbit.url = Some("amqp://127.0.0.1".to_owned());
        rabbit.routing_key = Some("{sub}".to_owned());
        let problem = rabbit.validate().unwrap_err();
        assert_eq!(problem.key, "routing_key");
        assert!(problem.reason.contains("{sub}"), "{}", problem.reason);
    }

    #[test]
    fn templates_accept_only_the_three_placeholders() {
        assert_eq!(check_template("delayq.{topic}.{subtopic}.{id}"), Ok(()));
        assert_eq!(check_template("plain"), Ok(()));
        assert!(check_template("{topic").is_err());
        assert!(check_template("topic}").is_err());
        assert!(check_template("{Topic}").is_err());
        assert!(check_template("{topic}}").is_err());
        assert!(check_template("{topic}.x}{id}").is_err());
        assert!(check_template("{{topic}").is_err());
        assert!(check_template("ü{topic}ö").is_ok());
    }
}
