//! replica-follower: keeps an exact, crash-safe local replica of Kafka topic-partitions.
//!
//! # Layout
//! Each layer calls only the ones above it in this list:
//! 1. [`protocol`] — the Kafka wire codec: primitives, headers, one module per API.
//! 2. [`record`] — record batches: headers, CRC-32C / CRC-32 checks, walking a record set.
//! 3. [`client`] — blocking broker connections, version negotiation, cluster metadata.
//! 4. [`log`] and [`checkpoint`] — segments and indexes in Kafka's on-disk format, recovery,
//!    retention; atomic checkpoint files. Below both, [`fault`] is the seam through which
//!    tests fail each of their write steps.
//! 5. [`fetcher`] — the shutdownable thread, the abstract fetch loop, the replica fetcher
//!    plugged into it, and the manager that assigns partitions to fetcher threads.
//! 6. [`repair`] — holes and damaged segments found against the leader and re-fetched into
//!    place (`repair`, `verify --against-leader`, the daemon's start-up hole check).
//! 7. [`inspect`] — `status`, `dump`, `offsets`, `verify`: read-only views of a data dir.
//! 8. [`serve`] — the replica as a read-only Kafka broker: snapshots of the logs streamed to
//!    clients from the segment files.
//! 9. [`daemon`] — start-up, signals, the data-dir lock, the periodic checkpoint task; it
//!    wires the others together.
//!
//! [`config`] turns the TOML file into a validated [`config::Config`], and [`resolve`] turns
//! that into the runtime parts it names (TLS, SASL users, log settings, descriptor budget),
//! reading the files; `main.rs` only parses the command line and dispatches.

#![forbid(unsafe_code)]
// Bytes from brokers and disks never panic the daemon: no unwrap, expect or panic outside tests.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

#[macro_use]
pub mod live;
pub mod checkpoint;
pub mod client;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod fault;
pub mod fetcher;
pub mod inspect;
pub mod log;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod protocol;
pub mod record;
pub mod repair;
pub mod resolve;
pub mod security;
pub mod serve;
