//! Builds the forwarding routes from `[forward]` at start, so that a route
//! whose sink cannot be built fails the start with a message naming it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use delayq_config::{Config, RouteConfig};
use delayq_controller::{ForwardingProvider, RouteSummary};
use delayq_forward::{build_sink, Route, RouteTable, SinkSpec, TopicPattern};
use tracing::info;

/// Returns the route table; empty (every topic pull) without routes.
pub(crate) fn build_routes(config: &Config) -> anyhow::Result<Arc<RouteTable>> {
    let mut routes = Vec::with_capacity(config.forward.routes.len());
    for (index, route_config) in config.forward.routes.iter().enumerate() {
        let route = build_route(route_config)
            .with_context(|| format!("invalid configuration: forward.routes[{index}] ({})", route_config.sink))?;
        info!(index, sink = %route.label, topics = ?route_config.topics, "forwarding route");
        routes.push(route);
    }
    Ok(Arc::new(RouteTable::new(routes)))
}

fn build_route(config: &RouteConfig) -> anyhow::Result<Route> {
    let patterns = config.topics.iter().map(|pattern| TopicPattern::parse(pattern)).collect::<Result<Vec<_>, _>>()?;
    let sink = build_sink(&sink_spec(config)?)?;
    let mut route = Route::new(patterns, sink, config.label());
    route.batch = config.batch_or_default();
    route.timeout = Duration::from_millis(config.timeout_ms_or_default());
    Ok(route)
}

fn sink_spec(config: &RouteConfig) -> anyhow::Result<SinkSpec> {
    let timeout = Duration::from_millis(config.timeout_ms_or_default());
    let template = |value: &Option<String>| value.clone().unwrap_or_else(|| "{topic}".to_owned());
    Ok(match config.sink.as_str() {
        "log" => SinkSpec::Log,
        "webhook" => SinkSpec::Webhook {
            url: config.url.clone().context("url is required for a webhook sink")?,
            secret: config.secret.clone(),
            timeout,
        },
        "rabbitmq" => SinkSpec::Rabbitmq {
            url: config.url.clone().context("url is required for a rabbitmq sink")?,
            exchange: config.exchange.clone().unwrap_or_default(),
            routing_key: template(&config.routing_key),
            timeout,
        },
        "kafka" => SinkSpec::Kafka {
            brokers: config.brokers.clone().context("brokers is required for a kafka sink")?,
            topic: template(&config.kafka_topic),
            properties: config.kafka_properties.clone(),
            timeout,
        },
        other => anyhow::bail!("unknown sink type {other:?}"),
    })
}

/// What the console's forwarding page shows: each route's counters, read on each view.
pub(crate) fn summaries(routes: &Arc<RouteTable>) -> ForwardingProvider {
    let routes = Arc::clone(routes);
    Arc::new(move || {
        routes
            .routes()
            .iter()
            .map(|route| {
                let counters = route.counters();
                RouteSummary {
                    name: route.label.clone(),
                    sink: route.sink.kind().to_owned(),
                    topics: route.patterns.iter().map(|pattern| pattern.as_str().to_owned()).collect(),
                    published: counters.published(),
                    failed: counters.failed(),
                    unconfirmed: counters.unconfirmed(),
                    dead: counters.dead(),
                    in_flight: counters.in_flight(),
                }
            })
            .collect()
    })
}
