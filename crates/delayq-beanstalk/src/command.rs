//! One command line, parsed as beanstalkd 1.12 parses it: a command is
//! recognised by its prefix in beanstalkd's order, numbers are unsigned
//! decimals after any number of spaces, and what beanstalkd refuses with
//! `BAD_FORMAT` or `UNKNOWN_COMMAND` is refused here the same way.
//!
//! One extension: a delay may carry up to three decimals (`put 0 1.250 60 5`),
//! so that jobs can be due to the millisecond; beanstalkd refuses that line.

use std::time::Duration;

/// The longest command line, `\r\n` included, as beanstalkd's line buffer.
pub const MAX_LINE_BYTES: usize = 224;
/// The longest tube name.
pub const MAX_TUBE_NAME_BYTES: usize = 200;

/// A parsed command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// `put <pri> <delay> <ttr> <bytes>`; `trailing` when the line goes on
    /// after `<bytes>` (refused, but only once a too big job was ruled out).
    Put {
        pri: u32,
        delay: Duration,
        ttr: Duration,
        bytes: u32,
        trailing: bool,
    },
    Use(String),
    /// `reserve` (no timeout) or `reserve-with-timeout <seconds>`.
    Reserve(Option<Duration>),
    ReserveJob(u64),
    Delete(u64),
    Release {
        id: u64,
        pri: u32,
        delay: Duration,
    },
    Bury {
        id: u64,
        pri: u32,
    },
    Touch(u64),
    Watch(String),
    Ignore(String),
    Peek(u64),
    PeekReady,
    PeekDelayed,
    PeekBuried,
    Kick(u32),
    KickJob(u64),
    StatsJob(u64),
    StatsTube(String),
    Stats,
    ListTubes,
    ListTubeUsed,
    ListTubesWatched,
    PauseTube {
        tube: String,
        delay: Duration,
    },
    Quit,
}

/// Why a line is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    BadFormat,
    UnknownCommand,
}

type Parsed = Result<Command, Refusal>;
/// Parses what follows a command's name.
type ParseRest = fn(&[u8]) -> Parsed;

/// The characters of a tube name.
pub(crate) fn is_name_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"-+/;.$_()".contains(&byte)
}

/// Checks a whole tube name as beanstalkd does: 1 to 200 name characters, not starting with `-`.
pub(crate) fn is_valid_tube(name: &[u8]) -> bool {
    (1..=MAX_TUBE_NAME_BYTES).contains(&name.len())
        && name.iter().all(|byte| is_name_byte(*byte))
        && name.first() != Some(&b'-')
}

/// Parses a command line, without its `\r\n`.
pub(crate) fn parse(line: &[u8]) -> Parsed {
    // A NUL inside the line: beanstalkd reads the line as a C string.
    if line.contains(&0) {
        return Err(Refusal::BadFormat);
    }
    // Order matters: beanstalkd tests these prefixes in this order.
    let prefixed: [(&[u8], ParseRest); 25] = [
        (b"put ", put),
        (b"peek ", |rest| whole_u64(rest).map(Command::Peek)),
        (b"peek-ready", |rest| bare(rest, Command::PeekReady)),
        (b"peek-delayed", |rest| bare(rest, Command::PeekDelayed)),
        (b"peek-buried", |rest| bare(rest, Command::PeekBuried)),
        (b"reserve-with-timeout ", reserve_with_timeout),
        (b"reserve-job ", |rest| whole_u64(rest).map(Command::ReserveJob)),
        (b"reserve", |rest| bare(rest, Command::Reserve(None))),
        (b"delete ", |rest| whole_u64(rest).map(Command::Delete)),
        (b"release ", release),
        (b"bury ", bury),
        (b"kick ", kick),
        (b"kick-job ", |rest| whole_u64(rest).map(Command::KickJob)),
        (b"touch ", |rest| whole_u64(rest).map(Command::Touch)),
        (b"stats-job ", |rest| whole_u64(rest).map(Command::StatsJob)),
        (b"stats-tube ", |rest| tube(rest).map(Command::StatsTube)),
        (b"stats", |rest| bare(rest, Command::Stats)),
        (b"use ", |rest| tube(rest).map(Command::Use)),
        (b"watch ", |rest| tube(rest).map(Command::Watch)),
        (b"ignore ", |rest| tube(rest).map(Command::Ignore)),
        (b"list-tubes-watched", |rest| bare(rest, Command::ListTubesWatched)),
        (b"list-tube-used", |rest| bare(rest, Command::ListTubeUsed)),
        (b"list-tubes", |rest| bare(rest, Command::ListTubes)),
        (b"quit", |_| Ok(Command::Quit)),
        (b"pause-tube", pause_tube),
    ];
    for (prefix, parse_rest) in prefixed {
        if let Some(rest) = line.strip_prefix(prefix) {
            return parse_rest(rest);
        }
    }
    Err(Refusal::UnknownCommand)
}

