use std::collections::{BTreeSet, HashSet};

use jobrelay_contract::event::JobEvent;
use jobrelay_watch::kinds::JobKind;
use proptest::prelude::*;

use super::*;
use crate::query::JobQuery;

fn kind(name: &str) -> Arc<JobKind> {
    let mut kind = JobKind::builtin("volcano-job").expect("built-in");
    kind.name = name.to_string();
    Arc::new(kind)
}

/// A version of job `name` (uid `u-NAME`) in `ns` on `cluster`, created at `created` seconds.
struct Job<'a> {
    cluster: &'a str,
    ns: &'a str,
    name: &'a str,
    kind: &'a str,
    created: i64,
    labels: &'a [(&'a str, &'a str)],
}

impl Job<'_> {
    fn at(&self, phase: Phase, at: i64) -> Observed {
        let time = chrono::DateTime::from_timestamp(at, 0)
            .expect("time")
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let uid = format!("u-{}-{}", self.cluster, self.name);
        Observed {
            event: JobEvent {
                id: JobEvent::make_id(self.cluster, &uid, &at.to_string()),
                cluster: self.cluster.into(),
                api_version: "batch.volcano.sh/v1alpha1".into(),
                kind: "Job".into(),
                namespace: self.ns.into(),
                name: self.name.into(),
                uid,
                resource_version: at.to_string(),
                generation: None,
                phase,
                raw_phase: format!("Raw{phase}"),
                reason: None,
                message: None,
                previous_phase: None,
                transition_time: time,
                labels: self
                    .labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                annotations: Default::default(),
                object_json: Arc::from("{}"),
                transition_key: String::new(),
                synthetic: false,
                story: None,
            },
            kind: kind(self.kind),
            from_list: false,
            created: Some(self.created),
        }
    }
}

fn job<'a>(cluster: &'a str, ns: &'a str, name: &'a str) -> Job<'a> {
    Job {
        cluster,
        ns,
        name,
        kind: "volcano-job",
        created: 1_800_000_000,
        labels: &[],
    }
}

fn query(text: &str) -> JobQuery {
    JobQuery::parse(text).expect("valid query")
}

fn names(page: &JobPage) -> Vec<String> {
    page.items
        .iter()
        .map(|j| format!("{}/{}/{}", j.cluster, j.namespace, j.name))
        .collect()
}

const T0: i64 = 1_800_000_000;

#[test]
fn a_job_keeps_its_times_phases_and_restarts() {
    let view = JobView::default();
    let j = job("c1", "ml", "train");
    view.observe(&j.at(Phase::Pending, T0));
    view.observe(&j.at(Phase::Running, T0 + 30));
    view.observe(&j.at(Phase::Running, T0 + 31)); // a new version, same phase
    view.observe(&j.at(Phase::Restarting, T0 + 100));
    view.observe(&j.at(Phase::Running, T0 + 110));
    view.observe(&j.at(Phase::Succeeded, T0 + 600));
    let found = view.find("c1", "ml", "train");
    assert_eq!(found.len(), 1);
    let job = &found[0];
    assert_eq!(job.summary.phase, Phase::Succeeded);
    assert_eq!(job.summary.raw_phase, "Rawsucceeded");
    assert_eq!(job.summary.created.as_deref(), Some("2027-01-15T08:00:00Z"));
    assert_eq!(job.summary.started.as_deref(), Some("2027-01-15T08:00:30Z"));
    assert_eq!(
        job.summary.finished.as_deref(),
        Some("2027-01-15T08:10:00Z")
    );
    assert_eq!(job.summary.duration_seconds, Some(570));
    assert_eq!(job.summary.restarts, 1);
    let phases: Vec<Phase> = job.transitions.iter().map(|t| t.phase).collect();
    assert_eq!(
        phases,
        [
            Phase::Pending,
            Phase::Running,
            Phase::Restarting,
            Phase::Running,
            Phase::Succeeded
        ]
    );
    assert!(view.find("c1", "ml", "other").is_empty());
    assert!(view.find("c2", "ml", "train").is_empty());
}

#[test]
fn the_history_of_a_flapping_job_stays_bounded() {
    let view = JobView::default();
    let j = job("c1", "ml", "flappy");
    view.observe(&j.at(Phase::Pending, T0));
    for i in 0..1_000 {
        let phase = if i % 2 == 0 {
            Phase::Running
        } else {
            Phase::Restarting
        };
        view.observe(&j.at(phase, T0 + i));
    }
    let found = view.find("c1", "ml", "flappy");
    assert_eq!(found[0].transitions.len(), crate::record::MAX_HISTORY);
    assert_eq!(
        found[0].transitions[0].phase,
        Phase::Pending,
        "the first stays"
    );
    assert_eq!(found[0].summary.restarts, 500);
}

