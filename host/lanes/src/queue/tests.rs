//! The queue state machine under arbitrary interleavings of offers, replays, worker steps,
//! cut-short calls and clusters let go, checked against a model of the lane's workers — with
//! a memory budget that keeps none, a few or all of the events whole, the rest read back from
//! a model of the inbox.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::budget::charge_of;

const JOBS: usize = 4;

fn key(job: usize) -> JobKey {
    JobKey {
        cluster: format!("c{}", job / 2),
        uid: format!("u{}", job % 2),
    }
}

fn event(job: usize, rv: &str, phase: Phase) -> JobEvent {
    let key = key(job);
    JobEvent {
        id: JobEvent::make_id(&key.cluster, &key.uid, rv),
        cluster: key.cluster,
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        namespace: "ns".into(),
        name: format!("job-{job}"),
        uid: key.uid,
        resource_version: rv.to_string(),
        generation: None,
        phase,
        raw_phase: String::new(),
        reason: None,
        message: None,
        previous_phase: None,
        transition_time: "2026-01-01T00:00:00Z".into(),
        labels: Default::default(),
        annotations: Default::default(),
        object_json: Arc::from("{}"),
        transition_key: String::new(),
        synthetic: false,
        story: None,
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// A new version of the job, or (`again`) the last one once more (a re-list).
    Offer {
        job: usize,
        phase: Phase,
        again: bool,
    },
    /// An operator's replay of a dead letter.
    Replay { job: usize },
    /// The job's worker takes its next step; `cut`: the call in flight is cut short.
    Step { job: usize, cut: bool },
    /// The lane lets go of a cluster.
    LetGo { cluster: usize },
}

/// Offers `event` in `every-version` mode with room for 10 and no gap to catch up.
fn offer_plain(q: &mut Queues, event: JobEvent, now: Instant) -> Offered {
    offer_logged(q, event, now).0
}

/// [`offer_plain`], with the changes the offer made to the inbox.
fn offer_logged(q: &mut Queues, event: JobEvent, now: Instant) -> (Offered, InboxLog) {
    let mut log = InboxLog::default();
    let offered = q.offer(
        event,
        (DeliveryMode::EveryVersion, 10, u64::MAX),
        now,
        true,
        &mut log,
        |_, _| Vec::new(),
    );
    (offered, log)
}

fn phase() -> impl Strategy<Value = Phase> {
    prop_oneof![
        3 => Just(Phase::Running),
        2 => Just(Phase::Pending),
        1 => Just(Phase::Succeeded),
        1 => Just(Phase::Failed),
        1 => Just(Phase::Terminating),
        1 => Just(Phase::Deleted),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..JOBS, phase(), prop::bool::weighted(0.2))
            .prop_map(|(job, phase, again)| Op::Offer { job, phase, again }),
        1 => (0..JOBS).prop_map(|job| Op::Replay { job }),
        8 => (0..JOBS, prop::bool::weighted(0.05)).prop_map(|(job, cut)| Op::Step { job, cut }),
        1 => (0..2usize).prop_map(|cluster| Op::LetGo { cluster }),
    ]
}

fn mode() -> impl Strategy<Value = DeliveryMode> {
    prop_oneof![
        Just(DeliveryMode::EveryVersion),
        Just(DeliveryMode::Transitions),
        Just(DeliveryMode::Terminal),
        Just(DeliveryMode::Latest),
    ]
}

/// One job as the model sees it.
#[derive(Debug, Default)]
struct Model {
    /// A worker holds the job (started for it, or taken it from the ready queue).
    worker: bool,
    /// Claimed while every worker was busy: waiting for one.
    ready: bool,
    /// The event that worker is calling the plugin with.
    in_flight: Option<(JobEvent, bool)>,
    /// The last version offered, to offer again.
    last: Option<JobEvent>,
    /// Versions the mode accepted and the queue took, in order.
    queued: Vec<String>,
    /// Versions set aside over the bound.
    overflow: Vec<String>,
    /// Versions settled as delivered (not replays), with the `previous_phase` they carried,
    /// by epoch: letting go of the cluster forgets the job, and a new epoch starts.
    delivered: Vec<(u32, String, Option<Phase>, Phase)>,
    epoch: u32,
    /// A call was cut short or the cluster let go: queued versions may rightly stay undelivered.
    disturbed: bool,
}

