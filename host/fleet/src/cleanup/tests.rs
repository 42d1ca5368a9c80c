use std::collections::HashSet;

use jobrelay_contract::event::Phase;

use super::*;

const KINDS: &[&str] = &["volcano-job", "batch-job"];

fn settings(yaml: &str) -> CleanupSettings {
    let spec: CleanupSpec = serde_yaml_ng::from_str(yaml).expect("yaml");
    spec.validate(KINDS).expect("valid")
}

fn refused(yaml: &str) -> String {
    let spec: CleanupSpec = serde_yaml_ng::from_str(yaml).expect("yaml");
    spec.validate(KINDS).expect_err("refused").to_string()
}

fn kind(name: &str) -> Arc<JobKind> {
    let mut kind = JobKind::builtin("volcano-job").expect("built-in");
    kind.name = name.to_string();
    Arc::new(kind)
}

fn event(uid: &str, ns: &str, phase: Phase, at: &str) -> JobEvent {
    JobEvent {
        id: JobEvent::make_id("c", uid, "1"),
        cluster: "c".into(),
        api_version: "batch.volcano.sh/v1alpha1".into(),
        kind: "Job".into(),
        namespace: ns.into(),
        name: format!("job-{uid}"),
        uid: uid.into(),
        resource_version: "1".into(),
        generation: None,
        phase,
        raw_phase: String::new(),
        reason: None,
        message: None,
        previous_phase: None,
        transition_time: at.into(),
        labels: Default::default(),
        annotations: Default::default(),
        object_json: Arc::from("{}"),
        transition_key: String::new(),
        synthetic: false,
        story: None,
    }
}

fn key(uid: &str) -> JobKey {
    JobKey {
        cluster: "c".into(),
        uid: uid.into(),
    }
}

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("time")
        .with_timezone(&Utc)
}

fn uids(due: &[(FinishedJob, CleanupRule)]) -> Vec<String> {
    let mut uids: Vec<String> = due.iter().map(|(j, _)| j.uid.clone()).collect();
    uids.sort();
    uids
}

const ONE_RULE: &str =
    "rules: [{kinds: [volcano-job], namespaces: ['team-*'], after_finished: 1h}]";

#[test]
fn errors_name_the_field() {
    assert!(
        refused("rules: [{kinds: [nope], after_finished: 1h}]")
            .contains("cleanup.rules[0].kinds[0]: `nope`")
    );
    assert!(refused("rules: [{kinds: [], after_finished: 1h}]").contains("cleanup.rules[0].kinds"));
    assert!(
        refused("rules: [{kinds: [batch-job], after_finished: soon}]")
            .contains("cleanup.rules[0].after_finished: `soon` is not a duration")
    );
    assert!(
        refused("rules: [{kinds: [batch-job], namespaces: [''], after_finished: 1}]")
            .contains("cleanup.rules[0].namespaces[0]")
    );
    assert!(refused("per_cluster_per_second: 0").contains("cleanup.per_cluster_per_second"));
    let spec: Result<CleanupSpec, _> = serde_yaml_ng::from_str("propagation: Sideways");
    assert!(spec.is_err(), "an unknown propagation is refused");
    let spec: Result<CleanupSpec, _> = serde_yaml_ng::from_str("rules: [{kinds: [a], after: 1h}]");
    assert!(spec.is_err(), "an unknown field is refused");
}

#[test]
fn durations_are_seconds_or_text() {
    let s = settings(
        "rules: [{kinds: [batch-job], after_finished: 90}, {kinds: [volcano-job], after_finished: 7days}]",
    );
    assert_eq!(s.rules[0].after_finished, Duration::from_secs(90));
    assert_eq!(s.rules[1].after_finished, Duration::from_secs(7 * 86_400));
    assert_eq!(s.propagation, Propagation::Background);
    assert_eq!(s.per_cluster_per_second.get(), 5);
    assert!(!CleanupSettings::default().is_on());
}

#[test]
fn only_finished_jobs_a_rule_covers_are_scheduled() {
    let schedule = Schedule::new(settings(ONE_RULE));
    let v = kind("volcano-job");
    let t = "2026-01-01T00:00:00Z";
    schedule.observe(&event("run", "team-a", Phase::Running, t), &v);
    schedule.observe(&event("ok", "team-a", Phase::Succeeded, t), &v);
    schedule.observe(&event("bad", "team-b", Phase::Failed, t), &v);
    schedule.observe(&event("other-ns", "prod", Phase::Succeeded, t), &v);
    schedule.observe(
        &event("other-kind", "team-a", Phase::Succeeded, t),
        &kind("batch-job"),
    );
    assert_eq!(schedule.len(), 2);
    let due = schedule.take_due(at("2026-01-01T01:00:00Z"), Instant::now());
    assert_eq!(uids(&due), ["bad", "ok"]);
}

