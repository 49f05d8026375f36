//! Transactions against Tansu: committed and aborted transactions interleaved with plain
//! produces, while the daemon follows. The replica ends byte-identical to the leader, its
//! commit and abort markers (control batches with valid CRCs) included, in order; with every
//! transaction ended, the last stable offset is the log end.

use crate::support;
use crate::support::{Daemon, Leader};
use replica_follower::checkpoint::TopicPartition;
use replica_follower::record::BatchIter;
use replica_follower::record::records::decode_records;
use std::time::Duration;

const TOPIC: &str = "tx";

/// The control record type of every control batch in `bytes`, in offset order: (base
/// offset, 0 abort / 1 commit).
fn markers(bytes: &[u8]) -> Vec<(i64, i16)> {
    BatchIter::new(bytes, usize::MAX)
        .filter(|(h, _, _)| h.is_control())
        .map(|(h, _, b)| {
            h.verify_crc(b).expect("a control batch with a valid CRC");
            let recs = decode_records(&h, b).expect("control batch records");
            assert_eq!(recs.len(), 1, "one record in a control batch");
            let key = recs[0].key.as_deref().expect("control record key");
            (h.base_offset, i16::from_be_bytes([key[2], key[3]]))
        })
        .collect()
}

#[test]
fn transactions_are_replicated_byte_for_byte_markers_included() {
    let mut leader = Leader::start("tansu", 1);
    leader.create_topic(TOPIC, 1);
    let tp = TopicPartition::new(TOPIC, 0);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = support::Config::new(&data, &leader.bootstrap)
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 200)
        .set("checkpoint.interval_ms", 200)
        .set("log.segment_bytes", 16384)
        .set("log.flush_interval_ms", 100)
        .write(dir.path());

    leader.produce(TOPIC, 0, 120, "none", 1);
    let mut d = Daemon::start(&cfg);
    let mut txs: Vec<(usize, bool)> = Vec::new();
    let rounds: [&[(usize, bool)]; 3] = [
        &[(5, true), (3, false)],
        &[(40, true), (7, false), (2, true)],
        &[(60, false), (30, true)],
    ];
    let mut end = 0;
    for (i, round) in rounds.iter().enumerate() {
        let r = leader.produce_transactional(TOPIC, 0, round);
        assert_eq!(
            r["transactions"].as_array().map(Vec::len),
            Some(round.len()),
            "{r}"
        );
        txs.extend_from_slice(round);
        end = leader.produce(TOPIC, 0, 80, "gzip", 10 + i as u64).1 + 1;
    }
    let want_markers: Vec<i16> = txs.iter().map(|&(_, commit)| i16::from(commit)).collect();
    let aborts = txs.iter().filter(|&&(_, commit)| !commit).count();

    support::wait_until(
        Duration::from_secs(30),
        &format!("catch-up to {end}"),
        || support::log_end(&data, TOPIC, 0) == end,
    );
    support::assert_byte_identical(&leader.bootstrap, &data, &tp, 0);
    let local = support::local_log_bytes(&data, &tp);
    let got = markers(&local);
    assert_eq!(
        got.len(),
        txs.len(),
        "one control batch per transaction in the local log: {got:?}"
    );
    assert_eq!(
        got.iter().map(|&(_, t)| t).collect::<Vec<_>>(),
        want_markers,
        "commit and abort markers in order: {got:?}"
    );
    assert_eq!(
        got,
        markers(&support::leader_bytes(&leader.bootstrap, &tp, 0)),
        "the leader's markers at the same offsets"
    );

    support::wait_until(
        Duration::from_secs(10),
        "the high watermark checkpoint",
        || {
            support::read_checkpoint(&data.join("replication-offset-checkpoint"))
                .get(&(TOPIC.to_string(), 0))
                == Some(&end)
        },
    );
    let st = support::partition_status(&data, TOPIC, 0).unwrap();
    assert_eq!(st["log_end_offset"].as_i64(), Some(end), "{st}");
    assert_eq!(
        st["last_stable_offset"], st["log_end_offset"],
        "every transaction ended: {st}"
    );
    assert_eq!(
        st["aborted_transactions"].as_u64(),
        Some(aborts as u64),
        "one .txnindex entry per aborted transaction: {st}"
    );
    let (ok, out) = support::verify(&data);
    assert!(ok, "verify while running:\n{out}");

    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let st = support::partition_status(&data, TOPIC, 0).unwrap();
    assert_eq!(st["last_stable_offset"].as_i64(), Some(end), "{st}");
    let (ok, out) = support::verify(&data);
    assert!(ok, "verify after stop:\n{out}");
    assert!(
        !d.log_text().contains(" ERROR "),
        "no error while following transactions:\n{}",
        d.log_text()
    );
}
