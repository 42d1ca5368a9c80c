//! One transition, one key, attacked with generated lifecycles.
//!
//! Every built-in kind's job is played by the test kit's driver through a random life —
//! pending or not, runs, restarts, suspensions and resumes, an outcome (for TrainJob, JobSet
//! and RayJob also created suspended and admitted as Kueue does, a RayJob stopped, a JobSet
//! with in-order startup, whose restart sets two conditions in one second) — with the driver's
//! clock moved by random steps of 0 to 2.5 s, so phases are often re-entered within one second
//! of the statuses' one-second times. Each version is read by the watcher's own [`Tracker`]
//! twice:
//!
//! - a *reference* tracker sees every version in order (a live watch that never breaks);
//! - a *faulty* one misses versions (a watch gap, then a re-list) and is killed at random
//!   points (a restart: a new tracker that remembers nothing).
//!
//! What must hold, as `docs/delivery.md` states it per kind:
//! - reference: two stays of the job never share a key, and every version of one stay has the
//!   stay's key (for every kind: the live path tells every transition apart);
//! - faulty: for Volcano the same key as the reference for every version (its status is a
//!   history of every entry); for the others the same unless the reference had to number or
//!   version the stay (`#n` or `@rv=`: what only a watcher that saw it can tell);
//! - after every gap, each transition the catch-up rebuilds — from the last version seen
//!   before the gap, as a lane with that cursor does — carries the reference key of an earlier
//!   stay (one at or before the cursor's comes again only when the cursor's second holds its
//!   phase twice: a repeat under the same key); for kinds other than Volcano, a rebuild may
//!   instead name a numbered stay by its time alone (`running@T` for the reference's
//!   `running@T#2`), as documented. For Volcano, every stay between the two is rebuilt.
//! - TrainJob, JobSet and RayJob written as data, from the text `docs/job-kinds.md` shows and
//!   read as a user's main file is, give every version the built-in kind's phase, raw phase,
//!   reason and key.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_testkit::{Flavor, JobDriver, Pace, SimCluster};
use jobrelay_watch::catch_up::{
    first_sight_events, missed_transitions, recorded_transitions, stay_unchanged, synthetic_events,
};
use jobrelay_watch::kinds::JobKind;
use jobrelay_watch::kinds::spec::KindEntry;
use jobrelay_watch::object::JobObject;
use jobrelay_watch::watcher::{Observation, Tracker};
use kube::runtime::watcher::Event;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// An event as a lane holds one, of a batch Job on cluster `east`.
fn event(uid: &str, rv: &str, phase: Phase, previous: Option<Phase>, at: &str) -> JobEvent {
    JobEvent {
        id: JobEvent::make_id("east", uid, rv),
        cluster: "east".into(),
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        namespace: "ml".into(),
        name: format!("train-{uid}"),
        uid: uid.into(),
        resource_version: rv.into(),
        generation: Some(1),
        phase,
        raw_phase: format!("{phase:?}"),
        reason: None,
        message: None,
        previous_phase: previous,
        transition_time: at.into(),
        labels: BTreeMap::from([("team".to_string(), "nlp".to_string())]),
        annotations: BTreeMap::new(),
        object_json: Arc::from(r#"{"kind":"Job","status":{}}"#),
        transition_key: String::new(),
        synthetic: false,
        story: None,
    }
}

fn kind_of(flavor: Flavor) -> &'static str {
    match flavor {
        Flavor::Batch => "batch-job",
        Flavor::Volcano => "volcano-job",
        Flavor::PyTorch => "pytorch-job",
        Flavor::Mpi => "mpi-job",
        Flavor::TrainJob => "train-job",
        Flavor::JobSet => "jobset",
        Flavor::RayJob => "ray-job",
    }
}

/// The main file's `kinds:` section alone, as the main file's parser reads it.
#[derive(serde::Deserialize)]
struct KindsSection {
    kinds: Vec<KindEntry>,
}

