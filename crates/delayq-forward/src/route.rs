//! Routing: which topics go to which sink. Routes are tried in order; the
//! first with a matching pattern wins; a topic no route matches stays pull.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayq_common::Topic;

use crate::error::SinkError;
use crate::sink::Sink;

/// A topic pattern: `*` matches any run of characters, everything else
/// itself. `topic/group` (each side a pattern) takes a consumer group's
/// deliveries ([`Topic::for_group`](delayq_common::Topic::for_group)); a
/// pattern without `/` takes topics alone, never a group's deliveries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicPattern {
    pattern: String,
}

impl TopicPattern {
    /// Parses a pattern of topic characters and `*`, optionally followed by
    /// `/` and a group pattern.
    ///
    /// # Errors
    /// An empty pattern (or side of it) or a character a topic cannot hold.
    pub fn parse(pattern: &str) -> Result<TopicPattern, SinkError> {
        let well_formed = pattern.split('/').count() <= 2
            && pattern.split('/').all(|part| {
                !part.is_empty()
                    && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-' | '*'))
            });
        if !well_formed {
            return Err(SinkError::Invalid {
                field: "topics",
                reason: format!("{pattern:?} is not a topic pattern (A-Z a-z 0-9 . _ : - and *, optionally /group)"),
            });
        }
        Ok(TopicPattern { pattern: pattern.to_owned() })
    }

    /// Returns the pattern as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Returns whether the topic (or a group's deliveries, `topic/group`) matches.
    pub fn matches(&self, topic: &str) -> bool {
        match (self.pattern.split_once('/'), topic.split_once('/')) {
            (None, None) => glob_matches(&self.pattern, topic),
            (Some((topics, groups)), Some((topic, group))) => {
                glob_matches(topics, topic) && glob_matches(groups, group)
            }
            _ => false,
        }
    }
}

