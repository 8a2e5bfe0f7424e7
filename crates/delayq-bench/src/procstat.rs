//! Resource readings of the server process (`/proc/<pid>/stat`, `status`, `io`) and of
//! Redis (`INFO`), taken before and after a timed phase.

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::error::{BenchError, BenchResult};

/// Clock ticks per second when `getconf CLK_TCK` cannot be asked.
const DEFAULT_CLOCK_TICKS: u64 = 100;
/// The default Redis port.
const REDIS_DEFAULT_PORT: u16 = 6379;

/// A process whose CPU time, RSS and written bytes can be read from `/proc`.
#[derive(Clone, Debug)]
pub(crate) struct ProcessProbe {
    proc_dir: String,
    clock_ticks: u64,
}

impl ProcessProbe {
    /// Returns a probe of process `pid`.
    pub(crate) fn of_pid(pid: u32) -> ProcessProbe {
        ProcessProbe { proc_dir: format!("/proc/{pid}"), clock_ticks: clock_ticks_per_second() }
    }

    /// Returns a probe of this very process (the load generator).
    pub(crate) fn of_self() -> ProcessProbe {
        ProcessProbe { proc_dir: "/proc/self".to_owned(), clock_ticks: clock_ticks_per_second() }
    }

    fn read(&self, file: &str) -> BenchResult<String> {
        let path = format!("{}/{file}", self.proc_dir);
        std::fs::read_to_string(&path).map_err(|error| BenchError::io(format!("read {path}"), error))
    }

    /// Returns user + system CPU seconds so far (fields 14 and 15 of `stat`).
    ///
    /// # Errors
    /// Returns [`BenchError::Io`] or [`BenchError::Protocol`] when `stat` is unreadable.
    pub(crate) fn cpu_seconds(&self) -> BenchResult<f64> {
        self.cpu_split_seconds().map(|(user, system)| user + system)
    }

    /// Returns user and system CPU seconds so far, apart (fields 14 and 15 of `stat`).
    ///
    /// # Errors
    /// Returns [`BenchError::Io`] or [`BenchError::Protocol`] when `stat` is unreadable.
    pub(crate) fn cpu_split_seconds(&self) -> BenchResult<(f64, f64)> {
        let stat = self.read("stat")?;
        let (user, system) = parse_stat_cpu_split(&stat)
            .ok_or_else(|| BenchError::Protocol { from: format!("{}/stat", self.proc_dir), detail: stat.clone() })?;
        Ok((user as f64 / self.clock_ticks as f64, system as f64 / self.clock_ticks as f64))
    }

    /// Returns the resident set size in bytes (`VmRSS` of `status`).
    ///
    /// # Errors
    /// Returns [`BenchError::Io`] or [`BenchError::Protocol`] when `status` is unreadable.
    pub(crate) fn rss_bytes(&self) -> BenchResult<u64> {
        let status = self.read("status")?;
        parse_kib_field(&status, "VmRSS:").map(|kib| kib * 1024).ok_or_else(|| BenchError::Protocol {
            from: format!("{}/status", self.proc_dir),
            detail: "no VmRSS".into(),
        })
    }

    /// Returns the bytes written so far (`wchar` of `io`), `None` when not readable.
    pub(crate) fn written_bytes(&self) -> Option<u64> {
        let io = self.read("io").ok()?;
        parse_plain_field(&io, "wchar:")
    }
}

/// Returns `CLK_TCK` from `getconf`, or 100.
fn clock_ticks_per_second() -> u64 {
    let Ok(output) = std::process::Command::new("getconf").arg("CLK_TCK").output() else {
        return DEFAULT_CLOCK_TICKS;
    };
    String::from_utf8_lossy(&output.stdout).trim().parse().unwrap_or(DEFAULT_CLOCK_TICKS)
}

/// Returns utime and stime in ticks from the text of `/proc/<pid>/stat`.
fn parse_stat_cpu_split(stat: &str) -> Option<(u64, u64)> {
    // The command name (field 2) may hold spaces and parentheses; fields after the last
    // ')' start at field 3, so utime (14) and stime (15) are the 12th and 13th of them.
    let (_, after_name) = stat.rsplit_once(')')?;
    let mut fields = after_name.split_whitespace().skip(11);
    let user_ticks: u64 = fields.next()?.parse().ok()?;
    let system_ticks: u64 = fields.next()?.parse().ok()?;
    Some((user_ticks, system_ticks))
}

fn parse_kib_field(text: &str, key: &str) -> Option<u64> {
    let value = text.lines().find_map(|line| line.strip_prefix(key))?;
    value.split_whitespace().next()?.parse().ok()
}

