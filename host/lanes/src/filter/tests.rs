use std::sync::Arc;

use proptest::prelude::*;

use super::*;

fn event(cluster: &str, namespace: &str, phase: Phase, labels: &[(&str, &str)]) -> JobEvent {
    JobEvent {
        id: format!("{cluster}/u/1"),
        transition_key: String::new(),
        cluster: cluster.into(),
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        namespace: namespace.into(),
        name: "train-7".into(),
        uid: "u".into(),
        resource_version: "1".into(),
        generation: None,
        phase,
        raw_phase: String::new(),
        reason: None,
        message: None,
        previous_phase: None,
        transition_time: "2026-01-01T00:00:00Z".into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        annotations: Default::default(),
        object_json: Arc::from("{}"),
        synthetic: false,
        story: None,
    }
}

fn filter(yaml: &str) -> Result<Filter, FilterError> {
    Filter::new(serde_yaml_ng::from_str(yaml).expect("the spec parses"))
}

#[test]
fn an_empty_filter_takes_everything() {
    let f = filter("{}").expect("compiles");
    assert!(f.takes_all());
    let e = event("any", "any", Phase::Running, &[]);
    assert_eq!(f.verdict(&e, "job"), Verdict::Take);
}

#[test]
fn clusters_and_namespaces_are_patterns_with_exclusions() {
    let f = filter(
        "{clusters: ['prod-*'], namespaces: ['team-*', 'ml'], \
         exclude: {namespaces: ['team-sandbox*'], clusters: ['prod-eu?']}}",
    )
    .expect("compiles");
    assert!(!f.takes_all());
    for (cluster, namespace, taken) in [
        ("prod-us", "team-a", true),
        ("prod-us", "ml", true),
        ("prod-us", "mlx", false),
        ("staging", "team-a", false),
        ("prod-us", "team-sandbox-1", false),
        ("prod-eu1", "team-a", false),
        ("prod-eu12", "team-a", true),
    ] {
        let e = event(cluster, namespace, Phase::Running, &[]);
        assert_eq!(f.takes_job(&e), taken, "{cluster}/{namespace}");
        let expected = if taken {
            Verdict::Take
        } else {
            Verdict::NotJob
        };
        assert_eq!(f.verdict(&e, "job"), expected, "{cluster}/{namespace}");
    }
}

#[test]
fn labels_select_the_job_and_phases_the_version() {
    let f = filter("{labels: 'team=ml,tier notin (scratch)', phases: [failed, succeeded]}")
        .expect("compiles");
    let ml = [("team", "ml")];
    assert_eq!(
        f.verdict(&event("c", "n", Phase::Failed, &ml), "job"),
        Verdict::Take
    );
    assert_eq!(
        f.verdict(&event("c", "n", Phase::Running, &ml), "job"),
        Verdict::NotEvent
    );
    assert_eq!(
        f.verdict(
            &event(
                "c",
                "n",
                Phase::Failed,
                &[("team", "ml"), ("tier", "scratch")]
            ),
            "job"
        ),
        Verdict::NotJob
    );
    assert_eq!(
        f.verdict(&event("c", "n", Phase::Failed, &[]), "job"),
        Verdict::NotJob
    );
}

#[test]
fn the_expression_reads_the_event() {
    let f = filter(
        "{expression: \"event.kind == 'volcano' && event.name.startsWith('train-') \
          && event.phase in ['failed', 'restarting'] && event.labels['queue'] == 'gpu'\"}",
    )
    .expect("compiles");
    let gpu = [("queue", "gpu")];
    assert_eq!(
        f.verdict(&event("c", "n", Phase::Failed, &gpu), "volcano"),
        Verdict::Take
    );
    assert_eq!(
        f.verdict(&event("c", "n", Phase::Failed, &gpu), "batch"),
        Verdict::NotEvent
    );
    assert_eq!(
        f.verdict(&event("c", "n", Phase::Running, &gpu), "volcano"),
        Verdict::NotEvent
    );
    // A missing label is an error of this event, not a silent false: counted apart.
    match f.verdict(&event("c", "n", Phase::Failed, &[]), "volcano") {
        Verdict::Failed(why) => assert!(why.contains("queue"), "{why}"),
        other => panic!("expected a failed evaluation, got {other:?}"),
    }
    let guarded =
        filter("{expression: \"has(event.labels.queue) && event.labels.queue == 'gpu'\"}")
            .expect("compiles");
    assert_eq!(
        guarded.verdict(&event("c", "n", Phase::Failed, &[]), "job"),
        Verdict::NotEvent
    );
}