/// A command that takes nothing after its name.
fn bare(rest: &[u8], command: Command) -> Parsed {
    if rest.is_empty() {
        Ok(command)
    } else {
        Err(Refusal::BadFormat)
    }
}

fn tube(rest: &[u8]) -> Result<String, Refusal> {
    if !is_valid_tube(rest) {
        return Err(Refusal::BadFormat);
    }
    String::from_utf8(rest.to_vec()).map_err(|_| Refusal::BadFormat)
}

fn put(rest: &[u8]) -> Parsed {
    let (pri, rest) = read_u32(rest)?;
    let (delay, rest) = read_duration(rest)?;
    let (ttr, rest) = read_duration(rest)?;
    let (bytes, rest) = read_u32(rest)?;
    Ok(Command::Put { pri, delay, ttr, bytes, trailing: !rest.is_empty() })
}

/// `reserve-with-timeout <seconds>`, read as beanstalkd 1.12 reads it, with
/// C's `strtol`: no digits is 0 seconds, what follows the number is ignored,
/// and a negative timeout waits like `reserve`.
fn reserve_with_timeout(rest: &[u8]) -> Parsed {
    let Some((negative, digits)) = c_number(rest) else {
        return Ok(Command::Reserve(Some(Duration::ZERO)));
    };
    let magnitude = decimal(digits).ok_or(Refusal::BadFormat)?;
    let limit = if negative { i64::MAX as u64 + 1 } else { i64::MAX as u64 };
    if magnitude > limit {
        return Err(Refusal::BadFormat);
    }
    // beanstalkd keeps the low 32 bits of the long, as a C int.
    let value = (if negative { magnitude.wrapping_neg() } else { magnitude }) as i32;
    Ok(Command::Reserve(u64::try_from(value).ok().map(Duration::from_secs)))
}

fn release(rest: &[u8]) -> Parsed {
    let (id, rest) = read_u64(rest)?;
    let (pri, rest) = read_u32(rest)?;
    let delay = whole(read_duration(rest))?;
    Ok(Command::Release { id, pri, delay })
}

fn bury(rest: &[u8]) -> Parsed {
    let (id, rest) = read_u64(rest)?;
    let pri = whole(read_u32(rest))?;
    Ok(Command::Bury { id, pri })
}

/// `kick <bound>`, read as C's `strtoul` does: leading white space, a sign,
/// digits; what follows them is ignored, and the count is taken modulo 2^32.
fn kick(rest: &[u8]) -> Parsed {
    let (negative, digits) = c_number(rest).ok_or(Refusal::BadFormat)?;
    let value = decimal(digits).ok_or(Refusal::BadFormat)?;
    let value = if negative { value.wrapping_neg() } else { value };
    Ok(Command::Kick(value as u32))
}

/// The sign and the digits of a number as C's `strtol` family finds them:
/// after white space, an optional sign, then at least one digit.
fn c_number(bytes: &[u8]) -> Option<(bool, &[u8])> {
    let start = bytes.iter().position(|byte| !matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))?;
    let rest = bytes.get(start..)?;
    let (negative, digits) = match rest.split_first() {
        Some((b'-', digits)) => (true, digits),
        Some((b'+', digits)) => (false, digits),
        _ => (false, rest),
    };
    let length = digits.iter().take_while(|byte| byte.is_ascii_digit()).count();
    digits.get(..length).filter(|number| !number.is_empty()).map(|number| (negative, number))
}

