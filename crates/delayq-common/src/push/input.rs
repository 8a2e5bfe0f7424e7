//! A push as a client sent it: each field typed, nothing checked yet. Read here
//! from a JSON object, each wrong JSON type refused with a message naming its
//! field; the gRPC face fills it from its message.

use serde_json::{Map, Value};

use crate::error::InvalidField;

/// The fields of one push, typed but unchecked. Integers are signed so that a
/// negative amount reaches the checks, which refuse it naming the field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushInput {
    /// `topic`.
    pub topic: Option<String>,
    /// `id`.
    pub id: Option<String>,
    /// `body`.
    pub body: Option<String>,
    /// `delay`, in the route's time unit.
    pub delay: Option<i64>,
    /// `runAt`, epoch ms.
    pub run_at: Option<i64>,
    /// `createTime`, epoch ms.
    pub create_time: Option<i64>,
    /// `ttr`, in the route's time unit.
    pub ttr: Option<i64>,
    /// `priority`.
    pub priority: Option<i64>,
    /// `maxRetries`.
    pub max_retries: Option<i64>,
    /// `retryBackoff`, ms per redelivery.
    pub retry_backoff: Option<Vec<i64>>,
    /// `ttl`, ms.
    pub ttl: Option<i64>,
    /// `subtopic`.
    pub subtopic: Option<String>,
    /// `bizKey`.
    pub biz_key: Option<String>,
    /// `replace`.
    pub replace: Option<bool>,
    /// `groups`.
    pub groups: Option<Vec<String>>,
}

impl PushInput {
    /// Reads a push from a JSON object.
    ///
    /// # Errors
    /// Not an object, or a field of the wrong JSON type, naming the field.
    pub fn from_json(value: &Value) -> Result<PushInput, InvalidField> {
        let Some(fields) = value.as_object() else {
            return Err(InvalidField::new("job", "must be a JSON object"));
        };
        let reader = JsonFields { fields };
        Ok(PushInput {
            topic: reader.string("topic")?,
            id: reader.string("id")?,
            body: reader.string("body")?,
            delay: reader.integer("delay")?,
            run_at: reader.integer("runAt")?,
            create_time: reader.integer("createTime")?,
            ttr: reader.integer("ttr")?,
            priority: reader.integer("priority")?,
            max_retries: reader.integer("maxRetries")?,
            retry_backoff: reader.integers("retryBackoff")?,
            ttl: reader.integer("ttl")?,
            subtopic: reader.string("subtopic")?,
            biz_key: reader.string("bizKey")?,
            replace: reader.boolean("replace")?,
            groups: reader.strings("groups")?,
        })
    }
}

/// A JSON integer as an i64; one beyond the largest i64 as the largest, since it
/// exceeds every bound the checks apply anyway. `None` for anything else.
fn integer_of(value: &Value) -> Option<i64> {
    value.as_u64().map(|unsigned| i64::try_from(unsigned).unwrap_or(i64::MAX)).or_else(|| value.as_i64())
}

/// The fields of one JSON object, each read as one type; `null` is absent.
struct JsonFields<'a> {
    fields: &'a Map<String, Value>,
}

impl JsonFields<'_> {
    fn get(&self, field: &str) -> Option<&Value> {
        self.fields.get(field).filter(|value| !value.is_null())
    }

    fn string(&self, field: &'static str) -> Result<Option<String>, InvalidField> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(InvalidField::new(field, "must be a string")),
        }
    }

    fn integer(&self, field: &'static str) -> Result<Option<i64>, InvalidField> {
        let Some(value) = self.get(field) else {
            return Ok(None);
        };
        if let Some(integer) = integer_of(value) {
            return Ok(Some(integer));
        }
        let Value::Number(number) = value else {
            return Err(InvalidField::new(field, "must be an integer"));
        };
        if number.as_f64().is_some_and(|float| float < 0.0) {
            return Err(InvalidField::new(field, "must be >= 0"));
        }
        Err(InvalidField::new(field, "must be an integer"))
    }

    fn integers(&self, field: &'static str) -> Result<Option<Vec<i64>>, InvalidField> {
        let Some(value) = self.get(field) else {
            return Ok(None);
        };
        let Value::Array(entries) = value else {
            return Err(InvalidField::new(field, "must be an array of integer milliseconds"));
        };
        let integers = entries
            .iter()
            .map(|entry| integer_of(entry).ok_or_else(|| InvalidField::new(field, "entries must be integers >= 0")));
        Ok(Some(integers.collect::<Result<_, _>>()?))
    }

    fn strings(&self, field: &'static str) -> Result<Option<Vec<String>>, InvalidField> {
        let Some(value) = self.get(field) else {
            return Ok(None);
        };
        let Value::Array(entries) = value else {
            return Err(InvalidField::new(field, "must be an array of strings"));
        };
        let strings = entries.iter().map(|entry| {
            entry.as_str().map(str::to_owned).ok_or_else(|| InvalidField::new(field, "entries must be strings"))
        });
        Ok(Some(strings.collect::<Result<_, _>>()?))
    }

    fn boolean(&self, field: &'static str) -> Result<Option<bool>, InvalidField> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Bool(flag)) => Ok(Some(*flag)),
            Some(_) => Err(InvalidField::new(field, "must be true or false")),
        }
    }
}
