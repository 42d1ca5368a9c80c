//! The config folder as the daemon sees it: real files, real symlinks, real inotify.

use std::fs;
use std::path::Path;
use std::time::Duration;

use jobrelay::config::folder_watch::{FolderWatch, Trigger, WatchedDir};
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

    let mut watch = FolderWatch::new(
        Duration::from_millis(100),
        Duration::from_secs(3600),
        Vec::new(),
    )
    .expect("watcher");
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
    let mut watch = FolderWatch::new(
        Duration::from_millis(50),
        Duration::from_millis(300),
        Vec::new(),
    )
    .expect("watcher");
    fs::write(
        root.path().join("clusters/late.yaml"),
        kubeconfig("http://127.0.0.1:5"),
    )
    .expect("write");
    assert_eq!(next_trigger(&mut watch).await, Trigger::Rescan);
    let update = state.refresh();
    assert!(matches!(update.clusters.as_slice(), [Change::Added(s)] if s.name == "late"));
}

/// Everything a failure to read can look like — a folder that cannot be listed, a name that
/// became a folder, a main file that is a link loop or holds only comments — keeps the last
/// good state and is reported; nothing is removed.
#[tokio::test]
async fn failures_to_read_keep_the_last_good_state() {
    let root = tempfile::tempdir().expect("tempdir");
    let r = root.path();
    fs::create_dir_all(r.join("clusters")).expect("clusters dir");
    fs::create_dir_all(r.join("plugins")).expect("plugins dir");
    fs::write(r.join("plugin.wasm"), b"\0asm-not-really").expect("wasm");
    fs::write(
        r.join("clusters/alpha.yaml"),
        kubeconfig("http://127.0.0.1:1"),
    )
    .expect("write");
    let manifest = r.join("plugins/log.yaml");
    fs::write(&manifest, "wasm: plugin.wasm\n").expect("write");
    let main = r.join("jobrelay.yaml");
    fs::write(&main, "kinds: [{name: volcano-job}]\n").expect("write");
    let (mut state, _) = ConfigState::load(r).expect("loads");
    assert!(state.clusters().contains_key("alpha"));
    assert!(state.plugins().contains_key("log"));

    // The clusters folder cannot be listed (here a link loop; in production, e.g., EMFILE
    // under an open-file limit): the scan changes nothing.
    fs::rename(r.join("clusters"), r.join("clusters.away")).expect("move away");
    std::os::unix::fs::symlink("clusters", r.join("clusters")).expect("link loop");
    let update = state.refresh();
    assert!(
        update.is_empty(),
        "a failed scan changes nothing: {update:?}"
    );
    assert!(state.clusters().contains_key("alpha"));
    assert!(state.plugins().contains_key("log"));
    let why = &state.problems()[&r.join("clusters")];
    assert!(why.contains("cannot read the folder"), "{why}");
    let err = ConfigState::load(r).expect_err("a fresh start refuses an unreadable folder");
    assert_eq!(err.0, r.join("clusters"));
    fs::remove_file(r.join("clusters")).expect("unlink");
    fs::rename(r.join("clusters.away"), r.join("clusters")).expect("move back");
    assert!(state.refresh().is_empty());
    assert!(state.problems().is_empty(), "{:?}", state.problems());

    // A manifest's name becomes a folder: a problem, not a removed plugin.
    fs::remove_file(&manifest).expect("remove");
    fs::create_dir(&manifest).expect("a folder in its place");
    let update = state.refresh();
    assert!(update.is_empty(), "{update:?}");
    assert!(state.plugins().contains_key("log"));
    assert!(state.problems().contains_key(&manifest));
    fs::remove_dir(&manifest).expect("remove folder");
    fs::write(&manifest, "wasm: plugin.wasm\n").expect("write back");
    assert!(state.refresh().is_empty());

    // A main file that is a link loop, or empty, or only comments: refused, last good kept.
    for broken in ["", "# all commented out\n#kinds: []\n", "\n\n   \n"] {
        fs::write(&main, broken).expect("write");
        let update = state.refresh();
        assert!(update.is_empty(), "{broken:?}: {update:?}");
        assert_eq!(
            state.main().kinds.len(),
            1,
            "{broken:?}: last good main file stays"
        );
        let why = &state.problems()[&main];
        assert!(why.contains("empty"), "{why}");
    }
    fs::remove_file(&main).expect("remove");
    std::os::unix::fs::symlink("jobrelay.yaml", &main).expect("link loop");
    let update = state.refresh();
    assert!(update.is_empty(), "{update:?}");
    assert_eq!(
        state.main().kinds.len(),
        1,
        "a link loop is not a missing main file"
    );
    assert!(state.problems().contains_key(&main));
}

