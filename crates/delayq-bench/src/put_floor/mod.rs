//! The durable-put floor: a stand-in beanstalkd that does the least any server
//! must do before answering `INSERTED`, when that answer promises the job is
//! durable: read the `put`, store the job in a group commit, answer. There is no
//! queue behind it, no reserve, no delay; ids are a counter.
//!
//! The beanstalk peer drivers (`beanstalk/push.py --port`) run against it as
//! against beanstalkd or delayq's listener, so its rate and CPU per put, taken
//! side by side with theirs in the same minutes, bound what a durable server can
//! reach on the machine with that store (docs/benchmarks.md, "The durable-put
//! floor").
//!
//! Layout: this module holds the CLI flags and the protocol side (connections,
//! the handful of commands the drivers send); `store` holds the group commit of
//! each store.

mod store;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use clap::Args;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::error::{BenchError, BenchResult};
use crate::procstat::ProcessProbe;

pub(crate) use self::store::Store;

/// The longest command line read, as beanstalkd's.
const MAX_LINE_BYTES: u64 = 224;
/// The largest job body accepted.
const MAX_BODY_BYTES: usize = 1 << 20;

/// Flags of `delayq-bench put-floor`.
#[derive(Args, Clone, Debug)]
pub(crate) struct PutFloorArgs {
    /// Address to listen on for the beanstalkd protocol.
    #[arg(long, default_value = "127.0.0.1:11400")]
    pub(crate) listen: String,
    /// Where each put is made durable: `file` (a log appended to, so it grows
    /// with every group), `ring` (a log filled with zeros up front and written
    /// in place, so its size never changes), or a `mysql://` URL (one multi-row
    /// INSERT per group into the table `delayq_put_floor`).
    #[arg(long, default_value = "file")]
    pub(crate) store: String,
    /// The log file of `file` and `ring`.
    #[arg(long, default_value = "put-floor.log")]
    pub(crate) log: PathBuf,
    /// The size of the `ring` log, in MiB.
    #[arg(long, default_value_t = 256)]
    pub(crate) ring_mib: u64,
    /// With a `mysql://` store: after each group's commit, one Lua call on this
    /// Redis adds every job of the group to a hash and a sorted set, as the
    /// scheduling of a delayed job does, before the group is answered.
    #[arg(long)]
    pub(crate) redis_url: Option<String>,
    /// The prefix of the two Redis keys (`<prefix>:jobs`, `<prefix>:due`).
    #[arg(long, default_value = "delayq-put-floor")]
    pub(crate) redis_prefix: String,
}

/// One put waiting for its group's commit.
pub(crate) struct Put {
    /// The command line and the body, as received.
    pub(crate) record: Vec<u8>,
    /// The job's id once durable.
    pub(crate) reply: oneshot::Sender<BenchResult<u64>>,
}

/// Opens the store, then serves until the process is stopped.
///
/// # Errors
/// Returns a store or listener that cannot be opened.
pub(crate) fn run(args: &PutFloorArgs) -> BenchResult<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|error| BenchError::io("start the tokio runtime", error))?;
    let store = Store::open(args)?;
    let (sender, receiver) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("put-floor-commit".into())
        .spawn(move || store.commit_loop(receiver))
        .map_err(|error| BenchError::io("start the commit thread", error))?;
    runtime.block_on(async {
        let listener = TcpListener::bind(&args.listen)
            .await
            .map_err(|error| BenchError::io(format!("listen on {}", args.listen), error))?;
        println!("put-floor listening on {}", args.listen);
        serve(listener, sender).await
    })
}

/// Accepts connections until the listener fails.
pub(crate) async fn serve(listener: TcpListener, commits: mpsc::UnboundedSender<Put>) -> BenchResult<()> {
    let inserted = Arc::new(AtomicU64::new(0));
    loop {
        let (stream, _) = listener.accept().await.map_err(|error| BenchError::io("accept a connection", error))?;
        let (commits, inserted) = (commits.clone(), Arc::clone(&inserted));
        tokio::spawn(async move {
            if let Err(error) = connection(stream, commits, inserted).await {
                eprintln!("put-floor: connection ended: {error}");
            }
        });
    }
}

/// Serves one connection: `put`, and what the drivers send around it.
async fn connection(
    stream: TcpStream,
    commits: mpsc::UnboundedSender<Put>,
    inserted: Arc<AtomicU64>,
) -> std::io::Result<()> {
    let (read, write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut write = BufWriter::new(write);
    let mut line = Vec::new();
    loop {
        line.clear();
        if (&mut read).take(MAX_LINE_BYTES).read_until(b'\n', &mut line).await? == 0 {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&line).trim_end().to_owned();
        let words: Vec<&str> = text.split(' ').collect();
        let reply = match words.as_slice() {
            ["put", _, _, _, bytes] => match bytes.parse::<usize>() {
                Ok(bytes) if bytes <= MAX_BODY_BYTES => put(&mut read, &line, bytes, &commits, &inserted).await?,
                Ok(_) => "JOB_TOO_BIG\r\n".to_owned(),
                Err(_) => "BAD_FORMAT\r\n".to_owned(),
            },
            ["use", tube] => format!("USING {tube}\r\n"),
            ["watch", _] => "WATCHING 2\r\n".to_owned(),
            ["ignore", _] => "WATCHING 1\r\n".to_owned(),
            ["stats"] | ["stats-tube", _] => stats(inserted.load(Ordering::Relaxed)),
            ["quit"] => return Ok(()),
            _ => "UNKNOWN_COMMAND\r\n".to_owned(),
        };
        write.write_all(reply.as_bytes()).await?;
        write.flush().await?;
    }
}

/// Reads a put's body, waits for its group's commit and returns the answer.
async fn put(
    read: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    line: &[u8],
    bytes: usize,
    commits: &mpsc::UnboundedSender<Put>,
    inserted: &AtomicU64,
) -> std::io::Result<String> {
    let mut record = Vec::with_capacity(line.len() + bytes + 2);
    record.extend_from_slice(line);
    record.resize(line.len() + bytes + 2, 0);
    read.read_exact(record.get_mut(line.len()..).unwrap_or_default()).await?;
    if !record.ends_with(b"\r\n") {
        return Ok("EXPECTED_CRLF\r\n".to_owned());
    }
    let (reply, committed) = oneshot::channel();
    if commits.send(Put { record, reply }).is_err() {
        return Ok("INTERNAL_ERROR\r\n".to_owned());
    }
    Ok(match committed.await {
        Ok(Ok(id)) => {
            inserted.fetch_add(1, Ordering::Relaxed);
            format!("INSERTED {id}\r\n")
        }
        Ok(Err(error)) => {
            eprintln!("put-floor: commit failed: {error}");
            "INTERNAL_ERROR\r\n".to_owned()
        }
        Err(_) => "INTERNAL_ERROR\r\n".to_owned(),
    })
}

/// The answer to `stats` and `stats-tube`: this process's CPU (which the drivers
/// read as the server's) and the jobs inserted (which they count as delayed).
fn stats(inserted: u64) -> String {
    let (user, system) = ProcessProbe::of_self().cpu_split_seconds().unwrap_or((0.0, 0.0));
    let body = format!(
        "---\nrusage-utime: {user:.6}\nrusage-stime: {system:.6}\ncurrent-jobs-delayed: {inserted}\n\
         current-jobs-ready: 0\n"
    );
    format!("OK {}\r\n{body}\r\n", body.len())
}

#[cfg(test)]
mod tests;
