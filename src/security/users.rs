//! The serve listener's credentials file (`[serve] sasl_users_file`): SCRAM credentials as
//! Kafka stores them (`ScramCredentialUtils.credentialToString`), never a password.
//!
//! ```text
//! # comment lines and blank lines are allowed
//! alice SCRAM-SHA-256 salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=8192
//! alice SCRAM-SHA-512 salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=8192
//! ```
//! One line per (user, mechanism); a pair given twice is an error. PLAIN has no entry of
//! its own: a PLAIN password is checked against the user's SCRAM entry (its salt and
//! iterations give the StoredKey the password must produce).
//!
//! Written only by [`Users::add`] (`replica-follower add-user`), through
//! `checkpoint::rewrite_atomic_private`: a crash leaves the old file or the new one, and the
//! file is mode 0600 from its first byte. Read once by the listener at start.

use super::SaslMechanism;
use super::base64;
use super::ct_eq;
use super::scram::{
    DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_SHA_256, ScramCredential, ScramHash,
};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::Path;

/// Longest user name accepted.
const MAX_USER_LEN: usize = 255;

/// Why a user name cannot be stored: empty, too long, or holding whitespace or a control
/// character (the file is split at whitespace). `None` when it is fine.
pub fn invalid_user_name(user: &str) -> Option<&'static str> {
    if user.is_empty() {
        Some("is empty")
    } else if user.len() > MAX_USER_LEN {
        Some("is longer than 255 bytes")
    } else if user.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("holds whitespace or a control character")
    } else if user.starts_with('#') {
        Some("starts with `#` (a comment)")
    } else {
        None
    }
}

/// The credentials of a users file.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Users {
    entries: BTreeMap<(String, SaslMechanism), ScramCredential>,
}

/// Kafka's string form of a credential.
pub fn credential_to_string(c: &ScramCredential) -> String {
    format!(
        "salt={},stored_key={},server_key={},iterations={}",
        base64::encode(&c.salt),
        base64::encode(&c.stored_key),
        base64::encode(&c.server_key),
        c.iterations
    )
}

/// Parses Kafka's string form; the error names the field (never its value).
pub fn credential_from_string(s: &str, hash: &ScramHash) -> Result<ScramCredential, String> {
    let mut fields: [Option<&str>; 4] = [None; 4];
    const NAMES: [&str; 4] = ["salt", "stored_key", "server_key", "iterations"];
    for part in s.split(',') {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| "expected key=value pairs separated by `,`".to_string())?;
        let i = NAMES
            .iter()
            .position(|n| *n == k)
            .ok_or_else(|| format!("unknown field `{k}`"))?;
        let slot = fields.get_mut(i).ok_or("unknown field")?;
        if slot.replace(v).is_some() {
            return Err(format!("field `{k}` given twice"));
        }
    }
    let [
        Some(salt),
        Some(stored_key),
        Some(server_key),
        Some(iterations),
    ] = fields
    else {
        let missing = NAMES
            .iter()
            .zip(fields)
            .find(|(_, f)| f.is_none())
            .map_or("", |(n, _)| n);
        return Err(format!("missing field `{missing}`"));
    };
    let b = |name: &str, v: &str| base64::decode(v).map_err(|e| format!("`{name}`: {e}"));
    let (salt, stored_key, server_key) = (
        b("salt", salt)?,
        b("stored_key", stored_key)?,
        b("server_key", server_key)?,
    );
    let key_len = (hash.credential("", b"x", 1)).stored_key.len();
    if salt.is_empty() {
        return Err("`salt` is empty".into());
    }
    for (name, k) in [("stored_key", &stored_key), ("server_key", &server_key)] {
        if k.len() != key_len {
            return Err(format!(
                "`{name}` is {} bytes, {} needs {key_len}",
                k.len(),
                hash.mechanism
            ));
        }
    }
    let iterations: u32 = iterations
        .parse()
        .map_err(|_| format!("`iterations`: `{iterations}` is not a number"))?;
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
        return Err(format!(
            "`iterations` {iterations} is outside {MIN_ITERATIONS}–{MAX_ITERATIONS}"
        ));
    }
    Ok(ScramCredential {
        salt,
        stored_key,
        server_key,
        iterations,
    })
}

