//! A cheap look at a request body as it streams in, before tonic buffers and
//! decodes it: the length prefix of every gRPC message against the method's
//! limit, and, for a method with a capped repeated field, the number of its
//! entries at the top level of the protobuf wire format. Nothing is copied or
//! allocated; a refusal comes at the first byte that proves it.

use tonic::Status;

use crate::limits::{CountedField, MethodRules};
use crate::status::invalid;

/// The bytes of a gRPC message header: a compression flag and a big-endian length.
const HEADER_BYTES: usize = 5;

/// Where the scanner stands in the gRPC framing.
#[derive(Debug)]
enum Frame {
    /// Reading a header; holds the bytes read so far.
    Header { bytes: [u8; HEADER_BYTES], read: usize },
    /// Inside a message of which `remaining` bytes are still to come.
    Payload { remaining: usize },
}

/// Where the field scanner stands in the protobuf wire format of one message.
#[derive(Clone, Copy, Debug)]
enum Field {
    /// Reading a field key (a varint).
    Key { value: u64, shift: u32 },
    /// Skipping a varint value.
    Varint { shift: u32 },
    /// Reading the length of a length-delimited field.
    Length { number: u64, value: u64, shift: u32 },
    /// Skipping `remaining` bytes of a value.
    Skip { remaining: u64 },
}

const START: Field = Field::Key { value: 0, shift: 0 };
/// The most bits a varint may carry.
const VARINT_BITS: u32 = 64;

/// Watches the request body of one call.
#[derive(Debug)]
pub(crate) struct MessageScanner {
    rules: MethodRules,
    frame: Frame,
    field: Field,
    /// Entries of the counted field seen in the current message.
    entries: usize,
}

impl MessageScanner {
    pub(crate) fn new(rules: MethodRules) -> MessageScanner {
        MessageScanner { rules, frame: Frame::Header { bytes: [0; HEADER_BYTES], read: 0 }, field: START, entries: 0 }
    }

    /// Looks at the next bytes of the body.
    ///
    /// # Errors
    /// A message over the method's size limit, a compressed message (this
    /// server accepts none), a capped field with too many entries, or bytes
    /// that are not a protobuf message.
    pub(crate) fn feed(&mut self, mut data: &[u8]) -> Result<(), Status> {
        while !data.is_empty() {
            data = match &mut self.frame {
                Frame::Header { bytes, read } => {
                    let Some((&byte, rest)) = data.split_first() else { break };
                    if let Some(slot) = bytes.get_mut(*read) {
                        *slot = byte;
                    }
                    *read += 1;
                    if *read == HEADER_BYTES {
                        let header = *bytes;
                        self.start_message(header)?;
                    }
                    rest
                }
                Frame::Payload { remaining } => {
                    let take = (*remaining).min(data.len());
                    let (payload, rest) = data.split_at(take);
                    *remaining -= take;
                    let finished = *remaining == 0;
                    if let Some(counted) = self.rules.counted {
                        self.scan_fields(payload, counted)?;
                    }
                    if finished {
                        self.frame = Frame::Header { bytes: [0; HEADER_BYTES], read: 0 };
                    }
                    rest
                }
            };
        }
        Ok(())
    }

    /// Checks a message header and starts reading its payload.
    fn start_message(&mut self, header: [u8; HEADER_BYTES]) -> Result<(), Status> {
        let [compressed, length @ ..] = header;
        match compressed {
            0 => {}
            1 => return Err(Status::unimplemented("compressed requests are not accepted")),
            _ => return Err(invalid("request is not a valid gRPC message")),
        }
        let length = usize::try_from(u32::from_be_bytes(length)).unwrap_or(usize::MAX);
        if length > self.rules.max_message_bytes {
            return Err(invalid(format!(
                "{} request must be at most {} bytes",
                self.rules.name, self.rules.max_message_bytes
            )));
        }
        self.field = START;
        self.entries = 0;
        self.frame = if length == 0 {
            Frame::Header { bytes: [0; HEADER_BYTES], read: 0 }
        } else {
            Frame::Payload { remaining: length }
        };
        Ok(())
    }

