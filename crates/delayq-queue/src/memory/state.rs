//! The synchronous state of the in-process scheduler: the job table, the
//! timeline of everything due and the per-topic ready queues.
//!
//! Every method runs under the scheduler's mutex and takes the current time as
//! a parameter, so the transitions are plain functions of their inputs.
//!
//! Jobs live in a slab and the indexes refer to them by slot number, so a
//! transition updates a few small keys in place instead of moving the job.
//! A slot holds only what orders a job, hands it out and moves it through its
//! states ([`Entry`]); the body and the rest of the payload stay in the store,
//! and the jobs this state returns carry none ([`Job::without_payload`]).

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use delayq_common::{Job, JobId, JobState, Timestamp, Topic};
use hashbrown::HashTable;
use tokio::sync::Notify;

use super::entry::Entry;
use super::topic::TopicQueue;
use crate::error::{QueueError, QueueResult};
use crate::scheduler::{check_attempt_of, reservation_deadline, waiting_state, HorizonMarks, Promotion, TopicStats};

/// Where a job sits in the slab.
pub(super) type Slot = usize;
/// A place in the timeline: the instant, then a sequence number that keeps keys unique.
type DueKey = (Timestamp, u64);
/// A place in a ready queue: priority first, then due time, then arrival (FIFO).
pub(super) type ReadyKey = (u8, Timestamp, u64);

/// The whole in-process scheduler state.
#[derive(Default)]
pub(super) struct MemoryState {
    slots: Vec<Option<Entry>>,
    free: Vec<Slot>,
    /// The slot of each job, found by the hash of its id (the id itself is
    /// kept once, in the slot).
    by_id: HashTable<Slot>,
    hasher: RandomState,
    /// Every pending instant of every job, earliest first.
    timeline: BTreeMap<DueKey, Slot>,
    topics: HashMap<Topic, TopicQueue>,
    seq: u64,
    /// The horizon's marks, once the admission mark was raised.
    horizon: Option<HorizonMarks>,
    /// Signals to raise once the lock is released.
    wakes: Wakes,
}

/// Signals an operation asks to raise after the lock is released.
#[derive(Default)]
pub(super) struct Wakes {
    /// The timer must look again: something is due sooner than anything before.
    pub(super) timer: bool,
    /// One entry per job made ready.
    pub(super) topics: Vec<Arc<Notify>>,
}

impl MemoryState {
    /// Takes the signals gathered since the last call.
    pub(super) fn take_wakes(&mut self) -> Wakes {
        std::mem::take(&mut self.wakes)
    }

    /// Registers a waiter on the topic and returns its ready signal.
    pub(super) fn wait_on(&mut self, topic: &Topic) -> Arc<Notify> {
        let queue = self.topics.entry(topic.clone()).or_insert_with(|| TopicQueue::new(Arc::new(topic.clone())));
        queue.waiters += 1;
        Arc::clone(&queue.signal)
    }

    /// Unregisters a waiter added with [`MemoryState::wait_on`]; forgets the topic if unused.
    pub(super) fn stop_waiting(&mut self, topic: &Topic) {
        if let Some(queue) = self.topics.get_mut(topic) {
            queue.waiters = queue.waiters.saturating_sub(1);
        }
        self.forget_topic_if_unused(topic);
    }

    /// Returns whether the topic has ready jobs.
    pub(super) fn has_ready(&self, topic: &Topic) -> bool {
        self.topics.get(topic).is_some_and(|queue| !queue.ready.is_empty())
    }

    pub(super) fn schedule(&mut self, job: &Job, now: Timestamp) -> QueueResult<()> {
        if self.slot_of(&job.id).is_ok() {
            return Err(QueueError::Conflict(format!("job {} already exists", job.id)));
        }
        let state = waiting_state(job.run_at, now);
        if state == JobState::Delay && self.horizon.is_some_and(|marks| job.run_at > marks.admit) {
            // Beyond the horizon: the loader brings it from the store.
            return Ok(());
        }
        self.insert(job, state, None);
        Ok(())
    }

    /// Raises the admission mark; returns the loaded mark.
    pub(super) fn admit_until(&mut self, until: Timestamp) -> Option<Timestamp> {
        let marks = self.horizon.get_or_insert(HorizonMarks { admit: until, loaded: None });
        marks.admit = marks.admit.max(until);
        marks.loaded
    }

