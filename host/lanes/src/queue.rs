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
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use compact_str::CompactString;

use super::budget::MemoryBudget;
use super::mode::{Accepted, Decision, DeliveryMode};
use jobrelay_contract::event::{JobEvent, JobKey, Phase};
use jobrelay_contract::transition_key::TransitionKey;
use jobrelay_contract::uid::Uid;
use jobrelay_contract::uid_map::UidMap;
use jobrelay_state::Cursor;
use jobrelay_watch::tracker::Listed;

use self::item::{Item, Kept};
use self::job_state::{JobState, Origin, cursor_of, intern, origin_of};
use self::ledger::Ledger;
pub use self::workers::MAX_WORKERS;
use self::workers::{READY_ROOM_KEPT, Workers};

mod item;
mod job_state;
mod ledger;
mod workers;

/// The bounds a lane's queues keep, and which one a version over them hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// `max_queued_per_job` versions of the job were already waiting.
    Job(usize),
    /// `max_inbox_events` events were already waiting in the lane (its inbox).
    Inbox(u64),
}

/// Where an offer's changes to the inbox go, as the offer makes them: the versions it queues,
/// to be taken into the inbox, and the queued versions a newer one replaced, whose marks go.
///
/// Handed to [`Queues::offer`] rather than returned from it, so that a version's take is handed
/// on in the very step that queues it. `offer` holds the queues exclusively (`&mut`), and a
/// worker takes a queued version to call only through them, so no save can settle a version
/// before its take was handed on: the lane's writer always sees the take first.
pub trait InboxChanges {
    /// A version was queued: take it into the inbox (shared with the queue when kept whole).
    /// `charge` is what holding it costs in memory ([`charge_of`](crate::budget::charge_of)).
    fn take(&mut self, event: Arc<JobEvent>, charge: u64);
    /// A queued version a newer one replaced (`latest`) was let go without a call: its inbox
    /// mark goes.
    fn replaced(&mut self, event_id: String);
}

/// The inbox changes of offers, in the order they were made: for tests and benches, which
/// look at them instead of writing them.
#[derive(Debug, Default)]
pub struct InboxLog {
    /// The versions taken, with their charges.
    pub taken: Vec<(Arc<JobEvent>, u64)>,
    /// The ids of the versions replaced.
    pub replaced: Vec<String>,
}

impl InboxChanges for InboxLog {
    fn take(&mut self, event: Arc<JobEvent>, charge: u64) {
        self.taken.push((event, charge));
    }

    fn replaced(&mut self, event_id: String) {
        self.replaced.push(event_id);
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
    /// Versions over a bound, in order, with the bound: not queued; the lane dead-letters
    /// them.
    pub overflow: Vec<(JobEvent, Bound)>,
    /// How many versions were queued.
    pub queued: usize,
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
    Call {
        /// The event to call with.
        event: Arc<JobEvent>,
        /// A dead letter queued again by the operator: settling it moves no cursor.
        replay: bool,
    },
    /// The head waits only in the inbox: read it back by this id, hand it to
    /// [`Queues::fetched`], then call the plugin with it as with [`Next::Call`]. Its place is
    /// held as for a call meanwhile.
    Fetch {
        /// The event's id in the inbox.
        id: String,
    },
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

type Jobs = UidMap<JobState>;

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

    /// When the oldest event still waiting (or in flight) was queued, but for the jobs whose
    /// head the plugin deferred (they wait on purpose; [`deferred`](Self::deferred) counts
    /// them); and how many jobs wait so. Walks the jobs with the lane's lock held, so not at
    /// all when nothing is queued: a lane at rest tracking a million jobs answers `/status`
    /// and `/metrics` without touching them.
    pub fn oldest(&self) -> (Option<Instant>, u64) {
        if self.pending() == 0 {
            return (None, 0);
        }
        let mut deferred = 0;
        let oldest = self
            .clusters
            .values()
            .flat_map(UidMap::values)
            .filter_map(|job| {
                let head = job.queue.front()?;
                if job.deferred {
                    deferred += 1;
                    return None;
                }
                Some(head.queued_at)
            })
            .min();
        (oldest, deferred)
    }

    /// The plugin deferred the head of `key`'s queue (`on`), or its next attempt begins.
    pub fn set_deferred(&mut self, key: &JobKey, on: bool) {
        if let Some(job) = self.job_mut(key) {
            job.deferred = on;
        }
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
    /// [`Offered::first_sight`]. With `taking`, the versions queued are handed to `changes` to
    /// be taken into the inbox (an event read back from the inbox is there already), and with
    /// or without it so are the ids of versions replaced.
    pub fn offer(
        &mut self,
        event: JobEvent,
        (mode, cap, inbox): (DeliveryMode, usize, u64),
        now: Instant,
        taking: bool,
        changes: &mut impl InboxChanges,
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
                    let ledger = &mut self.ledger;
                    job.queue.retain(|i| {
                        let keep = std::mem::take(&mut head) || i.replay;
                        if !keep {
                            match &i.held {
                                Kept::Here { event, .. } => changes.replaced(event.id.clone()),
                                Kept::Spilled => changes.replaced(JobEvent::make_id(
                                    &event.cluster,
                                    &event.uid,
                                    &i.resource_version,
                                )),
                                Kept::Out { .. } => {}
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
                held: self.ledger.keep(event, taking, changes),
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
                let out = |charge, spilled| Kept::Out { charge, spilled };
                match std::mem::replace(&mut item.held, out(0, false)) {
                    Kept::Here { mut event, charge } => {
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
                    Kept::Spilled => {
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
                    held @ Kept::Out { .. } => {
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
            (Kept::Out { spilled: true, .. }, _) => {
                head.held = Kept::Spilled;
                self.ledger.spill(1);
            }
            (Kept::Out { charge, .. }, Some(event)) => {
                head.held = Kept::Here {
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
        job.deferred = false;
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
        story: None,
    }
}

#[cfg(test)]
mod tests;
