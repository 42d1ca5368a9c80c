//! One lane's per-job queues, as a state machine with no tasks and no I/O.
//!
//! [`Queues`] owns what a lane knows of each job — what the plugin's delivery mode accepted,
//! the versions waiting, whether a worker holds the job — and answers each of the lane's
//! questions in one step: offer a version (the mode decides, the bound sets the overflow
//! aside), which event the job's worker calls next, pop the head once its outcome is recorded,
//! let go of a cluster. The lane ([`crate::lane`], its workers and settling) asks under one
//! lock and does all that waits: calls, retries, cursor writes, dead letters.
//!
//! Kept apart so the rules that make delivery ordered and bounded — one worker per job, the
//! head leaves the queue only when settled, a job's queue never holds more than its mode needs
//! or `max_queued_per_job` — are property-tested alone (`queue/tests.rs`).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use compact_str::CompactString;

use super::mode::{Accepted, Decision, DeliveryMode, is_end};
use jobrelay_contract::event::{JobEvent, JobKey, Phase};
use jobrelay_contract::transition_key::TransitionKey;
use jobrelay_contract::uid::Uid;
use jobrelay_state::Cursor;
use jobrelay_watch::tracker::Listed;

/// A queued event; replays of dead letters bypass the mode and leave the cursor alone.
#[derive(Debug)]
struct Item {
    /// `None` while the job's worker has it out for the call (the head only): the worker
    /// owns the event it delivers, so no copy is made for the call, and gives it back with
    /// [`Queues::release`] when the call is cut short.
    event: Option<JobEvent>,
    /// The event's resourceVersion, still known while the event is out: a version being
    /// delivered counts as queued when the same version is observed again.
    resource_version: CompactString,
    replay: bool,
    /// When it was queued, for the age of the oldest pending event.
    queued_at: Instant,
}

/// A job's queued events: no allocation at all while the job is idle, which nearly every
/// tracked job is (8 bytes instead of an empty `VecDeque`'s 32).
#[derive(Debug, Default)]
#[expect(
    clippy::box_collection,
    reason = "the box is the point: 8 bytes per idle job instead of an empty VecDeque's 32"
)]
struct Waiting(Option<Box<VecDeque<Item>>>);

impl Waiting {
    fn iter(&self) -> impl Iterator<Item = &Item> {
        self.0.iter().flat_map(|queue| queue.iter())
    }

    fn front(&self) -> Option<&Item> {
        self.0.as_ref()?.front()
    }

    fn front_mut(&mut self) -> Option<&mut Item> {
        self.0.as_mut()?.front_mut()
    }

    fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |queue| queue.len())
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn push_back(&mut self, item: Item) {
        self.0.get_or_insert_default().push_back(item);
    }

    /// Every change that can empty the queue drops its buffer with it.
    fn edit(&mut self, change: impl FnOnce(&mut VecDeque<Item>)) {
        if let Some(queue) = self.0.as_mut() {
            change(queue);
            if queue.is_empty() {
                self.0 = None;
            }
        }
    }

    fn pop_front(&mut self) {
        self.edit(|queue| {
            queue.pop_front();
        });
    }

    fn retain(&mut self, keep: impl FnMut(&Item) -> bool) {
        self.edit(|queue| queue.retain(keep));
    }

    fn truncate(&mut self, len: usize) {
        self.edit(|queue| queue.truncate(len));
    }
}

/// The API version, kind and namespace of a job, shared by every job of the lane that has
/// the same three (a few per cluster): one pointer per job instead of three strings.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Origin {
    api_version: Box<str>,
    kind: Box<str>,
    namespace: Box<str>,
}

/// The origin parts of an event's job.
fn origin_of(event: &JobEvent) -> [&str; 3] {
    [&event.api_version, &event.kind, &event.namespace]
}

/// The one shared [`Origin`] with these parts. Only a job new to the lane asks, so the
/// allocations made to look it up are paid once per job.
fn intern(
    origins: &mut HashSet<Arc<Origin>>,
    api_version: &str,
    kind: &str,
    namespace: &str,
) -> Arc<Origin> {
    let origin = Origin {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: namespace.into(),
    };
    if let Some(shared) = origins.get(&origin) {
        return shared.clone();
    }
    let shared = Arc::new(origin);
    origins.insert(shared.clone());
    shared
}