#[test]
fn filters_select_by_cluster_namespace_kind_phase_labels_and_name() {
    let view = JobView::default();
    let gpu = [("team", "nlp"), ("gpu", "a100")];
    let cpu = [("team", "cv")];
    let mut a = job("c1", "ml", "train-a");
    a.labels = &gpu;
    view.observe(&a.at(Phase::Running, T0));
    let mut b = job("c1", "ml", "eval-b");
    b.labels = &cpu;
    view.observe(&b.at(Phase::Failed, T0));
    let mut c = job("c2", "research", "train-c");
    c.labels = &gpu;
    c.kind = "batch-job";
    view.observe(&c.at(Phase::Failed, T0));
    let d = job("c2", "ml", "train-d");
    view.observe(&d.at(Phase::Succeeded, T0));

    let cases = [
        (
            "",
            vec![
                "c1/ml/eval-b",
                "c1/ml/train-a",
                "c2/ml/train-d",
                "c2/research/train-c",
            ],
        ),
        ("cluster=c2", vec!["c2/ml/train-d", "c2/research/train-c"]),
        ("cluster=c3", vec![]),
        (
            "namespace=ml",
            vec!["c1/ml/eval-b", "c1/ml/train-a", "c2/ml/train-d"],
        ),
        ("namespace=nowhere", vec![]),
        ("kind=batch-job", vec!["c2/research/train-c"]),
        ("phase=failed", vec!["c1/ml/eval-b", "c2/research/train-c"]),
        (
            "phase=failed,succeeded&cluster=c2",
            vec!["c2/ml/train-d", "c2/research/train-c"],
        ),
        (
            "labelSelector=team%3Dnlp",
            vec!["c1/ml/train-a", "c2/research/train-c"],
        ),
        (
            "labelSelector=team%20in%20(nlp,cv),!gpu",
            vec!["c1/ml/eval-b"],
        ),
        (
            "name=train",
            vec!["c1/ml/train-a", "c2/ml/train-d", "c2/research/train-c"],
        ),
        (
            "name=train&namespace=ml&phase=running",
            vec!["c1/ml/train-a"],
        ),
    ];
    for (text, expected) in cases {
        let page = view.list(&query(text));
        assert_eq!(names(&page), expected, "{text}");
        assert_eq!(page.remaining, 0);
        assert!(page.next.is_none());
    }
}

#[test]
fn labels_that_change_are_seen_and_shared_sets_are_let_go() {
    let view = JobView::default();
    let mut a = job("c1", "ml", "a");
    a.labels = &[("team", "nlp")];
    view.observe(&a.at(Phase::Running, T0));
    a.labels = &[("team", "cv")];
    view.observe(&a.at(Phase::Running, T0 + 1));
    assert!(
        view.list(&query("labelSelector=team%3Dnlp"))
            .items
            .is_empty()
    );
    assert_eq!(view.list(&query("labelSelector=team%3Dcv")).items.len(), 1);
    let shard = view.shard("c1").expect("shard");
    assert_eq!(read(&shard).labels.len(), 1, "the old set is let go");
}

fn fleet(view: &JobView, clusters: usize, per: usize) {
    for c in 0..clusters {
        for i in 0..per {
            let cluster = format!("c{c}");
            let name = format!("job-{:03}", (i * 37) % per);
            let ns = if i % 3 == 0 { "a" } else { "b" };
            let mut j = job(&cluster, ns, &name);
            j.created = T0 + ((i * 7919) % 1000) as i64;
            view.observe(&j.at(Phase::Running, T0 + 2000));
            if i % 4 == 0 {
                view.observe(&j.at(Phase::Succeeded, T0 + 3000 + (i % 50) as i64));
            }
        }
    }
}

