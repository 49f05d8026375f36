//! The shipped alert rules (`systemd/replica-follower.rules.yml`) and Grafana dashboard
//! (`systemd/replica-follower.grafana.json`) against what real daemons export:
//! `promtool check rules` accepts the rules; `promtool test rules` runs
//! `tests/alert_rules_test.yml` with its input series taken from scrapes of daemons in each
//! situation — caught up with Tansu (nothing fires), a wrong broker address, a followed topic
//! missing on the leader, a daemon stopped, no target at all — and every metric the rules and
//! the dashboard name is one a daemon exports. promtool is Debian's `prometheus` package
//! (tests/setup-env.sh installs it as root); without it this fails saying so.

use crate::support;
use crate::support::scrape::{Scrape, scrape, try_scrape};
use crate::support::test_leader::TestLeader;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const RULES: &str = "systemd/replica-follower.rules.yml";
const DASHBOARD: &str = "systemd/replica-follower.grafana.json";
const CASES: &str = "tests/alert_rules_test.yml";
/// Where the scrape lies in the cases' 30 minutes of series (see the cases' header).
const SCRAPED_AT: f64 = 900.0;

/// Debian's promtool, or a panic saying how to get it.
fn promtool() -> &'static str {
    let found = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "promtool is missing: install Debian's prometheus package (apt-get install prometheus; tests/setup-env.sh does it when run as root)"
    );
    "promtool"
}

fn repo(path: &str) -> PathBuf {
    support::manifest_dir().join(path)
}

/// A daemon following what `follow` adds from `bootstrap` with its metrics on a free port:
/// (its temp dir, the daemon, the metrics address).
fn daemon(
    bootstrap: &str,
    follow: impl FnOnce(support::Config) -> support::Config,
) -> (tempfile::TempDir, support::Daemon, String) {
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", support::free_port());
    let cfg = support::Config::new(&dir.path().join("data"), bootstrap)
        .apply(follow)
        .set("fetch.max_wait_ms", 50)
        .set("fetch.backoff_ms", 200)
        .set("log.min_free_bytes", 0)
        .set("metrics.listen", addr.as_str())
        .write(dir.path());
    let d = support::Daemon::start(&cfg);
    (dir, d, addr)
}

/// Scrapes `addr` until `done` holds; the scrape that satisfied it.
fn scrape_until(addr: &str, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let mut last = None;
    support::wait_until(Duration::from_secs(60), what, || {
        let s = try_scrape(addr);
        let ok = s.as_ref().is_some_and(&done);
        last = s;
        if !ok {
            std::thread::sleep(Duration::from_millis(100));
        }
        ok
    });
    last.unwrap()
}

/// A label value or a series selector in PromQL's quoting.
fn quoted(v: &str) -> String {
    format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
}

/// promtool `input_series` lines for one target: each sample held constant over the cases'
/// 30 minutes, a timestamp moved so that its age at [`SCRAPED_AT`] is its age at the scrape,
/// and `up` as Prometheus records it (1 for a scrape, 0 for a target that answered none).
fn input_series(instance: &str, scraped: Option<&Scrape>) -> String {
    let mut out = String::new();
    let mut series = |name: &str, labels: &BTreeMap<String, String>, value: f64| {
        let mut labels = labels.clone();
        labels.insert("job".into(), "replica-follower".into());
        labels.insert("instance".into(), instance.into());
        let sel: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}={}", quoted(v)))
            .collect();
        let selector = format!("{name}{{{}}}", sel.join(","));
        out.push_str(&format!(
            "      - series: '{}'\n        values: '{value}x30'\n",
            selector.replace('\'', "''")
        ));
    };
    series(
        "up",
        &BTreeMap::new(),
        f64::from(u8::from(scraped.is_some())),
    );
    for s in scraped.map_or(&[][..], |s| &s.samples[..]) {
        let v = if s.name.ends_with("_timestamp_seconds") {
            s.value - scraped.map_or(0.0, |x| x.at_secs) + SCRAPED_AT
        } else {
            s.value
        };
        assert!(v.is_finite() && v >= 0.0, "{} = {v}", s.name);
        series(&s.name, &s.labels, v);
    }
    out
}

/// The metric names in PromQL expressions: `replica_follower_*` and `process_*` tokens.
fn metric_names(exprs: &[String]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in exprs {
        for token in e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
            if token.starts_with("replica_follower_") || token.starts_with("process_") {
                out.insert(token.to_string());
            }
        }
    }
    out
}

/// Every `expr` of the dashboard (targets and the templating query).
fn dashboard_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr" | "query" | "definition", serde_json::Value::String(s)) => {
                        out.push(s.clone())
                    }
                    _ => dashboard_exprs(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| dashboard_exprs(x, out)),
        _ => {}
    }
}

