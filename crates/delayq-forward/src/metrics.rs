//! The forwarder's Prometheus metrics, labelled by `sink` (the route's name,
//! by default its sink type).

use std::time::Duration;

/// Jobs the sink confirmed.
pub const PUBLISHED: &str = "delayq_forward_published_total";
/// Publish attempts that failed (the job is retried with its backoff).
pub const FAILED: &str = "delayq_forward_failed_total";
/// Failures after which the broker may hold the message anyway: possible duplicates.
pub const UNCONFIRMED: &str = "delayq_forward_unconfirmed_total";
/// Jobs that ran out of retries while forwarding and are now dead.
pub const DEAD: &str = "delayq_forward_dead_total";
/// Jobs reserved by the forwarder and not yet finished or given back.
pub const IN_FLIGHT: &str = "delayq_forward_in_flight";
/// Seconds from handing a batch to the sink to its last confirmation.
pub const PUBLISH_SECONDS: &str = "delayq_forward_publish_seconds";

pub(crate) fn record_outcomes(sink: &str, published: u64, failed: u64, unconfirmed: u64, dead: u64) {
    let label = sink.to_owned();
    if published > 0 {
        metrics::counter!(PUBLISHED, "sink" => label.clone()).increment(published);
    }
    if failed > 0 {
        metrics::counter!(FAILED, "sink" => label.clone()).increment(failed);
    }
    if unconfirmed > 0 {
        metrics::counter!(UNCONFIRMED, "sink" => label.clone()).increment(unconfirmed);
    }
    if dead > 0 {
        metrics::counter!(DEAD, "sink" => label).increment(dead);
    }
}

pub(crate) fn record_in_flight(sink: &str, change: f64) {
    metrics::gauge!(IN_FLIGHT, "sink" => sink.to_owned()).increment(change);
}

pub(crate) fn record_latency(sink: &str, elapsed: Duration) {
    metrics::histogram!(PUBLISH_SECONDS, "sink" => sink.to_owned()).record(elapsed.as_secs_f64());
}