/// Every page in turn, following `continue`.
fn all_pages(view: &JobView, base: &str) -> (Vec<JobSummary>, usize) {
    let mut items = Vec::new();
    let mut pages = 0;
    let mut token: Option<String> = None;
    loop {
        let text = match &token {
            Some(t) => format!("{base}&continue={t}"),
            None => base.to_string(),
        };
        let page = view.list(&query(&text));
        pages += 1;
        let before = items.len();
        items.extend(page.items);
        match page.next {
            Some(t) => {
                assert_eq!(
                    page.remaining as usize + items.len(),
                    view.len(),
                    "remaining counts what is left"
                );
                token = Some(t);
            }
            None => {
                assert_eq!(page.remaining, 0);
                assert!(items.len() > before || pages == 1);
                return (items, pages);
            }
        }
    }
}

#[test]
fn pages_follow_every_order_without_gaps_or_repeats() {
    let view = JobView::default();
    fleet(&view, 3, 60);
    for sort in [
        "cluster",
        "-cluster",
        "name",
        "-name",
        "created",
        "-created",
        "finished",
        "-finished",
    ] {
        let whole = view.list(&query(&format!("sort={sort}&limit=1000"))).items;
        assert_eq!(whole.len(), 180);
        let (paged, pages) = all_pages(&view, &format!("sort={sort}&limit=7"));
        assert_eq!(pages, 180usize.div_ceil(7), "{sort}");
        assert_eq!(paged, whole, "{sort}: pages give the whole list in order");
        // The order is what it says.
        let check = |x: &JobSummary, y: &JobSummary| -> bool {
            let desc = sort.starts_with('-');
            let (kx, ky) = match sort.trim_start_matches('-') {
                "cluster" => (
                    (
                        String::new(),
                        x.cluster.clone(),
                        x.namespace.clone(),
                        x.name.clone(),
                    ),
                    (
                        String::new(),
                        y.cluster.clone(),
                        y.namespace.clone(),
                        y.name.clone(),
                    ),
                ),
                "name" => (
                    (
                        String::new(),
                        x.name.clone(),
                        x.namespace.clone(),
                        x.cluster.clone(),
                    ),
                    (
                        String::new(),
                        y.name.clone(),
                        y.namespace.clone(),
                        y.cluster.clone(),
                    ),
                ),
                "created" => (
                    (
                        x.created.clone().unwrap_or_default(),
                        x.cluster.clone(),
                        x.namespace.clone(),
                        x.name.clone(),
                    ),
                    (
                        y.created.clone().unwrap_or_default(),
                        y.cluster.clone(),
                        y.namespace.clone(),
                        y.name.clone(),
                    ),
                ),
                _ => {
                    // Not finished: last in both directions.
                    match (&x.finished, &y.finished) {
                        (Some(_), None) => return true,
                        (None, Some(_)) => return false,
                        _ => {}
                    }
                    (
                        (
                            x.finished.clone().unwrap_or_default(),
                            x.cluster.clone(),
                            x.namespace.clone(),
                            x.name.clone(),
                        ),
                        (
                            y.finished.clone().unwrap_or_default(),
                            y.cluster.clone(),
                            y.namespace.clone(),
                            y.name.clone(),
                        ),
                    )
                }
            };
            if desc { kx >= ky } else { kx <= ky }
        };
        for pair in whole.windows(2) {
            assert!(
                check(&pair[0], &pair[1]),
                "{sort}: {:?} before {:?}",
                pair[0],
                pair[1]
            );
        }
    }
}

#[test]
fn remaining_counts_the_matches_after_the_page() {
    let view = JobView::default();
    fleet(&view, 2, 50);
    let all = view.list(&query("phase=succeeded&limit=1000")).items.len() as u64;
    assert_eq!(all, 26, "every fourth job of 50, on 2 clusters");
    let page = view.list(&query("phase=succeeded&limit=5"));
    assert_eq!(page.items.len(), 5);
    assert_eq!(page.remaining, all - 5);
    let next = view.list(&query(&format!(
        "phase=succeeded&limit=5&continue={}",
        page.next.expect("more")
    )));
    assert_eq!(next.remaining, all - 10);
}

