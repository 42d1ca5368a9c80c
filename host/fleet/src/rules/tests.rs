use super::*;
use crate::sli::{Sample, Slis};

fn rule(measure: Measure, above: f64, for_seconds: u32) -> Rule {
    Rule {
        name: "r".into(),
        measure,
        above,
        for_seconds,
        window_seconds: 600,
        min_jobs: 4,
        clusters: vec![],
        namespaces: vec![],
        kinds: vec!["batch-job".into()],
        groups: vec![],
    }
}

fn end(slis: &Slis, cluster: &str, kind: &str, succeeded: bool) {
    slis.record(
        cluster,
        "ml",
        kind,
        Sample::Ended {
            succeeded,
            ran: Some(10.0),
            cause: None,
        },
    );
}

/// Fires once the ratio held for `for`, not before; resolves when it drops; each crossing is
/// reported once, and a second firing is a change of its own.
#[test]
fn failure_ratio_fires_after_for_and_resolves() {
    let slis = Slis::default();
    let mut rules = Rules::new(vec![rule(Measure::FailureRatio, 0.15, 60)]);
    // Too few jobs: no verdict.
    end(&slis, "east", "batch-job", false);
    assert!(rules.evaluate(&slis.snapshot(), 0).is_empty());
    for _ in 0..3 {
        end(&slis, "east", "batch-job", true);
    }
    // 1 of 4 failed: 0.25 > 0.15 holds from t=30, fires at t=90.
    assert!(rules.evaluate(&slis.snapshot(), 30).is_empty());
    assert!(rules.evaluate(&slis.snapshot(), 60).is_empty());
    let fired = rules.evaluate(&slis.snapshot(), 90);
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(fired[0].firing);
    assert_eq!(fired[0].since, 30);
    assert_eq!(fired[0].value, 0.25);
    assert!(
        fired[0].summary.contains("0.25 > 0.15") && fired[0].summary.contains("east"),
        "{}",
        fired[0].summary
    );
    assert!(rules.evaluate(&slis.snapshot(), 120).is_empty(), "once");
    // Successes dilute it: 1 of 8.
    for _ in 0..4 {
        end(&slis, "east", "batch-job", true);
    }
    let resolved = rules.evaluate(&slis.snapshot(), 150);
    assert_eq!(resolved.len(), 1);
    assert!(!resolved[0].firing);
    assert_eq!(resolved[0].since, 150);
    // Failures again: a new firing, with its own start.
    for _ in 0..4 {
        end(&slis, "east", "batch-job", false);
    }
    assert!(rules.evaluate(&slis.snapshot(), 180).is_empty());
    let again = rules.evaluate(&slis.snapshot(), 240);
    assert_eq!(again.len(), 1);
    assert!(again[0].firing);
    assert_eq!(again[0].since, 180);
    let readings = rules.readings();
    assert_eq!(readings.len(), 1);
    assert!(readings[0].firing);
}

/// Jobs that ended before the window are not counted; other kinds and clusters are apart.
#[test]
fn the_window_and_the_scope() {
    let slis = Slis::default();
    let mut rules = Rules::new(vec![rule(Measure::FailureRatio, 0.5, 0)]);
    for _ in 0..10 {
        end(&slis, "east", "batch-job", false);
        end(&slis, "east", "volcano-job", true);
    }
    let first = rules.evaluate(&slis.snapshot(), 0);
    assert_eq!(first.len(), 1);
    assert!(first[0].firing, "10 of 10 batch jobs failed");
    // Ten minutes on, only successes: the window holds them alone.
    for t in 1..=10 {
        end(&slis, "east", "batch-job", true);
        let changes = rules.evaluate(&slis.snapshot(), t * 60);
        if t < 10 {
            assert!(changes.is_empty(), "at {t} min: {changes:?}");
        } else {
            assert_eq!(changes.len(), 1, "the failures left the window");
            assert!(!changes[0].firing);
            assert_eq!(changes[0].value, 0.0);
        }
    }
    // Another cluster is judged on its own.
    for _ in 0..4 {
        end(&slis, "west", "batch-job", false);
    }
    let west = rules.evaluate(&slis.snapshot(), 660);
    assert_eq!(west.len(), 1);
    assert_eq!(west[0].cluster, "west");
    rules.forget_cluster("west");
    assert!(rules.readings().iter().all(|r| r.cluster != "west"));
}

/// A ratio hovering at the threshold — holding one evaluation, not the next — never fires a
/// rule whose `for` spans two evaluations, however long it goes on.
#[test]
fn flapping_at_the_threshold_does_not_fire() {
    let slis = Slis::default();
    let mut rules = Rules::new(vec![Rule {
        window_seconds: 30,
        min_jobs: 1,
        ..rule(Measure::FailureRatio, 0.5, 30)
    }]);
    let mut changes = Vec::new();
    for t in 0..100 {
        // Every 30 s window holds one job: failed on even steps, succeeded on odd ones.
        end(&slis, "east", "batch-job", t % 2 == 1);
        changes.extend(rules.evaluate(&slis.snapshot(), t * 30));
    }
    assert!(changes.iter().all(|c| !c.firing), "{changes:?}");
    // The first verdict (resolved) only.
    assert_eq!(changes.len(), 1, "{changes:?}");
}

