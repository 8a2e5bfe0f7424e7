//! The checks of one push's fields that need more than a range: when it is due,
//! free-form keys and the backoff list. Each refusal names its field.

use std::time::Duration;

use super::{Due, Limits, TimeUnit, MAX_BACKOFF_ENTRIES, MAX_KEY_CHARS, MAX_PUSH_GROUPS};
use crate::error::InvalidField;
use crate::name::Group;
use crate::time::Timestamp;

/// A field that must be given.
pub(super) fn required(field: &'static str, value: Option<String>) -> Result<String, InvalidField> {
    value.ok_or_else(|| InvalidField::new(field, "is required"))
}

/// An amount that must not be negative.
pub(super) fn non_negative(field: &'static str, value: Option<i64>) -> Result<Option<u64>, InvalidField> {
    value.map(|amount| u64::try_from(amount).map_err(|_| InvalidField::new(field, "must be >= 0"))).transpose()
}

/// When a push is due (`delay` or `runAt`, not both) and its `createTime`, each
/// at most `max_delay` ahead; the three as given, in that order.
pub(super) fn due(
    [delay, run_at, create_time]: [Option<i64>; 3],
    unit: TimeUnit,
    limits: &Limits,
    now: Timestamp,
) -> Result<(Due, Option<Timestamp>), InvalidField> {
    let delay = non_negative("delay", delay)?.map(|amount| unit.to_duration(amount));
    let run_at = non_negative("runAt", run_at)?.map(Timestamp::from_millis);
    let create_time = non_negative("createTime", create_time)?.map(Timestamp::from_millis);
    let due = match (delay, run_at) {
        (Some(_), Some(_)) => return Err(InvalidField::new("runAt", "must not be given together with delay")),
        (Some(delay), None) => {
            if delay > limits.max_delay {
                return Err(InvalidField::new("delay", format!("must be at most {}", unit.describe(limits.max_delay))));
            }
            Due::Delay(delay)
        }
        (None, Some(run_at)) => {
            if run_at.since(now) > limits.max_delay {
                return Err(InvalidField::new(
                    "runAt",
                    format!("must be at most {} ms in the future", limits.max_delay.as_millis()),
                ));
            }
            Due::RunAt(run_at)
        }
        (None, None) => Due::Delay(Duration::ZERO),
    };
    if let Some(create_time) = create_time {
        if create_time.since(now) > limits.max_delay {
            return Err(InvalidField::new(
                "createTime",
                format!("must be at most {} ms in the future", limits.max_delay.as_millis()),
            ));
        }
    }
    Ok((due, create_time))
}

/// A free-form key: at most [`MAX_KEY_CHARS`] characters, no control characters.
pub(super) fn key(
    field: &'static str,
    value: Option<String>,
    min_chars: usize,
) -> Result<Option<String>, InvalidField> {
    let Some(key) = value else {
        return Ok(None);
    };
    let chars = key.chars().count();
    if chars < min_chars || chars > MAX_KEY_CHARS {
        return Err(InvalidField::new(field, format!("must be {min_chars}-{MAX_KEY_CHARS} characters")));
    }
    if key.chars().any(char::is_control) {
        return Err(InvalidField::new(field, "must not contain control characters"));
    }
    Ok(Some(key))
}

/// The per-redelivery backoff: at most [`MAX_BACKOFF_ENTRIES`] entries, each at most `max_delay`.
pub(super) fn backoff_list(
    field: &'static str,
    value: Option<Vec<i64>>,
    limits: &Limits,
) -> Result<Vec<Duration>, InvalidField> {
    let Some(entries) = value else {
        return Ok(Vec::new());
    };
    if entries.len() > MAX_BACKOFF_ENTRIES {
        return Err(InvalidField::new(field, format!("must have at most {MAX_BACKOFF_ENTRIES} entries")));
    }
    let mut backoff = Vec::with_capacity(entries.len());
    for entry in entries {
        let Ok(millis) = u64::try_from(entry) else {
            return Err(InvalidField::new(field, "entries must be integers >= 0"));
        };
        let delay = Duration::from_millis(millis);
        if delay > limits.max_delay {
            return Err(InvalidField::new(
                field,
                format!("entries must be at most {} ms", limits.max_delay.as_millis()),
            ));
        }
        backoff.push(delay);
    }
    Ok(backoff)
}

/// Checks the groups a push is restricted to: each a valid name, at most
/// [`MAX_PUSH_GROUPS`], each once (sorted, so that equal lists compare equal).
pub(super) fn groups(value: Option<Vec<String>>) -> Result<Vec<Group>, InvalidField> {
    let Some(names) = value else { return Ok(Vec::new()) };
    if names.len() > MAX_PUSH_GROUPS {
        return Err(InvalidField::new("groups", format!("must name at most {MAX_PUSH_GROUPS} groups")));
    }
    let mut groups = names
        .into_iter()
        .map(|name| Group::parse(name).map_err(|invalid| InvalidField::new("groups", invalid.reason)))
        .collect::<Result<Vec<_>, _>>()?;
    groups.sort();
    groups.dedup();
    Ok(groups)
}
