//! The writer's multi-row statements: the few row counts they come in, how a
//! run of writes is cut into chunks of those counts, and the statement text
//! of each count (each kept prepared on the writer's connection).

use delayq_common::Job;

use super::rows::job_wire_size;
use crate::sql::binds::in_list;
use crate::store::BoxError;

/// Up to this many rows, a run of writes goes out as one statement of exactly
/// its size.
const EXACT_CHUNKS_UP_TO: usize = 64;
/// The row counts of multi-row statements, largest first: 256, 128, then every
/// count from [`EXACT_CHUNKS_UP_TO`] down to 1. A batch is cut into chunks of
/// these sizes, so that a bounded set of prepared statements (cached on the
/// writer's connection) serves every batch, and the commits of single pushes
/// and acks, which carry a few dozen writes each, take one statement per kind
/// of write instead of one per bit of their count: each statement is a round
/// trip the whole commit waits for.
pub(super) const CHUNK_SIZES: [usize; EXACT_CHUNKS_UP_TO + 2] = chunk_sizes();
/// Statements the writer's connection keeps prepared: every size of each
/// multi-row statement, and the few others.
pub(super) const WRITER_STATEMENT_CACHE: usize = 5 * CHUNK_SIZES.len() + 64;

#[allow(clippy::indexing_slicing, reason = "constant evaluation: an index out of bounds fails the build")]
const fn chunk_sizes() -> [usize; EXACT_CHUNKS_UP_TO + 2] {
    let mut sizes = [0; EXACT_CHUNKS_UP_TO + 2];
    sizes[0] = 256;
    sizes[1] = 128;
    let mut index = 0;
    while index < EXACT_CHUNKS_UP_TO {
        sizes[index + 2] = EXACT_CHUNKS_UP_TO - index;
        index += 1;
    }
    sizes
}

/// Locks and reads the rows of the ids of a run of state changes (followed by
/// `?, ?, …)`): which are live, where each stands (so that the writer keeps only
/// the changes that move a row forward, [`moves_forward_from`]), and the topics
/// that count the jobs the run ends. By primary key alone: with `is_live` in the
/// condition the optimizer may walk the index of every live row.
///
/// [`moves_forward_from`]: crate::writer::moves_forward_from
const LOCK_LIVE_HEAD: &str = "SELECT id, topic, status, attempt, is_live FROM job WHERE id IN (";
/// Moves many locked live rows at once, each bound as id, status, attempt,
/// run_at, update_time, result. Every id names a row this transaction holds
/// locked, so each row takes the `UPDATE` branch and the constants that fill the
/// other columns are never stored. They leave `live_bizkey` NULL, so the only
/// key they can meet is the primary key (never another row's business key).
/// An `UPDATE` joined on the changes as a
/// derived table would do the same, but MariaDB builds that table on disk for
/// every statement (the text columns rule out its in-memory tables).
const APPLY_CHANGES_HEAD: &str = "INSERT INTO job (id, status, attempt, run_at, update_time, result, \
     topic, delay, create_time, body, ttr, priority, max_retries, retry_backoff) VALUES ";
const APPLY_CHANGES_ROW: &str = "(?, ?, ?, ?, ?, ?, '', 0, 0, '', 0, 0, 0, '')";
const APPLY_CHANGES_TAIL: &str = " ON DUPLICATE KEY UPDATE status = VALUES(status), attempt = VALUES(attempt), \
     run_at = VALUES(run_at), update_time = VALUES(update_time), result = VALUES(result)";

/// Cuts `items` into chunks of the [`CHUNK_SIZES`], largest first; yields each
/// with its index in [`CHUNK_SIZES`] (its statement's level).
pub(super) fn fixed_chunks<T>(items: &[T]) -> impl Iterator<Item = (usize, &[T])> {
    let mut rest = items;
    std::iter::from_fn(move || {
        // The last size is 1, which every non-empty rest fills.
        let (level, &size) = CHUNK_SIZES.iter().enumerate().find(|&(_, &size)| size <= rest.len())?;
        let (chunk, after) = rest.split_at(size);
        rest = after;
        Some((level, chunk))
    })
}

/// Returns the statement built for `CHUNK_SIZES[level]` rows.
pub(super) fn statement(statements: &[String], level: usize) -> Result<&str, BoxError> {
    statements.get(level).map(String::as_str).ok_or_else(|| format!("no statement for chunk level {level}").into())
}

/// Returns the index in [`CHUNK_SIZES`] and the row count of the next chunk of
/// `jobs`: the largest size that `jobs` fills and whose values fit `max_bytes`.
pub(super) fn chunk_level(jobs: &[&Job], max_bytes: usize) -> (usize, usize) {
    for (level, &size) in CHUNK_SIZES.iter().enumerate() {
        let Some(chunk) = jobs.get(..size) else { continue };
        if size == 1 || chunk.iter().map(|job| job_wire_size(job)).sum::<usize>() <= max_bytes {
            return (level, size);
        }
    }
    (CHUNK_SIZES.len() - 1, 1)
}

/// [`LOCK_LIVE_HEAD`] for `rows` ids.
pub(super) fn lock_live(rows: usize) -> String {
    format!("{} FOR UPDATE", in_list(LOCK_LIVE_HEAD, rows))
}

/// The multi-row write of `rows` state changes to locked live rows ([`APPLY_CHANGES_HEAD`]).
pub(super) fn apply_changes(rows: usize) -> String {
    format!("{APPLY_CHANGES_HEAD}{}{APPLY_CHANGES_TAIL}", vec![APPLY_CHANGES_ROW; rows].join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_row_changes_take_six_values_per_row() {
        assert_eq!(apply_changes(3).matches('?').count(), 18);
        assert_eq!(lock_live(3).matches('?').count(), 3);
    }

    #[test]
    fn runs_are_cut_into_exact_chunks_up_to_64_then_powers_of_two() {
        let sizes = |count: usize| -> Vec<usize> {
            fixed_chunks(&vec![0u8; count])
                .map(|(level, chunk)| {
                    assert_eq!(CHUNK_SIZES[level], chunk.len());
                    chunk.len()
                })
                .collect()
        };
        assert_eq!(sizes(0), Vec::<usize>::new());
        assert_eq!(sizes(1), [1]);
        assert_eq!(sizes(45), [45]);
        assert_eq!(sizes(64), [64]);
        assert_eq!(sizes(100), [64, 36]);
        assert_eq!(sizes(1_000), [256, 256, 256, 128, 64, 40]);
    }
}