#[test]
fn shipped_alert_rules_fire_on_what_real_daemons_export_and_name_only_exported_series() {
    let promtool = promtool();
    let check = Command::new(promtool)
        .args(["check", "rules"])
        .arg(repo(RULES))
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "promtool check rules {RULES}:\n{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );

    // The daemons, started together: a healthy one against Tansu, one whose bootstrap
    // broker is a port nothing listens on, one following a topic its leader lacks.
    let mut tansu = support::Leader::start("tansu", 1);
    tansu.create_topic("present", 1);
    tansu.produce("present", 0, 200, "none", 1);
    let (_h, mut healthy, healthy_addr) = daemon(&tansu.bootstrap, |c| c.follow("present"));
    let nowhere = format!("127.0.0.1:{}", support::free_port());
    let (_w, mut wrong, wrong_addr) = daemon(&nowhere, |c| {
        c.follow("orders")
            .with("partitions", vec![0, 1])
            .follow("events")
    });
    let leader = TestLeader::start("present", 1);
    leader.append(0, 100, 10);
    let (_m, mut missing, missing_addr) =
        daemon(&leader.addr(), |c| c.follow("present").follow("ghost"));

    let caught_up = &[
        ("topic", "present"),
        ("partition", "0"),
        ("state", "caught up"),
    ];
    let healthy_scrape = scrape_until(&healthy_addr, "the healthy daemon caught up", |s| {
        s.value("replica_follower_partition_state", caught_up) == Some(1.0)
            && s.value("replica_follower_lag_records", &caught_up[..2]) == Some(0.0)
            && s.value("replica_follower_partitions_without_log", &[]) == Some(0.0)
    });
    let wrong_scrape = scrape_until(&wrong_addr, "failed metadata refreshes counted", |s| {
        s.value(
            "replica_follower_metadata_errors_total",
            &[("error", "unreachable")],
        )
        .is_some_and(|n| n >= 2.0)
    });
    // Failing, it leaves its last-success time where it was (its start): the frozen value
    // the cases keep for the minutes after the scrape.
    std::thread::sleep(Duration::from_millis(1500));
    let again = scrape(&wrong_addr);
    let last_success = "replica_follower_last_metadata_success_timestamp_seconds";
    assert_eq!(
        again.value(last_success, &[]),
        wrong_scrape.value(last_success, &[]),
        "a failing daemon moved its last metadata success"
    );
    let missing_scrape = scrape_until(&missing_addr, "the missing topic", |s| {
        s.value("replica_follower_topic_missing", &[("topic", "ghost")]) == Some(1.0)
            && s.value("replica_follower_partition_state", caught_up) == Some(1.0)
            && s.value("replica_follower_partitions_without_log", &[]) == Some(1.0)
    });
    // A daemon down: the wrong-broker one stopped, its target answering nothing.
    assert!(wrong.stop().success(), "{}", wrong.log_text());
    assert!(
        try_scrape(&wrong_addr).is_none(),
        "a stopped daemon answers"
    );

    let mut text = std::fs::read_to_string(repo(CASES)).unwrap();
    text = text.replace(
        "../systemd/replica-follower.rules.yml",
        &repo(RULES).display().to_string(),
    );
    for (name, scraped) in [
        ("healthy", Some(&healthy_scrape)),
        ("wrong-broker", Some(&wrong_scrape)),
        ("missing-topic", Some(&missing_scrape)),
        ("down", None),
    ] {
        let marker = format!("    input_series: []  # scraped: {name}\n");
        assert!(text.contains(&marker), "{CASES} lacks `{marker}`");
        text = text.replace(
            &marker,
            &format!("    input_series:\n{}", input_series(name, scraped)),
        );
    }
    // No target at all: no series.
    assert!(text.contains("input_series: []  # scraped: absent"));
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("alert_rules_test.yml");
    std::fs::write(&cases, &text).unwrap();
    let run = Command::new(promtool)
        .args(["test", "rules"])
        .arg(&cases)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "promtool test rules:\n{}{}\n--- the cases as run:\n{text}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );

    // Every alert is exercised by a case (ReplicaDiskNearlyFull: see the cases' header).
    let rules = std::fs::read_to_string(repo(RULES)).unwrap();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 10, "{alerts:?}");
    for a in alerts.iter().filter(|a| **a != "ReplicaDiskNearlyFull") {
        assert!(
            text.contains(&format!("alertname: {a}\n")),
            "no case for {a}"
        );
    }

    // The rules and the dashboard name only series the daemons export.
    let exported: BTreeSet<String> = [&healthy_scrape, &wrong_scrape, &missing_scrape]
        .iter()
        .flat_map(|s| s.names())
        .collect();
    let rule_exprs: Vec<String> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr: "))
        .map(str::to_string)
        .collect();
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repo(DASHBOARD)).unwrap())
            .unwrap_or_else(|e| panic!("{DASHBOARD} does not parse: {e}"));
    assert!(
        dashboard["panels"]
            .as_array()
            .is_some_and(|p| !p.is_empty())
    );
    let dash_exprs = dashboard_exprs_of(&dashboard);
    let shown = metric_names(&dash_exprs);
    for (what, exprs) in [(RULES, rule_exprs), (DASHBOARD, dash_exprs)] {
        let names = metric_names(&exprs);
        assert!(names.len() >= 5, "{what}: {names:?}");
        let unknown: Vec<&String> = names.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{what} names series no daemon exports: {unknown:?} (exported: {exported:?})"
        );
    }
    for name in [
        "replica_follower_leader_reachable",
        "replica_follower_last_metadata_success_timestamp_seconds",
        "replica_follower_metadata_errors_total",
        "replica_follower_topic_missing",
        "replica_follower_partitions_without_log",
    ] {
        assert!(shown.contains(name), "the dashboard does not show {name}");
    }

    assert!(healthy.stop().success(), "{}", healthy.log_text());
    assert!(missing.stop().success(), "{}", missing.log_text());
    drop(tansu);
}

fn dashboard_exprs_of(v: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    dashboard_exprs(v, &mut out);
    out
}