/// The kind `flavor` plays, as a user writes it in a main file: the rules text
/// `docs/job-kinds.md` shows for the built-in, read by the `kinds:` section's own spec (what
/// the main file's parser reads each entry with).
fn described(flavor: Flavor) -> Option<JobKind> {
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/job-kinds.md"),
    )
    .expect("docs/job-kinds.md");
    let name = kind_of(flavor);
    let start = format!("`{name}`:\n\n```yaml\n");
    let at = docs.find(&start)? + start.len();
    let text = &docs[at..at + docs[at..].find("```")?];
    let builtin = JobKind::builtin(name)?;
    let indented: String = text.lines().map(|l| format!("        {l}\n")).collect();
    let main = format!(
        "kinds:\n  - name: described\n    group: {}\n    version: {}\n    kind: {}\n    \
         plural: {}\n    normalizer:\n      rules:\n{indented}",
        builtin.group, builtin.version, builtin.kind, builtin.plural
    );
    let section: KindsSection = serde_yaml_ng::from_str(&main)
        .unwrap_or_else(|e| panic!("the {name} rules as docs/job-kinds.md shows them: {e}"));
    let entry = section.kinds.into_iter().next()?;
    let kind = entry
        .resolve()
        .unwrap_or_else(|e| panic!("the {name} rules as docs/job-kinds.md shows them: {e}"));
    Some(kind)
}

/// A step of a generated life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Pending,
    Running,
    Restarting,
    Suspended,
    Resumed,
    Succeeded,
    Failed,
    /// RayJob only.
    Stopped,
    /// Kueue admits a suspended TrainJob, JobSet or RayJob.
    Admitted,
}

/// Where a life is, for choosing the next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Start,
    Pending,
    Running,
    Restarting,
    Suspended,
    End,
}

/// The steps that may follow `at` for a job of `flavor`.
fn choices(flavor: Flavor, at: At) -> &'static [Step] {
    match (at, flavor) {
        (At::Start, _) => &[Step::Pending, Step::Running, Step::Running],
        (At::Pending, _) => &[Step::Running, Step::Running, Step::Suspended],
        (At::Running, Flavor::RayJob) => &[
            Step::Restarting,
            Step::Restarting,
            Step::Running,
            Step::Suspended,
            Step::Succeeded,
            Step::Failed,
            Step::Stopped,
        ],
        (At::Running, _) => &[
            Step::Restarting,
            Step::Restarting,
            Step::Running,
            Step::Suspended,
            Step::Succeeded,
            Step::Failed,
        ],
        (At::Restarting, _) => &[Step::Running, Step::Running, Step::Failed],
        (At::Suspended, Flavor::TrainJob | Flavor::JobSet | Flavor::RayJob) => {
            &[Step::Resumed, Step::Admitted]
        }
        (At::Suspended, _) => &[Step::Resumed],
        (At::End, _) => &[],
    }
}

fn after(step: Step) -> At {
    match step {
        Step::Pending => At::Pending,
        Step::Running => At::Running,
        Step::Restarting => At::Restarting,
        Step::Suspended => At::Suspended,
        Step::Resumed => At::Pending,
        Step::Admitted => At::Running,
        Step::Succeeded | Step::Failed | Step::Stopped => At::End,
    }
}

/// How the faulty tracker meets a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meet {
    See,
    Miss,
    /// A restart before it: a new tracker, which meets it in its first list.
    KillThenList,
}

/// A generated life: whether the job is created suspended (TrainJob, JobSet, RayJob) and
/// starts up in order (JobSet), then per step a choice among what may follow, the clock's
/// move before it in milliseconds, and how the faulty tracker meets the version it writes.
type Life = (bool, bool, Vec<(usize, u64, Meet)>);

fn life() -> impl Strategy<Value = Life> {
    let gap = prop_oneof![
        3 => Just(0u64),
        3 => 1u64..400,
        2 => 400u64..1000,
        2 => 1000u64..2500,
    ];
    let meet = prop_oneof![
        7 => Just(Meet::See),
        2 => Just(Meet::Miss),
        1 => Just(Meet::KillThenList),
    ];
    (
        proptest::bool::weighted(0.25),
        proptest::bool::ANY,
        proptest::collection::vec((0usize..7, gap, meet), 1..16),
    )
}

fn play(driver: &mut JobDriver, step: Step) -> anyhow::Result<String> {
    match step {
        Step::Pending => driver.pending(),
        Step::Running => driver.running(),
        Step::Restarting => driver.restarting(),
        Step::Suspended => driver.suspended(),
        Step::Resumed => driver.resumed(),
        Step::Succeeded => driver.succeeded(),
        Step::Failed => driver.failed("OOMKilled"),
        Step::Stopped => driver.stopped(),
        Step::Admitted => driver.admitted(),
    }
}