/// One entry line: `Some((user, mechanism, credential))`, `None` for a comment or blank line.
fn parse_line(line: &str) -> Result<Option<(String, SaslMechanism, ScramCredential)>, String> {
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') {
        return Ok(None);
    }
    let mut words = t.split_whitespace();
    let (Some(user), Some(mech), Some(cred), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(
            "expected `USER MECHANISM salt=…,stored_key=…,server_key=…,iterations=N`".into(),
        );
    };
    if let Some(why) = invalid_user_name(user) {
        return Err(format!("user name {why}"));
    }
    let hash = SaslMechanism::from_name(mech)
        .and_then(ScramHash::for_mechanism)
        .ok_or_else(|| {
            format!("user `{user}`: mechanism `{mech}` is not SCRAM-SHA-256 or SCRAM-SHA-512")
        })?;
    let mechanism = SaslMechanism::from_name(hash.mechanism).unwrap_or(SaslMechanism::ScramSha256);
    let cred = credential_from_string(cred, hash)
        .map_err(|e| format!("user `{user}`, {}: {e}", hash.mechanism))?;
    Ok(Some((user.to_string(), mechanism, cred)))
}

impl Users {
    /// Reads `path`, which must be its owner's alone (as any secret file).
    pub fn load(path: &Path) -> Result<Users> {
        super::check_secret_file(path)?;
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read users file `{}`", path.display()))?;
        Self::parse(&text).map_err(|e| anyhow::anyhow!("`{}`: {e}", path.display()))
    }

    /// Parses a users file's text; an error names the line.
    pub fn parse(text: &str) -> Result<Users, String> {
        let mut users = Users::default();
        for (i, line) in text.lines().enumerate() {
            let at = |e: String| format!("line {}: {e}", i + 1);
            if let Some((user, mech, cred)) = parse_line(line).map_err(at)? {
                let name = mech.name();
                if users.entries.insert((user.clone(), mech), cred).is_some() {
                    return Err(at(format!("user `{user}`, {name}: given twice")));
                }
            }
        }
        Ok(users)
    }

    /// The credential of `user` for a SCRAM mechanism.
    pub fn lookup(&self, user: &str, mechanism: SaslMechanism) -> Option<&ScramCredential> {
        self.entries.get(&(user.to_string(), mechanism))
    }

    /// Whether `password` is `user`'s, checked against the user's SCRAM-SHA-256 entry, else
    /// its SCRAM-SHA-512 one. An unknown user costs the same work as a known one.
    pub fn verify_plain(&self, user: &str, password: &str) -> bool {
        let found = [SaslMechanism::ScramSha256, SaslMechanism::ScramSha512]
            .into_iter()
            .find_map(|m| Some((ScramHash::for_mechanism(m)?, self.lookup(user, m)?)));
        match found {
            Some((hash, cred)) => {
                let derived = hash.credential(password, &cred.salt, cred.iterations);
                ct_eq(&derived.stored_key, &cred.stored_key)
            }
            None => {
                std::hint::black_box(SCRAM_SHA_256.credential(
                    password,
                    b"unknown",
                    DEFAULT_ITERATIONS,
                ));
                false
            }
        }
    }

