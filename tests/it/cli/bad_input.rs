//! Every row of the README's "Bad input and what it says": each bad input is run against the
//! real binary, and its exit code and message are the ones that row gives. The expectations
//! are read from the README itself, so a row without a case here, or a case without a row,
//! fails this test: the list and the program cannot drift apart.

use crate::support;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The offsite credentials the environment may give, and systemd's credentials folder: the
/// cases run without them, so that what they test is the configuration's.
const CREDENTIAL_ENV: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "CREDENTIALS_DIRECTORY",
];

/// Runs the binary with `args`, without [`CREDENTIAL_ENV`]: (exit code, stdout, stderr).
fn run(args: &[&str]) -> (Option<i32>, String, String) {
    run_with(args, &[])
}

fn run_with(args: &[&str], env: &[(&str, &Path)]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(support::bin());
    for var in CREDENTIAL_ENV {
        cmd.env_remove(var);
    }
    let out = cmd
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run binary");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The heading of the README section this test holds the program to.
const SECTION: &str = "#### Bad input and what it says";

/// One README row: its exit code, its message (placeholders `FILE`, `DIR`, `KEYFILE`, `CMD`,
/// `PID`, `line N` not yet filled in) and where the message goes.
struct Row {
    name: String,
    exit: i32,
    message: String,
    on_stdout: bool,
}

fn readme_rows() -> Vec<Row> {
    let readme = std::fs::read_to_string(support::manifest_dir().join("README.md")).unwrap();
    let start = readme
        .find(SECTION)
        .expect("README has the bad-input section");
    let table = readme[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2); // the header and its separator
    table
        .map(|l| {
            let cols: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            let [name, exit, message] = cols[..] else {
                panic!("README row is not `| input | exit | message |`: {l}");
            };
            let (Some(open), Some(close)) = (message.find('"'), message.rfind('"')) else {
                panic!("README row quotes no message: {l}");
            };
            Row {
                name: name.to_string(),
                exit: exit.parse().unwrap_or_else(|_| panic!("exit code in {l}")),
                message: message[open + 1..close].to_string(),
                on_stdout: message[..open].contains("stdout"),
            }
        })
        .collect()
}

/// What one case runs: one or more command lines, each expected to give the row's exit code
/// and message, with the paths `FILE` and `DIR` and the line `N` stand for.
struct Setup {
    runs: Vec<Vec<String>>,
    file: PathBuf,
    dir: PathBuf,
    line: Option<usize>,
    /// The secret or key file the row's key names (`KEYFILE`).
    keyfile: Option<PathBuf>,
    /// Held while the case runs: the data-dir lock, as a running daemon holds it.
    _lock: Option<std::fs::File>,
}

/// The scratch directory of one case: `FILE` is `follower.toml` in it, `DIR` is `data`.
struct Scratch(tempfile::TempDir);

impl Scratch {
    fn file(&self) -> PathBuf {
        self.0.path().join("follower.toml")
    }
    fn dir(&self) -> PathBuf {
        self.0.path().join("data")
    }

    /// Runs each command line (split at spaces); `FILE` and `DIR` in it become this case's
    /// paths.
    fn args(&self, runs: &[&str]) -> Setup {
        let (file, dir) = (self.file(), self.dir());
        let fill = |a: &str| match a {
            "FILE" => file.display().to_string(),
            "DIR" => dir.display().to_string(),
            a => a.to_string(),
        };
        Setup {
            runs: runs
                .iter()
                .map(|r| r.split_whitespace().map(fill).collect())
                .collect(),
            file: self.file(),
            dir: self.dir(),
            line: None,
            keyfile: None,
            _lock: None,
        }
    }

    /// A config with an `[offsite]` section whose credential and key files (mode 0600) are
    /// in `creds/`, after `spoil` changed them; `key` is the key whose line is `N` and whose
    /// file is `KEYFILE`.
    fn offsite(&self, key: &str, spoil: impl FnOnce(&Path)) -> Setup {
        let creds = self.0.path().join("creds");
        std::fs::create_dir(&creds).unwrap();
        for (name, text) in [
            ("access", "AKIDEXAMPLE\n"),
            ("secret", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\n"),
            ("key", &format!("{}\n", "0f".repeat(32))),
        ] {
            let p = creds.join(name);
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let section = format!(
            "[offsite]\nendpoint = \"http://127.0.0.1:1\"\nbucket = \"replica\"\n\
             access_key_file = \"{0}/access\"\nsecret_key_file = \"{0}/secret\"\n\
             encryption_key_file = \"{0}/key\"\n",
            creds.display()
        );
        spoil(&creds);
        let text = format!("{BASE}topic = \"orders\"\n{section}")
            .replace("DIR", &self.dir().display().to_string());
        let line = text
            .lines()
            .position(|l| l.starts_with(&format!("{key} = ")))
            .map(|i| i + 1);
        let keyfile = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key} = \"")))
            .map(|v| PathBuf::from(v.trim_end_matches('"')));
        Setup {
            keyfile,
            ..self.config_text(&text, line)
        }
    }

    /// A config with `[security]` over SSL: the test CA of a [`support::tls::Pki`] made in
    /// `pki/` (with its version 1 certificates), `ssl_cert_file` and `ssl_key_file` the files
    /// `cert` and `key` of it, after `make` added its own; `keyfile` is the key whose file
    /// is `KEYFILE`.
    fn tls(&self, keyfile: &str, cert: &str, key: &str, make: impl FnOnce(&Path)) -> Setup {
        let pki = support::tls::Pki::make(&self.0.path().join("pki"));
        pki.make_v1();
        make(&pki.dir);
        let section = format!(
            "[security]\nprotocol = \"SSL\"\nssl_ca_file = \"{}\"\nssl_cert_file = \"{}\"\nssl_key_file = \"{}\"\n",
            pki.path("ca.pem").display(),
            pki.path(cert).display(),
            pki.path(key).display()
        );
        let text = format!("{BASE}topic = \"orders\"\n{section}")
            .replace("DIR", &self.dir().display().to_string());
        let named = if keyfile == "security.ssl_cert_file" {
            cert
        } else {
            key
        };
        Setup {
            keyfile: Some(pki.path(named)),
            ..self.config_text(&text, None)
        }
    }

    /// `FILE` holding `text`, read by every command that takes `--config`.
    fn config_text(&self, text: &str, line: Option<usize>) -> Setup {
        std::fs::write(self.file(), text).unwrap();
        let mut s = self.args(&[
            "check-config --config FILE",
            "run --config FILE",
            "repair --config FILE",
            "status --config FILE",
            "verify --config FILE",
        ]);
        s.line = line;
        s
    }

    /// A valid config, its data dir at `dir`, and `runs` on it.
    fn valid_config(&self, dir: &Path, runs: &[&str]) -> Setup {
        let text = format!(
            "data_dir = \"{}\"\nbootstrap_servers = [\"127.0.0.1:1\"]\n[[follow]]\ntopic = \"orders\"\n",
            dir.display()
        );
        std::fs::write(self.file(), text).unwrap();
        Setup {
            dir: dir.to_path_buf(),
            ..self.args(runs)
        }
    }

    /// `runs` on `DIR` holding the given (relative path, bytes) files, or on no `DIR` at all.
    fn data_dir(&self, files: Option<&[(&str, &[u8])]>, runs: &[&str]) -> Setup {
        if let Some(files) = files {
            std::fs::create_dir(self.dir()).unwrap();
            for (path, bytes) in files {
                let p = self.dir().join(path);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, bytes).unwrap();
            }
        }
        self.args(runs)
    }

    /// `runs` while this process holds the data-dir lock a running daemon would hold.
    fn locked(&self, runs: &[&str]) -> Setup {
        use fs2::FileExt;
        std::fs::create_dir(self.dir()).unwrap();
        let lock = std::fs::File::create(self.dir().join(".lock")).unwrap();
        lock.try_lock_exclusive().unwrap();
        // As a holder does: its pid in the file, which the refusal names (`PID`).
        std::fs::write(
            self.dir().join(".lock"),
            format!("{}\n", std::process::id()),
        )
        .unwrap();
        Setup {
            _lock: Some(lock),
            ..self.valid_config(&self.dir(), runs)
        }
    }
}