    /// Raises the loaded mark, and the admission mark with it (what is loaded is admitted).
    pub(super) fn mark_loaded(&mut self, until: Timestamp) {
        let marks = self.horizon.get_or_insert(HorizonMarks { admit: until, loaded: None });
        marks.admit = marks.admit.max(until);
        marks.loaded = Some(marks.loaded.map_or(until, |loaded| loaded.max(until)));
    }

    /// Returns the horizon's marks.
    pub(super) fn horizon(&self) -> Option<HorizonMarks> {
        self.horizon
    }

    /// Adds a job unless one with its id is held; a reserved job stays reserved
    /// until its ttr deadline. Ended jobs are never added.
    pub(super) fn restore(&mut self, job: &Job, now: Timestamp) -> bool {
        if self.slot_of(&job.id).is_ok() || job.state.is_terminal() {
            return false;
        }
        let deadline = reservation_deadline(job);
        let state = if deadline.is_none() { waiting_state(job.run_at, now) } else { job.state };
        self.insert(job, state, deadline);
        true
    }

    pub(super) fn replace(&mut self, job: &Job, now: Timestamp) -> QueueResult<Job> {
        let slot = self.slot_of(&job.id)?;
        let state =
            self.entry(slot).map(|current| current.state).ok_or_else(|| QueueError::NotFound(job.id.clone()))?;
        if !matches!(state, JobState::Delay | JobState::Ready) {
            return Err(QueueError::WrongState { id: job.id.clone(), state });
        }
        self.unfile(slot);
        let topic = self.topic_name(&job.topic);
        let mut replacement = Entry::new(job, topic);
        replacement.state = waiting_state(job.run_at, now);
        let scheduled = replacement.job();
        let old = self.entry_mut(slot).map(|entry| std::mem::replace(entry, replacement));
        self.file(slot, None);
        if let Some(old) = old.filter(|old| *old.topic != job.topic) {
            self.forget_topic_if_unused(&old.topic);
        }
        Ok(scheduled)
    }

    /// Reserves up to `count` ready jobs of `topic`, most urgent first.
    pub(super) fn reserve(&mut self, topic: &Topic, count: usize, now: Timestamp) -> Vec<Job> {
        let mut reserved = Vec::new();
        while reserved.len() < count {
            let Some(queue) = self.topics.get_mut(topic) else { break };
            let Some((_, slot)) = queue.ready.pop_first() else { break };
            self.unfile(slot);
            let Some(entry) = self.entry_mut(slot) else { continue };
            entry.state = JobState::Reserved;
            entry.updated_at = now;
            let deadline = now.plus(entry.ttr);
            reserved.push(entry.job());
            self.file(slot, Some(deadline));
        }
        reserved
    }

    pub(super) fn finish(&mut self, id: &JobId, attempt: Option<u32>) -> QueueResult<Job> {
        let slot = self.reserved_slot(id, attempt)?;
        self.remove(slot).ok_or_else(|| QueueError::NotFound(id.clone()))
    }

    pub(super) fn nack(
        &mut self,
        id: &JobId,
        attempt: Option<u32>,
        delay: Duration,
        now: Timestamp,
    ) -> QueueResult<Job> {
        let slot = self.reserved_slot(id, attempt)?;
        let retries_left = self.entry(slot).is_some_and(Entry::has_retries_left);
        if !retries_left {
            let mut dead = self.remove(slot).ok_or_else(|| QueueError::NotFound(id.clone()))?;
            dead.state = JobState::Dead;
            dead.updated_at = now;
            return Ok(dead);
        }
        self.unfile(slot);
        let entry = self.entry_mut(slot).ok_or_else(|| QueueError::NotFound(id.clone()))?;
        entry.attempt += 1;
        entry.run_at = now.plus(delay);
        entry.state = waiting_state(entry.run_at, now);
        entry.updated_at = now;
        let nacked = entry.job();
        self.file(slot, None);
        Ok(nacked)
    }

    pub(super) fn touch(&mut self, id: &JobId, attempt: Option<u32>, now: Timestamp) -> QueueResult<Job> {
        let slot = self.reserved_slot(id, attempt)?;
        self.unfile(slot);
        let job = self.entry(slot).map(Entry::job).ok_or_else(|| QueueError::NotFound(id.clone()))?;
        self.file(slot, Some(now.plus(job.ttr)));
        Ok(job)
    }

    pub(super) fn delete(&mut self, id: &JobId) -> QueueResult<Job> {
        let slot = self.slot_of(id)?;
        self.remove(slot).ok_or_else(|| QueueError::NotFound(id.clone()))
    }

