//! What each method may receive: who may call it, how large its request
//! message may be, and how many entries its repeated field may have.
//!
//! The limits follow what a method can accept, so no request is buffered or
//! decoded beyond what could succeed: a Push one job, a PushBatch at most
//! [`MAX_BATCH_PUSH`] jobs, a Finish its result, every other call a few
//! identifiers.

use delayq_queue::service::MAX_BATCH_PUSH;

use crate::auth::Access;

/// The path prefix of the API's methods.
const SERVICE_PREFIX: &str = "/delayq.v1.DelayQueueService/";
/// A bound on everything of one push but its body: topic and id (128 bytes
/// each), subtopic and business key (128 characters each), seven numbers, up
/// to 100 backoff entries, up to 64 group names (128 bytes each), field tags
/// and lengths.
pub(crate) const PUSH_FIELDS_BYTES: usize = 12 * 1024;
/// A bound on one entry's tag and length inside a batch.
const BATCH_ENTRY_FRAMING_BYTES: usize = 8;
/// The largest request of any method that carries only identifiers and
/// options (and of the reflection service).
pub(crate) const SMALL_MESSAGE_BYTES: usize = 4 * 1024;
/// The field number of `jobs` in `PushBatchRequest`.
const BATCH_JOBS_FIELD: u64 = 1;

/// The sizes the per-method limits derive from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MessageLimits {
    /// The largest job body, in bytes.
    pub(crate) max_body_bytes: usize,
    /// The largest Finish result, in bytes.
    pub(crate) max_result_bytes: usize,
}

impl MessageLimits {
    /// Returns the largest Push request.
    pub(crate) fn push_bytes(&self) -> usize {
        self.max_body_bytes.saturating_add(PUSH_FIELDS_BYTES)
    }

    /// Returns the largest PushBatch request: a full batch of the largest pushes.
    pub(crate) fn push_batch_bytes(&self) -> usize {
        self.push_bytes().saturating_add(BATCH_ENTRY_FRAMING_BYTES).saturating_mul(MAX_BATCH_PUSH)
    }

    /// Returns the largest Finish request.
    pub(crate) fn finish_bytes(&self) -> usize {
        self.max_result_bytes.saturating_add(SMALL_MESSAGE_BYTES)
    }

    /// Returns the largest request of any method, for the decoder's own limit.
    pub(crate) fn largest_bytes(&self) -> usize {
        self.push_batch_bytes().max(self.finish_bytes())
    }
}

/// A repeated field whose entries are counted before the message is decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CountedField {
    /// Its field number.
    pub(crate) number: u64,
    /// Its name, as refusals say it.
    pub(crate) name: &'static str,
    /// The most entries one message may have.
    pub(crate) max_entries: usize,
}

/// What a call to one method must satisfy before its request is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MethodRules {
    /// The method's name, as refusals say it.
    pub(crate) name: &'static str,
    /// The token it needs.
    pub(crate) access: Access,
    /// The largest request message.
    pub(crate) max_message_bytes: usize,
    /// The repeated field whose entries are capped, if any.
    pub(crate) counted: Option<CountedField>,
    /// Whether the request is one message that must arrive within the arrival
    /// timeout (every API method); the reflection stream stays open instead.
    pub(crate) single_request: bool,
}

impl MethodRules {
    fn api(name: &'static str, access: Access, max_message_bytes: usize) -> MethodRules {
        MethodRules { name, access, max_message_bytes, counted: None, single_request: true }
    }
}

/// Returns the rules of the method at `path`. Unknown paths get the strictest
/// rules of a user call (the router then answers `UNIMPLEMENTED`).
pub(crate) fn rules_for(path: &str, limits: &MessageLimits) -> MethodRules {
    let Some(method) = path.strip_prefix(SERVICE_PREFIX) else {
        return MethodRules {
            name: "gRPC",
            access: Access::User,
            max_message_bytes: SMALL_MESSAGE_BYTES,
            counted: None,
            single_request: false,
        };
    };
    match method {
        "Push" => MethodRules::api("Push", Access::User, limits.push_bytes()),
        "PushBatch" => MethodRules {
            counted: Some(CountedField { number: BATCH_JOBS_FIELD, name: "jobs", max_entries: MAX_BATCH_PUSH }),
            ..MethodRules::api("PushBatch", Access::User, limits.push_batch_bytes())
        },
        "Finish" => MethodRules::api("Finish", Access::User, limits.finish_bytes()),
        "Restore" => MethodRules::api("Restore", Access::Admin, SMALL_MESSAGE_BYTES),
        "RestoreJob" => MethodRules::api("RestoreJob", Access::Admin, SMALL_MESSAGE_BYTES),
        "ClearAll" => MethodRules::api("ClearAll", Access::Admin, SMALL_MESSAGE_BYTES),
        other => {
            let name = SMALL_METHODS.iter().find(|name| **name == other).copied().unwrap_or("gRPC");
            MethodRules::api(name, Access::User, SMALL_MESSAGE_BYTES)
        }
    }
}

