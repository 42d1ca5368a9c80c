//! `jobrelay jobs list|show` against a real daemon: two simulated clusters, jobs driven through
//! their lifecycles (one the `probe` plugin gives up on, one deleted and made again under the
//! same name), the daemon's job view API on 127.0.0.1, and the command line parsed by the real
//! definition and run with its output captured — the table, the wide table and JSON, the
//! filters, paging by hand and with `--all`, a job's report, a job that is not there, and a
//! server that is not there. The binary itself is run once for its exit statuses and
//! `JOBRELAY_SERVER`.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use clap::Parser;
use jobrelay::cli::ops::jobs::{self, JobsError};
use jobrelay::cli::{Cli, Command};
use jobrelay::daemon::Daemon;
use jobrelay_testkit::{Flavor, JobDriver, Pace, SimCluster};
use serde_json::Value;

use crate::process::{DEADLINE, plugin_dir};

/// What one `jobrelay jobs …` printed: its outcome, standard output and standard error.
struct Ran {
    outcome: Result<(), JobsError>,
    out: String,
    err: String,
}

/// Parses `jobrelay jobs --server SERVER ARGS…` with the real command line and runs it.
async fn jobs(server: &str, args: &[&str]) -> Ran {
    let argv = ["jobrelay", "jobs", "--server", server]
        .into_iter()
        .chain(args.iter().copied());
    let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let Command::Jobs { server, command } = cli.command else {
        panic!("{args:?} is not a jobs command");
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let outcome = jobs::run(&server, &command, &mut out, &mut err).await;
    Ran {
        outcome,
        out: String::from_utf8_lossy(&out).into_owned(),
        err: String::from_utf8_lossy(&err).into_owned(),
    }
}

/// Runs it and expects success.
async fn ok(server: &str, args: &[&str]) -> Ran {
    let ran = jobs(server, args).await;
    if let Err(e) = &ran.outcome {
        panic!("jobs {args:?}: {e}\n{}", ran.err);
    }
    ran
}

/// The NAME column of a table (the header left out).
fn names(table: &str) -> Vec<String> {
    table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect()
}

fn sorted(names: Vec<String>) -> Vec<String> {
    let mut names = names;
    names.sort();
    names
}

/// The table's line of the job `cluster/name`.
fn row<'a>(table: &'a str, cluster: &str, name: &str) -> &'a str {
    table
        .lines()
        .find(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            cells.first() == Some(&cluster) && cells.get(2) == Some(&name)
        })
        .unwrap_or_else(|| panic!("no row for {cluster}/{name} in:\n{table}"))
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

fn batch(sim: &SimCluster, name: &str, labels: &[(&str, &str)]) -> JobDriver {
    flavored(sim, Flavor::Batch, name, labels)
}

fn flavored(sim: &SimCluster, flavor: Flavor, name: &str, labels: &[(&str, &str)]) -> JobDriver {
    let mut builder = JobDriver::builder(flavor, "ml", name)
        .pace(Pace::Wall)
        .without_pods();
    for (key, value) in labels {
        builder = builder.label(key, value);
    }
    builder.create(sim).expect("create")
}

/// What the whole fleet should look like once the daemon has seen and delivered everything:
/// (cluster, name, phase), the deleted `rerun-f` among them.
const FLEET: [(&str, &str, &str); 7] = [
    ("east", "eval-c", "running"),
    ("east", "train-a", "succeeded"),
    ("east", "train-b", "failed"),
    ("west", "eval-e", "pending"),
    ("west", "rerun-f", "deleted"),
    ("west", "rerun-f", "pending"),
    ("west", "train-d", "failed"),
];

