//! The integration tests, one crate grouped by area: `cargo test --features test-hooks --test
//! it follow::` runs one area. A test that needs a process of its own stays a binary of its
//! own under tests/ and says why.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::cast_possible_truncation,
    reason = "a test fails by panicking, and indexes its own fixtures freely"
)]

#[path = "../support/mod.rs"]
mod support;

mod cli;
mod faults;
mod follow;
mod security;
mod serve;
