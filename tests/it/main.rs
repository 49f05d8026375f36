//! The integration tests, one crate grouped by area: `cargo test --features test-hooks --test
//! it follow::` runs one area. A test that needs a process of its own stays a binary of its
//! own under tests/ and says why.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test fails by panicking"
)]

#[path = "../support/mod.rs"]
mod support;

mod cli;
mod faults;
mod follow;
mod security;
mod serve;
