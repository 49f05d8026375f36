//! Bit rot in an old segment, below the recovery point, where the daemon never rescans:
//! `verify` finds the bad CRC, `verify --against-leader` names the batch and says the
//! leader's copy is intact, `repair` rewrites that one segment from the leader through a new
//! file (its indexes too; the rotten bytes kept in `damaged/`), every other file stays the
//! same file, and the replica ends byte-identical to the leader (Tansu).
//! A damaged segment the leader no longer holds (its log start moved past it) cannot be
//! repaired: `repair` says so, leaves it as it is, repairs what it can, and exits 1
//! (the in-process leader, whose log start a test can move).

use crate::support;
use crate::support::Leader;
use crate::support::test_leader::TestLeader;
use replica_follower::checkpoint::TopicPartition;
use replica_follower::record::BatchHeader;
use std::path::{Path, PathBuf};

/// Flips one byte in the middle of the first batch's records of `log` (in place: same
/// file); returns the bytes from before and the first batch's offsets.
fn flip_a_byte(log: &Path) -> (Vec<u8>, (i64, i64)) {
    let original = std::fs::read(log).unwrap();
    let h = BatchHeader::parse(&original, usize::MAX).unwrap();
    assert!(h.size_in_bytes > 100, "{h:?}");
    let mut rotten = original.clone();
    rotten[h.size_in_bytes / 2] ^= 0x10;
    std::fs::write(log, &rotten).unwrap();
    (original, (h.base_offset, h.last_offset))
}

fn seg_path(pdir: &Path, base: i64) -> PathBuf {
    pdir.join(format!("{base:020}.log"))
}

#[test]
fn a_flipped_byte_below_the_recovery_point_is_found_and_its_segment_rewritten_from_the_leader() {
    const TOPIC: &str = "rot";
    let mut leader = Leader::start("tansu", 1);
    let tp = TopicPartition::new(TOPIC, 0);
    let (_dir, data, cfg, end) = support::stopped_replica_of(&mut leader, TOPIC, 4);
    let cfg_s = cfg.to_str().unwrap();
    let pdir = data.join(tp.dir_name());
    let bases: Vec<i64> = support::segment_logs(&pdir).keys().copied().collect();
    assert!(bases.len() >= 4, "{bases:?}");
    let target = bases[1];
    let rp = support::read_checkpoint(&data.join("recovery-point-offset-checkpoint"));
    assert_eq!(rp[&(TOPIC.to_string(), 0)], end);
    assert!(
        bases[2] < end,
        "the segment lies wholly below the recovery point"
    );
    let log = seg_path(&pdir, target);
    let originals: Vec<Vec<u8>> = ["index", "timeindex"]
        .iter()
        .map(|ext| std::fs::read(log.with_extension(ext)).unwrap())
        .collect();
    let (original, (first, last)) = flip_a_byte(&log);
    let before = support::hash_tree(&pdir);

    let (ok, out) = support::verify(&data);
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!("{}: byte 0: ", log.display())) && out.contains("CRC"),
        "{out}"
    );

    let (code, out, err) = support::run_cli(&["verify", "--config", cfg_s, "--against-leader"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains(&format!(
            "{TOPIC}-0: damaged: `{}` byte 0: batch {first}..{last} fails its own checksum",
            log.display()
        )) && out.contains("the leader's copy is intact"),
        "{out}"
    );
    assert!(!out.contains(": hole: "), "{out}");

    let (code, out, err) = support::run_cli(&["repair", "--config", cfg_s]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains(&format!(
            "{TOPIC}-0: rewrote damaged segment `{}` from broker",
            log.display()
        )) && out.contains("0 hole(s) filled, 1 segment(s) rewritten, 0 left unrepaired"),
        "{out}"
    );
    let after = support::hash_tree(&pdir);
    let stem = format!("{target:020}.");
    for (p, v) in &before {
        let name = p.to_string_lossy();
        if name.starts_with(&stem) {
            assert_ne!(after[p].0, v.0, "{name} was replaced by a new file");
        } else {
            assert_eq!(after.get(p), Some(v), "{name} was touched");
        }
    }
    assert_eq!(std::fs::read(&log).unwrap(), original);
    for (ext, bytes) in ["index", "timeindex"].iter().zip(&originals) {
        assert!(
            std::fs::read(log.with_extension(ext)).unwrap() == *bytes,
            ".{ext} is not what the follower had written"
        );
    }
    let kept = pdir.join("damaged").join(format!("{target:020}.log.0"));
    assert_ne!(
        std::fs::read(&kept).unwrap(),
        original,
        "the rotten bytes are kept"
    );
    support::assert_byte_identical(&leader.bootstrap, &data, &tp, 0);
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
    let (code, out, err) = support::run_cli(&["verify", "--config", cfg_s, "--against-leader"]);
    assert_eq!(code, Some(0), "{out}{err}");
}

#[test]
fn a_damaged_segment_the_leader_no_longer_holds_is_left_as_it_is_and_repair_exits_1() {
    const TOPIC: &str = "gone";
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 400, 10);
    let (_dir, data, cfg) = support::follow_until(
        &leader.addr(),
        TOPIC,
        |c| {
            c.set("fetch.max_wait_ms", 100)
                .set("log.segment_bytes", 2048)
        },
        400,
    );
    let cfg_s = cfg.to_str().unwrap();
    let pdir = data.join(format!("{TOPIC}-0"));
    let bases: Vec<i64> = support::segment_logs(&pdir).keys().copied().collect();
    assert!(bases.len() >= 4, "{bases:?}");
    // The leader's retention passes the first segment; both it and a later one rot.
    leader.delete_records_before(0, bases[1] + 5);
    let (lost_log, kept_log) = (seg_path(&pdir, bases[0]), seg_path(&pdir, bases[2]));
    let (_, (lost_first, lost_last)) = flip_a_byte(&lost_log);
    let (kept_original, _) = flip_a_byte(&kept_log);
    let lost_before = support::hash_tree(&pdir)[Path::new(lost_log.file_name().unwrap())];

    let (code, out, err) = support::run_cli(&["verify", "--config", cfg_s, "--against-leader"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains(&format!(
            "damaged: `{}` byte 0: batch {lost_first}..{lost_last} fails its own checksum",
            lost_log.display()
        )) && out.contains("the leader does not have it"),
        "{out}"
    );
    assert!(
        out.contains(&format!("damaged: `{}` byte 0: ", kept_log.display())),
        "{out}"
    );
    assert!(
        out.contains("below the leader's log start") || out.contains("no longer on the leader"),
        "{out}"
    );

    let (code, out, err) = support::run_cli(&["repair", "--config", cfg_s]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains(&format!(
            "{TOPIC}-0: `{}` is damaged, but the leader no longer has offsets {}..",
            lost_log.display(),
            bases[0]
        )) && out.contains("left as it is"),
        "{out}"
    );
    assert!(
        out.contains(&format!("rewrote damaged segment `{}`", kept_log.display()))
            && out.contains("1 segment(s) rewritten, 1 left unrepaired"),
        "{out}"
    );
    assert_eq!(
        support::hash_tree(&pdir)[Path::new(lost_log.file_name().unwrap())],
        lost_before,
        "the segment the leader no longer holds is untouched"
    );
    assert_eq!(std::fs::read(&kept_log).unwrap(), kept_original);
}
