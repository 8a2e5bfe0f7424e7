//! The SQLite backend.
/// The SQLite store.
pub struct SqliteStore;
