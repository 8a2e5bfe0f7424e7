//! Validated names: job ids, topics, consumer groups and consumers share one charset.

use std::borrow::Borrow;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::InvalidField;

/// The longest name accepted.
pub const MAX_NAME_LEN: usize = 128;

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')
}

/// Checks the id/topic charset and length, naming `field` in the error.
pub fn validate_name(field: &'static str, value: &str) -> Result<(), InvalidField> {
    if value.is_empty() {
        return Err(InvalidField::new(field, "must not be empty"));
    }
    if value.len() > MAX_NAME_LEN {
        return Err(InvalidField::new(field, format!("must be at most {MAX_NAME_LEN} characters")));
    }
    if !value.chars().all(is_name_char) {
        return Err(InvalidField::new(field, "may only contain A-Z a-z 0-9 . _ : -"));
    }
    Ok(())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $field:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps a name.
            ///
            /// # Errors
            /// When the value is empty, too long or outside the charset.
            pub fn parse(value: impl Into<String>) -> Result<$name, InvalidField> {
                let value = value.into();
                validate_name($field, &value)?;
                Ok($name(value))
            }

            /// Returns the name as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidField;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                $name::parse(value)
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

name_type!(
    /// A job id: given by the client or a generated snowflake in decimal.
    JobId,
    "id"
);
name_type!(
    /// A topic: the queue a job belongs to.
    Topic,
    "topic"
);
name_type!(
    /// A consumer group of a topic.
    Group,
    "group"
);
name_type!(
    /// The name a consumer gives itself (`consumer=`, the `delayq-consumer` header).
    ConsumerName,
    "consumer"
);

/// Joins a job's id (or topic) and a group's name into the id (or topic) of
/// the group's delivery of that job. The mark is outside the name charset, so
/// no name a client gives can take the form.
pub const GROUP_MARK: char = '/';

/// Splits `value` into its name and group when it has the delivery form.
fn group_parts(value: &str) -> Option<(&str, &str)> {
    value.split_once(GROUP_MARK)
}

/// Checks a name as a store or a scheduler gives it back: a client's name, or
/// the delivery form `name/group` ([`GROUP_MARK`]).
fn validate_stored(field: &'static str, value: &str) -> Result<(), InvalidField> {
    match group_parts(value) {
        Some((name, group)) => {
            validate_name(field, name)?;
            validate_name("group", group)
        }
        None => validate_name(field, value),
    }
}

macro_rules! grouped_name {
    ($name:ident, $field:literal) => {
        impl $name {
            /// The name of `group`'s delivery of this one ([`GROUP_MARK`]).
            pub fn for_group(&self, group: &Group) -> $name {
                $name(format!("{}{GROUP_MARK}{}", self.0, group.0))
            }

            /// Returns the name this delivery is of and its group, when it is a
            /// group's delivery ([`Self::for_group`]).
            pub fn group_parts(&self) -> Option<($name, Group)> {
                let (name, group) = group_parts(&self.0)?;
                Some(($name(name.to_owned()), Group(group.to_owned())))
            }

            /// Validates a name as a store or a scheduler gives it back: one a
            /// client could give, or a group's delivery form.
            ///
            /// # Errors
            /// When it is neither.
            pub fn parse_stored(value: impl Into<String>) -> Result<$name, InvalidField> {
                let value = value.into();
                validate_stored($field, &value)?;
                Ok($name(value))
            }
        }
    };
}

grouped_name!(JobId, "id");
grouped_name!(Topic, "topic");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_charset() {
        assert!(Topic::parse("order.timeout_v2:eu-west").is_ok());
        assert!(JobId::parse("A".repeat(128)).is_ok());
    }

    #[test]
    fn rejects_bad_names_naming_the_field() {
        let empty = Topic::parse("").unwrap_err();
        assert_eq!(empty.to_string(), "topic must not be empty");
        let long = JobId::parse("a".repeat(129)).unwrap_err();
        assert_eq!(long.to_string(), "id must be at most 128 characters");
        for bad in ["a b", "a/b", "ä", "a\n", "a*"] {
            assert_eq!(Topic::parse(bad).unwrap_err().field, "topic", "{bad:?}");
        }
    }

    #[test]
    fn a_group_delivery_names_its_job_and_group_and_no_client_can_take_it() {
        let id = JobId::parse("order:1").unwrap();
        let group = Group::parse("billing").unwrap();
        let delivery = id.for_group(&group);
        assert_eq!(delivery.as_str(), "order:1/billing");
        assert!(JobId::parse(delivery.as_str()).is_err());
        assert_eq!(JobId::parse_stored(delivery.as_str()).unwrap(), delivery);
        assert_eq!(delivery.group_parts(), Some((id.clone(), group.clone())));
        assert_eq!(id.group_parts(), None);
        let topic = Topic::parse("orders").unwrap().for_group(&group);
        assert_eq!(topic.group_parts().unwrap().0.as_str(), "orders");
        assert!(Topic::parse_stored("a/b/c").is_err());
        assert!(Topic::parse_stored("a/").is_err());
    }

    #[test]
    fn deserialization_validates() {
        let bad: Result<Topic, _> = serde_json::from_str("\"no spaces\"");
        assert!(bad.is_err());
        let good: Topic = serde_json::from_str("\"ok\"").unwrap();
        assert_eq!(good.as_str(), "ok");
    }
}
