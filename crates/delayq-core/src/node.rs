//! This node's name and snowflake worker id.

use std::hash::{DefaultHasher, Hash, Hasher};

use delayq_common::snowflake::MAX_WORKERS;

/// This node's identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeIdentity {
    /// The name written to the job log.
    pub(crate) name: String,
    /// The snowflake worker id.
    pub(crate) worker_id: u16,
}

impl NodeIdentity {
    /// Uses the configured name, else the host name and process id.
    ///
    /// A numeric name is the worker id itself; any other name is hashed.
    pub(crate) fn resolve(configured: Option<&str>) -> NodeIdentity {
        let name = match configured {
            Some(name) if !name.trim().is_empty() => name.trim().to_owned(),
            _ => format!("{}-{}", host_name(), std::process::id()),
        };
        let worker_id = match name.parse::<u64>() {
            Ok(number) => (number % u64::from(MAX_WORKERS)) as u16,
            Err(_) => {
                let mut hasher = DefaultHasher::new();
                name.hash(&mut hasher);
                (hasher.finish() % u64::from(MAX_WORKERS)) as u16
            }
        };
        NodeIdentity { name, worker_id }
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "delayq".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_names_are_worker_ids() {
        assert_eq!(NodeIdentity::resolve(Some("7")).worker_id, 7);
        assert_eq!(NodeIdentity::resolve(Some("1030")).worker_id, 6);
    }

    #[test]
    fn names_are_stable_and_derived_when_absent() {
        assert_eq!(NodeIdentity::resolve(Some("node-a")), NodeIdentity::resolve(Some("node-a")));
        let derived = NodeIdentity::resolve(None);
        assert!(derived.name.ends_with(&std::process::id().to_string()));
    }
}
