//! The store id: it belongs to the database, not to the process that opened it.

use std::future::Future;
use std::sync::Arc;

use crate::store::JobStore;

/// Every store `open` returns is on one database: two open at once report the
/// same id, a store opened after both closed reports it again, and
/// `other_database` (a store on another database) reports another one.
///
/// Not in [`store_conformance!`](crate::store_conformance): opening a second
/// store on a database is the backend's business, so each backend calls it.
pub async fn check_store_id_follows_the_database<Open, Opened>(open: Open, other_database: Arc<dyn JobStore>)
where
    Open: Fn() -> Opened,
    Opened: Future<Output = Arc<dyn JobStore>>,
{
    let first = open().await;
    let second = open().await;
    let id = first.store_id().clone();
    assert!(!id.as_str().is_empty(), "a store has an id");
    assert_eq!(second.store_id(), &id, "two stores open on one database report the same id");
    first.close().await;
    second.close().await;

    let reopened = open().await;
    assert_eq!(reopened.store_id(), &id, "the id survives closing and reopening the database");
    reopened.close().await;

    assert_ne!(other_database.store_id(), &id, "a store on another database reports another id");
}
