//! Command line: parses arguments and dispatches; nothing else.

use replica_follower::checkpoint::TopicPartition;
use replica_follower::config::Config;
use replica_follower::logging::count;
use replica_follower::resolve::{Resolved, resolve};
use replica_follower::{daemon, inspect, logging};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// Shaped for `help2man` (tests/it/cli/man_page.rs builds systemd/replica-follower.1 from it):
/// `Usage:` and `or:` lines become the SYNOPSIS, `Commands:` and `Exit codes:` lists become
/// tagged paragraphs.
const USAGE: &str = "\
Usage: replica-follower run --config FILE
  or:  replica-follower status --data-dir DIR [--json]
  or:  replica-follower status --config FILE [--json]
  or:  replica-follower dump --data-dir DIR --topic T --partition P [--from OFFSET] [--to OFFSET] [--count N] [--records]
  or:  replica-follower offsets --data-dir DIR --topic T --partition P --time MS|-1|-2 [--max N]
  or:  replica-follower offsets --data-dir DIR --topic T --partition P --timestamp MS|RFC3339
  or:  replica-follower verify --data-dir DIR [--all] [--topic T [--partition P]]
  or:  replica-follower verify --config FILE [--against-leader | --all] [--topic T [--partition P]]
  or:  replica-follower repair --config FILE
  or:  replica-follower serve --data-dir DIR --listen ADDR [--advertised ADDR]
  or:  replica-follower serve --config FILE [--data-dir DIR] [--listen ADDR] [--advertised ADDR]
  or:  replica-follower check-config --config FILE
  or:  replica-follower add-user --users-file FILE --user NAME [--mechanism M]... [--iterations N] [--password-file F]
  or:  replica-follower restore prepare --data-dir DIR --bootstrap HOST:PORT --broker N --plan FILE [--topic T]... [--client-config FILE]
  or:  replica-follower restore write --data-dir DIR --plan FILE --log-dir KAFKA_LOG_DIR
  or:  replica-follower restore finish --data-dir DIR --plan FILE --bootstrap HOST:PORT [--client-config FILE]
  or:  replica-follower offsite restore --config FILE --to DIR [--topic T]... [--cluster ID]
  or:  replica-follower offsite verify --config FILE
Keeps an exact, crash-safe local replica of Kafka topic-partitions in Kafka's on-disk format,
and can serve it back over the Kafka protocol.

Commands:
  run           the daemon, in the foreground: follow the leaders, write the replica
  status        each partition's offsets, segments, lag and state; read-only
  dump          the batches and records of an offset range of one partition
  offsets       the offset for a time: from segment times, or by record timestamp
  verify        check CRCs, offsets, indexes and checkpoints, or compare with the leaders
  repair        daemon stopped: re-fetch holes and damaged segments from the leaders
  serve         daemon stopped: serve the replica read-only over the Kafka protocol
  check-config  validate a configuration file
  add-user      write a user's SCRAM credentials into the serve listener's users file
  restore       give the replica back to an Apache Kafka cluster, offsets and groups kept
  offsite       the replica's copy in S3-compatible storage: rebuild a data dir, or compare

