//! The config folder as the daemon sees it: real files, real symlinks, real inotify.

use std::fs;
use std::path::Path;
use std::time::Duration;

use jobrelay::config::folder_watch::{FolderWatch, Trigger};
use jobrelay::config::state::{Change, ConfigState};

fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n\
         contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n\
         users:\n- name: u\n  user:\n    token: secret-token\n"
    )
}

fn kubelet_write(dir: &Path, stamp: &str, files: &[(&str, &str)]) {
    jobrelay_testkit::configmap::kubelet_write(dir, stamp, files).expect("kubelet-style write");
}

fn describe(c: &Change<jobrelay::config::sources::ClusterSource>) -> String {
    match c {
        Change::Added(s) => format!("added {}", s.name),
        Change::Changed(s) => format!("changed {}", s.name),
        Change::Removed(n) => format!("removed {n}"),
    }
}

async fn next_trigger(watch: &mut FolderWatch) -> Trigger {
    tokio::time::timeout(Duration::from_secs(20), watch.next())
        .await
        .expect("a file event within 20 s")
}

#[tokio::test]
async fn configmap_symlink_swap_is_noticed_and_applied() {
    let root = tempfile::tempdir().expect("tempdir");
    let clusters = root.path().join("clusters");
    kubelet_write(
        &clusters,
        "..2026_11_21_10_00_00.1",
        &[("alpha", &kubeconfig("http://127.0.0.1:1"))],
    );

    let (mut state, first) = ConfigState::load(root.path()).expect("loads");
    assert!(matches!(first.clusters.as_slice(), [Change::Added(c)] if c.name == "alpha"));

    let mut watch =
        FolderWatch::new(Duration::from_millis(100), Duration::from_secs(3600)).expect("watcher");
    watch.ensure_watched(&state.watched_dirs());

    // The kubelet's update: new folder, atomic `..data` swap, old folder deleted.
    kubelet_write(
        &clusters,
        "..2026_11_21_10_05_00.2",
        &[
            ("alpha", &kubeconfig("http://127.0.0.1:2")),
            ("beta", &kubeconfig("http://127.0.0.1:3")),
        ],
    );
    assert_eq!(next_trigger(&mut watch).await, Trigger::FileEvent);
    let update = state.refresh();
    let mut seen: Vec<String> = update.clusters.iter().map(describe).collect();
    seen.sort();
    assert_eq!(seen, ["added beta", "changed alpha"]);

    // A second swap still reaches us: the watch did not die with the first one.
    kubelet_write(
        &clusters,
        "..2026_11_21_10_10_00.3",
        &[("alpha", &kubeconfig("http://127.0.0.1:4"))],
    );
    assert_eq!(next_trigger(&mut watch).await, Trigger::FileEvent);
    let update = state.refresh();
    assert!(
        update
            .clusters
            .iter()
            .any(|c| matches!(c, Change::Changed(s) if s.name == "alpha")),
        "{:?}",
        update.clusters
    );
    assert!(state.problems().is_empty(), "{:?}", state.problems());
}

#[tokio::test]
async fn broken_file_keeps_its_last_good_version_and_is_reported() {
    let root = tempfile::tempdir().expect("tempdir");
    fs::create_dir_all(root.path().join("clusters")).expect("clusters dir");
    let alpha = root.path().join("clusters/alpha.yaml");
    let beta = root.path().join("clusters/beta.yaml");
    fs::write(&alpha, kubeconfig("http://127.0.0.1:1")).expect("write");
    fs::write(&beta, kubeconfig("http://127.0.0.1:2")).expect("write");
    let (mut state, _) = ConfigState::load(root.path()).expect("loads");

    fs::write(&alpha, "clusters: [this is: not, a kubeconfig").expect("break it");
    let update = state.refresh();
    assert!(
        update.is_empty(),
        "a broken file changes nothing: {update:?}"
    );
    let why = state.problems().get(&alpha).expect("alpha is reported");
    assert!(why.contains("parse"), "{why}");
    let alpha_server = &state.clusters()["alpha"].kubeconfig.clusters[0];
    assert_eq!(
        alpha_server
            .cluster
            .as_ref()
            .and_then(|c| c.server.as_deref()),
        Some("http://127.0.0.1:1"),
        "the last good version stays in force"
    );
    assert!(state.clusters().contains_key("beta"));

    fs::write(&alpha, kubeconfig("http://127.0.0.1:9")).expect("fix it");
    let update = state.refresh();
    assert!(matches!(update.clusters.as_slice(), [Change::Changed(s)] if s.name == "alpha"));
    assert!(state.problems().is_empty());

    // A really removed file removes its cluster.
    fs::remove_file(&beta).expect("remove");
    let update = state.refresh();
    assert!(matches!(update.clusters.as_slice(), [Change::Removed(n)] if n == "beta"));
}

