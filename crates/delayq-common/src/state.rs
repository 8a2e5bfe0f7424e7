//! Job states and the state machine that allows only legal transitions.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a job is in its life.
///
/// `delay` → `ready` → `reserved` → `finished`; a live job can also be
/// `deleted`, a job out of retries is `dead`, and a ready job nobody popped
/// within its ttl is `expired`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for its due time.
    Delay,
    /// Due, waiting in its topic's ready queue.
    Ready,
    /// Handed to a consumer, which must finish it within its ttr.
    Reserved,
    /// Acknowledged by a consumer or confirmed by a broker.
    Finished,
    /// Cancelled.
    Deleted,
    /// Out of retries.
    Dead,
    /// Not popped within its ttl after becoming due.
    Expired,
}

impl JobState {
    /// Every state, in life order.
    pub const ALL: [JobState; 7] = [
        JobState::Delay,
        JobState::Ready,
        JobState::Reserved,
        JobState::Finished,
        JobState::Deleted,
        JobState::Dead,
        JobState::Expired,
    ];

    /// The states a live job can be in.
    pub const LIVE: [JobState; 3] = [JobState::Delay, JobState::Ready, JobState::Reserved];

    /// Returns whether the job still needs delivering.
    pub fn is_live(self) -> bool {
        matches!(self, JobState::Delay | JobState::Ready | JobState::Reserved)
    }

    /// Returns whether the job has ended (a new job may reuse its id).
    pub fn is_terminal(self) -> bool {
        !self.is_live()
    }

    /// Returns whether moving from `self` to `next` is a legal transition.
    pub fn can_become(self, next: JobState) -> bool {
        use JobState::*;
        match (self, next) {
            // A push that replaces a waiting job keeps or changes its waiting state.
            (Delay | Ready, Delay | Ready) => true,
            (Ready, Reserved | Expired) => true,
            // ttr expiry or nack: back to waiting, or dead when out of retries.
            (Reserved, Delay | Ready | Finished | Dead) => true,
            (Delay | Ready | Reserved, Deleted) => true,
            _ => false,
        }
    }

    /// Returns the wire name (`"delay"`, `"ready"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Delay => "delay",
            JobState::Ready => "ready",
            JobState::Reserved => "reserved",
            JobState::Finished => "finished",
            JobState::Deleted => "deleted",
            JobState::Dead => "dead",
            JobState::Expired => "expired",
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing an unknown state name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownState;

impl fmt::Display for UnknownState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("must be one of delay, ready, reserved, finished, deleted, dead, expired")
    }
}

impl std::error::Error for UnknownState {}

impl FromStr for JobState {
    type Err = UnknownState;

    fn from_str(name: &str) -> Result<JobState, UnknownState> {
        JobState::ALL.into_iter().find(|state| state.as_str() == name).ok_or(UnknownState)
    }
}

#[cfg(test)]
mod tests {
    use super::JobState::{self, *};

    #[test]
    fn the_documented_paths_are_legal() {
        for (from, to) in [
            (Delay, Ready),
            (Ready, Reserved),
            (Reserved, Finished),
            (Reserved, Ready),
            (Reserved, Delay),
            (Reserved, Dead),
            (Ready, Expired),
            (Delay, Deleted),
            (Ready, Deleted),
            (Reserved, Deleted),
        ] {
            assert!(from.can_become(to), "{from} -> {to}");
        }
    }

    #[test]
    fn ended_jobs_never_move() {
        for from in [Finished, Deleted, Dead, Expired] {
            for to in JobState::ALL {
                assert!(!from.can_become(to), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn shortcuts_are_illegal() {
        for (from, to) in [
            (Delay, Reserved),
            (Delay, Finished),
            (Ready, Finished),
            (Delay, Dead),
            (Delay, Expired),
            (Reserved, Expired),
            (Reserved, Reserved),
        ] {
            assert!(!from.can_become(to), "{from} -> {to}");
        }
    }

    #[test]
    fn names_round_trip() {
        for state in JobState::ALL {
            assert_eq!(state.as_str().parse::<JobState>(), Ok(state));
        }
        assert!("pending".parse::<JobState>().is_err());
        assert_eq!(serde_json::to_string(&Reserved).unwrap(), "\"reserved\"");
    }
}
