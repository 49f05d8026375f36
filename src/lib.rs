//! replica-follower: keeps an exact, crash-safe local replica of Kafka topic-partitions.
//!
//! # Layout
//! Each module uses only the ones listed before it (`tests/it/cli/layers.rs` checks this
//! list against the `crate::` paths of the production code, and that no module's files depend
//! on each other in a cycle):
//! 1. [`protocol`] — the Kafka wire codec: primitives, headers, one module per API.
//! 2. [`record`] — record batches: headers, CRC-32C / CRC-32 checks, walking a record set.
//! 3. [`clock`] — wall-clock milliseconds, and the cheap spread retries are jittered by.
//! 4. [`logging`] — the daemon's log lines on stderr or the journal.
//! 5. [`notify`] — systemd's notify protocol (READY=1, STOPPING=1, STATUS=).
//! 6. [`fault`] — the seam through which tests fail each write step of the storage.
//! 7. [`checkpoint`] — Kafka's checkpoint file formats, written atomically.
//! 8. [`log`] — the storage engine: on-disk formats (`log::format`), process resources
//!    (`log::resources`: descriptors, open files, disk space), the data-dir layout
//!    (`log::data_dir`), each partition's log, recovery, retention, and the read path over a
//!    partition's indexes (`log::reader`): nothing outside `log` decodes an index file.
//! 9. [`live`] — what the running daemon knows beyond its checkpoints, and the watchdog's beats.
//! 10. [`security`] — TLS, SASL/SCRAM and the security settings types.
//! 11. [`client`] — blocking broker connections, version negotiation, cluster metadata, and the
//!     admin, group and transaction calls of an archive and a restore.
//! 12. [`config`] — the TOML file parsed and validated into a [`config::Config`]; it reads no
//!     other file.
//! 13. [`fetcher`] — the shutdownable thread, the abstract fetch loop and its stages, the
//!     replica side plugged into it, and the manager that assigns partitions to fetchers.
//! 14. [`repair`] — holes and damaged segments found against the leader and re-fetched into
//!     place (`repair`, `verify --against-leader`, the daemon's start-up hole check).
//! 15. [`inspect`] — `status`, `dump`, `offsets`, `verify`: read-only views of a data dir.
//! 16. [`serve`] — the replica as a read-only Kafka broker: snapshots of the logs streamed to
//!     clients from the segment files.
//! 17. [`offsite`] — copies in S3-compatible storage: each object's envelope (plain with a
//!     CRC-32C, or AES-256-GCM in authenticated chunks), a blocking S3 client, the manifests,
//!     the uploader thread, and `offsite restore | verify`.
//! 18. [`resolve`] — a [`config::Config`] turned into the runtime parts it names (TLS, SASL
//!     users, log settings, descriptor budget, listen addresses, the offsite store), reading
//!     the files.
//! 19. [`restore`] — the replica given back to an Apache Kafka cluster with the same offsets
//!     (`restore prepare | write | finish`).
//! 20. [`metrics`] — the Prometheus endpoint.
//! 21. [`daemon`] — start-up, signals, the data-dir lock, the periodic checkpoint task; it
//!     wires the others together.
//!
//! `main.rs` only parses the command line and dispatches.

// The lints are Cargo.toml's `[lints]`; the library forbids unsafe code outright, and its
// unit tests fail by panicking and index freely.
#![forbid(unsafe_code)]
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::cast_possible_truncation
    )
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
pub mod offsite;
pub mod protocol;
pub mod record;
pub mod repair;
pub mod resolve;
pub mod restore;
pub mod security;
pub mod serve;