#[test]
fn a_list_ends_jobs_it_did_not_name_and_they_stay_for_a_while() {
    let view = JobView::new(ViewSettings {
        keep_deleted_seconds: 60,
        max_deleted: 1_000,
        ..ViewSettings::default()
    });
    let a = job("c1", "ml", "a");
    let b = job("c1", "ml", "b");
    let other_kind = Job {
        kind: "batch-job",
        ..job("c1", "ml", "x")
    };
    for j in [&a, &b, &other_kind] {
        view.observe(&j.at(Phase::Running, T0));
    }
    let listed = Listed {
        cluster: Arc::from("c1"),
        kind: kind("volcano-job"),
        namespace: None,
        uids: Arc::new(HashSet::from([Uid::new("u-c1-a")])),
    };
    view.listed(&listed);
    let deleted = view.list(&query("phase=deleted"));
    assert_eq!(
        names(&deleted),
        ["c1/ml/b"],
        "another kind's list does not end x"
    );
    assert!(deleted.items[0].deleted.is_some());
    let now = now_secs();
    view.sweep(now + 59);
    assert_eq!(view.len(), 3);
    view.sweep(now + 61);
    assert_eq!(view.len(), 2);
    assert!(view.list(&query("phase=deleted")).items.is_empty());
}

#[test]
fn deleted_jobs_over_the_cap_go_oldest_first() {
    let view = JobView::new(ViewSettings {
        keep_deleted_seconds: 3_600,
        max_deleted: 10,
        ..ViewSettings::default()
    });
    for c in ["c1", "c2"] {
        for i in 0..20 {
            let name = format!("j{i}");
            let j = job(c, "ml", &name);
            view.observe(&j.at(Phase::Running, T0));
            view.observe(&j.at(Phase::Deleted, T0));
        }
    }
    assert_eq!(
        view.list(&query("phase=deleted&limit=1000")).items.len(),
        40
    );
    view.sweep(now_secs());
    assert_eq!(
        view.list(&query("phase=deleted&limit=1000")).items.len(),
        10
    );
    // Interned values of the records let go are let go with them.
    let shard = view.shard("c1").expect("shard");
    let jobs = read(&shard);
    assert!(jobs.strings.len() <= 4, "{}", jobs.strings.len());
}

#[test]
fn a_name_reused_shows_the_live_job_first() {
    let view = JobView::default();
    let old = job("c1", "ml", "a");
    view.observe(&old.at(Phase::Failed, T0));
    view.observe(&old.at(Phase::Deleted, T0 + 1));
    let mut again = old.at(Phase::Running, T0 + 10);
    again.event.uid = "u-second".into();
    view.observe(&again);
    let found = view.find("c1", "ml", "a");
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].summary.uid, "u-second");
    assert_eq!(found[1].summary.phase, Phase::Deleted);
    let page = view.list(&query("limit=1"));
    assert_eq!(page.items.len(), 1);
    let rest = view.list(&query(&format!(
        "limit=1&continue={}",
        page.next.expect("more")
    )));
    assert_eq!(rest.items.len(), 1);
    assert_ne!(
        rest.items[0].uid, page.items[0].uid,
        "same name, told apart by uid"
    );
}

#[test]
fn a_kind_no_longer_watched_leaves_the_view() {
    let view = JobView::default();
    view.observe(&job("c1", "ml", "a").at(Phase::Running, T0));
    let mut b = job("c1", "ml", "b");
    b.kind = "batch-job";
    view.observe(&b.at(Phase::Running, T0));
    view.observe(&b.at(Phase::Deleted, T0));
    view.retain_kinds(&["volcano-job"]);
    assert_eq!(names(&view.list(&query(""))), ["c1/ml/a"]);
    // The deleted count went with it: a cap of 0 has nothing left to cut.
    view.set_settings(ViewSettings {
        keep_deleted_seconds: 3_600,
        max_deleted: 0,
        ..ViewSettings::default()
    });
    view.sweep(now_secs());
    assert_eq!(view.len(), 1);
}

#[test]
fn live_transitions_feed_the_slis_and_listed_ones_do_not() {
    let view = JobView::default();
    let mut a = job("c1", "ml", "a");
    a.created = T0;
    view.observe(&a.at(Phase::Pending, T0));
    view.observe(&a.at(Phase::Running, T0 + 40));
    view.observe(&a.at(Phase::Running, T0 + 41));
    view.observe(&a.at(Phase::Restarting, T0 + 100));
    view.observe(&a.at(Phase::Running, T0 + 110));
    view.observe(&a.at(Phase::Failed, T0 + 640));
    // Seen only in a list (a restart's re-list): not a live transition.
    let mut b = job("c1", "ml", "b").at(Phase::Succeeded, T0 + 10);
    b.from_list = true;
    view.observe(&b);
    let rows = view.slis().snapshot();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(
        (
            row.cluster.as_str(),
            row.namespace.as_str(),
            row.kind.as_str()
        ),
        ("c1", "ml", "volcano-job")
    );
    assert_eq!(row.queue_wait.count, 1, "first running only");
    assert_eq!(row.queue_wait.sum_seconds, 40.0);
    assert_eq!((row.succeeded, row.failed, row.restarts), (0, 1, 1));
    assert_eq!(row.run.sum_seconds, 600.0);
    view.forget_cluster("c1");
    assert!(view.slis().snapshot().is_empty());
}

