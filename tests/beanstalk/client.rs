//! A plain beanstalkd protocol client over TCP for the end-to-end tests: it
//! sends raw bytes and reads replies line by line, so a test sees exactly
//! what the server sent.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// How long a test waits for one reply.
const PATIENCE: Duration = Duration::from_secs(30);

pub struct Beanstalk {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl Beanstalk {
    pub async fn connect(addr: &str) -> Beanstalk {
        let stream = TcpStream::connect(addr).await.unwrap_or_else(|error| panic!("connect to {addr}: {error}"));
        let (read_half, writer) = stream.into_split();
        Beanstalk { reader: BufReader::new(read_half), writer }
    }

    /// Sends bytes as they are.
    pub async fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.expect("send");
    }

    /// Reads one reply line, without its `\r\n`.
    pub async fn line(&mut self) -> String {
        let mut line = Vec::new();
        let read = tokio::time::timeout(PATIENCE, self.reader.read_until(b'\n', &mut line))
            .await
            .expect("a reply within the patience")
            .expect("read");
        assert!(read > 0, "the server closed the connection");
        assert!(line.ends_with(b"\r\n"), "a reply line ends with CRLF: {:?}", String::from_utf8_lossy(&line));
        line.truncate(line.len() - 2);
        String::from_utf8(line).expect("a text reply")
    }

    /// Reads the `<bytes>` of data (and its `\r\n`) announced by a reply line.
    pub async fn data(&mut self, bytes: usize) -> Vec<u8> {
        let mut data = vec![0; bytes + 2];
        tokio::time::timeout(PATIENCE, self.reader.read_exact(&mut data)).await.expect("data in time").expect("read");
        assert!(data.ends_with(b"\r\n"), "data ends with CRLF");
        data.truncate(bytes);
        data
    }

    /// Sends a command line and returns the reply line.
    pub async fn command(&mut self, line: &str) -> String {
        self.send(format!("{line}\r\n").as_bytes()).await;
        self.line().await
    }

    /// Sends a command whose reply carries data (`RESERVED`, `FOUND`, `OK`):
    /// returns the reply line and the data, if any.
    pub async fn command_with_data(&mut self, line: &str) -> (String, Option<Vec<u8>>) {
        self.send(format!("{line}\r\n").as_bytes()).await;
        self.reply_with_data().await
    }

    /// Reads a reply that may carry data: its last word is the length.
    pub async fn reply_with_data(&mut self) -> (String, Option<Vec<u8>>) {
        let reply = self.line().await;
        let carries_data = ["RESERVED ", "FOUND ", "OK "].iter().any(|word| reply.starts_with(word));
        if !carries_data {
            return (reply, None);
        }
        let bytes: usize = reply.rsplit(' ').next().and_then(|last| last.parse().ok()).expect("a length");
        let data = self.data(bytes).await;
        (reply, Some(data))
    }

    /// Puts `body` and returns its id.
    pub async fn put(&mut self, pri: u32, delay: &str, ttr: u32, body: &str) -> u64 {
        self.send(format!("put {pri} {delay} {ttr} {}\r\n{body}\r\n", body.len()).as_bytes()).await;
        let reply = self.line().await;
        reply
            .strip_prefix("INSERTED ")
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("put answered {reply:?}"))
    }

    /// Reserves with a timeout; returns the id and body, or the reply line.
    pub async fn reserve(&mut self, timeout_s: u32) -> Result<(u64, String), String> {
        let (reply, data) = self.command_with_data(&format!("reserve-with-timeout {timeout_s}")).await;
        match (reply.strip_prefix("RESERVED "), data) {
            (Some(rest), Some(body)) => {
                let id = rest.split(' ').next().and_then(|id| id.parse().ok()).expect("an id");
                Ok((id, String::from_utf8(body).expect("a text body")))
            }
            _ => Err(reply),
        }
    }

    /// Returns the YAML dictionary a stats command answers, as (key, value) pairs.
    pub async fn stats(&mut self, line: &str) -> Vec<(String, String)> {
        let (reply, data) = self.command_with_data(line).await;
        let data = data.unwrap_or_else(|| panic!("{line} answered {reply:?}"));
        let text = String::from_utf8(data).expect("yaml text");
        assert!(text.starts_with("---\n"), "{text}");
        text.lines()
            .skip(1)
            .filter_map(|line| line.split_once(": ").map(|(key, value)| (key.to_owned(), value.to_owned())))
            .collect()
    }

    /// Returns whether the server closed the connection (reads until it does, or a second passes).
    pub async fn closed(&mut self) -> bool {
        let mut rest = Vec::new();
        matches!(
            tokio::time::timeout(Duration::from_secs(1), self.reader.read_to_end(&mut rest)).await,
            Ok(Ok(_)) | Ok(Err(_))
        )
    }
}

/// Returns the value of `key` in a stats answer.
pub fn value<'a>(stats: &'a [(String, String)], key: &str) -> &'a str {
    stats.iter().find(|(name, _)| name == key).map(|(_, value)| value.as_str()).unwrap_or_else(|| panic!("no {key}"))
}
