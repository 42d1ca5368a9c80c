use super::*;

fn manifest(yaml: &str) -> PluginManifest {
    serde_yaml_ng::from_str(&format!("wasm: x.wasm\n{yaml}")).expect("a manifest")
}

fn selection(yaml: &str) -> Selection {
    Selection::of(&manifest(yaml)).expect("a selection")
}

/// A batch Job's version `rv` in `phase`, seen after `previous`.
fn event(rv: u32, phase: &str, previous: Option<&str>) -> JobEvent {
    let previous = previous.map_or("null".to_string(), |p| format!("\"{p}\""));
    serde_json::from_str(&format!(
        r#"{{"id":"east/u/{rv}","cluster":"east","api_version":"batch/v1","kind":"Job",
            "namespace":"ml","name":"train","uid":"u","resource_version":"{rv}",
            "phase":"{phase}","previous_phase":{previous},"labels":{{"team":"nlp"}},
            "transition_time":"2026-01-01T00:00:00Z"}}"#
    ))
    .expect("an event")
}

fn by(skip: Option<Skip>) -> Option<&'static str> {
    skip.map(|s| s.by)
}

/// The daemon's filter decides: a succeeded job is skipped by a filter that takes failed
/// ones, saying so; a failed one is called.
#[test]
fn the_filter_phases_skip_with_the_reason() {
    let mut s = selection("filter: {phases: [failed]}");
    let skip = s
        .judge(&event(1, "succeeded", Some("running")))
        .expect("skipped");
    assert_eq!(skip.by, "filter.phases");
    assert_eq!(skip.reason, "the filter takes [failed], not succeeded");
    assert_eq!(s.judge(&event(2, "failed", Some("running"))), None);
}

/// Each part of the job level is named: cluster, its exclusion, namespace, labels; and an
/// expression that is false or fails.
#[test]
fn the_job_level_and_the_expression_name_their_part() {
    let cases = [
        (
            "filter: {clusters: ['west-*']}",
            "filter.clusters",
            "`east`",
        ),
        (
            "filter: {exclude: {clusters: [east]}}",
            "filter.exclude.clusters",
            "excluded",
        ),
        ("filter: {namespaces: [web]}", "filter.namespaces", "`ml`"),
        (
            "filter: {exclude: {namespaces: ['m*']}}",
            "filter.exclude.namespaces",
            "excluded",
        ),
        ("filter: {labels: 'team=cv'}", "filter.labels", "team=nlp"),
        (
            "filter: {expression: 'event.name == \"other\"'}",
            "filter.expression",
            "is false",
        ),
        (
            "filter: {expression: 'event.labels[\"queue\"] == \"gpu\"'}",
            "filter.expression",
            "failed on this event",
        ),
    ];
    for (yaml, field, says) in cases {
        let skip = selection(yaml)
            .judge(&event(1, "failed", None))
            .unwrap_or_else(|| panic!("{yaml}: taken"));
        assert_eq!(skip.by, field, "{yaml}: {skip}");
        assert!(skip.reason.contains(says), "{yaml}: {skip}");
    }
    assert_eq!(
        selection("filter: {expression: 'event.kind == \"batch-job\"'}")
            .judge(&event(1, "failed", None)),
        None,
        "the expression reads the built-in kind's name"
    );
}

/// `kinds` (or `filter.kinds`) take the built-in kind of the event's API version and kind;
/// an event of no built-in kind is of the manifest's first kind that is not built in.
#[test]
fn kinds_are_the_built_in_kind_of_the_event() {
    let e = event(1, "failed", None);
    assert_eq!(selection("kinds: [batch-job]").judge(&e), None);
    let skip = selection("kinds: [volcano-job, pytorch-job]")
        .judge(&e)
        .expect("not a volcano job");
    assert_eq!(skip.by, "kinds");
    assert!(
        skip.reason.contains("not batch-job (batch/v1 Job)"),
        "{skip}"
    );
    assert_eq!(
        by(selection("filter: {kinds: [volcano-job]}").judge(&e)),
        Some("filter.kinds")
    );
    let mut custom = e.clone();
    custom.api_version = "example.com/v1".into();
    custom.kind = "SparkJob".into();
    let s = || {
        selection(
            "kinds: [batch-job, spark-job]\nfilter: {expression: 'event.kind == \"spark-job\"'}",
        )
    };
    assert_eq!(s().judge(&custom), None);
    let skip = selection("kinds: [batch-job]")
        .judge(&custom)
        .expect("no built-in kind");
    assert!(skip.reason.contains("no built-in kind"), "{skip}");
    assert_eq!(
        Selection::of(&manifest(
            "kinds: [batch-job]\nfilter: {kinds: [batch-job]}"
        ))
        .err(),
        Some(SelectionError::KindsTwice)
    );
}