/// Command-line cases: the row, and its command lines (split at spaces; `FILE` and `DIR`
/// become the case's paths), each refused before anything is read.
const USAGE_CASES: &[(&str, &[&str])] = &[
    ("no subcommand", &[""]),
    ("unknown subcommand (`frobnicate`)", &["frobnicate"]),
    ("`restore` without its step", &["restore"]),
    ("unknown `restore` step (`restore undo`)", &["restore undo"]),
    (
        "`restore prepare` without `--broker`",
        &["restore prepare --data-dir DIR --bootstrap 127.0.0.1:1 --plan DIR/plan"],
    ),
    (
        "`restore prepare` or `finish` with a `--client-config` that cannot be read (or is not a `[security]` table)",
        &[
            "restore prepare --data-dir DIR --bootstrap 127.0.0.1:1 --broker 1 --plan DIR/plan --client-config FILE",
            "restore finish --data-dir DIR --bootstrap 127.0.0.1:1 --plan DIR/plan --client-config FILE",
        ],
    ),
    (
        "unknown flag (`status --bogus`)",
        &["status --data-dir DIR --bogus"],
    ),
    (
        "flag without its value (`status --data-dir`)",
        &["status --data-dir"],
    ),
    (
        "flag given twice",
        &["status --data-dir DIR --data-dir DIR"],
    ),
    (
        "stray argument (`run follower.toml`)",
        &["run follower.toml"],
    ),
    ("required flag missing (`run`)", &["run"]),
    (
        "neither `--data-dir` nor `--config` (`status`, `verify`)",
        &["status", "verify --all"],
    ),
    (
        "`--partition` missing (`dump`, `offsets`)",
        &[
            "dump --data-dir DIR --topic t",
            "offsets --data-dir DIR --topic t --time -1",
        ],
    ),
    (
        "`--data-dir` and `--config` together (`status`, `verify`)",
        &[
            "status --data-dir DIR --config FILE",
            "verify --data-dir DIR --config FILE",
        ],
    ),
    (
        "`verify --against-leader` with `--data-dir`",
        &["verify --data-dir DIR --against-leader"],
    ),
    (
        "non-numeric `--partition`",
        &[
            "dump --data-dir DIR --topic t --partition zero",
            "offsets --data-dir DIR --topic t --partition zero --time -1",
        ],
    ),
    (
        "negative `--partition`",
        &["dump --data-dir DIR --topic t --partition -1"],
    ),
    (
        "non-numeric `--from`",
        &["dump --data-dir DIR --topic t --partition 0 --from abc"],
    ),
    (
        "negative `--from`",
        &["dump --data-dir DIR --topic t --partition 0 --from -5"],
    ),
    (
        "non-numeric `--time`",
        &["offsets --data-dir DIR --topic t --partition 0 --time now"],
    ),
    (
        "`--time` below -2",
        &["offsets --data-dir DIR --topic t --partition 0 --time -3"],
    ),
    (
        "non-numeric `--to`",
        &["dump --data-dir DIR --topic t --partition 0 --to x"],
    ),
    (
        "non-numeric `--count`",
        &["dump --data-dir DIR --topic t --partition 0 --count x"],
    ),
    (
        "`--to` below `--from`",
        &["dump --data-dir DIR --topic t --partition 0 --from 5 --to 2"],
    ),
    (
        "`--count 0`",
        &["dump --data-dir DIR --topic t --partition 0 --count 0"],
    ),
    (
        "`--max 0`",
        &["offsets --data-dir DIR --topic t --partition 0 --time -1 --max 0"],
    ),
    (
        "bad `--timestamp`",
        &["offsets --data-dir DIR --topic t --partition 0 --timestamp yesterday"],
    ),
    (
        "`--timestamp` with `--time` or `--max`",
        &[
            "offsets --data-dir DIR --topic t --partition 0 --timestamp 5 --time -1",
            "offsets --data-dir DIR --topic t --partition 0 --timestamp 5 --max 2",
        ],
    ),
    ("`serve` without `--listen`", &["serve --data-dir DIR"]),
    (
        "`add-user` without `--user`",
        &["add-user --users-file FILE"],
    ),
    (
        "`add-user --mechanism` other than SCRAM-SHA-256 or SCRAM-SHA-512 (`PLAIN`)",
        &["add-user --users-file FILE --user a --mechanism SCRAM-SHA-256 --mechanism PLAIN"],
    ),
    (
        "`add-user --iterations` outside 4096–16384",
        &[
            "add-user --users-file FILE --user a --iterations 100",
            "add-user --users-file FILE --user a --iterations 99999",
        ],
    ),
    (
        "`add-user --user` starting with `#`",
        &["add-user --users-file FILE --user #a"],
    ),
    (
        "`add-user` without `--password-file` and nothing on standard input",
        &["add-user --users-file FILE --user a"],
    ),
    (
        "`offsets` with neither `--time` nor `--timestamp`",
        &["offsets --data-dir DIR --topic t --partition 0"],
    ),
    (
        "config file missing",
        &[
            "check-config --config FILE",
            "run --config FILE",
            "repair --config FILE",
            "status --config FILE",
            "verify --config FILE --against-leader",
        ],
    ),
];

