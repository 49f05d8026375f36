//! Scrapes of the daemon's `GET /metrics`, parsed by a real Prometheus parser
//! (`prometheus_client.parser` from PyPI, in the test venv).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::TcpStream;

/// One sample: its name (with `_total`, `_bucket`… as exposed), labels and value.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// One scrape: the body as served, its samples, and when it was taken (s since the epoch).
#[derive(Debug, Clone)]
pub struct Scrape {
    pub body: String,
    pub samples: Vec<Sample>,
    pub at_secs: f64,
}

impl Scrape {
    /// The samples keyed `name{k=v,…}` (labels sorted, values unquoted).
    pub fn keyed(&self) -> BTreeMap<String, f64> {
        self.samples
            .iter()
            .map(|s| {
                let labels: Vec<String> =
                    s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                (format!("{}{{{}}}", s.name, labels.join(",")), s.value)
            })
            .collect()
    }

    /// The value of the sample `name` with exactly `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).is_some_and(|x| x == v))
            })
            .map(|s| s.value)
    }

    /// Every metric name the scrape declares (`# TYPE` lines, so a family without samples
    /// yet counts) or has a sample of.
    pub fn names(&self) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self.samples.iter().map(|s| s.name.clone()).collect();
        for l in self.body.lines() {
            if let Some(rest) = l.strip_prefix("# TYPE ")
                && let Some(name) = rest.split_whitespace().next()
            {
                out.insert(name.to_string());
            }
        }
        out
    }
}

/// A scrape of `addr`, or `None` when nothing accepts the connection (a daemon down).
pub fn try_scrape(addr: &str) -> Option<Scrape> {
    TcpStream::connect(addr).ok()?;
    let at_secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let resp = super::http(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    Some(Scrape {
        samples: parse(body),
        body: body.to_string(),
        at_secs,
    })
}

/// A scrape of `addr`, which must answer.
pub fn scrape(addr: &str) -> Scrape {
    try_scrape(addr).unwrap_or_else(|| panic!("nothing answers on {addr}"))
}

/// The samples of an exposition text, as prometheus_client reads them.
fn parse(body: &str) -> Vec<Sample> {
    let script = r#"
import sys, json
from prometheus_client.parser import text_string_to_metric_families
out = []
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        out.append({"name": s.name, "labels": s.labels, "value": s.value})
print(json.dumps(out))
"#;
    let mut child = std::process::Command::new(super::python())
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the Prometheus parser refused:\n{body}"
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
