//! The reads both SQL stores make (a job, its history, listings, pages of
//! live jobs, the counts, the store id), on a pool of either database; each
//! dialect gives its own statements.

use std::borrow::Cow;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use delayq_common::name::GROUP_MARK;
use delayq_common::{Group, Job, JobId, JobState, Timestamp, Topic};
use sqlx::mysql::MySqlQueryResult;
use sqlx::query::Query;
use sqlx::sqlite::SqliteQueryResult;
use sqlx::{Database, Executor, FromRow, IntoArguments, Pool};

use super::binds::Bind;
use super::rows::{epoch_ms, into_jobs, job_columns, sql_count, state_count, JobRow, LogEntryRow, Text};
use crate::identity::{StoreId, STORE_ID_KEY};
use crate::store::{DueCount, DueCursor, ListCursor, LogEntry, StateCount, StoreError};

/// The read statements of one dialect, each with the values it takes.
pub(crate) struct ReadStatements {
    /// A job by id: the id.
    pub(crate) job: &'static str,
    /// The newest lines of a job's history, newest first: the id, the limit.
    pub(crate) history: &'static str,
    /// The live job of a topic with a business key: the topic, the key.
    pub(crate) live_by_biz_key: &'static str,
    /// The first page of a topic's jobs in a state, by due time and id: the
    /// topic, the state, the limit.
    pub(crate) list_first_page: &'static str,
    /// A later page: the topic, the state, the cursor (see `cursor_form`), the limit.
    pub(crate) list_after_cursor: &'static str,
    /// How `list_after_cursor` compares the cursor with a row.
    pub(crate) cursor_form: CursorForm,
    /// Live jobs after a cursor and up to a due-time bucket, by bucket and id:
    /// the cursor (as `cursor_form` compares it), the last bucket, the limit.
    pub(crate) live_jobs_due: &'static str,
    /// The entries of the live index read in a range of due-time buckets, and
    /// those of one topic (or all, given an empty topic) among them: the topic
    /// twice, the first bucket, the bucket after the last, the most entries to read.
    pub(crate) count_live_due: &'static str,
    /// The jobs per topic and state, as rows of topic, state and count.
    pub(crate) counts: &'static str,
    /// Records a store id unless the database holds one: the key, the id.
    pub(crate) insert_store_id: &'static str,
    /// Pauses a topic unless it is paused: the topic, the instant.
    pub(crate) pause_topic: &'static str,
    /// Declares a group of a topic unless it is declared: the topic, the
    /// group, the instant.
    pub(crate) declare_group: &'static str,
}

/// The paused topics, in both dialects.
const PAUSED_TOPICS: &str = "SELECT topic FROM topic_pause ORDER BY topic";
/// Resumes a topic, in both dialects: the topic.
const RESUME_TOPIC: &str = "DELETE FROM topic_pause WHERE topic = ?";

/// The declared groups by topic and name, in both dialects.
const GROUPS: &str = "SELECT topic, group_name FROM topic_group ORDER BY topic, group_name";
/// Drops a group of a topic, in both dialects: the topic, the group.
const DROP_GROUP: &str = "DELETE FROM topic_group WHERE topic = ? AND group_name = ?";

/// The rows whose ids lie strictly between two bounds, by id, in both
/// dialects: the bounds, the limit. With the bounds `<id>/` and `<id>0` (the
/// character after the mark) it reads the deliveries of job `<id>` as a range
/// of the primary key. A `LIKE` pattern built from the id would take its `_`
/// as a wildcard, and SQLite's `LIKE`, which ignores case, cannot use the key.
const JOBS_BETWEEN_IDS: &str =
    concat!("SELECT ", job_columns!(), " FROM job WHERE id > ? AND id < ? ORDER BY id LIMIT ?");

/// The first page of a topic's jobs in a state by id, in both dialects: the
/// topic, the state, the limit. The listing index leads with (topic, state,
/// id), so a page is a seek and a short read however many jobs the topic holds.
const LIST_BY_ID_FIRST: &str =
    concat!("SELECT ", job_columns!(), " FROM job WHERE topic = ? AND status = ? ORDER BY id LIMIT ?");