/// The user methods whose requests carry only identifiers and options.
const SMALL_METHODS: [&str; 10] =
    ["Delete", "Pop", "Nack", "Touch", "GetJob", "Stats", "Subscribe", "DeclareGroup", "DropGroup", "ListGroups"];

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::pb::v1 as pb;

    const LIMITS: MessageLimits = MessageLimits { max_body_bytes: 65_536, max_result_bytes: 65_536 };

    fn path(method: &str) -> String {
        format!("{SERVICE_PREFIX}{method}")
    }

    /// Returns the method names of the service in the compiled descriptor set.
    fn api_methods() -> Vec<String> {
        let set = prost_types::FileDescriptorSet::decode(crate::pb::FILE_DESCRIPTOR_SET).expect("descriptor set");
        let services = set.file.iter().flat_map(|file| file.service.iter());
        let api = services.filter(|service| service.name() == "DelayQueueService");
        api.flat_map(|service| service.method.iter().map(|method| method.name().to_owned())).collect()
    }

    #[test]
    fn admin_calls_need_the_admin_token_and_the_rest_a_user_token() {
        let methods = api_methods();
        assert!(methods.len() >= 13, "{methods:?}");
        for method in methods {
            let expected = if ["Restore", "RestoreJob", "ClearAll"].contains(&method.as_str()) {
                Access::Admin
            } else {
                Access::User
            };
            let rules = rules_for(&path(&method), &LIMITS);
            assert_eq!((rules.access, rules.single_request), (expected, true), "{method}");
        }
        let reflection = rules_for("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", &LIMITS);
        assert_eq!((reflection.access, reflection.single_request), (Access::User, false));
        let batch = rules_for(&path("PushBatch"), &LIMITS).counted.map(|field| (field.number, field.name));
        assert_eq!(batch, Some((1, "jobs")));
    }

    #[test]
    fn the_largest_push_and_batch_fit() {
        let longest = "x".repeat(128);
        let widest = "😀".repeat(128);
        let push = pb::PushRequest {
            topic: longest.clone(),
            id: Some(longest),
            body: Some("b".repeat(LIMITS.max_body_bytes)),
            subtopic: Some(widest.clone()),
            biz_key: Some(widest),
            delay_ms: Some(i64::MAX),
            run_at: Some(i64::MAX),
            create_time: Some(i64::MAX),
            ttr_ms: Some(i64::MAX),
            priority: Some(i64::MAX),
            max_retries: Some(i64::MAX),
            ttl_ms: Some(i64::MAX),
            retry_backoff_ms: vec![i64::MAX; 100],
            replace: true,
            groups: vec!["g".repeat(128); delayq_common::push::MAX_PUSH_GROUPS],
        };
        assert!(push.encoded_len() <= LIMITS.push_bytes(), "{}", push.encoded_len());
        let batch = pb::PushBatchRequest { jobs: vec![push; MAX_BATCH_PUSH] };
        assert!(batch.encoded_len() <= LIMITS.push_batch_bytes(), "{}", batch.encoded_len());
        let finish = pb::FinishRequest {
            id: "x".repeat(128),
            result: Some("r".repeat(LIMITS.max_result_bytes)),
            attempt: Some(u32::MAX),
            group: Some("g".repeat(128)),
        };
        assert!(finish.encoded_len() <= LIMITS.finish_bytes());
        let delete = pb::DeleteRequest {
            id: "x".repeat(128),
            topic: "x".repeat(128),
            biz_key: "😀".repeat(128),
            group: Some("g".repeat(128)),
        };
        assert!(delete.encoded_len() <= SMALL_MESSAGE_BYTES);
        assert_eq!(LIMITS.largest_bytes(), LIMITS.push_batch_bytes());
    }
}