/// p95 of queue wait, interpolated within its bucket.
#[test]
fn queue_wait_p95() {
    let slis = Slis::default();
    let mut rules = Rules::new(vec![Rule {
        min_jobs: 1,
        ..rule(Measure::QueueWaitP95, 100.0, 0)
    }]);
    // 19 jobs waited 1 s, one waited 200 s: the 95th percentile is the 19th of 20 samples,
    // at the top of the first bucket (1 s).
    for _ in 0..19 {
        slis.record("east", "ml", "batch-job", Sample::Started { waited: 1.0 });
    }
    slis.record("east", "ml", "batch-job", Sample::Started { waited: 200.0 });
    let c = rules.evaluate(&slis.snapshot(), 0);
    assert_eq!(c.len(), 1);
    assert!(!c[0].firing);
    assert!((c[0].value - 1.0).abs() < 1e-9, "{}", c[0].value);
    // 20 more that waited 200 s: now within (120, 300].
    for _ in 0..20 {
        slis.record("east", "ml", "batch-job", Sample::Started { waited: 200.0 });
    }
    let c = rules.evaluate(&slis.snapshot(), 10);
    assert_eq!(c.len(), 1);
    assert!(c[0].firing);
    assert!(c[0].value > 120.0 && c[0].value <= 300.0, "{}", c[0].value);
}

/// A changed rule starts again; an unchanged one keeps its verdicts.
#[test]
fn changed_rules_start_again() {
    let slis = Slis::default();
    for _ in 0..4 {
        end(&slis, "east", "batch-job", false);
    }
    let mut rules = Rules::new(vec![rule(Measure::FailureRatio, 0.15, 0)]);
    assert_eq!(rules.evaluate(&slis.snapshot(), 0).len(), 1);
    rules.set_rules(vec![rule(Measure::FailureRatio, 0.15, 0)]);
    assert!(rules.evaluate(&slis.snapshot(), 10).is_empty());
    rules.set_rules(vec![rule(Measure::FailureRatio, 0.10, 0)]);
    assert_eq!(rules.evaluate(&slis.snapshot(), 20).len(), 1);
}

/// Judged every second over a day's window, the rules keep a few dozen evaluations, not
/// 86,400, and the window still drops what ended before it (within a step of 1/32).
#[test]
fn the_kept_evaluations_are_bounded() {
    let slis = Slis::default();
    let mut rules = Rules::new(vec![Rule {
        window_seconds: 86_400,
        min_jobs: 1,
        ..rule(Measure::FailureRatio, 0.5, 0)
    }]);
    end(&slis, "east", "batch-job", false);
    let mut firing = Vec::new();
    for t in 0..(2 * 86_400) {
        if t == 3_600 {
            end(&slis, "east", "batch-job", true);
            end(&slis, "east", "batch-job", true);
        }
        for c in rules.evaluate(&slis.snapshot(), t) {
            firing.push((t, c.firing));
        }
    }
    assert!(rules.history_len() <= 36, "{}", rules.history_len());
    // Fired at once (1 of 1 failed), resolved at 3,600 s (1 of 3), and the failure left the
    // window a day later (0 of 2), within a step.
    assert_eq!(firing[0], (0, true));
    assert_eq!(firing[1], (3_600, false));
    assert_eq!(firing.len(), 2, "{firing:?}");
    let readings = rules.readings();
    assert_eq!(readings[0].value, Some(0.0));
}

/// At a take-over the verdicts are told again: a standing firing at the next evaluation (not a
/// `for` later, since how long it held is kept), with the start it had; a rule that does not
/// hold, as resolved.
#[test]
fn verdicts_are_told_again_after_a_take_over() {
    let slis = Slis::default();
    let mut rules = Rules::new(vec![rule(Measure::FailureRatio, 0.15, 60)]);
    for succeeded in [false, true, true, true] {
        end(&slis, "east", "batch-job", succeeded);
    }
    for _ in 0..4 {
        end(&slis, "west", "batch-job", true);
    }
    assert!(
        rules
            .evaluate(&slis.snapshot(), 30)
            .iter()
            .all(|c| !c.firing)
    );
    let fired = rules.evaluate(&slis.snapshot(), 90);
    assert_eq!(fired.len(), 1);
    assert!(rules.evaluate(&slis.snapshot(), 100).is_empty());
    rules.tell_again();
    let told: Vec<(String, bool, i64)> = rules
        .evaluate(&slis.snapshot(), 110)
        .into_iter()
        .map(|c| (c.cluster, c.firing, c.since))
        .collect();
    assert_eq!(
        told,
        [
            ("east".to_string(), true, 30),
            ("west".to_string(), false, 110)
        ]
    );
    assert!(
        rules.evaluate(&slis.snapshot(), 120).is_empty(),
        "once each"
    );
}