    /// Follows the top-level fields of the payload, counting entries of `counted`.
    fn scan_fields(&mut self, mut data: &[u8], counted: CountedField) -> Result<(), Status> {
        while !data.is_empty() {
            if let Field::Skip { remaining } = &mut self.field {
                let take = usize::try_from(*remaining).unwrap_or(usize::MAX).min(data.len());
                data = data.split_at(take).1;
                *remaining -= take as u64;
                if *remaining == 0 {
                    self.field = START;
                }
                continue;
            }
            let Some((&byte, rest)) = data.split_first() else { break };
            data = rest;
            self.field = self.next_field_state(byte, counted)?;
        }
        Ok(())
    }

    /// Returns the state after one byte of a key, varint or length.
    fn next_field_state(&mut self, byte: u8, counted: CountedField) -> Result<Field, Status> {
        let more = byte & 0x80 != 0;
        let bits = u64::from(byte & 0x7f);
        let state = match self.field {
            Field::Key { value, shift } => {
                let value = accumulate(value, bits, shift)?;
                if more {
                    Field::Key { value, shift: shift + 7 }
                } else {
                    after_key(value)?
                }
            }
            Field::Varint { shift } => {
                if shift >= VARINT_BITS {
                    return Err(malformed());
                }
                if more {
                    Field::Varint { shift: shift + 7 }
                } else {
                    START
                }
            }
            Field::Length { number, value, shift } => {
                let value = accumulate(value, bits, shift)?;
                if more {
                    return Ok(Field::Length { number, value, shift: shift + 7 });
                }
                if number == counted.number {
                    self.count_entry(counted)?;
                }
                if value == 0 {
                    START
                } else {
                    Field::Skip { remaining: value }
                }
            }
            Field::Skip { .. } => self.field,
        };
        Ok(state)
    }

    fn count_entry(&mut self, counted: CountedField) -> Result<(), Status> {
        self.entries += 1;
        if self.entries > counted.max_entries {
            return Err(invalid(format!("{} must have at most {} entries", counted.name, counted.max_entries)));
        }
        Ok(())
    }
}

/// Adds seven more bits to a varint.
fn accumulate(value: u64, bits: u64, shift: u32) -> Result<u64, Status> {
    if shift >= VARINT_BITS {
        return Err(malformed());
    }
    Ok(value | (bits << shift))
}

/// Returns what follows a field key: its value, by wire type. Groups are
/// refused: proto3 has none, and this scanner does not follow them.
fn after_key(key: u64) -> Result<Field, Status> {
    let number = key >> 3;
    match key & 0x7 {
        0 => Ok(Field::Varint { shift: 0 }),
        1 => Ok(Field::Skip { remaining: 8 }),
        2 => Ok(Field::Length { number, value: 0, shift: 0 }),
        5 => Ok(Field::Skip { remaining: 4 }),
        _ => Err(malformed()),
    }
}

