//! `stats-job`, `stats-tube`, `stats` and `list-tubes`: beanstalkd 1.12's YAML
//! with its keys (names unquoted, as 1.12 writes them; only `version` is
//! quoted). Counts come from the queue (the scheduler's live jobs, the
//! store's buried ones), so they hold across every node; the counters delayq
//! does not keep (per-job timeouts, releases and kicks, the binlog) read 0.
//! The resource usage is this node's process, as beanstalkd reports its own.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use delayq_common::{JobState, Timestamp};
use delayq_queue::{QueueError, QueueStats};
use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeVal;

use crate::mapping::{beanstalk_priority, job_id, state_name};
use crate::reply::{self, quoted};
use crate::session::{refused, Session, DEFAULT_TUBE};

/// The commands `stats` counts, in beanstalkd's order.
pub(crate) const COUNTED_COMMANDS: [&str; 21] = [
    "put",
    "peek",
    "peek-ready",
    "peek-delayed",
    "peek-buried",
    "reserve",
    "reserve-with-timeout",
    "delete",
    "release",
    "use",
    "watch",
    "ignore",
    "bury",
    "kick",
    "touch",
    "stats",
    "stats-job",
    "stats-tube",
    "list-tubes",
    "list-tube-used",
    "list-tubes-watched",
];

/// One tube's jobs by beanstalkd's states.
#[derive(Clone, Copy, Debug, Default)]
struct TubeCounts {
    ready: u64,
    reserved: u64,
    delayed: u64,
    buried: u64,
    total: u64,
}

/// Every tube's counts: the live jobs from the scheduler, the buried (dead)
/// ones and the total from the store.
fn tube_counts(stats: &QueueStats) -> BTreeMap<String, TubeCounts> {
    let mut tubes: BTreeMap<String, TubeCounts> = BTreeMap::new();
    for live in &stats.live {
        let tube = tubes.entry(live.topic.as_str().to_owned()).or_default();
        tube.ready += live.ready;
        tube.reserved += live.reserved;
        tube.delayed += live.delay;
    }
    for stored in &stats.stored {
        let tube = tubes.entry(stored.topic.as_str().to_owned()).or_default();
        tube.total += stored.count;
        if stored.state == JobState::Dead {
            tube.buried += stored.count;
        }
    }
    tubes
}

/// Whether a tube has jobs beanstalkd would keep it for.
fn has_jobs(counts: &TubeCounts) -> bool {
    counts.ready + counts.reserved + counts.delayed + counts.buried > 0
}

impl Session {
    /// The tubes that exist as beanstalkd sees them: `default`, those a
    /// connection uses or watches, and those with jobs.
    async fn existing_tubes(&self) -> Result<BTreeSet<String>, QueueError> {
        let stats = self.queue().stats().await?;
        let mut tubes: BTreeSet<String> =
            tube_counts(&stats).into_iter().filter(|(_, counts)| has_jobs(counts)).map(|(name, _)| name).collect();
        tubes.extend(self.shared.tubes_in_use().into_keys());
        tubes.insert(DEFAULT_TUBE.to_owned());
        Ok(tubes)
    }

    pub(crate) async fn tube_exists(&self, tube: &str) -> Result<bool, QueueError> {
        Ok(self.existing_tubes().await?.contains(tube))
    }

    pub(crate) async fn list_tubes(&self) -> Vec<u8> {
        match self.existing_tubes().await {
            // beanstalkd lists `default` first: it is made first.
            Ok(mut tubes) => {
                tubes.remove(DEFAULT_TUBE);
                reply::name_list(std::iter::once(DEFAULT_TUBE).chain(tubes.iter().map(String::as_str)))
            }
            Err(error) => refused(error),
        }
    }

    pub(crate) async fn stats_job(&self, id: u64) -> Vec<u8> {
        let Some(job_id) = job_id(id) else { return reply::NOT_FOUND.to_vec() };
        let job = match self.queue().get(&job_id).await {
            Ok(details) => details.job,
            Err(error) => return refused(error),
        };
        let Some(state) = state_name(job.state) else { return reply::NOT_FOUND.to_vec() };
        let now = Timestamp::now();
        let time_left = match job.state {
            JobState::Reserved => job.updated_at.plus(job.ttr).until(now),
            JobState::Delay => job.run_at.until(now),
            _ => std::time::Duration::ZERO,
        };
        // `attempt` is the current delivery, or the next one while the job waits.
        let reserves = if job.state == JobState::Reserved { job.attempt } else { job.attempt.saturating_sub(1) };
        reply::dictionary(&[
            ("id", id.to_string()),
            ("tube", job.topic.as_str().to_owned()),
            ("state", state.to_owned()),
            ("pri", beanstalk_priority(job.priority).to_string()),
            ("age", now.since(job.create_time).as_secs().to_string()),
            ("delay", job.delay.as_secs().to_string()),
            ("ttr", job.ttr.as_secs().to_string()),
            ("time-left", time_left.as_secs().to_string()),
            ("file", "0".to_owned()),
            ("reserves", reserves.to_string()),
            ("timeouts", "0".to_owned()),
            ("releases", "0".to_owned()),
            ("buries", u32::from(job.state == JobState::Dead).to_string()),
            ("kicks", "0".to_owned()),
        ])
    }