struct Run {
    q: Queues,
    jobs: Vec<Model>,
    mode: DeliveryMode,
    cap: usize,
    next_rv: u64,
    max_workers: usize,
    /// The lane's bound on events waiting (its inbox).
    inbox_cap: u64,
    budget: Arc<MemoryBudget>,
    /// Every event the queues handed over for the inbox, by id.
    inbox: BTreeMap<String, JobEvent>,
}

impl Run {
    /// `room`: how many events the budget keeps whole (`None`: no limit).
    fn new(
        mode: DeliveryMode,
        cap: usize,
        (inbox_cap, max_workers): (u64, usize),
        room: Option<u64>,
    ) -> Run {
        let budget = match room {
            Some(events) => {
                MemoryBudget::new(2 * events * charge_of(&event(0, "100", Phase::Running)))
            }
            None => MemoryBudget::unbounded(),
        };
        let mut q = Queues::within(budget.clone(), "p", &[]);
        q.limit_workers(max_workers);
        Run {
            q,
            max_workers,
            jobs: (0..JOBS).map(|_| Model::default()).collect(),
            mode,
            cap,
            next_rv: 1,
            inbox_cap,
            budget,
            inbox: BTreeMap::new(),
        }
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Offer { job, phase, again } => {
                let event = match (&self.jobs[job].last, again) {
                    (Some(last), true) => last.clone(),
                    _ => {
                        self.next_rv += 1;
                        event(job, &self.next_rv.to_string(), phase)
                    }
                };
                let before = self.q.job(&key(job)).map(|j| j.accepted.clone());
                let mut log = InboxLog::default();
                let offered = self.q.offer(
                    event.clone(),
                    (self.mode, self.cap, self.inbox_cap),
                    Instant::now(),
                    true,
                    &mut log,
                    |_, _| Vec::new(),
                );
                prop_assert_eq!(
                    log.taken.len(),
                    offered.queued,
                    "every version queued is taken"
                );
                for (taken, charge) in &log.taken {
                    prop_assert_eq!(*charge, charge_of(taken));
                    self.inbox.insert(taken.id.clone(), (**taken).clone());
                }
                // The lane notes a job it did not know from this sight of the event.
                prop_assert_eq!(
                    offered
                        .first_sight
                        .as_ref()
                        .map(|c| c.resource_version.clone()),
                    before.is_none().then(|| event.resource_version.clone())
                );
                let after = &self.q.job(&key(job)).expect("an offered job").accepted;
                let model = &mut self.jobs[job];
                let accepted = before.as_ref() != Some(after)
                    && after.resource_version.as_deref() == Some(event.resource_version.as_str());
                if offered.overflow.is_empty() {
                    if accepted {
                        model.queued.push(event.resource_version.clone());
                    }
                } else {
                    prop_assert!(accepted, "only an accepted version is set aside");
                    model.overflow.push(event.resource_version.clone());
                }
                model.last = Some(event);
                self.claimed(job, offered.start)?;
            }
            Op::Replay { job } => {
                self.next_rv += 1;
                let replay = event(job, &format!("r{}", self.next_rv), Phase::Failed);
                let start = self.q.offer_replay(replay, Instant::now());
                self.claimed(job, start)?;
            }
            Op::Step { job, cut } => self.step(job, cut)?,
            Op::LetGo { cluster } => {
                let name = format!("c{cluster}");
                self.q.drop_waiting(&name);
                for job in (0..JOBS).filter(|j| key(*j).cluster == name) {
                    // A job waiting for a worker had none: it is let go like an idle one.
                    if std::mem::take(&mut self.jobs[job].ready) {
                        prop_assert!(self.q.job(&key(job)).is_none(), "{}: kept", key(job));
                    }
                    // The call in flight ends on its own; a worker that had not called yet
                    // finds the cluster gone and is cut short.
                    if self.jobs[job].in_flight.is_some() {
                        self.step(job, false)?;
                    }
                    if self.jobs[job].worker {
                        match self.q.next(&key(job), false) {
                            Next::Call { event, .. } => self.q.release(&key(job), Some(event)),
                            Next::Fetch { .. } => self.q.release(&key(job), None),
                            Next::Idle | Next::Forgotten | Next::LetGo(_) => {}
                        }
                        self.jobs[job].worker = false;
                        self.worker_done()?;
                    }
                    self.jobs[job].disturbed = true;
                    self.jobs[job].epoch += 1;
                }
                prop_assert!(!self.q.busy_in(&name));
                self.q.forget(&name);
                prop_assert!(self.q.each().all(|(k, _)| k.cluster != name));
            }
        }
        self.check()
    }

    /// After an offer: a worker started for the job (`start`), or the job waits for one, or
    /// nothing changed.
    fn claimed(&mut self, job: usize, start: bool) -> Result<(), TestCaseError> {
        let ready = self.q.job(&key(job)).is_some_and(|j| j.ready);
        let model = &mut self.jobs[job];
        if start {
            prop_assert!(
                !model.worker && !model.ready,
                "a second worker for {:?}",
                key(job)
            );
            prop_assert!(!ready);
            model.worker = true;
        } else if ready && !model.ready {
            prop_assert!(
                !model.worker,
                "{:?} waits for a worker while it has one",
                key(job)
            );
            model.ready = true;
        }
        Ok(())
    }

    /// A worker is done with its job: it takes the next one waiting, if any.
    fn worker_done(&mut self) -> Result<(), TestCaseError> {
        if let Some(next) = self.q.next_job(false) {
            let index = (0..JOBS).find(|j| key(*j) == next).expect("a modelled job");
            let model = &mut self.jobs[index];
            prop_assert!(model.ready && !model.worker, "{} was not waiting", next);
            model.ready = false;
            model.worker = true;
        }
        Ok(())
    }

    fn step(&mut self, job: usize, cut: bool) -> Result<(), TestCaseError> {
        let k = key(job);
        let model = &mut self.jobs[job];
        if !model.worker {
            return Ok(());
        }
        match model.in_flight.take() {
            None => match self.q.next(&k, false) {
                Next::Call { event, replay } => {
                    model.in_flight = Some((Arc::unwrap_or_clone(event), replay))
                }
                Next::Fetch { id } => {
                    let mut event = self.inbox.get(&*id).cloned().ok_or_else(|| {
                        TestCaseError::fail(format!("{id} was never handed over for the inbox"))
                    })?;
                    prop_assert!(self.q.fetched(&k, &mut event), "{}: the job is known", k);
                    model.in_flight = Some((event, false));
                }
                Next::Idle | Next::Forgotten | Next::LetGo(_) => {
                    model.worker = false;
                    if self.q.job(&k).is_none() {
                        // A deleted job is forgotten once idle; a version offered later
                        // (impossible for a real uid) starts afresh, and its deletion, gone
                        // from the API, is never observed again.
                        model.epoch += 1;
                        model.last = None;
                    }
                    self.worker_done()?;
                }
            },
            Some((event, _)) if cut => {
                self.q.release(&k, Some(Arc::new(event)));
                model.worker = false;
                model.disturbed = true;
                self.worker_done()?;
            }
            Some((event, replay)) => {
                let head = self.q.job(&k).and_then(|j| j.queue.front()).map(|i| {
                    (
                        matches!(i.held, Kept::Out { .. }),
                        i.resource_version.to_string(),
                    )
                });
                prop_assert_eq!(
                    head,
                    Some((true, event.resource_version.clone())),
                    "the event in flight left its place at the head before it was settled"
                );
                self.q.pop_head(&k, replay, event.phase);
                if !replay {
                    model.delivered.push((
                        model.epoch,
                        event.resource_version,
                        event.previous_phase,
                        event.phase,
                    ));
                }
            }
        }
        Ok(())
    }

    /// What holds after every step.
    fn check(&self) -> Result<(), TestCaseError> {
        let queued: u64 = self.q.each().map(|(_, j)| j.queue.len() as u64).sum();
        prop_assert_eq!(self.q.pending(), queued, "pending is what the queues hold");
        // So `oldest` may skip the walk when nothing is pending.
        prop_assert_eq!(self.q.oldest().0.is_some(), queued > 0);
        let observed = self
            .q
            .each()
            .flat_map(|(_, j)| j.queue.iter())
            .filter(|i| !i.replay)
            .count();
        prop_assert!(
            observed as u64 <= self.inbox_cap,
            "{observed} waiting over the inbox bound {}",
            self.inbox_cap
        );
        let items = || self.q.each().flat_map(|(_, j)| j.queue.iter());
        let spilled = items().filter(|i| matches!(i.held, Kept::Spilled)).count() as u64;
        prop_assert_eq!(
            self.q.spilled(),
            spilled,
            "spilled is what waits in the inbox"
        );
        prop_assert_eq!(self.budget.spilled(), spilled);
        let charged: u64 = items()
            .map(|i| match &i.held {
                Kept::Here { charge, .. } | Kept::Out { charge, .. } => *charge,
                Kept::Spilled => 0,
            })
            .sum();
        prop_assert_eq!(
            self.q.held_bytes(),
            charged,
            "held is what the kept events charge"
        );
        prop_assert_eq!(
            self.budget.held(),
            charged,
            "the budget holds what the queues charge"
        );
        prop_assert!(
            charged <= self.budget.limit() / 2,
            "{charged} bytes kept whole over half the limit of {}",
            self.budget.limit()
        );
        for (k, job) in self.q.each() {
            let waiting = job.waiting();
            let bound = match self.mode {
                // The newest version, and the older one in flight.
                DeliveryMode::Latest => 2,
                // The end and the deletion.
                DeliveryMode::Terminal => 2.min(self.cap),
                _ => self.cap,
            };
            prop_assert!(
                waiting <= bound,
                "{k}: {waiting} waiting in {:?}, bound {bound}",
                self.mode
            );
            let index = (0..JOBS).find(|j| key(*j) == k).expect("a modelled job");
            let model = &self.jobs[index];
            prop_assert_eq!(job.busy, model.worker || model.ready, "{}: busy", k);
            prop_assert_eq!(job.ready, model.ready, "{}: waiting for a worker", k);
        }
        let workers = self.jobs.iter().filter(|m| m.worker).count();
        prop_assert_eq!(self.q.workers_running(), workers, "workers running");
        prop_assert!(
            workers <= self.max_workers,
            "{workers} workers over {}",
            self.max_workers
        );
        Ok(())
    }

    /// Every worker runs to its end, taking the jobs that wait for one on its way.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        let mut steps = 0;
        while let Some(job) = (0..JOBS).find(|j| self.jobs[*j].worker) {
            self.step(job, false)?;
            steps += 1;
            prop_assert!(steps < 10_000, "a worker never ends");
        }
        prop_assert!(
            self.jobs.iter().all(|m| !m.ready),
            "a job still waits for a worker"
        );
        self.check()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// One worker per job; the head stays queued until settled; `pending` is exact; delivered
    /// versions come in the order they were queued, each once, each carrying the phase of the
    /// one before; and every version the queue took is delivered — for `latest`, at least the
    /// newest — unless a call was cut short or its cluster let go.
    #[test]
    fn queues_deliver_in_order_once_and_lose_nothing(
        mode in mode(),
        cap in 1usize..4,
        inbox_cap in prop_oneof![Just(u64::MAX), 2u64..6],
        max_workers in prop_oneof![Just(MAX_WORKERS), 1usize..3],
        room in prop_oneof![Just(None), (0u64..4).prop_map(Some)],
        ops in prop::collection::vec(op(), 0..120),
    ) {
        let mut run = Run::new(mode, cap, (inbox_cap, max_workers), room);
        for op in &ops {
            run.apply(op)?;
        }
        run.drain()?;
        prop_assert_eq!(run.q.pending(), run.q.each().map(|(_, j)| j.queue.len() as u64).sum::<u64>());
        // A lane's queues dropped give back all they held.
        let budget = run.budget.clone();
        let jobs = std::mem::take(&mut run.jobs);
        drop(std::mem::take(&mut run.q));
        prop_assert_eq!((budget.held(), budget.spilled()), (0, 0), "the budget kept a dropped lane's share");
        run.jobs = jobs;
        for (job, model) in run.jobs.iter().enumerate() {
            let delivered: Vec<&String> = model.delivered.iter().map(|(_, rv, _, _)| rv).collect();
            for pair in model.delivered.windows(2) {
                let ((e0, rv0, _, phase0), (e1, rv1, previous1, _)) = (&pair[0], &pair[1]);
                if e0 != e1 {
                    continue;
                }
                let (a, b): (u64, u64) = (rv0.parse().unwrap_or(0), rv1.parse().unwrap_or(0));
                prop_assert!(a < b, "job {job}: out of order or twice: {delivered:?}");
                prop_assert_eq!(*previous1, Some(*phase0), "job {}: previous_phase", job);
            }
            if model.delivered.first().is_some_and(|(e, _, _, _)| *e == 0) {
                prop_assert_eq!(model.delivered[0].2, None, "job {}: a first delivery has no previous phase", job);
            }
            if model.disturbed {
                continue;
            }
            let done: BTreeSet<&String> = delivered.iter().copied().collect();
            match mode {
                DeliveryMode::Latest => {
                    if let Some(newest) = model.queued.last() {
                        prop_assert!(done.contains(newest), "job {job}: newest {newest} lost; delivered {delivered:?}");
                    }
                }
                _ => {
                    let queued: Vec<&String> = model.queued.iter().collect();
                    prop_assert_eq!(&delivered, &queued, "job {}: queued versions lost", job);
                    let overflow: BTreeSet<&String> = model.overflow.iter().collect();
                    prop_assert!(done.is_disjoint(&overflow), "job {job}: a version over the bound was delivered");
                }
            }
        }
    }
}

