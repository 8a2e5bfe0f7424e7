//! The code generated from `proto/delayq.proto`.

/// Package `delayq.v1`: messages, the `DelayQueueService` server and client.
#[allow(
    missing_docs,
    unreachable_pub,
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
pub mod v1 {
    tonic::include_proto!("delayq.v1");
}

/// The encoded `FileDescriptorSet` of the API, for the reflection service.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("delayq_descriptor");
