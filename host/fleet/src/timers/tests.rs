use super::*;

fn timer(name: &str, state: TimedState, longer_than: u32) -> Timer {
    Timer {
        name: name.to_string(),
        measure: Measure::Stay { state, longer_than },
        clusters: Vec::new(),
        namespaces: Vec::new(),
        kinds: Vec::new(),
    }
}

/// A uid that lives as long as the test: stays borrow theirs from the view.
fn uid(text: &str) -> &'static Uid {
    Box::leak(Box::new(Uid::new(text)))
}

fn stay<'a>(name: &'a str, state: TimedState, since: Secs) -> Stay<'a> {
    Stay {
        job: JobKey {
            cluster: "east",
            namespace: "ml",
            name,
            kind: "pytorch-job",
            uid: uid(name),
        },
        state,
        since,
        queue: None,
    }
}

fn judge(timers: &mut Timers, now: Secs, stays: &[Stay<'_>]) -> Vec<(String, bool)> {
    let mut pass = timers.pass(now);
    for s in stays {
        pass.see(s);
    }
    pass.end().into_iter().map(|c| (c.uid, c.firing)).collect()
}

#[test]
fn a_long_stay_fires_once_and_resolves_when_the_job_moves_on() {
    let mut timers = Timers::default();
    timers.set_timers(vec![timer("queued-long", TimedState::Queued, 3600)]);
    let mut queued = stay("a", TimedState::Queued, 1000);
    queued.queue = Some("cluster-queue a100");
    assert_eq!(judge(&mut timers, 4599, &[queued]), [], "not yet");
    let mut pass = timers.pass(4600);
    pass.see(&queued);
    let changes = pass.end();
    assert_eq!(changes.len(), 1);
    assert!(changes[0].firing);
    assert_eq!(
        changes[0].summary,
        "ml/a queued 1h in cluster-queue a100 on east (longer than 1h)"
    );
    assert_eq!(judge(&mut timers, 9000, &[queued]), [], "once per stay");
    assert_eq!(
        timers.firing(),
        [("queued-long".to_string(), "a".to_string())]
    );
    // Admitted: it runs now, so it is no longer queued.
    let running = stay("a", TimedState::Running, 9100);
    let mut pass = timers.pass(9200);
    pass.see(&running);
    let changes = pass.end();
    assert_eq!(changes.len(), 1);
    assert!(!changes[0].firing);
    assert_eq!(
        changes[0].summary,
        "ml/a is no longer queued on east (after 2h 16m)"
    );
    assert_eq!(timers.firing_count(), 0);
    // Requeued later: a new stay, its own firing.
    let again = stay("a", TimedState::Queued, 20_000);
    assert_eq!(
        judge(&mut timers, 23_600, &[again]),
        [("a".to_string(), true)]
    );
}

#[test]
fn a_job_that_moves_on_in_time_never_fires() {
    let mut timers = Timers::default();
    timers.set_timers(vec![timer("pending-long", TimedState::Pending, 60)]);
    assert_eq!(
        judge(&mut timers, 159, &[stay("a", TimedState::Pending, 100)]),
        []
    );
    assert_eq!(
        judge(&mut timers, 170, &[stay("a", TimedState::Running, 165)]),
        []
    );
    assert_eq!(judge(&mut timers, 10_000, &[]), []);
}

#[test]
fn a_deleted_job_resolves_its_timer() {
    let mut timers = Timers::default();
    timers.set_timers(vec![timer("running-long", TimedState::Running, 10)]);
    assert_eq!(
        judge(&mut timers, 100, &[stay("a", TimedState::Running, 1)]),
        [("a".to_string(), true)]
    );
    assert_eq!(judge(&mut timers, 101, &[]), [("a".to_string(), false)]);
}

/// A process that starts again finds the same long stay and fires it again: what keeps it from
/// the plugins is the lanes' memory of the subject, so the change must name the same subject
/// (timer, cluster, uid) and the same `since`.
#[test]
fn a_new_process_judges_the_same_stay_the_same_way() {
    let t = vec![timer("queued-long", TimedState::Queued, 60)];
    let s = stay("a", TimedState::Queued, 1000);
    let first = {
        let mut timers = Timers::default();
        timers.set_timers(t.clone());
        let mut pass = timers.pass(2000);
        pass.see(&s);
        pass.end()
    };
    let again = {
        let mut timers = Timers::default();
        timers.set_timers(t);
        let mut pass = timers.pass(2500);
        pass.see(&s);
        pass.end()
    };
    assert_eq!(
        (
            &first[0].timer,
            &first[0].cluster,
            &first[0].uid,
            first[0].since
        ),
        (
            &again[0].timer,
            &again[0].cluster,
            &again[0].uid,
            again[0].since
        )
    );
}

#[test]
fn timers_cover_only_their_clusters_namespaces_and_kinds() {
    let mut scoped = timer("gpu-pending", TimedState::Pending, 10);
    scoped.clusters = vec!["gpu-*".to_string()];
    scoped.namespaces = vec!["ml".to_string()];
    scoped.kinds = vec!["pytorch-job".to_string()];
    let mut timers = Timers::default();
    timers.set_timers(vec![scoped]);
    let mut on_gpu = stay("a", TimedState::Pending, 1);
    on_gpu.job.cluster = "gpu-east";
    let mut other_ns = on_gpu;
    other_ns.job.uid = uid("b");
    other_ns.job.namespace = "web";
    let mut other_kind = on_gpu;
    other_kind.job.uid = uid("c");
    other_kind.job.kind = "batch-job";
    let mut other_cluster = on_gpu;
    other_cluster.job.uid = uid("d");
    other_cluster.job.cluster = "cpu-west";
    assert_eq!(
        judge(
            &mut timers,
            100,
            &[on_gpu, other_ns, other_kind, other_cluster]
        ),
        [("a".to_string(), true)]
    );
}

/// A changed main file: an unchanged timer keeps what it fires on (no second firing), a
/// removed one lets its firings go.
#[test]
fn an_unchanged_timer_keeps_its_firings_across_a_reload() {
    let keep = timer("keep", TimedState::Running, 10);
    let drop = timer("drop", TimedState::Running, 10);
    let mut timers = Timers::default();
    timers.set_timers(vec![drop.clone(), keep.clone()]);
    let s = stay("a", TimedState::Running, 1);
    assert_eq!(judge(&mut timers, 100, &[s]).len(), 2);
    timers.set_timers(vec![keep]);
    assert_eq!(timers.firing(), [("keep".to_string(), "a".to_string())]);
    assert_eq!(judge(&mut timers, 200, &[s]), [], "no second firing");
}

/// Memory is the firing timers alone: of 10,000 jobs under a timer, the 10 that stayed long.
#[test]
fn only_firing_timers_are_held() {
    let mut timers = Timers::default();
    timers.set_timers(vec![timer("pending-long", TimedState::Pending, 600)]);
    let uids: Vec<String> = (0..10_000).map(|i| format!("job-{i}")).collect();
    let mut pass = timers.pass(10_000);
    for (i, uid) in uids.iter().enumerate() {
        let since = if i % 1000 == 0 { 1 } else { 9_999 };
        pass.see(&stay(uid, TimedState::Pending, since));
    }
    assert_eq!(pass.end().len(), 10);
    assert_eq!(timers.firing_count(), 10);
}

/// Seeded random walks of jobs between states and evaluations: every resolution follows a
/// firing of the same timer and job, no firing repeats while it stands, and a timer fires
/// exactly when the job's stay reached its `longer_than` at an evaluation.
#[test]
fn random_walks_fire_and_resolve_in_turn() {
    let states = [TimedState::Pending, TimedState::Queued, TimedState::Running];
    for seed in 1..=200u64 {
        let mut rng = seed;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut timers = Timers::default();
        timers.set_timers(vec![
            timer("p", TimedState::Pending, 30),
            timer("q", TimedState::Queued, 50),
        ]);
        let uids = ["a", "b", "c"];
        // Per job: its state (None: finished or gone) and since.
        let mut jobs: Vec<(Option<TimedState>, Secs)> = vec![(None, 0); uids.len()];
        let mut open: HashSet<(String, String)> = HashSet::new();
        let mut now: Secs = 1000;
        for _ in 0..60 {
            now += 1 + next(20) as Secs;
            for job in jobs.iter_mut() {
                if next(4) == 0 {
                    let pick = next(4);
                    let state = (pick < 3).then(|| states[pick as usize]);
                    if state != job.0 {
                        *job = (state, now - next(5) as Secs);
                    }
                }
            }
            let stays: Vec<Stay<'_>> = jobs
                .iter()
                .zip(uids)
                .filter_map(|((state, since), uid)| Some(stay(uid, (*state)?, *since)))
                .collect();
            let mut pass = timers.pass(now);
            for s in &stays {
                pass.see(s);
            }
            for change in pass.end() {
                let key = (change.timer.clone(), change.uid.clone());
                if change.firing {
                    assert!(open.insert(key), "seed {seed}: fired twice");
                } else {
                    assert!(open.remove(&key), "seed {seed}: resolved without a firing");
                }
            }
            // What stands is exactly the long stays of this evaluation.
            let mut want: Vec<(String, String)> = Vec::new();
            for ((state, since), uid) in jobs.iter().zip(uids) {
                for t in timers.timers() {
                    let Measure::Stay {
                        state: timed,
                        longer_than,
                    } = t.measure
                    else {
                        continue;
                    };
                    if *state == Some(timed) && now - since >= longer_than {
                        want.push((t.name.clone(), uid.to_string()));
                    }
                }
            }
            want.sort();
            assert_eq!(timers.firing(), want, "seed {seed} at {now}");
        }
    }
}

#[test]
fn stays_read_as_people_say_them() {
    assert_eq!(words(40), "40s");
    assert_eq!(words(185), "3m 5s");
    assert_eq!(words(7800), "2h 10m");
    assert_eq!(words(7200), "2h");
    assert_eq!(words(86_400 * 2 + 3600 * 4 + 5), "2d 4h");
}

/// The counts per timer, and a generation that moves only when the firings do — what the job
/// view's marks are rewritten on.
#[test]
fn counts_and_generation_follow_the_firings() {
    let mut timers = Timers::default();
    timers.set_timers(vec![
        timer("p", TimedState::Pending, 10),
        timer("r", TimedState::Running, 10),
    ]);
    let start = timers.generation();
    judge(
        &mut timers,
        100,
        &[
            stay("a", TimedState::Pending, 1),
            stay("b", TimedState::Pending, 1),
        ],
    );
    assert_eq!(
        timers.counts(),
        [("p".to_string(), 2), ("r".to_string(), 0)]
    );
    let fired = timers.generation();
    assert_ne!(fired, start);
    judge(
        &mut timers,
        115,
        &[
            stay("a", TimedState::Pending, 1),
            stay("b", TimedState::Pending, 1),
        ],
    );
    assert_eq!(timers.generation(), fired, "nothing changed");
    judge(&mut timers, 130, &[stay("a", TimedState::Pending, 1)]);
    assert_ne!(timers.generation(), fired, "b resolved");
    let resolved = timers.generation();
    timers.forget_firings();
    assert_ne!(timers.generation(), resolved);
    assert_eq!(
        timers.counts(),
        [("p".to_string(), 0), ("r".to_string(), 0)]
    );
}

fn counting(name: &str, counted: Counted, more_than: u32, within: u32) -> Timer {
    Timer {
        measure: Measure::Count {
            counted,
            more_than,
            within,
        },
        ..timer(name, TimedState::Pending, 1)
    }
}

/// Timers of one counting `timer`, with nothing stored yet.
fn counting_timers(timer: Timer) -> Timers {
    let mut timers = Timers::default();
    timers.set_timers(vec![timer]);
    timers.load_counts(Vec::new());
    timers
}

fn restart(at: Secs) -> Transition {
    Transition {
        at,
        phase: Phase::Restarting,
        synthetic: false,
    }
}

fn running(at: Secs) -> Transition {
    Transition {
        phase: Phase::Running,
        ..restart(at)
    }
}

fn tally<'a>(name: &'a str, preemptions: u32, at: Secs, history: &'a [Transition]) -> Tally<'a> {
    Tally {
        job: stay(name, TimedState::Pending, 0).job,
        created: 100,
        preemptions,
        preempted_at: at,
        history,
    }
}

/// One pass over `tallies`, storing what it left unsaved as the daemon does (unless `store`
/// is `None`: the store is down): the changes as `(uid, firing, value)`.
fn count_pass(
    timers: &mut Timers,
    now: Secs,
    tallies: &[Tally<'_>],
    store: Option<&mut HashMap<String, String>>,
) -> Vec<(String, bool, u32)> {
    let mut pass = timers.pass(now);
    for t in tallies {
        pass.tally(t);
    }
    let changes = pass
        .end()
        .into_iter()
        .map(|c| (c.uid, c.firing, c.value))
        .collect();
    if let Some(store) = store {
        let unsaved = timers.unsaved_counts();
        for entry in &unsaved {
            store.insert(entry.key.clone(), entry.text.clone());
        }
        timers.counts_saved(&unsaved);
    }
    changes
}

#[test]
fn a_job_preempted_too_often_fires_on_stored_times_and_resolves_as_they_age() {
    let mut timers = Timers::default();
    timers.set_timers(vec![counting("often", Counted::Preempted, 2, 3600)]);
    assert!(timers.needs_counts());
    let mut store = HashMap::new();
    // Not judged before the store was read.
    assert_eq!(
        count_pass(&mut timers, 1000, &[tally("a", 3, 990, &[])], None),
        []
    );
    timers.load_counts(Vec::new());
    assert_eq!(
        count_pass(
            &mut timers,
            1000,
            &[tally("a", 1, 990, &[])],
            Some(&mut store)
        ),
        []
    );
    assert_eq!(
        count_pass(
            &mut timers,
            1100,
            &[tally("a", 2, 1090, &[])],
            Some(&mut store)
        ),
        []
    );
    // The third: judged more than 2, but its time is not stored yet (the store is down).
    assert_eq!(
        count_pass(&mut timers, 1200, &[tally("a", 3, 1190, &[])], None),
        []
    );
    // Stored now: fires, with how many the window holds.
    assert_eq!(
        count_pass(
            &mut timers,
            1300,
            &[tally("a", 3, 1190, &[])],
            Some(&mut store)
        ),
        []
    );
    assert_eq!(
        count_pass(
            &mut timers,
            1400,
            &[tally("a", 3, 1190, &[])],
            Some(&mut store)
        ),
        [("a".to_string(), true, 3)]
    );
    assert_eq!(
        store.get("preempted/east/a").map(String::as_str),
        Some("3;990,1090,1190")
    );
    // A process started after a kill reads the store and fires the same (the lanes keep the
    // repeat from plugins), then resolves when the first leaves the window.
    let mut again = Timers::default();
    again.set_timers(vec![counting("often", Counted::Preempted, 2, 3600)]);
    again.load_counts(store.clone().into_iter().collect());
    // Its view found the job old: the count from its first story, no eviction time.
    assert_eq!(
        count_pass(&mut again, 1500, &[tally("a", 3, 0, &[])], Some(&mut store)),
        [("a".to_string(), true, 3)]
    );
    assert_eq!(
        count_pass(&mut again, 4589, &[tally("a", 3, 0, &[])], Some(&mut store)),
        []
    );
    assert_eq!(
        count_pass(&mut again, 4591, &[tally("a", 3, 0, &[])], Some(&mut store)),
        [("a".to_string(), false, 2)]
    );
    // The live process resolves alike.
    assert_eq!(
        count_pass(
            &mut timers,
            4591,
            &[tally("a", 3, 1190, &[])],
            Some(&mut store)
        ),
        [("a".to_string(), false, 2)]
    );
}

#[test]
fn restarts_are_counted_once_across_a_restart_of_the_process() {
    let mut timers = counting_timers(counting("flaps", Counted::Restarted, 2, 600));
    let mut store = HashMap::new();
    let history = [
        running(10),
        restart(20),
        running(25),
        restart(30),
        running(35),
    ];
    assert_eq!(
        count_pass(
            &mut timers,
            40,
            &[tally("a", 0, 0, &history)],
            Some(&mut store)
        ),
        []
    );
    // A new process sees only what happened since it began: the one at 30, then one more.
    let mut again = Timers::default();
    again.set_timers(vec![counting("flaps", Counted::Restarted, 2, 600)]);
    again.load_counts(store.clone().into_iter().collect());
    let since_start = [restart(30), running(35)];
    assert_eq!(
        count_pass(
            &mut again,
            50,
            &[tally("a", 0, 0, &since_start)],
            Some(&mut store)
        ),
        []
    );
    let more = [restart(30), running(35), restart(60)];
    assert_eq!(
        count_pass(&mut again, 70, &[tally("a", 0, 0, &more)], Some(&mut store)),
        []
    );
    assert_eq!(
        count_pass(&mut again, 80, &[tally("a", 0, 0, &more)], Some(&mut store)),
        [("a".to_string(), true, 3)]
    );
    // Finished (no tally any more): resolved; its times are let go once no window holds them.
    assert_eq!(
        count_pass(&mut again, 90, &[], Some(&mut store)),
        [("a".to_string(), false, 3)]
    );
    assert_eq!(again.counted_jobs(), 1);
    count_pass(&mut again, 660, &[], Some(&mut store));
    assert_eq!(again.counted_jobs(), 0);
}

/// A process just started has the store's times before its view lists the job: they are kept
/// through passes that do not see it, and the next restart adds to them.
#[test]
fn stored_times_wait_for_the_view_to_list_their_job() {
    let mut timers = Timers::default();
    timers.set_timers(vec![counting("flaps", Counted::Restarted, 1, 600)]);
    timers.load_counts(vec![("restarted/east/a".to_string(), "0;20".to_string())]);
    let mut store = HashMap::new();
    assert_eq!(count_pass(&mut timers, 30, &[], Some(&mut store)), []);
    assert_eq!(timers.counted_jobs(), 1);
    let history = [restart(40)];
    count_pass(
        &mut timers,
        50,
        &[tally("a", 0, 0, &history)],
        Some(&mut store),
    );
    assert_eq!(
        store.get("restarted/east/a").map(String::as_str),
        Some("0;20,40")
    );
    assert_eq!(
        count_pass(
            &mut timers,
            60,
            &[tally("a", 0, 0, &history)],
            Some(&mut store)
        ),
        [("a".to_string(), true, 2)]
    );
}

/// Memory: only jobs with a counted time in the window hold an entry, of at most
/// `more_than` + 1 times.
#[test]
fn only_jobs_with_counted_times_in_the_window_are_held() {
    let mut timers = counting_timers(counting("often", Counted::Preempted, 3, 3600));
    let uids: Vec<String> = (0..10_000).map(|i| format!("job-{i}")).collect();
    let mut pass = timers.pass(100_000);
    for (i, name) in uids.iter().enumerate() {
        // Most never preempted; some long ago; one in a hundred within the hour, many times.
        let (n, at) = match i % 100 {
            0 => (50, 99_000),
            1..=9 => (2, 1_000),
            _ => (0, 0),
        };
        pass.tally(&Tally {
            job: JobKey {
                uid: uid(name),
                ..stay("x", TimedState::Pending, 0).job
            },
            created: 10,
            preemptions: n,
            preempted_at: at,
            history: &[],
        });
    }
    pass.end();
    assert_eq!(timers.counted_jobs(), 100);
    assert!(
        timers
            .unsaved_counts()
            .iter()
            .all(|c| c.text.split(',').count() <= 4)
    );
}

/// Seeded lives of preemptions with the process killed between passes (a fresh state reading
/// the store): what stands after each pass is what the live process would have, counted from
/// the true times, whenever every preemption was seen by some pass.
#[test]
fn counting_timers_fire_and_resolve_alike_across_kills() {
    for seed in 1..=300u64 {
        let mut rng = seed;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let set = vec![
            counting("two", Counted::Preempted, 2, 300),
            counting("four", Counted::Preempted, 4, 900),
        ];
        let mut timers = Timers::default();
        timers.set_timers(set.clone());
        timers.load_counts(Vec::new());
        let mut store: HashMap<String, String> = HashMap::new();
        let mut truth: Vec<Secs> = Vec::new();
        let mut now: Secs = 1000;
        for _ in 0..80 {
            now += 1 + next(60) as Secs;
            // At most one preemption between passes, so each is seen alone.
            if next(3) == 0 {
                truth.push(now - next(2) as Secs);
            }
            if next(10) == 0 {
                timers = Timers::default();
                timers.set_timers(set.clone());
                timers.load_counts(store.clone().into_iter().collect());
            }
            let t = tally(
                "a",
                truth.len() as u32,
                truth.last().copied().unwrap_or(0),
                &[],
            );
            // Two passes: the first stores, the second may fire on what was stored.
            for _ in 0..2 {
                count_pass(&mut timers, now, &[t], Some(&mut store));
            }
            let mut want: Vec<(String, String)> = Vec::new();
            for timer in &set {
                let Measure::Count {
                    more_than, within, ..
                } = timer.measure
                else {
                    continue;
                };
                let n = truth.iter().filter(|t| **t > now - within).count() as u32;
                if n > more_than {
                    want.push((timer.name.clone(), "a".to_string()));
                }
            }
            want.sort();
            assert_eq!(timers.firing(), want, "seed {seed} at {now}: {truth:?}");
        }
    }
}
