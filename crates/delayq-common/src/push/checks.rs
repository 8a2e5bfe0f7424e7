//! Reading typed fields from one push's JSON object: each wrong type or out of
//! range value is refused with a message naming the field.

use std::time::Duration;

use serde_json::{Map, Value};

use super::{Due, Limits, TimeUnit, MAX_BACKOFF_ENTRIES, MAX_KEY_CHARS};
use crate::error::InvalidField;
use crate::time::Timestamp;

/// Reads the fields of one push's JSON object, each refusal naming its field.
pub(super) struct FieldReader<'a> {
    pub(super) fields: &'a Map<String, Value>,
}

impl FieldReader<'_> {
    /// Reads when a push is due (`delay` or `runAt`, not both) and its
    /// `createTime`, each at most `max_delay` ahead.
    pub(super) fn due(
        &self,
        unit: TimeUnit,
        limits: &Limits,
        now: Timestamp,
    ) -> Result<(Due, Option<Timestamp>), InvalidField> {
        let delay = self.optional_u64("delay")?.map(|amount| unit.to_duration(amount));
        let run_at = self.optional_u64("runAt")?.map(Timestamp::from_millis);
        let create_time = self.optional_u64("createTime")?.map(Timestamp::from_millis);
        let due = match (delay, run_at) {
            (Some(_), Some(_)) => return Err(InvalidField::new("runAt", "must not be given together with delay")),
            (Some(delay), None) => {
                if delay > limits.max_delay {
                    return Err(InvalidField::new(
                        "delay",
                        format!("must be at most {}", unit.describe(limits.max_delay)),
                    ));
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

    pub(super) fn get(&self, field: &str) -> Option<&Value> {
        self.fields.get(field).filter(|value| !value.is_null())
    }

    pub(super) fn required_string(&self, field: &'static str) -> Result<String, InvalidField> {
        self.optional_string(field)?.ok_or_else(|| InvalidField::new(field, "is required"))
    }

    pub(super) fn optional_string(&self, field: &'static str) -> Result<Option<String>, InvalidField> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(InvalidField::new(field, "must be a string")),
        }
    }

    pub(super) fn optional_u64(&self, field: &'static str) -> Result<Option<u64>, InvalidField> {
        let Some(value) = self.get(field) else {
            return Ok(None);
        };
        let Value::Number(number) = value else {
            return Err(InvalidField::new(field, "must be an integer"));
        };
        if let Some(unsigned) = number.as_u64() {
            return Ok(Some(unsigned));
        }
        if number.as_i64().is_some() || number.as_f64().is_some_and(|float| float < 0.0) {
            return Err(InvalidField::new(field, "must be >= 0"));
        }
        Err(InvalidField::new(field, "must be an integer"))
    }

    pub(super) fn optional_bool(&self, field: &'static str) -> Result<Option<bool>, InvalidField> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Bool(flag)) => Ok(Some(*flag)),
            Some(_) => Err(InvalidField::new(field, "must be true or false")),
        }
    }

    /// A free-form key: at most [`MAX_KEY_CHARS`] characters, no control characters.
    pub(super) fn optional_key(&self, field: &'static str, min_chars: usize) -> Result<Option<String>, InvalidField> {
        let Some(key) = self.optional_string(field)? else {
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

    pub(super) fn backoff_list(&self, field: &'static str, limits: &Limits) -> Result<Vec<Duration>, InvalidField> {
        let Some(value) = self.get(field) else {
            return Ok(Vec::new());
        };
        let Value::Array(entries) = value else {
            return Err(InvalidField::new(field, "must be an array of integer milliseconds"));
        };
        if entries.len() > MAX_BACKOFF_ENTRIES {
            return Err(InvalidField::new(field, format!("must have at most {MAX_BACKOFF_ENTRIES} entries")));
        }
        let mut backoff = Vec::with_capacity(entries.len());
        for entry in entries {
            let Some(millis) = entry.as_u64() else {
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
}
