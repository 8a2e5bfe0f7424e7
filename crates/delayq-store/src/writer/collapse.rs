//! A run of state changes of many jobs, collapsed into the one change per
//! job that decides its row, so that a dialect writes each row once.

use std::collections::HashMap;

use super::live_rank;
use crate::store::StateChange;

/// A run of state changes collapsed into one per job (see [`collapse`]).
pub(crate) struct Collapsed<'c> {
    /// The change that decides each job's row, in order of each job's first change.
    pub(crate) decisive: Vec<&'c StateChange>,
    /// For each change of the run, the index of its job's decisive change, or
    /// `None` when an earlier change of the job ended it: such a change never applies.
    slots: Vec<Option<usize>>,
}

impl Collapsed<'_> {
    /// Returns whether each change of the run applied, given whether the
    /// decisive change of a job (by id) did: every change but those after an
    /// ending one applies exactly when its job was live.
    pub(crate) fn applied(&self, decisive_applied: impl Fn(&str) -> bool) -> Vec<bool> {
        let applied = |slot: &Option<usize>| {
            slot.and_then(|index| self.decisive.get(index)).is_some_and(|change| decisive_applied(change.id.as_str()))
        };
        self.slots.iter().map(applied).collect()
    }
}

/// Collapses a run of state changes into one per job: the change that leaves the
/// row as applying them one by one would ([`moves_forward`](super::moves_forward)): the first ending
/// change of the job if it has one, else its most advanced live change (a later
/// attempt, else a later state; the later change on a tie).
pub(crate) fn collapse<'c>(changes: &[&'c StateChange]) -> Collapsed<'c> {
    /// Where a job's decisive change is, and whether that change ends the job.
    struct Decided {
        index: usize,
        ended: bool,
    }
    let rank = |change: &StateChange| (change.attempt, live_rank(change.state));
    let mut decisive: Vec<&StateChange> = Vec::with_capacity(changes.len());
    let mut slots = Vec::with_capacity(changes.len());
    let mut jobs: HashMap<&str, Decided> = HashMap::with_capacity(changes.len());
    for &change in changes {
        let ends = !change.state.is_live();
        match jobs.get_mut(change.id.as_str()) {
            None => {
                jobs.insert(change.id.as_str(), Decided { index: decisive.len(), ended: ends });
                slots.push(Some(decisive.len()));
                decisive.push(change);
            }
            Some(decided) if decided.ended => slots.push(None),
            Some(decided) => {
                if let Some(current) = decisive.get_mut(decided.index) {
                    if ends || rank(change) >= rank(current) {
                        *current = change;
                        decided.ended = ends;
                    }
                }
                slots.push(Some(decided.index));
            }
        }
    }
    Collapsed { decisive, slots }
}