fn admitted(slis: &Slis, cluster: &str, queue: &str, waited: f64) {
    slis.record(
        cluster,
        "ml",
        "batch-job",
        Sample::Admitted { queue, waited },
    );
}

fn preempted(slis: &Slis, cluster: &str, queue: &str) {
    slis.record(
        cluster,
        "ml",
        "batch-job",
        Sample::Preempted { queue, times: 1 },
    );
}

fn failed_with(slis: &Slis, cause: Option<&str>) {
    slis.record(
        "east",
        "ml",
        "batch-job",
        Sample::Ended {
            succeeded: false,
            ran: None,
            cause,
        },
    );
}

/// Kueue's admission wait is judged per ClusterQueue: a slow queue fires, a fast one beside
/// it does not, each a verdict of its own with the queue in its change and summary.
#[test]
fn admission_wait_is_judged_per_cluster_queue() {
    let slis = Slis::default();
    let mut rules = Rules::new(vec![Rule {
        min_jobs: 2,
        ..rule(Measure::AdmissionWaitP95, 600.0, 0)
    }]);
    for _ in 0..3 {
        admitted(&slis, "east", "a100", 3_000.0);
        admitted(&slis, "east", "cpu", 5.0);
    }
    let mut changes = rules.evaluate(&slis.snapshot(), 0);
    changes.sort_by(|a, b| a.group.cmp(&b.group));
    let told: Vec<(Option<&str>, bool)> = changes
        .iter()
        .map(|c| (c.group.as_deref(), c.firing))
        .collect();
    assert_eq!(told, [(Some("a100"), true), (Some("cpu"), false)]);
    assert!(changes[0].value > 1_800.0 && changes[0].value <= 3_600.0);
    assert!(
        changes[0].summary.contains("on east, cluster queue a100"),
        "{}",
        changes[0].summary
    );
    let readings = rules.readings();
    assert_eq!(readings.len(), 2);
    assert!(readings.iter().any(|r| r.group == "a100" && r.firing));
    // One queue named by the rule: only it is judged.
    let mut only = Rules::new(vec![Rule {
        min_jobs: 2,
        groups: vec!["cp?".into()],
        ..rule(Measure::AdmissionWaitP95, 600.0, 0)
    }]);
    let changes = only.evaluate(&slis.snapshot(), 0);
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].group.as_deref(), Some("cpu"));
}

/// Preemptions per hour over the window fire without `min_jobs` and resolve once the window
/// has moved past them (a quiet window reads 0).
#[test]
fn preemptions_per_hour_fire_and_resolve_as_the_window_moves() {
    let slis = Slis::default();
    let mut rules = Rules::new(vec![Rule {
        window_seconds: 3_600,
        min_jobs: 100,
        ..rule(Measure::PreemptionsPerHour, 2.0, 0)
    }]);
    preempted(&slis, "east", "a100");
    let c = rules.evaluate(&slis.snapshot(), 0);
    assert_eq!((c.len(), c[0].firing, c[0].value), (1, false, 1.0));
    preempted(&slis, "east", "a100");
    preempted(&slis, "east", "a100");
    let c = rules.evaluate(&slis.snapshot(), 60);
    assert_eq!((c.len(), c[0].firing, c[0].value), (1, true, 3.0));
    // Nothing more: once the window has moved past the first, 2 an hour is not above 2, and
    // an hour and a step after the last the window holds none.
    let mut resolved = Vec::new();
    for t in (120..=7_200).step_by(60) {
        resolved.extend(rules.evaluate(&slis.snapshot(), t));
    }
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert!(!resolved[0].firing);
    assert_eq!(resolved[0].value, 2.0);
    assert_eq!(rules.readings()[0].value, Some(0.0));
}

/// Failures per hour per cause: OOMKilled over its threshold fires, a rarer cause does not, and
/// failures with no cause known are no group at all.
#[test]
fn failures_per_hour_are_judged_per_cause() {
    let slis = Slis::default();
    let mut rules = Rules::new(vec![Rule {
        window_seconds: 600,
        ..rule(Measure::FailuresPerHour, 10.0, 0)
    }]);
    for _ in 0..3 {
        failed_with(&slis, Some("OOMKilled"));
        failed_with(&slis, None);
    }
    failed_with(&slis, Some("ImagePullBackOff"));
    let mut c = rules.evaluate(&slis.snapshot(), 0);
    c.sort_by(|a, b| a.group.cmp(&b.group));
    let told: Vec<(Option<&str>, bool, f64)> = c
        .iter()
        .map(|c| (c.group.as_deref(), c.firing, c.value))
        .collect();
    // 3 in 10 minutes is 18 an hour; 1 is 6.
    assert_eq!(
        told,
        [
            (Some("ImagePullBackOff"), false, 6.0),
            (Some("OOMKilled"), true, 18.0)
        ]
    );
    assert!(c[1].summary.contains("cause OOMKilled"), "{}", c[1].summary);
}
