//! The writer's connection during a batch.

use std::borrow::Cow;

use sqlx::SqliteConnection;

/// The writer's connection during a batch. `BEGIN IMMEDIATE` rides along with
/// the first statement of the batch instead of taking a round trip to the
/// connection's thread of its own.
pub(super) struct SqliteTx {
    connection: SqliteConnection,
    begin_pending: bool,
}

impl SqliteTx {
    /// Starts a batch on `connection`; nothing runs until its first statement.
    pub(super) fn new(connection: SqliteConnection) -> SqliteTx {
        SqliteTx { connection, begin_pending: true }
    }

    /// `sql`, led by the pending `BEGIN` when it is the batch's first statement.
    /// The transaction counts as begun from here on: should the statement fail,
    /// either `BEGIN` ran (a constraint failure, which the batch may go past) or
    /// the batch fails and the connection is dropped.
    pub(super) fn statement<'s>(&mut self, sql: &'s str) -> Cow<'s, str> {
        if std::mem::take(&mut self.begin_pending) {
            // IMMEDIATE takes the write lock up front, so a second process on the
            // same file makes us wait (busy timeout) instead of failing mid-batch.
            Cow::Owned(format!("BEGIN IMMEDIATE; {sql}"))
        } else {
            Cow::Borrowed(sql)
        }
    }

    /// Whether no statement of the batch has run yet (nor `BEGIN`).
    pub(super) fn is_unbegun(&self) -> bool {
        self.begin_pending
    }

    /// The connection, for statements that run only after another one.
    pub(super) fn connection(&mut self) -> &mut SqliteConnection {
        &mut self.connection
    }

    /// Ends the batch, returning the connection.
    pub(super) fn into_connection(self) -> SqliteConnection {
        self.connection
    }
}