/// The start of most case configs: lines 1–3, the first `[[follow]]` table's keys from line 4.
const BASE: &str = "data_dir = \"DIR\"\nbootstrap_servers = [\"127.0.0.1:1\"]\n[[follow]]\n";

/// Config cases: the row, what follows [`BASE`] (or, from `!`, the whole file), and the line
/// `N` stands for. Each is run through every command that reads `--config`.
const CONFIG_CASES: &[(&str, &str, Option<usize>)] = &[
    ("not TOML", "topic = \"orders\"\n[fetch\n", Some(5)),
    (
        "a key given twice",
        "topic = \"orders\"\n[fetch]\nmax_bytes = 1\nmax_bytes = 2\n",
        Some(7),
    ),
    (
        "unknown key",
        "topic = \"orders\"\n[fetch]\nmax_wait_msx = 1\n",
        Some(6),
    ),
    (
        "top-level key written after a `[[follow]]` (it belongs to that table)",
        "topic = \"orders\"\nclient_id = \"me\"\n",
        Some(5),
    ),
    (
        "wrong type",
        "topic = \"orders\"\n[log]\nsegment_bytes = \"big\"\n",
        Some(6),
    ),
    (
        "negative `fetch.max_bytes`",
        "topic = \"orders\"\n[fetch]\nmax_bytes = -5\n",
        Some(6),
    ),
    (
        "`fetch.partition_max_bytes` above `fetch.max_bytes`",
        "topic = \"orders\"\n[fetch]\nmax_bytes = 10\npartition_max_bytes = 20\n",
        Some(7),
    ),
    (
        "`fetch.max_bytes` below the default `fetch.partition_max_bytes`",
        "topic = \"orders\"\n[fetch]\nmax_bytes = 1000\n",
        Some(6),
    ),
    (
        "`fetch.backoff_max_ms` below `fetch.backoff_ms`",
        "topic = \"orders\"\n[fetch]\nbackoff_ms = 20000\nbackoff_max_ms = 5000\n",
        Some(7),
    ),
    // The error is about the key the file sets, at its line.
    (
        "`fetch.backoff_ms` above the default `fetch.backoff_max_ms`",
        "topic = \"orders\"\n[fetch]\nbackoff_ms = 20000\n",
        Some(6),
    ),
    (
        "bad `fetch.isolation`",
        "topic = \"orders\"\n[fetch]\nisolation = \"dirty\"\n",
        Some(6),
    ),
    (
        "`data_dir` missing",
        "!bootstrap_servers = [\"h:1\"]\n[[follow]]\ntopic = \"orders\"\n",
        None,
    ),
    (
        "`data_dir` empty",
        "!data_dir = \"\"\nbootstrap_servers = [\"h:1\"]\n[[follow]]\ntopic = \"o\"\n",
        Some(1),
    ),
    (
        "`bootstrap_servers` empty",
        "!data_dir = \"/d\"\nbootstrap_servers = []\n[[follow]]\ntopic = \"o\"\n",
        Some(2),
    ),
    (
        "bad `host:port`",
        "!data_dir = \"/d\"\nbootstrap_servers = [\"kafka1\"]\n[[follow]]\ntopic = \"o\"\n",
        Some(2),
    ),
    (
        "no `[[follow]]`",
        "!data_dir = \"/d\"\nbootstrap_servers = [\"h:1\"]\n",
        None,
    ),
    (
        "`[[follow]]` without `topic`",
        "topic = \"orders\"\n[[follow]]\npartitions = [1]\n",
        Some(5),
    ),
    ("illegal topic name", "topic = \"bad topic\"\n", Some(4)),
    (
        "topic followed twice",
        "topic = \"orders\"\n[[follow]]\ntopic = \"orders\"\n",
        Some(6),
    ),
    (
        "a partition listed twice",
        "topic = \"orders\"\npartitions = [0, 0]\n",
        Some(5),
    ),
    (
        "bad `start`",
        "topic = \"orders\"\nstart = \"yesterday\"\n",
        Some(5),
    ),
    (
        "`start` date-time without a zone, or not a date",
        "topic = \"orders\"\nstart = 2026-11-30T07:12:03\n",
        Some(5),
    ),
    (
        "bad `on_topic_recreated`",
        "topic = \"orders\"\non_topic_recreated = \"delete\"\n",
        Some(5),
    ),
    (
        "`groups.include` not a regular expression",
        "topic = \"orders\"\n[groups]\ninclude = [\"orders-(\"]\n",
        Some(6),
    ),
    (
        "`groups.refresh_ms` not positive",
        "topic = \"orders\"\n[groups]\nrefresh_ms = 0\n",
        Some(6),
    ),
    (
        "bad `metrics.listen`",
        "topic = \"orders\"\n[metrics]\nlisten = \"localhost\"\n",
        Some(6),
    ),
    (
        "`serve.max_memory_bytes` too small for `serve.max_request_bytes`",
        "topic = \"orders\"\n[serve]\nmax_memory_bytes = 1048576\n",
        Some(6),
    ),
    (
        "bad `serve.follower_addresses`",
        "topic = \"orders\"\n[serve]\nfollower_addresses = [\"10.0.0.0/40\"]\n",
        Some(6),
    ),
    (
        "bad `offsite.endpoint` (not an http:// or https:// URL)",
        "topic = \"orders\"\n[offsite]\nendpoint = \"ftp://store:9000\"\nbucket = \"replica\"\n",
        Some(6),
    ),
    (
        "bad `offsite.bucket`",
        "topic = \"orders\"\n[offsite]\nendpoint = \"http://store:9000\"\nbucket = \"My_Bucket\"\n",
        Some(7),
    ),
    (
        "`offsite.prefix` starting with `/`",
        "topic = \"orders\"\n[offsite]\nendpoint = \"http://store:9000\"\nbucket = \"replica\"\nprefix = \"/replica\"\n",
        Some(8),
    ),
    (
        "`offsite.max_delay_ms` not positive",
        "topic = \"orders\"\n[offsite]\nendpoint = \"http://store:9000\"\nbucket = \"replica\"\nmax_delay_ms = 0\n",
        Some(8),
    ),
    (
        "unknown key in `[offsite]`",
        "topic = \"orders\"\n[offsite]\nendpoint = \"http://store:9000\"\nbucket = \"replica\"\nsecret_key = \"s3cret\"\n",
        Some(8),
    ),
    // The section's header is the line: the key is missing.
    (
        "neither `offsite.access_key_file` nor `AWS_ACCESS_KEY_ID`",
        "topic = \"orders\"\n[offsite]\nendpoint = \"http://store:9000\"\nbucket = \"replica\"\n",
        Some(5),
    ),
];

