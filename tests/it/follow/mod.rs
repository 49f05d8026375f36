//! Following real leaders (Tansu, librdkafka's mock cluster) and the in-process test leader, and
//! self-tests of both.

mod archived_history_read;
mod cluster_identity;
mod compacted_log;
mod dump_records;
mod fetch_sessions;
mod lag_while_the_leader_is_unreachable;
mod metrics;
mod missing_topic_is_loud;
mod mock_cluster;
mod mock_crc0_markers;
mod offset_out_of_range;
mod offsite_history;
mod real_leaders_selftest;
mod reload;
mod start_and_versions;
mod tansu;
mod tansu_transactions;
mod test_leader_selftest;
mod topic_recreated;
mod transactional_log;
mod wrong_broker_is_loud;