An archived history (a re-created topic's old data, `<topic>-<p>.<old id>.archived/`) is read
as topic `<topic>.<old id>.archived` by dump, offsets, verify --topic and serve; `status`
prints the name.

Exit codes:
  0  success
  1  runtime failure
  2  bad usage or bad configuration

Run `replica-follower COMMAND --help` for a command's details, and
`replica-follower --version` for the version.
";

fn help(cmd: &str) -> &'static str {
    match cmd {
        "run" => {
            "replica-follower run --config FILE\n\nRuns the daemon in the foreground. SIGTERM or SIGINT: stop fetching, flush, write\ncheckpoints, exit 0. SIGHUP: re-read FILE (partitions added to `follow` start, removed\nones stop; a broken file is refused and the running configuration stays). Exit 1 at start-up when the brokers report another cluster id\nthan the data dir recorded (nothing is changed), exit 2 on a bad config. Log level from\nRF_LOG (error|warn|info|debug).\n"
        }
        "status" => {
            "replica-follower status --data-dir DIR [--json]\nreplica-follower status --config FILE [--json]\n\nWith --config: that configuration's data dir, and the followed partitions (or topics)\nthat have no local log yet.\n\nPer partition: log start, log end, high watermark, last stable offset, recovery point,\nleader epoch, segments and bytes; ranges lost upstream and kept in diverged/; the\nsource cluster id and archived histories of re-created topics, each with the topic name\nit is read under (`<topic>.<old id>.archived`: give it to dump, offsets, verify --topic\nand Kafka clients of serve). Read-only; works while\nthe daemon runs, and then also says whether the leader answers metadata (`leader:`\nline: since when it does not, how many refreshes failed, the last error), the followed\ntopics missing on the leader and the followed partitions with no local log yet. Stopped\nuncleanly, the high watermark shown is the end of the whole, CRC-valid batches past each\nrecovery point (what serve serves and the next start keeps), and a tail past it that is\nnot whole batches is named.\n"
        }
        "dump" => {
            "replica-follower dump --data-dir DIR --topic T --partition P [--from OFFSET] [--to OFFSET]\n                      [--count N] [--records]\n\nPrints the batches holding an offset from --from (default 0) to --to (inclusive,\ndefault the log end), one line each: offsets, position, size, magic, leader epoch,\ncodec, record count, max timestamp and timestamp type (CreateTime/LogAppendTime),\ntransactional and control flags, producer id, epoch and base sequence, the marker of\na control batch, CRC status. Under each, the records in the range (offset, timestamp,\nkey, value, headers; a control record as `COMMIT marker` or `ABORT marker (coordinator\nepoch N)`): of uncompressed batches only, or with --records of every v2 batch,\ndecompressed (gzip, snappy, lz4, zstd; at most 64 MiB a batch).\nAn archived history (`<T>-<P>.<old id>.archived/`, see `status`) is read as topic\n`<T>.<old id>.archived`, partition P.\n--count N: at most N records with --records, at most N batches without.\nExit 1 when a damaged batch or tail was shown or records could not be decompressed or\ndecoded (`cannot …` lines name the segment and batch); 2 on a bad flag value.\n"
        }
        "offsets" => {
            "replica-follower offsets --data-dir DIR --topic T --partition P --time MS|-1|-2 [--max N]\nreplica-follower offsets --data-dir DIR --topic T --partition P --timestamp MS|RFC3339\n\n--time: Kafka's classic answer from segment times: offsets before time MS (-1 latest,\n-2 earliest) from the local log, one a line, newest first, at most N (default 1).\nNothing when no segment is as old as MS (Kafka's answer is empty then too).\n\n--timestamp: the modern ListOffsets answer by record timestamp: the first offset (at or\nafter the log start) whose record timestamp is at or after T, found through the time\nindex and decompressing batches as needed; T in ms since the epoch or an RFC 3339\ndate-time with a zone (2026-11-30T07:12:03Z). Prints `offset=O timestamp=MS (UTC)`,\nor a line starting `none:` with the log end when no record qualifies (Kafka answers\n-1). Exit 1 when a damaged batch lies where the answer is sought; 2 on a bad T.\n\nAn archived history (`<T>-<P>.<old id>.archived/`, see `status`) is read as topic\n`<T>.<old id>.archived`, partition P: its log start is its first segment, its end (and\nhigh watermark) its last batch.\n"
        }
        "verify" => {
            "replica-follower verify --data-dir DIR [--all] [--topic T [--partition P]]\nreplica-follower verify --config FILE [--against-leader | --all] [--topic T [--partition P]]\n\nWhile a daemon runs on the data dir, each partition is checked up to its checkpointed\nrecovery point (fsynced, so stable) and what lies past it is reported as in flight, so a\ncheck from a timer raises no false alarm. A replica stopped uncleanly (kill -9, power\nloss: no clean-shutdown marker) is checked whole below each recovery point and, past it,\nas the next start will judge it: whole, CRC-valid batches are kept, and a write torn by the\ncrash (one partial batch at the end of the segment being written) is reported as a `note:`\nline, not a problem, since the next start cuts it; other damage past a recovery point, and\nany below one, is a problem. --all checks every byte and counts a torn write as a problem.\nChecks every batch CRC and the offset order (gaps are fine, overlaps are not), every\nindex entry, .txnindex entries against the ABORT markers, partition.metadata,\nmeta.properties, the diverged/ copies, archived histories and the checkpoint files.\nExit 1 and one line per problem when anything is wrong. --config FILE: the data dir\nof that configuration.\n\n--topic T [--partition P]: only the partitions of topic T (only P), their logs and\ncheckpoint entries. An archived history is selected by the name `status` prints,\n`<topic>.<old id>.archived`. Exit 1 when nothing has that name.\n\n--against-leader (needs --config: its bootstrap brokers): instead compares each\nfollowed partition with a local log with its leader, over the offsets the leader still\nholds (its log start to min(its high watermark, the local log end)): batch offsets,\nCRC and leader epoch, and each local batch's own CRC. One line per hole (offsets the\nleader has and the replica lacks, with the segments before and after it), per damaged\nor differing batch, and, as `info`, per local batch the leader no longer has\n(compaction, retention: kept, not a failure) and per local batch a log cleaner\nrewrote (the leader's, or an earlier leader's before it was fetched: the same offsets,\nproducer and leader epoch, fewer records; kept as fetched, not a failure).\nA partition that cannot be compared (no leader,\nanother topic id, a leader answering no batch below its high watermark even when\nasked again) is named and is a failure. Read-only. Exit 0 when nothing is wrong,\n1 otherwise; `replica-follower repair` re-fetches what it names.\n"
        }
        "repair" => {
            "replica-follower repair --config FILE\n\nWith the daemon stopped (it takes the data-dir lock as `run` does), compares each\nfollowed partition with its leader as `verify --against-leader` does and re-fetches\nexactly what is missing or damaged: a hole becomes a segment of its own, named by its\nfirst offset; a segment with damaged or differing batches is rewritten from the\nleader's batches for its offset range (its old bytes kept in damaged/). Every fetched\nbatch is CRC-checked before it is written; files are written to a staging folder,\nfsynced and renamed into place; no other segment is touched. Prints one line per step.\nExit 0 when everything was repaired or nothing needed it, 1 when something could not\nbe (the leader no longer has it, the leader is unreachable, ...), 2 on a bad config.\n"
        }
        "serve" => {
            "replica-follower serve --data-dir DIR --listen HOST:PORT [--advertised HOST:PORT]\nreplica-follower serve --config FILE [--data-dir DIR] [--listen HOST:PORT] [--advertised HOST:PORT]\n\nServes the stopped replica in DIR as a read-only Kafka broker (node 0) until SIGTERM or\nSIGINT (exit 0): ApiVersions, Metadata, ListOffsets, Fetch and OffsetForLeaderEpoch, up\nto each partition's checkpointed high watermark; each archived history of a re-created\ntopic whole, as topic `<topic>.<old id>.archived` (the name `status` prints; hidden if\na live topic has that name). After an unclean stop (no clean-shutdown marker), each\npartition is served up to the end of the whole, CRC-valid batches past its recovery point,\nas the next start keeps them; it says once what it found there and never serves a torn\ntail. Takes the data-dir lock as `run` does\n(exit 1 while a daemon holds it) and changes nothing in DIR. --advertised: the address\nMetadata gives clients (default: the one listened on). Exit 1 when ADDR cannot be bound.\n--config FILE: the data dir and the whole [serve] section of that daemon configuration\n(listen, advertised, node_id, limits, protocol and TLS files); the flags given override\nit. Without TLS and SASL (serve.protocol = \"SASL_SSL\" in FILE, or SSL, or\nSASL_PLAINTEXT), listen on loopback or a trusted network.\n"
        }
        "check-config" => {
            "replica-follower check-config --config FILE\n\nValidates FILE; exit 2 with the key and line of the first problem. Then checks that\nthe user running it can create files in data_dir (or, when it does not exist yet, in the\nnearest existing directory above it, where `run` creates it) by creating and removing a\nfile `.check-config-<pid>.tmp` there; exit 1 when it cannot (a read-only file system,\nno permission). Run it as the service's user: as root it says nothing of that user.\n"
        }
        "add-user" => {
            "replica-follower add-user --users-file FILE --user NAME [--mechanism SCRAM-SHA-256|SCRAM-SHA-512]...\n                          [--iterations N] [--password-file F]\n\nWrites NAME's SCRAM credentials (a fresh salt, the stored and server keys: never the\npassword) into the serve listener's users file FILE (`[serve] sasl_users_file`), created\nif missing, replacing NAME's entry for each mechanism. The file is rewritten atomically\nwith mode 0600. PLAIN logins are checked against these entries.\n--mechanism: repeatable (default both). --iterations: 4096 to 16384 (default 8192).\nThe password is the first line of F (which must be readable by its owner only), or,\nwithout --password-file, the first line of standard input; never an argument.\nExit 2 on a bad flag or an empty password, 1 when FILE cannot be read or written.\n"
        }
        "restore prepare" => {
            "replica-follower restore prepare --data-dir DIR --bootstrap HOST:PORT --broker N --plan FILE\n                                 [--topic T]... [--client-config FILE]\n\nThe first step of a restore into an Apache Kafka cluster, which must be up. For each\ntopic the replica in DIR holds (only those --topic names, when given): creates it on the\ntarget when missing, with the archived partition count and topic-level configs and\nevery partition's one replica on broker N; accepts one that exists only with that\npartition count, led by broker N and empty. Refuses (exit 1, nothing created past that\npoint) a topic that exists with data, with another partition count or on another\nbroker. Waits until broker N answers for every partition, then writes the plan FILE:\nthe target's cluster id, broker N, each partition's topic id there and the archive's\noffset range. Next: stop broker N and run `restore write`.\n--bootstrap: comma-separated host:port of the target. --client-config FILE: a TOML file\nwith a [security] table, the keys of the daemon's [security], for a secured target (a\nbad one: exit 2).\n"
        }
        "restore finish" => {
            "replica-follower restore finish --data-dir DIR --plan FILE --bootstrap HOST:PORT [--client-config FILE]\n\nThe last step of a restore, with the plan's broker running again: checks every\npartition's log start and end on the target against the archive (nothing else is done\nwhen one differs); aborts the transactions the archive left open, so read_committed\nconsumers are not held at them; takes producer ids from every broker until each hands\nout one above the restored producers' ids; commits each archived consumer group's\noffsets of the planned partitions, for groups with no other offsets on the target.\nPrints a report; exit 0 only when everything matched and was done, 1 otherwise. May be\nrun again. --client-config FILE: as for `restore prepare`.\n"
        }
        "restore" => {
            "replica-follower restore prepare --data-dir DIR --bootstrap HOST:PORT --broker N --plan FILE\n                                 [--topic T]... [--client-config FILE]\nreplica-follower restore write --data-dir DIR --plan FILE --log-dir KAFKA_LOG_DIR\nreplica-follower restore finish --data-dir DIR --plan FILE --bootstrap HOST:PORT [--client-config FILE]\n\nGives the replica in DIR back to an Apache Kafka cluster with the same offsets, the\narchived consumer-group offsets ([groups]) and topic configs, in three steps:\n  prepare  the target up: create the topics on broker N, write the plan FILE;\n  write    broker N stopped: fill its log dir KAFKA_LOG_DIR from the replica;\n  finish   broker N started: check every partition, abort open transactions, move\n           producer ids past the restored ones, commit the groups' offsets.\nEach checks before it writes and may be run again. `replica-follower restore STEP --help`\ntells each step's details.\n"
        }
        "offsite" => {
            "replica-follower offsite restore --config FILE --to DIR [--topic T]... [--cluster ID]\nreplica-follower offsite verify --config FILE\n\nThe daemon copies the replica to the S3-compatible store of the configuration's\n[offsite] section. These commands read that copy:\n  restore  rebuild a data dir from it, when the local one is lost;\n  verify   compare the local replica with it, naming every difference.\n`replica-follower offsite STEP --help` tells each one's details.\n"
        }
        "offsite restore" => {
            "replica-follower offsite restore --config FILE --to DIR [--topic T]... [--cluster ID]\n\nRebuilds a data dir in DIR (missing or empty) from the copy in the store of FILE's\n[offsite] section: every partition history's segments byte for byte (those local\nretention had deleted too), their indexes, leader epochs, topic and cluster ids, the\nranges lost upstream, the diverged/ and damaged/ copies, archived histories, and the\ncheckpoints. Each object is authenticated (or CRC-checked) and each batch's CRC\nverified before a byte is written; each partition directory is made aside, fsynced and\nrenamed into place. `verify` passes on the result, and `run` resumes on it (point\ndata_dir at it). --topic: only these topics. --cluster: which source cluster, when the\nbucket holds several. Encrypted objects need offsite.encryption_key_file set to the key\nthey were written with; without it, or with another key, nothing is written (exit 2).\nExit 1 on any other failure: partitions are renamed into place whole (one being made is\nunder .NAME.creating/) and meta.properties is written last; empty DIR and run again.\n"
        }
        "offsite verify" => {
            "replica-follower offsite verify --config FILE\n\nCompares the replica in FILE's data_dir with its copy in the [offsite] store: fetches\nevery object the newest manifests name, checks it, and compares it with the local bytes.\nPrints one line per difference (a segment, index or copy that differs or is missing on\neither side, an object that fails its check) and a `pending` line for local bytes the\ndaemon has not uploaded yet (not a difference). Exit 0 when there is no difference, 1\notherwise. May run beside the daemon.\n"
        }
        "restore write" => {
            "replica-follower restore write --data-dir DIR --plan FILE --log-dir KAFKA_LOG_DIR\n\nWith the plan's broker stopped: fills the partition directories of its log dir\nKAFKA_LOG_DIR from the replica in DIR, so that the broker loads them as its own when it\nstarts. Refuses (exit 1, nothing written) a log dir whose meta.properties names another\ncluster or broker than the plan, one whose .lock a running broker holds, a replica of\nanother cluster than the plan's source, and a partition whose directory is missing,\nholds another topic id or holds data the archive does not have; a segment in place with\nother bytes than the archive's is refused when reached (the partitions before it stay\nwritten). Run it as root or as the broker's user: what it creates gets the log dir's owner. Each batch is CRC-checked and written with partition leader epoch 0; segments go\nthrough .tmp files, fsynced and renamed; Kafka's indexes and producer snapshots of those\npartitions are removed, so the broker rebuilds them from the segments. Idempotent: after\na crash, run it again. No partition outside the plan is touched. Prints one line per\npartition.\n"
        }
        _ => USAGE,
    }
}