/// An unparsable label selector would make every list and watch fail on every cluster: it is
/// refused when the main file is read, at start and while running, naming the field.
#[tokio::test]
async fn a_bad_label_selector_is_refused_by_name() {
    let root = tempfile::tempdir().expect("tempdir");
    let main = root.path().join("jobrelay.yaml");
    fs::write(&main, "watch: {label_selector: \"team=ml\"}\n").expect("write");
    let (mut state, _) = ConfigState::load(root.path()).expect("loads");

    fs::write(&main, "watch: {label_selector: \"team in ml\"}\n").expect("break");
    assert!(state.refresh().is_empty());
    let why = &state.problems()[&main];
    assert!(why.contains("watch.label_selector"), "{why}");
    assert_eq!(
        state.main().watch.label_selector.as_deref(),
        Some("team=ml"),
        "the last good selector stays"
    );
    let err = ConfigState::load(root.path()).expect_err("refused at start");
    assert!(
        err.1.to_string().contains("watch.label_selector"),
        "{}",
        err.1
    );
}

/// jobrelay's own reads of the folder are not changes: reading every file many times raises
/// no trigger (it did, and each re-read then triggered the next one), while a write does.
#[tokio::test]
async fn reading_the_folder_is_not_a_change() {
    let root = tempfile::tempdir().expect("tempdir");
    let plugins = root.path().join("plugins");
    fs::create_dir_all(&plugins).expect("plugins dir");
    let manifest = plugins.join("p.yaml");
    fs::write(&manifest, "wasm: p.wasm\n").expect("write");
    fs::write(root.path().join("p.wasm"), vec![0u8; 1 << 20]).expect("write");
    let mut watch = FolderWatch::new(
        Duration::from_millis(50),
        Duration::from_secs(3600),
        Vec::new(),
    )
    .expect("watch");
    watch.ensure_watched(&[WatchedDir::tree(root.path())]);

    for _ in 0..20 {
        let _ = ConfigState::load(root.path()).expect("loads");
        fs::read(&manifest).expect("read");
    }
    let quiet = tokio::time::timeout(Duration::from_secs(2), watch.next()).await;
    assert!(quiet.is_err(), "reads raised a trigger: {quiet:?}");

    fs::write(&manifest, "wasm: p.wasm\ntimeout_ms: 100\n").expect("change");
    assert_eq!(next_trigger(&mut watch).await, Trigger::FileEvent);
}

