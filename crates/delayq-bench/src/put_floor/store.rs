//! The group commit of the durable-put floor: one thread takes every put queued
//! while it committed the last group, makes them durable together, and answers
//! each with its id.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;

use redis::aio::MultiplexedConnection;
use sqlx::{Connection, MySqlConnection};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;

use super::{Put, PutFloorArgs};
use crate::error::{BenchError, BenchResult};

/// The most puts one group takes.
const MAX_GROUP: usize = 1024;

/// Adds each job of a group (ARGV: id, record, id, record, …) to the hash KEYS[1]
/// and, due at its id, to the sorted set KEYS[2].
const SCHEDULE: &str = "for i = 1, #ARGV, 2 do \
                          redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) \
                          redis.call('ZADD', KEYS[2], ARGV[i], ARGV[i]) \
                        end return #ARGV / 2";

/// Where the floor makes puts durable.
pub(crate) enum Store {
    /// A log file: appended to, or written in place as a ring.
    File { file: File, ring: Option<Ring>, next: u64 },
    /// MariaDB / MySQL, and after it Redis when given.
    Mysql(Box<Database>),
}

/// The `mysql` store: the database, Redis when given, and the runtime they run on.
pub(crate) struct Database {
    runtime: Runtime,
    connection: MySqlConnection,
    redis: Option<Scheduling>,
    next: u64,
}

/// A log of fixed size, written in place from its start again when full.
pub(crate) struct Ring {
    size: u64,
    offset: u64,
}

/// The Redis side of the `mysql` store.
pub(crate) struct Scheduling {
    connection: MultiplexedConnection,
    script: redis::Script,
    jobs_key: String,
    due_key: String,
}

impl Store {
    /// Opens the store `args` names: creates the log file (a ring filled with
    /// zeros and synced), or connects to the database (creating its table) and
    /// to Redis.
    ///
    /// # Errors
    /// Returns a store that cannot be opened or an unknown store.
    pub(crate) fn open(args: &PutFloorArgs) -> BenchResult<Store> {
        let log = args.log.display().to_string();
        match args.store.as_str() {
            "file" => {
                let file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&args.log)
                    .map_err(|error| BenchError::io(format!("open {log}"), error))?;
                Ok(Store::File { file, ring: None, next: 1 })
            }
            "ring" => {
                let size = args.ring_mib.max(1) << 20;
                let file =
                    zero_filled(&args.log, size).map_err(|error| BenchError::io(format!("fill {log}"), error))?;
                Ok(Store::File { file, ring: Some(Ring { size, offset: 0 }), next: 1 })
            }
            url if url.starts_with("mysql://") => open_mysql(url, args),
            other => Err(BenchError::Invalid(format!("--store: `{other}` is not file, ring or a mysql:// URL"))),
        }
    }

    /// Commits groups of puts until every sender is gone.
    pub(crate) fn commit_loop(self, mut receiver: mpsc::UnboundedReceiver<Put>) {
        match self {
            Store::File { mut file, mut ring, mut next } => {
                while let Some(first) = receiver.blocking_recv() {
                    let group = gather(first, &mut receiver);
                    let written = write_group(&mut file, ring.as_mut(), &group);
                    answer(group, written, &mut next);
                }
            }
            Store::Mysql(database) => {
                let Database { runtime, mut connection, redis, mut next } = *database;
                runtime.block_on(async {
                    while let Some(first) = receiver.recv().await {
                        let group = gather(first, &mut receiver);
                        let stored = insert_group(&mut connection, redis.as_ref(), &group, next).await;
                        answer(group, stored, &mut next);
                    }
                });
            }
        }
    }
}

/// `first` and every put queued behind it, up to [`MAX_GROUP`].
fn gather(first: Put, receiver: &mut mpsc::UnboundedReceiver<Put>) -> Vec<Put> {
    let mut group = vec![first];
    while group.len() < MAX_GROUP {
        match receiver.try_recv() {
            Ok(put) => group.push(put),
            Err(_) => break,
        }
    }
    group
}

/// Answers each put of a group with its id, or with why the group failed.
fn answer(group: Vec<Put>, outcome: BenchResult<()>, next: &mut u64) {
    match outcome {
        Ok(()) => {
            for put in group {
                // A connection that closed meanwhile does not want its answer.
                let _ = put.reply.send(Ok(*next));
                *next += 1;
            }
        }
        Err(error) => {
            let error = error.to_string();
            for put in group {
                let _ = put.reply.send(Err(BenchError::Invalid(error.clone())));
            }
        }
    }
}