/// `transitions`: a version whose phase did not change is skipped — the first one judged by
/// its previous_phase, the next by the run's own events.
#[test]
fn transitions_skip_a_phase_that_did_not_change() {
    let mut s = selection("delivery: transitions");
    let skip = s
        .judge(&event(1, "running", Some("running")))
        .expect("same phase");
    assert_eq!(skip.by, "delivery");
    assert_eq!(
        skip.reason,
        "transitions: the phase did not change (running after running)"
    );
    assert_eq!(s.judge(&event(2, "failed", Some("running"))), None);
    assert_eq!(
        by(s.judge(&event(3, "failed", Some("failed")))),
        Some("delivery")
    );
    assert_eq!(s.judge(&event(4, "deleted", Some("failed"))), None);
    let skip = s.judge(&event(5, "running", None)).expect("after deletion");
    assert!(
        skip.reason.contains("deletion was delivered already"),
        "{skip}"
    );
}

/// `terminal`: no call before the end, one at the first end, none at a later one, one at the
/// deletion.
#[test]
fn terminal_skips_all_but_the_first_end_and_the_deletion() {
    let mut s = selection("delivery: terminal");
    let skip = s.judge(&event(1, "running", None)).expect("not an end");
    assert_eq!(
        skip.reason,
        "terminal: running is no end (succeeded, failed, terminating) and not the deletion"
    );
    assert_eq!(s.judge(&event(2, "failed", Some("running"))), None);
    let skip = s
        .judge(&event(3, "failed", Some("failed")))
        .expect("second end");
    assert!(skip.reason.contains("end was delivered already"), "{skip}");
    assert_eq!(s.judge(&event(4, "deleted", Some("failed"))), None);
    // A first event after an end the daemon delivered (its previous_phase) is no first end.
    assert!(
        selection("delivery: terminal")
            .judge(&event(1, "succeeded", Some("failed")))
            .is_some()
    );
}

/// The same event again is called again (a restart or a replay); `latest` skips nothing;
/// `all` takes what the manifest would skip; no manifest takes every version.
#[test]
fn repeats_latest_all_and_no_manifest() {
    let mut s = selection("delivery: terminal");
    let failed = event(1, "failed", Some("running"));
    assert_eq!(s.judge(&failed), None);
    assert_eq!(s.judge(&failed), None, "called again");
    let mut s = selection("delivery: latest");
    for rv in 1..4 {
        assert_eq!(s.judge(&event(rv, "running", Some("running"))), None);
    }
    let mut all = Selection::all();
    assert!(!all.judges());
    assert_eq!(all.judge(&event(9, "deleted", Some("deleted"))), None);
    let mut none = Selection::unconfigured();
    assert!(none.judges());
    assert_eq!(none.judge(&event(1, "running", Some("running"))), None);
}

/// A fleet event (as `plugin run` reads one) about `cluster`, of `kind`, at version `rv`.
fn fleet_event(kind: &str, cluster: &str, rv: u64) -> JobEvent {
    let rule = kind.starts_with("rule-").then(|| "failures".to_string());
    jobrelay_contract::fleet::FleetEvent {
        id: String::new(),
        kind: serde_json::from_value(serde_json::json!(kind)).expect("a fleet kind"),
        cluster: cluster.into(),
        rule,
        job_uid: None,
        group: None,
        value: None,
        threshold: None,
        since: "2026-01-01T00:00:00Z".into(),
        time: "2026-01-01T00:00:00Z".into(),
        summary: "s".into(),
    }
    .into_job_event(rv)
}

/// Fleet events are judged by `fleet_events` and by their subject's state, as a lane judges
/// them, never by the kinds, filter and delivery (which take no fleet event here); the same
/// event again is called again; `--all` calls every one.
#[test]
fn fleet_events_are_judged_by_fleet_events_and_their_state() {
    let mut s = selection(
        "kinds: [batch-job]\nfilter: {phases: [succeeded]}\ndelivery: terminal\n\
         fleet_events: [clusters]",
    );
    assert!(s.asks_for_fleet_events());
    let offline = fleet_event("cluster-offline", "east", 1);
    assert_eq!(s.judge(&offline), None);
    assert_eq!(s.judge(&offline), None, "the same event again");
    let again = s
        .judge(&fleet_event("cluster-offline", "east", 2))
        .expect("no change");
    assert_eq!(again.by, "fleet_events");
    assert!(again.reason.contains("did not change"), "{}", again.reason);
    assert_eq!(s.judge(&fleet_event("cluster-online", "east", 3)), None);
    let first_online = s
        .judge(&fleet_event("cluster-online", "west", 4))
        .expect("no news");
    assert!(
        first_online.reason.contains("nothing delivered before"),
        "{}",
        first_online.reason
    );
    let rule = s
        .judge(&fleet_event("rule-firing", "east", 5))
        .expect("not asked for");
    assert_eq!(
        rule.reason,
        "the manifest does not ask for a rule's fleet events (fleet_events: [clusters])"
    );
    let mut none = selection("");
    assert!(!none.asks_for_fleet_events());
    assert_eq!(
        by(none.judge(&fleet_event("cluster-offline", "east", 1))),
        Some("fleet_events")
    );
    let mut all = Selection::all();
    assert_eq!(all.judge(&fleet_event("rule-resolved", "east", 1)), None);
}
