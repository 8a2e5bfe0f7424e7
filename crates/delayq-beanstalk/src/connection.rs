//! One connection: reads command lines and job bodies as beanstalkd frames
//! them, runs each command to its end, writes the reply, and on close gives
//! back the jobs it holds.
//!
//! Hostile input is bounded: a line longer than [`MAX_LINE_BYTES`] is thrown
//! away up to its end and refused; a body is read only up to the job size
//! limit, a larger one is skipped without being kept; a client that sends
//! nothing (or does not read its replies) for the idle timeout is closed.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tracing::debug;

use crate::command::{self, Command, Refusal, MAX_LINE_BYTES};
use crate::reply;
use crate::session::Session;
use crate::shared::Shared;

/// How much of the input is buffered: a few lines, or a small job, per read.
const READ_BUFFER: usize = 16 * 1024;

/// A command line as read.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// The line without its `\r\n`.
    Complete(Vec<u8>),
    /// The line was longer than [`MAX_LINE_BYTES`]; it was thrown away.
    TooLong,
    /// The client closed the connection.
    Closed,
}

/// Serves one connection until it quits, closes, idles out or the node stops.
pub(crate) async fn serve(stream: TcpStream, shared: Arc<Shared>) {
    // Replies are small and each ends a round trip.
    let _ = stream.set_nodelay(true);
    let (read_half, write_half) = stream.into_split();
    let mut reader = BufReader::with_capacity(READ_BUFFER, read_half);
    let mut writer = BufWriter::new(write_half);
    shared.connections.current.fetch_add(1, Ordering::Relaxed);
    shared.connections.total.fetch_add(1, Ordering::Relaxed);
    let mut session = Session::new(Arc::clone(&shared));
    if let Err(error) = run(&mut session, &mut reader, &mut writer).await {
        debug!(error = %error, "beanstalk connection ended");
    }
    session.close().await;
    shared.connections.current.fetch_sub(1, Ordering::Relaxed);
}

/// Serves commands until the client quits, closes or goes silent, or the node stops.
async fn run<R, W>(session: &mut Session, reader: &mut R, writer: &mut W) -> io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let shared = Arc::clone(&session.shared);
    let idle = shared.config.idle_timeout;
    loop {
        let next = tokio::select! {
            _ = shared.shutdown.cancelled() => return Ok(()),
            next = tokio::time::timeout(idle, read_line(reader)) => next,
        };
        let Ok(line) = next else { return Ok(()) };
        let Some(reply) = answer(session, reader, line?).await? else { return Ok(()) };
        let written = tokio::time::timeout(idle, async {
            writer.write_all(&reply).await?;
            writer.flush().await
        })
        .await;
        let Ok(written) = written else { return Ok(()) };
        written?;
    }
}

/// Runs the command of `line` (reading its body, for a `put`); returns its
/// reply, or `None` when the connection ends instead.
async fn answer<R: AsyncBufRead + Unpin>(
    session: &mut Session,
    reader: &mut R,
    line: Line,
) -> io::Result<Option<Vec<u8>>> {
    let line = match line {
        Line::Closed => return Ok(None),
        Line::TooLong => return Ok(Some(reply::BAD_FORMAT.to_vec())),
        Line::Complete(line) => line,
    };
    let command = match command::parse(&line) {
        Err(Refusal::BadFormat) => return Ok(Some(reply::BAD_FORMAT.to_vec())),
        Err(Refusal::UnknownCommand) => return Ok(Some(reply::UNKNOWN_COMMAND.to_vec())),
        Ok(Command::Quit) => return Ok(None),
        Ok(command) => command,
    };
    count(&session.shared, &command);
    Ok(match command {
        Command::Put { pri, delay, ttr, bytes, trailing } => {
            let shared = Arc::clone(&session.shared);
            match read_body(&shared, reader, bytes, trailing).await? {
                None => None,
                Some(Ok(body)) => Some(session.put(pri, delay, ttr, body).await),
                Some(Err(refusal)) => Some(refusal.to_vec()),
            }
        }
        Command::Reserve(timeout) => reserve_until_hang_up(session, reader, timeout).await,
        command => Some(session.execute(command).await),
    })
}

/// Counts a command for `stats`.
fn count(shared: &Shared, command: &Command) {
    let name = match command {
        Command::Put { .. } => "put",
        Command::Peek(_) => "peek",
        Command::PeekReady => "peek-ready",
        Command::PeekDelayed => "peek-delayed",
        Command::PeekBuried => "peek-buried",
        Command::Reserve(None) => "reserve",
        Command::Reserve(Some(_)) => "reserve-with-timeout",
        Command::ReserveJob(_) => "reserve-job",
        Command::Delete(_) => "delete",
        Command::Release { .. } => "release",
        Command::Use(_) => "use",
        Command::Watch(_) => "watch",
        Command::Ignore(_) => "ignore",
        Command::Bury { .. } => "bury",
        Command::Kick(_) | Command::KickJob(_) => "kick",
        Command::Touch(_) => "touch",
        Command::Stats => "stats",
        Command::StatsJob(_) => "stats-job",
        Command::StatsTube(_) => "stats-tube",
        Command::ListTubes => "list-tubes",
        Command::ListTubeUsed => "list-tube-used",
        Command::ListTubesWatched => "list-tubes-watched",
        Command::PauseTube { .. } => "pause-tube",
        Command::Quit => "quit",
    };
    shared.count_command(name);
}

