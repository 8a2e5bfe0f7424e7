//! The beanstalkd face of delayq: the beanstalkd 1.12 text protocol over TCP,
//! so that any beanstalkd client works against delayq. A tube is a topic,
//! `bury` is delayq's dead state and `kick` brings buried jobs back; every
//! command is mapped onto the same [`delayq_queue::DelayQueue`] the REST and
//! gRPC faces call, so its rules, limits, metrics and durability are theirs.
//!
//! Must not hold its own job state beyond a connection's reservations.
//!
//! Layout:
//! - [`server`]: [`BeanstalkConfig`] and [`serve`], the accept loop the binary wires.
//! - `connection`: framing (lines, bodies, limits, idle timeout) and the loop of one connection.
//! - `command`: parsing a command line strictly, as beanstalkd does.
//! - `session`: one connection's tubes and reservations, and the commands.
//! - `reserve`: `reserve` and `reserve-with-timeout`.
//! - `stats`: the YAML of the stats and list commands.
//! - `mapping`: priorities, ids, states and ttr between the two models.
//! - `reply`: the reply lines.
//! - `shared`: what the connections share (tube use, timed pauses, counters).

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

mod command;
mod connection;
mod mapping;
mod reply;
mod reserve;
pub mod server;
mod session;
mod shared;
mod stats;

pub use command::{MAX_LINE_BYTES, MAX_TUBE_NAME_BYTES};
pub use server::{serve, BeanstalkConfig, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS};