fn malformed() -> Status {
    invalid("request is not a valid protobuf message")
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use tonic::Code;

    use super::*;
    use crate::limits::{rules_for, MessageLimits};
    use crate::pb::v1 as pb;

    const LIMITS: MessageLimits = MessageLimits { max_body_bytes: 65_536, max_result_bytes: 65_536 };

    fn batch_rules() -> MethodRules {
        rules_for("/delayq.v1.DelayQueueService/PushBatch", &LIMITS)
    }

    fn framed(message: &[u8]) -> Vec<u8> {
        let mut framed = vec![0];
        framed.extend_from_slice(&u32::try_from(message.len()).expect("length").to_be_bytes());
        framed.extend_from_slice(message);
        framed
    }

    /// Feeds `body` in chunks of `chunk` bytes.
    fn scan(rules: MethodRules, body: &[u8], chunk: usize) -> Result<(), (Code, String)> {
        let mut scanner = MessageScanner::new(rules);
        for piece in body.chunks(chunk) {
            scanner.feed(piece).map_err(|status| (status.code(), status.message().to_owned()))?;
        }
        Ok(())
    }

    fn batch(entries: usize) -> Vec<u8> {
        let job = pb::PushRequest {
            topic: "t".into(),
            body: Some("b".repeat(300)),
            retry_backoff_ms: vec![1, 300],
            delay_ms: Some(-1),
            ..Default::default()
        };
        framed(&pb::PushBatchRequest { jobs: vec![job; entries] }.encode_to_vec())
    }

    #[test]
    fn a_full_batch_passes_in_any_chunking() {
        for chunk in [1, 2, 7, 300, 1 << 20] {
            assert_eq!(scan(batch_rules(), &batch(1000), chunk), Ok(()), "chunk {chunk}");
        }
    }

    #[test]
    fn one_entry_too_many_is_refused_naming_the_field() {
        for chunk in [1, 5, 4096] {
            let refused = scan(batch_rules(), &batch(1001), chunk);
            assert_eq!(refused, Err((Code::InvalidArgument, "jobs must have at most 1000 entries".into())));
        }
    }

    #[test]
    fn tiny_entries_are_refused_at_the_first_entry_too_many() {
        // 16 MiB of empty entries; the refusal comes within the first few kilobytes.
        let body = framed(&[0x0a, 0x00].repeat(8 << 20));
        let mut scanner = MessageScanner::new(batch_rules());
        let mut fed = 0;
        let mut refusal = None;
        for piece in body.chunks(16 * 1024) {
            fed += piece.len();
            if let Err(status) = scanner.feed(piece) {
                refusal = Some(status);
                break;
            }
        }
        assert_eq!(refusal.map(|status| status.code()), Some(Code::InvalidArgument));
        assert_eq!(fed, 16 * 1024);
    }

    #[test]
    fn unknown_fields_are_followed_and_not_counted() {
        let mut message = Vec::new();
        for _ in 0..2000 {
            message.extend_from_slice(&[0x10, 0x96, 0x01]); // field 2, varint
            message.extend_from_slice(&[0x1d, 1, 2, 3, 4]); // field 3, fixed32
            message.extend_from_slice(&[0x21, 1, 2, 3, 4, 5, 6, 7, 8]); // field 4, fixed64
            message.extend_from_slice(&[0x2a, 0x02, 0x0a, 0x00]); // field 5, bytes holding a field-1 key
        }
        assert_eq!(scan(batch_rules(), &framed(&message), 3), Ok(()));
    }

    #[test]
    fn groups_and_endless_varints_are_malformed() {
        let malformed = Err((Code::InvalidArgument, "request is not a valid protobuf message".to_owned()));
        assert_eq!(scan(batch_rules(), &framed(&[0x13, 0x14]), 1), malformed);
        assert_eq!(scan(batch_rules(), &framed(&[0xff; 12]), 4), malformed);
        assert_eq!(scan(batch_rules(), &framed(&[[0x10].as_slice(), &[0xff; 11]].concat()), 4), malformed);
    }

    #[test]
    fn sizes_are_checked_from_the_header_of_every_message() {
        let push = rules_for("/delayq.v1.DelayQueueService/Push", &LIMITS);
        let limit = LIMITS.push_bytes();
        let header = |length: usize| [[0u8].as_slice(), &u32::try_from(length).expect("u32").to_be_bytes()].concat();
        assert_eq!(scan(push, &header(limit), 5), Ok(()));
        let too_big = scan(push, &header(limit + 1), 2);
        assert_eq!(too_big, Err((Code::InvalidArgument, format!("Push request must be at most {limit} bytes"))));
        let reflection = rules_for("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", &LIMITS);
        let two_messages = [framed(b"ab"), header(1 << 20)].concat();
        assert_eq!(scan(reflection, &two_messages, 3).map_err(|refused| refused.0), Err(Code::InvalidArgument));
        let compressed = [[1u8].as_slice(), &3u32.to_be_bytes(), b"abc"].concat();
        assert_eq!(scan(push, &compressed, 8).map_err(|refused| refused.0), Err(Code::Unimplemented));
    }

    #[test]
    fn counts_start_over_for_each_message() {
        let two_batches = [batch(1000), batch(1000)].concat();
        assert_eq!(scan(batch_rules(), &two_batches, 1000), Ok(()));
    }
}