/// A later page by id: the topic, the state, the last id read, the limit.
const LIST_BY_ID_AFTER: &str =
    concat!("SELECT ", job_columns!(), " FROM job WHERE topic = ? AND status = ? AND id > ? ORDER BY id LIMIT ?");

/// The character right after [`GROUP_MARK`]: every id that starts with
/// `<id>/` sorts below `<id>0`, byte by byte as both databases compare ids.
const AFTER_GROUP_MARK: char = '0';

/// How a page after a cursor compares the cursor with a row.
pub(crate) enum CursorForm {
    /// `(run_at, id) > (?, ?)`: the due time, then the id.
    RowValue,
    /// `run_at > ? OR (run_at = ? AND id > ?)`: the due time twice, then the id.
    Expanded,
}

/// Jobs by id, in both dialects: followed by one `?` per id, then `)`.
const JOBS_BY_ID: &str = concat!("SELECT ", job_columns!(), " FROM job WHERE id IN (");

/// The most ids one read takes.
pub(crate) const MAX_IDS_PER_READ: usize = 128;

/// The lengths an id list is padded to (by repeating its last id), so that a
/// few statements serve every length and stay in the connections' caches.
const ID_LIST_LENGTHS: [usize; 4] = [1, 8, 32, MAX_IDS_PER_READ];

/// The store id a database holds: the key.
const SELECT_STORE_ID: &str = "SELECT meta_value FROM store_meta WHERE meta_key = ?";

/// Which jobs a read returns.
pub(crate) enum JobsRead<'a> {
    /// The job with this id.
    Id(&'a JobId),
    /// The jobs with these ids (at most [`MAX_IDS_PER_READ`]), in no order.
    Ids(&'a [&'a JobId]),
    /// The live job of a topic with this business key.
    LiveByBizKey(&'a Topic, &'a str),
    /// Up to `limit` jobs of a topic in a state, by due time and id, after `cursor`.
    Page { topic: &'a Topic, state: JobState, limit: usize, cursor: Option<&'a ListCursor> },
    /// Up to `limit` jobs of a topic in a state, by id, after the id `after`.
    PageById { topic: &'a Topic, state: JobState, limit: usize, after: Option<&'a JobId> },
    /// Up to `limit` live jobs up to bucket `through`, by bucket and id, after `after`.
    LiveDue { after: &'a DueCursor, through: u64, limit: usize },
}

/// A value bound to a read.
#[derive(Clone, Copy, Debug)]
enum Param<'a> {
    Text(&'a str),
    Integer(i64),
}

impl<'a> Param<'a> {
    fn bind<B: Bind<'a>>(self, query: B) -> B {
        match self {
            Param::Text(text) => query.text(text),
            Param::Integer(integer) => query.integer(integer),
        }
    }
}

impl ReadStatements {
    /// Returns the statement of `read` and the values it takes.
    fn jobs<'a>(&self, read: JobsRead<'a>) -> (Cow<'static, str>, Vec<Param<'a>>) {
        let (sql, params) = match read {
            JobsRead::Id(id) => (self.job, vec![Param::Text(id.as_str())]),
            JobsRead::Ids(ids) => return jobs_by_id(ids),
            JobsRead::LiveByBizKey(topic, biz_key) => {
                (self.live_by_biz_key, vec![Param::Text(topic.as_str()), Param::Text(biz_key)])
            }
            JobsRead::Page { topic, state, limit, cursor } => {
                let mut params = vec![Param::Text(topic.as_str()), Param::Text(state.as_str())];
                let sql = match cursor {
                    None => self.list_first_page,
                    Some(cursor) => {
                        let run_at = Param::Integer(epoch_ms(cursor.run_at));
                        if let CursorForm::Expanded = self.cursor_form {
                            params.push(run_at);
                        }
                        params.extend([run_at, Param::Text(cursor.id.as_str())]);
                        self.list_after_cursor
                    }
                };
                params.push(Param::Integer(sql_count(limit)));
                (sql, params)
            }
            JobsRead::PageById { topic, state, limit, after } => {
                let mut params = vec![Param::Text(topic.as_str()), Param::Text(state.as_str())];
                let sql = match after {
                    None => LIST_BY_ID_FIRST,
                    Some(after) => {
                        params.push(Param::Text(after.as_str()));
                        LIST_BY_ID_AFTER
                    }
                };
                params.push(Param::Integer(sql_count(limit)));
                (sql, params)
            }
            JobsRead::LiveDue { after, through, limit } => {
                let bucket = Param::Integer(sql_bucket(after.bucket));
                // Every valid id sorts after the empty string.
                let params = vec![
                    bucket,
                    bucket,
                    Param::Text(after.id.as_str()),
                    Param::Integer(sql_bucket(through)),
                    Param::Integer(sql_count(limit)),
                ];
                (self.live_jobs_due, params)
            }
        };
        (Cow::Borrowed(sql), params)
    }
}

