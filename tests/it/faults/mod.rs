//! Crashes, kills, full disks, storage and descriptor faults, and leaders that misbehave.

mod bounded_memory;
mod calm_logs;
mod crash_recovery;
mod creation_crash;
mod descriptor_limit;
mod disk_full;
mod fault_injection;
mod hostile_batches;
mod kill_loop;
mod leader_failover;
mod leader_storms;
mod missing_segment;
mod offsite_store;
mod open_files_budget;
mod repair_bit_rot;
mod repair_hole;
mod slow_broker;
mod storage_faults;
mod unclean_election;
mod verify_live;