#[test]
fn forgetting_a_cluster_drops_its_jobs() {
    let view = JobView::default();
    fleet(&view, 2, 10);
    view.forget_cluster("c0");
    assert_eq!(view.clusters(), ["c1"]);
    assert_eq!(view.len(), 10);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Paging while jobs come and go: a job that exists from the first page to the last is
    /// listed exactly once, and no job twice, in every order whose key does not change.
    #[test]
    fn paging_across_changes_neither_repeats_nor_skips(
        ops in proptest::collection::vec((0u8..3, 0usize..60, 0i64..500), 0..120),
        sort in prop::sample::select(vec!["cluster", "-cluster", "name", "-name", "created", "-created"]),
        limit in 1usize..9,
    ) {
        let view = JobView::default();
        let name_of = |i: usize| format!("j{i:02}");
        let stable: BTreeSet<String> = (0..20).map(name_of).collect();
        for i in 0..40 {
            let name = name_of(i);
            let mut j = job(if i % 2 == 0 { "c1" } else { "c2" }, "ml", &name);
            // Four creation times for forty jobs: the order by `created` rests on its
            // tie-breaks (cluster, namespace, name) across every page boundary.
            j.created = T0 + i as i64 % 4;
            view.observe(&j.at(Phase::Running, T0));
        }
        let mut ops = ops.into_iter();
        let mut seen: Vec<String> = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let text = match &token {
                Some(t) => format!("sort={sort}&limit={limit}&continue={t}"),
                None => format!("sort={sort}&limit={limit}"),
            };
            let page = view.list(&query(&text));
            seen.extend(page.items.iter().map(|j| format!("{}:{}", j.uid, j.name)));
            // Between pages: jobs 20..60 come, go and change phase (0..20 are left alone).
            for (op, n, t) in ops.by_ref().take(3) {
                let i = 20 + n % 40;
                let name = name_of(i);
                let mut j = job(if i % 2 == 0 { "c1" } else { "c2" }, "ml", &name);
                // Churned jobs share those creation times too.
                j.created = T0 + t % 4;
                let phase = [Phase::Running, Phase::Failed, Phase::Deleted][op as usize];
                view.observe(&j.at(phase, T0 + t));
            }
            match page.next {
                Some(t) => token = Some(t),
                None => break,
            }
        }
        let unique: BTreeSet<&String> = seen.iter().collect();
        prop_assert_eq!(unique.len(), seen.len(), "a job listed twice: {:?}", seen);
        for name in &stable {
            prop_assert!(seen.iter().any(|s| s.ends_with(&format!(":{name}"))), "{} skipped", name);
        }
    }
}

/// Watch lag counts a live version entering a phase, measured from the time its status
/// records: not a version of the same phase (its time is an older transition's), not a listed
/// one, not a reconstructed one. The newest live arrival is the cluster's last event.
#[test]
fn watch_lag_counts_live_transitions_only() {
    let view = JobView::new(ViewSettings::default());
    let now = now_secs() as i64;
    let a = job("east", "ns", "a");
    let mut listed = a.at(Phase::Pending, now - 500);
    listed.from_list = true;
    view.observe(&listed);
    assert!(view.slis().lags().is_empty(), "a listed version is no lag");
    assert!(view.last_events().is_empty(), "nor a live arrival");
    view.observe(&a.at(Phase::Running, now - 30));
    let mut relabelled = a.at(Phase::Running, now - 30);
    relabelled.event.resource_version = "later".into();
    view.observe(&relabelled);
    let mut synthetic = job("east", "ns", "b").at(Phase::Failed, now - 900);
    synthetic.event.synthetic = true;
    view.observe(&synthetic);
    let lags = view.slis().lags();
    assert_eq!(lags.len(), 1);
    let (cluster, lag) = &lags[0];
    assert_eq!(cluster, "east");
    assert_eq!(lag.count, 1, "{lag:?}");
    assert!(
        (30.0..=32.0).contains(&lag.sum_seconds),
        "lag {}",
        lag.sum_seconds
    );
    let last = view.last_events();
    assert_eq!(last.len(), 1);
    assert!(i64::from(last[0].1) >= now);
    view.forget_cluster("east");
    assert!(view.slis().lags().is_empty());
}

