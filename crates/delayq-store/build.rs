//! Rebuilds the crate when a migration changes: `sqlx::migrate!` embeds the
//! files of `sql/` at compile time, and on stable Rust cargo does not know
//! they are inputs, so a new migration would otherwise be missed by an
//! incremental build.

fn main() {
    println!("cargo:rerun-if-changed=../../sql");
}
