//! The writer's multi-row statements: the few row counts they come in, how a
//! run of writes is cut into chunks of those counts, and the statement text
//! of each count (each kept prepared on the writer's connection).

use delayq_common::Job;

use super::rows::job_wire_size;
use crate::sql::binds::in_list;
use crate::store::BoxError;
use crate::writer::moves_forward;

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
pub(super) const WRITER_STATEMENT_CACHE: usize = 4 * CHUNK_SIZES.len() + 64;

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
/// `?, ?, …)`): which are live, and the topics that count the jobs the run
/// ends. By primary key alone: with `is_live` in the condition the optimizer
/// may walk the index of every live row.
const LOCK_LIVE_HEAD: &str = "SELECT id, topic, is_live FROM job WHERE id IN (";
/// Moves many live jobs forward at once: the changes are a derived table of
/// `SELECT ? AS id, … UNION ALL SELECT ?, …` (one row per job), joined on the
/// primary key. Same rule as [`CHANGE_STATE`]: ended jobs never move, live
/// jobs only forward. `STRAIGHT_JOIN` makes the changes drive the join: left
/// to itself, the optimizer may walk every live row and probe the changes.
const CHANGE_STATES_HEAD: &str = "UPDATE (";
const CHANGE_STATES_TAIL: &str = concat!(
    ") AS v STRAIGHT_JOIN job ON job.id = v.id SET job.status = v.status, job.attempt = v.attempt, job.run_at = v.run_at, \
     job.update_time = v.update_time, job.result = v.result WHERE job.is_live = 1 AND ",
    moves_forward!("job.status", "job.attempt", "v.status", "v.attempt")
);
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

/// The multi-row update of `rows` state changes, each bound as id, status,
/// attempt, run_at, update_time, result.
pub(super) fn change_states(rows: usize) -> String {
    let first = "SELECT ? AS id, ? AS status, ? AS attempt, ? AS run_at, ? AS update_time, ? AS result";
    let rest = vec![" UNION ALL SELECT ?, ?, ?, ?, ?, ?"; rows.saturating_sub(1)].concat();
    format!("{CHANGE_STATES_HEAD}{first}{rest}{CHANGE_STATES_TAIL}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_row_changes_take_six_values_per_row() {
        assert_eq!(change_states(3).matches('?').count(), 18);
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