/// Makes a case's files and says what to run.
type MakeCase = fn(&Scratch) -> Setup;

/// Cases that need files made first.
const FILE_CASES: &[(&str, MakeCase)] = &[
    ("config path is a directory", |s| {
        std::fs::create_dir(s.file()).unwrap();
        s.args(&["check-config --config FILE"])
    }),
    (
        "config file not UTF-8 (any read error: the reason follows)",
        |s| {
            std::fs::write(s.file(), b"data_dir = \"\xff\"\n").unwrap();
            s.args(&["check-config --config FILE"])
        },
    ),
    ("`data_dir` is a file (`run`, `repair`)", |s| {
        std::fs::write(s.dir(), "").unwrap();
        s.valid_config(&s.dir(), &["run --config FILE", "repair --config FILE"])
    }),
    ("`data_dir` cannot be created", |s| {
        std::fs::write(s.dir(), "").unwrap();
        s.valid_config(&s.dir().join("sub"), &["run --config FILE"])
    }),
    // Permission bits do not stop root; sysfs refuses a new file to root too.
    ("`data_dir` not writable", |s| {
        s.valid_config(Path::new("/sys"), &["run --config FILE"])
    }),
    (
        "`check-config` with a `data_dir` it cannot create a file in (a read-only file system, no permission; tried as the user running it)",
        |s| s.valid_config(Path::new("/sys"), &["check-config --config FILE"]),
    ),
    (
        "`check-config` with a `data_dir` that cannot be created (missing, below a file or a directory it cannot write in)",
        |s| {
            std::fs::write(s.dir(), "").unwrap();
            s.valid_config(&s.dir().join("sub"), &["check-config --config FILE"])
        },
    ),
    ("`run` on a data dir another daemon holds", |s| {
        s.locked(&["run --config FILE"])
    }),
    ("`repair` while the daemon runs", |s| {
        s.locked(&["repair --config FILE"])
    }),
    (
        "`status --data-dir`, `verify`, `dump`, `offsets`, `serve` on a data dir that does not exist",
        |s| {
            s.data_dir(
                None,
                &[
                    "status --data-dir DIR",
                    "verify --data-dir DIR",
                    "dump --data-dir DIR --topic orders --partition 0",
                    "offsets --data-dir DIR --topic orders --partition 0 --time -1",
                    "serve --data-dir DIR --listen 127.0.0.1:0",
                ],
            )
        },
    ),
    // Intended: a configuration before its first run, not a mistyped path.
    (
        "`status --config` whose data dir does not exist yet (not run so far: every followed partition is listed without a log)",
        |s| s.valid_config(&s.dir(), &["status --config FILE"]),
    ),
    ("`status`, `verify` on a file", |s| {
        std::fs::write(s.dir(), "").unwrap();
        s.args(&["status --data-dir DIR", "verify --data-dir DIR"])
    }),
    (
        "`status` on a directory with no partition and no checkpoint file",
        |s| s.data_dir(Some(&[]), &["status --data-dir DIR"]),
    ),
    (
        "`verify` on a directory with no partition and no checkpoint file",
        |s| s.data_dir(Some(&[]), &["verify --data-dir DIR"]),
    ),
    ("`dump`, `offsets` of a partition that is not there", |s| {
        s.data_dir(
            Some(&[]),
            &[
                "dump --data-dir DIR --topic orders --partition 7",
                "offsets --data-dir DIR --topic orders --partition 7 --time -1",
            ],
        )
    }),
    ("`offsite.access_key_file` missing", |s| {
        s.offsite("access_key_file", |creds| {
            std::fs::remove_file(creds.join("access")).unwrap();
        })
    }),
    (
        "`offsite.access_key_file` readable by its group (mode 0640; the same for each key file)",
        |s| {
            s.offsite("access_key_file", |creds| {
                let mode = std::fs::Permissions::from_mode(0o640);
                std::fs::set_permissions(creds.join("access"), mode).unwrap();
            })
        },
    ),
    ("`offsite.access_key_file` empty", |s| {
        s.offsite("access_key_file", |creds| {
            std::fs::write(creds.join("access"), "\n").unwrap();
        })
    }),
    ("`offsite.encryption_key_file` not 64 hex digits", |s| {
        s.offsite("encryption_key_file", |creds| {
            std::fs::write(creds.join("key"), "0123456789abcdef\n").unwrap();
        })
    }),
    (
        "`offsite.encryption_key_file` readable by others (mode 0644)",
        |s| {
            s.offsite("encryption_key_file", |creds| {
                let mode = std::fs::Permissions::from_mode(0o644);
                std::fs::set_permissions(creds.join("key"), mode).unwrap();
            })
        },
    ),
    (
        "`security.ssl_cert_file` an X.509 version 1 certificate (the same for `serve.ssl_cert_file`)",
        |s| {
            s.tls(
                "security.ssl_cert_file",
                "client-v1.pem",
                "client-v1.key",
                |_| {},
            )
        },
    ),
    (
        "`security.ssl_key_file` encrypted with a passphrase (the same for `serve.ssl_key_file`)",
        |s| {
            s.tls(
                "security.ssl_key_file",
                "client.pem",
                "encrypted.key",
                |pki| {
                    support::tls::openssl_in(
                        pki,
                        &[
                            "pkey",
                            "-in",
                            "client.key",
                            "-aes256",
                            "-passout",
                            "pass:x",
                            "-out",
                            "encrypted.key",
                        ],
                    );
                },
            )
        },
    ),
    ("`security.ssl_cert_file` and `ssl_key_file` swapped", |s| {
        s.tls("security.ssl_cert_file", "client.key", "client.pem", |_| {})
    }),
    (
        "`security.ssl_key_file` a key rustls cannot sign with (RSA of 1024 bits)",
        |s| {
            s.tls("security.ssl_key_file", "small.pem", "small.key", |pki| {
                support::tls::openssl_in(
                    pki,
                    &[
                        "req",
                        "-x509",
                        "-newkey",
                        "rsa:1024",
                        "-nodes",
                        "-subj",
                        "/CN=small",
                        "-days",
                        "30",
                        "-addext",
                        "basicConstraints=CA:FALSE",
                        "-keyout",
                        "small.key",
                        "-out",
                        "small.pem",
                    ],
                );
            })
        },
    ),
    ("`verify` finding a problem (one line per problem)", |s| {
        // Stopped cleanly: the garbage is damage, not the torn tail of an unclean stop (a note).
        let garbage: &[u8] = &[b'x'; 100];
        s.data_dir(
            Some(&[
                (".kafka_cleanshutdown", b""),
                ("orders-0/00000000000000000000.log", garbage),
            ]),
            &["verify --data-dir DIR"],
        )
    }),
];

