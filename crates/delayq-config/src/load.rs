//! Layering (defaults < TOML file < environment) and validation.

use std::path::{Path, PathBuf};

use delayq_common::push::{MAX_PRIORITY, MAX_TTR, MIN_TTR};
use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::Value;
use figment::Figment;

use crate::model::{Config, FORGET_AFTER_BOUNDS_MS, MAX_HORIZON_MS, MIN_HORIZON_MS};
use crate::secret_errors::{describe_parse_error, without_secrets};

/// The file read when no `--config` is given and it exists.
pub const DEFAULT_CONFIG_PATH: &str = "config/delayq.toml";
use delayq_common::defaults::{MAX_GROUPS_PER_TOPIC, MAX_REDIS_SHARDS};

/// The flat `DELAYQ_*` variables of the API contract and the keys they set.
pub(crate) const FLAT_VARIABLES: [(&str, &str); 8] = [
    ("http_addr", "server.http_addr"),
    ("grpc_addr", "server.grpc_addr"),
    ("data_dir", "server.data_dir"),
    ("node_id", "server.node_id"),
    ("redis_url", "scheduler.redis_url"),
    ("database_url", "store.database_url"),
    ("zookeeper", "zookeeper.connect"),
    ("beanstalk_addr", "beanstalk.addr"),
];

/// The keys whose values are text. figment reads every other variable as
/// TOML-like data (`["t1"]` a list, `7` a number); these take the variable as it
/// is, so that a node id or a key prefix of digits alone (`007`) stays that text.
const TEXT_KEYS: [&str; 10] = [
    "server.http_addr",
    "server.grpc_addr",
    "server.data_dir",
    "server.node_id",
    "scheduler.redis_url",
    "scheduler.redis_prefix",
    "store.database_url",
    "zookeeper.connect",
    "zookeeper.root",
    "beanstalk.addr",
];

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file given with `--config` does not exist.
    #[error("config file {0} does not exist")]
    MissingFile(PathBuf),
    /// A source could not be parsed or has unknown keys. Loading withholds
    /// the values of keys that hold secrets.
    // Not a `source`: figment's own message would repeat this one, and
    // `{:#}` prints the chain.
    #[error("invalid configuration: {}", describe_parse_error(.0))]
    Parse(Box<figment::Error>),
    /// A value is out of range.
    #[error("invalid configuration: {key} {reason}")]
    Invalid {
        /// The dotted key (`limits.max_body_bytes`).
        key: &'static str,
        /// Why.
        reason: String,
    },
    /// A forwarding route is malformed.
    #[error("invalid configuration: forward.routes[{index}].{key} {reason}")]
    InvalidRoute {
        /// The route's position in `forward.routes`, from 0.
        index: usize,
        /// The key within the route (`sink`, `topics`, ...).
        key: &'static str,
        /// Why.
        reason: String,
    },
}