/// Reads the body of a `put`: `Some(Ok(body))`, `Some(Err(reply))` when the
/// job is refused, `None` when the client closed or went silent meanwhile.
/// A job over the size limit is skipped (beanstalkd's `JOB_TOO_BIG`); a
/// malformed line leaves the body unread, as beanstalkd does.
async fn read_body<R: AsyncBufRead + Unpin>(
    shared: &Shared,
    reader: &mut R,
    bytes: u32,
    trailing: bool,
) -> io::Result<Option<Result<Vec<u8>, &'static [u8]>>> {
    let with_crlf = u64::from(bytes) + 2;
    let idle = shared.config.idle_timeout;
    if bytes as usize > shared.max_job_size() {
        let mut skipped_body = (&mut *reader).take(with_crlf);
        let mut discarded = tokio::io::sink();
        let skipped = tokio::time::timeout(idle, tokio::io::copy(&mut skipped_body, &mut discarded));
        return Ok(match skipped.await {
            Ok(Ok(copied)) if copied == with_crlf => Some(Err(reply::JOB_TOO_BIG)),
            Ok(Ok(_)) | Err(_) => None,
            Ok(Err(error)) => return Err(error),
        });
    }
    if trailing {
        return Ok(Some(Err(reply::BAD_FORMAT)));
    }
    let mut body = vec![0; bytes as usize + 2];
    match tokio::time::timeout(idle, reader.read_exact(&mut body)).await {
        Err(_idle) => return Ok(None),
        Ok(Err(error)) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Ok(Err(error)) => return Err(error),
        Ok(Ok(_)) => {}
    }
    if !body.ends_with(b"\r\n") {
        return Ok(Some(Err(reply::EXPECTED_CRLF)));
    }
    body.truncate(bytes as usize);
    Ok(Some(Ok(body)))
}

/// Runs a `reserve`, watching the connection meanwhile as beanstalkd does: a
/// client that hangs up ends the wait (`None`), so the job it would have
/// been given stays for another worker.
async fn reserve_until_hang_up<R: AsyncBufRead + Unpin>(
    session: &mut Session,
    reader: &mut R,
    timeout: Option<std::time::Duration>,
) -> Option<Vec<u8>> {
    let shutdown = session.shared.shutdown.clone();
    let reserve = session.reserve(timeout);
    tokio::pin!(reserve);
    let mut watching = true;
    loop {
        tokio::select! {
            reply = &mut reserve => return Some(reply),
            _ = shutdown.cancelled() => return None,
            filled = reader.fill_buf(), if watching => match filled {
                Ok([]) | Err(_) => return None,
                // The client sent its next command already: it is read after the reply.
                Ok(_) => watching = false,
            },
        }
    }
}

/// Reads one line ending in `\r\n` (a bare `\n` does not end it).
async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R) -> io::Result<Line> {
    let mut line: Vec<u8> = Vec::new();
    let mut too_long = false;
    loop {
        let buffer = reader.fill_buf().await?;
        if buffer.is_empty() {
            return Ok(Line::Closed);
        }
        let (taken, found_end) = match buffer.iter().position(|byte| *byte == b'\n') {
            Some(newline) => (newline + 1, true),
            None => (buffer.len(), false),
        };
        line.extend_from_slice(buffer.get(..taken).unwrap_or_default());
        reader.consume(taken);
        if found_end && line.ends_with(b"\r\n") {
            if too_long || line.len() > MAX_LINE_BYTES {
                return Ok(Line::TooLong);
            }
            line.truncate(line.len() - 2);
            return Ok(Line::Complete(line));
        }
        if line.len() >= MAX_LINE_BYTES {
            // Keep the last byte: it may be the `\r` of the end.
            too_long = true;
            let keep = line.split_off(line.len() - 1);
            line = keep;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8]) -> Vec<Line> {
        let small_chunks = lines_read_by(7, input).await;
        assert_eq!(small_chunks, lines_read_by(READ_BUFFER, input).await, "whatever the reads");
        small_chunks
    }

    async fn lines_read_by(capacity: usize, input: &[u8]) -> Vec<Line> {
        let mut reader = BufReader::with_capacity(capacity, input);
        let mut lines = Vec::new();
        loop {
            let line = read_line(&mut reader).await.unwrap();
            let closed = line == Line::Closed;
            lines.push(line);
            if closed {
                return lines;
            }
        }
    }

    #[tokio::test]
    async fn lines_end_at_crlf_only() {
        let read = lines(b"use a\r\nput 1\n2\r\nstats").await;
        assert_eq!(
            read,
            [Line::Complete(b"use a".to_vec()), Line::Complete(b"put 1\n2".to_vec()), Line::Closed],
            "a bare newline is part of the line, an unended line is not a command"
        );
    }

    #[tokio::test]
    async fn a_line_past_the_limit_is_thrown_away_to_its_end() {
        let longest = vec![b'x'; MAX_LINE_BYTES - 2];
        let mut input = longest.clone();
        input.extend_from_slice(b"\r\n");
        input.extend_from_slice(&[b'y'; MAX_LINE_BYTES - 1]);
        input.extend_from_slice(b"\r\nstats\r\n");
        let read = lines(&input).await;
        assert_eq!(read, [Line::Complete(longest), Line::TooLong, Line::Complete(b"stats".to_vec()), Line::Closed]);
    }
}