/// The read of the jobs with these ids: the statement for the id list padded
/// to the next of [`ID_LIST_LENGTHS`], and the ids.
fn jobs_by_id<'a>(ids: &[&'a JobId]) -> (Cow<'static, str>, Vec<Param<'a>>) {
    let length = ID_LIST_LENGTHS.into_iter().find(|length| *length >= ids.len()).unwrap_or(ids.len());
    let mut params: Vec<Param<'a>> = ids.iter().map(|id| Param::Text(id.as_str())).collect();
    if let Some(last) = params.last().copied() {
        params.resize(length, last);
    }
    let mut sql = String::with_capacity(JOBS_BY_ID.len() + 2 * params.len());
    sql.push_str(JOBS_BY_ID);
    for index in 0..params.len() {
        sql.push_str(if index == 0 { "?" } else { ",?" });
    }
    sql.push(')');
    (Cow::Owned(sql), params)
}

/// A due-time bucket as an SQL integer (buckets of real instants are far below the bound).
fn sql_bucket(bucket: u64) -> i64 {
    i64::try_from(bucket).unwrap_or(i64::MAX)
}

/// How long a statement may take before it is given up (a hung or
/// unreachable server must not stall the store forever).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline {
    /// The longest a statement may take.
    pub(crate) limit: Duration,
    /// What a statement that took longer fails with, as an I/O timeout.
    pub(crate) message: &'static str,
}

impl Deadline {
    /// Runs `statement`, failing it as an I/O timeout after the limit.
    pub(crate) async fn run<T>(
        self,
        statement: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, sqlx::Error> {
        let timed_out = || sqlx::Error::Io(std::io::Error::new(std::io::ErrorKind::TimedOut, self.message));
        tokio::time::timeout(self.limit, statement).await.unwrap_or_else(|_| Err(timed_out()))
    }
}

/// The reads of a store; the shared [`JobStore`](crate::JobStore) makes them.
#[async_trait]
pub(crate) trait Reads: Send + Sync + 'static {
    /// Returns the jobs `read` selects, in its order.
    async fn jobs(&self, read: JobsRead<'_>) -> Result<Vec<Job>, StoreError>;

    /// Returns the newest `limit` lines of a job's history, oldest first.
    async fn history(&self, id: &JobId, limit: usize) -> Result<Vec<LogEntry>, StoreError>;

    /// Counts jobs per topic and state.
    async fn counts(&self) -> Result<Vec<StateCount>, StoreError>;

    /// Counts live jobs by due-time bucket, see [`JobStore::count_live_due`](crate::JobStore::count_live_due).
    async fn count_live_due(
        &self,
        topic: Option<&Topic>,
        from: u64,
        to: u64,
        scan: usize,
    ) -> Result<DueCount, StoreError>;

    /// Checks that the database answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Records a new store id unless the database holds one, and returns the
    /// one it holds: stores opening the database at once all read the first
    /// writer's.
    async fn store_id(&self) -> Result<StoreId, StoreError>;

    /// Returns the paused topics.
    async fn paused_topics(&self) -> Result<Vec<Topic>, StoreError>;

    /// Pauses `topic` (at `at`) or resumes it.
    async fn set_paused(&self, topic: &Topic, paused: bool, at: Timestamp) -> Result<(), StoreError>;

    /// Returns the declared groups by topic and name.
    async fn groups(&self) -> Result<Vec<(Topic, Group)>, StoreError>;

    /// Declares `group` of `topic` (at `at`) or drops it; returns whether a row
    /// was written or deleted.
    async fn set_group(&self, topic: &Topic, group: &Group, declared: bool, at: Timestamp) -> Result<bool, StoreError>;

    /// Returns up to `limit` deliveries of job `id`, by id.
    async fn deliveries_of(&self, id: &JobId, limit: usize) -> Result<Vec<Job>, StoreError>;

    /// Closes the connections.
    async fn close(&self);
}

/// How many rows a statement wrote or deleted, as each driver reports it.
pub(crate) trait RowsAffected {
    /// Returns the count.
    fn rows_affected(&self) -> u64;
}

impl RowsAffected for SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        SqliteQueryResult::rows_affected(self)
    }
}