/// One version as a tracker turned it into an event; `None` when the tracker had seen it.
fn observe(tracker: &mut Tracker, text: &str, list: bool) -> Option<JobEvent> {
    let object = JobObject::from_json(text).expect("the kit writes readable jobs");
    let mut events = Vec::new();
    if list {
        events.extend(tracker.observe(Event::Init));
        events.extend(tracker.observe(Event::InitApply(object)));
        events.extend(tracker.observe(Event::InitDone));
    } else {
        events.extend(tracker.observe(Event::Apply(object)));
    }
    events.into_iter().find_map(|o| match o {
        Observation::Version(observed) => Some(observed.event),
        Observation::Listed(_) | Observation::Story(_) => None,
    })
}

fn tracker(kind: &Arc<JobKind>) -> Tracker {
    Tracker::new(Arc::from("east"), kind.clone(), None)
}

/// Plays one life and checks every claim of the module docs.
fn check_life(
    sim: &SimCluster,
    flavor: Flavor,
    n: usize,
    life: &Life,
) -> Result<(), TestCaseError> {
    let (created_suspended, in_order, life) = life;
    let kind = Arc::new(JobKind::builtin(kind_of(flavor)).expect("kind"));
    let spec = &kind.normalizer;
    let ai_kind = Flavor::AI_KINDS.contains(&flavor);
    let mut builder = JobDriver::builder(flavor, "ml", &format!("life-{n}"))
        .without_pods()
        .pace(Pace::Manual);
    if ai_kind && *created_suspended {
        builder = builder.created_suspended();
    }
    if flavor == Flavor::JobSet && *in_order {
        builder = builder.in_order_startup();
    }
    let mut driver = builder
        .create(sim)
        .map_err(|e| TestCaseError::fail(format!("create: {e:#}")))?;
    let mut reference = tracker(&kind);
    // The same kind as a user writes it, from the docs (TrainJob, JobSet, RayJob).
    let described_kind = ai_kind.then(|| Arc::new(described(flavor).expect("in the docs")));
    let mut described_tracker = described_kind.as_ref().map(tracker);
    let mut differences = Vec::new();
    let mut faulty = tracker(&kind);
    // Per version: (stay number, reference event, faulty event if met).
    let mut versions: Vec<(usize, JobEvent, Option<JobEvent>)> = Vec::new();
    let mut at = if ai_kind && *created_suspended {
        At::Suspended
    } else {
        At::Start
    };
    let mut stay = 0;
    let mut last_met: Option<usize> = None;
    let mut missed_since = false;
    let mut faults = Vec::new();
    let mut record =
        |text: String, meet: Meet, versions: &mut Vec<(usize, JobEvent, Option<JobEvent>)>| {
            // A step that changed nothing (an outcome is final) wrote no new version.
            let Some(live) = observe(&mut reference, &text, false) else {
                return;
            };
            if let Some(described) = described_tracker.as_mut() {
                let as_data = observe(described, &text, false);
                let same = as_data.as_ref().is_some_and(|d| {
                    (d.phase, &d.raw_phase, &d.reason, &d.transition_key)
                        == (
                            live.phase,
                            &live.raw_phase,
                            &live.reason,
                            &live.transition_key,
                        )
                });
                if !same {
                    differences.push(format!(
                        "v{}: built-in {} {} {:?} {} / as data {:?}",
                        versions.len(),
                        live.phase,
                        live.raw_phase,
                        live.reason,
                        live.transition_key,
                        as_data.map(|d| (d.phase, d.raw_phase, d.reason, d.transition_key))
                    ));
                }
            }
            if versions
                .last()
                .is_some_and(|(_, e, _)| e.phase != live.phase)
            {
                stay += 1;
            }
            let met = match meet {
                Meet::Miss => {
                    missed_since = true;
                    None
                }
                Meet::KillThenList => {
                    faulty = tracker(&kind);
                    faults.push(format!("kill before v{}", versions.len()));
                    observe(&mut faulty, &text, true)
                }
                Meet::See => observe(&mut faulty, &text, missed_since),
            };
            if met.is_some() {
                missed_since = false;
            }
            versions.push((stay, live, met));
        };
    let fail = |e: &dyn std::fmt::Display| TestCaseError::fail(e.to_string());
    let created = driver.object().map_err(|e| fail(&e))?;
    let mut seen_rv: u64 = driver.resource_version().parse().map_err(|e| fail(&e))?;
    record(created.to_string(), Meet::See, &mut versions);
    for (choice, gap, meet) in life {
        let options = choices(flavor, at);
        if options.is_empty() {
            break;
        }
        let step = options[choice % options.len()];
        driver.advance_clock(std::time::Duration::from_millis(*gap));
        play(&mut driver, step).map_err(|e| TestCaseError::fail(format!("{step:?}: {e:#}")))?;
        at = after(step);
        // Every version the step wrote (some steps write two), as a watch sees them; a miss
        // misses them all, a kill comes before the first.
        let written = sim
            .versions_since(&flavor.gvr(), "ml", driver.name(), seen_rv)
            .map_err(|e| fail(&e))?;
        seen_rv = driver.resource_version().parse().map_err(|e| fail(&e))?;
        for (k, object) in written.into_iter().enumerate() {
            let meet = if k > 0 && *meet == Meet::KillThenList {
                Meet::See
            } else {
                *meet
            };
            record(object.to_string(), meet, &mut versions);
        }
    }
    let trail: Vec<String> = versions
        .iter()
        .map(|(s, e, m)| {
            format!(
                "s{s} {} ref={} faulty={}",
                e.phase,
                e.transition_key,
                m.as_ref().map_or("-", |m| m.transition_key.as_str())
            )
        })
        .collect();
    let context = || format!("{flavor:?} {faults:?}\n  {}", trail.join("\n  "));
    prop_assert!(
        differences.is_empty(),
        "written as data, the kind reads otherwise: {differences:?}\n{}",
        context()
    );

    // The reference: one key per stay, and never one key for two stays.
    let mut by_stay: BTreeMap<usize, BTreeSet<&str>> = BTreeMap::new();
    for (s, e, _) in &versions {
        by_stay.entry(*s).or_default().insert(&e.transition_key);
    }
    let mut owner: BTreeMap<&str, usize> = BTreeMap::new();
    for (s, keys) in &by_stay {
        prop_assert!(keys.len() == 1, "stay {s} has keys {keys:?}\n{}", context());
        for key in keys {
            if let Some(other) = owner.insert(key, *s) {
                prop_assert!(false, "stays {other} and {s} share {key}\n{}", context());
            }
        }
    }
    let reference_key = |s: usize| *by_stay[&s].iter().next().expect("a key");

    // The faulty tracker: the reference's key, but where only a watcher that saw it can tell.
    for (_, live, met) in &versions {
        let Some(met) = met else { continue };
        let told_by_memory =
            live.transition_key.contains('#') || live.transition_key.contains("@rv=");
        if flavor == Flavor::Volcano || !told_by_memory {
            prop_assert_eq!(
                &met.transition_key,
                &live.transition_key,
                "after gaps and kills\n{}",
                context()
            );
        }
    }

    // Rebuilds after every gap, from the last version met before it, and from nothing.
    let rebuilt_ok = |key: &str, phase: Phase, stays: std::ops::Range<usize>| {
        stays.clone().any(|s| reference_key(s) == key)
            || (flavor != Flavor::Volcano
                && stays.clone().any(|s| {
                    let own = reference_key(s);
                    versions
                        .iter()
                        .any(|(vs, e, _)| *vs == s && e.phase == phase)
                        && own.starts_with(key)
                        && own[key.len()..].starts_with('#')
                }))
    };
    for (i, (s, _, met)) in versions.iter().enumerate() {
        let Some(met) = met else { continue };
        let object: serde_json::Value =
            serde_json::from_str(&met.object_json).expect("the event's object");
        let first_met = versions[..i].iter().all(|(_, _, m)| m.is_none());
        if first_met && i > 0 {
            for event in first_sight_events(met, &recorded_transitions(spec, &object)) {
                prop_assert!(
                    rebuilt_ok(&event.transition_key, event.phase, 0..*s),
                    "first sight at v{i} rebuilt {} {}\n{}",
                    event.phase,
                    event.transition_key,
                    context()
                );
            }
        }
        let Some(before) = last_met else {
            last_met = Some(i);
            continue;
        };
        last_met = Some(i);
        let cursor = versions[before].2.as_ref().expect("met");
        // As a lane does: no catch-up where the version is still in the cursor's stay.
        if before + 1 == i
            || stay_unchanged(
                spec,
                (cursor.phase, &cursor.transition_time),
                (met.phase, &met.transition_time),
            )
        {
            continue;
        }
        let missed = missed_transitions(spec, &object, cursor.phase, Some(&cursor.transition_time));
        let mut current = event(&met.uid, &met.resource_version, met.phase, None, "x");
        current.object_json = met.object_json.clone();
        let rebuilt = synthetic_events(&current, cursor.phase, &missed);
        for event in &rebuilt {
            // A stay at or before the cursor's may come again when the cursor's second holds
            // its phase twice: under the key it had, so plugins drop it as a repeat.
            prop_assert!(
                rebuilt_ok(&event.transition_key, event.phase, 0..*s),
                "after the gap v{before}..v{i}: rebuilt {} {}\n{}",
                event.phase,
                event.transition_key,
                context()
            );
        }
        // Volcano's history holds every entry: nothing between the two is lost.
        if flavor == Flavor::Volcano {
            for between in versions[before].0 + 1..*s {
                let key = reference_key(between);
                prop_assert!(
                    rebuilt.iter().any(|e| e.transition_key == key),
                    "after the gap v{before}..v{i}: stay {between} ({key}) was not rebuilt\n{}",
                    context()
                );
            }
        }
    }
    Ok(())
}