/// Absurd numbers are refused, each naming its field, in the file that holds it: a bad
/// `plugin_defaults` value is the main file's problem, not every manifest's.
#[tokio::test]
async fn absurd_numbers_are_refused_in_the_file_that_holds_them() {
    let root = tempfile::tempdir().expect("tempdir");
    let r = root.path();
    fs::create_dir_all(r.join("plugins")).expect("plugins dir");
    fs::write(r.join("plugin.wasm"), b"\0asm-not-really").expect("wasm");
    let main = r.join("jobrelay.yaml");
    fs::write(&main, "plugin_defaults: {concurrency: 4}\n").expect("write");
    let good = r.join("plugins/good.yaml");
    fs::write(&good, "wasm: plugin.wasm\n").expect("write");
    let (mut state, _) = ConfigState::load(r).expect("loads");

    for (bad_main, field) in [
        (
            "plugin_defaults: {concurrency: 1000000000000}\n",
            "plugin_defaults.concurrency",
        ),
        (
            "plugin_defaults: {timeout_ms: 0}\n",
            "plugin_defaults.timeout_ms",
        ),
        ("debounce_ms: 10000000000000\n", "debounce_ms"),
        ("rescan_seconds: 0\n", "rescan_seconds"),
    ] {
        fs::write(&main, bad_main).expect("write");
        assert!(state.refresh().is_empty(), "{bad_main}");
        let why = &state.problems()[&main];
        assert!(why.contains(field), "{bad_main}: {why}");
        assert!(
            !state.problems().contains_key(&good),
            "{bad_main}: blamed on a manifest"
        );
    }
    fs::write(&main, "plugin_defaults: {concurrency: 4}\n").expect("write");
    state.refresh();

    for (bad, field) in [
        ("concurrency: 1000000000000", "concurrency"),
        (
            "retry: {min_delay_ms: 5000, max_delay_ms: 100}",
            "retry.max_delay_ms",
        ),
        ("retry: {max_attempts: 0}", "retry.max_attempts"),
        ("memory_mb: 100000", "memory_mb"),
        ("max_queued_per_job: 1", "max_queued_per_job"),
    ] {
        let manifest = r.join("plugins/odd.yaml");
        fs::write(&manifest, format!("wasm: plugin.wasm\n{bad}\n")).expect("write");
        state.refresh();
        let why = &state.problems()[&manifest];
        assert!(why.contains(field), "{bad}: {why}");
    }
}

/// A kubeconfig that parses but cannot work never replaces the cluster's last good one: the
/// client configuration is built before it is adopted.
#[tokio::test]
async fn a_kubeconfig_that_cannot_work_keeps_the_last_good_one() {
    let root = tempfile::tempdir().expect("tempdir");
    fs::create_dir_all(root.path().join("clusters")).expect("clusters dir");
    let alpha = root.path().join("clusters/alpha.yaml");
    fs::write(&alpha, kubeconfig("http://127.0.0.1:1")).expect("write");
    let (mut state, _) = ConfigState::load(root.path()).expect("loads");

    let good = kubeconfig("http://127.0.0.1:1");
    let broken = [
        ("no server", good.replace("    server: http://127.0.0.1:1\n", "    insecure-skip-tls-verify: true\n")),
        ("missing context", good.replace("current-context: c", "current-context: elsewhere")),
        ("context names no cluster", good.replace("    cluster: c\n    user: u", "    cluster: gone\n    user: u")),
        (
            "CA data not base64",
            good.replace(
                "    server: http://127.0.0.1:1\n",
                "    server: https://127.0.0.1:1\n    certificate-authority-data: '%%% not base64 %%%'\n",
            ),
        ),
    ];
    for (what, text) in broken {
        assert_ne!(text, good, "{what}: the test did not change the file");
        fs::write(&alpha, &text).expect("write");
        let update = state.refresh();
        assert!(update.is_empty(), "{what}: {update:?}");
        let why = &state.problems()[&alpha];
        assert!(why.contains("kubeconfig"), "{what}: {why}");
        let server = state.clusters()["alpha"].kubeconfig.clusters[0]
            .cluster
            .as_ref()
            .and_then(|c| c.server.clone());
        assert_eq!(server.as_deref(), Some("http://127.0.0.1:1"), "{what}");
    }
}