impl Config {
    /// Loads the configuration: defaults, then the file (`path`, or
    /// [`DEFAULT_CONFIG_PATH`] when it exists), then the environment.
    ///
    /// # Errors
    /// A missing explicit file, a parse error naming the key, or an invalid value.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let file = match path {
            Some(path) if !path.is_file() => return Err(ConfigError::MissingFile(path.to_owned())),
            Some(path) => Some(path.to_owned()),
            None => Some(PathBuf::from(DEFAULT_CONFIG_PATH)).filter(|path| path.is_file()),
        };
        Config::from_figment(Config::figment(file.as_deref()))
    }

    /// Returns the layered sources without extracting them.
    pub fn figment(file: Option<&Path>) -> Figment {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = file {
            figment = figment.merge(Toml::file_exact(file));
        }
        merge_environment(figment)
    }

    /// Extracts and validates a configuration from any figment (tests inject values here).
    ///
    /// # Errors
    /// A parse error naming the key, or an invalid value.
    pub fn from_figment(figment: Figment) -> Result<Config, ConfigError> {
        let config: Config = figment.extract().map_err(|error| ConfigError::Parse(Box::new(without_secrets(error))))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks value ranges that types alone do not.
    ///
    /// # Errors
    /// The first invalid value, naming its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &'static str, reason: String| Err(ConfigError::Invalid { key, reason });
        if self.server.http_addr.parse::<std::net::SocketAddr>().is_err() {
            return invalid("server.http_addr", format!("must be host:port, got {:?}", self.server.http_addr));
        }
        if self.server.worker_threads == Some(0) {
            return invalid("server.worker_threads", "must be at least 1".to_owned());
        }
        if self.server.grpc_addr != "off" && self.server.grpc_addr.parse::<std::net::SocketAddr>().is_err() {
            return invalid("server.grpc_addr", format!("must be host:port or off, got {:?}", self.server.grpc_addr));
        }
        if self.beanstalk.enabled() && self.beanstalk.addr.parse::<std::net::SocketAddr>().is_err() {
            return invalid("beanstalk.addr", format!("must be host:port or off, got {:?}", self.beanstalk.addr));
        }
        if self.beanstalk.max_connections == 0 {
            return invalid("beanstalk.max_connections", "must be at least 1".to_owned());
        }
        if self.beanstalk.idle_timeout_ms == 0 {
            return invalid("beanstalk.idle_timeout_ms", "must be at least 1".to_owned());
        }
        if let Some(url) = &self.store.database_url {
            if !(url.starts_with("sqlite:") || url.starts_with("mysql://") || url.starts_with("mariadb://")) {
                return invalid("store.database_url", "must start with sqlite: or mysql://".to_owned());
            }
        }
        if let Some(url) = &self.scheduler.redis_url {
            // The Redis client is built without TLS: a rediss:// URL is refused
            // here rather than failing every connection once the node runs.
            if url.split(',').any(|seed| !seed.trim().starts_with("redis://")) {
                return invalid(
                    "scheduler.redis_url",
                    "must be redis:// URLs separated by commas (rediss://, Redis over TLS, is not supported)"
                        .to_owned(),
                );
            }
        }
        if self.zookeeper.connect.is_some() && self.scheduler.redis_url.is_none() {
            return invalid(
                "zookeeper.connect",
                "needs scheduler.redis_url: nodes can only share a Redis scheduler".to_owned(),
            );
        }
        if self.scheduler.promote_batch == 0 {
            return invalid("scheduler.promote_batch", "must be at least 1".to_owned());
        }
        if self.scheduler.horizon_ms != 0 && !(MIN_HORIZON_MS..=MAX_HORIZON_MS).contains(&self.scheduler.horizon_ms) {
            return invalid(
                "scheduler.horizon_ms",
                format!("must be 0 (off) or from {MIN_HORIZON_MS} to {MAX_HORIZON_MS}"),
            );
        }
        if self.scheduler.redis_shards.is_some_and(|shards| !(1..=MAX_REDIS_SHARDS).contains(&shards)) {
            return invalid("scheduler.redis_shards", format!("must be from 1 to {MAX_REDIS_SHARDS}"));
        }
        if self.limits.max_body_bytes == 0 || self.limits.max_body_bytes > self.limits.max_request_bytes {
            return invalid("limits.max_body_bytes", "must be from 1 to limits.max_request_bytes".to_owned());
        }
        let ttr = std::time::Duration::from_millis(self.jobs.ttr_ms);
        if !(MIN_TTR..=MAX_TTR).contains(&ttr) {
            return invalid("jobs.ttr_ms", format!("must be from {} to {}", MIN_TTR.as_millis(), MAX_TTR.as_millis()));
        }
        let (least, most) = FORGET_AFTER_BOUNDS_MS;
        if !(least..=most).contains(&self.consumers.forget_after_ms) {
            return invalid("consumers.forget_after_ms", format!("must be from {least} to {most}"));
        }
        for (topic, groups) in &self.groups {
            if let Err(invalid_name) = delayq_common::Topic::parse(topic.as_str()) {
                return invalid("groups", format!("{topic:?}: {invalid_name}"));
            }
            if let Some(Err(invalid_name)) =
                groups.iter().map(|group| delayq_common::Group::parse(group.as_str())).find(Result::is_err)
            {
                return invalid("groups", format!("{topic:?}: {invalid_name}"));
            }
            if groups.len() > MAX_GROUPS_PER_TOPIC {
                return invalid("groups", format!("{topic:?}: at most {MAX_GROUPS_PER_TOPIC} groups a topic"));
            }
        }
        if self.jobs.priority > MAX_PRIORITY {
            return invalid("jobs.priority", format!("must be from 0 to {MAX_PRIORITY}"));
        }
        if self.jobs.retry_base_ms > self.jobs.retry_max_ms {
            return invalid("jobs.retry_base_ms", "must not exceed jobs.retry_max_ms".to_owned());
        }
        for (index, route) in self.forward.routes.iter().enumerate() {
            route.validate().map_err(|problem| ConfigError::InvalidRoute {
                index,
                key: problem.key,
                reason: problem.reason,
            })?;
        }
        Ok(())
    }
}

/// Merges the environment over `figment`: the [`TEXT_KEYS`] as the variables'
/// text, every other key parsed by figment.
fn merge_environment(figment: Figment) -> Figment {
    let text: Vec<(String, String)> =
        environment().only(&TEXT_KEYS).iter().map(|(key, value)| (key.as_str().to_owned(), unquoted(value))).collect();
    let parsed = figment.merge(environment().ignore(&TEXT_KEYS));
    text.into_iter().fold(parsed, |figment, (key, value)| figment.merge(Serialized::default(&key, value)))
}

/// The text of a [`TEXT_KEYS`] variable. A value in double quotes (once the only
/// way to give digits alone) loses them, as figment would read it.
fn unquoted(value: String) -> String {
    match value.parse::<Value>() {
        Ok(Value::String(_, text)) => text,
        _ => value,
    }
}

/// `DELAYQ_HTTP_ADDR`-style flat variables, plus `DELAYQ_SECTION__KEY` for any key.
///
/// Other `DELAYQ_*` variables (the test suite's `DELAYQ_TEST_*`, say) are ignored.
fn environment() -> Env {
    Env::prefixed("DELAYQ_")
        .filter(|key| {
            let key = key.as_str().to_ascii_lowercase();
            key.contains("__") || FLAT_VARIABLES.iter().any(|(flat, _)| *flat == key)
        })
        .map(|key| {
            let key = key.as_str().to_ascii_lowercase();
            match FLAT_VARIABLES.iter().find(|(flat, _)| *flat == key) {
                Some((_, dotted)) => (*dotted).into(),
                None => key.replace("__", ".").into(),
            }
        })
}

#[cfg(test)]
// figment's `Jail` closures return its own (large) error type.
#[allow(clippy::result_large_err)]
mod tests;
