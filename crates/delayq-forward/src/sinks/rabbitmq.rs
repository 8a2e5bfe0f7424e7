//! The RabbitMQ sink: persistent messages, publisher confirms, mandatory
//! publishing (a message no queue takes is a failure), reconnect with backoff.
//!
//! AMQP carries the exchange, the routing key and the message id as short
//! strings of at most 255 bytes (bytes, not characters). A routing key that
//! expands past that for one job fails that job alone, before anything is sent.

use std::time::Duration;

use async_trait::async_trait;
use delayq_common::{redact, Job};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use tokio::sync::Mutex;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::error::SinkError;
use crate::sink::{message_headers, Sink, Template};

const KIND: &str = "rabbitmq";
/// The pause after the first failed connect; it doubles up to [`MAX_RECONNECT_BACKOFF`].
const MIN_RECONNECT_BACKOFF: Duration = Duration::from_millis(100);
/// The longest pause between connects.
const MAX_RECONNECT_BACKOFF: Duration = Duration::from_secs(5);
/// AMQP delivery mode 2: the broker writes the message to disk.
const PERSISTENT: u8 = 2;
/// The longest AMQP short string (exchange, routing key, message id), in bytes.
const MAX_SHORT_STRING_BYTES: usize = 255;

/// Publishes each job as a persistent message and waits for the broker's confirm.
pub struct RabbitSink {
    url: String,
    exchange: ShortString,
    routing_key: Template,
    timeout: Duration,
    link: Mutex<Link>,
}

/// The connection, or when to try connecting again.
struct Link {
    open: Option<(Connection, Channel)>,
    retry_at: Option<Instant>,
    backoff: Duration,
}

impl RabbitSink {
    /// Creates the sink; it connects on first use. `timeout` bounds connecting
    /// and waiting for a batch's confirms.
    ///
    /// # Errors
    /// A malformed URL or routing key template, an exchange longer than
    /// 255 bytes, or a routing key whose fixed text alone is.
    pub fn new(url: &str, exchange: &str, routing_key: &str, timeout: Duration) -> Result<RabbitSink, SinkError> {
        // The parser may quote the URL it refused: never with its password.
        url.parse::<lapin::uri::AMQPUri>().map_err(|reason| SinkError::Invalid {
            field: "url",
            reason: format!("not an amqp URL: {}", redact::scrub(&reason, url, &redact::url(url))),
        })?;
        let exchange = short_string(exchange)
            .map_err(|reason| SinkError::Invalid { field: "exchange", reason: format!("{exchange:?} {reason}") })?;
        let routing_key_template = Template::parse("routing_key", routing_key)?;
        let fixed_bytes: usize = routing_key_template.literals().map(str::len).sum();
        if fixed_bytes > MAX_SHORT_STRING_BYTES {
            return Err(SinkError::Invalid {
                field: "routing_key",
                reason: format!("{fixed_bytes} bytes without its placeholders; AMQP allows {MAX_SHORT_STRING_BYTES}"),
            });
        }
        Ok(RabbitSink {
            url: url.to_owned(),
            exchange,
            routing_key: routing_key_template,
            timeout,
            link: Mutex::new(Link { open: None, retry_at: None, backoff: MIN_RECONNECT_BACKOFF }),
        })
    }