/// What a lane keeps per job: the projection needed to judge and order its events. Kept
/// small because a lane holds one for every job of every cluster it serves (about 130 bytes
/// with its uid; the name and versions inline up to 24 bytes).
#[derive(Debug)]
struct JobState {
    accepted: Accepted,
    /// Phase of the last version delivered (the `previous_phase` of the next one).
    delivered_phase: Option<Phase>,
    queue: Waiting,
    /// A worker holds the job: it alone takes the job's events, one at a time.
    busy: bool,
    /// The head of the queue is being called: it stays there until settled, and nothing
    /// else may take its place (a `latest` replacement keeps it).
    in_flight: bool,
    origin: Arc<Origin>,
    name: CompactString,
}

impl JobState {
    /// A job the lane has not seen before.
    fn for_event(event: &JobEvent, origin: Arc<Origin>) -> JobState {
        JobState {
            accepted: Accepted::default(),
            delivered_phase: None,
            queue: Waiting::default(),
            busy: false,
            in_flight: false,
            origin,
            name: CompactString::new(&event.name),
        }
    }

    fn from_cursor(c: &Cursor, origin: Arc<Origin>) -> JobState {
        let delivered = !c.resource_version.is_empty();
        JobState {
            accepted: Accepted {
                resource_version: delivered.then(|| CompactString::new(&c.resource_version)),
                phase: delivered.then_some(c.phase),
                transition_time: delivered.then(|| CompactString::new(&c.transition_time)),
                terminal_done: delivered && is_end(c.phase),
                deleted: c.deleted,
            },
            delivered_phase: delivered.then_some(c.phase),
            queue: Waiting::default(),
            busy: false,
            in_flight: false,
            origin,
            name: CompactString::new(&c.name),
        }
    }

    /// Versions waiting that the mode accepted (replays are not counted against the bound).
    fn waiting(&self) -> usize {
        self.queue.iter().filter(|i| !i.replay).count()
    }

    /// Claims the job for a new worker when it has work and no worker: `true` means the
    /// caller must start one.
    fn claim(&mut self) -> bool {
        if self.busy || self.queue.is_empty() {
            return false;
        }
        self.busy = true;
        true
    }
}

/// What one offer did, for the lane to act on.
#[derive(Debug, Default)]
pub struct Offered {
    /// The job was new to the lane: its first sight as a cursor that is not a delivery (the
    /// lane notes it in the store, so a deletion while jobrelay is away is still found).
    pub first_sight: Option<Cursor>,
    /// Versions the mode did not want, and versions a newer one replaced (`latest`).
    pub skipped: u64,
    /// Versions over the job's queue bound, in order: not queued; the lane dead-letters them.
    pub overflow: Vec<JobEvent>,
    /// Copies of the versions queued, in order: the lane takes them into the store's inbox.
    pub taken: Vec<JobEvent>,
    /// Ids of queued versions a newer one replaced (`latest`): let go without a call, their
    /// inbox marks go.
    pub replaced: Vec<String>,
    /// The job was claimed for a new worker: the lane must start one.
    pub start: bool,
    /// The job has nothing waiting and nothing in flight.
    pub idle: bool,
}

/// What a job's worker does next.
#[derive(Debug)]
pub enum Next {
    /// Call the plugin with this event: the head of the queue, handed over (not copied); its
    /// place stays at the head until [`Queues::pop_head`], or [`Queues::release`] gives it back.
    Call { event: Box<JobEvent>, replay: bool },
    /// Nothing to do (or the lane closed): the worker ends and the job is free.
    Idle,
    /// The job is no longer known (its cluster was let go): the worker ends.
    Forgotten,
}

/// Every job a lane knows, with its queue, by cluster and uid.
#[derive(Debug, Default)]
pub struct Queues {
    /// The plugin the lane delivers to, named in the first-sight notes.
    plugin: String,
    clusters: HashMap<Arc<str>, Jobs>,
    origins: HashSet<Arc<Origin>>,
    /// Events in all queues, the ones in flight included.
    pending: u64,
}

type Jobs = HashMap<Uid, JobState>;

impl Queues {
    /// The jobs `plugin`'s stored cursors describe, nothing queued.
    pub fn from_cursors(plugin: &str, cursors: &[Cursor]) -> Queues {
        let mut queues = Queues {
            plugin: plugin.to_string(),
            ..Queues::default()
        };
        queues.reload(|_| true, cursors);
        queues
    }

    /// Events waiting or in flight.
    pub fn pending(&self) -> u64 {
        self.pending
    }

    /// Jobs known.
    pub fn jobs(&self) -> usize {
        self.clusters.values().map(HashMap::len).sum()
    }

