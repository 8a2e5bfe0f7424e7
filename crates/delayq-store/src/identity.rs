//! The identity of a store's database ([`StoreId`]).
//!
//! The id lives in the database itself (`store_meta`, see
//! `sql/*/0004_store_meta.sql`): a store writes it on open if absent and reads
//! back whichever id won, so every store opened on one database reports the
//! same id, and a store on any other database (another node's SQLite file,
//! another MySQL schema) another one. It is generated here, not by the
//! database, so that a replica of a MySQL database replays the very same value.

use std::fmt;
use std::hash::{BuildHasher, RandomState};

use crate::store::StoreError;

/// The `store_meta` key of the store id.
pub(crate) const STORE_ID_KEY: &str = "store_id";
/// The longest id a database may hold (the column's width).
const MAX_LEN: usize = 255;

/// The identity of the database a store writes to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StoreId(String);

impl StoreId {
    /// Returns a new random id (128 bits, as 32 hex digits).
    pub(crate) fn generate() -> StoreId {
        // Each `RandomState` carries fresh random keys from the OS; two of them
        // hash the time into two independent 64-bit values.
        let nanos = std::time::UNIX_EPOCH.elapsed().unwrap_or_default().as_nanos();
        let high = RandomState::new().hash_one((nanos, std::process::id()));
        let low = RandomState::new().hash_one(nanos);
        StoreId(format!("{high:016x}{low:016x}"))
    }

    /// Checks an id read back from the database.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when it is empty or longer than the column allows.
    pub(crate) fn from_stored(stored: String) -> Result<StoreId, StoreError> {
        let trimmed = stored.trim();
        if trimmed.is_empty() || trimmed.len() > MAX_LEN {
            return Err(StoreError::Corrupt(format!("store_meta.{STORE_ID_KEY} is {stored:?}")));
        }
        Ok(StoreId(trimmed.to_owned()))
    }

    /// Returns the id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StoreId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_differ_and_read_back() {
        let first = StoreId::generate();
        let second = StoreId::generate();
        assert_ne!(first, second);
        assert_eq!(first.as_str().len(), 32);
        assert_eq!(StoreId::from_stored(first.to_string()).expect("valid"), first);
    }

    #[test]
    fn empty_or_oversized_ids_are_corrupt() {
        assert!(matches!(StoreId::from_stored("  ".to_owned()), Err(StoreError::Corrupt(_))));
        assert!(matches!(StoreId::from_stored("x".repeat(MAX_LEN + 1)), Err(StoreError::Corrupt(_))));
    }
}