/// A file of `size` zero bytes, synced, so that writing inside it never changes
/// its size: a sync then has no metadata to journal.
fn zero_filled(path: &std::path::Path, size: u64) -> std::io::Result<File> {
    let mut file = OpenOptions::new().create(true).write(true).truncate(true).open(path)?;
    let chunk = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let part = chunk.get(..left.min(chunk.len() as u64) as usize).unwrap_or_default();
        file.write_all(part)?;
        left -= part.len() as u64;
    }
    file.sync_all()?;
    Ok(file)
}

/// Writes a group's records in one write and syncs the file's data.
fn write_group(file: &mut File, ring: Option<&mut Ring>, group: &[Put]) -> BenchResult<()> {
    let records: Vec<u8> = group.iter().flat_map(|put| put.record.iter().copied()).collect();
    let written = match ring {
        None => file.write_all(&records),
        Some(ring) => {
            let length = records.len() as u64;
            if length > ring.size {
                return Err(BenchError::Invalid(format!("a group of {length} bytes exceeds the ring")));
            }
            if ring.offset + length > ring.size {
                ring.offset = 0;
            }
            let written = file.write_all_at(&records, ring.offset);
            ring.offset += length;
            written
        }
    };
    written.and_then(|()| file.sync_data()).map_err(|error| BenchError::io("write and sync the log", error))
}

/// Connects to the database (creating the floor's table) and to Redis.
fn open_mysql(url: &str, args: &PutFloorArgs) -> BenchResult<Store> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| BenchError::io("start the commit runtime", error))?;
    // The URLs may carry passwords, so the errors name the flags, not the URLs.
    let database = |error: sqlx::Error| BenchError::Invalid(format!("--store: {error}"));
    let (connection, next, redis) = runtime.block_on(async {
        let mut connection = MySqlConnection::connect(url).await.map_err(database)?;
        sqlx::query("CREATE TABLE IF NOT EXISTS delayq_put_floor (id BIGINT PRIMARY KEY, record BLOB NOT NULL)")
            .execute(&mut connection)
            .await
            .map_err(database)?;
        let last: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM delayq_put_floor")
            .fetch_one(&mut connection)
            .await
            .map_err(database)?;
        let redis = match &args.redis_url {
            None => None,
            Some(redis_url) => {
                let failed = |error: redis::RedisError| BenchError::Invalid(format!("--redis-url: {error}"));
                let client = redis::Client::open(redis_url.as_str()).map_err(failed)?;
                Some(Scheduling {
                    connection: client.get_multiplexed_async_connection().await.map_err(failed)?,
                    script: redis::Script::new(SCHEDULE),
                    jobs_key: format!("{}:jobs", args.redis_prefix),
                    due_key: format!("{}:due", args.redis_prefix),
                })
            }
        };
        Ok::<_, BenchError>((connection, u64::try_from(last).unwrap_or(0) + 1, redis))
    })?;
    Ok(Store::Mysql(Box::new(Database { runtime, connection, redis, next })))
}

/// Inserts a group as one statement (committed by itself), then schedules it in Redis.
async fn insert_group(
    connection: &mut MySqlConnection,
    redis: Option<&Scheduling>,
    group: &[Put],
    first_id: u64,
) -> BenchResult<()> {
    let rows = vec!["(?, ?)"; group.len()].join(", ");
    let sql = format!("INSERT INTO delayq_put_floor (id, record) VALUES {rows}");
    let query = group.iter().zip(first_id..).fold(sqlx::query(&sql), |query, (put, id)| {
        query.bind(i64::try_from(id).unwrap_or(i64::MAX)).bind(put.record.as_slice())
    });
    query.execute(&mut *connection).await.map_err(|error| BenchError::Invalid(format!("insert: {error}")))?;
    if let Some(redis) = redis {
        let mut call = redis.script.key(&redis.jobs_key);
        call.key(&redis.due_key);
        for (put, id) in group.iter().zip(first_id..) {
            call.arg(id).arg(put.record.as_slice());
        }
        let mut connection = redis.connection.clone();
        let _: i64 = call
            .invoke_async(&mut connection)
            .await
            .map_err(|error| BenchError::Invalid(format!("schedule: {error}")))?;
    }
    Ok(())
}