    /// When the oldest event still waiting (or in flight) was queued.
    pub fn oldest(&self) -> Option<Instant> {
        self.clusters
            .values()
            .flat_map(HashMap::values)
            .filter_map(|job| job.queue.front().map(|item| item.queued_at))
            .min()
    }

    fn job_mut(&mut self, key: &JobKey) -> Option<&mut JobState> {
        self.clusters
            .get_mut(key.cluster.as_str())?
            .get_mut(&Uid::new(&key.uid))
    }

    /// The state of job `uid` of `cluster`, made by `make` from the job's shared origin (API
    /// version, kind, namespace) when the lane did not know the job; `true` when it was made.
    /// (An associated function over the two fields it needs, so the caller may go on
    /// counting `pending` while it holds the job.)
    fn job_or_insert<'a>(
        clusters: &'a mut HashMap<Arc<str>, Jobs>,
        origins: &mut HashSet<Arc<Origin>>,
        (cluster, uid): (&str, &str),
        origin: [&str; 3],
        make: impl FnOnce(Arc<Origin>) -> JobState,
    ) -> (&'a mut JobState, bool) {
        if !clusters.contains_key(cluster) {
            clusters.insert(Arc::from(cluster), Jobs::default());
        }
        let jobs = clusters
            .get_mut(cluster)
            .expect("the cluster's map was just made");
        match jobs.entry(Uid::new(uid)) {
            Entry::Occupied(job) => (job.into_mut(), false),
            Entry::Vacant(slot) => {
                let [api_version, kind, namespace] = origin;
                let origin = intern(origins, api_version, kind, namespace);
                (slot.insert(make(origin)), true)
            }
        }
    }

    /// Shared origins no job uses any more are let go.
    fn prune_origins(&mut self) {
        self.origins.retain(|origin| Arc::strong_count(origin) > 1);
    }

    /// Offers one observed version of a job. `before` returns the events to judge ahead of
    /// it — the transitions missed in a gap — from what was accepted for the job so far. The
    /// mode decides each; what it accepts is queued, unless `cap` versions already wait: those
    /// are returned in [`Offered::overflow`]. A job the lane did not know comes back as
    /// [`Offered::first_sight`].
    pub fn offer(
        &mut self,
        event: JobEvent,
        mode: DeliveryMode,
        cap: usize,
        now: Instant,
        before: impl FnOnce(&Accepted, &JobEvent) -> Vec<JobEvent>,
    ) -> Offered {
        let mut offered = Offered::default();
        let (job, new_job) = Self::job_or_insert(
            &mut self.clusters,
            &mut self.origins,
            (&event.cluster, &event.uid),
            origin_of(&event),
            |o| JobState::for_event(&event, o),
        );
        if new_job {
            offered.first_sight = Some(Cursor::from_event(&self.plugin, &event));
        }
        let mut events = before(&job.accepted, &event);
        events.push(event);
        for event in events {
            // Only consulted when the version differs from the last one accepted, which is
            // rare for a version still queued; no set is built per event.
            let queue = &job.queue;
            let queued = |rv: &str| queue.iter().any(|i| !i.replay && i.resource_version == rv);
            match mode.decide(&mut job.accepted, &event, queued) {
                Decision::Skip(_) => {
                    offered.skipped += 1;
                    continue;
                }
                Decision::Replace => {
                    let before = job.queue.len();
                    // Replays stay, and so does the head while its call runs: the worker
                    // settles it when the call ends.
                    let mut head = job.in_flight;
                    let replaced = &mut offered.replaced;
                    job.queue.retain(|i| {
                        let keep = std::mem::take(&mut head) || i.replay;
                        if !keep && let Some(event) = &i.event {
                            replaced.push(event.id.clone());
                        }
                        keep
                    });
                    let dropped = (before - job.queue.len()) as u64;
                    self.pending -= dropped;
                    offered.skipped += dropped;
                }
                Decision::Append => {
                    if job.waiting() >= cap {
                        offered.overflow.push(event);
                        continue;
                    }
                }
            }
            self.pending += 1;
            offered.taken.push(event.clone());
            job.queue.push_back(Item {
                resource_version: CompactString::new(&event.resource_version),
                event: Some(event),
                replay: false,
                queued_at: now,
            });
        }
        offered.start = job.claim();
        offered.idle = !job.busy && job.queue.is_empty();
        offered
    }

    /// Queues a dead letter again, as the operator asked: past the mode and the bound, and
    /// without moving the job's cursor. `true`: the job was claimed for a new worker.
    pub fn offer_replay(&mut self, event: JobEvent, now: Instant) -> bool {
        let (job, _) = Self::job_or_insert(
            &mut self.clusters,
            &mut self.origins,
            (&event.cluster, &event.uid),
            origin_of(&event),
            |o| JobState::for_event(&event, o),
        );
        self.pending += 1;
        job.queue.push_back(Item {
            resource_version: CompactString::new(&event.resource_version),
            event: Some(event),
            replay: true,
            queued_at: now,
        });
        job.claim()
    }

    /// The next step of the worker holding `key`. A `Call` hands the head's event to the
    /// worker and keeps its place at the head until it is settled or given back;
    /// [`Idle`](Next::Idle) frees the job (and forgets a deleted one).
    pub fn next(&mut self, key: &JobKey, closed: bool) -> Next {
        let Some(job) = self.job_mut(key) else {
            return Next::Forgotten;
        };
        match job.queue.front_mut() {
            Some(item) if !closed => {
                // The head is out only between this and its `pop_head` or `release`, and only
                // the job's one worker asks: an empty head cannot be seen here. Were it seen,
                // the job is left as it is, to whoever holds the event.
                let Some(mut event) = item.event.take() else {
                    return Next::Forgotten;
                };
                job.in_flight = true;
                if !item.replay {
                    event.previous_phase = job.delivered_phase;
                }
                Next::Call {
                    event: Box::new(event),
                    replay: item.replay,
                }
            }
            _ => {
                job.busy = false;
                // A deleted job's state is no longer needed once nothing waits for it.
                if job.accepted.deleted && job.queue.is_empty() {
                    self.remove(key);
                }
                Next::Idle
            }
        }
    }

    /// The call for the head of `key`'s queue was cut short (the lane closed or let the
    /// cluster go): the worker gives the event back, it stays queued, unacknowledged, and the
    /// job is free.
    pub fn release(&mut self, key: &JobKey, event: JobEvent) {
        if let Some(job) = self.job_mut(key) {
            job.busy = false;
            job.in_flight = false;
            if let Some(head) = job.queue.front_mut()
                && head.event.is_none()
            {
                head.event = Some(event);
            }
        }
    }

    /// The outcome of the head of `key`'s queue is recorded (delivered or dead-lettered): it
    /// leaves the queue, and a delivered version's phase becomes the next one's
    /// `previous_phase`. Returns when the popped event was queued (`None` if the job is no
    /// longer known).
    pub fn pop_head(&mut self, key: &JobKey, replay: bool, phase: Phase) -> Option<Instant> {
        let mut queued_at = None;
        if let Some(job) = self.job_mut(key) {
            job.in_flight = false;
            // An idle job keeps no queue buffer ([`Waiting`] drops it once empty).
            queued_at = job.queue.front().map(|item| item.queued_at);
            job.queue.pop_front();
            if !replay {
                job.delivered_phase = Some(phase);
            }
        }
        self.pending = self.pending.saturating_sub(1);
        queued_at
    }

    /// Jobs of the listed stream that the lane knows, were not listed and are not deleted:
    /// their deletion events (a job deleted while jobrelay was away is still delivered).
    pub fn gone(&self, listed: &Listed) -> Vec<JobEvent> {
        let Some(jobs) = self.clusters.get(&*listed.cluster) else {
            return Vec::new();
        };
        let api_version = listed.kind.api_version();
        jobs.iter()
            .filter(|(uid, job)| {
                *job.origin.api_version == api_version
                    && *job.origin.kind == listed.kind.kind
                    && listed
                        .namespace
                        .as_deref()
                        .is_none_or(|ns| ns == &*job.origin.namespace)
                    && !job.accepted.deleted
                    && !listed.uids.contains(uid)
            })
            .map(|(uid, job)| gone_event(&listed.cluster, uid, job))
            .collect()
    }

    /// First step of letting go of `cluster`: what waits for its jobs is dropped, except the
    /// head of a held job (the call in flight, settled by its worker), and its idle jobs are
    /// forgotten. Returns how many events were dropped.
    pub fn drop_waiting(&mut self, cluster: &str) -> u64 {
        let Some(jobs) = self.clusters.get_mut(cluster) else {
            return 0;
        };
        let mut dropped = 0u64;
        jobs.retain(|_, job| {
            let keep = usize::from(job.busy).min(job.queue.len());
            dropped += (job.queue.len() - keep) as u64;
            job.queue.truncate(keep);
            job.busy
        });
        if jobs.is_empty() {
            self.clusters.remove(cluster);
        }
        self.pending -= dropped;
        self.prune_origins();
        dropped
    }

    /// Whether the job has anything queued or a worker holding it.
    pub fn has_work(&self, cluster: &str, uid: &str) -> bool {
        self.clusters
            .get(cluster)
            .and_then(|jobs| jobs.get(&Uid::new(uid)))
            .is_some_and(|job| job.busy || !job.queue.is_empty())
    }

    /// Whether a worker still holds a job of `cluster`.
    pub fn busy_in(&self, cluster: &str) -> bool {
        self.clusters
            .get(cluster)
            .is_some_and(|jobs| jobs.values().any(|j| j.busy))
    }

    /// Last step of letting go of `cluster`: its jobs are forgotten, with whatever is still
    /// queued for them (a call cut short keeps its item).
    pub fn forget(&mut self, cluster: &str) {
        if let Some(jobs) = self.clusters.remove(cluster) {
            self.pending -= jobs.values().map(|job| job.queue.len() as u64).sum::<u64>();
        }
        self.prune_origins();
    }

    /// Takes the stored cursors of the clusters `of` selects as the truth for every job of
    /// theirs that has no work in the lane; jobs with work keep their state.
    pub fn reload(&mut self, of: impl Fn(&str) -> bool, cursors: &[Cursor]) {
        for (cluster, jobs) in self.clusters.iter_mut() {
            if of(cluster) {
                jobs.retain(|_, job| job.busy || !job.queue.is_empty());
            }
        }
        for cursor in cursors.iter().filter(|c| of(&c.cluster)) {
            let origin = [&*cursor.api_version, &cursor.kind, &cursor.namespace];
            Self::job_or_insert(
                &mut self.clusters,
                &mut self.origins,
                (&cursor.cluster, &cursor.uid),
                origin,
                |o| JobState::from_cursor(cursor, o),
            );
        }
        self.clusters.retain(|_, jobs| !jobs.is_empty());
        self.prune_origins();
    }

    /// Forgets one job, and its origin when no other job has it (namespaces come and go).
    fn remove(&mut self, key: &JobKey) {
        if let Some(jobs) = self.clusters.get_mut(key.cluster.as_str()) {
            if let Some(job) = jobs.remove(&Uid::new(&key.uid))
                && Arc::strong_count(&job.origin) == 2
            {
                self.origins.remove(&*job.origin);
            }
            if jobs.is_empty() {
                self.clusters.remove(key.cluster.as_str());
            }
        }
    }

    /// A job's state, for the tests' checks.
    #[cfg(test)]
    fn job(&self, key: &JobKey) -> Option<&JobState> {
        self.clusters
            .get(key.cluster.as_str())?
            .get(&Uid::new(&key.uid))
    }

    /// Every job with its key, for the tests' checks.
    #[cfg(test)]
    fn each(&self) -> impl Iterator<Item = (JobKey, &JobState)> {
        self.clusters.iter().flat_map(|(cluster, jobs)| {
            jobs.iter().map(move |(uid, job)| {
                let key = JobKey {
                    cluster: cluster.to_string(),
                    uid: uid.to_string(),
                };
                (key, job)
            })
        })
    }
}