#[test]
fn keys_tell_every_transition_apart_through_gaps_kills_and_fast_reentries() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let sim = runtime
        .block_on(SimCluster::start("east"))
        .expect("simulator");
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    for flavor in Flavor::ALL.into_iter().chain(Flavor::AI_KINDS) {
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        let n = std::sync::atomic::AtomicUsize::new(0);
        let outcome = runner.run(&life(), |life| {
            let n = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            check_life(&sim, flavor, n, &life)
        });
        if let Err(e) = outcome {
            panic!("{flavor:?}: {e}");
        }
    }
}

/// A job first seen a second or more after its creation, before any controller wrote its
/// status, then missed while it ran and restarted in its creation's second: the catch-up
/// from that first version rebuilds the run. The cursor's time is the creation's (the API
/// server's clock), not when jobrelay saw it — which, a second on, would count the run as
/// delivered. (The generated lives above hit this only when a second boundary fell between
/// creating a job and seeing it.)
#[test]
fn a_run_missed_after_a_late_first_sight_is_rebuilt() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let sim = runtime
        .block_on(SimCluster::start("east"))
        .expect("simulator");
    let kind = Arc::new(JobKind::builtin("volcano-job").expect("kind"));
    let mut driver = JobDriver::builder(Flavor::Volcano, "ml", "late")
        .without_pods()
        .pace(Pace::Manual)
        .create(&sim)
        .expect("create");
    let created = driver.object().expect("object");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let mut faulty = tracker(&kind);
    let first = observe(&mut faulty, &created.to_string(), false).expect("a first version");
    assert_eq!(first.phase, Phase::Pending);
    assert_eq!(
        Some(first.transition_time.as_str()),
        created["metadata"]["creationTimestamp"].as_str()
    );
    driver.running().expect("running");
    driver.restarting().expect("restarting");
    let now = driver.object().expect("object");
    let missed = missed_transitions(
        &kind.normalizer,
        &now,
        first.phase,
        Some(&first.transition_time),
    );
    let phases: Vec<Phase> = missed.iter().map(|m| m.phase).collect();
    assert_eq!(phases, [Phase::Running], "{missed:?}");
}

/// An event without a key (a hand-written event file, a dead letter stored before keys
/// existed) gets one from its version; a deletion's is the job's single deletion key.
#[test]
fn an_event_without_a_key_derives_one() {
    let running = event("u-1", "41", Phase::Running, None, "2026-01-01T00:00:00Z");
    assert_eq!(running.transition_key(), "east/u-1/running@rv=41");
    let gone = event(
        "u-1",
        "41-gone",
        Phase::Deleted,
        None,
        "2026-01-01T00:00:00Z",
    );
    assert_eq!(gone.transition_key(), "east/u-1/deleted");
    let mut keyed = running.clone();
    keyed.transition_key = "east/u-1/running@2026-01-01T00:00:00Z".into();
    assert_eq!(
        keyed.transition_key(),
        "east/u-1/running@2026-01-01T00:00:00Z"
    );
}