    /// Returns an open confirm-mode channel, connecting when there is none and
    /// the reconnect backoff has passed.
    async fn channel(&self) -> Result<Channel, SinkError> {
        let mut link = self.link.lock().await;
        if let Some((connection, channel)) = &link.open {
            if connection.status().connected() && channel.status().connected() {
                return Ok(channel.clone());
            }
            warn!(sink = KIND, "connection or channel lost, reconnecting");
            if let Some((connection, _)) = link.open.take() {
                // The broker may have closed only the channel (a channel error): close the rest.
                tokio::spawn(close_quietly(connection));
            }
        }
        if let Some(retry_at) = link.retry_at {
            let wait = retry_at.saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                return Err(unavailable(format!("reconnecting in {} ms", wait.as_millis())));
            }
        }
        match tokio::time::timeout(self.timeout, open_confirm_channel(&self.url)).await {
            Ok(Ok((connection, channel))) => {
                info!(sink = KIND, "connected");
                link.open = Some((connection, channel.clone()));
                link.retry_at = None;
                link.backoff = MIN_RECONNECT_BACKOFF;
                Ok(channel)
            }
            failure => {
                let reason = match failure {
                    Ok(Err(error)) => error.to_string(),
                    _ => format!("connect timed out after {} ms", self.timeout.as_millis()),
                };
                warn!(sink = KIND, error = %reason, backoff_ms = link.backoff.as_millis() as u64, "cannot connect");
                link.retry_at = Some(Instant::now() + link.backoff);
                link.backoff = (link.backoff * 2).min(MAX_RECONNECT_BACKOFF);
                Err(unavailable(reason))
            }
        }
    }

    /// Closes the connection so the next publish opens a new one.
    async fn forget_connection(&self) {
        let open = self.link.lock().await.open.take();
        if let Some((connection, _)) = open {
            close_quietly(connection).await;
        }
    }

    /// Returns the routing key and properties of a job's message, or why the
    /// broker could not take it (a short string past 255 bytes).
    fn envelope(&self, job: &Job) -> Result<(ShortString, BasicProperties), SinkError> {
        let refused =
            |what: &str, reason: String| SinkError::Rejected { sink: KIND, reason: format!("{what} {reason}") };
        let routing_key =
            short_string(self.routing_key.expand(job)).map_err(|reason| refused("routing key", reason))?;
        let message_id = short_string(job.id.as_str()).map_err(|reason| refused("message id", reason))?;
        let mut headers = FieldTable::default();
        for (name, value) in message_headers(job) {
            let name = short_string(name).map_err(|reason| refused("header name", reason))?;
            headers.insert(name, AMQPValue::LongString(LongString::from(value)));
        }
        let properties =
            BasicProperties::default().with_delivery_mode(PERSISTENT).with_message_id(message_id).with_headers(headers);
        Ok((routing_key, properties))
    }
}

/// Returns `text` as an AMQP short string, or why it cannot be one.
fn short_string(text: impl Into<String>) -> Result<ShortString, String> {
    let text = text.into();
    let bytes = text.len();
    ShortString::try_new(text)
        .map_err(|_| format!("is {bytes} bytes long; AMQP allows at most {MAX_SHORT_STRING_BYTES} bytes"))
}

