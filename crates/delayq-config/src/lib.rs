//! The one typed delayq configuration, layered with figment: defaults <
//! `config/delayq.toml` (or `--config FILE`) < `DELAYQ_*` environment variables.
//!
//! Must not be read anywhere else: other crates receive their own sub-struct.
//!
//! Layout:
//! - [`model`]: the config structs and their defaults.
//! - [`load`]: layering and validation.
//! - [`forward`]: the `[forward]` routes and their validation.
//! - [`beanstalk`]: the `[beanstalk]` listener.

// Code reachable from a request, a broker reply or a database row must not panic (docs/contributing.md, "Panics").
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic, clippy::unreachable)
)]

pub mod beanstalk;
pub mod forward;
pub mod load;
pub mod model;
mod secret_errors;

pub use beanstalk::BeanstalkConfig;
pub use forward::{ForwardConfig, RouteConfig};
pub use load::{ConfigError, DEFAULT_CONFIG_PATH};
pub use model::{
    AuthConfig, Config, ConsoleConfig, ConsumersConfig, JobsConfig, LimitsConfig, SchedulerConfig, ServerConfig,
    SqliteSynchronous, StoreConfig, ZookeeperConfig,
};
