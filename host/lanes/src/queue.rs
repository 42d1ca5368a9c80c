//! One lane's per-job queues, as a state machine with no tasks and no I/O.
//!
//! [`Queues`] owns what a lane knows of each job — what the plugin's delivery mode accepted,
//! the versions waiting, whether a worker holds the job — and answers each of the lane's
//! questions in one step: offer a version (the mode decides, the bound sets the overflow
//! aside), which event the job's worker calls next, pop the head once its outcome is recorded,
//! let go of a cluster. The lane ([`crate::lane`], its workers and settling) asks under one
//! lock and does all that waits: calls, retries, cursor writes, dead letters.
//!
//! Kept apart so the rules that make delivery ordered and bounded — one worker per job (from a
//! pool of at most [`MAX_WORKERS`]), the
//! head leaves the queue only when settled, a job's queue never holds more than its mode needs
//! or `max_queued_per_job`, an event is kept whole only while the process-wide
//! [`MemoryBudget`] has room and otherwise waits as its place alone, read back from the inbox
//! in its turn — are property-tested alone (`queue/tests.rs`).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use compact_str::CompactString;

use super::budget::{MemoryBudget, charge_of};
use super::mode::{Accepted, Decision, DeliveryMode, is_end};
use jobrelay_contract::event::{JobEvent, JobKey, Phase};
use jobrelay_contract::transition_key::TransitionKey;
use jobrelay_contract::uid::Uid;
use jobrelay_contract::uid_map::UidMap;
use jobrelay_state::Cursor;
use jobrelay_watch::tracker::Listed;

/// A queued event; replays of dead letters bypass the mode and leave the cursor alone.
#[derive(Debug)]
struct Item {
    held: Held,
    /// The event's resourceVersion, known whatever is held: a version being delivered or
    /// waiting in the inbox counts as queued when the same version is observed again.
    resource_version: CompactString,
    replay: bool,
    /// When it was queued, for the age of the oldest pending event.
    queued_at: Instant,
}

/// Where a queued event is.
#[derive(Debug)]
enum Held {
    /// Kept whole, charging `charge` bytes to the lane's [`MemoryBudget`]. Shared with the
    /// lane's writer while it holds the event's take, so taking an event copies nothing.
    Here { event: Arc<JobEvent>, charge: u64 },
    /// Out with the job's worker for its call (the head only): the worker holds the event it
    /// delivers (shared, not copied), and gives it back with [`Queues::release`] when the call
    /// is cut short. `charge` is still held; `spilled`: the worker read the event back from
    /// the inbox (nothing charged), and it goes back to waiting there if given back.
    Out { charge: u64, spilled: bool },
    /// Waiting only in the inbox (the budget had no room when it was queued), to be read back
    /// when its turn comes. Its id is not kept: it is the job's cluster and uid and the item's
    /// resource version ([`JobEvent::make_id`]), and a lane far behind holds a million of
    /// these.
    Spilled,
}