async fn open_confirm_channel(url: &str) -> Result<(Connection, Channel), lapin::Error> {
    let connection = Connection::connect(url, ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    channel.confirm_select(ConfirmSelectOptions::default()).await?;
    Ok((connection, channel))
}

/// Closes a connection that is no longer used, giving up after a second.
async fn close_quietly(connection: Connection) {
    let closing = connection.close(200, "reconnecting".into());
    let _ = tokio::time::timeout(Duration::from_secs(1), closing).await;
}

fn unavailable(reason: String) -> SinkError {
    SinkError::Unavailable { sink: KIND, reason }
}

fn unconfirmed(reason: String) -> SinkError {
    SinkError::Unconfirmed { sink: KIND, reason }
}

#[async_trait]
impl Sink for RabbitSink {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn publish(&self, jobs: &[Job]) -> Vec<Result<(), SinkError>> {
        let channel = match self.channel().await {
            Ok(channel) => channel,
            Err(error) => return jobs.iter().map(|_| Err(error.clone())).collect(),
        };
        let deadline = Instant::now() + self.timeout;
        let mandatory = BasicPublishOptions { mandatory: true, ..BasicPublishOptions::default() };
        // Publish the whole batch first, then collect the confirms: one round trip, not one per job.
        let mut pending = Vec::with_capacity(jobs.len());
        for job in jobs {
            let (routing_key, properties) = match self.envelope(job) {
                Ok(envelope) => envelope,
                Err(refused) => {
                    // Only this job fails; nothing of it reached the broker.
                    pending.push(Err(refused));
                    continue;
                }
            };
            let sent = tokio::time::timeout_at(
                deadline,
                channel.basic_publish(self.exchange.clone(), routing_key, mandatory, job.body.as_bytes(), properties),
            )
            .await;
            pending.push(match sent {
                Ok(Ok(confirm)) => Ok(confirm),
                Ok(Err(error)) => Err(unconfirmed(error.to_string())),
                Err(_) => Err(unconfirmed("publish timed out".to_owned())),
            });
        }
        let mut outcomes = Vec::with_capacity(jobs.len());
        let mut connection_failed = false;
        for sent in pending {
            let outcome = match sent {
                Err(error) => Err(error),
                Ok(confirm) => match tokio::time::timeout_at(deadline, confirm).await {
                    Ok(Ok(Confirmation::Ack(None))) => Ok(()),
                    Ok(Ok(Confirmation::Ack(Some(returned)))) => Err(SinkError::Rejected {
                        sink: KIND,
                        reason: format!("returned unroutable: {} {}", returned.reply_code, returned.reply_text),
                    }),
                    Ok(Ok(Confirmation::Nack(_))) => {
                        Err(SinkError::Rejected { sink: KIND, reason: "the broker nacked it".to_owned() })
                    }
                    Ok(Ok(Confirmation::NotRequested)) => Err(unconfirmed("confirms are off".to_owned())),
                    Ok(Err(error)) => Err(unconfirmed(error.to_string())),
                    Err(_) => Err(unconfirmed(format!("no confirm within {} ms", self.timeout.as_millis()))),
                },
            };
            connection_failed |= matches!(outcome, Err(SinkError::Unconfirmed { .. }));
            outcomes.push(outcome);
        }
        if connection_failed {
            self.forget_connection().await;
        }
        outcomes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::tests::job;

    const URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

    fn sink(routing_key: &str) -> RabbitSink {
        RabbitSink::new(URL, "", routing_key, Duration::from_secs(1)).unwrap()
    }

    #[test]
    fn an_exchange_past_255_bytes_is_refused_naming_the_field() {
        // 64 four-byte characters: 64 characters, 256 bytes.
        let error = RabbitSink::new(URL, &"😀".repeat(64), "{topic}", Duration::from_secs(1)).err().unwrap();
        assert!(matches!(error, SinkError::Invalid { field: "exchange", .. }), "{error}");
        assert!(error.to_string().contains("256 bytes"), "{error}");
        assert!(RabbitSink::new(URL, &"x".repeat(255), "{topic}", Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn a_routing_key_whose_fixed_text_is_past_255_bytes_is_refused() {
        let error = RabbitSink::new(URL, "", &format!("{}{{topic}}", "é".repeat(128)), Duration::from_secs(1));
        assert!(matches!(error, Err(SinkError::Invalid { field: "routing_key", .. })));
        assert!(RabbitSink::new(URL, "", &format!("{}{{topic}}", "x".repeat(255)), Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn a_routing_key_that_expands_past_255_bytes_refuses_only_its_job() {
        let routing = sink("{topic}.{subtopic}");
        let oversized = job("7", "t", Some(&"😀".repeat(64)));
        let error = routing.envelope(&oversized).err().unwrap();
        assert!(matches!(error, SinkError::Rejected { .. }), "{error}");
        assert!(!error.maybe_delivered(), "nothing was sent");
        assert!(error.to_string().contains("routing key is 258 bytes"), "{error}");
        let (routing_key, properties) = routing.envelope(&job("8", "t", Some("eu"))).unwrap();
        assert_eq!(routing_key.as_str(), "t.eu");
        assert_eq!(properties.message_id().as_ref().map(ShortString::as_str), Some("8"));
        // Exactly 255 bytes still fits.
        let fits = job("9", "t", Some(&"x".repeat(253)));
        assert_eq!(routing.envelope(&fits).unwrap().0.as_str().len(), 255);
    }
}
