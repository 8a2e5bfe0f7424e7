//! Starts the beanstalkd protocol listener (`beanstalk.addr`) beside REST and
//! gRPC, over the same queue, drained on shutdown like them.
//!
//! The protocol has no authentication: a listener beyond loopback is refused
//! at start unless `beanstalk.allow_remote` says otherwise, whatever
//! `auth.tokens` holds (they protect REST and gRPC, not this port).

use std::sync::Arc;

use anyhow::Context;
use delayq_config::Config;
use delayq_queue::DelayQueue;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

use crate::guard::is_loopback;
use crate::serve::listen;

/// Refuses a beanstalk listener beyond loopback unless it is allowed.
///
/// # Errors
/// The listener is reachable beyond loopback and `beanstalk.allow_remote` is off.
pub(crate) fn check_exposure(config: &Config) -> anyhow::Result<()> {
    let beanstalk = &config.beanstalk;
    if !beanstalk.enabled() || is_loopback(&beanstalk.addr) {
        return Ok(());
    }
    if beanstalk.allow_remote {
        warn!(addr = %beanstalk.addr, "the beanstalk listener is reachable beyond loopback, and the protocol has no authentication");
        return Ok(());
    }
    Err(anyhow::anyhow!(
        "refusing to start: beanstalk.addr {} is beyond loopback and the beanstalkd protocol has no authentication, \
         so anyone who can reach it could read and delete jobs. Listen on 127.0.0.1 or ::1, or set \
         beanstalk.allow_remote = true (DELAYQ_BEANSTALK__ALLOW_REMOTE=true) to expose it anyway",
        beanstalk.addr
    ))
}

/// Binds and serves the beanstalk listener unless it is `off`; returns the
/// words the listening line gains (` beanstalk=ADDR`, or nothing).
pub(crate) async fn start(
    config: &Config,
    queue: Arc<DelayQueue>,
    tasks: &TaskTracker,
    shutdown: CancellationToken,
) -> anyhow::Result<String> {
    if !config.beanstalk.enabled() {
        return Ok(String::new());
    }
    let addr = &config.beanstalk.addr;
    let listener = listen(addr).await.with_context(|| format!("failed to listen on {addr}"))?;
    let bound = listener.local_addr().context("failed to read the bound beanstalk address")?;
    let beanstalk_config = delayq_beanstalk::BeanstalkConfig {
        max_connections: config.beanstalk.max_connections,
        idle_timeout: config.beanstalk.idle_timeout(),
    };
    tasks.spawn(delayq_beanstalk::serve(listener, queue, beanstalk_config, shutdown));
    Ok(format!(" beanstalk={bound}"))
}