/// Returns whether `text` matches `pattern`, whose `*` matches any run of characters.
fn glob_matches(pattern: &str, text: &str) -> bool {
    let mut pieces = pattern.split('*');
    let Some(first) = pieces.next() else { return false };
    let Some(mut rest) = text.strip_prefix(first) else { return false };
    let pieces: Vec<&str> = pieces.collect();
    let Some((last, middle)) = pieces.split_last() else {
        // No `*` at all: the whole text must equal the pattern.
        return rest.is_empty();
    };
    for piece in middle {
        match rest.split_once(piece) {
            Some((_, after)) => rest = after,
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The default number of jobs reserved and published at a time.
pub const DEFAULT_BATCH: usize = delayq_common::defaults::DEFAULT_FORWARD_BATCH;
/// The default time one publish may take.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(delayq_common::defaults::DEFAULT_FORWARD_TIMEOUT_MS);

/// One route: its patterns, its sink and how it forwards.
pub struct Route {
    /// The topics it takes.
    pub patterns: Vec<TopicPattern>,
    /// Where their jobs go.
    pub sink: Arc<dyn Sink>,
    /// The `sink` label of its metrics.
    pub label: String,
    /// Jobs reserved and published at a time (at most the queue's pop limit).
    pub batch: usize,
    /// How long one publish may take before its unconfirmed jobs count as failed.
    pub timeout: Duration,
    counters: RouteCounters,
}

/// What a route's forwarding has done so far (the same numbers as its metrics).
#[derive(Debug, Default)]
pub struct RouteCounters {
    published: AtomicU64,
    failed: AtomicU64,
    unconfirmed: AtomicU64,
    dead: AtomicU64,
    unfinished: AtomicU64,
    in_flight: AtomicU64,
}

impl RouteCounters {
    /// Returns the jobs the sink confirmed.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }

    /// Returns the failed publish attempts.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Returns the failures after which the broker may hold the message: possible duplicates.
    pub fn unconfirmed(&self) -> u64 {
        self.unconfirmed.load(Ordering::Relaxed)
    }

    /// Returns the jobs that ran out of retries while forwarding.
    pub fn dead(&self) -> u64 {
        self.dead.load(Ordering::Relaxed)
    }

    /// Returns the confirmed jobs that could not be finished (they are delivered again: duplicates).
    pub fn unfinished(&self) -> u64 {
        self.unfinished.load(Ordering::Relaxed)
    }

    /// Returns the jobs handed to the sink and not yet settled.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub(crate) fn start_flight(&self, jobs: u64) {
        self.in_flight.fetch_add(jobs, Ordering::Relaxed);
    }

    pub(crate) fn end_flight(&self, jobs: u64) {
        // Never below zero: a batch ends only what it started.
        let _ = self.in_flight.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| Some(now.saturating_sub(jobs)));
    }

    pub(crate) fn add(&self, published: u64, failed: u64, unconfirmed: u64, dead: u64, unfinished: u64) {
        self.published.fetch_add(published, Ordering::Relaxed);
        self.failed.fetch_add(failed, Ordering::Relaxed);
        self.unconfirmed.fetch_add(unconfirmed, Ordering::Relaxed);
        self.dead.fetch_add(dead, Ordering::Relaxed);
        self.unfinished.fetch_add(unfinished, Ordering::Relaxed);
    }
}

impl Route {
    /// Creates a route with the default batch and timeout.
    pub fn new(patterns: Vec<TopicPattern>, sink: Arc<dyn Sink>, label: impl Into<String>) -> Route {
        Route {
            patterns,
            sink,
            label: label.into(),
            batch: DEFAULT_BATCH,
            timeout: DEFAULT_TIMEOUT,
            counters: RouteCounters::default(),
        }
    }

    /// Returns what the route has done so far.
    pub fn counters(&self) -> &RouteCounters {
        &self.counters
    }

    /// Returns whether the route takes this topic.
    pub fn takes(&self, topic: &Topic) -> bool {
        self.patterns.iter().any(|pattern| pattern.matches(topic.as_str()))
    }
}

/// The routes, in order.
#[derive(Default)]
pub struct RouteTable {
    routes: Vec<Arc<Route>>,
}

impl RouteTable {
    /// Builds the table; the order of `routes` is the order they are tried in.
    pub fn new(routes: Vec<Route>) -> RouteTable {
        RouteTable { routes: routes.into_iter().map(Arc::new).collect() }
    }

    /// Returns whether there is no route (every topic stays pull).
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// Returns the route of a topic: the first whose pattern matches.
    pub fn route_for(&self, topic: &Topic) -> Option<&Arc<Route>> {
        self.routes.iter().find(|route| route.takes(topic))
    }

    /// Returns the routes, in order.
    pub fn routes(&self) -> &[Arc<Route>] {
        &self.routes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::LogSink;

    fn matches(pattern: &str, topic: &str) -> bool {
        TopicPattern::parse(pattern).unwrap().matches(topic)
    }

    #[test]
    fn star_matches_any_run_of_characters() {
        assert!(matches("order.*", "order.timeout"));
        assert!(matches("order.*", "order."));
        assert!(!matches("order.*", "orders.timeout"));
        assert!(matches("*", "anything"));
        assert!(matches("*.timeout", "payment.timeout"));
        assert!(!matches("*.timeout", "payment.timeouts"));
        assert!(matches("a*b*c", "a-x-b-y-c"));
        assert!(!matches("a*b*c", "a-x-c"));
        assert!(matches("a*a", "aa"));
        assert!(!matches("a*a", "a"));
        assert!(matches("payment.timeout", "payment.timeout"));
        assert!(!matches("payment.timeout", "payment.timeout2"));
    }

    #[test]
    fn a_group_pattern_takes_that_groups_deliveries_and_a_topic_pattern_none() {
        assert!(matches("order/billing", "order/billing"));
        assert!(matches("order.*/*", "order.eu/billing"));
        assert!(!matches("order/billing", "order/shipping"));
        assert!(!matches("order/billing", "order"));
        assert!(!matches("*", "order/billing"), "a topic pattern never takes a group's deliveries");
    }

    #[test]
    fn malformed_patterns_are_refused() {
        assert!(TopicPattern::parse("").is_err());
        assert!(TopicPattern::parse("order/").is_err());
        assert!(TopicPattern::parse("a/b/c").is_err());
        assert!(TopicPattern::parse("order?").is_err());
    }

    fn route(label: &str, patterns: &[&str]) -> Route {
        let patterns = patterns.iter().map(|pattern| TopicPattern::parse(pattern).unwrap()).collect();
        Route::new(patterns, Arc::new(LogSink::new()), label)
    }

    #[test]
    fn the_first_matching_route_wins() {
        let table = RouteTable::new(vec![route("first", &["order.vip", "pay.*"]), route("second", &["order.*"])]);
        let label = |topic: &str| table.route_for(&Topic::parse(topic).unwrap()).map(|route| route.label.clone());
        assert_eq!(label("order.vip").as_deref(), Some("first"));
        assert_eq!(label("order.normal").as_deref(), Some("second"));
        assert_eq!(label("pay.x").as_deref(), Some("first"));
        assert_eq!(label("audit.x"), None);
    }
}
