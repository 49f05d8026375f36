//! The serve listener: the replica read as a Kafka broker by clients, by chained followers and by
//! hostile ones.

mod after_kill9;
mod archived_history_served_live;
mod chain;
mod chain_sessions;
mod clients;
mod fetch_max_bytes;
mod hostile_clients;
mod invalid_isolation_level;
mod leader_gone;
mod listener;
mod read_committed;
mod refusals;
mod repeated_partitions;
mod send_buffer;
mod session_eviction;
mod sessions;