    pub(super) fn get(&self, id: &JobId) -> Option<Job> {
        self.slot_of(id).ok().and_then(|slot| self.entry(slot)).map(Entry::job)
    }

    /// Applies what is due at `now`, at most `max_batch` changes.
    pub(super) fn promote(&mut self, now: Timestamp, max_batch: usize) -> Promotion {
        let max_batch = max_batch.max(1);
        let mut changed = Vec::new();
        while changed.len() < max_batch {
            let Some(first) = self.timeline.first_entry() else { break };
            let (due_at, _) = *first.key();
            if due_at > now {
                break;
            }
            let slot = first.remove();
            if let Some(entry) = self.entry_mut(slot) {
                // Out of the timeline already.
                entry.due = None;
            }
            if let Some(job) = self.on_due(slot, due_at, now) {
                changed.push(job);
            }
        }
        // The caller learns the earliest instant from `next_due`; no need to wake it.
        self.wakes.timer = false;
        let next_due = self.timeline.first_key_value().map(|((at, _), _)| *at);
        let more = changed.len() >= max_batch && next_due.is_some_and(|at| at <= now);
        Promotion { changed, next_due, more }
    }

    pub(super) fn stats(&self) -> Vec<TopicStats> {
        let mut stats: Vec<TopicStats> = self
            .topics
            .iter()
            .filter(|(_, queue)| !queue.is_empty())
            .map(|(topic, queue)| TopicStats {
                topic: topic.clone(),
                delay: queue.delay,
                ready: queue.ready.len() as u64,
                reserved: queue.reserved,
            })
            .collect();
        stats.sort_by(|a, b| a.topic.cmp(&b.topic));
        stats
    }

    pub(super) fn clear(&mut self) -> u64 {
        let cleared = self.by_id.len() as u64;
        self.slots.clear();
        self.free.clear();
        self.by_id.clear();
        self.timeline.clear();
        for queue in self.topics.values_mut() {
            queue.ready.clear();
            queue.delay = 0;
            queue.reserved = 0;
        }
        self.topics.retain(|_, queue| !queue.is_unused());
        // What was loaded is gone with the jobs.
        self.horizon = None;
        cleared
    }

    /// Moves the job in `slot`, whose instant `due_at` has come, to its next
    /// state; returns it as it is after the change.
    fn on_due(&mut self, slot: Slot, due_at: Timestamp, now: Timestamp) -> Option<Job> {
        let entry = self.entry(slot)?;
        let state = entry.state;
        let ended = match state {
            JobState::Reserved if !entry.has_retries_left() => JobState::Dead,
            JobState::Ready => JobState::Expired,
            JobState::Delay | JobState::Reserved => {
                self.unfile(slot);
                let entry = self.entry_mut(slot)?;
                if state == JobState::Reserved {
                    entry.attempt += 1;
                    entry.run_at = due_at;
                }
                entry.state = JobState::Ready;
                entry.updated_at = now;
                let job = entry.job();
                self.file(slot, None);
                return Some(job);
            }
            // Only live jobs are held.
            _ => return None,
        };
        let mut job = self.remove(slot)?;
        job.state = ended;
        job.updated_at = now;
        Some(job)
    }

    fn entry(&self, slot: Slot) -> Option<&Entry> {
        self.slots.get(slot).and_then(Option::as_ref)
    }

    fn entry_mut(&mut self, slot: Slot) -> Option<&mut Entry> {
        self.slots.get_mut(slot).and_then(Option::as_mut)
    }

    fn slot_of(&self, id: &JobId) -> QueueResult<Slot> {
        let hash = self.hasher.hash_one(id.as_str());
        let slots = &self.slots;
        let found = self
            .by_id
            .find(hash, |slot| slots.get(*slot).and_then(Option::as_ref).is_some_and(|entry| entry.id == *id));
        found.copied().ok_or_else(|| QueueError::NotFound(id.clone()))
    }

    /// Returns the slot of a reserved job, of its delivery `attempt` when given.
    fn reserved_slot(&self, id: &JobId, attempt: Option<u32>) -> QueueResult<Slot> {
        let slot = self.slot_of(id)?;
        let Some(entry) = self.entry(slot) else { return Err(QueueError::NotFound(id.clone())) };
        if entry.state != JobState::Reserved {
            return Err(QueueError::WrongState { id: id.clone(), state: entry.state });
        }
        check_attempt_of(id, entry.attempt, attempt)?;
        Ok(slot)
    }