impl RowsAffected for MySqlQueryResult {
    fn rows_affected(&self) -> u64 {
        MySqlQueryResult::rows_affected(self)
    }
}

/// [`Reads`] on a pool of `DB`.
pub(crate) struct Reader<DB: Database> {
    pool: Pool<DB>,
    backend: &'static str,
    statements: &'static ReadStatements,
    /// The deadline of every read; none where the driver bounds a statement itself.
    deadline: Option<Deadline>,
}

impl<DB: Database> Reader<DB> {
    /// Reads through `pool` with `statements`; failures name `backend`.
    pub(crate) fn new(
        pool: Pool<DB>,
        backend: &'static str,
        statements: &'static ReadStatements,
        deadline: Option<Deadline>,
    ) -> Reader<DB> {
        Reader { pool, backend, statements, deadline }
    }
}

impl<DB> Reader<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> Query<'q, DB, DB::Arguments<'q>>: Bind<'q>,
    DB::QueryResult: RowsAffected,
{
    /// Returns the rows `sql` selects with `params`, decoded.
    async fn fetch<O>(&self, sql: &str, params: &[Param<'_>]) -> Result<Vec<O>, StoreError>
    where
        O: for<'r> FromRow<'r, DB::Row> + Send + Unpin,
    {
        let query = params.iter().fold(sqlx::query(sql), |query, param| param.bind(query));
        self.run(query.try_map(|row: DB::Row| O::from_row(&row)).fetch_all(&self.pool)).await
    }

    /// Runs `sql` with `params`; returns how many rows it wrote or deleted.
    async fn execute(&self, sql: &str, params: &[Param<'_>]) -> Result<u64, StoreError> {
        let query = params.iter().fold(sqlx::query(sql), |query, param| param.bind(query));
        self.run(query.execute(&self.pool)).await.map(|done| done.rows_affected())
    }

    /// Awaits `statement` within the deadline; a failure makes the store unavailable.
    async fn run<T>(&self, statement: impl Future<Output = Result<T, sqlx::Error>>) -> Result<T, StoreError> {
        let outcome = match self.deadline {
            Some(deadline) => deadline.run(statement).await,
            None => statement.await,
        };
        outcome.map_err(|error| StoreError::Unavailable { backend: self.backend, source: Box::new(error) })
    }
}

#[async_trait]
impl<DB> Reads for Reader<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> Query<'q, DB, DB::Arguments<'q>>: Bind<'q>,
    DB::QueryResult: RowsAffected,
    for<'r> JobRow: FromRow<'r, DB::Row>,
    for<'r> LogEntryRow: FromRow<'r, DB::Row>,
    for<'r> (Text, Text, i64): FromRow<'r, DB::Row>,
    for<'r> (i64, i64): FromRow<'r, DB::Row>,
    for<'r> (Text, Text): FromRow<'r, DB::Row>,
    for<'r> (Text,): FromRow<'r, DB::Row>,
{
    async fn jobs(&self, read: JobsRead<'_>) -> Result<Vec<Job>, StoreError> {
        let (sql, params) = self.statements.jobs(read);
        into_jobs(self.fetch(&sql, &params).await?)
    }

    async fn history(&self, id: &JobId, limit: usize) -> Result<Vec<LogEntry>, StoreError> {
        let params = [Param::Text(id.as_str()), Param::Integer(sql_count(limit))];
        let rows: Vec<LogEntryRow> = self.fetch(self.statements.history, &params).await?;
        rows.into_iter().rev().map(LogEntryRow::into_entry).collect()
    }

    async fn counts(&self) -> Result<Vec<StateCount>, StoreError> {
        let rows: Vec<(Text, Text, i64)> = self.fetch(self.statements.counts, &[]).await?;
        rows.into_iter().map(state_count).collect()
    }

    async fn count_live_due(
        &self,
        topic: Option<&Topic>,
        from: u64,
        to: u64,
        scan: usize,
    ) -> Result<DueCount, StoreError> {
        let topic = topic.map(Topic::as_str).unwrap_or("");
        let params = [
            Param::Text(topic),
            Param::Text(topic),
            Param::Integer(sql_bucket(from)),
            Param::Integer(sql_bucket(to)),
            Param::Integer(sql_count(scan)),
        ];
        let rows: Vec<(i64, i64)> = self.fetch(self.statements.count_live_due, &params).await?;
        let (read, jobs) = rows.into_iter().next().unwrap_or((0, 0));
        let read = u64::try_from(read).unwrap_or(0);
        Ok(DueCount { jobs: u64::try_from(jobs).unwrap_or(0), complete: read < scan as u64 })
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.execute("SELECT 1", &[]).await.map(drop)
    }

    async fn store_id(&self) -> Result<StoreId, StoreError> {
        let generated = StoreId::generate();
        let record = [Param::Text(STORE_ID_KEY), Param::Text(generated.as_str())];
        self.execute(self.statements.insert_store_id, &record).await?;
        let stored: Vec<(Text,)> = self.fetch(SELECT_STORE_ID, &[Param::Text(STORE_ID_KEY)]).await?;
        match stored.into_iter().next() {
            Some((Text(stored),)) => StoreId::from_stored(stored),
            None => Err(StoreError::Unavailable { backend: self.backend, source: Box::new(sqlx::Error::RowNotFound) }),
        }
    }

    async fn paused_topics(&self) -> Result<Vec<Topic>, StoreError> {
        let rows: Vec<(Text,)> = self.fetch(PAUSED_TOPICS, &[]).await?;
        // A row no valid topic could have written is left out.
        Ok(rows.into_iter().filter_map(|(Text(topic),)| Topic::parse(topic).ok()).collect())
    }

    async fn set_paused(&self, topic: &Topic, paused: bool, at: Timestamp) -> Result<(), StoreError> {
        if paused {
            let row = [Param::Text(topic.as_str()), Param::Integer(epoch_ms(at))];
            self.execute(self.statements.pause_topic, &row).await.map(drop)
        } else {
            self.execute(RESUME_TOPIC, &[Param::Text(topic.as_str())]).await.map(drop)
        }
    }

    async fn groups(&self) -> Result<Vec<(Topic, Group)>, StoreError> {
        let rows: Vec<(Text, Text)> = self.fetch(GROUPS, &[]).await?;
        // A row no valid topic and group could have written is left out.
        let valid =
            |(Text(topic), Text(group)): (Text, Text)| Some((Topic::parse(topic).ok()?, Group::parse(group).ok()?));
        Ok(rows.into_iter().filter_map(valid).collect())
    }

    async fn set_group(&self, topic: &Topic, group: &Group, declared: bool, at: Timestamp) -> Result<bool, StoreError> {
        let (topic, group) = (Param::Text(topic.as_str()), Param::Text(group.as_str()));
        let changed = if declared {
            self.execute(self.statements.declare_group, &[topic, group, Param::Integer(epoch_ms(at))]).await?
        } else {
            self.execute(DROP_GROUP, &[topic, group]).await?
        };
        Ok(changed > 0)
    }

    async fn deliveries_of(&self, id: &JobId, limit: usize) -> Result<Vec<Job>, StoreError> {
        let (from, to) = (format!("{id}{GROUP_MARK}"), format!("{id}{AFTER_GROUP_MARK}"));
        let params = [Param::Text(&from), Param::Text(&to), Param::Integer(sql_count(limit))];
        into_jobs(self.fetch(JOBS_BETWEEN_IDS, &params).await?)
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upper_bound_of_deliveries_follows_the_mark() {
        assert_eq!(u32::from(AFTER_GROUP_MARK), u32::from(GROUP_MARK) + 1);
    }
}
