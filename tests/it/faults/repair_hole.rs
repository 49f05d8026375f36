//! A segment deleted from the middle of a stopped replica of a real leader (Tansu): the local
//! `verify` passes (a gap is legitimate offline), `verify --against-leader` names the missing
//! offsets and the segments around them and exits 1; `repair` re-fetches exactly that range
//! into a segment of its own — its `.log`, `.index` and `.timeindex` what the follower had
//! written — touches no other file (same inodes, same bytes), and the replica ends
//! byte-identical to the leader; the daemon then follows on. `repair` beside a running daemon
//! is refused by the data-dir lock.

use crate::support;
use crate::support::{Daemon, Leader};
use replica_follower::checkpoint::TopicPartition;
use std::collections::BTreeMap;
use std::time::Duration;

const TOPIC: &str = "lost";

#[test]
fn verify_against_the_leader_names_a_lost_segment_and_repair_refills_it_in_place() {
    let mut leader = Leader::start("tansu", 1);
    let tp = TopicPartition::new(TOPIC, 0);
    let (_dir, data, cfg, end) = support::stopped_replica_of(&mut leader, TOPIC, 4);
    let cfg_s = cfg.to_str().unwrap();
    let pdir = data.join(tp.dir_name());
    let segs = support::segment_logs(&pdir);
    assert!(segs.len() >= 5, "4 KiB segments: {segs:?}");
    let bases: Vec<i64> = segs.keys().copied().collect();
    let i = bases.len() / 2;
    let (prev, gone, next) = (bases[i - 1], bases[i], bases[i + 1]);
    let mut originals = BTreeMap::new();
    for ext in ["log", "index", "timeindex"] {
        let p = pdir.join(format!("{gone:020}.{ext}"));
        originals.insert(ext, std::fs::read(&p).unwrap());
        std::fs::remove_file(&p).unwrap();
    }
    assert!(!pdir.join(format!("{gone:020}.txnindex")).exists());
    let before = support::hash_tree(&pdir);

    let (ok, out) = support::verify(&data);
    assert!(ok, "offline, a lost segment is only a gap:\n{out}");

    let (code, out, err) = support::run_cli(&["verify", "--config", cfg_s, "--against-leader"]);
    assert_eq!(code, Some(1), "{out}{err}");
    let seg = |b: i64| format!("`{}`", pdir.join(format!("{b:020}.log")).display());
    assert!(
        out.contains(&format!("{TOPIC}-0: hole: offsets {gone}..{} (", next - 1))
            && out.contains(&format!("between {} and {}", seg(prev), seg(next))),
        "the hole is named with its range and neighbours:\n{out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.contains(": hole: ")).count(),
        1,
        "{out}"
    );
    assert!(
        !out.contains("damaged") && !out.contains("differs"),
        "{out}"
    );
    assert_eq!(support::hash_tree(&pdir), before, "verify writes nothing");

    let (code, out, err) = support::run_cli(&["repair", "--config", cfg_s]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains(&format!("{TOPIC}-0: filled a hole from broker"))
            && out.contains(&format!(
                "new segment {} (offsets {gone}..{}",
                seg(gone),
                next - 1
            ))
            && out.contains("1 hole(s) filled, 0 segment(s) rewritten, 0 left unrepaired"),
        "{out}"
    );
    let after = support::hash_tree(&pdir);
    for (p, v) in &before {
        assert_eq!(after.get(p), Some(v), "{} was touched", p.display());
    }
    assert_eq!(
        after.len(),
        before.len() + originals.len(),
        "only the segment's own files are new: {:?}",
        after
            .keys()
            .filter(|p| !before.contains_key(*p))
            .collect::<Vec<_>>()
    );
    for (ext, bytes) in &originals {
        let now = std::fs::read(pdir.join(format!("{gone:020}.{ext}"))).unwrap();
        assert!(now == *bytes, ".{ext} is not what the follower had written");
    }
    assert!(!pdir.join("repair-staging").exists());
    support::assert_byte_identical(&leader.bootstrap, &data, &tp, 0);
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
    let (code, out, err) = support::run_cli(&["verify", "--config", cfg_s, "--against-leader"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains(&format!("{TOPIC}-0: ok: ")), "{out}");
    let (code, out, _) = support::run_cli(&["repair", "--config", cfg_s]);
    assert_eq!(code, Some(0));
    assert!(out.contains("nothing to repair"), "{out}");

    // The daemon takes the repaired log as it is and follows on; `repair` beside it is
    // refused by the lock.
    let from = Daemon::logged_so_far(&cfg);
    let mut d = Daemon::start(&cfg);
    let new_end = leader.produce(TOPIC, 0, 100, "lz4", 7).1 + 1;
    support::wait_until(Duration::from_secs(30), "catch-up after the repair", || {
        support::log_end(&data, TOPIC, 0) == new_end
    });
    assert!(new_end > end);
    let (code, _, err) = support::run_cli(&["repair", "--config", cfg_s]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("is locked by another replica-follower"),
        "{err}"
    );
    let log = d.log_text().get(from..).unwrap_or_default().to_string();
    assert!(
        !log.contains("gap(s) between segments"),
        "no gap is left:\n{log}"
    );
    assert_eq!(d.stop().code(), Some(0), "{log}");
    support::assert_byte_identical(&leader.bootstrap, &data, &tp, 0);
}