/// Waits until the API lists exactly [`FLEET`] with nothing left for the probe to do.
async fn settled(server: &str) {
    let want: BTreeSet<(String, String, String)> = FLEET
        .iter()
        .map(|(c, n, p)| (c.to_string(), n.to_string(), p.to_string()))
        .collect();
    let started = Instant::now();
    loop {
        let ran = jobs(server, &["list", "-o", "json"]).await;
        let mut seen = BTreeSet::new();
        let mut idle = true;
        if ran.outcome.is_ok()
            && let Ok(list) = serde_json::from_str::<Value>(&ran.out)
        {
            for item in list["items"].as_array().into_iter().flatten() {
                let text = |k: &str| item[k].as_str().unwrap_or_default().to_string();
                seen.insert((text("cluster"), text("name"), text("phase")));
                let probe = &item["plugins"]["probe"];
                // A deleted job may be let go by the lane: nothing owed either way.
                if probe["pending"].as_u64().unwrap_or(0) > 0 || probe["in_flight"] == true {
                    idle = false;
                }
            }
            let c = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|i| i["name"] == "eval-c");
            if c.is_none_or(|c| c["plugins"]["probe"]["dead_letters"].as_u64().unwrap_or(0) == 0) {
                idle = false;
            }
        }
        if seen == want && idle {
            return;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the API never listed the fleet: {seen:?}\n{}{}",
            ran.out,
            ran.err
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_list_and_show_read_a_running_daemon() {
    let east = SimCluster::start("east").await.expect("east simulator");
    let west = SimCluster::start("west").await.expect("west simulator");
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(
        &root.join("jobrelay.yaml"),
        &format!(
            "plugin_dir: {}\nkinds: [{{name: batch-job}}, {{name: volcano-job}}]\n\
             state: {{path: state/jobrelay.db}}\ntelemetry: {{listen: \"127.0.0.1:0\"}}\n",
            plugin_dir().display()
        ),
    );
    write(&root.join("clusters/east.yaml"), &east.kubeconfig_yaml());
    write(&root.join("clusters/west.yaml"), &west.kubeconfig_yaml());
    // `probe` records every version, and gives up on jobs labelled so.
    write(
        &root.join("plugins/probe.yaml"),
        "wasm: probe.wasm\ngrants:\n  filesystem:\n    - {host: out, guest: /data, writable: true}\n",
    );

    let daemon = Daemon::start(root).await.expect("daemon starts");
    let addr = daemon.telemetry_addr().expect("telemetry listens");
    let server = format!("http://{addr}");
    // Jobs are made and moved while the daemon watches, so each phase is observed.
    let started = Instant::now();
    while !["east", "west"].iter().all(|c| {
        daemon
            .clusters()
            .get(*c)
            .is_some_and(|h| h.state == jobrelay::clusters::health::HealthState::Synced)
    }) {
        assert!(started.elapsed() < DEADLINE, "the clusters never synced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut a = batch(&east, "train-a", &[("team", "nlp")]);
    a.running().expect("running");
    a.succeeded().expect("succeeded");
    let mut b = flavored(&east, Flavor::Volcano, "train-b", &[("team", "cv")]);
    b.running().expect("running");
    b.failed("OOMKilled").expect("failed");
    let mut c = batch(
        &east,
        "eval-c",
        &[("team", "nlp"), ("jobrelay.test/behave", "giveup")],
    );
    c.running().expect("running");
    let mut d = batch(&west, "train-d", &[("team", "nlp")]);
    d.running().expect("running");
    d.failed("BackoffLimitExceeded").expect("failed");
    let _e = batch(&west, "eval-e", &[]);
    let mut old_f = batch(&west, "rerun-f", &[]);
    old_f.running().expect("running");

    // The first rerun-f is seen, then deleted while the daemon runs, and made again.
    let started = Instant::now();
    while !jobs(&server, &["list", "--name", "rerun-f"])
        .await
        .out
        .contains("running")
    {
        assert!(started.elapsed() < DEADLINE, "rerun-f never listed running");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    old_f.delete().expect("delete");
    let old_uid = old_f.uid().to_string();
    let new_f = batch(&west, "rerun-f", &[]);
    settled(&server).await;

    // The table: every job, its kind and phase, and what the probe owes each.
    let all = ok(&server, &["list"]).await;
    let header: Vec<&str> = all
        .out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "CLUSTER",
            "NAMESPACE",
            "NAME",
            "KIND",
            "PHASE",
            "AGE",
            "DURATION",
            "PLUGINS"
        ]
    );
    assert_eq!(
        names(&all.out),
        [
            "eval-c", "train-a", "train-b", "eval-e", "rerun-f", "rerun-f", "train-d"
        ],
        "in cluster, namespace, name order:\n{}",
        all.out
    );
    let cells = |line: &str| {
        line.split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let train_a = cells(row(&all.out, "east", "train-a"));
    assert_eq!(
        train_a[..5],
        ["east", "ml", "train-a", "batch-job", "succeeded"]
    );
    assert_eq!(
        train_a.last().map(String::as_str),
        Some("probe:ok"),
        "{}",
        all.out
    );
    let train_b = cells(row(&all.out, "east", "train-b"));
    assert_eq!(train_b[3..5], ["volcano-job", "failed"]);
    let eval_c = row(&all.out, "east", "eval-c");
    assert!(
        eval_c.contains(" running ") && eval_c.ends_with(" dead"),
        "{eval_c}"
    );
    assert!(eval_c.contains("probe:"), "{eval_c}");
    assert!(
        all.err.is_empty(),
        "no warnings, nothing more to page: {}",
        all.err
    );

    // Wide: the uid, raw phase, times, restarts and the probe's last error.
    let wide = ok(&server, &["list", "-o", "wide"]).await;
    let first = wide.out.lines().next().unwrap_or_default();
    for column in [
        "RAW PHASE",
        "UID",
        "CREATED",
        "STARTED",
        "FINISHED",
        "RESTARTS",
        "LAST ERRORS",
    ] {
        assert!(first.contains(column), "{column} in {first}");
    }
    assert!(
        row(&wide.out, "east", "train-a").contains(a.uid()),
        "{}",
        wide.out
    );
    let eval_c = row(&wide.out, "east", "eval-c");
    assert!(
        eval_c.contains("probe: ") && eval_c.contains("give up"),
        "{eval_c}"
    );

    // JSON: the API's answer as it is.
    let json = ok(&server, &["list", "-o", "json"]).await;
    let list: Value = serde_json::from_str(&json.out).expect("JSON");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(7), "{list}");
    assert_eq!(list["remaining"], 0);
    assert!(list.get("continue").is_none(), "{list}");
    assert_eq!(list["items"][1]["name"], "train-a");
    assert_eq!(list["items"][1]["plugins"]["probe"]["dead_letters"], 0);

    // Filters, alone and together, and one the daemon refuses.
    for (args, want) in [
        (&["--phase", "failed"][..], &["train-b", "train-d"][..]),
        (
            &["--phase", "failed,pending"][..],
            &["eval-e", "rerun-f", "train-b", "train-d"][..],
        ),
        (
            &["--cluster", "west", "--phase", "deleted"][..],
            &["rerun-f"][..],
        ),
        (
            &["--cluster", "east", "--phase", "failed", "-o", "wide"][..],
            &["train-b"][..],
        ),
        (
            &["-l", "team=nlp"][..],
            &["eval-c", "train-a", "train-d"][..],
        ),
        (
            &["--selector", "team in (cv,nlp),!jobrelay.test/behave"][..],
            &["train-a", "train-b", "train-d"][..],
        ),
        (&["--kind", "volcano-job"][..], &["train-b"][..]),
        (
            &["--name", "train", "--cluster", "west"][..],
            &["train-d"][..],
        ),
    ] {
        let ran = ok(&server, &[&["list"][..], args].concat()).await;
        assert_eq!(sorted(names(&ran.out)), want, "{args:?}:\n{}", ran.out);
    }
    let sorted_by_name = ok(&server, &["list", "--sort", "-name"]).await;
    assert_eq!(
        names(&sorted_by_name.out).first().map(String::as_str),
        Some("train-d")
    );
    let typo = jobs(&server, &["list", "--phase", "runing"]).await;
    match &typo.outcome {
        Err(
            e @ JobsError::Refused {
                status: 400, error, ..
            },
        ) => {
            assert!(error.starts_with("phase:"), "{error}");
            assert!(e.to_string().contains("/api/v1/jobs?phase=runing"), "{e}");
        }
        other => panic!("a bad phase is refused: {other:?}"),
    }
    let unwatched = ok(&server, &["list", "--cluster", "north"]).await;
    assert!(
        unwatched
            .err
            .contains("warning: cluster `north` is not watched by this replica"),
        "{}",
        unwatched.err
    );
    assert!(unwatched.err.contains("no jobs match"), "{}", unwatched.err);

    // Paging by hand: the count of what remains and the token to go on with.
    let first = ok(&server, &["list", "--limit", "3"]).await;
    assert_eq!(names(&first.out), ["eval-c", "train-a", "train-b"]);
    assert!(
        first.err.starts_with("4 more jobs match: add --continue "),
        "{}",
        first.err
    );
    let token = first
        .err
        .split_whitespace()
        .skip_while(|w| *w != "--continue")
        .nth(1)
        .expect("a token");
    let second = ok(&server, &["list", "--limit", "3", "--continue", token]).await;
    assert_eq!(names(&second.out), ["eval-e", "rerun-f", "rerun-f"]);
    assert!(
        second
            .err
            .starts_with("1 more job matches: add --continue "),
        "{}",
        second.err
    );
    let refused = jobs(&server, &["list", "--phase", "failed", "--continue", token]).await;
    assert!(
        matches!(&refused.outcome, Err(JobsError::Refused { status: 400, error, .. }) if error.starts_with("continue:")),
        "a token continues only its own query: {:?}",
        refused.outcome
    );

    // --all follows every page, as a table and as one JSON object.
    let every = ok(&server, &["list", "--all", "--limit", "2"]).await;
    assert_eq!(names(&every.out), names(&all.out));
    assert!(every.err.is_empty(), "{}", every.err);
    let merged = ok(&server, &["list", "--all", "--limit", "2", "-o", "json"]).await;
    let merged: Value = serde_json::from_str(&merged.out).expect("one JSON object");
    let listed: Vec<&str> = merged["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["name"].as_str())
        .collect();
    assert_eq!(listed, names(&all.out));
    assert_eq!(merged["warnings"], serde_json::json!([]));
    let failed_only = ok(
        &server,
        &["list", "--all", "--limit", "1", "--phase", "failed"],
    )
    .await;
    assert_eq!(names(&failed_only.out), ["train-b", "train-d"]);

    // show: the job, its labels, its transitions and the probe's calls.
    let shown = ok(&server, &["show", "east/ml/train-a"]).await;
    let text = &shown.out;
    for line in [
        "Job:        east/ml/train-a",
        "Kind:       batch-job",
        &format!("UID:        {}", a.uid()),
        "  team=nlp",
        "Transitions:",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} in:\n{text}");
    }
    let transitions: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "Transitions:")
        .skip(2)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(transitions, ["pending", "running", "succeeded"], "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("  probe: ok (delivered phase succeeded")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("TIME") && l.contains("OUTCOME")),
        "{text}"
    );
    assert!(text.contains(" delivered "), "{text}");
    let given_up = ok(&server, &["show", "east/ml/eval-c"]).await;
    assert!(given_up.out.contains(" dead_lettered "), "{}", given_up.out);
    assert!(given_up.out.contains("last error: "), "{}", given_up.out);
    // The job made again under the name of a deleted one: the deleted one is listed under it.
    let rerun = ok(&server, &["show", "west/ml/rerun-f"]).await;
    assert!(
        rerun.out.contains(&format!("UID:        {}", new_f.uid())),
        "{}",
        rerun.out
    );
    assert!(
        rerun.out.contains("Earlier jobs of this name (deleted):"),
        "{}",
        rerun.out
    );
    assert!(
        rerun.out.contains(&format!("uid {old_uid}: deleted")),
        "{}",
        rerun.out
    );
    let json = ok(&server, &["show", "west/ml/rerun-f", "-o", "json"]).await;
    let shown: Value = serde_json::from_str(&json.out).expect("JSON");
    assert_eq!(shown["job"]["uid"], new_f.uid());
    assert_eq!(shown["earlier"][0]["uid"], old_uid.as_str());

    // A job that is not there: the API's error, and exit status 1 from the binary.
    let missing = jobs(&server, &["show", "east/ml/nope"]).await;
    match &missing.outcome {
        Err(
            e @ JobsError::NotFound {
                error,
                held_by: None,
            },
        ) => {
            assert_eq!(error, "no job ml/nope on cluster `east` here");
            assert_eq!(e.to_string(), *error);
        }
        other => panic!("a missing job is not found: {other:?}"),
    }
    assert!(missing.out.is_empty());
    assert!(matches!(
        jobs(&server, &["show", "east/nope"]).await.outcome,
        Err(JobsError::BadJob(_))
    ));
    let binary = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
        .args(["jobs", "show", "east/ml/nope"])
        .env("JOBRELAY_SERVER", &server)
        .output()
        .await
        .expect("jobrelay runs");
    assert_eq!(binary.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&binary.stderr),
        "error: no job ml/nope on cluster `east` here\n"
    );
    let binary = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
        .args([
            "jobs",
            "list",
            "--phase",
            "failed",
            "--cluster",
            "east",
            "-o",
            "wide",
        ])
        .env("JOBRELAY_SERVER", &server)
        .output()
        .await
        .expect("jobrelay runs");
    assert_eq!(binary.status.code(), Some(0));
    assert_eq!(names(&String::from_utf8_lossy(&binary.stdout)), ["train-b"]);

    daemon.shutdown(Duration::from_secs(5)).await;

    // No daemon at all: a clear error that names the URL, quickly, from the library and the
    // binary alike.
    let gone = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let started = Instant::now();
    let unreachable = jobs(&gone.to_string(), &["list"]).await;
    match &unreachable.outcome {
        Err(e @ JobsError::Unreachable { url, .. }) => {
            assert_eq!(*url, format!("http://{gone}/api/v1/jobs"));
            let text = e.to_string();
            assert!(
                text.starts_with(&format!(
                    "cannot reach the jobrelay daemon at http://{gone}/api/v1/jobs: "
                )),
                "{text}"
            );
            assert!(text.contains("refused"), "{text}");
        }
        other => panic!("no daemon is unreachable: {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    let binary = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
        .args([
            "jobs",
            "show",
            "east/ml/train-a",
            "--server",
            &format!("http://{gone}"),
        ])
        .output()
        .await
        .expect("jobrelay runs");
    assert_eq!(binary.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&binary.stderr);
    assert!(
        stderr.starts_with(&format!(
            "error: cannot reach the jobrelay daemon at http://{gone}/api/v1/jobs/east/ml/train-a: "
        )),
        "{stderr}"
    );
}
