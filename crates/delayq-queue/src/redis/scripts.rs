//! The Lua scripts, one per state transition: `lua/lib.lua`, the library
//! parts the script uses (`varint`, `record`, `topics`, `index`, `reserved`), then its own file.
//!
//! [`redis::Script`] sends EVALSHA and loads the script on NOSCRIPT, so a
//! restarted or failed-over Redis needs no special handling.

use redis::Script;

/// Builds a script from `lua/lib.lua`, the library parts it uses, and its own file.
macro_rules! script {
    ($file:literal $(, $part:literal)*) => {
        Script::new(concat!(
            include_str!("lua/lib.lua"),
            $(include_str!(concat!("lua/", $part)),)*
            include_str!(concat!("lua/", $file)),
        ))
    };
}

/// Every script the scheduler runs.
pub(super) struct Scripts {
    /// Adds jobs that are not held yet.
    pub(super) schedule: Script,
    /// Swaps a waiting job for a new version.
    pub(super) replace: Script,
    /// Pops and reserves ready jobs of a topic.
    pub(super) reserve: Script,
    /// Finishes or deletes a job.
    pub(super) remove: Script,
    /// Re-arms the ttr of a reserved job.
    pub(super) touch: Script,
    /// Gives a reserved job back.
    pub(super) nack: Script,
    /// Reads one job.
    pub(super) get: Script,
    /// Applies what is due in a shard.
    pub(super) promote: Script,
    /// Removes every job of a shard.
    pub(super) clear: Script,
    /// Checks (and sets) a shard's data epoch.
    pub(super) mark: Script,
    /// Opens a shard's restore window.
    pub(super) restoring: Script,
    /// Reads or raises a shard's horizon marks.
    pub(super) horizon: Script,
}

impl Scripts {
    /// Builds the scripts (hashing them once).
    pub(super) fn new() -> Scripts {
        Scripts {
            schedule: script!("schedule.lua", "varint.lua", "topics.lua", "index.lua"),
            replace: script!("replace.lua", "varint.lua", "record.lua", "topics.lua", "index.lua"),
            reserve: script!("reserve.lua", "varint.lua", "record.lua", "index.lua"),
            remove: script!("remove.lua", "varint.lua", "record.lua", "topics.lua", "index.lua"),
            touch: script!("touch.lua", "varint.lua", "record.lua", "topics.lua", "reserved.lua"),
            nack: script!("nack.lua", "varint.lua", "record.lua", "topics.lua", "index.lua", "reserved.lua"),
            get: script!("get.lua", "varint.lua", "topics.lua"),
            promote: script!("promote.lua", "varint.lua", "record.lua", "topics.lua", "index.lua"),
            clear: script!("clear.lua"),
            mark: Script::new(include_str!("lua/mark.lua")),
            restoring: script!("restoring.lua", "index.lua"),
            horizon: Script::new(include_str!("lua/horizon.lua")),
        }
    }
}
