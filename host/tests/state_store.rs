//! The state store as the host uses it, on both backends: the `dead-letters` commands over a
//! store (run on a SQLite file and on tables in the test MariaDB by `on_both_backends!`, as
//! `state_store::sqlite::NAME` and `state_store::mysql::NAME`), and the main file's `state:`
//! settings. The store's own promises are tested in its crate (`host/state/tests/`), whose
//! backends and MariaDB helpers these tests share (`common::store`).

use crate::common::mysql_url;
use crate::common::store::{Backend, event, on_both_backends};

use std::path::{Path, PathBuf};

use jobrelay::cli::ops::dead_letters::{self, DeadLettersCommand};
use jobrelay::config::main_file::MainConfig;
use jobrelay_contract::event::Phase;
use jobrelay_state::{MySqlStore, StateBackend, StoreError, open_store};

on_both_backends! {
    cli_lists_replays_and_drops => contract_cli("cli");
}

async fn contract_cli(b: &Backend) {
    let store = b.store().await;
    let store = store.as_ref();
    let s1 = store
        .add_dead_letter(
            "notify",
            &event("prod", "u1", "10", Phase::Failed),
            "webhook said 500\nwith a long body",
            4,
        )
        .await
        .expect("add");
    let s2 = store
        .add_dead_letter(
            "archive",
            &event("prod", "u2", "11", Phase::Succeeded),
            "gave up",
            1,
        )
        .await
        .expect("add");

    let table = dead_letters::list(store, None, false).await.expect("list");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].starts_with("SEQ"), "{table}");
    assert!(
        lines[1].contains("notify") && lines[1].contains("prod/u1/10"),
        "{table}"
    );
    assert!(
        lines[0].contains(" JOB ") && lines[1].contains("prod/team-a/train-u1"),
        "the job by its name: {table}"
    );
    assert!(
        lines[1].contains("failed") && lines[1].contains("webhook said 500…"),
        "{table}"
    );
    assert!(
        !table.contains("long body"),
        "errors are cut to one line: {table}"
    );
    assert!(
        lines[2].contains("archive") && lines[2].contains("succeeded"),
        "{table}"
    );

    let only = dead_letters::list(store, Some("archive"), false)
        .await
        .expect("list");
    assert_eq!(only.lines().count(), 2, "{only}");
    let none = dead_letters::list(store, Some("nobody"), false)
        .await
        .expect("list");
    assert!(none.contains("no dead letters"), "{none}");

    let json = dead_letters::list(store, None, true).await.expect("json");
    let parsed: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert_eq!(parsed.len(), 2);
    assert_eq!(parsed[0]["seq"], s1);
    assert_eq!(parsed[0]["plugin"], "notify");
    assert_eq!(parsed[0]["event"]["id"], "prod/u1/10");
    assert_eq!(parsed[0]["event"]["object"]["spec"]["b"], 2);
    assert_eq!(parsed[0]["error"], "webhook said 500\nwith a long body");
    assert_eq!(parsed[0]["replay_requested"], false);

    // Neither ids nor --all: refused, nothing changes.
    let err = dead_letters::replay(store, Some("notify"), &[], false)
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("--all"), "{err}");
    let err = dead_letters::drop(store, None, &[], false)
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("--all"), "{err}");

    let done = dead_letters::replay(store, None, &[s1, 999_999], false)
        .await
        .expect("replay");
    let msg = &done.text;
    assert!(msg.starts_with("1 dead letter marked for replay"), "{msg}");
    assert!(msg.contains("1 of the 2 ids do not exist"), "{msg}");
    assert!(
        done.missing,
        "an id that matched nothing makes the command fail"
    );
    let table = dead_letters::list(store, Some("notify"), false)
        .await
        .expect("list");
    assert!(table.contains("requested"), "{table}");

    // Through the clap command, as `main` will call it.
    let msg = dead_letters::run(
        store,
        &DeadLettersCommand::Drop {
            plugin: Some("archive".into()),
            all: true,
            ids: vec![],
        },
    )
    .await
    .expect("drop");
    assert_eq!(msg.text, "1 dead letter dropped\n");
    assert!(!msg.missing);
    let msg = dead_letters::run(
        store,
        &DeadLettersCommand::Replay {
            plugin: None,
            all: true,
            ids: vec![],
        },
    )
    .await
    .expect("replay all");
    assert!(msg.text.starts_with("1 dead letter marked"), "{msg:?}");
    let left = store.dead_letters(None).await.expect("list");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].seq, s1);
    assert_ne!(s1, s2);
    store.close().await;
}

#[tokio::test]
async fn mysql_a_bad_table_prefix_is_refused_naming_the_field() {
    for bad in ["job-relay_", "x; DROP TABLE y; --", "", &"p".repeat(33)] {
        let err = MySqlStore::open(&mysql_url(), bad)
            .await
            .expect_err("refused");
        assert!(matches!(err, StoreError::BadTablePrefix { .. }), "{err}");
        assert!(err.to_string().contains("state.table_prefix"), "{err}");

        let backend = StateBackend::MySql {
            url: mysql_url(),
            table_prefix: bad.to_string(),
        };
        let err = open_store(&backend).await.map(|_| ()).expect_err("refused");
        assert!(err.to_string().contains("state.table_prefix"), "{err}");
    }
    let err = MainConfig::parse(
        "state:\n  url: env:JOBRELAY_STATE_URL\n  table_prefix: job-relay\n",
        Path::new("/etc/jobrelay"),
    )
    .expect_err("refused in the main file");
    assert!(err.to_string().contains("state.table_prefix"), "{err}");
}

#[tokio::test]
async fn settings_with_both_path_and_url_are_refused() {
    let err = MainConfig::parse(
        "state:\n  path: state/jobrelay.db\n  url: env:JOBRELAY_STATE_URL\n",
        Path::new("/etc/jobrelay"),
    )
    .expect_err("both");
    let text = err.to_string();
    assert!(
        text.contains("state.path") && text.contains("state.url"),
        "{text}"
    );

    let main = MainConfig::parse(
        "state:\n  url: env:JOBRELAY_STATE_URL\n  table_prefix: relay_\n",
        Path::new("/etc/jobrelay"),
    )
    .expect("MySQL state");
    assert_eq!(
        main.state,
        StateBackend::MySql {
            url: "env:JOBRELAY_STATE_URL".into(),
            table_prefix: "relay_".into(),
        }
    );
    let main = MainConfig::parse(
        "state:\n  path: state/jobrelay.db\n",
        Path::new("/etc/jobrelay"),
    )
    .expect("SQLite state");
    assert_eq!(
        main.state,
        StateBackend::Sqlite(PathBuf::from("/etc/jobrelay/state/jobrelay.db"))
    );
}

#[test]
fn clap_parses_the_subcommands() {
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Top {
        #[command(subcommand)]
        command: DeadLettersCommand,
    }
    let t = Top::try_parse_from(["x", "replay", "--plugin", "p", "3", "4"]).expect("parse");
    assert_eq!(
        t.command,
        DeadLettersCommand::Replay {
            plugin: Some("p".into()),
            all: false,
            ids: vec![3, 4]
        }
    );
    let t = Top::try_parse_from(["x", "list", "--json"]).expect("parse");
    assert_eq!(
        t.command,
        DeadLettersCommand::List {
            plugin: None,
            json: true
        }
    );
    assert!(Top::try_parse_from(["x", "drop", "--all", "3"]).is_err());
}