/// The lane's own count of a re-list: a job that was known, not listed and not deleted gets
/// one deletion event; a deleted or listed one gets none.
#[test]
fn a_job_missing_from_its_list_gets_one_deletion() {
    let mut q = Queues::default();
    let now = Instant::now();
    for (job, phase) in [(0, Phase::Running), (1, Phase::Deleted)] {
        offer_plain(&mut q, event(job, "5", phase), now);
    }
    let kind = jobrelay_watch::kinds::JobKind::builtin("batch-job").expect("a built-in kind");
    let listed = |uids: &[&str]| Listed {
        cluster: "c0".into(),
        namespace: None,
        uids: Arc::new(uids.iter().map(|u| Uid::new(u)).collect()),
        kind: Arc::new(kind.clone()),
    };
    let gone = q.gone(&listed(&[]));
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert_eq!(gone[0].uid, "u0");
    assert_eq!(gone[0].phase, Phase::Deleted);
    assert_eq!(gone[0].resource_version, "5-gone");
    assert!(q.gone(&listed(&["u0"])).is_empty());
}

/// What a lane keeps per job is small, shared where it can be, and gives back exactly what
/// came in: a canonical uid is kept as 16 bytes and returns as the same text in a `gone`
/// deletion; jobs of one kind and namespace share one origin, let go with the last of them;
/// an idle job holds no queue buffer.
#[test]
fn a_tracked_job_is_a_small_record_that_gives_back_its_fields() {
    let uids = [
        "6f1c2a9e-0b7d-4c3e-9a51-2d8e4f6a7b90",
        "6f1c2a9e-0b7d-4c3e-9a51-2d8e4f6a7b91",
    ];
    let mut q = Queues::default();
    let now = Instant::now();
    for (job, uid) in uids.iter().enumerate() {
        let mut version = event(0, "7", Phase::Running);
        version.uid = uid.to_string();
        version.name = format!("train-{job}");
        let key = version.job_key();
        let offered = offer_plain(&mut q, version, now);
        assert!(offered.first_sight.is_some() && offered.start);
        let Next::Call { event, .. } = q.next(&key, false) else {
            panic!("the job's version is not called");
        };
        q.pop_head(&key, false, event.phase);
        assert!(matches!(q.next(&key, false), Next::Idle));
        assert!(
            q.job(&key).expect("tracked").queue.0.is_none(),
            "an idle job kept its queue"
        );
    }
    let origins: Vec<&Arc<Origin>> = q.each().map(|(_, job)| &job.origin).collect();
    assert!(
        Arc::ptr_eq(origins[0], origins[1]),
        "two jobs of one kind and namespace"
    );
    assert_eq!(q.origins.len(), 1);

    let kind = jobrelay_watch::kinds::JobKind::builtin("batch-job").expect("a built-in kind");
    let listed = Listed {
        cluster: "c0".into(),
        namespace: Some("ns".into()),
        uids: Arc::new(HashSet::from([Uid::new(uids[1])])),
        kind: Arc::new(kind),
    };
    let gone = q.gone(&listed);
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert_eq!(gone[0].uid, uids[0]);
    assert_eq!(gone[0].name, "train-0");
    assert_eq!(
        (gone[0].namespace.as_str(), gone[0].kind.as_str()),
        ("ns", "Job")
    );
    assert_eq!(gone[0].resource_version, "7-gone");

    q.forget("c0");
    assert_eq!(q.jobs(), 0);
    assert!(q.origins.is_empty(), "an origin outlived its jobs");
    assert!(std::mem::size_of::<(Uid, JobState)>() <= 128);
}

