//! The RabbitMQ sink: persistent messages, publisher confirms, mandatory
//! publishing (a message no queue takes is a failure), reconnect with backoff.

use std::time::Duration;

use async_trait::async_trait;
use delayq_common::Job;
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
    /// A malformed URL or routing key template.
    pub fn new(url: &str, exchange: &str, routing_key: &str, timeout: Duration) -> Result<RabbitSink, SinkError> {
        url.parse::<lapin::uri::AMQPUri>()
            .map_err(|reason| SinkError::Invalid { field: "url", reason: format!("not an amqp URL: {reason}") })?;
        Ok(RabbitSink {
            url: url.to_owned(),
            exchange: exchange.into(),
            routing_key: Template::parse("routing_key", routing_key)?,
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

    fn properties(job: &Job) -> BasicProperties {
        let mut headers = FieldTable::default();
        for (name, value) in message_headers(job) {
            headers.insert(name.into(), AMQPValue::LongString(LongString::from(value)));
        }
        BasicProperties::default()
            .with_delivery_mode(PERSISTENT)
            .with_message_id(job.id.as_str().into())
            .with_headers(headers)
    }
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
            let routing_key: ShortString = self.routing_key.expand(job).into();
            let sent = tokio::time::timeout_at(
                deadline,
                channel.basic_publish(
                    self.exchange.clone(),
                    routing_key,
                    mandatory,
                    job.body.as_bytes(),
                    RabbitSink::properties(job),
                ),
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
