//! Backup and restore of the SQLite state, as docs/operations.md tells an operator to do it:
//! `jobrelay state backup` beside the running daemon (the real binary), the daemon killed,
//! the state file replaced by the backup, the daemon started again — and nothing that was
//! delivered before the backup is delivered again, where an empty state would have delivered
//! every listed job anew. A backup never replaces a file, and `-` writes it to standard
//! output (what `kubectl exec … > state.db` takes, the image having no shell to copy with).

use std::time::Duration;

use jobrelay_testkit::{Flavor, JobDriver, SimCluster};

use crate::cluster_sources::delivered;
use crate::process::{Relay, config_folder, count_ids, read_lines};

/// `jobrelay state backup --config ROOT OUT`, as an operator runs it.
async fn backup(root: &std::path::Path, out: &std::ffi::OsStr) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_jobrelay"))
        .args([
            "state".as_ref(),
            "backup".as_ref(),
            "--config".as_ref(),
            root.as_os_str(),
            out,
        ])
        .env("RUST_LOG", "warn")
        .output()
        .await
        .expect("jobrelay runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_beside_the_daemon_restores_without_repeats() {
    let sim = SimCluster::start("alpha").await.expect("simulator");
    let manifest = "wasm: event-log.wasm\ndelivery: every-version\n\
         grants:\n  filesystem:\n    - {host: out/log, guest: /data, writable: true}\n\
         config:\n  file: events.jsonl\n";
    let dir = config_folder(&sim, "log", manifest);
    let root = dir.path();
    let events = root.join("out/log/events.jsonl");
    let mut relay = Relay::start(root, "before the backup");
    let mut first = JobDriver::create(&sim, Flavor::Volcano, "ml", "before").expect("job");
    first.running().expect("running");
    first.succeeded().expect("succeeded");
    delivered(&relay, &events, "alpha", "succeeded").await;
    // The lane writes its cursor just after the call returns: the backup is taken once the
    // job's cursor stands at its end.
    let state = crate::process::state_file(root);
    let started = std::time::Instant::now();
    while !crate::process::cursors(&state, "log")
        .await
        .iter()
        .any(|c| c.uid == first.uid() && c.phase == jobrelay_contract::event::Phase::Succeeded)
    {
        assert!(
            started.elapsed() < crate::process::DEADLINE,
            "no cursor\n{}",
            relay.tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let copy = root.join("backup.db");
    let out = backup(root, copy.as_os_str()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let again = backup(root, copy.as_os_str()).await;
    assert_eq!(again.status.code(), Some(2), "an error, as every command's");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("exists"),
        "a backup never replaces a file: {}",
        String::from_utf8_lossy(&again.stderr)
    );
    let piped = backup(root, "-".as_ref()).await;
    assert!(
        piped.status.success(),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    assert!(
        piped.stdout.starts_with(b"SQLite format 3\0"),
        "standard output is a whole SQLite file ({} bytes)",
        piped.stdout.len()
    );

    // Lost: the daemon and its state, as a node failure takes a pod and its volume.
    relay.sigkill().await;
    let state = root.join("state");
    for entry in std::fs::read_dir(&state).expect("state folder") {
        let path = entry.expect("entry").path();
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("jobrelay.db"))
        {
            std::fs::remove_file(&path).expect("remove");
        }
    }
    std::fs::copy(&copy, state.join("jobrelay.db")).expect("restore");

    let relay = Relay::start(root, "after the restore");
    let mut second = JobDriver::create(&sim, Flavor::Volcano, "ml", "after").expect("job");
    second.running().expect("running");
    let (lines, _) = read_lines(&events);
    let before = lines.len();
    poll_delivered(&relay, &events, "after").await;
    let (lines, torn) = read_lines(&events);
    assert!(torn.is_empty(), "{torn:?}");
    let (_, repeated) = count_ids(&lines);
    assert!(
        repeated.is_empty(),
        "nothing delivered before the backup came again: {repeated:?}\n{}",
        relay.tail()
    );
    assert!(lines.len() > before, "the restored daemon delivers");
}

/// Waits until the event log has an event of the job `name`.
async fn poll_delivered(relay: &Relay, events: &std::path::Path, name: &str) {
    let found = crate::process::poll(crate::process::DEADLINE, || {
        let (lines, _) = read_lines(events);
        if lines.iter().any(|l| l["name"] == name) {
            Ok(())
        } else {
            Err(format!("{} lines", lines.len()))
        }
    })
    .await;
    assert!(found.is_ok(), "no event of {name}\n{}", relay.tail());
}