/// Whether `event`'s id is the one [`JobEvent::make_id`] gives its job and version, so that
/// it can be queued as its place alone and its id made again to read it back. Every event the
/// watch or catch-up makes is; one that is not is kept whole whatever the budget.
fn id_is_derived(event: &JobEvent) -> bool {
    let rest = event.id.strip_prefix(event.cluster.as_str());
    let rest = rest.and_then(|r| r.strip_prefix('/'));
    let rest = rest.and_then(|r| r.strip_prefix(event.uid.as_str()));
    let rest = rest.and_then(|r| r.strip_prefix('/'));
    rest == Some(event.resource_version.as_str())
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
        // Room for one at first: most jobs that wait hold one event, and a lane far behind
        // holds a million of them (the default growth would make room for four).
        self.0
            .get_or_insert_with(|| Box::new(VecDeque::with_capacity(1)))
            .push_back(item);
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

    /// Keeps the first `len` items; the rest are handed to `gone` on their way out.
    fn truncate(&mut self, len: usize, mut gone: impl FnMut(&Item)) {
        self.edit(|queue| {
            for item in queue.range(len.min(queue.len())..) {
                gone(item);
            }
            queue.truncate(len);
        });
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

/// The cursor that names a job the lane knows, for its removal.
fn cursor_of(plugin: &str, key: &JobKey, job: &JobState) -> Cursor {
    Cursor {
        plugin: plugin.to_string(),
        cluster: key.cluster.clone(),
        uid: key.uid.clone(),
        api_version: job.origin.api_version.to_string(),
        kind: job.origin.kind.to_string(),
        namespace: job.origin.namespace.to_string(),
        name: job.name.to_string(),
        resource_version: String::new(),
        phase: Phase::Unknown,
        transition_time: String::new(),
        deleted: false,
    }
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
    /// A worker holds the job, or it waits in the lane's ready queue for one: one worker
    /// alone takes the job's events, one at a time.
    busy: bool,
    /// Claimed, and waiting in the ready queue for a worker to be free.
    ready: bool,
    /// The head of the queue is being called: it stays there until settled, and nothing
    /// else may take its place (a `latest` replacement keeps it).
    in_flight: bool,
    /// The lane's filter no longer takes the job: it is forgotten once its queue is done.
    let_go: bool,
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
            ready: false,
            in_flight: false,
            let_go: false,
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
            ready: false,
            in_flight: false,
            let_go: false,
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

/// The bounds a lane's queues keep, and which one a version over them hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// `max_queued_per_job` versions of the job were already waiting.
    Job(usize),
    /// `max_inbox_events` events were already waiting in the lane (its inbox).
    Inbox(u64),
}

/// What one offer did, for the lane to act on.
#[derive(Debug, Default)]
pub struct Offered {
    /// The job was new to the lane: its first sight as a cursor that is not a delivery (the
    /// lane notes it in the store, so a deletion while jobrelay is away is still found).
    pub first_sight: Option<Cursor>,
    /// Versions the mode did not want, and versions a newer one replaced (`latest`).
    pub skipped: u64,
    /// Versions over a bound, in order, with the bound: not queued; the lane dead-letters
    /// them.
    pub overflow: Vec<(JobEvent, Bound)>,
    /// How many versions were queued.
    pub queued: usize,
    /// The versions queued (shared with the queue when kept whole), in order, with what each
    /// costs in memory ([`charge_of`]), when the offer was `taking`: the lane takes them into
    /// the store's inbox.
    pub taken: Vec<(Arc<JobEvent>, u64)>,
    /// Ids of queued versions a newer one replaced (`latest`): let go without a call, their
    /// inbox marks go.
    pub replaced: Vec<String>,
    /// The job was claimed for a new worker: the lane must start one.
    pub start: bool,
    /// The job has nothing waiting and nothing in flight.
    pub idle: bool,
}

/// What a lane keeps of one job, as the job view shows it per plugin.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct JobDelivery {
    /// The phase of the last version delivered (or the last before this process started,
    /// from its cursor).
    pub delivered_phase: Option<Phase>,
    /// The resourceVersion of the last version the plugin's mode took: delivered when
    /// nothing is pending, else the newest one waiting.
    pub accepted_version: Option<String>,
    /// Versions waiting or being delivered (in memory or in the inbox).
    pub pending: usize,
    /// The head is being called now.
    pub in_flight: bool,
}

/// What a job's worker does next.
#[derive(Debug)]
pub enum Next {
    /// Call the plugin with this event: the head of the queue, handed over (not copied); its
    /// place stays at the head until [`Queues::pop_head`], or [`Queues::release`] gives it back.
    Call { event: Arc<JobEvent>, replay: bool },
    /// The head waits only in the inbox: read it back by this id, hand it to
    /// [`Queues::fetched`], then call the plugin with it as with [`Next::Call`]. Its place is
    /// held as for a call meanwhile.
    Fetch { id: String },
    /// Nothing to do (or the lane closed): the worker ends and the job is free.
    Idle,
    /// Nothing left to do for a job the filter let go: it is forgotten, and the worker
    /// removes its cursor (this one) and ends.
    LetGo(Box<Cursor>),
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
    ledger: Ledger,
    workers: Workers,
}

/// The lane's workers: at most `max` ([`MAX_WORKERS`]) at once, each draining one job at a
/// time; a job claimed while all are busy waits in `ready`, in the order it was claimed, and
/// the next worker to finish its job takes it. A worker costs a task (about a kilobyte); a
/// job waiting for one costs its key here, so a backlog over a million jobs does not hold a
/// million tasks.
#[derive(Debug)]
struct Workers {
    running: usize,
    max: usize,
    /// Claimed jobs waiting for a worker. A key whose job was forgotten or let go meanwhile
    /// (no longer `ready`) is skipped.
    ready: VecDeque<(Arc<str>, Uid)>,
}

impl Default for Workers {
    fn default() -> Workers {
        Workers {
            running: 0,
            max: MAX_WORKERS,
            ready: VecDeque::new(),
        }
    }
}

impl Workers {
    /// A worker for a job just claimed: `true` if one may start for it now; otherwise the job
    /// waits for the next free one.
    fn assign(&mut self, job: &mut JobState, cluster: Arc<str>, uid: Uid) -> bool {
        if self.running < self.max {
            self.running += 1;
            return true;
        }
        job.ready = true;
        self.ready.push_back((cluster, uid));
        false
    }
}

/// Most workers of one lane at once: calls are bounded by the plugin's concurrency, and the
/// rest wait for a permit, a rate limit or a retry's backoff. This many lets that many jobs
/// be in retry waits before the others' turns are delayed, at a kilobyte or so each.
pub const MAX_WORKERS: usize = 1_024;

/// Room the ready queue keeps once it is empty.
const READY_ROOM_KEPT: usize = 1_024;

type Jobs = UidMap<JobState>;

/// What the queued items hold, counted as items come and go: the events pending, the bytes
/// they charge to the process-wide budget, and how many wait only in the inbox. Given back to
/// the budget when the lane's queues are dropped.
#[derive(Debug, Default)]
struct Ledger {
    budget: Arc<MemoryBudget>,
    /// Events in all queues, the ones in flight included.
    pending: u64,
    /// Of those, replays of dead letters (not in the inbox).
    replays: u64,
    /// Bytes charged by the events kept whole (or out for their call).
    held: u64,
    /// Events waiting only in the inbox.
    spilled: u64,
}

impl Ledger {
    /// Where a newly queued event is kept: whole while the budget has room, else only in the
    /// inbox. With `taking`, the event (shared with the queue when it is also kept) goes to
    /// `taken` with its charge, for the lane to take into the inbox.
    fn keep(
        &mut self,
        event: JobEvent,
        taking: bool,
        taken: &mut Vec<(Arc<JobEvent>, u64)>,
    ) -> Held {
        self.pending += 1;
        let charge = charge_of(&event);
        let room = self.budget.try_hold(charge);
        if !room && id_is_derived(&event) {
            self.spill(1);
            if taking {
                taken.push((Arc::new(event), charge));
            }
            return Held::Spilled;
        }
        if !room {
            // Its id could not be made again to read it back: kept whatever the budget.
            self.budget.keep(charge);
        }
        self.held += charge;
        let event = Arc::new(event);
        if taking {
            taken.push((event.clone(), charge));
        }
        Held::Here { event, charge }
    }

    /// A replay of a dead letter is not in the inbox: it is kept whole, and not charged (see
    /// [`budget`](crate::budget)).
    fn keep_replay(&mut self, event: JobEvent) -> Held {
        self.pending += 1;
        self.replays += 1;
        Held::Here {
            event: Arc::new(event),
            charge: 0,
        }
    }

    fn spill(&mut self, n: u64) {
        self.spilled += n;
        self.budget.count_spilled(true, n);
    }

    fn unspill(&mut self) {
        self.spilled = self.spilled.saturating_sub(1);
        self.budget.count_spilled(false, 1);
    }

    fn release(&mut self, charge: u64) {
        self.held = self.held.saturating_sub(charge);
        self.budget.release_kept(charge);
    }

    /// An item leaves its queue.
    fn gone(&mut self, item: &Item) {
        self.pending = self.pending.saturating_sub(1);
        if item.replay {
            self.replays = self.replays.saturating_sub(1);
        }
        match &item.held {
            Held::Here { charge, .. } | Held::Out { charge, .. } => self.release(*charge),
            Held::Spilled => self.unspill(),
        }
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        self.budget.release_kept(self.held);
        self.budget.count_spilled(false, self.spilled);
    }
}

impl Queues {
    /// The jobs `plugin`'s stored cursors describe, nothing queued, keeping events whole only
    /// while `budget` has room.
    pub fn within(budget: Arc<MemoryBudget>, plugin: &str, cursors: &[Cursor]) -> Queues {
        let mut queues = Queues {
            plugin: plugin.to_string(),
            ledger: Ledger {
                budget,
                ..Ledger::default()
            },
            ..Queues::default()
        };
        queues.reload(|_| true, cursors);
        queues
    }

    /// Events waiting or in flight.
    pub fn pending(&self) -> u64 {
        self.ledger.pending
    }

    /// Events waiting only in the inbox.
    pub fn spilled(&self) -> u64 {
        self.ledger.spilled
    }

    /// Bytes of the events kept whole, charged to the budget (for the tests' checks).
    #[cfg(test)]
    fn held_bytes(&self) -> u64 {
        self.ledger.held
    }

    /// Jobs known.
    pub fn jobs(&self) -> usize {
        self.clusters.values().map(UidMap::len).sum()
    }

    /// When the oldest event still waiting (or in flight) was queued. Walks the jobs with
    /// the lane's lock held, so not at all when nothing is queued: a lane at rest tracking a
    /// million jobs answers `/status` and `/metrics` without touching them.
    pub fn oldest(&self) -> Option<Instant> {
        if self.pending() == 0 {
            return None;
        }
        self.clusters
            .values()
            .flat_map(UidMap::values)
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
    ) -> (&'a mut JobState, bool, Arc<str>) {
        let name = match clusters.get_key_value(cluster) {
            Some((name, _)) => name.clone(),
            None => {
                let name: Arc<str> = Arc::from(cluster);
                clusters.insert(name.clone(), Jobs::default());
                name
            }
        };
        let jobs = clusters
            .get_mut(cluster)
            .expect("the cluster's map was just made");
        match jobs.entry(Uid::new(uid)) {
            Entry::Occupied(job) => (job.into_mut(), false, name),
            Entry::Vacant(slot) => {
                let [api_version, kind, namespace] = origin;
                let origin = intern(origins, api_version, kind, namespace);
                (slot.insert(make(origin)), true, name)
            }
        }
    }

    /// Shared origins no job uses any more are let go.
    fn prune_origins(&mut self) {
        self.origins.retain(|origin| Arc::strong_count(origin) > 1);
    }

    /// Offers one observed version of a job. `before` returns the events to judge ahead of
    /// it — the transitions missed in a gap — from what was accepted for the job so far. The
    /// mode decides each; what it accepts is queued, unless `cap` versions of the job already
    /// wait, or `inbox` events of the lane: those are returned in [`Offered::overflow`]. A job the lane did not know comes back as
    /// [`Offered::first_sight`]. With `taking`, the versions queued are returned in
    /// [`Offered::taken`] for the inbox (an event read back from the inbox is there already).
    pub fn offer(
        &mut self,
        event: JobEvent,
        (mode, cap, inbox): (DeliveryMode, usize, u64),
        now: Instant,
        taking: bool,
        before: impl FnOnce(&Accepted, &JobEvent) -> Vec<JobEvent>,
    ) -> Offered {
        let mut offered = Offered::default();
        let uid = Uid::new(&event.uid);
        let (job, new_job, cluster) = Self::job_or_insert(
            &mut self.clusters,
            &mut self.origins,
            (&event.cluster, &event.uid),
            origin_of(&event),
            |o| JobState::for_event(&event, o),
        );
        if new_job {
            offered.first_sight = Some(Cursor::from_event(&self.plugin, &event));
        }
        // Offered again: the filter takes the job (again).
        job.let_go = false;
        let mut events = before(&job.accepted, &event);
        events.push(event);
        for mut event in events {
            // The `previous_phase` its call will carry, as far as it can be known now: the
            // phase of the version accepted before it, which is delivered just before it
            // unless something replaces it meanwhile. Set before the event is shared with the
            // lane's writer (its take), since `next` must copy a shared event to change it —
            // a copy of every version but a job's first. `next` still sets what was delivered.
            let mut expected_previous = job.accepted.phase;
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
                    // Replays stay, and so does the head while its call runs: the worker
                    // settles it when the call ends. With no call running, nothing of the
                    // job's own is left ahead of this version: what was delivered comes
                    // before it (a running call's phase is not known here).
                    if !job.in_flight {
                        expected_previous = job.delivered_phase;
                    }
                    let mut head = job.in_flight;
                    let (replaced, ledger) = (&mut offered.replaced, &mut self.ledger);
                    job.queue.retain(|i| {
                        let keep = std::mem::take(&mut head) || i.replay;
                        if !keep {
                            match &i.held {
                                Held::Here { event, .. } => replaced.push(event.id.clone()),
                                Held::Spilled => replaced.push(JobEvent::make_id(
                                    &event.cluster,
                                    &event.uid,
                                    &i.resource_version,
                                )),
                                Held::Out { .. } => {}
                            }
                            ledger.gone(i);
                            offered.skipped += 1;
                        }
                        keep
                    });
                }
                Decision::Append => {
                    if job.waiting() >= cap {
                        offered.overflow.push((event, Bound::Job(cap)));
                        continue;
                    }
                }
            }
            // After a replacement made its room, if it could. Replays are not in the inbox.
            if self.ledger.pending.saturating_sub(self.ledger.replays) >= inbox {
                offered.overflow.push((event, Bound::Inbox(inbox)));
                continue;
            }
            offered.queued += 1;
            event.previous_phase = expected_previous;
            let resource_version = CompactString::new(&event.resource_version);
            job.queue.push_back(Item {
                held: self.ledger.keep(event, taking, &mut offered.taken),
                resource_version,
                replay: false,
                queued_at: now,
            });
        }
        offered.start = job.claim() && self.workers.assign(job, cluster, uid);
        offered.idle = !job.busy && job.queue.is_empty();
        offered
    }

    /// Queues a dead letter again, as the operator asked: past the mode and the bound, and
    /// without moving the job's cursor. `true`: the job was claimed for a new worker.
    pub fn offer_replay(&mut self, event: JobEvent, now: Instant) -> bool {
        let uid = Uid::new(&event.uid);
        let (job, _, cluster) = Self::job_or_insert(
            &mut self.clusters,
            &mut self.origins,
            (&event.cluster, &event.uid),
            origin_of(&event),
            |o| JobState::for_event(&event, o),
        );
        job.queue.push_back(Item {
            resource_version: CompactString::new(&event.resource_version),
            held: self.ledger.keep_replay(event),
            replay: true,
            queued_at: now,
        });
        job.claim() && self.workers.assign(job, cluster, uid)
    }

    /// A worker is done with its job (idle, forgotten, or cut short): the next job waiting
    /// for a worker, which it takes now, or `None` — nothing waits, or the lane closed — and
    /// the worker ends.
    pub fn next_job(&mut self, closed: bool) -> Option<JobKey> {
        while !closed && let Some((cluster, uid)) = self.workers.ready.pop_front() {
            let Some(job) = self
                .clusters
                .get_mut(&cluster)
                .and_then(|jobs| jobs.get_mut(&uid))
            else {
                continue;
            };
            if job.ready {
                job.ready = false;
                return Some(JobKey {
                    cluster: cluster.to_string(),
                    uid: uid.to_string(),
                });
            }
        }
        // The ready queue of a backlog over a million jobs had room for all of them; a lane
        // that caught up does not keep it.
        if self.workers.ready.capacity() > READY_ROOM_KEPT {
            self.workers.ready.shrink_to(READY_ROOM_KEPT);
        }
        self.workers.running = self.workers.running.saturating_sub(1);
        None
    }

    /// Workers running now (for the tests' checks).
    #[cfg(test)]
    fn workers_running(&self) -> usize {
        self.workers.running
    }

    /// At most `max` workers at once (the tests' small pools).
    #[cfg(test)]
    fn limit_workers(&mut self, max: usize) {
        self.workers.max = max;
    }

    /// The next step of the worker holding `key`. A `Call` hands the head's event to the
    /// worker and keeps its place at the head until it is settled or given back;
    /// [`Idle`](Next::Idle) frees the job (and forgets a deleted one).
    pub fn next(&mut self, key: &JobKey, closed: bool) -> Next {
        let Some(job) = self
            .clusters
            .get_mut(key.cluster.as_str())
            .and_then(|jobs| jobs.get_mut(&Uid::new(&key.uid)))
        else {
            return Next::Forgotten;
        };
        match job.queue.front_mut() {
            Some(item) if !closed => {
                let out = |charge, spilled| Held::Out { charge, spilled };
                match std::mem::replace(&mut item.held, out(0, false)) {
                    Held::Here { mut event, charge } => {
                        item.held = out(charge, false);
                        job.in_flight = true;
                        // Set when it was queued (see `offer`), so this differs only when the
                        // version before it was replaced: the lane's writer may still share the
                        // event (its take), and a change then copies it.
                        if !item.replay && event.previous_phase != job.delivered_phase {
                            Arc::make_mut(&mut event).previous_phase = job.delivered_phase;
                        }
                        Next::Call {
                            event,
                            replay: item.replay,
                        }
                    }
                    Held::Spilled => {
                        item.held = out(0, true);
                        job.in_flight = true;
                        self.ledger.unspill();
                        Next::Fetch {
                            id: JobEvent::make_id(&key.cluster, &key.uid, &item.resource_version),
                        }
                    }
                    // The head is out only between this and its `pop_head` or `release`, and
                    // only the job's one worker asks: an event out cannot be seen here. Were
                    // it seen, the job is left as it is, to whoever holds the event.
                    held @ Held::Out { .. } => {
                        item.held = held;
                        Next::Forgotten
                    }
                }
            }
            _ => {
                job.busy = false;
                // A deleted job's state is no longer needed once nothing waits for it.
                if job.accepted.deleted && job.queue.is_empty() {
                    self.remove(key);
                } else if job.let_go && job.queue.is_empty() && !closed {
                    let cursor = cursor_of(&self.plugin, key, job);
                    self.remove(key);
                    return Next::LetGo(Box::new(cursor));
                }
                Next::Idle
            }
        }
    }

    /// The head of `key`'s queue, read back from the inbox after a [`Next::Fetch`], is about
    /// to be called: it takes the `previous_phase` a call of it carries. `false`: the job is
    /// no longer known (its cluster was let go), and the worker ends.
    pub fn fetched(&mut self, key: &JobKey, event: &mut JobEvent) -> bool {
        let Some(job) = self.job_mut(key) else {
            return false;
        };
        event.previous_phase = job.delivered_phase;
        true
    }

    /// The call for the head of `key`'s queue was cut short (the lane closed or let the
    /// cluster go), or its read-back from the inbox (`event` `None`): the worker gives the
    /// event back, it stays queued — whole, or in the inbox if it waited there —
    /// unacknowledged, and the job is free.
    pub fn release(&mut self, key: &JobKey, event: Option<Arc<JobEvent>>) {
        let Some(job) = self
            .clusters
            .get_mut(key.cluster.as_str())
            .and_then(|jobs| jobs.get_mut(&Uid::new(&key.uid)))
        else {
            return;
        };
        job.busy = false;
        job.in_flight = false;
        let Some(head) = job.queue.front_mut() else {
            return;
        };
        match (&mut head.held, event) {
            (Held::Out { spilled: true, .. }, _) => {
                head.held = Held::Spilled;
                self.ledger.spill(1);
            }
            (Held::Out { charge, .. }, Some(event)) => {
                head.held = Held::Here {
                    event,
                    charge: *charge,
                };
            }
            _ => {}
        }
    }

    /// The outcome of the head of `key`'s queue is recorded (delivered or dead-lettered): it
    /// leaves the queue, and a delivered version's phase becomes the next one's
    /// `previous_phase`. Returns when the popped event was queued (`None` if the job is no
    /// longer known).
    pub fn pop_head(&mut self, key: &JobKey, replay: bool, phase: Phase) -> Option<Instant> {
        let job = self
            .clusters
            .get_mut(key.cluster.as_str())
            .and_then(|jobs| jobs.get_mut(&Uid::new(&key.uid)))?;
        job.in_flight = false;
        let queued_at = job.queue.front().map(|item| item.queued_at);
        if let Some(head) = job.queue.front() {
            self.ledger.gone(head);
        }
        // An idle job keeps no queue buffer ([`Waiting`] drops it once empty).
        job.queue.pop_front();
        if !replay {
            job.delivered_phase = Some(phase);
        }
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
    /// head of a job a worker holds (the call in flight, settled by its worker), and its other
    /// jobs are forgotten. Returns how many events were dropped.
    pub fn drop_waiting(&mut self, cluster: &str) -> u64 {
        let Some(jobs) = self.clusters.get_mut(cluster) else {
            return 0;
        };
        let mut dropped = 0u64;
        let ledger = &mut self.ledger;
        jobs.retain(|_, job| {
            // A job waiting for a worker has none to settle anything: it goes like an idle
            // one (its key in the ready queue is skipped).
            let held = job.busy && !job.ready;
            let keep = usize::from(held).min(job.queue.len());
            job.queue.truncate(keep, |item| {
                ledger.gone(item);
                dropped += 1;
            });
            held
        });
        if jobs.is_empty() {
            self.clusters.remove(cluster);
        }
        self.prune_origins();
        dropped
    }

    /// The jobs of the clusters `of` selects that have anything queued or a worker holding
    /// them.
    pub fn jobs_with_work(&self, of: impl Fn(&str) -> bool) -> HashSet<JobKey> {
        self.clusters
            .iter()
            .filter(|(cluster, _)| of(cluster))
            .flat_map(|(cluster, jobs)| {
                jobs.iter()
                    .filter(|(_, job)| job.busy || !job.queue.is_empty())
                    .map(move |(uid, _)| JobKey {
                        cluster: cluster.to_string(),
                        uid: uid.to_string(),
                    })
            })
            .collect()
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
            for item in jobs.values().flat_map(|job| job.queue.iter()) {
                self.ledger.gone(item);
            }
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
        self.add_cursors(of, cursors);
    }

    /// Jobs from stored cursors (of the clusters `of` selects), for the ones the lane does
    /// not know: a page of them at a time while a lane opens.
    pub fn add_cursors(&mut self, of: impl Fn(&str) -> bool, cursors: &[Cursor]) {
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

    /// Lets go of a job the lane's filter no longer takes: forgotten (`true`) when nothing of
    /// it waits or runs. A job with work keeps it — those versions were the plugin's when they
    /// came — and is let go at a later version, once its queue is done.
    pub fn let_go(&mut self, key: &JobKey) -> bool {
        let Some(job) = self.job_mut(key) else {
            return false;
        };
        let idle = !job.busy && job.queue.is_empty();
        if idle {
            self.remove(key);
        } else {
            job.let_go = true;
        }
        idle
    }

    /// What the lane keeps of one job, for the job view; `None` for a job it does not know.
    pub fn delivery(&self, key: &JobKey) -> Option<JobDelivery> {
        let job = self
            .clusters
            .get(key.cluster.as_str())?
            .get(&Uid::new(&key.uid))?;
        Some(JobDelivery {
            delivered_phase: job.delivered_phase,
            accepted_version: job
                .accepted
                .resource_version
                .as_ref()
                .map(|v| v.to_string()),
            pending: job.queue.len(),
            in_flight: job.in_flight,
        })
    }

    /// Whether the lane has nothing of the job waiting or running (true for a job it does
    /// not know).
    pub fn idle(&self, key: &JobKey) -> bool {
        self.clusters
            .get(key.cluster.as_str())
            .and_then(|jobs| jobs.get(&Uid::new(&key.uid)))
            .is_none_or(|job| !job.busy && job.queue.is_empty())
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