/// `clusters_dir` names a folder apart from the config folder — a Secret mounted whole, whose
/// keys are the clusters' names without an extension: its clusters are read at start, and a
/// key added to the Secret later (the kubelet's swap of `..data`) is a new cluster, noticed by
/// the folder watch; the watch covers that folder too.
#[tokio::test]
async fn a_clusters_dir_apart_from_the_config_folder_is_read_and_followed() {
    let root = tempfile::tempdir().expect("tempdir");
    let secret = tempfile::tempdir().expect("secret mount");
    fs::write(
        root.path().join("jobrelay.yaml"),
        format!("clusters_dir: {}\n", secret.path().display()),
    )
    .expect("main file");
    kubelet_write(
        secret.path(),
        "..2026_11_26_00_00_00.000000001",
        &[("east", &kubeconfig("http://127.0.0.1:5"))],
    );
    let (mut state, first) = ConfigState::load(root.path()).expect("loads");
    assert_eq!(
        first.clusters.iter().map(describe).collect::<Vec<_>>(),
        ["added east"]
    );
    assert!(
        state.watched_dirs().iter().any(|d| d.path == secret.path()),
        "{:?}",
        state.watched_dirs()
    );

    let mut watch = FolderWatch::new(
        Duration::from_millis(50),
        Duration::from_secs(3600),
        Vec::new(),
    )
    .expect("watcher");
    watch.ensure_watched(&state.watched_dirs());
    kubelet_write(
        secret.path(),
        "..2026_11_26_00_01_00.000000002",
        &[
            ("east", &kubeconfig("http://127.0.0.1:5")),
            ("west", &kubeconfig("http://127.0.0.1:6")),
        ],
    );
    assert_eq!(next_trigger(&mut watch).await, Trigger::FileEvent);
    let update = state.refresh();
    assert_eq!(
        update.clusters.iter().map(describe).collect::<Vec<_>>(),
        ["added west"]
    );
}