struct Args {
    cmd: String,
    values: HashMap<String, String>,
    /// Every value of a repeatable option, in order.
    lists: HashMap<String, Vec<String>>,
    flags: Vec<String>,
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("error: {msg}\n\n{USAGE}");
    ExitCode::from(2)
}

/// The options a subcommand takes: those with one value, those that may be given more than
/// once, and flags.
struct Spec {
    values: &'static [&'static str],
    repeatable: &'static [&'static str],
    flags: &'static [&'static str],
}

fn parse(argv: Vec<String>, spec: &Spec) -> Result<Args, String> {
    let (allowed_values, allowed_flags) = (spec.values, spec.flags);
    let mut it = argv.into_iter();
    let cmd = it.next().unwrap_or_default();
    let mut values = HashMap::new();
    let mut lists: HashMap<String, Vec<String>> = HashMap::new();
    let mut flags = Vec::new();
    while let Some(a) = it.next() {
        let Some(name) = a.strip_prefix("--") else {
            return Err(format!("unexpected argument `{a}`"));
        };
        let (name, inline) = match name.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (name.to_string(), None),
        };
        if allowed_flags.contains(&name.as_str()) {
            flags.push(name);
        } else if spec.repeatable.contains(&name.as_str()) {
            let v = match inline {
                Some(v) => v,
                None => it.next().ok_or_else(|| format!("--{name} needs a value"))?,
            };
            lists.entry(name).or_default().push(v);
        } else if allowed_values.contains(&name.as_str()) {
            let v = match inline {
                Some(v) => v,
                None => it.next().ok_or_else(|| format!("--{name} needs a value"))?,
            };
            if values.insert(name.clone(), v).is_some() {
                return Err(format!("--{name} given twice"));
            }
        } else {
            return Err(format!("unknown option --{name} for `{cmd}`"));
        }
    }
    Ok(Args {
        cmd,
        values,
        lists,
        flags,
    })
}

