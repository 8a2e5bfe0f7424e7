//! Every pairing of a scheduler and a store the configured services allow:
//! the memory scheduler with SQLite (always) and MariaDB, Redis with either
//! store, Redis Cluster with MariaDB.

use std::sync::Arc;

use delayq_queue::{MemoryScheduler, Scheduler};
use delayq_store::{JobStore, MysqlStore, SqliteStore};

/// A scheduler and a store, and what keeps them alive.
pub struct Deployment {
    pub name: String,
    pub scheduler: Arc<dyn Scheduler>,
    pub store: Arc<dyn JobStore>,
    /// The Redis URL and key prefix, for a standalone Redis.
    pub redis: Option<(String, String)>,
    _dir: Option<tempfile::TempDir>,
}

/// Every pairing the services allow, each on fresh state.
pub async fn deployments() -> Vec<Deployment> {
    let mysql = delayq_testkit::service("DELAYQ_TEST_MYSQL_URL");
    let redis = delayq_testkit::service("DELAYQ_TEST_REDIS_URL");
    let cluster = delayq_testkit::service("DELAYQ_TEST_REDIS_CLUSTER");
    let mut all = Vec::new();
    let schedulers: Vec<(&str, Option<String>)> =
        vec![("memory", None), ("redis", redis.clone()), ("redis cluster", cluster.clone())];
    for (scheduler_name, url) in schedulers {
        if scheduler_name != "memory" && url.is_none() {
            continue;
        }
        for store_name in ["sqlite", "mysql"] {
            if store_name == "mysql" && mysql.is_none() {
                continue;
            }
            // Redis Cluster is the distributed deployment: with MariaDB only.
            if scheduler_name == "redis cluster" && store_name == "sqlite" {
                continue;
            }
            let prefix = super::unique_prefix();
            let scheduler: Arc<dyn Scheduler> = match &url {
                None => Arc::new(MemoryScheduler::new()),
                Some(url) => Arc::new(super::connect(url, &prefix).await),
            };
            let (store, dir): (Arc<dyn JobStore>, _) = match (store_name, &mysql) {
                ("mysql", Some(mysql)) => {
                    (Arc::new(MysqlStore::open_scratch(mysql, "deployment".to_owned()).await.expect("mysql")), None)
                }
                _ => {
                    let dir = tempfile::tempdir().expect("temp dir");
                    let store = SqliteStore::open_in(dir.path(), "deployment".to_owned()).await.expect("sqlite");
                    (Arc::new(store) as Arc<dyn JobStore>, Some(dir))
                }
            };
            let standalone = (scheduler_name == "redis").then(|| url.clone().zip(Some(prefix))).flatten();
            all.push(Deployment {
                name: format!("{scheduler_name} + {store_name}"),
                scheduler,
                store,
                redis: standalone,
                _dir: dir,
            });
        }
    }
    all
}

/// Runs `check` on every deployment at once. Each check holds its deployment
/// whole (behind an `Arc`), temporary directory included, until it ends.
pub async fn on_every_deployment<F, Fut>(check: F)
where
    F: Fn(Arc<Deployment>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    futures::future::join_all(deployments().await.into_iter().map(|deployment| check(Arc::new(deployment)))).await;
}

/// Deletes every key of `prefix` on the Redis at `url`: a Redis restart
/// without persistence, for this prefix alone.
pub async fn empty_redis(url: &str, prefix: &str) {
    let client = redis::Client::open(url).expect("client");
    let mut connection = client.get_multiplexed_async_connection().await.expect("connection");
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("*{prefix}*")).query_async(&mut connection).await.expect("keys");
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut connection).await.expect("del");
    }
}