/// A deleted job is forgotten once delivered, and so is its origin when it was the last job
/// with it: a fleet whose namespaces come and go does not leave one behind per namespace.
#[test]
fn the_last_deleted_job_of_a_namespace_takes_its_origin_with_it() {
    let mut q = Queues::default();
    let now = Instant::now();
    for (rv, phase) in [("1", Phase::Running), ("2", Phase::Deleted)] {
        let mut version = event(0, rv, phase);
        version.namespace = "pr-1234".into();
        offer_plain(&mut q, version, now);
    }
    let key = key(0);
    while let Next::Call { event, .. } = q.next(&key, false) {
        q.pop_head(&key, false, event.phase);
    }
    assert_eq!(q.jobs(), 0, "the deleted job is forgotten");
    assert!(q.origins.is_empty(), "its namespace's origin stayed");
}

/// The event being delivered is out of the queue (its worker owns it), yet the same version
/// seen again, after a later one was accepted, is still a duplicate; given back, it is the
/// one called again.
#[test]
fn a_version_out_for_its_call_is_still_known() {
    let mut q = Queues::default();
    let now = Instant::now();
    let offer = |q: &mut Queues, rv: &str| offer_plain(q, event(0, rv, Phase::Running), now);
    assert!(offer(&mut q, "1").start);
    let key = key(0);
    let Next::Call { event: out, .. } = q.next(&key, false) else {
        panic!("the version is not called");
    };
    assert_eq!(out.resource_version, "1");
    assert_eq!(offer(&mut q, "2").skipped, 0);
    let again = offer(&mut q, "1");
    assert_eq!(
        again.skipped, 1,
        "the version out for its call was queued again"
    );
    assert_eq!(q.pending(), 2);

    q.release(&key, Some(out));
    let Next::Call { event: called, .. } = q.next(&key, false) else {
        panic!("the given-back version is not called again");
    };
    assert_eq!(called.resource_version, "1");
    q.pop_head(&key, false, called.phase);
    let Next::Call { event: next, .. } = q.next(&key, false) else {
        panic!("the next version is not called");
    };
    assert_eq!(next.resource_version, "2");
}

