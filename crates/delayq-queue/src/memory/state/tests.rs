use delayq_testkit::{job_id as id, topic};

use super::*;

fn at(millis: u64) -> Timestamp {
    Timestamp::from_millis(1_000_000 + millis)
}

/// A plain job created at `at(0)`, with a short ttr and one retry so that
/// redelivery and death take few steps.
fn job(id: &str, topic: &str, run_at: Timestamp) -> Job {
    let plain = delayq_testkit::job_created_at(id, &delayq_testkit::topic(topic), at(0), run_at);
    Job { ttr: Duration::from_millis(100), max_retries: 1, ..plain }
}

fn ids(jobs: &[Job]) -> Vec<&str> {
    jobs.iter().map(|job| job.id.as_str()).collect()
}

/// Checks that the counters and indexes agree with the job table.
fn assert_consistent(state: &MemoryState) {
    let mut expected_timeline = 0;
    let mut held = 0;
    for (slot, entry) in state.slots.iter().enumerate() {
        let Some(entry) = entry else {
            assert!(state.free.contains(&slot), "empty slot {slot} is free");
            continue;
        };
        held += 1;
        let job_id = &entry.id;
        assert_eq!(state.slot_of(job_id).ok(), Some(slot), "{job_id} is indexed by id");
        let queue = state.topics.get(&*entry.topic).expect("topic of a held job is filed");
        assert_eq!(*queue.name, *entry.topic, "the topic's shared name");
        if let Some(due) = entry.due {
            expected_timeline += 1;
            assert_eq!(state.timeline.get(&(due, entry.seq)), Some(&slot), "timeline entry of {job_id}");
        }
        let queued = queue.ready.iter().filter(|(_, queued)| **queued == slot).count();
        match entry.state {
            JobState::Ready => {
                assert_eq!(queue.ready.get(&entry.ready_key()), Some(&slot));
                assert_eq!(queued, 1, "{job_id} is queued once");
            }
            _ => assert_eq!(queued, 0, "{job_id} is not ready but queued"),
        }
    }
    assert_eq!(state.by_id.len(), held, "every indexed id is held");
    assert_eq!(state.timeline.len(), expected_timeline, "no stale timeline entries");
    let ready: usize = state.topics.values().map(|queue| queue.ready.len()).sum();
    let delay: u64 = state.topics.values().map(|queue| queue.delay).sum();
    let reserved: u64 = state.topics.values().map(|queue| queue.reserved).sum();
    let count = |job_state| state.slots.iter().flatten().filter(|entry| entry.state == job_state).count();
    assert_eq!(ready, count(JobState::Ready));
    assert_eq!(delay as usize, count(JobState::Delay));
    assert_eq!(reserved as usize, count(JobState::Reserved));
}

#[test]
fn promotes_in_due_order_and_reports_next_due() {
    let mut state = MemoryState::default();
    for (name, due) in [("c", 30), ("a", 10), ("b", 20)] {
        state.schedule(&job(name, "t", at(due)), at(0)).expect("new id");
    }
    let promotion = state.promote(at(20), 100);
    assert_eq!(ids(&promotion.changed), ["a", "b"]);
    assert!(promotion.changed.iter().all(|job| job.state == JobState::Ready && job.updated_at == at(20)));
    assert_eq!(promotion.next_due, Some(at(30)));
    assert!(!promotion.more);
    assert_eq!(ids(&state.reserve(&topic("t"), 10, at(21))), ["a", "b"]);
    assert_consistent(&state);
}

#[test]
fn a_full_batch_reports_more() {
    let mut state = MemoryState::default();
    for n in 0..5 {
        state.schedule(&job(&format!("j{n}"), "t", at(10)), at(0)).expect("new id");
    }
    let first = state.promote(at(10), 2);
    assert_eq!((first.changed.len(), first.more, first.next_due), (2, true, Some(at(10))));
    state.promote(at(10), 2);
    let last = state.promote(at(10), 2);
    assert_eq!((last.changed.len(), last.more, last.next_due), (1, false, None));
    let zero = state.promote(at(10), 0);
    assert!(zero.changed.is_empty(), "nothing left to promote");
    assert_consistent(&state);
}

#[test]
fn ready_queue_orders_by_priority_then_run_at_then_arrival() {
    let mut state = MemoryState::default();
    let mut urgent_late = job("urgent-late", "t", at(5));
    urgent_late.priority = 0;
    let mut lazy = job("lazy", "t", at(1));
    lazy.priority = 4;
    let first_come = job("first-come", "t", at(3));
    let second_come = job("second-come", "t", at(3));
    let early = job("early", "t", at(2));
    for job in [lazy, first_come, second_come, urgent_late, early] {
        state.schedule(&job, at(10)).expect("new id");
    }
    let reserved = state.reserve(&topic("t"), 10, at(10));
    assert_eq!(ids(&reserved), ["urgent-late", "early", "first-come", "second-come", "lazy"]);
}