fn pause_tube(rest: &[u8]) -> Parsed {
    let rest = skip_spaces(rest);
    let length = rest.iter().take_while(|byte| is_name_byte(**byte)).count();
    let (name, rest) = rest.split_at(length);
    if name.is_empty() {
        return Err(Refusal::BadFormat);
    }
    let delay = whole(read_duration(rest))?;
    Ok(Command::PauseTube { tube: tube(name)?, delay })
}

fn skip_spaces(bytes: &[u8]) -> &[u8] {
    let spaces = bytes.iter().take_while(|byte| **byte == b' ').count();
    bytes.get(spaces..).unwrap_or_default()
}

/// The value of a run of ASCII digits, `None` past `u64`.
fn decimal(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |value, digit| value.checked_mul(10)?.checked_add(u64::from(digit - b'0')))
}

/// Reads an unsigned decimal after any spaces; returns it and what follows.
fn read_u64(bytes: &[u8]) -> Result<(u64, &[u8]), Refusal> {
    let bytes = skip_spaces(bytes);
    let length = bytes.iter().take_while(|byte| byte.is_ascii_digit()).count();
    let (digits, rest) = bytes.split_at(length);
    if digits.is_empty() {
        return Err(Refusal::BadFormat);
    }
    Ok((decimal(digits).ok_or(Refusal::BadFormat)?, rest))
}

fn read_u32(bytes: &[u8]) -> Result<(u32, &[u8]), Refusal> {
    let (value, rest) = read_u64(bytes)?;
    Ok((u32::try_from(value).map_err(|_| Refusal::BadFormat)?, rest))
}

/// Reads whole seconds, or seconds with up to three decimals (the extension).
fn read_duration(bytes: &[u8]) -> Result<(Duration, &[u8]), Refusal> {
    let (seconds, rest) = read_u32(bytes)?;
    let seconds = Duration::from_secs(u64::from(seconds));
    let Some(after_point) = rest.strip_prefix(b".") else { return Ok((seconds, rest)) };
    let length = after_point.iter().take_while(|byte| byte.is_ascii_digit()).count();
    if !(1..=3).contains(&length) {
        return Err(Refusal::BadFormat);
    }
    let (fraction, rest) = after_point.split_at(length);
    let scale = [100, 10, 1].get(length - 1).copied().unwrap_or(1);
    let millis = decimal(fraction).ok_or(Refusal::BadFormat)? * scale;
    Ok((seconds + Duration::from_millis(millis), rest))
}

/// Requires a read to have taken the rest of the line.
fn whole<T>(read: Result<(T, &[u8]), Refusal>) -> Result<T, Refusal> {
    match read? {
        (value, []) => Ok(value),
        _ => Err(Refusal::BadFormat),
    }
}