#[tokio::test]
async fn broken_main_file_is_fatal_at_start_but_not_later() {
    let root = tempfile::tempdir().expect("tempdir");
    let main = root.path().join("jobrelay.yaml");
    fs::write(&main, "kinds: [{name: volcano-job}]\n").expect("write");
    let (mut state, _) = ConfigState::load(root.path()).expect("loads");
    assert_eq!(state.main().kinds.len(), 1);

    fs::write(&main, "kinds: {oops").expect("break");
    let update = state.refresh();
    assert!(update.is_empty());
    assert!(state.problems().contains_key(&main));
    assert_eq!(state.main().kinds.len(), 1, "last good main file stays");

    let err = ConfigState::load(root.path()).expect_err("a fresh start refuses it");
    assert_eq!(err.0, main);
}

#[tokio::test]
async fn plugin_manifest_errors_name_the_field() {
    let root = tempfile::tempdir().expect("tempdir");
    fs::create_dir_all(root.path().join("plugins")).expect("plugins dir");
    fs::write(root.path().join("plugin.wasm"), b"\0asm-not-really").expect("wasm");
    let good = root.path().join("plugins/good.yaml");
    fs::write(&good, "wasm: plugin.wasm\nkinds: [volcano-job]\n").expect("write");
    let bad_kind = root.path().join("plugins/bad-kind.yaml");
    fs::write(&bad_kind, "wasm: plugin.wasm\nkinds: [tf-job]\n").expect("write");
    let missing = root.path().join("plugins/missing.yaml");
    fs::write(&missing, "wasm: nowhere.wasm\n").expect("write");
    let typo = root.path().join("plugins/typo.yaml");
    fs::write(&typo, "wasm: plugin.wasm\ntimeout: 5\n").expect("write");

    let (state, first) = ConfigState::load(root.path()).expect("loads");
    assert_eq!(first.plugins.len(), 1);
    assert!(state.plugins().contains_key("good"));
    let p = state.problems();
    assert!(p[&bad_kind].contains("tf-job"), "{}", p[&bad_kind]);
    assert!(p[&missing].contains("nowhere.wasm"), "{}", p[&missing]);
    assert!(p[&typo].contains("timeout"), "{}", p[&typo]);
}

#[tokio::test]
async fn the_periodic_rescan_finds_changes_without_file_events() {
    let root = tempfile::tempdir().expect("tempdir");
    fs::create_dir_all(root.path().join("clusters")).expect("clusters dir");
    let (mut state, _) = ConfigState::load(root.path()).expect("loads");
    // No folder is watched: only the re-scan can notice the new file.
    let mut watch =
        FolderWatch::new(Duration::from_millis(50), Duration::from_millis(300)).expect("watcher");
    fs::write(
        root.path().join("clusters/late.yaml"),
        kubeconfig("http://127.0.0.1:5"),
    )
    .expect("write");
    assert_eq!(next_trigger(&mut watch).await, Trigger::Rescan);
    let update = state.refresh();
    assert!(matches!(update.clusters.as_slice(), [Change::Added(s)] if s.name == "late"));
}