fn parse_plain_field(text: &str, key: &str) -> Option<u64> {
    let value = text.lines().find_map(|line| line.strip_prefix(key))?;
    value.trim().parse().ok()
}

/// A Redis server read with `INFO` over a plain RESP connection.
#[derive(Clone, Debug)]
pub(crate) struct RedisProbe {
    address: String,
    credentials: Option<(Option<String>, String)>,
}

impl RedisProbe {
    /// Parses `redis://[user:password@]host[:port][/db]`.
    ///
    /// # Errors
    /// Returns [`BenchError::Invalid`] for another scheme (TLS is not supported here).
    pub(crate) fn from_url(url: &str) -> BenchResult<RedisProbe> {
        let Some(rest) = url.strip_prefix("redis://") else {
            return Err(BenchError::Invalid(format!("redis-url must start with redis://, got {url}")));
        };
        let authority = rest.split('/').next().unwrap_or_default();
        let (credentials, host_port) = match authority.rsplit_once('@') {
            Some((user_info, host_port)) => (Some(parse_user_info(user_info)), host_port),
            None => (None, authority),
        };
        let address =
            if host_port.contains(':') { host_port.to_owned() } else { format!("{host_port}:{REDIS_DEFAULT_PORT}") };
        Ok(RedisProbe { address, credentials })
    }

    /// Returns the text of `INFO <section>`.
    ///
    /// # Errors
    /// Returns [`BenchError::Io`] or [`BenchError::Protocol`] when Redis cannot be asked.
    pub(crate) async fn info(&self, section: &str) -> BenchResult<String> {
        self.call(&["INFO", section]).await
    }

    /// Empties every database of this Redis (`FLUSHALL`), as a Redis that lost its data.
    ///
    /// # Errors
    /// Returns [`BenchError::Io`] or [`BenchError::Protocol`] when Redis cannot be asked.
    pub(crate) async fn flush_all(&self) -> BenchResult<()> {
        self.call(&["FLUSHALL"]).await.map(drop)
    }

    /// Sends one command on a new connection (after `AUTH` when the URL has credentials).
    async fn call(&self, arguments: &[&str]) -> BenchResult<String> {
        let stream = TcpStream::connect(&self.address)
            .await
            .map_err(|error| BenchError::io(format!("connect to redis at {}", self.address), error))?;
        let mut connection = BufReader::new(stream);
        if let Some((user, password)) = &self.credentials {
            let mut auth = vec!["AUTH"];
            auth.extend(user.as_deref());
            auth.push(password);
            self.command(&mut connection, &auth).await?;
        }
        self.command(&mut connection, arguments).await
    }

    async fn command(&self, connection: &mut BufReader<TcpStream>, arguments: &[&str]) -> BenchResult<String> {
        let io_error = |error| BenchError::io(format!("talk to redis at {}", self.address), error);
        connection.get_mut().write_all(&encode_command(arguments)).await.map_err(io_error)?;
        let mut header = String::new();
        connection.read_line(&mut header).await.map_err(io_error)?;
        let header = header.trim_end();
        let protocol =
            |detail: &str| BenchError::Protocol { from: format!("redis at {}", self.address), detail: detail.into() };
        if let Some(status) = header.strip_prefix('+') {
            return Ok(status.to_owned());
        }
        let Some(length) = header.strip_prefix('$') else {
            return Err(protocol(header));
        };
        let length: usize = length.parse().map_err(|_| protocol(header))?;
        let mut payload = vec![0; length + 2];
        connection.read_exact(&mut payload).await.map_err(io_error)?;
        payload.truncate(length);
        Ok(String::from_utf8_lossy(&payload).into_owned())
    }
}

fn parse_user_info(user_info: &str) -> (Option<String>, String) {
    match user_info.split_once(':') {
        Some((user, password)) if !user.is_empty() => (Some(user.to_owned()), password.to_owned()),
        Some((_, password)) => (None, password.to_owned()),
        None => (None, user_info.to_owned()),
    }
}

fn encode_command(arguments: &[&str]) -> Vec<u8> {
    let mut encoded = format!("*{}\r\n", arguments.len()).into_bytes();
    for argument in arguments {
        encoded.extend_from_slice(format!("${}\r\n{argument}\r\n", argument.len()).as_bytes());
    }
    encoded
}

/// Returns the number after `key:` in an `INFO` answer.
pub(crate) fn info_number(info: &str, key: &str) -> Option<f64> {
    info.lines().find_map(|line| line.strip_prefix(key)?.strip_prefix(':')?.trim().parse().ok())
}

