//! Which `helm upgrade` rolls the pod: the Deployment's pod template carries
//! `checksum/read-once-config`, the checksum of the main file's sections the daemon reads once
//! at start, as the rendered ConfigMap has them. An upgrade that edits one of them (through
//! `config:` or a value the chart writes it from) changes the pod template, so the pod is
//! replaced and the new value is read; any other edit of the main file changes the ConfigMap
//! alone, and the running daemon follows it live.

use super::*;
use jobrelay::config::main_file::READ_ONCE_SECTIONS;

const ANNOTATION: &str = "checksum/read-once-config";

/// The pod template's read-once checksum, the Deployment's text and the main file, as the
/// chart renders them with `overrides`.
fn rendered(overrides: Value) -> (String, String, MainConfig) {
    let objects = render(overrides.clone());
    let checksum = object(&objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]
        [ANNOTATION]
        .as_str()
        .unwrap_or_else(|| panic!("no {ANNOTATION} on the pod template"))
        .to_string();
    let texts = render_texts(overrides);
    (
        checksum,
        texts["Deployment/jobrelay"].clone(),
        main_file(&objects),
    )
}

#[test]
fn a_read_once_edit_rolls_the_pod_and_a_live_edit_does_not() {
    let base = json!({"clusters": {"secretName": "c"}, "homeCluster": {"name": "home"}});
    let (checksum, deployment, main) = rendered(base.clone());
    assert_eq!(checksum.len(), 64, "a sha256: {checksum}");
    assert!(
        checksum.bytes().all(|b| b.is_ascii_hexdigit()),
        "{checksum}"
    );
    assert_eq!(
        rendered(base.clone()).0,
        checksum,
        "the same values, the same checksum"
    );

    // Each read-once section, edited as a team would: the daemon would take each as pending a
    // restart (the section is what `read_once_changes` finds), and the pod template changes.
    let read_once = [
        (
            "runtime",
            json!({"config": {"runtime": {"cache_dir": "/var/lib/jobrelay/cache", "max_instances": 64}}}),
        ),
        (
            "state",
            json!({"config": {"state": {"path": "/var/lib/jobrelay/state/other.db"}}}),
        ),
        (
            "coordination",
            json!({"config": {"coordination": {"lease_name": "other"}}}),
        ),
        (
            "sql",
            json!({"config": {"sql": {"connections": {"db": {"url": "env:DB_URL"}}}}}),
        ),
        (
            "archive",
            json!({"config": {"archive": {"local": "/var/lib/jobrelay/other-archive"}}}),
        ),
        ("telemetry", json!({"metricsPort": 9999})),
        (
            "oci",
            json!({"config": {"oci": {"plain_http": ["registry.platform:5000"]}}}),
        ),
        (
            "event_memory_mb",
            json!({"config": {"event_memory_mb": 256}}),
        ),
        (
            "clusters_dir",
            json!({"config": {"clusters_dir": "/etc/jobrelay-clusters/fleet"}}),
        ),
        (
            "plugin_manifests_dir",
            json!({"config": {"plugin_manifests_dir": "/etc/jobrelay-plugins/team"}}),
        ),
    ];
    let covered: Vec<&str> = read_once.iter().map(|(s, _)| *s).collect();
    assert_eq!(covered, READ_ONCE_SECTIONS, "every read-once section");
    for (section, over) in read_once {
        let (edited, _, edited_main) = rendered(with(base.clone(), over.clone()));
        assert!(
            main.read_once_changes(&edited_main).contains(&section),
            "{over} is no edit of {section} to the daemon"
        );
        assert_ne!(
            edited, checksum,
            "{over} edits {section}: the pod must roll"
        );
    }
    // The values the chart writes read-once sections from count as those sections.
    let (leader, _, _) = rendered(with(base.clone(), coordinated("leader")));
    assert_ne!(leader, checksum, "stateUrl and coordination.mode");

    // Everything else of the main file is followed live: the ConfigMap changes, not the pod.
    for over in [
        json!({"config": {"kinds": [{"name": "batch-job"}, {"name": "ray-job"}]}}),
        json!({"config": {"watch": {"namespaces": ["team-a"], "label_selector": "team=ml"}}}),
        json!({"config": {"plugin_defaults": {"timeout_ms": 9000}}}),
        json!({"config": {"cleanup": {"dry_run": true, "rules": [{"kinds": ["batch-job"], "after_finished": "1h"}]}}}),
        json!({"config": {"job_view": {"keep_deleted": "2h"}}}),
        json!({"config": {"cluster_health": {"offline_after": 5}}}),
        json!({"config": {"fleet": {"rules": [{"name": "fails", "measure": "failure_ratio", "above": 0.2}]}}}),
        json!({"config": {"finalizers": {"max_hold_seconds": 600}}}),
        json!({"config": {"rescan_seconds": 60, "debounce_ms": 50}}),
        json!({"plugins": {"mysql-sync": {"timeout_ms": 9000}}}),
    ] {
        let (edited, edited_deployment, edited_main) = rendered(with(base.clone(), over.clone()));
        assert!(
            main.read_once_changes(&edited_main).is_empty(),
            "{over} edits no read-once section"
        );
        assert_eq!(edited, checksum, "{over} is a live edit");
        assert_eq!(
            edited_deployment, deployment,
            "{over} is a live edit: the pod template stays as it was"
        );
    }
}