    /// Returns the topic's shared name, filing the topic if it is new.
    fn topic_name(&mut self, topic: &Topic) -> Arc<Topic> {
        if let Some(queue) = self.topics.get(topic) {
            return Arc::clone(&queue.name);
        }
        let name = Arc::new(topic.clone());
        self.topics.insert(topic.clone(), TopicQueue::new(Arc::clone(&name)));
        name
    }

    /// Adds a new live job in `state` and files it; `reserved_until` is the
    /// ttr deadline of a reserved one.
    fn insert(&mut self, job: &Job, state: JobState, reserved_until: Option<Timestamp>) {
        let topic = self.topic_name(&job.topic);
        let mut entry = Entry::new(job, topic);
        entry.state = state;
        let entry = Some(entry);
        let reused = self.free.pop().and_then(|slot| Some((slot, self.slots.get_mut(slot)?)));
        let slot = match reused {
            Some((slot, place)) => {
                *place = entry;
                slot
            }
            None => {
                self.slots.push(entry);
                self.slots.len() - 1
            }
        };
        let hash = self.hasher.hash_one(job.id.as_str());
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.by_id.insert_unique(hash, slot, |slot| {
            slots.get(*slot).and_then(Option::as_ref).map_or(0, |entry| hasher.hash_one(entry.id.as_str()))
        });
        self.file(slot, reserved_until);
    }

    /// Takes the job out of the slab and every index; returns it as it was.
    fn remove(&mut self, slot: Slot) -> Option<Job> {
        self.unfile(slot);
        let entry = self.slots.get_mut(slot)?.take()?;
        self.free.push(slot);
        let hash = self.hasher.hash_one(entry.id.as_str());
        if let Ok(found) = self.by_id.find_entry(hash, |held| *held == slot) {
            found.remove();
        }
        self.forget_topic_if_unused(&entry.topic);
        Some(entry.job())
    }

    /// Files the job in `slot` by its state; `reserved_until` is the ttr
    /// deadline of a reserved job.
    fn file(&mut self, slot: Slot, reserved_until: Option<Timestamp>) {
        self.seq += 1;
        let seq = self.seq;
        let Some(entry) = self.slots.get_mut(slot).and_then(Option::as_mut) else { return };
        entry.seq = seq;
        if !self.topics.contains_key(&*entry.topic) {
            self.topics.insert(Topic::clone(&entry.topic), TopicQueue::new(Arc::clone(&entry.topic)));
        }
        let Some(queue) = self.topics.get_mut(&*entry.topic) else { return };
        let due_at = match entry.state {
            JobState::Delay => {
                queue.delay += 1;
                Some(entry.run_at)
            }
            JobState::Ready => {
                queue.ready.insert(entry.ready_key(), slot);
                self.wakes.topics.push(Arc::clone(&queue.signal));
                Job::expiry(entry.run_at, entry.ttl)
            }
            JobState::Reserved => {
                queue.reserved += 1;
                Some(reserved_until.unwrap_or_else(|| Timestamp::now().plus(entry.ttr)))
            }
            // Ended jobs are not held.
            _ => None,
        };
        entry.due = due_at;
        if let Some(at) = due_at {
            let key = (at, seq);
            let earliest = match self.timeline.first_key_value() {
                Some((first, _)) => key < *first,
                None => true,
            };
            if earliest {
                self.wakes.timer = true;
            }
            self.timeline.insert(key, slot);
        }
    }

    /// Takes the job in `slot` out of the timeline, its ready queue and the
    /// counters; the topic entry stays (see `forget_topic_if_unused`).
    fn unfile(&mut self, slot: Slot) {
        let Some(entry) = self.slots.get_mut(slot).and_then(Option::as_mut) else { return };
        if let Some(due) = entry.due.take() {
            self.timeline.remove(&(due, entry.seq));
        }
        let Some(queue) = self.topics.get_mut(&*entry.topic) else { return };
        match entry.state {
            JobState::Delay => queue.delay = queue.delay.saturating_sub(1),
            JobState::Reserved => queue.reserved = queue.reserved.saturating_sub(1),
            JobState::Ready => {
                queue.ready.remove(&entry.ready_key());
            }
            _ => {}
        }
    }

    fn forget_topic_if_unused(&mut self, topic: &Topic) {
        if self.topics.get(topic).is_some_and(TopicQueue::is_unused) {
            self.topics.remove(topic);
        }
    }

    /// Returns how many topics are filed (tests check that unused ones are forgotten).
    #[cfg(test)]
    pub(super) fn topic_count(&self) -> usize {
        self.topics.len()
    }
}

#[cfg(test)]
mod tests;
