//! The sink SPI: publish a batch of due jobs, learn per job whether the broker has it.

use async_trait::async_trait;
use delayq_common::template::{parse_template, TemplatePart as Part};
use delayq_common::Job;

use crate::error::SinkError;

/// The header carrying the job id; consumers dedupe on it.
pub const HEADER_ID: &str = "delayq-id";
/// The header carrying the job's topic.
pub const HEADER_TOPIC: &str = "delayq-topic";
/// The header carrying the delivery number, from 1.
pub const HEADER_ATTEMPT: &str = "delayq-attempt";
/// The header carrying the job's due time, epoch ms.
pub const HEADER_RUN_AT: &str = "delayq-run-at";

/// A destination for due jobs.
///
/// Contract every sink keeps:
/// - [`Sink::publish`] returns one outcome per job, in the order given.
/// - `Ok` means the broker (or endpoint) confirmed the job: it is durable
///   there, and the forwarder finishes the job. Anything short of that is an
///   error; an error after which the broker may hold the message anyway is
///   [`SinkError::Unconfirmed`].
/// - Every message carries the [`message_headers`]; its payload is the job's body
///   (the webhook sink posts the whole job as JSON).
/// - A broker that is down is an error per job, never a panic or a hang past
///   the sink's timeout; the sink reconnects by itself.
/// - A job whose destination the protocol cannot carry (a name past its byte
///   limit, a character it forbids) fails alone with [`SinkError::Rejected`],
///   unsent; the other jobs of the batch are published as usual.
#[async_trait]
pub trait Sink: Send + Sync + 'static {
    /// Returns the sink type (`rabbitmq`, `kafka`, `webhook`, `log`).
    fn kind(&self) -> &'static str;

    /// Publishes the jobs; returns one outcome per job, in order.
    async fn publish(&self, jobs: &[Job]) -> Vec<Result<(), SinkError>>;
}

/// Returns the `delayq-*` headers of a job's message.
pub fn message_headers(job: &Job) -> [(&'static str, String); 4] {
    [
        (HEADER_ID, job.id.to_string()),
        (HEADER_TOPIC, job.topic.to_string()),
        (HEADER_ATTEMPT, job.attempt.to_string()),
        (HEADER_RUN_AT, job.run_at.as_millis().to_string()),
    ]
}

/// A destination name with `{topic}`, `{subtopic}` and `{id}` placeholders.
///
/// `{subtopic}` expands to the empty string for a job without one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

impl Template {
    /// Parses a template.
    ///
    /// # Errors
    /// An unbalanced brace or an unknown placeholder, naming `field`.
    pub fn parse(field: &'static str, template: &str) -> Result<Template, SinkError> {
        let parts = parse_template(template).map_err(|reason| SinkError::Invalid { field, reason })?;
        Ok(Template { parts })
    }

    /// Returns the fixed text of the template: everything but its placeholders.
    pub fn literals(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|part| match part {
            Part::Literal(text) => Some(text.as_str()),
            _ => None,
        })
    }

    /// Returns whether the template has no placeholder: it expands to the same text for every job.
    pub fn is_fixed(&self) -> bool {
        self.parts.iter().all(|part| matches!(part, Part::Literal(_)))
    }

    /// Returns the template expanded for a job.
    pub fn expand(&self, job: &Job) -> String {
        let mut expanded = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => expanded.push_str(text),
                Part::Topic => expanded.push_str(job.topic.as_str()),
                Part::Subtopic => expanded.push_str(job.subtopic.as_deref().unwrap_or("")),
                Part::Id => expanded.push_str(job.id.as_str()),
            }
        }
        expanded
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use delayq_common::Timestamp;

    use super::*;

    /// A plain job ([`delayq_testkit::job_created_at`]) with `subtopic`, due at a
    /// fixed time so that the header carrying it can be compared.
    pub(crate) fn job(id: &str, topic: &str, subtopic: Option<&str>) -> Job {
        let due = Timestamp::from_millis(2_000);
        let mut job = delayq_testkit::job_created_at(id, &delayq_testkit::topic(topic), due, due);
        job.subtopic = subtopic.map(str::to_owned);
        job
    }

    #[test]
    fn templates_expand_the_three_placeholders() {
        let template = Template::parse("routing_key", "delayq.{topic}.{subtopic}.{id}!").unwrap();
        assert_eq!(template.expand(&job("7", "order.close", Some("eu"))), "delayq.order.close.eu.7!");
        assert_eq!(template.expand(&job("7", "order.close", None)), "delayq.order.close..7!");
        assert_eq!(Template::parse("kafka_topic", "plain").unwrap().expand(&job("1", "t", None)), "plain");
    }

    #[test]
    fn literals_are_the_fixed_text() {
        let template = Template::parse("routing_key", "due.{topic}.{subtopic}").unwrap();
        assert_eq!(template.literals().collect::<Vec<_>>(), ["due.", "."]);
        assert!(!template.is_fixed());
        let fixed = Template::parse("routing_key", "plain").unwrap();
        assert_eq!(fixed.literals().collect::<Vec<_>>(), ["plain"]);
        assert!(fixed.is_fixed());
        assert!(Template::parse("routing_key", "").unwrap().is_fixed());
    }

    #[test]
    fn malformed_templates_name_their_field() {
        for bad in ["{topic", "topic}", "{nope}", "{}", "a}{topic}", "{topic}}", "{to{pic}", "}{"] {
            let error = Template::parse("routing_key", bad).unwrap_err();
            assert!(matches!(error, SinkError::Invalid { field: "routing_key", .. }), "{bad}: {error}");
        }
    }

    #[test]
    fn headers_carry_id_topic_attempt_and_due_time() {
        // Past its first attempt, so a header that always said 1 would show.
        let mut redelivered = job("42", "order.close", None);
        redelivered.attempt = 2;
        let headers = message_headers(&redelivered);
        assert_eq!(
            headers,
            [
                ("delayq-id", "42".to_owned()),
                ("delayq-topic", "order.close".to_owned()),
                ("delayq-attempt", "2".to_owned()),
                ("delayq-run-at", "2000".to_owned()),
            ]
        );
    }
}
