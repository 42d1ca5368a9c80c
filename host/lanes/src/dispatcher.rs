//! The dispatcher: takes observations from every watcher, in observation order, and offers
//! each to the lanes of the plugins that want its kind and whose filter takes it.

use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::mpsc;

use super::budget::MemoryBudget;
use super::event_counts::{Count, Counts, EventCounts};
use super::filter::Verdict;
use super::finalizer_book::{FinalizerBook, HeldJob};
use super::lane::{Lane, Observed};
use super::recent::RecentEvents;
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_fleet::cleanup::Schedule;
use jobrelay_fleet::jobs::JobView;
use jobrelay_watch::finalizer::has_finalizer;
use jobrelay_watch::watcher::{Observation, Sink};

/// The lanes by plugin name, and the finalizer holds they report to.
#[derive(Clone)]
pub struct Routes {
    inner: Arc<RwLock<BTreeMap<String, Lane>>>,
    finalizers: Option<(Arc<FinalizerBook>, String)>,
    recent: RecentEvents,
    observed: Arc<EventCounts>,
    /// Off while this replica follows a leader: observations are counted and shown, but no
    /// lane gets them.
    delivering: Arc<AtomicBool>,
    /// What the lanes keep of events in memory, all together; the intake waits while it is
    /// over its limit.
    budget: Arc<MemoryBudget>,
    /// The finished jobs `cleanup:` deletes, fed with every observation delivered here.
    cleanup: Option<Arc<Schedule>>,
    /// The fleet's job view, fed with every observation, delivered here or not.
    view: Option<Arc<JobView>>,
    /// Clusters judged offline, told to every lane (one opened later too).
    offline: Arc<RwLock<std::collections::BTreeSet<String>>>,
}

impl Default for Routes {
    /// Routes without finalizer holds, delivering.
    fn default() -> Routes {
        Routes {
            inner: Arc::default(),
            finalizers: None,
            recent: RecentEvents::default(),
            observed: Arc::default(),
            delivering: Arc::new(AtomicBool::new(true)),
            budget: MemoryBudget::unbounded(),
            cleanup: None,
            view: None,
            offline: Arc::default(),
        }
    }
}

impl Routes {
    /// Routes that hold deletions of finalizer kinds in `book` (finalizer `name`).
    pub fn with_finalizers(book: Arc<FinalizerBook>, name: String) -> Routes {
        Routes {
            finalizers: Some((book, name)),
            ..Routes::default()
        }
    }

    /// The same routes with `budget` as the bound on the events the lanes keep in memory
    /// (lanes opened for them share it; see [`Routes::budget`]).
    pub fn within(self, budget: Arc<MemoryBudget>) -> Routes {
        Routes { budget, ..self }
    }

    /// The same routes feeding `schedule` with what they deliver (see [`crate::cleanup`]).
    pub fn cleaning(self, schedule: Arc<Schedule>) -> Routes {
        Routes {
            cleanup: Some(schedule),
            ..self
        }
    }

    /// The same routes keeping `view` up to date with every observation (see
    /// [`jobrelay_fleet::jobs`]).
    pub fn viewing(self, view: Arc<JobView>) -> Routes {
        Routes {
            view: Some(view),
            ..self
        }
    }

    /// The job view, when there is one.
    pub fn view(&self) -> Option<&Arc<JobView>> {
        self.view.as_ref()
    }

    /// The clean-up schedule, when there is one.
    pub fn cleanup(&self) -> Option<&Arc<Schedule>> {
        self.cleanup.as_ref()
    }

