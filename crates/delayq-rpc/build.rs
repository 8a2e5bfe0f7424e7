//! Compiles `proto/delayq.proto` without a system `protoc`: protox parses it
//! into a descriptor set, tonic-prost-build generates the messages, server and
//! client from that, and the encoded set is kept for the reflection service.

use std::path::PathBuf;

use prost::Message;

const PROTO: &str = "proto/delayq.proto";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed={PROTO}");
    let descriptors = protox::compile([PROTO], ["proto"])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out_dir.join("delayq_descriptor.bin"), descriptors.encode_to_vec())?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(descriptors)?;
    Ok(())
}