/// The stays a timer judges: a job Kueue holds is `queued` since the Workload's wait began
/// (whatever its phase), a pending one since its creation, a running one since it entered
/// running as its status says; a finished or deleted job is in none, and a job admitted
/// leaves `queued` (and lets go of its queue's name).
#[test]
fn stays_come_from_the_jobs_objects() {
    use crate::timers::TimedState;
    use jobrelay_contract::story::{QueueState, Story, WorkloadFacts};
    let view = JobView::new(ViewSettings::default());
    let queued_story = |state: QueueState| {
        let waiting = chrono::DateTime::parse_from_rfc3339("2027-01-15T08:00:00Z").expect("time");
        Arc::new(Story {
            workload: Some(WorkloadFacts {
                job_uid: None,
                state,
                cluster_queue: None,
                local_queue: Some("team-a".into()),
                waiting_since: Some(waiting),
                admitted_at: None,
                evicted_at: None,
                past_execution_seconds: 0,
                evictions: Default::default(),
                requeues: 0,
                accelerators: Default::default(),
            }),
            failure: None,
        })
    };
    let mut held = job("east", "ml", "held").at(Phase::Suspended, 1_800_000_100);
    held.event.story = Some(queued_story(QueueState::Queued {
        reason: "Pending".into(),
        message: "waiting for quota".into(),
    }));
    view.observe(&held);
    view.observe(&job("east", "ml", "waits").at(Phase::Pending, 1_800_000_200));
    view.observe(&job("east", "ml", "runs").at(Phase::Running, 1_800_000_300));
    view.observe(&job("east", "ml", "done").at(Phase::Succeeded, 1_800_000_400));
    view.observe(&job("east", "ml", "gone").at(Phase::Running, 1_800_000_500));
    view.observe(&job("east", "ml", "gone").at(Phase::Deleted, 1_800_000_600));
    let stays = |view: &JobView| {
        let mut all = Vec::new();
        view.for_each_stay(|s| {
            all.push((
                s.job.name.to_string(),
                s.state,
                s.since,
                s.queue.map(str::to_string),
            ))
        });
        all.sort();
        all
    };
    let waiting = secs_of("2027-01-15T08:00:00Z").expect("secs");
    assert_eq!(
        stays(&view),
        [
            (
                "held".to_string(),
                TimedState::Queued,
                waiting,
                Some("team-a".to_string())
            ),
            ("runs".to_string(), TimedState::Running, 1_800_000_300, None),
            (
                "waits".to_string(),
                TimedState::Pending,
                1_800_000_000,
                None
            ),
        ]
    );
    // Admitted: the next version's story says so, and the job is no longer queued.
    let mut admitted = job("east", "ml", "held").at(Phase::Running, 1_800_000_700);
    admitted.event.story = Some(queued_story(QueueState::Admitted));
    view.observe(&admitted);
    let now = stays(&view);
    assert_eq!(
        now[0],
        ("held".to_string(), TimedState::Running, 1_800_000_700, None)
    );
}

/// A list filters on the timers firing on each job (`timer=NAME`, `timer=*`) and shows them; a
/// new evaluation's marks replace the last one's.
#[test]
fn lists_filter_on_firing_timers() {
    let view = JobView::new(ViewSettings::default());
    for name in ["a", "b", "c"] {
        view.observe(&job("east", "ml", name).at(Phase::Pending, 1_800_000_100));
    }
    let uid = |name: &str| Uid::new(&format!("u-east-{name}"));
    view.set_firing(vec![
        ("east".into(), uid("a"), "pending-long".into()),
        ("east".into(), uid("b"), "other".into()),
        ("east".into(), uid("a"), "other".into()),
    ]);
    let names = |q: &str| -> Vec<(String, Vec<String>)> {
        view.list(&query(q))
            .items
            .into_iter()
            .map(|j| (j.name, j.timers))
            .collect()
    };
    assert_eq!(
        names("timer=pending-long"),
        [(
            "a".to_string(),
            vec!["other".to_string(), "pending-long".to_string()]
        )]
    );
    assert_eq!(names("timer=*").len(), 2);
    assert_eq!(names("timer=nothing"), []);
    assert_eq!(names("limit=10").len(), 3, "no timer filter: every job");
    view.set_firing(Vec::new());
    assert_eq!(names("timer=*"), []);
}