    /// The users with at least one entry, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.entries.keys().map(|(u, _)| u.as_str()).collect();
        v.dedup();
        v
    }

    /// Adds (or replaces) `user`'s entries for `mechanisms` in the file at `path` (created
    /// if missing), each with a fresh salt, and rewrites it atomically with mode 0600.
    /// Comments and other entries are kept as they are; a replaced entry keeps its line.
    pub fn add(
        path: &Path,
        user: &str,
        mechanisms: &[SaslMechanism],
        password: &str,
        iterations: u32,
    ) -> Result<()> {
        if let Some(why) = invalid_user_name(user) {
            bail!("user name `{user}` {why}");
        }
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            bail!("iterations {iterations} is outside {MIN_ITERATIONS}–{MAX_ITERATIONS}");
        }
        let old = match std::fs::read_to_string(path) {
            Ok(t) => {
                super::check_secret_file(path)?;
                t
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("cannot read users file `{}`", path.display()));
            }
        };
        // The file must be valid before it is changed: a broken one is not made worse.
        Self::parse(&old).map_err(|e| anyhow::anyhow!("`{}`: {e}", path.display()))?;
        let mut new_lines: Vec<(SaslMechanism, String)> = Vec::new();
        for &m in mechanisms {
            let hash = ScramHash::for_mechanism(m).with_context(|| {
                format!(
                    "{} has no stored credential (PLAIN is checked against the SCRAM entries)",
                    m.name()
                )
            })?;
            let cred = hash.new_credential(password, iterations)?;
            new_lines.push((
                m,
                format!("{user} {} {}", m.name(), credential_to_string(&cred)),
            ));
        }
        let mut out = String::new();
        for line in old.lines() {
            let replaced = parse_line(line).ok().flatten().and_then(|(u, m, _)| {
                (u == user)
                    .then(|| new_lines.iter().position(|(nm, _)| *nm == m))
                    .flatten()
            });
            match replaced {
                Some(i) => out.push_str(&new_lines.remove(i).1),
                None => out.push_str(line),
            }
            out.push('\n');
        }
        for (_, l) in new_lines {
            out.push_str(&l);
            out.push('\n');
        }
        crate::checkpoint::rewrite_atomic_private(path, out.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::scram::{SCRAM_SHA_512, ScramClient, ScramServer};
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn add_then_load_then_scram_and_plain_verify() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("users");
        Users::add(
            &f,
            "alice",
            &[SaslMechanism::ScramSha256, SaslMechanism::ScramSha512],
            "pw-1!",
            4096,
        )
        .unwrap();
        Users::add(&f, "bob", &[SaslMechanism::ScramSha512], "pw-2!", 8192).unwrap();
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let text = std::fs::read_to_string(&f).unwrap();
        // `-` and `!` are outside base64's alphabet: no salt or key can spell them by chance.
        assert!(!text.contains("pw-1!") && !text.contains("pw-2!"));
        assert_eq!(text.lines().count(), 3);
        let users = Users::load(&f).unwrap();
        assert_eq!(users.names(), ["alice", "bob"]);
        assert!(users.verify_plain("alice", "pw-1!"));
        assert!(!users.verify_plain("alice", "pw-2!"));
        assert!(users.verify_plain("bob", "pw-2!"));
        assert!(!users.verify_plain("carol", "pw-2!"));
        assert!(users.lookup("bob", SaslMechanism::ScramSha256).is_none());
        let cred = users
            .lookup("bob", SaslMechanism::ScramSha512)
            .unwrap()
            .clone();
        assert_eq!(cred.iterations, 8192);
        let (client, c1) = ScramClient::start(&SCRAM_SHA_512, "bob", "pw-2!").unwrap();
        let (server, s1) = ScramServer::client_first(&SCRAM_SHA_512, c1.as_bytes(), |u| {
            users.lookup(u, SaslMechanism::ScramSha512).cloned()
        })
        .unwrap();
        let (client, c2) = client.server_first(s1.as_bytes()).unwrap();
        client
            .server_final(server.client_final(c2.as_bytes()).unwrap().as_bytes())
            .unwrap();
    }

    #[test]
    fn add_replaces_the_same_user_and_mechanism_in_place_keeping_comments() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("users");
        std::fs::write(&f, "# operators\n\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        Users::add(&f, "alice", &[SaslMechanism::ScramSha256], "old", 4096).unwrap();
        Users::add(&f, "bob", &[SaslMechanism::ScramSha256], "b", 4096).unwrap();
        Users::add(
            &f,
            "alice",
            &[SaslMechanism::ScramSha256, SaslMechanism::ScramSha512],
            "new",
            4096,
        )
        .unwrap();
        let text = std::fs::read_to_string(&f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "# operators");
        assert!(lines[2].starts_with("alice SCRAM-SHA-256 "), "{text}");
        assert!(lines[3].starts_with("bob SCRAM-SHA-256 "), "{text}");
        assert!(lines[4].starts_with("alice SCRAM-SHA-512 "), "{text}");
        assert_eq!(lines.len(), 5);
        let users = Users::load(&f).unwrap();
        assert!(users.verify_plain("alice", "new") && !users.verify_plain("alice", "old"));
        assert!(users.verify_plain("bob", "b"));
    }

    #[test]
    fn add_refuses_bad_names_iterations_plain_and_a_broken_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("users");
        let err = |u: &str, m: &[SaslMechanism], i: u32| {
            format!("{:#}", Users::add(&f, u, m, "pw", i).unwrap_err())
        };
        let s256 = [SaslMechanism::ScramSha256];
        assert!(err("a b", &s256, 4096).contains("whitespace"));
        assert!(err("", &s256, 4096).contains("empty"));
        assert!(err("a", &s256, 4095).contains("4095"));
        assert!(err("a", &[SaslMechanism::Plain], 4096).contains("PLAIN"));
        std::fs::write(&f, "garbage\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(err("a", &s256, 4096).contains("line 1"));
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "garbage\n");
    }

    #[test]
    fn parse_errors_name_the_file_line_user_and_mechanism_never_a_key() {
        let cred = credential_to_string(&SCRAM_SHA_256.credential("pw", b"salt", 4096));
        let good = format!("alice SCRAM-SHA-256 {cred}");
        assert!(Users::parse(&format!("# c\n\n  {good}  \n")).is_ok());
        let cases = [
            (
                format!("{good}\n{good}"),
                "line 2: user `alice`, SCRAM-SHA-256: given twice",
            ),
            ("alice SCRAM-SHA-256".to_string(), "line 1: expected"),
            (
                format!("alice PLAIN {cred}"),
                "line 1: user `alice`: mechanism `PLAIN`",
            ),
            (
                format!("alice SCRAM-SHA-512 {cred}"),
                "SCRAM-SHA-512: `stored_key` is 32 bytes",
            ),
            (
                good.replace("iterations=4096", "iterations=100"),
                "`iterations` 100",
            ),
            (
                good.replace("iterations=4096", "iterations=x"),
                "`iterations`: `x`",
            ),
            (
                good.replace(",iterations=4096", ""),
                "missing field `iterations`",
            ),
            (good.replace("salt=", "pepper="), "unknown field `pepper`"),
            (format!("{good},salt=AAAA"), "field `salt` given twice"),
            (
                good.replace("stored_key=", "stored_key=!"),
                "`stored_key`: not base64",
            ),
            (
                format!("\n\u{7}lice SCRAM-SHA-256 {cred}"),
                "line 2: user name holds",
            ),
            (format!("{good} extra"), "line 1: expected"),
        ];
        for (text, want) in cases {
            let e = Users::parse(&text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
            let key = cred
                .split("stored_key=")
                .nth(1)
                .unwrap()
                .split(',')
                .next()
                .unwrap();
            assert!(!e.contains(key), "{e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("users");
        std::fs::write(&f, "bad line\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = format!("{:#}", Users::load(&f).unwrap_err());
        assert!(e.contains("users") && e.contains("line 1"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(format!("{:#}", Users::load(&f).unwrap_err()).contains("0640"));
    }

    #[test]
    fn kafka_credential_string_roundtrips() {
        let c = SCRAM_SHA_512.credential("pw", b"0123456789", 4096);
        let s = credential_to_string(&c);
        assert!(s.starts_with("salt=MDEyMzQ1Njc4OQ==,stored_key="), "{s}");
        assert!(s.ends_with(",iterations=4096"));
        assert_eq!(credential_from_string(&s, &SCRAM_SHA_512).unwrap(), c);
    }
}