#[test]
fn ttr_expiry_redelivers_then_kills() {
    let mut state = MemoryState::default();
    state.schedule(&job("j", "t", at(0)), at(0)).expect("new id");
    let first = state.reserve(&topic("t"), 1, at(0));
    assert_eq!(first[0].state, JobState::Reserved);
    assert_eq!(state.promote(at(99), 10).next_due, Some(at(100)), "ttr deadline is now + ttr");
    let redelivered = state.promote(at(100), 10).changed;
    assert_eq!(redelivered.len(), 1);
    assert_eq!((redelivered[0].state, redelivered[0].attempt, redelivered[0].run_at), (JobState::Ready, 2, at(100)));
    state.reserve(&topic("t"), 1, at(150));
    let dead = state.promote(at(250), 10).changed;
    assert_eq!((dead[0].state, dead[0].attempt), (JobState::Dead, 2));
    assert!(state.get(&id("j")).is_none());
    assert_consistent(&state);
    assert!(state.topics.is_empty(), "an empty topic is forgotten");
    assert!(state.timeline.is_empty());
}

#[test]
fn overdue_ttl_expires_in_the_same_round_as_promotion() {
    let mut state = MemoryState::default();
    let mut stale = job("stale", "t", at(10));
    stale.ttl = Duration::from_millis(5);
    state.schedule(&stale, at(0)).expect("new id");
    let changed = state.promote(at(100), 10).changed;
    let states: Vec<JobState> = changed.iter().map(|job| job.state).collect();
    assert_eq!(states, [JobState::Ready, JobState::Expired], "every step is a legal transition");
    assert!(state.by_id.is_empty() && state.topics.is_empty());
}

#[test]
fn reserving_disarms_the_ttl() {
    let mut state = MemoryState::default();
    let mut j = job("j", "t", at(0));
    j.ttl = Duration::from_millis(50);
    j.ttr = Duration::from_millis(1_000);
    state.schedule(&j, at(0)).expect("new id");
    state.reserve(&topic("t"), 1, at(10));
    assert!(state.promote(at(500), 10).changed.is_empty());
    assert_eq!(state.get(&id("j")).map(|job| job.state), Some(JobState::Reserved));
    assert_consistent(&state);
}

#[test]
fn replace_moves_the_job_without_leaving_stale_entries() {
    let mut state = MemoryState::default();
    state.schedule(&job("j", "t", at(10)), at(0)).expect("new id");
    let mut later = job("j", "t", at(50));
    later.body = "new".into();
    assert_eq!(state.replace(&later, at(1)).map(|job| job.state).ok(), Some(JobState::Delay));
    assert!(state.promote(at(20), 10).changed.is_empty(), "the old due time is gone");
    let ready = state.replace(&job("j", "t", at(0)), at(30)).expect("waiting job");
    assert_eq!(ready.state, JobState::Ready);
    state.replace(&job("j", "t", at(0)), at(31)).expect("ready job");
    assert_consistent(&state);
    let reserved = state.reserve(&topic("t"), 10, at(32));
    assert_eq!(ids(&reserved), ["j"], "exactly one copy");
    assert!(matches!(
        state.replace(&job("j", "t", at(0)), at(33)),
        Err(QueueError::WrongState { state: JobState::Reserved, .. })
    ));
    assert!(matches!(state.replace(&job("nope", "t", at(0)), at(33)), Err(QueueError::NotFound(_))));
}

#[test]
fn replace_into_another_topic_forgets_the_old_one() {
    let mut state = MemoryState::default();
    state.schedule(&job("j", "old", at(0)), at(0)).expect("new id");
    state.replace(&job("j", "new", at(0)), at(1)).expect("waiting job");
    assert!(!state.topics.contains_key(&topic("old")));
    assert_eq!(ids(&state.reserve(&topic("new"), 1, at(2))), ["j"]);
}

#[test]
fn nack_redelays_or_kills() {
    let mut state = MemoryState::default();
    state.schedule(&job("j", "t", at(0)), at(0)).expect("new id");
    state.reserve(&topic("t"), 1, at(0));
    let nacked = state.nack(&id("j"), None, Duration::from_millis(40), at(10)).expect("reserved");
    assert_eq!((nacked.state, nacked.attempt, nacked.run_at), (JobState::Delay, 2, at(50)));
    assert!(matches!(state.nack(&id("j"), None, Duration::ZERO, at(11)), Err(QueueError::WrongState { .. })));
    state.promote(at(50), 10);
    state.reserve(&topic("t"), 1, at(60));
    let dead = state.nack(&id("j"), None, Duration::ZERO, at(70)).expect("reserved");
    assert_eq!(dead.state, JobState::Dead);
    assert!(state.by_id.is_empty() && state.timeline.is_empty() && state.topics.is_empty());
}