    /// The process-wide budget of events kept in memory.
    pub fn budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }

    /// Whether observations reach the lanes.
    pub fn set_delivering(&self, on: bool) {
        self.delivering.store(on, Ordering::SeqCst);
    }

    /// Whether this replica delivers (it leads, or runs alone).
    pub fn delivering(&self) -> bool {
        self.delivering.load(Ordering::SeqCst)
    }

    /// Events observed, by cluster and kind.
    pub fn observed(&self) -> Vec<(String, String, Counts)> {
        self.observed.snapshot()
    }

    /// The latest events routed, for the status page.
    pub fn recent(&self) -> &RecentEvents {
        &self.recent
    }

    /// Routes plugin `name`'s observations to `lane` from the next one on, in place of any
    /// lane it had.
    pub fn insert(&self, name: &str, lane: Lane) {
        for cluster in self.offline.read().iter() {
            lane.set_cluster_offline(cluster, true);
        }
        let mut lanes = self.inner.write();
        lanes.insert(name.to_string(), lane);
    }

    /// `cluster` is judged offline (its health checks failed), or back: every lane waits out
    /// its events' retryable failures meanwhile instead of spending their attempts.
    pub fn set_cluster_offline(&self, cluster: &str, offline: bool) {
        {
            let mut known = self.offline.write();
            if offline {
                known.insert(cluster.to_string());
            } else {
                known.remove(cluster);
            }
        }
        for lane in self.inner.read().values() {
            lane.set_cluster_offline(cluster, offline);
        }
    }

    /// Stops routing to plugin `name` and hands its lane back, for the caller to close.
    pub fn remove(&self, name: &str) -> Option<Lane> {
        let mut lanes = self.inner.write();
        lanes.remove(name)
    }

    /// Plugin `name`'s lane, if it has one (a handle to it, not a copy).
    pub fn get(&self, name: &str) -> Option<Lane> {
        let lanes = self.inner.read();
        lanes.get(name).cloned()
    }

    /// Every lane by plugin name, as of now: handles, so the lock is not held while the
    /// caller walks them.
    pub fn lanes(&self) -> BTreeMap<String, Lane> {
        let lanes = self.inner.read();
        lanes.clone()
    }

    /// Offer the observation to every lane that wants its kind and whose filter takes it.
    pub fn route(&self, observation: Observation) {
        let lanes = self.inner.read();
        match observation {
            Observation::Version(observed) => {
                let event = &observed.event;
                tracing::debug!(event = %event.id, phase = %event.phase, name = %event.name,
                    from_list = observed.from_list, "observed");
                self.recent.record(event, &observed.kind.name);
                self.observed
                    .add_named(event, &observed.kind.name, Count::Observed);
                if let Some(view) = &self.view {
                    view.observe(&observed);
                }
                if !self.delivering.load(Ordering::SeqCst) {
                    return;
                }
                if let Some(schedule) = &self.cleanup {
                    schedule.observe(event, &observed.kind);
                }
                // The lanes whose filter takes the job: those that take this version, and
                // those that skip it but may still hold earlier ones (a deletion waits for
                // them, so they are only gathered for one).
                let deleting = event.phase == Phase::Terminating;
                let (mut taking, mut skipping) = (Vec::new(), Vec::new());
                for lane in lanes.values().filter(|l| l.wants(&observed.kind.name)) {
                    match lane.judge(&observed) {
                        Verdict::Take => taking.push(lane),
                        Verdict::NotEvent | Verdict::Failed(_) if deleting => skipping.push(lane),
                        Verdict::NotJob | Verdict::NotEvent | Verdict::Failed(_) => {}
                    }
                }
                if self.hold_if_deleting(&observed, &taking, &skipping) {
                    let key = event.job_key();
                    for lane in &skipping {
                        lane.pass(&key);
                    }
                }
                // Every lane but the last gets a copy; the last takes the event itself.
                if let Some((last, others)) = taking.split_last() {
                    for lane in others {
                        lane.push(observed.clone());
                    }
                    last.push(observed);
                }
            }
            Observation::Story(news) => {
                // The view's alone: plugins get the story on the job's next version.
                if let Some(view) = &self.view {
                    view.story_changed(&news);
                }
            }
            Observation::Listed(listed) => {
                if let Some(view) = &self.view {
                    view.listed(&listed);
                }
                if !self.delivering.load(Ordering::SeqCst) {
                    return;
                }
                if let Some(schedule) = &self.cleanup {
                    schedule.listed(&listed);
                }
                for lane in lanes.values().filter(|l| l.wants(&listed.kind.name)) {
                    lane.listed(&listed);
                }
            }
        }
    }
}

impl Routes {
    /// Offers a fleet event (a carrier: [`jobrelay_contract::fleet`]) to every lane that asked
    /// for its sort. Not while this replica follows a leader: the leader delivers it, and the
    /// lanes' cursors (shared in the store) keep a state announced by both from reaching a
    /// plugin twice.
    pub fn route_fleet(&self, event: JobEvent) {
        if !self.delivering.load(Ordering::SeqCst) {
            return;
        }
        tracing::debug!(event = %event.id, kind = %event.kind, name = %event.name,
            state = %event.raw_phase, "fleet event");
        let lanes = self.inner.read();
        for lane in lanes.values() {
            lane.push_fleet(event.clone());
        }
    }

    /// A job of a finalizer kind that is being deleted and still carries our finalizer is
    /// held until every lane whose filter takes the job is done with it (recorded before the
    /// lanes see the event): `true` when held. A lane that skips this version (its phase,
    /// say) may still be delivering earlier ones; it is told, and reports at once if not.
    fn hold_if_deleting(&self, observed: &Observed, taking: &[&Lane], skipping: &[&Lane]) -> bool {
        let Some((book, finalizer)) = &self.finalizers else {
            return false;
        };
        let event = &observed.event;
        if !observed.kind.finalizer || event.phase != Phase::Terminating {
            return false;
        }
        if !has_finalizer(&event.object_json, finalizer) {
            return false;
        }
        let job = HeldJob {
            cluster: event.cluster.clone(),
            kind: observed.kind.clone(),
            namespace: event.namespace.clone(),
            name: event.name.clone(),
            uid: event.uid.clone(),
        };
        let lanes = taking.iter().chain(skipping);
        book.hold(job, lanes.map(|l| l.name().to_string()).collect());
        true
    }
}

/// How many observations may wait for the dispatcher before the streams are held back.
const BUFFER: usize = 1024;

/// The way from every watch stream to the dispatcher: the streams (through the cluster
/// supervisors that start them) get clones of the [`Sink`]; the daemon runs the [`Intake`].
pub fn channel() -> (Sink, Intake) {
    let (sink, observations) = mpsc::channel(BUFFER);
    (sink, Intake(observations))
}

/// The dispatcher's end of [`channel`].
pub struct Intake(mpsc::Receiver<Observation>);

impl Intake {
    /// Routes every observation, in arrival order, until every sink is gone. While the events
    /// the lanes hold are over the memory budget — copies on their way to the inbox that the
    /// store has not taken yet — the next observation waits, and so, once the channel is full,
    /// do the watch streams: they are read as fast as the inbox is written.
    pub async fn run(mut self, routes: Routes) {
        loop {
            routes.budget.room().await;
            let Some(observation) = self.0.recv().await else {
                return;
            };
            routes.route(observation);
        }
    }
}
