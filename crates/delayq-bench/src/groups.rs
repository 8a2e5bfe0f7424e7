//! Consumer groups in a run (`--groups N`): the groups `g0..g{N-1}` declared on
//! the run's topic, and the receipts of a consumed run as one, whether it has
//! one receipt log (no groups) or one per group. Each group receives every job
//! once, so its log counts its own duplicates and missing deliveries, and the
//! run's numbers are the sums over the groups.

use std::sync::Arc;

use crate::client::BenchClient;
use crate::consumers::{ReceiptCounters, ReceiptLog};
use crate::error::{BenchError, BenchResult};
use crate::pushers::Transport;
use crate::report::{nearest_rank, Metrics};

/// Returns the names of `count` groups: `g0`, `g1`, ….
pub(crate) fn group_names(count: usize) -> Vec<String> {
    (0..count).map(|index| format!("g{index}")).collect()
}

/// Refuses `groups` over a transport that cannot pop or finish a group's
/// deliveries: the gRPC client here sends neither with a group.
///
/// # Errors
/// [`BenchError::Invalid`] for groups over gRPC.
pub(crate) fn check_transport(groups: usize, transport: Transport) -> BenchResult<()> {
    if groups > 0 && transport == Transport::Grpc {
        return Err(BenchError::Invalid("--groups needs --transport http: the gRPC consumers take no group".into()));
    }
    Ok(())
}

/// Declares every group of `names` on `topic`, one after another.
///
/// # Errors
/// The first request that failed or was answered with anything but 200.
pub(crate) async fn declare_all(client: &BenchClient, topic: &str, names: &[String]) -> BenchResult<()> {
    for name in names {
        client.declare_group(topic, name).await?;
    }
    Ok(())
}

/// The receipt logs of a consumed run: one without groups, one per group with them.
pub(crate) struct Receipts {
    logs: Vec<Arc<ReceiptLog>>,
}

impl Receipts {
    /// The receipts of these logs.
    pub(crate) fn new(logs: Vec<Arc<ReceiptLog>>) -> Receipts {
        Receipts { logs }
    }

    /// Returns the counters of every log, summed ([`ReceiptCounters::combined`]).
    pub(crate) fn counters(&self) -> ReceiptCounters {
        ReceiptCounters::combined(self.logs.iter().map(|log| log.counters()))
    }

    /// Returns `first receipt − due` in ms of every delivery received, over every log.
    pub(crate) fn latenesses_ms(&self) -> Vec<f64> {
        self.logs.iter().flat_map(|log| log.latenesses_ms()).collect()
    }

    /// Returns the due time and `first receipt − due` in ms of every delivery
    /// received, over every log.
    pub(crate) fn latenesses_by_due(&self) -> Vec<(u64, f64)> {
        self.logs.iter().flat_map(|log| log.latenesses_by_due()).collect()
    }

    /// Records `group_p99_max_ms`, the p99 lateness of the slowest group, when the
    /// logs are groups'. A single slow group is lost in the lateness over all
    /// deliveries; its own p99 is not.
    pub(crate) fn record_group_p99_max(&self, metrics: &mut Metrics) {
        if self.logs.iter().all(|log| log.group().is_none()) {
            return;
        }
        let worst_p99 = self
            .logs
            .iter()
            .filter_map(|log| {
                let mut latenesses = log.latenesses_ms();
                latenesses.sort_by(f64::total_cmp);
                nearest_rank(&latenesses, 99)
            })
            .max_by(f64::total_cmp);
        metrics.set_some("group_p99_max_ms", worst_p99);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::PoppedJob;

    #[test]
    fn groups_are_named_from_g0() {
        assert_eq!(group_names(3), vec!["g0", "g1", "g2"]);
        assert!(group_names(0).is_empty());
    }

    #[test]
    fn groups_are_refused_over_grpc_only() {
        assert!(check_transport(0, Transport::Grpc).is_ok());
        assert!(check_transport(2, Transport::Http).is_ok());
        let refused = check_transport(2, Transport::Grpc);
        assert!(matches!(refused, Err(BenchError::Invalid(message)) if message.contains("--groups")));
    }

    #[test]
    fn receipts_without_groups_report_no_group_numbers() {
        let receipts = Receipts::new(vec![Arc::new(ReceiptLog::for_group(vec![100], None))]);
        let mut metrics = Metrics::default();
        receipts.record_group_p99_max(&mut metrics);
        assert_eq!(metrics.get("group_p99_max_ms"), None);
        assert_eq!(receipts.counters().expected, 1);
    }

    #[test]
    fn every_group_expects_every_job() {
        let logs = group_names(3)
            .into_iter()
            .map(|name| Arc::new(ReceiptLog::for_group(vec![100, 200], Some(name))))
            .collect();
        let receipts = Receipts::new(logs);
        let counters = receipts.counters();
        assert_eq!((counters.expected, counters.received), (6, 0));
        let mut metrics = Metrics::default();
        receipts.record_group_p99_max(&mut metrics);
        // Nothing received: no group has a p99 yet.
        assert_eq!(metrics.get("group_p99_max_ms"), None);
    }
    #[test]
    fn the_worst_group_p99_is_reported_beside_every_delivery() {
        let log_of = |group: &str, received_ms: [u64; 2]| {
            let log = ReceiptLog::for_group(vec![100, 100], Some(group.to_owned()));
            for (index, at_ms) in (0_u64..).zip(received_ms) {
                let Ok(body) = crate::body::job_body(index, 100, 100) else { panic!("fits") };
                let job = PoppedJob { id: index.to_string(), run_at_ms: 100, body, group: Some(group.to_owned()) };
                log.record(&job, at_ms);
            }
            Arc::new(log)
        };
        let receipts = Receipts::new(vec![log_of("g0", [101, 102]), log_of("g1", [103, 140])]);
        let mut latenesses = receipts.latenesses_ms();
        latenesses.sort_by(f64::total_cmp);
        assert_eq!(latenesses, vec![1.0, 2.0, 3.0, 40.0]);
        let mut metrics = Metrics::default();
        receipts.record_group_p99_max(&mut metrics);
        assert_eq!(metrics.get("group_p99_max_ms"), Some(40.0));
        assert_eq!(receipts.counters().group_mismatches, 0);
    }
}