/// `plugin_manifests_dir` names a folder apart from the config folder — a ConfigMap of
/// manifests mounted whole, as the chart mounts it: its manifests are read at start, and a
/// manifest added by the kubelet's swap of `..data` (what `helm upgrade` with a new plugin
/// does) is noticed by the folder watch and added, the others untouched. The folder is read
/// once at start: an edit naming another folder is pending until a restart, and the config
/// folder itself is refused (its main file would be a manifest).
#[tokio::test]
async fn a_manifests_folder_mounted_whole_is_read_and_followed() {
    let root = tempfile::tempdir().expect("tempdir");
    let mount = tempfile::tempdir().expect("configmap mount");
    let wasm = root.path().join("wasm");
    fs::create_dir_all(&wasm).expect("wasm folder");
    for name in ["a", "b"] {
        fs::write(wasm.join(format!("{name}.wasm")), name).expect("component");
    }
    let main = root.path().join("jobrelay.yaml");
    fs::write(
        &main,
        format!(
            "plugin_dir: wasm\nplugin_manifests_dir: {}\n",
            mount.path().display()
        ),
    )
    .expect("main file");
    // A manifest in the default folder is not read once another is named.
    fs::create_dir_all(root.path().join("plugins")).expect("plugins");
    fs::write(root.path().join("plugins/stray.yaml"), "wasm: a.wasm\n").expect("stray");
    kubelet_write(
        mount.path(),
        "..2026_11_27_00_00_00.000000001",
        &[("a.yaml", "wasm: a.wasm\n")],
    );
    let (mut state, first) = ConfigState::load(root.path()).expect("loads");
    let names = |changes: &[Change<jobrelay::config::sources::PluginSource>]| {
        changes
            .iter()
            .map(|c| match c {
                Change::Added(p) => format!("added {}", p.spec.name),
                Change::Changed(p) => format!("changed {}", p.spec.name),
                Change::Removed(n) => format!("removed {n}"),
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&first.plugins), ["added a"]);
    assert_eq!(
        state.plugins()["a"].manifest_path,
        mount.path().join("a.yaml")
    );
    assert!(
        state
            .watched_dirs()
            .iter()
            .any(|d| d.path == mount.path() && d.recursive),
        "{:?}",
        state.watched_dirs()
    );

    let mut watch = FolderWatch::new(
        Duration::from_millis(50),
        Duration::from_secs(3600),
        Vec::new(),
    )
    .expect("watcher");
    watch.ensure_watched(&state.watched_dirs());
    kubelet_write(
        mount.path(),
        "..2026_11_27_00_01_00.000000002",
        &[("a.yaml", "wasm: a.wasm\n"), ("b.yaml", "wasm: b.wasm\n")],
    );
    assert_eq!(next_trigger(&mut watch).await, Trigger::FileEvent);
    let update = state.refresh();
    assert_eq!(names(&update.plugins), ["added b"]);
    assert!(state.problems().is_empty(), "{:?}", state.problems());

    // Read once at start: another folder named later is pending, and the mount stays in use.
    fs::write(&main, "plugin_dir: wasm\nplugin_manifests_dir: elsewhere\n").expect("edit");
    let update = state.refresh();
    assert!(update.plugins.is_empty(), "{:?}", names(&update.plugins));
    assert_eq!(state.restart_pending(), ["plugin_manifests_dir"]);
    assert_eq!(state.plugins().len(), 2);

    let other = tempfile::tempdir().expect("tempdir");
    fs::write(
        other.path().join("jobrelay.yaml"),
        "plugin_manifests_dir: .\n",
    )
    .expect("main file");
    let (_, why) = ConfigState::load(other.path()).expect_err("the config folder itself");
    assert!(why.to_string().contains("plugin_manifests_dir"), "{why}");
}

/// The daemon's own writes inside the config folder (its state file, with the `-wal` file
/// every acknowledgement appends to) are not config changes: they raise no re-read, while a
/// manifest written beside them still does.
#[tokio::test]
async fn the_daemons_own_state_writes_do_not_trigger_a_re_read() {
    let root = tempfile::tempdir().expect("tempdir");
    let state_file = root.path().join("state/jobrelay.db");
    fs::create_dir_all(root.path().join("state")).expect("state folder");
    fs::create_dir_all(root.path().join("plugins")).expect("plugins folder");
    let mut watch = FolderWatch::new(
        Duration::from_millis(50),
        Duration::from_secs(3600),
        vec![state_file.clone()],
    )
    .expect("watcher");
    watch.ensure_watched(&[WatchedDir::tree(root.path())]);

    for round in 0..20 {
        fs::write(&state_file, format!("page {round}")).expect("db");
        fs::write(
            root.path().join("state/jobrelay.db-wal"),
            format!("frame {round}"),
        )
        .expect("wal");
    }
    let quiet = tokio::time::timeout(Duration::from_millis(600), watch.next()).await;
    assert!(
        quiet.is_err(),
        "state writes triggered a re-read: {quiet:?}"
    );

    fs::write(root.path().join("plugins/log.yaml"), "wasm: log.wasm\n").expect("manifest");
    assert_eq!(next_trigger(&mut watch).await, Trigger::FileEvent);
}

/// A running daemon's main file edited in ways `jobrelay check` refuses — a SQL connection to
/// a database jobrelay does not speak, a custom kind without an API group — is refused the same
/// way: the file is reported with the field, and the last good version stays. An edit of a
/// section read once at start (`sql` here) is not lost in silence either: it is named as
/// pending until a restart.
#[test]
fn main_file_edits_check_refuses_are_refused_and_read_once_edits_are_named() {
    let root = tempfile::tempdir().expect("tempdir");
    let main = root.path().join("jobrelay.yaml");
    fs::write(&main, "kinds: [{name: volcano-job}]\n").expect("write");
    let (mut state, _) = ConfigState::load(root.path()).expect("loads");
    assert!(state.restart_pending().is_empty());
    let edit = |state: &mut ConfigState, text: &str| -> Option<String> {
        fs::write(&main, text).expect("write");
        state.refresh();
        state.problems().get(&main).cloned()
    };

    let why = edit(
        &mut state,
        "kinds: [{name: volcano-job}]\nsql:\n  connections:\n    pg: {url: \"postgres://u:p@db:5432/x\"}\n",
    )
    .expect("the main file is reported");
    assert!(why.contains("sql.connections.pg.url"), "{why}");
    assert!(!why.contains("u:p@"), "never the credentials: {why}");
    assert!(
        state.main().sql.connections.is_empty(),
        "the last good file stays"
    );
    let why = edit(
        &mut state,
        "kinds:\n  - name: trainjob\n    group: \"\"\n    version: v1\n    kind: TrainJob\n    \
         plural: trainjobs\n    normalizer: {conditions: [{type: Done, phase: succeeded}]}\n",
    )
    .expect("the main file is reported");
    assert!(why.contains("group"), "{why}");
    let why = edit(
        &mut state,
        "kinds: [{name: volcano-job}]\nsql:\n  connections:\n    db: {url: \"sqlite:///tmp/x.db\"}\n",
    );
    assert_eq!(why, None);
    assert_eq!(state.restart_pending(), ["sql"]);
}

/// A kubeconfig whose cluster has no `server` is refused with an error that says `server`
/// (kube's own says only that a URL could not be parsed), and nothing of the cluster starts.
#[test]
fn a_kubeconfig_without_a_server_is_refused_naming_server() {
    let root = tempfile::tempdir().expect("tempdir");
    let clusters = root.path().join("clusters");
    fs::create_dir_all(&clusters).expect("mkdir");
    let without = kubeconfig("https://10.0.0.1:6443").replace(
        "    server: https://10.0.0.1:6443\n",
        "    insecure-skip-tls-verify: true\n",
    );
    assert!(!without.contains("server"), "{without}");
    let file = clusters.join("east.yaml");
    fs::write(&file, without).expect("write");
    let (state, first) = ConfigState::load(root.path()).expect("loads");
    assert!(first.clusters.is_empty());
    let why = state.problems().get(&file).expect("the file is reported");
    assert!(why.contains("`server`"), "{why}");
}

#[tokio::test]
async fn filter_errors_name_the_field_and_the_last_good_filter_stays() {
    let root = tempfile::tempdir().expect("tempdir");
    fs::create_dir_all(root.path().join("plugins")).expect("plugins dir");
    fs::write(root.path().join("plugin.wasm"), b"\0asm-not-really").expect("wasm");
    let manifest = root.path().join("plugins/picky.yaml");
    fs::write(
        &manifest,
        "wasm: plugin.wasm\nfilter:\n  namespaces: [team-a]\n  phases: [failed]\n",
    )
    .expect("write");
    let (mut state, first) = ConfigState::load(root.path()).expect("loads");
    assert_eq!(first.plugins.len(), 1);
    let good = state.plugins()["picky"].lane.filter.clone();
    assert_eq!(good.spec().namespaces, ["team-a"]);

    for (text, needle) in [
        ("filter:\n  namespace: [a]\n", "namespace"),
        ("filter:\n  phases: [runing]\n", "runing"),
        ("filter:\n  namespaces: [a, '']\n", "filter.namespaces[1]"),
        (
            "filter:\n  labels: 'team in ml'\n",
            "filter.labels: `team in ml`",
        ),
        (
            "filter:\n  expression: \"event.phase ==\"\n",
            "filter.expression",
        ),
        ("filter:\n  expression: 'event.name'\n", "gives a string"),
        ("filter:\n  kinds: [tf-job]\n", "filter.kinds: `tf-job`"),
        (
            "kinds: [volcano-job]\nfilter:\n  kinds: [volcano-job]\n",
            "give the kinds once",
        ),
    ] {
        fs::write(&manifest, format!("wasm: plugin.wasm\n{text}")).expect("write");
        let update = state.refresh();
        assert!(update.plugins.is_empty(), "{text}: nothing changes");
        let problem = &state.problems()[&manifest];
        assert!(problem.contains(needle), "{text}: {problem}");
        assert_eq!(
            state.plugins()["picky"].lane.filter,
            good,
            "{text}: the last good filter stays"
        );
    }
}