#[test]
fn a_job_seen_running_again_or_deleting_leaves() {
    let schedule = Schedule::new(settings(ONE_RULE));
    let v = kind("volcano-job");
    let t = "2026-01-01T00:00:00Z";
    schedule.observe(&event("a", "team-a", Phase::Succeeded, t), &v);
    schedule.observe(&event("b", "team-a", Phase::Failed, t), &v);
    schedule.observe(&event("c", "team-a", Phase::Failed, t), &v);
    schedule.observe(&event("a", "team-a", Phase::Restarting, t), &v);
    schedule.observe(&event("b", "team-a", Phase::Terminating, t), &v);
    schedule.observe(&event("c", "team-a", Phase::Deleted, t), &v);
    assert!(schedule.is_empty());
}

#[test]
fn nothing_is_due_before_after_finished() {
    let schedule = Schedule::new(settings(ONE_RULE));
    let v = kind("volcano-job");
    schedule.observe(
        &event("a", "team-a", Phase::Succeeded, "2026-01-01T00:00:00Z"),
        &v,
    );
    let now = Instant::now();
    assert!(
        schedule
            .take_due(at("2026-01-01T00:59:59Z"), now)
            .is_empty()
    );
    // Looked at again only when due: its recheck is an hour out, less the second gone.
    assert!(
        schedule
            .take_due(at("2026-01-01T01:00:00Z"), now)
            .is_empty()
    );
    let later = now + Duration::from_secs(1);
    assert_eq!(
        uids(&schedule.take_due(at("2026-01-01T01:00:00Z"), later)),
        ["a"]
    );
}

#[test]
fn a_taken_job_is_handed_out_once_until_held() {
    let schedule = Schedule::new(settings(ONE_RULE));
    let v = kind("volcano-job");
    schedule.observe(
        &event("a", "team-a", Phase::Succeeded, "2026-01-01T00:00:00Z"),
        &v,
    );
    let now = at("2026-01-02T00:00:00Z");
    assert_eq!(schedule.take_due(now, Instant::now()).len(), 1);
    // Observed again (a re-list) while taken: still one entry, not handed out again.
    schedule.observe(
        &event("a", "team-a", Phase::Succeeded, "2026-01-01T00:00:00Z"),
        &v,
    );
    assert!(schedule.take_due(now, Instant::now()).is_empty());
    schedule.hold(
        &key("a"),
        Held::PendingDelivery("archive".into()),
        Duration::ZERO,
    );
    let view = schedule.snapshot();
    assert_eq!(view.jobs["c"]["pending_delivery"], 1);
    assert_eq!(view.held[0].held, Held::PendingDelivery("archive".into()));
    assert_eq!(schedule.take_due(now, Instant::now()).len(), 1);
    let waits = |n: u32| Duration::from_secs(60 * u64::from(n));
    assert_eq!(
        schedule.failed(&key("a"), "503".into(), waits),
        Duration::from_secs(60)
    );
    assert!(
        schedule.take_due(now, Instant::now()).is_empty(),
        "not before its recheck"
    );
    // Held for another reason in between does not count as a failure.
    schedule.hold(&key("a"), Held::NotConnected, Duration::ZERO);
    assert_eq!(schedule.take_due(now, Instant::now()).len(), 1);
    assert_eq!(
        schedule.failed(&key("a"), "503".into(), waits),
        Duration::from_secs(120)
    );
    schedule.done(&key("a"));
    assert!(schedule.is_empty());
}

#[test]
fn a_job_recreated_under_its_name_is_another_entry() {
    let schedule = Schedule::new(settings(ONE_RULE));
    let v = kind("volcano-job");
    schedule.observe(
        &event("old", "team-a", Phase::Succeeded, "2026-01-01T00:00:00Z"),
        &v,
    );
    let mut new = event("new", "team-a", Phase::Running, "2026-01-01T02:00:00Z");
    new.name = "job-old".into();
    schedule.observe(&new, &v);
    let due = schedule.take_due(at("2026-01-02T00:00:00Z"), Instant::now());
    assert_eq!(uids(&due), ["old"], "the deletion names the old uid only");
}

#[test]
fn a_dry_run_counts_a_job_once_and_deletes_it_once_turned_off() {
    let schedule = Schedule::new(settings(&format!("dry_run: true\n{ONE_RULE}")));
    let v = kind("volcano-job");
    schedule.observe(
        &event("a", "team-a", Phase::Succeeded, "2026-01-01T00:00:00Z"),
        &v,
    );
    let now = at("2026-01-02T00:00:00Z");
    assert_eq!(schedule.take_due(now, Instant::now()).len(), 1);
    schedule.would_delete(&key("a"));
    assert!(schedule.take_due(now, Instant::now()).is_empty());
    assert_eq!(schedule.snapshot().jobs["c"]["would_delete"], 1);
    schedule.set_settings(settings(ONE_RULE));
    assert_eq!(schedule.take_due(now, Instant::now()).len(), 1);
}

