//! Request frames on a SASL_PLAINTEXT connection: the authenticator's state machine
//! (SaslHandshake, SaslAuthenticate with PLAIN and SCRAM), then reads once authenticated.
#![no_main]

use libfuzzer_sys::fuzz_target;
use replica_follower_fuzz::{Target, init, run};

fuzz_target!(init: init(Target::Sasl), |input: &[u8]| run(input));
