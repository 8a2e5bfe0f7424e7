//! Key names, the shard of a job and the encoding of job ids as pool fields.
//!
//! Every key of shard `s` carries the hash tag `{prefix:s}`, so each Lua script
//! (which only ever touches one shard) addresses a single Redis Cluster slot.

use delayq_common::JobId;

use super::codec::CodecError;

/// The keys of one shard (see `lua/lib.lua` for what each holds).
#[derive(Debug)]
pub(super) struct ShardKeys {
    /// The shard number, as scripts publish it.
    pub(super) index: usize,
    /// `{prefix:s}:j`: the job pool.
    pub(super) jobs: String,
    /// `{prefix:s}:d`: the timeline of due instants.
    pub(super) timeline: String,
    /// `{prefix:s}:m`: live counts per state and topic and topic codes (of
    /// topics with live jobs only), the announced earliest instant.
    pub(super) meta: String,
    /// `{prefix:s}:r:`: the stem of the per-topic ready queues.
    ready_stem: String,
}

impl ShardKeys {
    /// Builds the key names of shard `index` under `prefix`.
    pub(super) fn new(prefix: &str, index: usize) -> ShardKeys {
        let base = format!("{{{prefix}:{index}}}:");
        ShardKeys {
            index,
            jobs: format!("{base}j"),
            timeline: format!("{base}d"),
            meta: format!("{base}m"),
            ready_stem: format!("{base}r:"),
        }
    }

    /// Returns the ready queue of `topic` in this shard.
    pub(super) fn ready(&self, topic: &str) -> String {
        let mut key = String::with_capacity(self.ready_stem.len() + topic.len());
        key.push_str(&self.ready_stem);
        key.push_str(topic);
        key
    }
}

/// Returns the shard of a job: a stable hash (64-bit FNV-1a) of its id, so
/// every node and every version agrees on it.
pub(super) fn shard_of(id: &JobId, shards: usize) -> usize {
    debug_assert!(shards > 0);
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.as_str().bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % shards as u64) as usize
}

/// Marks a raw id that is exactly 8 bytes long, so it never reads as a numeric one.
const RAW_MARK: u8 = b'~';

/// Encodes an id as its pool field: a canonical decimal `u64` (every snowflake)
/// as 8 big-endian bytes, anything else as its text (suffixed with `~`, which
/// the id charset excludes, when it would be 8 bytes long too).
pub(super) fn encode_id(id: &JobId) -> Vec<u8> {
    let text = id.as_str();
    if let Some(number) = canonical_u64(text) {
        return number.to_be_bytes().to_vec();
    }
    let mut field = Vec::with_capacity(text.len() + 1);
    field.extend_from_slice(text.as_bytes());
    if field.len() == 8 {
        field.push(RAW_MARK);
    }
    field
}

/// Decodes a pool field written by [`encode_id`].
pub(super) fn decode_id(field: &[u8]) -> Result<JobId, CodecError> {
    let text = if let Ok(bytes) = <[u8; 8]>::try_from(field) {
        u64::from_be_bytes(bytes).to_string()
    } else {
        let raw = match field.split_last() {
            Some((&RAW_MARK, raw)) if raw.len() == 8 => raw,
            _ => field,
        };
        String::from_utf8(raw.to_vec()).map_err(|_| CodecError("id"))?
    };
    JobId::parse_stored(text).map_err(|_| CodecError("id"))
}

/// Returns the number when `text` is its canonical decimal form (no sign, no leading zero).
fn canonical_u64(text: &str) -> Option<u64> {
    let digits_only = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !digits_only || (text.len() > 1 && text.starts_with('0')) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> JobId {
        JobId::parse(text).expect("valid id")
    }

    #[test]
    fn ids_round_trip_through_their_field() {
        for text in [
            "0",
            "7",
            "1234567890123456789",
            "18446744073709551615",
            "18446744073709551616",
            "007",
            "abcdefgh",
            "abcdefg",
            "abcdefghi",
            "order:42",
        ] {
            let field = encode_id(&id(text));
            assert_eq!(decode_id(&field).expect("decodes").as_str(), text, "{text}");
        }
    }

    #[test]
    fn numeric_ids_take_eight_bytes_and_never_collide_with_text() {
        assert_eq!(encode_id(&id("1234567890123456789")).len(), 8);
        assert_eq!(encode_id(&id("abcdefgh")), b"abcdefgh~".to_vec());
        assert_ne!(encode_id(&id("12345678")), encode_id(&id("0012345678")));
    }

    #[test]
    fn shards_are_stable_and_spread() {
        assert_eq!(shard_of(&id("42"), 16), shard_of(&id("42"), 16));
        let mut seen = [0usize; 16];
        for n in 0..16_000u64 {
            seen[shard_of(&id(&(1_000_000_000_000 + n).to_string()), 16)] += 1;
        }
        assert!(seen.iter().all(|&count| (800..1200).contains(&count)), "{seen:?}");
    }

    #[test]
    fn every_key_of_a_shard_shares_its_hash_tag() {
        let keys = ShardKeys::new("dq", 3);
        for key in [&keys.jobs, &keys.timeline, &keys.meta, &keys.ready("t")] {
            assert!(key.starts_with("{dq:3}:"), "{key}");
        }
        assert_eq!(keys.index, 3);
    }
}
