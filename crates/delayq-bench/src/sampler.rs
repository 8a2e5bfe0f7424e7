//! Memory sampled at a fixed interval while a workload runs, for the workloads whose
//! question is how memory moves over time (W6: Redis must hold about one horizon's worth
//! of jobs while they roll through it), not only what it is at the end.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::procstat::{MemoryReading, Probes};
use crate::report::Metrics;

/// A task that reads the probes every interval until [`MemorySampler::finish`].
pub(crate) struct MemorySampler {
    samples: Arc<Mutex<Vec<MemoryReading>>>,
    task: JoinHandle<()>,
}

impl MemorySampler {
    /// Starts reading `probes` now and then every `every`.
    pub(crate) fn start(probes: &Probes, every: Duration) -> MemorySampler {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let task = {
            let (probes, samples) = (probes.clone(), Arc::clone(&samples));
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(every);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticks.tick().await;
                    let sample = probes.memory().await;
                    samples.lock().unwrap_or_else(PoisonError::into_inner).push(sample);
                }
            })
        };
        MemorySampler { samples, task }
    }

    /// Stops sampling and records the distribution of each probe's readings
    /// (`redis_used_memory_bytes_*`, `server_rss_bytes_*`) and how many were taken.
    pub(crate) fn finish(self, metrics: &mut Metrics) {
        self.task.abort();
        let samples = std::mem::take(&mut *self.samples.lock().unwrap_or_else(PoisonError::into_inner));
        metrics.set("memory_samples", samples.len() as f64);
        let mut redis: Vec<f64> = samples.iter().filter_map(|sample| sample.redis_used_memory_bytes).collect();
        if !redis.is_empty() {
            metrics.set_distribution("redis_used_memory_bytes", &mut redis);
        }
        let mut rss: Vec<f64> = samples.iter().filter_map(|sample| sample.server_rss_bytes).collect();
        if !rss.is_empty() {
            metrics.set_distribution("server_rss_bytes", &mut rss);
        }
    }
}

impl Drop for MemorySampler {
    /// Ends the task on every exit path, also when the run failed before `finish`.
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procstat::{ProcessProbe, RedisProbe};

    #[tokio::test]
    async fn reads_redis_and_the_process_until_finished() {
        let Some(url) = delayq_testkit::service("DELAYQ_TEST_REDIS_URL") else { return };
        let probes = Probes {
            server: Some(ProcessProbe::of_self()),
            redis: Some(RedisProbe::from_url(&url).expect("a redis URL")),
        };
        let sampler = MemorySampler::start(&probes, Duration::from_millis(10));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut metrics = Metrics::default();
        sampler.finish(&mut metrics);
        let taken = metrics.get("memory_samples").expect("counted");
        assert!(taken >= 2.0, "{taken} samples in 100 ms at 10 ms");
        for reading in ["redis_used_memory_bytes_max", "server_rss_bytes_min"] {
            assert!(metrics.get(reading).is_some_and(|bytes| bytes > 0.0), "{reading} missing");
        }
    }

    #[tokio::test]
    async fn without_probes_only_the_count_is_recorded() {
        let sampler = MemorySampler::start(&Probes::default(), Duration::from_millis(10));
        tokio::time::sleep(Duration::from_millis(30)).await;
        let mut metrics = Metrics::default();
        sampler.finish(&mut metrics);
        assert!(metrics.get("memory_samples").is_some_and(|taken| taken >= 1.0));
        assert_eq!(metrics.get("redis_used_memory_bytes_max"), None);
    }
}