#[test]
fn nack_without_delay_is_ready_at_once() {
    let mut state = MemoryState::default();
    state.schedule(&job("j", "t", at(0)), at(0)).expect("new id");
    state.reserve(&topic("t"), 1, at(0));
    let nacked = state.nack(&id("j"), None, Duration::ZERO, at(10)).expect("reserved");
    assert_eq!((nacked.state, nacked.attempt), (JobState::Ready, 2));
    assert_consistent(&state);
}

#[test]
fn touch_rearms_the_deadline() {
    let mut state = MemoryState::default();
    state.schedule(&job("j", "t", at(0)), at(0)).expect("new id");
    state.reserve(&topic("t"), 1, at(0));
    state.touch(&id("j"), None, at(80)).expect("reserved");
    assert!(state.promote(at(150), 10).changed.is_empty());
    assert_eq!(state.promote(at(180), 10).changed.len(), 1);
    assert!(matches!(state.touch(&id("j"), None, at(181)), Err(QueueError::WrongState { .. })));
    assert_consistent(&state);
}

#[test]
fn restore_adds_once_and_keeps_reservations_until_their_deadline() {
    let mut state = MemoryState::default();
    let mut stored = job("j", "t", at(0));
    stored.state = JobState::Reserved;
    stored.attempt = 1;
    stored.updated_at = at(5);
    assert!(state.restore(&stored, at(10)));
    assert!(!state.restore(&stored, at(11)));
    let mut dead = job("dead", "t", at(0));
    dead.state = JobState::Dead;
    assert!(!state.restore(&dead, at(11)), "ended jobs are not live");
    let back = state.get(&id("j")).expect("held");
    assert_eq!((back.state, back.attempt), (JobState::Reserved, 1));
    assert!(state.reserve(&topic("t"), 10, at(12)).is_empty(), "still reserved by its consumer");
    // The ttr (100 ms) runs from the reservation at 5.
    assert!(state.promote(at(104), 10).changed.is_empty(), "not before the deadline");
    let redelivered = state.promote(at(105), 10).changed;
    assert_eq!(redelivered.iter().map(|job| (job.state, job.attempt)).collect::<Vec<_>>(), [(JobState::Ready, 2)]);
    assert_eq!(state.reserve(&topic("t"), 10, at(106)).len(), 1);
    assert_consistent(&state);
}

#[test]
fn the_timer_is_woken_only_for_a_new_earliest_instant() {
    let mut state = MemoryState::default();
    state.schedule(&job("a", "t", at(100)), at(0)).expect("new id");
    assert!(state.take_wakes().timer, "first instant");
    state.schedule(&job("b", "t", at(200)), at(0)).expect("new id");
    assert!(!state.take_wakes().timer, "later than the earliest");
    state.schedule(&job("c", "t", at(50)), at(0)).expect("new id");
    assert!(state.take_wakes().timer, "sooner than the earliest");
    state.promote(at(60), 10);
    assert!(!state.take_wakes().timer, "promote reports next_due itself");
}

#[test]
fn each_job_made_ready_raises_its_topic_signal() {
    let mut state = MemoryState::default();
    state.schedule(&job("a", "t", at(0)), at(0)).expect("new id");
    state.schedule(&job("b", "t", at(10)), at(0)).expect("new id");
    assert_eq!(state.take_wakes().topics.len(), 1);
    state.promote(at(10), 10);
    assert_eq!(state.take_wakes().topics.len(), 1);
}

#[test]
fn topics_are_kept_while_waited_on() {
    let mut state = MemoryState::default();
    state.wait_on(&topic("t"));
    state.schedule(&job("j", "t", at(0)), at(0)).expect("new id");
    state.reserve(&topic("t"), 1, at(0));
    state.finish(&id("j"), None).expect("reserved");
    assert!(state.topics.contains_key(&topic("t")), "a waiter holds it");
    state.stop_waiting(&topic("t"));
    assert!(state.topics.is_empty());
}