    pub(crate) async fn stats_tube(&self, tube: &str) -> Vec<u8> {
        let stats = match self.queue().stats().await {
            Ok(stats) => stats,
            Err(error) => return refused(error),
        };
        let counts = tube_counts(&stats).get(tube).copied().unwrap_or_default();
        let in_use = self.shared.tubes_in_use().get(tube).copied();
        if tube != DEFAULT_TUBE && in_use.is_none() && !has_jobs(&counts) {
            return reply::NOT_FOUND.to_vec();
        }
        let in_use = in_use.unwrap_or_default();
        let (pause, pause_left) = match self.shared.pause_of(tube) {
            Some(pause) => (pause.delay.as_secs(), pause.until.saturating_duration_since(tokio::time::Instant::now())),
            None => (0, std::time::Duration::ZERO),
        };
        reply::dictionary(&[
            ("name", tube.to_owned()),
            ("current-jobs-urgent", "0".to_owned()),
            ("current-jobs-ready", counts.ready.to_string()),
            ("current-jobs-reserved", counts.reserved.to_string()),
            ("current-jobs-delayed", counts.delayed.to_string()),
            ("current-jobs-buried", counts.buried.to_string()),
            ("total-jobs", counts.total.to_string()),
            ("current-using", in_use.using.to_string()),
            ("current-watching", in_use.watching.to_string()),
            ("current-waiting", in_use.waiting.to_string()),
            ("cmd-delete", "0".to_owned()),
            ("cmd-pause-tube", "0".to_owned()),
            ("pause", pause.to_string()),
            ("pause-time-left", pause_left.as_secs().to_string()),
        ])
    }

    pub(crate) async fn stats(&self) -> Vec<u8> {
        let stats = match self.queue().stats().await {
            Ok(stats) => stats,
            Err(error) => return refused(error),
        };
        let tubes = tube_counts(&stats);
        let sum = |pick: fn(&TubeCounts) -> u64| tubes.values().map(pick).sum::<u64>().to_string();
        let connections = &self.shared.connections;
        let waiting: u64 = self.shared.tubes_in_use().values().map(|tube| tube.waiting).sum();
        let cpu = ProcessCpu::now();
        let counted: Vec<(String, String)> = COUNTED_COMMANDS
            .iter()
            .map(|name| (format!("cmd-{name}"), self.shared.command_count(name).to_string()))
            .collect();
        let mut entries: Vec<(&str, String)> = vec![
            ("current-jobs-urgent", "0".to_owned()),
            ("current-jobs-ready", sum(|tube| tube.ready)),
            ("current-jobs-reserved", sum(|tube| tube.reserved)),
            ("current-jobs-delayed", sum(|tube| tube.delayed)),
            ("current-jobs-buried", sum(|tube| tube.buried)),
        ];
        entries.extend(counted.iter().map(|(key, value)| (key.as_str(), value.clone())));
        entries.extend([
            ("cmd-pause-tube", self.shared.command_count("pause-tube").to_string()),
            ("job-timeouts", "0".to_owned()),
            ("total-jobs", sum(|tube| tube.total)),
            ("max-job-size", self.shared.max_job_size().to_string()),
            ("current-tubes", tubes.values().filter(|counts| has_jobs(counts)).count().max(1).to_string()),
            ("current-connections", connections.current.load(Ordering::Relaxed).to_string()),
            ("current-producers", connections.producers.load(Ordering::Relaxed).to_string()),
            ("current-workers", connections.workers.load(Ordering::Relaxed).to_string()),
            ("current-waiting", waiting.to_string()),
            ("total-connections", connections.total.load(Ordering::Relaxed).to_string()),
            ("pid", std::process::id().to_string()),
            ("version", quoted(concat!("delayq ", env!("CARGO_PKG_VERSION")))),
            ("rusage-utime", cpu.user),
            ("rusage-stime", cpu.system),
            ("uptime", self.shared.started.elapsed().as_secs().to_string()),
            ("binlog-oldest-index", "0".to_owned()),
            ("binlog-current-index", "0".to_owned()),
            ("binlog-records-migrated", "0".to_owned()),
            ("binlog-records-written", "0".to_owned()),
            ("binlog-max-size", "0".to_owned()),
            ("draining", self.shared.shutdown.is_cancelled().to_string()),
            ("id", self.queue().settings().node.clone()),
            ("hostname", self.queue().settings().node.clone()),
            ("os", std::env::consts::OS.to_owned()),
            ("platform", std::env::consts::ARCH.to_owned()),
        ]);
        reply::dictionary(&entries)
    }
}

/// The CPU time this process has used, in user and in kernel mode, as
/// `stats` shows it: seconds with six decimals.
struct ProcessCpu {
    user: String,
    system: String,
}

impl ProcessCpu {
    fn now() -> ProcessCpu {
        match getrusage(UsageWho::RUSAGE_SELF) {
            Ok(usage) => ProcessCpu { user: seconds(usage.user_time()), system: seconds(usage.system_time()) },
            // Not expected on any supported system; the counters then read 0, as before.
            Err(_) => ProcessCpu { user: seconds(TimeVal::new(0, 0)), system: seconds(TimeVal::new(0, 0)) },
        }
    }
}

fn seconds(time: TimeVal) -> String {
    format!("{}.{:06}", time.tv_sec(), time.tv_usec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_reads_as_beanstalkd_writes_it() {
        assert_eq!(seconds(TimeVal::new(3, 42)), "3.000042");
        assert_eq!(seconds(TimeVal::new(0, 999_999)), "0.999999");
    }

    #[test]
    fn the_process_cpu_time_grows_with_work() {
        let value = |text: &str| text.parse::<f64>().unwrap();
        let before = ProcessCpu::now();
        let mut spin = 0_u64;
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_millis(30) {
            spin = std::hint::black_box(spin.wrapping_add(1));
        }
        let after = ProcessCpu::now();
        let used = value(&after.user) + value(&after.system) - value(&before.user) - value(&before.system);
        assert!(
            used > 0.0,
            "no CPU time counted: {} {} then {} {}",
            before.user,
            before.system,
            after.user,
            after.system
        );
    }
}
