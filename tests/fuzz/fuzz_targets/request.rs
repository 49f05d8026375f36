//! Request frames on a PLAINTEXT connection: every served API (Fetch with its sessions,
//! Metadata, ListOffsets, OffsetForLeaderEpoch, ApiVersions) and every refused one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use replica_follower_fuzz::{Target, init, run};

fuzz_target!(init: init(Target::Request), |input: &[u8]| run(input));
