//! `delayq serve`: wiring and graceful shutdown.
//!
//! Start: config, the exposure guard (no listener beyond loopback without
//! auth, see `guard`), store, scheduler (on Redis, joining the registry of
//! nodes that share the prefix), restore from the store, timer, listeners.
//! Stop (SIGINT/SIGTERM): the root token is cancelled, the listeners stop
//! accepting and drain, the timer stops, the journal is flushed and the
//! store closed, all under the configured deadline.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use delayq_config::Config;
use delayq_controller::{AppState, ConsoleOptions, ControllerConfig, HttpLimits, RoleProvider};
use delayq_queue::{DelayQueue, QueueSettings};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::{TcpListener, TcpSocket};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};
use tracing_subscriber::EnvFilter;

use crate::backends::{build_leadership, build_scheduler, build_store, SchedulerBackend};
use crate::node::NodeIdentity;
use crate::{beanstalk, forward, guard, leader};

pub(crate) async fn run(config: Config) -> anyhow::Result<()> {
    install_tracing();
    // Before anything is opened: a refused node touches neither its store nor a port.
    guard::check(&config.server, &config.auth)?;
    beanstalk::check_exposure(&config)?;
    let metrics = install_metrics()?;
    let node = NodeIdentity::resolve(config.server.node_id.as_deref());
    info!(node = %node.name, worker_id = node.worker_id, "starting delayq");

    let root = CancellationToken::new();
    tokio::spawn(cancel_on_signal(root.clone())?);
    let routes = forward::build_routes(&config)?;
    let forwarding = forward::summaries(&routes);
    let leadership = build_leadership(&config, &node, root.child_token()).await?;
    let store = build_store(&config, &node.name).await?;
    // Joins the node registry before anything reads the store into the scheduler.
    let SchedulerBackend { scheduler, node_registry } = build_scheduler(&config, &node.name, store.store_id()).await?;
    let settings = QueueSettings {
        limits: config.limits.job_limits(),
        defaults: config.jobs.job_defaults(),
        retry: config.jobs.retry_policy(),
        promote_batch: config.scheduler.promote_batch,
        max_waiters: config.limits.max_waiters,
        horizon: config.scheduler.horizon(),
        node: node.name.clone(),
        forget_consumers_after: config.consumers.forget_after(),
        ..QueueSettings::default()
    };
    // Under ZooKeeper the worker id is claimed there, so two live nodes never share one.
    let ids = delayq_common::Snowflake::new(leadership.worker_id());
    let queue = Arc::new(DelayQueue::new(scheduler, store, ids, settings));

    if config.scheduler.redis_url.is_none() {
        // The in-process scheduler starts empty: rebuild it before serving, so
        // that no request races the rebuild.
        let restored = queue.restore(false).await.context("failed to restore jobs from the store")?;
        info!(restored, "scheduler rebuilt from the store");
    }

    declare_configured_groups(&queue, &config).await?;

    let tasks = TaskTracker::new();
    if let Some(node_registry) = node_registry {
        tasks.spawn(node_registry.run_heartbeat(root.child_token()));
    }
    tasks.spawn(delayq_queue::run_publisher(Arc::clone(&queue), root.child_token()));
    tasks.spawn(leader::supervise(Arc::clone(&leadership), Arc::clone(&queue), routes, root.child_token()));

    let listener = listen(&config.server.http_addr)
        .await
        .with_context(|| format!("failed to listen on {}", config.server.http_addr))?;
    let http_addr = listener.local_addr().context("failed to read the bound address")?;
    let coordinator = config.zookeeper.connect.is_some().then_some("zookeeper");
    let role = leader::role_provider(&leadership, coordinator);
    let app = http_app(Arc::clone(&queue), &config, metrics, role).with_forwarding(forwarding);
    let app = delayq_controller::router(app);
    let http_limits = HttpLimits::new(config.server.header_read_timeout_ms, config.server.max_connections);
    let http_server = tokio::spawn(delayq_controller::serve(listener, app, http_limits, root.child_token()));
    let grpc_addr = start_grpc(&config, Arc::clone(&queue), &tasks, root.child_token()).await?;
    let beanstalk = beanstalk::start(&config, Arc::clone(&queue), &tasks, root.child_token()).await?;
    announce(&format!("delayq listening http={http_addr}{beanstalk} grpc={grpc_addr}"))?;

    root.cancelled().await;
    info!("shutting down");
    // Hand leadership over at once rather than after the session times out.
    leadership.resign().await;
    let deadline = config.server.shutdown_timeout();
    let drained = tokio::time::timeout(deadline, async {
        if let Err(error) = http_server.await {
            warn!(error = %error, "http server task failed");
        }
        tasks.close();
        tasks.wait().await;
    })
    .await;
    if drained.is_err() {
        warn!(timeout_ms = deadline.as_millis() as u64, "shutdown deadline passed, closing anyway");
    }
    queue.close().await;
    info!("stopped");
    Ok(())
}