fn whole_u64(bytes: &[u8]) -> Result<u64, Refusal> {
    whole(read_u64(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
    }

    #[test]
    fn put_reads_four_numbers_after_any_spaces() {
        let parsed = parse(b"put 1024  5 60 12").unwrap();
        assert_eq!(parsed, Command::Put { pri: 1024, delay: secs(5), ttr: secs(60), bytes: 12, trailing: false });
        let trailing = parse(b"put 0 0 1 3 x").unwrap();
        assert!(matches!(trailing, Command::Put { trailing: true, .. }));
    }

    #[test]
    fn put_refuses_bad_numbers() {
        for line in [&b"put"[..], b"put ", b"put 1 2 3", b"put -1 0 1 1", b"put 4294967296 0 1 1", b"put a 0 1 1"] {
            let expected = if line == b"put" { Refusal::UnknownCommand } else { Refusal::BadFormat };
            assert_eq!(parse(line), Err(expected), "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn delays_may_carry_milliseconds() {
        let parsed = parse(b"put 0 1.25 1 1").unwrap();
        assert!(matches!(parsed, Command::Put { delay, .. } if delay == Duration::from_millis(1_250)));
        assert_eq!(parse(b"put 0 1.2505 1 1"), Err(Refusal::BadFormat));
        assert_eq!(parse(b"put 0 1. 1 1"), Err(Refusal::BadFormat));
        assert_eq!(
            parse(b"release 7 0 0.005"),
            Ok(Command::Release { id: 7, pri: 0, delay: Duration::from_millis(5) })
        );
    }

    #[test]
    fn prefixes_decide_the_command_as_in_beanstalkd() {
        assert_eq!(parse(b"reserve"), Ok(Command::Reserve(None)));
        assert_eq!(parse(b"reserve "), Err(Refusal::BadFormat));
        assert_eq!(parse(b"reserve-job"), Err(Refusal::BadFormat), "reserve is the prefix that matches");
        assert_eq!(parse(b"reserve-with-timeout 3 junk"), Ok(Command::Reserve(Some(secs(3)))));
        assert_eq!(parse(b"reserve-with-timeout x"), Ok(Command::Reserve(Some(secs(0)))), "strtol reads 0");
        assert_eq!(parse(b"reserve-with-timeout -1"), Ok(Command::Reserve(None)), "a negative timeout waits");
        assert_eq!(parse(b"reserve-with-timeout 4294967297"), Ok(Command::Reserve(Some(secs(1)))), "as a C int");
        assert_eq!(parse(b"reserve-with-timeout 9223372036854775808"), Err(Refusal::BadFormat));
        assert_eq!(parse(b"peek"), Err(Refusal::UnknownCommand));
        assert_eq!(parse(b"peek-readyx"), Err(Refusal::BadFormat));
        assert_eq!(parse(b"statsx"), Err(Refusal::BadFormat));
        assert_eq!(parse(b"quitting"), Ok(Command::Quit));
        assert_eq!(parse(b"list-tubes-watched"), Ok(Command::ListTubesWatched));
        assert_eq!(parse(b"list-tubes"), Ok(Command::ListTubes));
        assert_eq!(parse(b"frobnicate"), Err(Refusal::UnknownCommand));
        assert_eq!(parse(b""), Err(Refusal::UnknownCommand));
        assert_eq!(parse(b"stats\0"), Err(Refusal::BadFormat));
    }

    #[test]
    fn ids_are_whole_unsigned_numbers() {
        assert_eq!(parse(b"delete 18446744073709551615"), Ok(Command::Delete(u64::MAX)));
        assert_eq!(parse(b"delete 18446744073709551616"), Err(Refusal::BadFormat));
        assert_eq!(parse(b"delete 5 "), Err(Refusal::BadFormat));
        assert_eq!(parse(b"touch x"), Err(Refusal::BadFormat));
        assert_eq!(parse(b"bury 3 10"), Ok(Command::Bury { id: 3, pri: 10 }));
        assert_eq!(parse(b"stats-job  9"), Ok(Command::StatsJob(9)));
    }

    #[test]
    fn tube_names_follow_beanstalkd() {
        assert_eq!(parse(b"use a-b+c/d;e.f$g_h(i)"), Ok(Command::Use("a-b+c/d;e.f$g_h(i)".into())));
        assert_eq!(parse(b"use -x"), Err(Refusal::BadFormat));
        assert_eq!(parse(b"use  x"), Err(Refusal::BadFormat), "no space is skipped before a name");
        assert_eq!(parse(b"watch a*b"), Err(Refusal::BadFormat));
        let longest = format!("watch {}", "t".repeat(MAX_TUBE_NAME_BYTES));
        assert!(parse(longest.as_bytes()).is_ok());
        let too_long = format!("watch {}", "t".repeat(MAX_TUBE_NAME_BYTES + 1));
        assert_eq!(parse(too_long.as_bytes()), Err(Refusal::BadFormat));
        assert_eq!(parse(b"pause-tube  q 10"), Ok(Command::PauseTube { tube: "q".into(), delay: secs(10) }));
        assert_eq!(parse(b"pause-tube q"), Err(Refusal::BadFormat));
        assert_eq!(parse(b"pause-tube -q 1"), Err(Refusal::BadFormat));
    }

    #[test]
    fn kick_reads_like_strtoul() {
        assert_eq!(parse(b"kick 5"), Ok(Command::Kick(5)));
        assert_eq!(parse(b"kick 5junk"), Ok(Command::Kick(5)));
        assert_eq!(parse(b"kick  +7"), Ok(Command::Kick(7)));
        assert_eq!(parse(b"kick -1"), Ok(Command::Kick(u32::MAX)));
        assert_eq!(parse(b"kick x"), Err(Refusal::BadFormat));
        assert_eq!(parse(b"kick 99999999999999999999"), Err(Refusal::BadFormat));
    }
}
