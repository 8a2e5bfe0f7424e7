//! The command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// A delay-queue server: push a job with a delay, get it back when it is due.
#[derive(Debug, Parser)]
#[command(name = "delayq", version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Runs the server (embedded single node unless configured otherwise).
    Serve(ServeArgs),
    #[command(flatten)]
    Client(ClientCommand),
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// A TOML config file (default: config/delayq.toml when it exists).
    #[arg(long, short)]
    pub(crate) config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ClientCommand {
    /// Pushes one job.
    Push {
        #[command(flatten)]
        server: ServerArg,
        /// The topic.
        #[arg(long)]
        topic: String,
        /// The body.
        #[arg(long)]
        body: String,
        /// The delay in milliseconds.
        #[arg(long, default_value_t = 0)]
        delay: u64,
        /// An id of your own.
        #[arg(long)]
        id: Option<String>,
    },
    /// Reserves ready jobs of a topic.
    Pop {
        #[command(flatten)]
        server: ServerArg,
        /// The topic.
        #[arg(long)]
        topic: String,
        /// How many jobs at most.
        #[arg(long, default_value_t = 1)]
        count: u32,
        /// How long to wait for the first, in milliseconds.
        #[arg(long, default_value_t = 0)]
        timeout: u64,
        /// The consumer's name, for the registry of consumers (`delayq stats` lists it).
        #[arg(long)]
        consumer: Option<String>,
        /// The consumer group whose deliveries to take (required on a topic with groups).
        #[arg(long)]
        group: Option<String>,
    },
    /// Acknowledges a reserved job.
    Finish {
        #[command(flatten)]
        server: ServerArg,
        /// The job id.
        #[arg(long)]
        id: String,
        /// The delivery being acknowledged (the `attempt` the pop printed): a
        /// delivery that is no longer current is refused instead of finishing
        /// the job under another consumer.
        #[arg(long)]
        attempt: Option<u32>,
        /// The consumer group whose delivery of the job is acknowledged.
        #[arg(long)]
        group: Option<String>,
    },
    /// Shows the server's counts.
    Stats {
        #[command(flatten)]
        server: ServerArg,
    },
    /// Makes a delayed job due now.
    Run {
        #[command(flatten)]
        server: ServerArg,
        /// The job id.
        #[arg(long)]
        id: String,
    },
    /// Gives a dead job a new round of deliveries.
    Retry {
        #[command(flatten)]
        server: ServerArg,
        /// The job id.
        #[arg(long)]
        id: String,
    },
    /// Pauses a topic: its jobs fall due, but none is handed out until it is resumed.
    Pause {
        #[command(flatten)]
        server: ServerArg,
        /// The topic.
        #[arg(long)]
        topic: String,
    },
    /// Resumes a paused topic.
    Resume {
        #[command(flatten)]
        server: ServerArg,
        /// The topic.
        #[arg(long)]
        topic: String,
    },
    /// Declares a consumer group of a topic (every job falling due reaches it), or drops it.
    Group {
        #[command(flatten)]
        server: ServerArg,
        /// The topic.
        #[arg(long)]
        topic: String,
        /// The group.
        #[arg(long)]
        group: String,
        /// Drops the group instead: jobs falling due no longer reach it.
        #[arg(long)]
        drop: bool,
    },
}

#[derive(Debug, Args)]
pub(crate) struct ServerArg {
    /// The server's base URL.
    #[arg(long, env = "DELAYQ_SERVER", default_value = "http://127.0.0.1:8080")]
    pub(crate) server: String,
    /// A bearer token, when the server has auth on.
    #[arg(long, env = "DELAYQ_TOKEN")]
    pub(crate) token: Option<String>,
    /// Prints the server's JSON answer as it came, for scripts, instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}
