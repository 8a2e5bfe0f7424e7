//! The scenario's steps, written once against [`Face`], and the transcript they record.

use super::*;

/// The steps one face went through, with the face's own names replaced by `<tag>`
/// and generated ids by their aliases.
pub(super) struct Transcript {
    face: &'static str,
    tag: String,
    aliases: Vec<(String, &'static str)>,
    pub(super) lines: Vec<String>,
}

impl Transcript {
    fn new(face: &'static str, tag: &str) -> Transcript {
        Transcript { face, tag: tag.to_owned(), aliases: Vec::new(), lines: Vec::new() }
    }

    /// Writes `alias` instead of `text` from now on (for generated ids).
    fn alias(&mut self, text: &str, alias: &'static str) {
        self.aliases.push((text.to_owned(), alias));
    }

    fn normalise(&self, text: &str) -> String {
        let mut text = text.replace(&self.tag, "<tag>");
        for (original, alias) in &self.aliases {
            text = text.replace(original, alias);
        }
        text
    }

    /// Records a fact of a step.
    fn note(&mut self, step: &str, fact: impl Debug) {
        let line = self.normalise(&format!("{step}: {fact:?}"));
        self.lines.push(line);
    }

    /// Records a step that must succeed and returns its value.
    fn ok<T: Debug>(&mut self, step: &str, outcome: Outcome<T>) -> T {
        match outcome {
            Ok(value) => {
                self.lines.push(format!("{step}: ok"));
                value
            }
            Err(failure) => panic!("[{}] {step}: refused: {failure:?}", self.face),
        }
    }