/// The optional probes a run reads its resource numbers from.
#[derive(Clone, Debug, Default)]
pub(crate) struct Probes {
    /// The server process, from `--server-pid`.
    pub(crate) server: Option<ProcessProbe>,
    /// Redis, from `--redis-url`.
    pub(crate) redis: Option<RedisProbe>,
}

/// CPU seconds used so far by the server, Redis and this process.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CpuSnapshot {
    server: Option<f64>,
    redis: Option<f64>,
    client: Option<f64>,
}

impl Probes {
    /// Reads the CPU seconds of every configured process; a failed reading is left out.
    pub(crate) async fn cpu_snapshot(&self) -> CpuSnapshot {
        let server = self.server.as_ref().and_then(|probe| probe.cpu_seconds().ok());
        let redis = match &self.redis {
            Some(probe) => probe
                .info("cpu")
                .await
                .ok()
                .and_then(|info| Some(info_number(&info, "used_cpu_user")? + info_number(&info, "used_cpu_sys")?)),
            None => None,
        };
        let client = ProcessProbe::of_self().cpu_seconds().ok();
        CpuSnapshot { server, redis, client }
    }

    /// Returns Redis `used_memory` in bytes when Redis is configured and answers.
    pub(crate) async fn redis_used_memory(&self) -> Option<f64> {
        let info = self.redis.as_ref()?.info("memory").await.ok()?;
        info_number(&info, "used_memory")
    }

    /// Reads every memory metric that is available.
    pub(crate) async fn memory(&self) -> MemoryReading {
        let server = self.server.as_ref();
        MemoryReading {
            server_rss_bytes: server.and_then(|probe| probe.rss_bytes().ok()).map(|bytes| bytes as f64),
            redis_used_memory_bytes: self.redis_used_memory().await,
            server_written_bytes: server.and_then(ProcessProbe::written_bytes).map(|bytes| bytes as f64),
        }
    }
}

/// One reading of every memory metric that is available; a probe that is not
/// configured or did not answer is `None`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MemoryReading {
    pub(crate) server_rss_bytes: Option<f64>,
    pub(crate) redis_used_memory_bytes: Option<f64>,
    pub(crate) server_written_bytes: Option<f64>,
}

impl CpuSnapshot {
    /// Returns `(server, redis, client)` CPU µs per job between `self` and `later`.
    pub(crate) fn micros_per_job(&self, later: &CpuSnapshot, jobs: usize) -> [(&'static str, Option<f64>); 3] {
        let per_job = |before: Option<f64>, after: Option<f64>| Some((after? - before?) * 1e6 / jobs.max(1) as f64);
        [
            ("server_cpu_us_per_job", per_job(self.server, later.server)),
            ("redis_cpu_us_per_job", per_job(self.redis, later.redis)),
            ("client_cpu_us_per_job", per_job(self.client, later.client)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_cpu_ticks_skip_odd_command_names() {
        let stat = "4242 (del ay) q)) S 1 4242 4242 0 -1 4194560 500 0 0 0 1234 567 0 0 20 0 9 0 100 0 0";
        assert_eq!(parse_stat_cpu_split(stat), Some((1234, 567)));
        assert_eq!(parse_stat_cpu_split("garbage"), None);
    }

    #[test]
    fn status_and_io_fields_parse() {
        let status = "Name:\tdelayq\nVmPeak:\t  9000 kB\nVmRSS:\t   51200 kB\n";
        assert_eq!(parse_kib_field(status, "VmRSS:"), Some(51_200));
        let io = "rchar: 10\nwchar: 123456\nsyscr: 1\n";
        assert_eq!(parse_plain_field(io, "wchar:"), Some(123_456));
    }

    #[test]
    fn redis_urls_parse() {
        let Ok(plain) = RedisProbe::from_url("redis://127.0.0.1/0") else { panic!("valid") };
        assert_eq!(plain.address, "127.0.0.1:6379");
        assert!(plain.credentials.is_none());
        let Ok(secret) = RedisProbe::from_url("redis://:pw@localhost:7000") else { panic!("valid") };
        assert_eq!(secret.address, "localhost:7000");
        assert_eq!(secret.credentials, Some((None, "pw".to_owned())));
        assert!(RedisProbe::from_url("rediss://x").is_err());
    }

    #[test]
    fn info_numbers_and_commands() {
        let info = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n";
        assert_eq!(info_number(info, "used_memory"), Some(1_048_576.0));
        assert_eq!(encode_command(&["INFO", "cpu"]), b"*2\r\n$4\r\nINFO\r\n$3\r\ncpu\r\n".to_vec());
    }
}
