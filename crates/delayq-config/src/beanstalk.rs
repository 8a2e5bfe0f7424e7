//! The `[beanstalk]` section: the beanstalkd protocol listener.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The `beanstalk.addr` value that turns the listener off.
pub const BEANSTALK_OFF: &str = "off";
/// The default beanstalk listen address: off, since the protocol has no
/// authentication (beanstalkd's own port is 11300).
pub const DEFAULT_BEANSTALK_ADDR: &str = BEANSTALK_OFF;
/// The most beanstalk connections open at once by default.
pub const DEFAULT_BEANSTALK_MAX_CONNECTIONS: usize = 4_096;
/// How long a beanstalk connection may stay silent between commands by default, in ms.
pub const DEFAULT_BEANSTALK_IDLE_TIMEOUT_MS: u64 = 300_000;

/// The beanstalkd protocol listener.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BeanstalkConfig {
    /// The listen address, or `off` (`DELAYQ_BEANSTALK_ADDR`).
    pub addr: String,
    /// The most connections open at once; further ones wait to be accepted.
    pub max_connections: usize,
    /// How long a connection may take to send its next command or to read a
    /// reply, in ms; it is closed after that. A `reserve` waiting for a job is not idle.
    pub idle_timeout_ms: u64,
    /// Lets the listener be reachable beyond loopback. The protocol has no
    /// authentication, so a node refuses to start with such a listener unless this is set.
    pub allow_remote: bool,
}

impl Default for BeanstalkConfig {
    fn default() -> BeanstalkConfig {
        BeanstalkConfig {
            addr: DEFAULT_BEANSTALK_ADDR.to_owned(),
            max_connections: DEFAULT_BEANSTALK_MAX_CONNECTIONS,
            idle_timeout_ms: DEFAULT_BEANSTALK_IDLE_TIMEOUT_MS,
            allow_remote: false,
        }
    }
}

impl BeanstalkConfig {
    /// Returns whether the listener is on.
    pub fn enabled(&self) -> bool {
        self.addr != BEANSTALK_OFF
    }

    /// Returns the idle timeout.
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms)
    }
}