fn http_app(queue: Arc<DelayQueue>, config: &Config, metrics: PrometheusHandle, role: RoleProvider) -> AppState {
    let controller_config = ControllerConfig {
        tokens: config.auth.tokens.clone(),
        admin_tokens: config.auth.admin_tokens.clone(),
        max_request_bytes: config.limits.max_request_bytes,
        max_result_bytes: config.limits.max_result_bytes,
        request_timeout: Duration::from_millis(config.server.request_timeout_ms),
        metrics,
        console: ConsoleOptions { enabled: config.console.enabled, read_only: config.console.read_only },
    };
    AppState::new(queue, controller_config).with_role(role)
}

/// The listen backlog of both listeners. Connections past
/// `server.max_connections` wait there until one closes; with the usual
/// default of 128 a burst past the cap would find the backlog full and retry
/// its SYNs for seconds.
const LISTEN_BACKLOG: u32 = 1024;

/// Binds a listener on `addr` (`ip:port`) with [`LISTEN_BACKLOG`].
pub(crate) async fn listen(addr: &str) -> anyhow::Result<TcpListener> {
    let address = tokio::net::lookup_host(addr).await?.next().context("the address resolves to nothing")?;
    let socket = if address.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    // As the standard library's bind does: a restarted node can bind its port
    // while connections of the previous process linger in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    Ok(socket.listen(LISTEN_BACKLOG)?)
}

/// Binds and serves gRPC unless its address is `off`; returns the bound address (or `off`).
async fn start_grpc(
    config: &Config,
    queue: Arc<DelayQueue>,
    tasks: &TaskTracker,
    shutdown: CancellationToken,
) -> anyhow::Result<String> {
    if config.server.grpc_addr == "off" {
        return Ok("off".to_owned());
    }
    let listener = listen(&config.server.grpc_addr)
        .await
        .with_context(|| format!("failed to listen on {}", config.server.grpc_addr))?;
    let bound = listener.local_addr().context("failed to read the bound grpc address")?;
    let rpc_config = delayq_rpc::RpcConfig {
        user_tokens: config.auth.tokens.clone(),
        admin_tokens: config.auth.admin_tokens.clone(),
        max_reply_bytes: config.limits.max_request_bytes,
        max_result_bytes: config.limits.max_result_bytes,
        max_waiters: config.limits.max_waiters,
        max_concurrent_streams: delayq_rpc::DEFAULT_MAX_CONCURRENT_STREAMS,
        max_connections: config.server.max_connections,
        header_read_timeout: Duration::from_millis(config.server.header_read_timeout_ms),
        request_arrival_timeout: Duration::from_millis(config.server.request_timeout_ms),
    };
    tasks.spawn(async move {
        if let Err(error) = delayq_rpc::serve(listener, queue, rpc_config, shutdown.cancelled_owned()).await {
            warn!(error = %error, "grpc server stopped with an error");
        }
    });
    Ok(bound.to_string())
}

/// Prints the one line scripts wait for, and flushes it.
fn announce(line: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}").context("failed to write to stdout")?;
    stdout.flush().context("failed to flush stdout")?;
    Ok(())
}

fn install_tracing() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Logs go to stderr: stdout carries the listening line.
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

fn install_metrics() -> anyhow::Result<PrometheusHandle> {
    PrometheusBuilder::new().install_recorder().context("failed to install the metrics recorder")
}

/// Installs the SIGINT and SIGTERM handlers at once, so a signal that arrives
/// right after the listeners are announced stops the node gracefully instead
/// of killing it; the returned future cancels `root` on the first of them.
fn cancel_on_signal(root: CancellationToken) -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => info!("SIGINT received"),
            _ = terminate.recv() => info!("SIGTERM received"),
        }
        root.cancel();
    })
}

/// Declares the consumer groups the configuration names (`[groups]`).
async fn declare_configured_groups(queue: &DelayQueue, config: &Config) -> anyhow::Result<()> {
    for (topic, groups) in &config.groups {
        let topic = delayq_common::Topic::parse(topic.as_str())?;
        for group in groups {
            let group = delayq_common::Group::parse(group.as_str())?;
            queue
                .declare_group(&topic, &group)
                .await
                .with_context(|| format!("failed to declare group {group} of {topic}"))?;
        }
    }
    Ok(())
}