#[test]
fn a_rule_removed_takes_its_jobs_out() {
    let schedule = Schedule::new(settings(ONE_RULE));
    let v = kind("volcano-job");
    schedule.observe(
        &event("a", "team-a", Phase::Succeeded, "2026-01-01T00:00:00Z"),
        &v,
    );
    schedule.set_settings(settings("rules: [{kinds: [batch-job], after_finished: 1}]"));
    assert!(
        schedule
            .take_due(at("2026-01-02T00:00:00Z"), Instant::now())
            .is_empty()
    );
    assert!(schedule.is_empty());
}

#[test]
fn a_list_without_the_job_and_a_cluster_let_go_take_it_out() {
    let schedule = Schedule::new(settings(ONE_RULE));
    let v = kind("volcano-job");
    let t = "2026-01-01T00:00:00Z";
    schedule.observe(&event("kept", "team-a", Phase::Succeeded, t), &v);
    schedule.observe(&event("gone", "team-a", Phase::Succeeded, t), &v);
    schedule.listed(&Listed {
        cluster: Arc::from("c"),
        kind: v.clone(),
        namespace: None,
        uids: Arc::new(HashSet::from([Uid::new("kept")])),
    });
    assert_eq!(schedule.len(), 1);
    schedule.forget_cluster("c");
    assert!(schedule.is_empty());
}

/// A batch Job found on a re-list with `SuccessCriteriaMet` and then seen with `Complete`: the
/// grace counts from `Complete`, the deciding condition of the later version, not from the
/// version seen first; a later version that gives no time keeps that clock.
#[test]
fn a_later_version_of_the_end_moves_the_grace_to_its_deciding_condition() {
    let schedule = Schedule::new(settings(ONE_RULE));
    let v = kind("volcano-job");
    schedule.observe(
        &event("a", "team-a", Phase::Succeeded, "2026-01-01T00:00:00Z"),
        &v,
    );
    let now = Instant::now();
    assert!(
        schedule
            .take_due(at("2026-01-01T00:59:59Z"), now)
            .is_empty()
    );
    schedule.observe(
        &event("a", "team-a", Phase::Succeeded, "2026-01-01T00:00:03Z"),
        &v,
    );
    schedule.observe(&event("a", "team-a", Phase::Succeeded, "not a time"), &v);
    let later = now + Duration::from_secs(1);
    assert!(
        schedule
            .take_due(at("2026-01-01T01:00:02Z"), later)
            .is_empty(),
        "due an hour after Complete, not after SuccessCriteriaMet"
    );
    let much_later = later + Duration::from_secs(3600);
    assert_eq!(
        uids(&schedule.take_due(at("2026-01-01T01:00:03Z"), much_later)),
        ["a"]
    );
}

#[test]
fn an_unreadable_end_time_counts_from_now() {
    let schedule = Schedule::new(settings(ONE_RULE));
    let v = kind("volcano-job");
    schedule.observe(&event("a", "team-a", Phase::Succeeded, "not a time"), &v);
    assert!(
        schedule.take_due(Utc::now(), Instant::now()).is_empty(),
        "an hour from now, not at once"
    );
}

#[test]
fn a_shortened_wait_brings_a_waiting_job_forward() {
    let schedule = Schedule::new(settings(
        "rules: [{kinds: [volcano-job], after_finished: 7days}]",
    ));
    let v = kind("volcano-job");
    schedule.observe(
        &event("a", "ns", Phase::Succeeded, "2026-01-01T00:00:00Z"),
        &v,
    );
    let now = at("2026-01-01T02:00:00Z");
    let instant = Instant::now();
    assert!(schedule.take_due(now, instant).is_empty(), "a week to wait");
    let shorter = settings("rules: [{kinds: [volcano-job], after_finished: 1h}]");
    assert!(schedule.rules_differ(&shorter));
    schedule.set_settings(shorter.clone());
    assert!(!schedule.rules_differ(&shorter));
    assert_eq!(uids(&schedule.take_due(now, Instant::now())), ["a"]);
}

#[test]
fn a_taken_job_seen_running_again_is_no_longer_taken() {
    let schedule = Schedule::new(settings(ONE_RULE));
    let v = kind("volcano-job");
    let t = "2026-01-01T00:00:00Z";
    schedule.observe(&event("a", "team-a", Phase::Failed, t), &v);
    schedule.observe(&event("b", "team-a", Phase::Failed, t), &v);
    let now = at("2026-01-02T00:00:00Z");
    assert_eq!(schedule.take_due(now, Instant::now()).len(), 2);
    assert!(schedule.still_taken(&key("a")));
    // Restarted by its policy while it waited its turn: its deletion must not go ahead.
    schedule.observe(&event("a", "team-a", Phase::Restarting, t), &v);
    assert!(!schedule.still_taken(&key("a")));
    schedule.hold(&key("b"), Held::NotConnected, Duration::from_secs(60));
    assert!(!schedule.still_taken(&key("b")), "held is not taken");
}
