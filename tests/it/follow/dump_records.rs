//! `dump --records` and `offsets --timestamp` on replicas of real compressed batches.
//!
//! Tansu is fed by confluent-kafka's producer with every codec (keys, null values, headers,
//! explicit CreateTimes) and a committed transaction; the replica's `dump --records` must
//! show exactly what a confluent-kafka consumer reads from the leader for the same offsets,
//! the COMMIT marker included as such. `offsets --timestamp` must agree with the record
//! timestamps. ABORT markers come from the in-process test leader (Tansu stores none).

use crate::support;
use crate::support::batches::{control_batch, txn_batch};
use crate::support::{CODECS, Leader, run_cli};
use serde_json::{Value, json};

const TOPIC: &str = "dumprec";
/// CreateTime of the first record; codec k's records start at T0 + k × 100 s, 10 ms apart.
const T0: i64 = 1_750_000_000_000;
const PER_CODEC: i64 = 30;
const STEP: i64 = 10;

fn codec_start(k: i64) -> i64 {
    T0 + k * 100_000
}

/// How `dump` shows bytes given in hex: null, a UTF-8 string (120 characters at most), or
/// hex (60 bytes at most) with the length.
fn shown(hex: &Value) -> String {
    let Some(h) = hex.as_str() else {
        return "null".into();
    };
    let bytes: Vec<u8> = (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
        .collect();
    let cut = |long: bool| if long { "…" } else { "" };
    match std::str::from_utf8(&bytes) {
        Ok(s) => {
            let head: String = s.chars().take(120).collect();
            format!(
                "\"{}{}\"",
                head.escape_default(),
                cut(s.chars().count() > 120)
            )
        }
        Err(_) => format!(
            "0x{}{} ({} bytes)",
            &h[..h.len().min(120)],
            cut(bytes.len() > 60),
            bytes.len()
        ),
    }
}

/// The line `dump` prints for a record the consumer read.
fn expected_line(r: &Value) -> String {
    let headers: Vec<String> = r["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| format!("{}={}", h[0].as_str().unwrap(), shown(&h[1])))
        .collect();
    format!(
        "  offset={} timestamp={} key={} value={} headers=[{}]",
        r["offset"],
        r["timestamp"],
        shown(&r["key"]),
        shown(&r["value"]),
        headers.join(", ")
    )
}

fn dump(data: &str, topic: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let mut args = vec![
        "dump",
        "--data-dir",
        data,
        "--topic",
        topic,
        "--partition",
        "0",
    ];
    args.extend_from_slice(extra);
    run_cli(&args)
}

fn record_lines(out: &str) -> Vec<&str> {
    out.lines().filter(|l| l.starts_with("  offset=")).collect()
}

/// `offsets --timestamp t` on partition 0 of [`TOPIC`].
fn offsets_cli(data: &str, t: &str) -> (Option<i32>, String, String) {
    run_cli(&[
        "offsets",
        "--data-dir",
        data,
        "--topic",
        TOPIC,
        "--partition",
        "0",
        "--timestamp",
        t,
    ])
}

fn offset_by_timestamp(data: &str, t: &str) -> String {
    let (code, out, err) = offsets_cli(data, t);
    assert_eq!(code, Some(0), "--timestamp {t}: {err}");
    out
}

#[test]
fn dump_records_shows_what_a_consumer_reads_for_every_codec() {
    let mut leader = Leader::start("tansu", 1);
    leader.create_topic(TOPIC, 1);
    for (k, codec) in CODECS.iter().enumerate() {
        leader.ok(json!({"cmd": "produce", "topic": TOPIC, "partition": 0,
            "count": PER_CODEC, "codec": codec, "value_size": 40, "keys": "mixed",
            "headers": true, "seed": k + 1, "batch_records": 10,
            "timestamp_ms": codec_start(k as i64), "timestamp_step_ms": STEP}));
    }
    let tx = leader.produce_transactional(TOPIC, 0, &[(4, true)]);
    let last_tx = tx["transactions"][0]["last_offset"].as_i64().unwrap();
    let end = leader.produce(TOPIC, 0, 3, "none", 99).1 + 1;
    let (_keep, data, _cfg) = support::follow_until(
        &leader.bootstrap,
        TOPIC,
        |c| {
            c.set("fetch.max_wait_ms", 100)
                .set("log.segment_bytes", 8192)
        },
        end,
    );
    let d = data.to_str().unwrap();

    let (code, out, err) = dump(d, TOPIC, &["--records"]);
    assert_eq!(code, Some(0), "{err}\n{out}");
    for codec in CODECS {
        assert!(
            out.contains(&format!("codec={codec} ")),
            "a {codec} batch:\n{out}"
        );
    }
    assert!(
        out.lines()
            .filter(|l| l.starts_with("batch "))
            .all(|l| l.contains(" timestamp_type=CreateTime ") && l.ends_with("crc=ok")),
        "{out}"
    );
    let consumed = leader.ok(json!({"cmd": "consume", "topic": TOPIC, "partition": 0,
        "from": 0, "to": end - 1}));
    let consumed = consumed["records"].as_array().unwrap();
    assert_eq!(
        consumed.len() as i64,
        5 * PER_CODEC + 4 + 3,
        "every data record"
    );
    // The producer's timestamps reached the leader as CreateTimes.
    assert_eq!(consumed[0]["timestamp"], T0);
    assert_eq!(consumed[0]["timestamp_type"], 1);
    let want: Vec<String> = consumed.iter().map(expected_line).collect();
    let lines = record_lines(&out);
    let (markers, data_lines): (Vec<&str>, Vec<&str>) =
        lines.iter().partition(|l| l.contains(" marker"));
    assert_eq!(data_lines, want, "dump --records against the consumer");
    assert_eq!(markers.len(), 1, "{markers:?}");
    assert!(
        markers[0].starts_with(&format!("  offset={} ", last_tx + 1))
            && markers[0].contains(" COMMIT marker (coordinator epoch "),
        "{}",
        markers[0]
    );
    // Without --records the compressed batches keep their records to themselves.
    let (code, plain, _) = dump(d, TOPIC, &[]);
    assert_eq!(code, Some(0));
    assert!(record_lines(&plain).len() < lines.len(), "{plain}");

    // --from/--to cut inside the gzip batches; --count counts records with --records …
    let gzip = PER_CODEC;
    let (from, to) = (gzip + 5, gzip + 17);
    let (_, out, _) = dump(
        d,
        TOPIC,
        &[
            "--records",
            "--from",
            &from.to_string(),
            "--to",
            &to.to_string(),
        ],
    );
    let wanted: Vec<&str> = want[from as usize..=to as usize]
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(record_lines(&out), wanted);
    let (_, out, _) = dump(
        d,
        TOPIC,
        &["--records", "--from", &from.to_string(), "--count", "7"],
    );
    assert_eq!(record_lines(&out), &wanted[..7]);
    // … and batches without.
    let (_, out, _) = dump(d, TOPIC, &["--from", &from.to_string(), "--count", "2"]);
    let batches: Vec<&str> = out.lines().filter(|l| l.starts_with("batch ")).collect();
    assert_eq!(batches.len(), 2, "{out}");
    assert!(batches[0].contains("codec=gzip"), "{out}");
    // Bad values name their flag.
    for (flag, bad) in [("--to", "3"), ("--count", "0"), ("--count", "x")] {
        let (code, _, err) = dump(d, TOPIC, &["--from", "5", flag, bad]);
        assert_eq!(code, Some(2), "{flag} {bad}");
        assert!(err.contains(flag), "{flag} {bad}: {err}");
    }

    // offsets --timestamp: before everything, between records, on one, after everything.
    let first_of = |k: i64| format!("offset={} timestamp={} ", k * PER_CODEC, codec_start(k));
    assert!(offset_by_timestamp(d, "0").starts_with(&first_of(0)));
    assert!(offset_by_timestamp(d, &(T0 - 1).to_string()).starts_with(&first_of(0)));
    let between = offset_by_timestamp(d, &(codec_start(2) + 3 * STEP + 1).to_string());
    assert!(
        between.starts_with(&format!(
            "offset={} timestamp={} ",
            2 * PER_CODEC + 4,
            codec_start(2) + 4 * STEP
        )),
        "{between}"
    );
    for k in 0..5 {
        // Equal to a record's timestamp, and just after the previous codec's last record.
        assert!(offset_by_timestamp(d, &codec_start(k).to_string()).starts_with(&first_of(k)));
        let after_prev = codec_start(k) - 100_000 + (PER_CODEC - 1) * STEP + 1;
        if k > 0 {
            assert!(offset_by_timestamp(d, &after_prev.to_string()).starts_with(&first_of(k)));
        }
    }
    // The same instant as an RFC 3339 date-time: 1_750_000_000_000 is 2025-06-15T15:06:40Z.
    assert!(
        offset_by_timestamp(d, "2025-06-15T17:06:40+02:00").starts_with(&first_of(0)),
        "RFC 3339"
    );
    // Every timestamp the consumer saw finds its record (or an earlier one sharing it).
    for r in consumed.iter().step_by(7) {
        let got = offset_by_timestamp(d, &r["timestamp"].to_string());
        assert!(
            got.contains(&format!(" timestamp={} ", r["timestamp"])),
            "{r}: {got}"
        );
    }
    let after = offset_by_timestamp(d, "4000000000000");
    assert!(
        after.starts_with("none: ") && after.contains(&format!("the log end is {end}")),
        "{after}"
    );
    let (code, _, err) = offsets_cli(d, "yesterday");
    assert_eq!(code, Some(2));
    assert!(err.contains("--timestamp"), "{err}");
}

#[test]
fn abort_and_commit_markers_show_as_markers() {
    let leader = support::test_leader::TestLeader::start("txdump", 1);
    leader.append(0, 5, 5);
    leader.append_batch(0, txn_batch(5, 3, 77, 2, 0));
    leader.append_batch(0, control_batch(8, 77, 2, false, 4, 0));
    leader.append_batch(0, txn_batch(9, 2, 77, 2, 0));
    leader.append_batch(0, control_batch(11, 77, 2, true, 5, 0));
    let (_keep, data, _cfg) = support::follow_until(&leader.addr(), "txdump", |c| c, 12);
    let (code, out, err) = dump(data.to_str().unwrap(), "txdump", &["--records"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(
            "producer_id=77 producer_epoch=2 base_sequence=-1 marker=ABORT (coordinator epoch 4) crc=ok"
        ),
        "{out}"
    );
    let markers: Vec<&str> = record_lines(&out)
        .into_iter()
        .filter(|l| l.contains(" marker"))
        .collect();
    assert_eq!(markers.len(), 2, "{out}");
    assert!(
        markers[0].starts_with("  offset=8 ")
            && markers[0].ends_with(" ABORT marker (coordinator epoch 4)"),
        "{out}"
    );
    assert!(
        markers[1].starts_with("  offset=11 ")
            && markers[1].ends_with(" COMMIT marker (coordinator epoch 5)"),
        "{out}"
    );
    assert!(
        out.contains("producer_id=77 producer_epoch=2 base_sequence=0"),
        "the transaction's data batches: {out}"
    );
}