/// The case of README row `name`, set up in `s`.
fn setup(name: &str, s: &Scratch) -> Option<Setup> {
    if let Some((_, runs)) = USAGE_CASES.iter().find(|(n, _)| *n == name) {
        return Some(s.args(runs));
    }
    if let Some((_, text, line)) = CONFIG_CASES.iter().find(|(n, _, _)| *n == name) {
        let text = match text.strip_prefix('!') {
            Some(whole) => whole.to_string(),
            None => format!("{BASE}{text}").replace("DIR", &s.dir().display().to_string()),
        };
        return Some(s.config_text(&text, *line));
    }
    let (_, case) = FILE_CASES.iter().find(|(n, _)| *n == name)?;
    Some(case(s))
}

fn case_names() -> impl Iterator<Item = &'static str> {
    let usage = USAGE_CASES.iter().map(|(n, _)| *n);
    let config = CONFIG_CASES.iter().map(|(n, _, _)| *n);
    usage
        .chain(config)
        .chain(FILE_CASES.iter().map(|(n, _)| *n))
}

/// `message` with its placeholders filled in, in one pass (a path may hold `DIR`); `PID` is
/// this process's, the holder of the locks the cases take.
fn fill(message: &str, setup: &Setup, cmd: &str) -> String {
    let file = setup.file.display().to_string();
    let dir = setup.dir.display().to_string();
    let keyfile = setup.keyfile.as_ref().map(|k| k.display().to_string());
    let line = setup.line.map(|n| format!("line {n}"));
    let pid = std::process::id().to_string();
    let mut out = String::new();
    let mut rest = message;
    while !rest.is_empty() {
        let token: Option<(&str, &str)> = [
            ("KEYFILE", keyfile.as_deref()),
            ("FILE", Some(file.as_str())),
            ("DIR", Some(dir.as_str())),
            ("CMD", Some(cmd)),
            ("PID", Some(pid.as_str())),
            ("line N", line.as_deref()),
        ]
        .into_iter()
        .find_map(|(t, v)| rest.starts_with(t).then_some((t, v?)));
        match token {
            Some((t, v)) => {
                out.push_str(v);
                rest = &rest[t.len()..];
            }
            None => {
                let c = rest.chars().next().unwrap_or_default();
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    out
}

#[test]
fn every_bad_input_in_the_readme_gets_its_exit_code_and_message() {
    let rows = readme_rows();
    assert!(rows.len() >= 40, "only {} README rows", rows.len());
    for name in case_names() {
        assert!(
            rows.iter().any(|r| r.name == name),
            "case `{name}` has no README row in {SECTION}"
        );
    }
    let mut failures = Vec::new();
    for row in &rows {
        let scratch = Scratch(tempfile::tempdir().unwrap());
        let Some(setup) = setup(&row.name, &scratch) else {
            failures.push(format!("README row `{}` has no test case", row.name));
            continue;
        };
        for args in &setup.runs {
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            let (code, out, err) = run(&argv);
            let cmd = argv.first().copied().unwrap_or_default();
            let mut expected = fill(&row.message, &setup, cmd);
            if row.exit != 0 && !row.on_stdout {
                expected = format!("error: {expected}");
            }
            let said = if row.on_stdout { &out } else { &err };
            if code != Some(row.exit) || !said.contains(&expected) {
                failures.push(format!(
                    "`{}`: {argv:?} exited {code:?} (README: {}), README says {expected:?}, it said:\n{said}",
                    row.name, row.exit
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Not a README row, as it is not bad input: a systemd credential (`LoadCredential=`, root's
/// and group-readable, mode 0440, under `$CREDENTIALS_DIRECTORY`) is taken for each offsite
/// key file as for `security.sasl_password_file`; the same files with no
/// `$CREDENTIALS_DIRECTORY`, or outside it, are refused naming the key and the file.
#[test]
fn offsite_key_files_may_be_systemd_credentials_as_the_sasl_password_file() {
    let scratch = Scratch(tempfile::tempdir().unwrap());
    let creds = scratch.0.path().join("credentials");
    std::fs::create_dir(&creds).unwrap();
    for (name, text) in [
        ("access", "AKIDEXAMPLE".to_string()),
        (
            "secret",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".to_string(),
        ),
        ("key", "0f".repeat(32)),
        ("kafka-password", "s3cret".to_string()),
    ] {
        let p = creds.join(name);
        std::fs::write(&p, format!("{text}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o440)).unwrap();
    }
    let text = format!(
        "data_dir = \"{}\"\nbootstrap_servers = [\"127.0.0.1:1\"]\n[[follow]]\ntopic = \"orders\"\n\
         [security]\nprotocol = \"SASL_PLAINTEXT\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
         sasl_username = \"replica\"\nsasl_password_file = \"{1}/kafka-password\"\n\
         [offsite]\nendpoint = \"http://127.0.0.1:1\"\nbucket = \"replica\"\n\
         access_key_file = \"{1}/access\"\nsecret_key_file = \"{1}/secret\"\n\
         encryption_key_file = \"{1}/key\"\n",
        scratch.dir().display(),
        creds.display()
    );
    std::fs::write(scratch.file(), text).unwrap();
    let file = scratch.file();
    let args = ["check-config", "--config", file.to_str().unwrap()];

    let (code, out, err) = run_with(&args, &[("CREDENTIALS_DIRECTORY", &creds)]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains(": ok ("), "{out}");

    let elsewhere = scratch.0.path().join("elsewhere");
    for credentials_directory in [None, Some(elsewhere.as_path())] {
        let env: Vec<(&str, &Path)> = credentials_directory
            .map(|d| ("CREDENTIALS_DIRECTORY", d))
            .into_iter()
            .collect();
        let (code, out, err) = run_with(&args, &env);
        assert_eq!(code, Some(2), "{out}{err}");
        // The first file read is refused: the SASL password's, as before this section.
        let expected = format!(
            "key `security.sasl_password_file`: `{}/kafka-password` has mode 0440",
            creds.display()
        );
        assert!(err.contains(&expected), "{expected:?} not in {err}");
    }
    // With the SASL password a credential no more, the offsite keys are refused in turn.
    std::fs::set_permissions(
        creds.join("kafka-password"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let (code, out, err) = run(&args);
    assert_eq!(code, Some(2), "{out}{err}");
    let expected = format!(
        "line 13: key `offsite.access_key_file`: `{}/access` has mode 0440",
        creds.display()
    );
    assert!(err.contains(&expected), "{expected:?} not in {err}");
}