/// A head the plugin deferred waits on purpose: the lane's oldest waiting event is then the
/// next job's, and the deferred job is counted apart — until its next attempt, or its end.
#[test]
fn a_deferred_head_is_not_the_lanes_lag() {
    let mut q = Queues::default();
    let early = Instant::now();
    let later = early + std::time::Duration::from_secs(30);
    assert!(offer_plain(&mut q, event(0, "1", Phase::Running), early).start);
    assert!(offer_plain(&mut q, event(1, "1", Phase::Running), later).start);
    assert_eq!(q.oldest(), (Some(early), 0));
    q.set_deferred(&key(0), true);
    assert_eq!(q.oldest(), (Some(later), 1), "the deferred job is left out");
    q.set_deferred(&key(0), false);
    assert_eq!(
        q.oldest(),
        (Some(early), 0),
        "its next attempt is lag again"
    );
    q.set_deferred(&key(0), true);
    let Next::Call { event: out, .. } = q.next(&key(0), false) else {
        panic!("the version is not called");
    };
    q.pop_head(&key(0), false, out.phase);
    q.set_deferred(&key(1), true);
    assert_eq!(
        q.oldest(),
        (None, 1),
        "settled, the first job counts no more"
    );
}

/// The lane's writer shares each taken event until its cursor settles it, and a shared event
/// must be copied to be changed: the `previous_phase` a call carries is set when the version
/// is queued, so a version is called as it was taken, uncopied — and still with the phase
/// delivered before it, also when a version between them was replaced.
#[test]
fn a_taken_version_is_called_uncopied_with_the_phase_delivered_before_it() {
    let mut q = Queues::default();
    let now = Instant::now();
    let mut taken = Vec::new();
    for (rv, phase) in [
        ("1", Phase::Pending),
        ("2", Phase::Running),
        ("3", Phase::Failed),
    ] {
        taken.extend(offer_logged(&mut q, event(0, rv, phase), now).1.taken);
    }
    assert_eq!(taken.len(), 3);
    let key = key(0);
    let mut previous = None;
    for (shared, _) in &taken {
        let Next::Call { event, .. } = q.next(&key, false) else {
            panic!("version {} is not called", shared.resource_version);
        };
        assert!(
            Arc::ptr_eq(&event, shared),
            "version {} was copied for its call",
            event.resource_version
        );
        assert_eq!(event.previous_phase, previous);
        previous = Some(event.phase);
        q.pop_head(&key, false, event.phase);
    }

    // In `latest` mode a newer version replaces one queued behind the call in flight: the
    // phase it expected is not the one delivered before it, and it is copied to carry that.
    let latest = |q: &mut Queues, rv: &str, phase| {
        let mut log = InboxLog::default();
        q.offer(
            event(1, rv, phase),
            (DeliveryMode::Latest, 10, u64::MAX),
            now,
            true,
            &mut log,
            |_, _| Vec::new(),
        );
        log
    };
    let key = self::key(1);
    latest(&mut q, "1", Phase::Pending);
    let Next::Call { event: first, .. } = q.next(&key, false) else {
        panic!("the first version is not called");
    };
    latest(&mut q, "2", Phase::Running);
    let replacing = latest(&mut q, "3", Phase::Succeeded).taken;
    q.pop_head(&key, false, first.phase);
    let Next::Call { event: last, .. } = q.next(&key, false) else {
        panic!("the newest version is not called");
    };
    assert_eq!(last.resource_version, "3");
    assert_eq!(last.previous_phase, Some(Phase::Pending));
    assert!(!Arc::ptr_eq(&last, &replacing[0].0));
    q.pop_head(&key, false, last.phase);

    // With no call running, the replacing version follows what was delivered, and is called
    // as it was taken.
    latest(&mut q, "4", Phase::Running);
    let replacing = latest(&mut q, "5", Phase::Failed).taken;
    let Next::Call { event: last, .. } = q.next(&key, false) else {
        panic!("the newest version is not called");
    };
    assert_eq!(last.resource_version, "5");
    assert_eq!(last.previous_phase, Some(Phase::Succeeded));
    assert!(
        Arc::ptr_eq(&last, &replacing[0].0),
        "a version replacing one that waited was copied for its call"
    );
}