/// The deletion of a job that vanished unseen. Its version is the last accepted one plus
/// `-gone`, so its id is stable across restarts.
fn gone_event(cluster: &str, uid: &Uid, job: &JobState) -> JobEvent {
    let uid = uid.to_string();
    let rv = format!(
        "{}-gone",
        job.accepted.resource_version.as_deref().unwrap_or("0")
    );
    let object = serde_json::json!({
        "apiVersion": &*job.origin.api_version,
        "kind": &*job.origin.kind,
        "metadata": {"name": &*job.name, "namespace": &*job.origin.namespace, "uid": uid},
    });
    JobEvent {
        id: JobEvent::make_id(cluster, &uid, &rv),
        transition_key: TransitionKey::Deletion.make(cluster, &uid, Phase::Deleted),
        cluster: cluster.to_string(),
        api_version: job.origin.api_version.to_string(),
        kind: job.origin.kind.to_string(),
        namespace: job.origin.namespace.to_string(),
        name: job.name.to_string(),
        uid,
        resource_version: rv,
        generation: None,
        phase: Phase::Deleted,
        raw_phase: String::new(),
        reason: Some("NotListed".into()),
        message: Some("the job was gone when jobrelay listed its cluster again".into()),
        previous_phase: None,
        transition_time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        labels: Default::default(),
        annotations: Default::default(),
        object_json: Arc::from(object.to_string()),
        synthetic: false,
    }
}

#[cfg(test)]
mod tests;