impl Args {
    fn req(&self, name: &str) -> Result<&str, String> {
        self.values
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| format!("`{}` needs --{name}", self.cmd))
    }
    fn num<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, String> {
        self.values
            .get(name)
            .map(|v| {
                v.parse::<T>()
                    .map_err(|_| format!("--{name}: `{v}` is not a valid number"))
            })
            .transpose()
    }
    fn tp(&self) -> Result<TopicPartition, String> {
        let topic = self.req("topic")?.to_string();
        let partition = self
            .num::<i32>("partition")?
            .ok_or_else(|| format!("`{}` needs --partition", self.cmd))?;
        if partition < 0 {
            return Err("--partition must be ≥ 0".into());
        }
        Ok(TopicPartition::new(topic, partition))
    }
}

fn runtime(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", logging::plain_chain(&e));
            ExitCode::from(1)
        }
    }
}

fn main() -> ExitCode {
    logging::init_from_env();
    // Read once, before anything opens a file: budgets are made from it, messages name it.
    replica_follower::log::resources::descriptors::remember_limit_at_start();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = argv.first().cloned() else {
        return usage_error("no command given");
    };
    if cmd == "--version" || cmd == "-V" {
        println!("replica-follower {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    if cmd == "--help" || cmd == "-h" || cmd == "help" {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    // `restore STEP ...` is the command `restore STEP`.
    let (cmd, argv) = match (cmd.as_str(), argv.get(1)) {
        ("restore" | "offsite", Some(step)) if !step.starts_with('-') => {
            let cmd = format!("{cmd} {step}");
            let rest = argv.into_iter().skip(2);
            (cmd.clone(), std::iter::once(cmd).chain(rest).collect())
        }
        _ => (cmd, argv),
    };
    if argv.iter().skip(1).any(|a| a == "--help" || a == "-h") {
        print!("{}", help(&cmd));
        return ExitCode::SUCCESS;
    }
    let spec = |values, flags| Spec {
        values,
        repeatable: &[],
        flags,
    };
    let spec = match cmd.as_str() {
        "run" | "check-config" => spec(&["config"], &[]),
        "status" => spec(&["data-dir", "config"], &["json"]),
        "dump" => spec(
            &["data-dir", "topic", "partition", "from", "to", "count"],
            &["records"],
        ),
        "offsets" => spec(
            &["data-dir", "topic", "partition", "time", "max", "timestamp"],
            &[],
        ),
        "verify" => spec(
            &["data-dir", "config", "topic", "partition"],
            &["against-leader", "all"],
        ),
        "repair" => spec(&["config"], &[]),
        "serve" => spec(&["data-dir", "listen", "advertised", "config"], &[]),
        "add-user" => Spec {
            values: &["users-file", "user", "iterations", "password-file"],
            repeatable: &["mechanism"],
            flags: &[],
        },
        "restore prepare" => Spec {
            values: &["data-dir", "bootstrap", "broker", "plan", "client-config"],
            repeatable: &["topic"],
            flags: &[],
        },
        "restore write" => spec(&["data-dir", "plan", "log-dir"], &[]),
        "restore finish" => spec(&["data-dir", "plan", "bootstrap", "client-config"], &[]),
        "restore" => return usage_error("`restore` needs a step: prepare, write or finish"),
        "offsite restore" => Spec {
            values: &["config", "to", "cluster"],
            repeatable: &["topic"],
            flags: &[],
        },
        "offsite verify" => spec(&["config"], &[]),
        "offsite" => return usage_error("`offsite` needs a step: restore or verify"),
        other if let Some(step) = other.strip_prefix("offsite ") => {
            return usage_error(&format!("unknown offsite step `{step}` (restore, verify)"));
        }
        other if let Some(step) = other.strip_prefix("restore ") => {
            return usage_error(&format!(
                "unknown restore step `{step}` (prepare, write, finish)"
            ));
        }
        other => return usage_error(&format!("unknown command `{other}`")),
    };
    let args = match parse(argv, &spec) {
        Ok(a) => a,
        Err(e) => return usage_error(&e),
    };
    match dispatch(&args) {
        Ok(code) => code,
        Err(e) => usage_error(&e),
    }
}

/// The configuration `--config` names, resolved: an error in either is printed, exit 2.
fn load_config(args: &Args) -> Result<Result<(Config, Resolved), ExitCode>, String> {
    let path = PathBuf::from(args.req("config")?);
    let loaded = Config::load(&path).and_then(|cfg| Ok((resolve(&cfg)?, cfg)));
    Ok(loaded.map(|(parts, cfg)| (cfg, parts)).map_err(|e| {
        eprintln!("error: {}", logging::plain_chain(&e));
        ExitCode::from(2)
    }))
}

fn dispatch(args: &Args) -> Result<ExitCode, String> {
    match args.cmd.as_str() {
        "check-config" => check_config(args),
        "run" => run(args),
        "status" => status(args),
        "dump" => dump(args),
        "offsets" => offsets(args),
        "verify" => verify(args),
        "repair" => repair(args),
        "serve" => serve(args),
        "add-user" => add_user(args),
        "restore prepare" => restore_prepare(args),
        "restore write" => restore_write(args),
        "restore finish" => restore_finish(args),
        "offsite restore" => offsite_restore(args),
        "offsite verify" => offsite_verify(args),
        other => Err(format!("unknown command `{other}`")),
    }
}

/// `check-config`: the configuration and resolved parts are valid, and the data dir writable.
fn check_config(args: &Args) -> Result<ExitCode, String> {
    Ok(match load_config(args)? {
        Ok((cfg, parts)) => {
            let file = args.req("config")?;
            match replica_follower::log::manager::check_writable(&cfg.data_dir) {
                Ok(created_in) => {
                    let created_in = created_in
                        .map(|p| format!(" (to be created in `{}`)", p.display()))
                        .unwrap_or_default();
                    println!(
                        "{file}: ok ({}, data dir `{}`{created_in} writable by this user)",
                        count(cfg.follow.len(), "topic", "topics"),
                        cfg.data_dir.display()
                    );
                    if let Some(o) = &parts.offsite {
                        println!(
                            "{file}: [offsite] copies to {} under prefix `{}`, {} (credentials and key read; the store is not contacted: `offsite verify` does)",
                            o.location,
                            o.prefix,
                            if o.key.is_some() {
                                "encrypted"
                            } else {
                                "NOT encrypted (offsite.encryption_key_file is not set)"
                            }
                        );
                    }
                    ExitCode::SUCCESS
                }
                // What `run` would meet at start: a runtime failure, exit 1 as there.
                Err(e) => {
                    eprintln!(
                        "error: {file}: key `data_dir`: {}",
                        logging::plain_chain(&e)
                    );
                    ExitCode::from(1)
                }
            }
        }
        Err(code) => code,
    })
}

/// `run`: the daemon, until a signal stops it.
fn run(args: &Args) -> Result<ExitCode, String> {
    Ok(match load_config(args)? {
        Ok((cfg, parts)) => runtime(daemon::run(
            cfg,
            parts,
            Some(PathBuf::from(args.req("config")?)),
        )),
        Err(code) => code,
    })
}

/// `status`: what the data dir holds and, while a daemon runs, how it follows.
fn status(args: &Args) -> Result<ExitCode, String> {
    let (dir, follow) = match (args.values.get("data-dir"), args.values.get("config")) {
        (Some(_), Some(_)) => {
            return Err("`status` takes --data-dir or --config, not both".into());
        }
        (Some(d), None) => (PathBuf::from(d), Vec::new()),
        (None, Some(_)) => match load_config(args)? {
            Err(code) => return Ok(code),
            Ok((cfg, _)) => (cfg.data_dir, cfg.follow),
        },
        (None, None) => return Err("`status` needs --data-dir DIR or --config FILE".into()),
    };
    let json = args.flags.iter().any(|f| f == "json");
    // A configuration not yet run has no data dir: every followed partition is
    // without a log, which is what status says then.
    let collected = if !follow.is_empty() && !dir.exists() {
        Ok((Vec::new(), Vec::new()))
    } else {
        inspect::status::collect(&dir)
    };
    Ok(runtime(collected.map(|(mut parts, mut notes)| {
        let mut dd = inspect::status::collect_data_dir(&dir, &mut notes);
        inspect::status::apply_live(&dd, &mut parts);
        dd.not_yet = inspect::status::not_yet(&dd, &follow, &parts);
        for n in notes {
            eprintln!("warning: {n}");
        }
        let text = if json {
            format!("{}\n", inspect::status::render_json(&dd, &parts))
        } else {
            inspect::status::render_text(&dd, &parts)
        };
        // The reader went away (`status | head`): not an error, and no panic.
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush())
            && e.kind() != std::io::ErrorKind::BrokenPipe
        {
            eprintln!("error: cannot write the status: {e}");
        }
    })))
}

/// `dump`: the batches and records of one partition.
fn dump(args: &Args) -> Result<ExitCode, String> {
    let dir = PathBuf::from(args.req("data-dir")?);
    let tp = args.tp()?;
    let from = args.num::<i64>("from")?.unwrap_or(0);
    if from < 0 {
        return Err("--from must be an offset ≥ 0".into());
    }
    let to = args.num::<i64>("to")?.unwrap_or(i64::MAX);
    if to < from {
        return Err(format!("--to {to} is below --from {from}"));
    }
    let count = args.num::<u64>("count")?.unwrap_or(u64::MAX);
    if count == 0 {
        return Err("--count must be ≥ 1".into());
    }
    let range = inspect::dump::DumpRange {
        from,
        to,
        count,
        records: args.flags.iter().any(|f| f == "records"),
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match inspect::dump::dump(&dir, &tp, range, &mut out) {
        Ok(s) => {
            if s.batches == 0 && s.log_end.is_some_and(|end| from >= end) {
                eprintln!(
                    "{tp}: offset {from} is at or past the log end {}",
                    s.log_end.unwrap_or(0)
                );
            }
            if s.unreadable > 0 {
                eprintln!(
                    "{tp}: the records of {} batch(es) could not be decompressed or decoded (see the `cannot` lines)",
                    s.unreadable
                );
            }
            if s.damaged > 0 {
                eprintln!(
                    "{tp}: {} damaged batch(es) or tail(s) shown; run `verify`",
                    s.damaged
                );
            }
            if s.damaged > 0 || s.unreadable > 0 {
                return Ok(ExitCode::from(1));
            }
            Ok(ExitCode::SUCCESS)
        }
        // The reader went away (`dump … | head`): not an error.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Ok(runtime(Err(e))),
    }
}

/// `offsets`: the offset for a time, from segment times or by record timestamp.
fn offsets(args: &Args) -> Result<ExitCode, String> {
    let dir = PathBuf::from(args.req("data-dir")?);
    let tp = args.tp()?;
    if let Some(t) = args.values.get("timestamp") {
        if args.values.contains_key("time") || args.values.contains_key("max") {
            return Err("--timestamp takes neither --time nor --max".into());
        }
        let target = replica_follower::config::parse_timestamp(t).ok_or_else(|| {
            format!("--timestamp: `{t}` is neither ms since the epoch (≥ 0) nor an RFC 3339 date-time with a zone (2026-11-30T07:12:03Z)")
        })?;
        let mut notes = Vec::new();
        let answer = inspect::offsets::offset_for_timestamp(&dir, &tp, target, &mut notes);
        for n in notes {
            eprintln!("warning: {n}");
        }
        let shown = |ms: i64| format!("{ms} ({})", logging::format_utc(ms));
        return Ok(runtime(answer.map(|a| match a {
            inspect::offsets::TimestampAnswer::Found { offset, timestamp } => {
                println!("offset={offset} timestamp={}", shown(timestamp))
            }
            inspect::offsets::TimestampAnswer::None { log_end } => println!(
                "none: no record has a timestamp at or after {}; the log end is {log_end} (Kafka's ListOffsets answers offset -1)",
                shown(target)
            ),
        })));
    }
    let time = args
        .num::<i64>("time")?
        .ok_or("`offsets` needs --time or --timestamp")?;
    if time < -2 {
        return Err("--time must be -1, -2 or a timestamp in ms".into());
    }
    let max = args.num::<usize>("max")?.unwrap_or(1);
    // As `dump --count 0`: an answer that can only be empty is a mistake.
    if max == 0 {
        return Err("--max must be ≥ 1".into());
    }
    Ok(runtime(
        inspect::offsets::offsets(&dir, &tp, time, max).map(|offs| {
            for o in offs {
                println!("{o}");
            }
        }),
    ))
}

/// `verify`: the data dir checked whole, or with `--against-leader` compared with the leader.
fn verify(args: &Args) -> Result<ExitCode, String> {
    let against_leader = args.flags.iter().any(|f| f == "against-leader");
    if against_leader && args.values.contains_key("topic") {
        return Err(
            "--against-leader compares every followed partition; it takes no --topic".into(),
        );
    }
    let dir = match (args.values.get("data-dir"), args.values.get("config")) {
        (Some(_), Some(_)) => {
            return Err("`verify` takes --data-dir or --config, not both".into());
        }
        (None, None) => return Err("`verify` needs --data-dir DIR or --config FILE".into()),
        (Some(_), None) if against_leader => {
            return Err("--against-leader needs --config FILE (its brokers are asked)".into());
        }
        (Some(dir), None) => PathBuf::from(dir),
        (None, Some(_)) => match load_config(args)? {
            Err(code) => return Ok(code),
            Ok((cfg, _)) if against_leader => return Ok(verify_against_leader(&cfg)),
            Ok((cfg, _)) => cfg.data_dir,
        },
    };
    let all = args.flags.iter().any(|f| f == "all");
    let only = match (args.values.get("topic"), args.num::<i32>("partition")?) {
        (None, None) => None,
        (None, Some(_)) => return Err("--partition needs --topic".into()),
        (Some(_), Some(p)) if p < 0 => return Err("--partition must be ≥ 0".into()),
        (Some(t), partition) => Some(inspect::verify::Selection {
            topic: t.clone(),
            partition,
        }),
    };
    let verified = inspect::verify::verify_selected(&dir, all, only.as_ref());
    if let Ok(r) = &verified {
        for (tp, d) in r
            .unflushed
            .iter()
            .flat_map(|(tp, t)| t.damage.iter().filter(|d| d.torn).map(move |d| (tp, d)))
        {
            println!(
                "note: {tp}: not stopped cleanly: {} bytes from byte {} of `{}` are a write torn by the crash ({}), past the recovery point: the next start cuts them",
                d.bytes,
                d.position,
                d.log_path.display(),
                d.reason
            );
        }
    }
    match verified {
        Ok(r) if r.problems.is_empty() => {
            let histories = count(r.archived, "archived history", "archived histories");
            // Only archived histories selected (`--topic <topic>.<id>.archived`):
            // they are what was verified.
            let (what, archived) = if r.partitions == 0 && r.archived > 0 {
                (histories, String::new())
            } else if r.archived > 0 {
                (
                    count(r.partitions, "partition", "partitions"),
                    format!(" (segments and batches include {histories})"),
                )
            } else {
                (
                    count(r.partitions, "partition", "partitions"),
                    String::new(),
                )
            };
            let in_flight = if r.in_flight_bytes > 0 {
                format!(
                    "; {} past the recovery points are being written and were not checked (--all checks them)",
                    count(r.in_flight_bytes, "byte", "bytes")
                )
            } else {
                String::new()
            };
            let tail_batches: usize = r.unflushed.iter().map(|(_, t)| t.valid_batches).sum();
            let unflushed = if tail_batches == 0 {
                String::new()
            } else {
                format!(
                    "; not stopped cleanly: {} past the recovery points are whole and CRC-valid and the next start keeps them (--all counts a torn tail as a problem)",
                    count(tail_batches, "batch", "batches")
                )
            };
            println!(
                "ok: {what}, {}, {} verified{archived}{in_flight}{unflushed}",
                count(r.segments, "segment", "segments"),
                count(r.batches, "batch", "batches")
            );
            Ok(ExitCode::SUCCESS)
        }
        Ok(r) => {
            for p in &r.problems {
                println!("{p}");
            }
            Ok(ExitCode::from(1))
        }
        Err(e) => Ok(runtime(Err(e))),
    }
}

/// `repair`: damaged or missing ranges fetched again from the leader.
fn repair(args: &Args) -> Result<ExitCode, String> {
    Ok(match load_config(args)? {
        Ok((cfg, _)) => {
            let stdout = std::io::stdout();
            match daemon::repair(&cfg, &mut stdout.lock()) {
                Ok(s) => {
                    println!(
                        "{} partition(s) compared: {} hole(s) filled, {} segment(s) rewritten, {} left unrepaired",
                        s.partitions, s.holes_filled, s.segments_rewritten, s.unrepaired
                    );
                    if s.unrepaired == 0 {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    }
                }
                Err(e) => runtime(Err(e)),
            }
        }
        Err(code) => code,
    })
}

/// The configuration's `[offsite]`, resolved; none is a bad configuration (exit 2).
fn offsite_config(
    args: &Args,
) -> Result<
    Result<
        (
            Config,
            std::sync::Arc<replica_follower::offsite::settings::Offsite>,
        ),
        ExitCode,
    >,
    String,
> {
    Ok(match load_config(args)? {
        Ok((cfg, parts)) => match parts.offsite {
            Some(o) => Ok((cfg, o)),
            None => {
                eprintln!(
                    "error: {}: no [offsite] section: nothing says where the copy is",
                    args.req("config")?
                );
                Err(ExitCode::from(2))
            }
        },
        Err(code) => Err(code),
    })
}

/// `offsite restore`: a data dir rebuilt from the bucket.
fn offsite_restore(args: &Args) -> Result<ExitCode, String> {
    let to = PathBuf::from(args.req("to")?);
    let topics = args.lists.get("topic").cloned().unwrap_or_default();
    let (cfg, o) = match offsite_config(args)? {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    logging::quiet_unless_asked();
    let stdout = std::io::stdout();
    let result = replica_follower::offsite::restore::restore(
        &o,
        &replica_follower::offsite::restore::RestoreOptions {
            to: &to,
            topics: &topics,
            cluster: args.values.get("cluster").map(String::as_str),
            index_interval_bytes: cfg.log.index_interval_bytes,
        },
        &mut stdout.lock(),
    );
    Ok(match result {
        Err(e) if replica_follower::offsite::restore::is_key_error(&e) => {
            eprintln!("error: {}", logging::plain_chain(&e));
            ExitCode::from(2)
        }
        other => runtime(other),
    })
}

/// `offsite verify`: the local replica against the bucket.
fn offsite_verify(args: &Args) -> Result<ExitCode, String> {
    let (cfg, o) = match offsite_config(args)? {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    let stdout = std::io::stdout();
    let result = replica_follower::offsite::verify::verify(&o, &cfg.data_dir, &mut stdout.lock());
    Ok(match result {
        Ok(outcome) if outcome.differences == 0 => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) if replica_follower::offsite::restore::is_key_error(&e) => {
            eprintln!("error: {}", logging::plain_chain(&e));
            ExitCode::from(2)
        }
        Err(e) => runtime(Err(e)),
    })
}

/// `--bootstrap` and `--client-config`: the target of a restore; a bad client config is a
/// bad configuration (printed, exit 2).
fn restore_target(
    args: &Args,
) -> Result<Result<replica_follower::restore::Target, ExitCode>, String> {
    let bootstrap = args.req("bootstrap")?;
    let client_config = args.values.get("client-config").map(PathBuf::from);
    Ok(
        replica_follower::restore::Target::new(bootstrap, client_config.as_deref()).map_err(|e| {
            eprintln!("error: {}", logging::plain_chain(&e));
            ExitCode::from(2)
        }),
    )
}

/// `restore prepare`: the topics on the target, and the plan.
fn restore_prepare(args: &Args) -> Result<ExitCode, String> {
    let data_dir = PathBuf::from(args.req("data-dir")?);
    let plan = PathBuf::from(args.req("plan")?);
    let broker = args
        .num::<i32>("broker")?
        .ok_or("`restore prepare` needs --broker")?;
    if broker < 0 {
        return Err("--broker must be ≥ 0".into());
    }
    let topics = args.lists.get("topic").cloned().unwrap_or_default();
    let target = match restore_target(args)? {
        Ok(t) => t,
        Err(code) => return Ok(code),
    };
    let stdout = std::io::stdout();
    Ok(runtime(
        replica_follower::restore::prepare::prepare(
            &data_dir,
            &target,
            broker,
            &plan,
            &topics,
            &mut stdout.lock(),
        )
        .map(drop),
    ))
}

/// `restore finish`: checks, open transactions, producer ids, group offsets.
fn restore_finish(args: &Args) -> Result<ExitCode, String> {
    let data_dir = PathBuf::from(args.req("data-dir")?);
    let plan = PathBuf::from(args.req("plan")?);
    let target = match restore_target(args)? {
        Ok(t) => t,
        Err(code) => return Ok(code),
    };
    let stdout = std::io::stdout();
    let result =
        replica_follower::restore::finish::finish(&data_dir, &target, &plan, &mut stdout.lock());
    Ok(match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => runtime(Err(e)),
    })
}

/// `restore write`: the archive into a stopped broker's log dir.
fn restore_write(args: &Args) -> Result<ExitCode, String> {
    let data_dir = PathBuf::from(args.req("data-dir")?);
    let plan = PathBuf::from(args.req("plan")?);
    let log_dir = PathBuf::from(args.req("log-dir")?);
    Ok(runtime((|| {
        use replica_follower::restore::{plan::Plan, write};
        let plan = Plan::read(&plan)?;
        for w in write::write(&data_dir, &plan, &log_dir)? {
            println!(
                "{}-{}: {} segment(s), {} batch(es), {} bytes{}",
                w.tp.topic,
                w.tp.partition,
                w.segments,
                w.batches,
                w.bytes,
                if w.kept > 0 {
                    format!(" ({} already in place)", w.kept)
                } else {
                    String::new()
                }
            );
        }
        println!(
            "written: start broker {} now; it rebuilds the indexes and producer state of these partitions as it loads them, then run `restore finish`",
            plan.broker
        );
        Ok(())
    })()))
}

/// `serve`: the replica answered over the Kafka protocol.
fn serve(args: &Args) -> Result<ExitCode, String> {
    // --config: that daemon's data dir and [serve] section; the flags override them.
    let (mut section, config_dir, security) = match args.values.get("config") {
        None => (
            replica_follower::config::ServeSection::default(),
            None,
            replica_follower::security::ListenerSecurity::default(),
        ),
        Some(_) => match load_config(args)? {
            Err(code) => return Ok(code),
            Ok((cfg, parts)) => (cfg.serve, Some(cfg.data_dir), parts.listener),
        },
    };
    let dir = match (args.values.get("data-dir"), config_dir) {
        (Some(d), _) => PathBuf::from(d),
        (None, Some(d)) => d,
        (None, None) => return Err("`serve` needs --data-dir DIR or --config FILE".into()),
    };
    if let Some(l) = args.values.get("listen") {
        section.listen = Some(l.clone());
    }
    if let Some(a) = args.values.get("advertised") {
        section.advertised = Some(a.clone());
    }
    let opts = match replica_follower::serve::ServeOptions::from_section(&section, security) {
        Ok(Some(o)) => o,
        Ok(None) => {
            return Err("`serve` needs --listen ADDR (or serve.listen in --config)".into());
        }
        Err(e) => {
            eprintln!("error: {}", logging::plain_chain(&e));
            return Ok(ExitCode::from(2));
        }
    };
    Ok(runtime(daemon::serve(&dir, opts)))
}

/// `add-user`: usage errors (exit 2) for bad flags, a bad password file or an empty
/// password; 1 when the users file cannot be read or written. The password is never shown.
fn add_user(args: &Args) -> Result<ExitCode, String> {
    use replica_follower::security::SaslMechanism;
    use replica_follower::security::{scram, users};
    let file = PathBuf::from(args.req("users-file")?);
    let user = args.req("user")?;
    if let Some(why) = users::invalid_user_name(user) {
        return Err(format!("--user: the name {why}"));
    }
    let mut mechanisms = Vec::new();
    for m in args.lists.get("mechanism").into_iter().flatten() {
        match SaslMechanism::from_name(m) {
            Some(mech) if mech != SaslMechanism::Plain => {
                if !mechanisms.contains(&mech) {
                    mechanisms.push(mech);
                }
            }
            _ => {
                return Err(format!(
                    "--mechanism: `{m}` is not SCRAM-SHA-256 or SCRAM-SHA-512 (PLAIN is checked against those)"
                ));
            }
        }
    }
    if mechanisms.is_empty() {
        mechanisms = vec![SaslMechanism::ScramSha256, SaslMechanism::ScramSha512];
    }
    let iterations = args
        .num::<u32>("iterations")?
        .unwrap_or(replica_follower::security::scram::DEFAULT_ITERATIONS);
    if !(scram::MIN_ITERATIONS..=scram::MAX_ITERATIONS).contains(&iterations) {
        return Err(format!(
            "--iterations must be between {} and {}",
            scram::MIN_ITERATIONS,
            scram::MAX_ITERATIONS
        ));
    }
    let password = match args.values.get("password-file") {
        Some(f) => replica_follower::security::read_secret(std::path::Path::new(f))
            .map_err(|e| format!("--password-file: {}", logging::plain_chain(&e)))?,
        None => {
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .map_err(|e| format!("cannot read the password from standard input: {e}"))?;
            let line = line.trim_end_matches(['\n', '\r']).to_string();
            if line.is_empty() {
                return Err(
                    "no password: give --password-file F or the password as the first line of standard input".into(),
                );
            }
            line
        }
    };
    let names: Vec<&str> = mechanisms.iter().map(|m| m.name()).collect();
    Ok(runtime(
        users::Users::add(&file, user, &mechanisms, &password, iterations).map(|()| {
            println!(
                "{}: user `{user}` set for {} ({iterations} iterations)",
                file.display(),
                names.join(", ")
            )
        }),
    ))
}

/// `verify --config FILE --against-leader`: 0 when nothing is wrong, 1 otherwise.
fn verify_against_leader(cfg: &Config) -> ExitCode {
    let stdout = std::io::stdout();
    match inspect::against_leader::verify(cfg, &mut stdout.lock()) {
        Ok(r) if r.problems == 0 => {
            println!("ok: {} partition(s) match their leader", r.partitions);
            ExitCode::SUCCESS
        }
        Ok(r) => {
            println!(
                "{} problem(s) found against the leader in {} partition(s) compared",
                r.problems, r.partitions
            );
            ExitCode::from(1)
        }
        Err(e) => runtime(Err(e)),
    }
}
