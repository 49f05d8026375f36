//! `verify`, `dump`, `status` and `offsets` on a segment three times larger than the memory
//! they are allowed: one 600 MB segment of 40 batches of 15 MB (every CRC valid, indexes as
//! the daemon writes them), each command run under `ulimit -v` of 200 MiB. A command that
//! read the segment whole would fail to allocate it, so success with the right output proves
//! that they stream. `status` and `offsets` run again without the offset index, which makes
//! them walk the segment from its start. The bound is checked first: under it, `dd` cannot
//! get a 600 MiB buffer (were the limit not enforced, the test would prove nothing).

use crate::support;
use crate::support::batches::{BATCH_TIMESTAMP, BatchSpec};
use std::path::Path;
use std::process::{Command, Output};

const BATCHES: i64 = 40;
const RECORDS_PER_BATCH: i32 = 3;
const VALUE_BYTES: usize = 5 << 20;
/// The address-space limit of every command, in KiB.
const LIMIT_KIB: u64 = 200 << 10;

/// Runs `cmd` with `args` under the address-space limit.
fn limited(cmd: &str, args: &[&str]) -> Output {
    Command::new("bash")
        .arg("-c")
        .arg(format!("ulimit -v {LIMIT_KIB} && exec \"$0\" \"$@\""))
        .arg(cmd)
        .args(args)
        .output()
        .expect("run bash")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Writes `t-0` with one segment of [`BATCHES`] batches of [`RECORDS_PER_BATCH`] records
/// of [`VALUE_BYTES`] each, its indexes and the checkpoint files; returns the log's size.
fn write_big_partition(data: &Path) -> u64 {
    use std::io::Write;
    // Values that are not UTF-8, so `dump` shows 60 bytes of each in hex.
    let value = vec![0xfe_u8; VALUE_BYTES];
    let mut spec = BatchSpec::new(0, 0);
    for d in 0..RECORDS_PER_BATCH {
        spec = spec.record(d, BATCH_TIMESTAMP + i64::from(d), None, Some(&value));
    }
    let mut batch = spec.build();
    let size = batch.len() as u64;
    let dir = data.join("t-0");
    std::fs::create_dir_all(&dir).unwrap();
    let mut log = std::io::BufWriter::new(
        std::fs::File::create(dir.join("00000000000000000000.log")).unwrap(),
    );
    let mut index = Vec::new();
    for i in 0..BATCHES {
        // The base offset is not covered by the CRC: one batch serves for all of them.
        let base = i * i64::from(RECORDS_PER_BATCH);
        batch[..8].copy_from_slice(&base.to_be_bytes());
        log.write_all(&batch).unwrap();
        // As the daemon indexes (every batch is past index_interval_bytes): the last offset
        // of each batch after the first, at its position.
        if i > 0 {
            let last = base + i64::from(RECORDS_PER_BATCH) - 1;
            index.extend_from_slice(&(last as u32).to_be_bytes());
            index.extend_from_slice(&((i as u64 * size) as u32).to_be_bytes());
        }
    }
    log.flush().unwrap();
    std::fs::write(dir.join("00000000000000000000.index"), index).unwrap();
    // One time-index entry: the largest timestamp, first met in the first batch.
    let max_ts = BATCH_TIMESTAMP + i64::from(RECORDS_PER_BATCH) - 1;
    let first_last = (RECORDS_PER_BATCH - 1) as u32;
    std::fs::write(
        dir.join("00000000000000000000.timeindex"),
        [&max_ts.to_be_bytes()[..], &first_last.to_be_bytes()].concat(),
    )
    .unwrap();
    std::fs::write(dir.join("leader-epoch-checkpoint"), "0\n1\n0 0\n").unwrap();
    let end = BATCHES * i64::from(RECORDS_PER_BATCH);
    for (name, offset) in [
        ("replication-offset-checkpoint", end),
        ("recovery-point-offset-checkpoint", end),
        ("log-start-offset-checkpoint", 0),
    ] {
        std::fs::write(data.join(name), format!("0\n1\nt 0 {offset}\n")).unwrap();
    }
    BATCHES as u64 * size
}

/// Runs the daemon's binary with `args` under the limit; its stdout, after checking that it
/// succeeded.
fn run_ok(args: &[&str]) -> String {
    let out = limited(support::bin(), args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{args:?}: {stdout}{stderr}");
    stdout
}

/// `status --json`'s object for the partition.
fn partition_status(d: &str) -> serde_json::Value {
    let status: serde_json::Value =
        serde_json::from_str(&run_ok(&["status", "--json", "--data-dir", d])).unwrap();
    status["partitions"][0].clone()
}

#[test]
fn verify_dump_status_and_offsets_stream_a_segment_larger_than_their_memory() {
    let _heavy = support::heavy();
    let dd = limited(
        "dd",
        &["if=/dev/zero", "of=/dev/null", "bs=600M", "count=1"],
    );
    assert!(
        !dd.status.success(),
        "ulimit -v {LIMIT_KIB} does not bound memory here: dd got a 600 MiB buffer"
    );

    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let log_size = write_big_partition(&data);
    assert!(log_size > 3 * (LIMIT_KIB << 10), "{log_size}");
    let d = data.to_str().unwrap();
    let end = BATCHES * i64::from(RECORDS_PER_BATCH);

    assert_eq!(
        run_ok(&["verify", "--data-dir", d]).trim(),
        format!("ok: 1 partition, 1 segment, {BATCHES} batches verified")
    );

    let dump = run_ok(&["dump", "--data-dir", d, "--topic", "t", "--partition", "0"]);
    let batch_lines: Vec<&str> = dump.lines().filter(|l| l.starts_with("batch ")).collect();
    assert_eq!(batch_lines.len() as i64, BATCHES);
    assert!(batch_lines.iter().all(|l| l.ends_with("crc=ok")), "{dump}");
    let last = batch_lines[BATCHES as usize - 1];
    assert!(
        last.starts_with(&format!("batch offsets={}..{}", end - 3, end - 1)),
        "{last}"
    );
    let records: Vec<&str> = dump
        .lines()
        .filter(|l| l.starts_with("  offset="))
        .collect();
    assert_eq!(records.len() as i64, end);
    let shown = format!("({VALUE_BYTES} bytes)");
    assert!(records.iter().all(|r| r.contains(&shown)), "{}", records[0]);

    // With its offset index, status scans from the last entry; without, from the start.
    for with_index in [true, false] {
        if !with_index {
            std::fs::remove_file(data.join("t-0/00000000000000000000.index")).unwrap();
        }
        let p = partition_status(d);
        assert_eq!(p["log_end_offset"], end, "{p}");
        assert_eq!(p["last_stable_offset"], end, "{p}");
        assert_eq!(p["high_watermark"], end, "{p}");
        assert_eq!(p["size_bytes"], log_size, "{p}");
        let args = [
            "offsets",
            "--data-dir",
            d,
            "--topic",
            "t",
            "--partition",
            "0",
            "--time",
            "-1",
        ];
        assert_eq!(run_ok(&args).trim(), end.to_string());
    }
}