    /// Records a step that must be refused with `kind` and `message` (`<tag>` stands for the tag).
    fn refused<T: Debug>(&mut self, step: &str, outcome: Outcome<T>, kind: Kind, message: &str) {
        let failure = match outcome {
            Ok(value) => panic!("[{}] {step}: accepted: {value:?}", self.face),
            Err(failure) => failure,
        };
        let seen = Failure { kind: failure.kind, message: self.normalise(&failure.message) };
        assert_eq!(seen, Failure { kind, message: message.to_owned() }, "[{}] {step}", self.face);
        self.note(step, seen);
    }
}

/// Polls `get` until `done` accepts the job (the journal is written off the request path).
async fn settled_details<F: Face>(face: &F, id: &str, done: impl Fn(&Details) -> bool) -> Details {
    let started = Instant::now();
    loop {
        let details = face.get(id).await.unwrap_or_else(|failure| panic!("[{}] get {id}: {failure:?}", face.name()));
        if done(&details) {
            return details;
        }
        assert!(started.elapsed() < SETTLE, "[{}] job {id} did not settle: {details:?}", face.name());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls the counts of `topic` until `done` accepts them.
async fn settled_counts<F: Face>(face: &F, topic: &str, done: impl Fn(&Counts) -> bool) -> Counts {
    let started = Instant::now();
    loop {
        let counts = face.counts(topic).await.unwrap_or_else(|failure| panic!("[{}] stats: {failure:?}", face.name()));
        if done(&counts) {
            return counts;
        }
        assert!(started.elapsed() < SETTLE, "[{}] counts of {topic} did not settle: {counts:?}", face.name());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn states(details: &Details) -> Vec<&str> {
    details.history.iter().map(|(state, _)| state.as_str()).collect()
}

/// Runs the whole scenario through `face`; every id and topic starts with `tag`.
pub(super) async fn scenario<F: Face>(face: F, tag: &str) -> Transcript {
    let mut t = Transcript::new(face.name(), tag);
    refusals(&face, tag, &mut t).await;
    push_and_lookup(&face, tag, &mut t).await;
    pop_with_count(&face, tag, &mut t).await;
    long_poll(&face, tag, &mut t).await;
    nack_with_delay(&face, tag, &mut t).await;
    touch_extends_ttr(&face, tag, &mut t).await;
    delete_and_restore(&face, tag, &mut t).await;
    auth(&face, tag, &mut t).await;
    t
}

/// Bad input names the field; unknown ids are not found; nothing changes.
async fn refusals<F: Face>(face: &F, tag: &str, t: &mut Transcript) {
    let topic = format!("{tag}.refusals");
    let job = NewJob::new(&topic, "b");
    let cases = [
        (NewJob { topic: "bad topic".into(), ..job.clone() }, "topic may only contain A-Z a-z 0-9 . _ : -"),
        (NewJob { body: None, ..job.clone() }, "body is required"),
        (NewJob { delay_ms: Some(-1), ..job.clone() }, "delay must be >= 0"),
        (NewJob { ttr_ms: Some(99), ..job.clone() }, "ttr must be from 100 ms to 86400000 ms"),
        (NewJob { priority: Some(5), ..job.clone() }, "priority must be from 0 to 4"),
        (job.clone().id("a b"), "id may only contain A-Z a-z 0-9 . _ : -"),
    ];
    for (index, (bad, message)) in cases.into_iter().enumerate() {
        t.refused(&format!("push invalid #{index}"), face.push(&bad).await, Kind::Invalid, message);
    }
    t.refused("pop count 0", face.pop(&topic, Some(0), None).await, Kind::Invalid, "count must be from 1 to 100");
    let too_long = face.pop(&topic, None, Some(30_001)).await;
    t.refused("pop timeout too long", too_long, Kind::Invalid, "timeout must be from 0 to 30000");
    t.refused("pop without topic", face.pop("", None, None).await, Kind::Invalid, "topic is required");
    t.refused(
        "finish bad id",
        face.finish("a b", None).await,
        Kind::Invalid,
        "jobId may only contain A-Z a-z 0-9 . _ : -",
    );
    t.refused("finish without id", face.finish("", None).await, Kind::Invalid, "jobId is required");
    t.refused("get bad id", face.get("a b").await, Kind::Invalid, "id may only contain A-Z a-z 0-9 . _ : -");
    let nack = face.nack(&format!("{tag}-nope"), Some(-1)).await;
    t.refused("nack negative delay", nack, Kind::Invalid, "delay must be >= 0");

    let unknown = format!("{tag}-nope");
    let not_live = "no job <tag>-nope";
    t.refused("finish unknown", face.finish(&unknown, None).await, Kind::NotFound, not_live);
    t.refused("nack unknown", face.nack(&unknown, None).await, Kind::NotFound, not_live);
    t.refused("touch unknown", face.touch(&unknown).await, Kind::NotFound, not_live);
    t.refused("delete unknown", face.delete(&unknown).await, Kind::NotFound, not_live);
    t.refused("get unknown", face.get(&unknown).await, Kind::NotFound, "no job <tag>-nope");
    t.refused("restore unknown", face.restore_job(&unknown).await, Kind::NotFound, not_live);
    let by_key = face.delete_by_biz_key(&topic, "no-such-key").await;
    t.refused(
        "delete unknown bizKey",
        by_key,
        Kind::NotFound,
        "no live job of topic <tag>.refusals has bizKey no-such-key",
    );
    let counts = face.counts(&topic).await;
    t.note("nothing was stored", t.normalise(&format!("{counts:?}")));
    assert_eq!(counts, Ok(Counts::default()), "[{}] refusals changed nothing", face.name());
}

/// Push with and without delay, duplicates of ids and business keys, lookups and counts.
async fn push_and_lookup<F: Face>(face: &F, tag: &str, t: &mut Transcript) {
    let topic = format!("{tag}.push");
    let before = now_ms() as i64;
    let now = t.ok("push due now", face.push(&NewJob::new(&topic, "now")).await);
    let after = now_ms() as i64;
    t.note("generated id is a decimal snowflake", now.id.parse::<u64>().is_ok());
    t.note("due now", (before..=after + 5).contains(&now.run_at));

    let later_id = format!("{tag}-later");
    let later_job = NewJob { delay_ms: Some(60_000), ..NewJob::new(&topic, "later").id(&later_id) };
    let before = now_ms() as i64;
    let later = t.ok("push delayed", face.push(&later_job).await);
    t.note("delayed id", t.normalise(&later.id));
    t.note("due in a minute", (before + 60_000..=now_ms() as i64 + 60_005).contains(&later.run_at));
    let duplicate = face.push(&later_job).await;
    t.refused("push duplicate id", duplicate, Kind::Taken, "job <tag>-later already exists");

    let keyed = NewJob { biz_key: Some("order-1".into()), delay_ms: Some(60_000), ..NewJob::new(&topic, "keyed") };
    let first = t.ok("push bizKey", face.push(&keyed).await);
    t.alias(&first.id, "<keyed-id>");
    let again = face.push(&NewJob { body: Some("other".into()), ..keyed.clone() }).await;
    let taken = "bizKey order-1 of topic <tag>.push is taken by live job <keyed-id>";
    t.refused("push duplicate bizKey", again, Kind::Taken, taken);
    let keyed_details = t.ok("get bizKey job", face.get(&first.id).await);
    t.note("bizKey job", (&keyed_details.state, keyed_details.biz_key.as_deref()));
    let by_key = t.ok("get by bizKey", face.get_by_biz_key(&topic, "order-1").await);
    t.note("the same job by its bizKey", by_key == keyed_details);
    assert_eq!(by_key, keyed_details, "[{}] lookup by bizKey", face.name());
    let unknown_key = face.get_by_biz_key(&topic, "order-2").await;
    t.refused("get unknown bizKey", unknown_key, Kind::NotFound, "no live job of topic <tag>.push has bizKey order-2");
    let without_topic = face.delete_by_biz_key("", "order-1").await;
    t.refused("delete bizKey without topic", without_topic, Kind::Invalid, "topic is required");
    let nothing = face.delete("").await;
    t.refused("delete without id", nothing, Kind::Invalid, "jobId is required (or topic and bizKey)");

    let details = t.ok("get delayed", face.get(&later_id).await);
    t.note("delayed job", (&details.state, details.attempt, details.run_at == later.run_at, &details.result));
    assert_eq!(details.state, "delay");
    assert_eq!(details.run_at, later.run_at);
    let wrong = "job <tag>-later is delay, not reserved";
    t.refused("finish delayed", face.finish(&later_id, None).await, Kind::WrongState, wrong);
    t.refused("touch delayed", face.touch(&later_id).await, Kind::WrongState, wrong);
    t.refused("nack delayed", face.nack(&later_id, None).await, Kind::WrongState, wrong);

    let counts = settled_counts(face, &topic, |counts| counts.ready == 1).await;
    t.note("counts after pushes", counts);
    assert_eq!(counts, Counts { delay: 2, ready: 1, ..Counts::default() });
}

/// Pop with a count takes the most urgent jobs first; finish ends them with their history.
async fn pop_with_count<F: Face>(face: &F, tag: &str, t: &mut Transcript) {
    let topic = format!("{tag}.batch");
    for (name, priority) in [("p2", 2), ("p0", 0), ("p1", 1)] {
        let job = NewJob { priority: Some(priority), ..NewJob::new(&topic, name).id(&format!("{tag}-{name}")) };
        t.ok(&format!("push {name}"), face.push(&job).await);
    }
    settled_counts(face, &topic, |counts| counts.ready == 3).await;
    let first = t.ok("pop 2", face.pop(&topic, Some(2), Some(0)).await);
    let seen: Vec<(String, u32, u32)> =
        first.iter().map(|job| (t.normalise(&job.id), job.attempt, job.priority)).collect();
    t.note("pop 2 gives the most urgent", &seen);
    assert_eq!(seen, [("<tag>-p0".to_owned(), 1, 0), ("<tag>-p1".to_owned(), 1, 1)], "[{}]", face.name());
    assert!(first.iter().all(|job| job.ttr_ms == 30_000 && job.biz_key.is_none() && job.run_at > 0));
    let rest = t.ok("pop 5", face.pop(&topic, Some(5), Some(0)).await);
    let seen: Vec<String> = rest.iter().map(|job| t.normalise(&job.id)).collect();
    t.note("pop 5 gives what is left", &seen);
    assert_eq!(seen, ["<tag>-p2"]);
    let empty = t.ok("pop empty", face.pop(&topic, Some(5), Some(0)).await);
    t.note("nothing left", empty.len());
    assert!(empty.is_empty());

    let counts = settled_counts(face, &topic, |counts| counts.reserved == 3).await;
    t.note("counts while reserved", counts);
    let p0 = format!("{tag}-p0");
    t.ok("finish p0 with result", face.finish(&p0, Some("done")).await);
    t.ok("finish p1", face.finish(&format!("{tag}-p1"), None).await);
    t.ok("finish p2", face.finish(&format!("{tag}-p2"), None).await);
    t.refused("finish twice", face.finish(&p0, None).await, Kind::WrongState, "job <tag>-p0 is finished, not reserved");
    let details = settled_details(face, &p0, |details| states(details).last() == Some(&"finished")).await;
    t.note("finished job", (&details.state, details.attempt, &details.result, &details.history));
    assert_eq!(details.state, "finished");
    assert_eq!(details.result.as_deref(), Some("done"));
    assert_eq!(states(&details), ["ready", "reserved", "finished"], "[{}] a job due at once starts ready", face.name());
    let counts = settled_counts(face, &topic, |counts| counts.finished == 3).await;
    t.note("counts after finish", counts);
    assert_eq!(counts, Counts { finished: 3, ..Counts::default() });
    let restore = face.restore_job(&p0).await;
    t.refused("restore finished", restore, Kind::WrongState, "job <tag>-p0 is finished");
}

/// A pop with a timeout waits for the first job to fall due.
async fn long_poll<F: Face>(face: &F, tag: &str, t: &mut Transcript) {
    let topic = format!("{tag}.wait");
    let id = format!("{tag}-wait");
    t.ok("push due in 700 ms", face.push(&NewJob { delay_ms: Some(700), ..NewJob::new(&topic, "w").id(&id) }).await);
    let started = Instant::now();
    let popped = t.ok("long poll", face.pop(&topic, Some(1), Some(10_000)).await);
    let waited = started.elapsed();
    t.note("long poll got the job", popped.iter().map(|job| t.normalise(&job.id)).collect::<Vec<_>>());
    t.note(
        "long poll waited for the due time",
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(8),
    );
    assert_eq!(popped.len(), 1, "[{}]", face.name());
    assert!(waited >= Duration::from_millis(500), "[{}] popped after {waited:?}, before it was due", face.name());
    let quick = Instant::now();
    let empty = t.ok("short poll", face.pop(&topic, Some(1), Some(300)).await);
    t.note("short poll gives up", (empty.len(), quick.elapsed() >= Duration::from_millis(250)));
    t.ok("finish waited job", face.finish(&id, None).await);
}

/// A nack with a delay redelivers the job after it, with attempt + 1.
async fn nack_with_delay<F: Face>(face: &F, tag: &str, t: &mut Transcript) {
    let topic = format!("{tag}.retry");
    let id = format!("{tag}-retry");
    t.ok("push retry", face.push(&NewJob::new(&topic, "r").id(&id)).await);
    let first = t.ok("pop retry", face.pop(&topic, Some(1), Some(5_000)).await);
    t.note("first delivery", first.iter().map(|job| job.attempt).collect::<Vec<_>>());
    let before = now_ms() as i64;
    let nacked = t.ok("nack 800 ms", face.nack(&id, Some(800)).await);
    t.note("nacked", (&nacked.state, (before + 800..=now_ms() as i64 + 805).contains(&nacked.run_at)));
    assert_eq!(nacked.state, "delay");
    let details = t.ok("get nacked", face.get(&id).await);
    t.note("nacked job", (&details.state, details.run_at == nacked.run_at));
    let early = t.ok("pop before the retry", face.pop(&topic, Some(1), Some(0)).await);
    t.note("not yet due", early.len());
    assert!(early.is_empty(), "[{}] redelivered before its nack delay", face.name());
    let again = t.ok("pop the retry", face.pop(&topic, Some(1), Some(10_000)).await);
    let attempts: Vec<u32> = again.iter().map(|job| job.attempt).collect();
    t.note("second delivery", &attempts);
    assert_eq!(attempts, [2], "[{}]", face.name());
    assert!(now_ms() as i64 >= nacked.run_at);
    t.ok("finish retry", face.finish(&id, None).await);
    let details = settled_details(face, &id, |details| states(details).last() == Some(&"finished")).await;
    // Compared as a set: a promotion and the long poll it wakes journal concurrently, so
    // their order in the history is not fixed (the store orders it by arrival).
    let mut history = details.history.clone();
    history.sort();
    t.note("retried history", &history);
    let expected = [("delay", 2), ("finished", 2), ("ready", 1), ("ready", 2), ("reserved", 1), ("reserved", 2)];
    let expected: Vec<(String, u32)> = expected.iter().map(|(state, attempt)| (state.to_string(), *attempt)).collect();
    assert_eq!(history, expected, "[{}]", face.name());
    assert_eq!(details.attempt, 2);
}

/// A touch restarts the ttr clock; without one the job comes back after its ttr.
async fn touch_extends_ttr<F: Face>(face: &F, tag: &str, t: &mut Transcript) {
    let topic = format!("{tag}.touch");
    let id = format!("{tag}-touch");
    let job = NewJob { ttr_ms: Some(5_000), ..NewJob::new(&topic, "t").id(&id) };
    t.ok("push ttr 5 s", face.push(&job).await);
    let popped = t.ok("pop touch", face.pop(&topic, Some(1), Some(5_000)).await);
    t.note("popped with its ttr", popped.iter().map(|job| (job.attempt, job.ttr_ms)).collect::<Vec<_>>());
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    t.ok("touch", face.touch(&id).await);
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    // 6 s after the pop (1 s past its first ttr), 3 s after the touch: still reserved, first delivery.
    let details = t.ok("get touched", face.get(&id).await);
    t.note("still reserved", (&details.state, details.attempt));
    assert_eq!((details.state.as_str(), details.attempt), ("reserved", 1), "[{}] touch did not extend", face.name());
    let redelivered = t.ok("pop after the ttr", face.pop(&topic, Some(1), Some(10_000)).await);
    let attempts: Vec<u32> = redelivered.iter().map(|job| job.attempt).collect();
    t.note("redelivered after the ttr", &attempts);
    assert_eq!(attempts, [2], "[{}]", face.name());
    t.ok("finish touched", face.finish(&id, None).await);
}

/// Delete by id and by business key; restore puts a live job back as it was.
async fn delete_and_restore<F: Face>(face: &F, tag: &str, t: &mut Transcript) {
    let topic = format!("{tag}.delete");
    let id = format!("{tag}-gone");
    t.ok("push to delete", face.push(&NewJob { delay_ms: Some(60_000), ..NewJob::new(&topic, "g").id(&id) }).await);
    t.ok("delete", face.delete(&id).await);
    let details = settled_details(face, &id, |details| states(details).last() == Some(&"deleted")).await;
    t.note("deleted job", (&details.state, &details.history));
    assert_eq!(details.state, "deleted");
    t.refused("delete twice", face.delete(&id).await, Kind::WrongState, "job <tag>-gone is deleted");

    let reserved_id = format!("{tag}-busy");
    t.ok("push to delete while reserved", face.push(&NewJob::new(&topic, "b").id(&reserved_id)).await);
    t.ok("pop to delete", face.pop(&topic, Some(1), Some(5_000)).await);
    t.ok("delete reserved", face.delete(&reserved_id).await);
    let deleted = face.finish(&reserved_id, None).await;
    t.refused("finish deleted", deleted, Kind::WrongState, "job <tag>-busy is deleted, not reserved");

    let keyed = NewJob { biz_key: Some("k1".into()), delay_ms: Some(60_000), ..NewJob::new(&topic, "k") };
    t.ok("push keyed", face.push(&keyed).await);
    t.ok("delete by bizKey", face.delete_by_biz_key(&topic, "k1").await);
    t.ok("bizKey is free again", face.push(&keyed).await);

    let kept = format!("{tag}-kept");
    let pushed = t.ok(
        "push to restore",
        face.push(&NewJob { delay_ms: Some(60_000), ..NewJob::new(&topic, "r").id(&kept) }).await,
    );
    t.ok("restore job", face.restore_job(&kept).await);
    let details = t.ok("get restored", face.get(&kept).await);
    t.note("restored job unchanged", (&details.state, details.run_at == pushed.run_at));
    assert_eq!((details.state.as_str(), details.run_at), ("delay", pushed.run_at));
    let restored = t.ok("restore all", face.restore().await);
    t.note("restore covers the live jobs", restored >= 2);
    let counts = settled_counts(face, &topic, |counts| counts.deleted == 3).await;
    t.note("counts after deletes", counts);
    assert_eq!(counts, Counts { delay: 2, deleted: 3, ..Counts::default() });
}

/// Calls without a valid token are refused; admin calls need an admin token.
async fn auth<F: Face>(face: &F, tag: &str, t: &mut Transcript) {
    let job = NewJob::new(&format!("{tag}.auth"), "a");
    let missing = face.with_token("").push(&job).await;
    t.refused("no token", missing, Kind::Unauthenticated, "authorization is required: Bearer <token>");
    let wrong = face.with_token("wrong-token").push(&job).await;
    t.refused("wrong token", wrong, Kind::Unauthenticated, "token is not valid");
    let user = face.with_token(USER_TOKEN);
    t.ok("user token pushes", user.push(&job).await);
    t.refused("user token restores", user.restore().await, Kind::Forbidden, "admin token is required");
}