#[test]
fn bad_filters_name_their_field() {
    for (yaml, needle) in [
        (
            "{namespaces: ['a', '']}",
            "filter.namespaces[1]: an empty pattern",
        ),
        ("{exclude: {clusters: ['']}}", "filter.exclude.clusters[0]"),
        (
            "{labels: 'team ~ ml'}",
            "filter.labels: `team ~ ml`: expected",
        ),
        ("{labels: 'env in prod'}", "filter.labels: `env in prod`"),
        (
            "{expression: \"event.phase == \"}",
            "filter.expression: ERROR",
        ),
        ("{expression: \"job.phase == 'failed'\"}", "names `job`"),
        (
            "{expression: 'event.name'}",
            "gives a string, not true or false",
        ),
        ("{expression: '1 + 2'}", "gives a number"),
    ] {
        let err = filter(yaml).map(|_| ()).expect_err(yaml).to_string();
        assert!(err.contains(needle), "{yaml}: {err}");
    }
    // Unknown keys and phases are refused by the parser, with the key named.
    let unknown = serde_yaml_ng::from_str::<FilterSpec>("{namespace: [a]}")
        .expect_err("unknown key")
        .to_string();
    assert!(unknown.contains("namespace"), "{unknown}");
    let phase = serde_yaml_ng::from_str::<FilterSpec>("{phases: [runing]}")
        .expect_err("unknown phase")
        .to_string();
    assert!(phase.contains("runing"), "{phase}");
}

#[test]
fn filters_compare_by_what_was_written() {
    let a = filter("{namespaces: [a], phases: [failed]}").expect("compiles");
    let b = filter("{namespaces: [a], phases: [failed]}").expect("compiles");
    let c = filter("{namespaces: [b], phases: [failed]}").expect("compiles");
    assert_eq!(a, b);
    assert_ne!(a, c);
}

proptest! {
    /// The pattern lists agree with a plain reading of them: taken when some include pattern
    /// matches (or there are none) and no exclude pattern does.
    #[test]
    fn pattern_lists_agree_with_their_reading(
        include in proptest::collection::vec("[ab*?]{1,3}", 0..3),
        exclude in proptest::collection::vec("[ab*?]{1,3}", 0..3),
        namespace in "[ab]{0,4}",
    ) {
        let spec = FilterSpec {
            namespaces: include.clone(),
            exclude: Exclude { namespaces: exclude.clone(), ..Exclude::default() },
            ..FilterSpec::default()
        };
        let f = Filter::new(spec).expect("compiles");
        let glob = |p: &str, s: &str| glob_reading(p.as_bytes(), s.as_bytes());
        let taken = (include.is_empty() || include.iter().any(|p| glob(p, &namespace)))
            && !exclude.iter().any(|p| glob(p, &namespace));
        prop_assert_eq!(f.takes_job(&event("c", &namespace, Phase::Running, &[])), taken);
    }
}

/// `*` any run, `?` one character: the plain recursive reading of a pattern.
fn glob_reading(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob_reading(&p[1..], s) || (!s.is_empty() && glob_reading(p, &s[1..])),
        (Some(b'?'), Some(_)) => glob_reading(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a == b => glob_reading(&p[1..], &s[1..]),
        _ => false,
    }
}
