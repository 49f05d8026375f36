//! SASL from outside this project for tests: `tests/support/sasl_proxy.py` (scramp's SCRAM
//! server and a PLAIN check) in front of a real leader, password files, `[security]`
//! sections, and a collector of every log line a test produced so it can assert that no
//! password is among them.
//!
//! [`SaslProxy`] runs in its own process group and keeps its stderr (one `auth ok` or `auth
//! failed` line per outcome, never a password); dropping it kills it. [`SaslProxy::start_on`]
//! binds a given port (the proxy sets SO_REUSEADDR), so a test can end one proxy and start
//! another with other users on the same address: every connection through it drops and
//! must authenticate anew.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

/// `sasl_proxy.py` in front of `upstream`, with its stderr kept.
pub struct SaslProxy {
    child: Child,
    pub addr: String,
    stderr: Arc<Mutex<String>>,
}

impl SaslProxy {
    /// On a free port, for `users` (`name`, `password`), with more proxy arguments
    /// (`--session-lifetime-ms N`, `--mechanisms ...`).
    pub fn start(upstream: &str, users: &[(&str, &str)], extra: &[&str]) -> SaslProxy {
        SaslProxy::start_on("127.0.0.1:0", upstream, users, extra)
    }

    /// Like [`SaslProxy::start`], listening on `listen` (`127.0.0.1:PORT`).
    pub fn start_on(
        listen: &str,
        upstream: &str,
        users: &[(&str, &str)],
        extra: &[&str],
    ) -> SaslProxy {
        let mut cmd = Command::new(super::python());
        cmd.arg(super::manifest_dir().join("tests/support/sasl_proxy.py"))
            .args(["--upstream", upstream, "--listen", listen]);
        for (name, password) in users {
            cmd.args(["--user", &format!("{name}:{password}")]);
        }
        let mut child = cmd
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sasl_proxy.py");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let err = child.stderr.take().expect("proxy stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("{line}");
                sink.lock().expect("proxy log").push_str(&(line + "\n"));
            }
        });
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("proxy stdout"))
            .read_line(&mut line)
            .expect("read the proxy's first line");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| {
            let _ = child.kill();
            panic!(
                "sasl_proxy.py said {line:?}: {e}\n{}",
                stderr.lock().expect("proxy log")
            )
        });
        let addr = v["listen"].as_str().expect("listen address").to_string();
        SaslProxy {
            child,
            addr,
            stderr,
        }
    }

    /// Everything the proxy wrote to stderr so far.
    pub fn log(&self) -> String {
        self.stderr.lock().expect("proxy log").clone()
    }

    /// Refused authentications so far (`auth failed` lines).
    pub fn failures(&self) -> usize {
        self.log().matches("auth failed").count()
    }

    /// Successful authentications so far (`auth ok` lines), per client `peer`
    /// (`127.0.0.1:PORT`), in the order they came.
    pub fn successes_by_peer(&self) -> std::collections::BTreeMap<String, usize> {
        let mut out = std::collections::BTreeMap::new();
        for l in self.log().lines().filter(|l| l.contains("auth ok")) {
            if let Some(peer) = l.split(" peer=").nth(1) {
                *out.entry(peer.trim().to_string()).or_insert(0) += 1;
            }
        }
        out
    }
}

impl Drop for SaslProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `password` (and a newline) to `dir/name` with mode 0600; returns the path.
pub fn password_file(dir: &Path, name: &str, password: &str) -> PathBuf {
    let p = dir.join(name);
    set_password(&p, password);
    p
}

/// Rewrites the password file `path` in place (mode 0600).
pub fn set_password(path: &Path, password: &str) {
    std::fs::write(path, format!("{password}\n"))
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

/// `[security]` for SASL_PLAINTEXT with `mechanism` as `user`.
pub fn sasl_plaintext(
    c: super::Config,
    mechanism: &str,
    user: &str,
    password_file: &Path,
) -> super::Config {
    c.set("security.protocol", "SASL_PLAINTEXT")
        .set("security.sasl_mechanism", mechanism)
        .set("security.sasl_username", user)
        .set(
            "security.sasl_password_file",
            password_file.display().to_string(),
        )
}

/// Every log line a test produced, by where it came from, to be searched for secrets.
#[derive(Default)]
pub struct Logs(Vec<(String, String)>);

impl Logs {
    pub fn add(&mut self, source: impl Into<String>, text: impl Into<String>) {
        self.0.push((source.into(), text.into()));
    }

    /// Panics naming the source and line when any `secrets` occurs in any text; returns
    /// how many lines were searched (so a test can see it searched something).
    pub fn assert_free_of(&self, secrets: &[&str]) -> usize {
        let mut lines = 0;
        for (source, text) in &self.0 {
            for l in text.lines() {
                lines += 1;
                for s in secrets {
                    assert!(!l.contains(s), "{source} logged a password: {l}");
                }
            }
        }
        lines
    }
}