/// Past the budget an event waits as its place alone, read back by the id its job and
/// version give; one whose id is not that (written by hand, by an older build) could not be
/// read back by it, so it is kept whole whatever the budget, and both come out in order.
#[test]
fn an_event_whose_id_cannot_be_made_again_is_kept_whole_past_the_budget() {
    let budget = MemoryBudget::new(1);
    let mut q = Queues::within(budget.clone(), "p", &[]);
    let now = Instant::now();
    let key = key(0);
    assert!(offer_plain(&mut q, event(0, "1", Phase::Running), now).start);
    let mut foreign = event(0, "2", Phase::Succeeded);
    foreign.id = "written-by-hand".into();
    let charge = charge_of(&foreign);
    offer_plain(&mut q, foreign, now);
    assert_eq!(
        (q.pending(), q.spilled()),
        (2, 1),
        "the first spilled, the second kept"
    );
    assert!(budget.held() >= charge, "the kept event is charged");

    let Next::Fetch { id } = q.next(&key, false) else {
        panic!("the spilled head is not read back");
    };
    assert_eq!(id, JobEvent::make_id(&key.cluster, &key.uid, "1"));
    q.pop_head(&key, false, Phase::Running);
    let Next::Call { event: kept, .. } = q.next(&key, false) else {
        panic!("the kept event is not called");
    };
    assert_eq!(kept.id, "written-by-hand");
    q.pop_head(&key, false, kept.phase);
    assert_eq!(budget.held(), 0, "everything given back");
}
