//! `restore prepare | write | finish`: the replica given back to an Apache Kafka cluster with
//! the same offsets, so that consumers resume where they were.
//!
//! 1. `prepare` ([`plan`]), with the target cluster up: creates the missing topics with the
//!    archived partition counts and configs, every replica on one broker, and writes the plan.
//! 2. `write` ([`write`]), with that broker stopped: fills its partition directories from the
//!    replica, in Kafka's own format, so that the broker loads them as its own.
//! 3. `finish`, with the broker started again: checks every partition's range, commits the
//!    archived consumer-group offsets, and makes the restored producer state safe for new
//!    producers.
//!
//! Each step checks before it writes, names what is wrong, and may be run again.

pub mod plan;
pub mod write;
