//! The writer's transaction on MySQL, and the ended counts it keeps.
//!
//! `job_ended_count` holds how many jobs of each topic are in each ended state
//! (see `sql/mysql/0003_retention_and_counts.sql`). The writer changes it in the
//! transaction that writes the job rows: a job that ends, a clearAll, an ended
//! id pushed again, a purge. Its changes are gathered during the batch and
//! written just before `COMMIT`, in (topic, status) order, so that two nodes'
//! transactions take the count rows' locks in one order and hold them briefly.
//!
//! A state change does not carry its job's topic: the jobs a batch ended are
//! looked up in one statement (at commit, or before a statement that could
//! rewrite an ended row: an insert over it, a purge).

use std::collections::BTreeMap;

use delayq_common::{JobId, JobState};
use sqlx::mysql::MySqlConnection;

use super::chunks::fixed_chunks;
use super::connection::within;
use crate::sql::binds::{in_list, multi_row_values};
use crate::sql::rows::Text;

/// The writer's connection during a batch, with the batch's changes to the ended counts.
pub(super) struct MysqlTx {
    pub(super) connection: MySqlConnection,
    /// Jobs this batch ended, whose topic is still to be looked up.
    newly_ended: Vec<(JobId, JobState)>,
    /// Changes to the ended counts, per topic and status.
    deltas: BTreeMap<(String, &'static str), i64>,
}

impl MysqlTx {
    pub(super) fn new(connection: MySqlConnection) -> MysqlTx {
        MysqlTx { connection, newly_ended: Vec::new(), deltas: BTreeMap::new() }
    }

    /// Notes that a live job just entered the ended `state`.
    pub(super) fn ended(&mut self, id: &JobId, state: JobState) {
        debug_assert!(!state.is_live());
        self.newly_ended.push((id.clone(), state));
    }

    /// Adds `delta` to the count of `topic`'s jobs in `state`; live states are not counted here.
    pub(super) fn count(&mut self, topic: &str, state: JobState, delta: i64) {
        if state.is_live() {
            return;
        }
        *self.deltas.entry((topic.to_owned(), state.as_str())).or_default() += delta;
    }

    /// Looks up the topics of the jobs this batch ended and counts them.
    pub(super) async fn resolve_ended(&mut self) -> Result<(), sqlx::Error> {
        if self.newly_ended.is_empty() {
            return Ok(());
        }
        let ended = std::mem::take(&mut self.newly_ended);
        for chunk in ended.chunks(LOOKUPS_PER_STATEMENT) {
            let sql = in_list("SELECT id, topic FROM job WHERE id IN (", chunk.len());
            let lookup = chunk.iter().fold(sqlx::query_as(&sql), |lookup, (id, _)| lookup.bind(id.as_str()));
            let topics: Vec<(Text, Text)> = within(lookup.fetch_all(&mut self.connection)).await?;
            let topics: BTreeMap<String, String> =
                topics.into_iter().map(|(Text(id), Text(topic))| (id, topic)).collect();
            for (id, state) in chunk {
                // Each ended job was live before this batch's change, and ended
                // rows are neither moved nor rewritten before this lookup.
                if let Some(topic) = topics.get(id.as_str()) {
                    self.count(topic, *state, 1);
                }
            }
        }
        Ok(())
    }

    /// Writes the batch's changes to the ended counts (before `COMMIT`), as
    /// multi-row upserts: a batch that ends jobs of many topics (a topic's
    /// consumer groups count under topics of their own) pays one round trip,
    /// not one per topic and status. Rows go in (topic, status) order.
    pub(super) async fn write_counts(&mut self) -> Result<(), sqlx::Error> {
        self.resolve_ended().await?;
        let deltas: Vec<((String, &'static str), i64)> =
            std::mem::take(&mut self.deltas).into_iter().filter(|(_, delta)| *delta != 0).collect();
        for (_, chunk) in fixed_chunks(&deltas) {
            let sql = upsert_counts(chunk.len());
            let upsert = chunk.iter().fold(sqlx::query(&sql), |upsert, ((topic, status), delta)| {
                upsert.bind(topic.as_str()).bind(*status).bind(*delta)
            });
            within(upsert.execute(&mut self.connection)).await?;
        }
        Ok(())
    }
}

/// Ids per lookup statement.
const LOOKUPS_PER_STATEMENT: usize = 1_000;

/// The upsert of `rows` changes to the ended counts, each bound as topic, status, delta.
fn upsert_counts(rows: usize) -> String {
    format!(
        "{} ON DUPLICATE KEY UPDATE jobs = jobs + VALUES(jobs)",
        multi_row_values("INSERT INTO job_ended_count (topic, status, jobs) VALUES ", 3, rows)
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_count_upsert_takes_three_values_per_row() {
        let sql = super::upsert_counts(4);
        assert_eq!(sql.matches('?').count(), 12);
        assert!(sql.ends_with("ON DUPLICATE KEY UPDATE jobs = jobs + VALUES(jobs)"));
    }
}