#[test]
fn delete_and_stats_and_clear() {
    let mut state = MemoryState::default();
    state.schedule(&job("d", "a", at(100)), at(0)).expect("new id");
    state.schedule(&job("r", "a", at(0)), at(0)).expect("new id");
    state.schedule(&job("x", "b", at(0)), at(0)).expect("new id");
    state.reserve(&topic("b"), 1, at(0));
    let stats = state.stats();
    assert_eq!(stats.len(), 2);
    assert_eq!((stats[0].delay, stats[0].ready, stats[0].reserved), (1, 1, 0));
    assert_eq!((stats[1].delay, stats[1].ready, stats[1].reserved), (0, 0, 1));
    assert_eq!(state.delete(&id("x")).map(|job| job.state).ok(), Some(JobState::Reserved));
    assert!(matches!(state.delete(&id("x")), Err(QueueError::NotFound(_))));
    assert_eq!(state.stats().len(), 1);
    assert_consistent(&state);
    assert!(matches!(state.schedule(&job("d", "a", at(0)), at(0)), Err(QueueError::Conflict(_))));
    assert_eq!(state.clear(), 2);
    assert!(state.by_id.is_empty() && state.timeline.is_empty() && state.topics.is_empty());
}

/// A tiny deterministic generator (xorshift64), enough to shuffle operations.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, sides: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % sides
    }
}

#[test]
fn random_operations_keep_every_index_consistent() {
    let mut state = MemoryState::default();
    let mut dice = Dice(0x9E37_79B9_7F4A_7C15);
    let mut now = 0;
    for _ in 0..20_000 {
        now += dice.roll(3);
        let name = format!("j{}", dice.roll(48));
        let job_id = id(&name);
        let topic_name = format!("t{}", dice.roll(3));
        let mut candidate = job(&name, &topic_name, at(now + dice.roll(20)));
        candidate.priority = dice.roll(5) as u8;
        candidate.max_retries = dice.roll(3) as u32;
        candidate.ttl = Duration::from_millis([0, 0, 5, 30][dice.roll(4) as usize]);
        candidate.ttr = Duration::from_millis(1 + dice.roll(40));
        match dice.roll(10) {
            0 | 1 => {
                let _ = state.schedule(&candidate, at(now));
            }
            2 => {
                candidate.state = [JobState::Delay, JobState::Ready, JobState::Reserved][dice.roll(3) as usize];
                state.restore(&candidate, at(now));
            }
            3 => {
                let _ = state.replace(&candidate, at(now));
            }
            4 | 5 => {
                let count = 1 + dice.roll(3) as usize;
                for reserved in state.reserve(&topic(&topic_name), count, at(now)) {
                    assert_eq!(reserved.state, JobState::Reserved);
                }
            }
            6 => {
                let _ = match dice.roll(4) {
                    0 => state.finish(&job_id, None),
                    1 => state.nack(&job_id, None, Duration::from_millis(dice.roll(10)), at(now)),
                    2 => state.touch(&job_id, None, at(now)),
                    _ => state.delete(&job_id),
                };
            }
            _ => {
                let promotion = state.promote(at(now), 1 + dice.roll(4) as usize);
                for (n, changed) in promotion.changed.iter().enumerate() {
                    assert!(matches!(changed.state, JobState::Ready | JobState::Dead | JobState::Expired));
                    // A job promoted and expired in one round shows up twice; judge the last.
                    if promotion.changed[n + 1..].iter().any(|later| later.id == changed.id) {
                        continue;
                    }
                    let held = state.get(&changed.id).map(|job| job.state);
                    match changed.state {
                        JobState::Ready => assert!(held.is_some()),
                        _ => assert_eq!(held, None, "ended jobs are removed"),
                    }
                }
                if let Some(next_due) = promotion.next_due {
                    assert!(promotion.more || next_due > at(now), "everything due was promoted");
                }
            }
        }
        state.take_wakes();
        assert_consistent(&state);
        let counted: u64 = state.stats().iter().map(|stats| stats.delay + stats.ready + stats.reserved).sum();
        assert_eq!(counted, state.by_id.len() as u64);
    }
}

#[test]
fn a_held_job_keeps_no_payload_and_shares_its_topic() {
    let mut state = MemoryState::default();
    let mut full = job("j", "t", at(10));
    full.body = "kept by the store alone".into();
    full.subtopic = Some("eu".into());
    full.biz_key = Some("order-1".into());
    full.delay = Duration::from_millis(10);
    full.retry_backoff = vec![Duration::from_millis(5)];
    full.priority = 3;
    full.ttl = Duration::from_millis(70);
    state.schedule(&full, at(0)).expect("new id");
    state.schedule(&job("k", "t", at(10)), at(0)).expect("new id");
    let expected = Job { state: JobState::Delay, ..full.clone().without_payload() };
    assert_eq!(state.get(&id("j")), Some(expected.clone()), "every field but the payload");
    let promoted = state.promote(at(10), 10).changed;
    assert_eq!(promoted.first(), Some(&Job { state: JobState::Ready, updated_at: at(10), ..expected }));
    let names: Vec<&Arc<Topic>> = state.slots.iter().flatten().map(|entry| &entry.topic).collect();
    assert!(names.len() == 2 && Arc::ptr_eq(names[0], names[1]), "one topic name for all its jobs");
    assert_consistent(&state);
}
