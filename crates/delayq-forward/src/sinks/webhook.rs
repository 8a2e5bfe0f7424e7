//! The webhook sink: POST the job as JSON; a 2xx answer is the confirmation.
//!
//! Redirects are never followed: a client that follows a 302 or 303 turns the
//! POST into a GET without the body, and a 2xx from the redirect target would
//! then finish a job the endpoint never received. Any 3xx is a failed delivery.

use std::time::Duration;

use async_trait::async_trait;
use delayq_common::{redact, Job};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::SinkError;
use crate::sink::{message_headers, Sink};

/// The header carrying `sha256=<hex HMAC-SHA256 of the body>` when a secret is set.
pub const SIGNATURE_HEADER: &str = "delayq-signature";

const KIND: &str = "webhook";

/// POSTs each job to one URL, concurrently within a batch.
pub struct WebhookSink {
    client: reqwest::Client,
    url: reqwest::Url,
    secret: Option<Vec<u8>>,
}

impl WebhookSink {
    /// Creates the sink; each request may take up to `timeout`.
    ///
    /// # Errors
    /// A malformed URL.
    pub fn new(url: &str, secret: Option<&str>, timeout: Duration) -> Result<WebhookSink, SinkError> {
        let url =
            reqwest::Url::parse(url).ok().filter(|url| matches!(url.scheme(), "http" | "https")).ok_or_else(|| {
                SinkError::Invalid { field: "url", reason: format!("{:?} is not an http(s) URL", redact::url(url)) }
            })?;
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|error| SinkError::Invalid { field: "url", reason: error.to_string() })?;
        Ok(WebhookSink { client, url, secret: secret.map(|secret| secret.as_bytes().to_vec()) })
    }

    async fn post(&self, job: &Job) -> Result<(), SinkError> {
        let body = job_json(job);
        let mut request = self.client.post(self.url.clone()).header(reqwest::header::CONTENT_TYPE, "application/json");
        for (name, value) in message_headers(job) {
            request = request.header(name, value);
        }
        if let Some(secret) = &self.secret {
            request = request.header(SIGNATURE_HEADER, format!("sha256={}", sign(secret, &body)));
        }
        let response = request.body(body).send().await.map_err(|error| {
            let reason = error.to_string();
            if error.is_connect() {
                SinkError::Unavailable { sink: KIND, reason }
            } else {
                // It may have reached the endpoint: a retry may duplicate it.
                SinkError::Unconfirmed { sink: KIND, reason }
            }
        })?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else if status.is_redirection() {
            Err(SinkError::Rejected { sink: KIND, reason: format!("answered {status}; redirects are not followed") })
        } else {
            Err(SinkError::Rejected { sink: KIND, reason: format!("answered {status}") })
        }
    }
}

#[async_trait]
impl Sink for WebhookSink {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn publish(&self, jobs: &[Job]) -> Vec<Result<(), SinkError>> {
        futures::future::join_all(jobs.iter().map(|job| self.post(job))).await
    }
}

/// Returns the JSON a webhook receives: the job as `/pop` shows it.
fn job_json(job: &Job) -> Vec<u8> {
    let value = serde_json::json!({
        "id": job.id,
        "topic": job.topic,
        "subtopic": job.subtopic,
        "body": job.body,
        "attempt": job.attempt,
        "runAt": job.run_at,
        "createTime": job.create_time,
        "ttr": job.ttr.as_millis() as u64,
        "priority": job.priority,
        "bizKey": job.biz_key,
    });
    value.to_string().into_bytes()
}

/// Returns the lowercase hex HMAC-SHA256 of `body` under `secret`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    // HMAC accepts keys of any length; new_from_slice cannot fail for it.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else { return String::new() };
    mac.update(body);
    mac.finalize().into_bytes().iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_the_rfc_4231_hmac_sha256() {
        // RFC 4231, test case 2.
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn only_http_urls_are_accepted() {
        assert!(WebhookSink::new("ftp://x/y", None, Duration::from_secs(1)).is_err());
        assert!(WebhookSink::new("not a url", None, Duration::from_secs(1)).is_err());
        assert!(WebhookSink::new("http://127.0.0.1:9/due", Some("k"), Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn a_refused_url_is_quoted_without_its_password() {
        let error = WebhookSink::new("http://user:hook-s3cret@exa mple/due", None, Duration::from_secs(1)).err();
        let message = error.map(|error| error.to_string()).unwrap_or_default();
        assert!(message.contains("url") && !message.contains("hook-s3cret"), "{message}");
    }
}
