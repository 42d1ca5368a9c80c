//! One lane's per-job queues, as a state machine with no tasks and no I/O.
//!
//! [`Queues`] owns what a lane knows of each job — what the plugin's delivery mode accepted,
//! the versions waiting, whether a worker holds the job — and answers each of the lane's
//! questions in one step: offer a version (the mode decides, the bound sets the overflow
//! aside), which event the job's worker calls next, settle the head once it is acknowledged,
//! let go of a cluster. The lane (`lane.rs`) asks under one lock and does all that waits:
//! calls, retries, cursor writes, dead letters.
//!
//! Kept apart so the rules that make delivery ordered and bounded — one worker per job, the
//! head leaves the queue only when settled, a job's queue never holds more than its mode needs
//! or `max_queued_per_job` — are property-tested alone (`queue/tests.rs`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use super::mode::{Accepted, Decision, DeliveryMode, is_end};
use jobrelay_contract::event::{JobEvent, JobKey, Phase};
use jobrelay_contract::transition_key::TransitionKey;
use jobrelay_state::Cursor;
use jobrelay_watch::kinds::JobKind;

/// A queued event; replays of dead letters bypass the mode and leave the cursor alone.
#[derive(Debug)]
struct Item {
    event: JobEvent,
    replay: bool,
    /// When it was queued, for the age of the oldest pending event.
    queued_at: Instant,
}

/// What a lane keeps per job: the projection needed to judge and order its events.
#[derive(Debug, Default)]
struct JobState {
    accepted: Accepted,
    /// Phase of the last version delivered (the `previous_phase` of the next one).
    delivered_phase: Option<Phase>,
    queue: VecDeque<Item>,
    /// A worker holds the job: it alone takes the job's events, one at a time.
    busy: bool,
    /// The head of the queue is being called: it stays there until settled, and nothing
    /// else may take its place (a `latest` replacement keeps it).
    in_flight: bool,
    api_version: Arc<str>,
    kind: Arc<str>,
    namespace: String,
    name: String,
}

impl JobState {
    /// A job the lane has not seen before.
    fn for_event(event: &JobEvent) -> JobState {
        JobState {
            api_version: Arc::from(event.api_version.as_str()),
            kind: Arc::from(event.kind.as_str()),
            namespace: event.namespace.clone(),
            name: event.name.clone(),
            ..JobState::default()
        }
    }

    fn from_cursor(c: &Cursor) -> JobState {
        let delivered = !c.resource_version.is_empty();
        JobState {
            accepted: Accepted {
                resource_version: delivered.then(|| c.resource_version.clone()),
                phase: delivered.then_some(c.phase),
                transition_time: delivered.then(|| c.transition_time.clone()),
                terminal_done: delivered && is_end(c.phase),
                deleted: c.deleted,
            },
            delivered_phase: delivered.then_some(c.phase),
            queue: VecDeque::new(),
            busy: false,
            in_flight: false,
            api_version: Arc::from(c.api_version.as_str()),
            kind: Arc::from(c.kind.as_str()),
            namespace: c.namespace.clone(),
            name: c.name.clone(),
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
    /// The job was new to the lane (the lane notes it in the store).
    pub new_job: bool,
    /// Versions the mode did not want, and versions a newer one replaced (`latest`).
    pub skipped: u64,
    /// Versions over the job's queue bound, in order: not queued; the lane dead-letters them.
    pub parked: Vec<JobEvent>,
    /// The job was claimed for a new worker: the lane must start one.
    pub start: bool,
    /// The job has nothing waiting and nothing in flight.
    pub idle: bool,
}

/// What a job's worker does next.
#[derive(Debug)]
pub enum Next {
    /// Call the plugin with this event (the head of the queue, which stays there until
    /// [`Queues::settle`]).
    Call { event: Box<JobEvent>, replay: bool },
    /// Nothing to do (or the lane closed): the worker ends and the job is free.
    Idle,
    /// The job is no longer known (its cluster was let go): the worker ends.
    Forgotten,
}

/// The end of one (re-)list of one stream, for deletion-while-away detection.
#[derive(Debug, Clone)]
pub struct Listed {
    pub cluster: String,
    pub namespace: Option<String>,
    pub uids: Arc<HashSet<String>>,
    pub job_kind: Arc<JobKind>,
}

/// Every job a lane knows, with its queue.
#[derive(Debug, Default)]
pub struct Queues {
    jobs: HashMap<JobKey, JobState>,
    /// Events in all queues, the ones in flight included.
    pending: u64,
}

impl Queues {
    /// The jobs a plugin's stored cursors describe, nothing queued.
    pub fn from_cursors(cursors: &[Cursor]) -> Queues {
        Queues {
            jobs: cursors
                .iter()
                .map(|c| (key_of(c), JobState::from_cursor(c)))
                .collect(),
            pending: 0,
        }
    }

    /// Events waiting or in flight.
    pub fn pending(&self) -> u64 {
        self.pending
    }

    /// Jobs known.
    pub fn jobs(&self) -> usize {
        self.jobs.len()
    }

    /// When the oldest event still waiting (or in flight) was queued.
    pub fn oldest(&self) -> Option<Instant> {
        self.jobs
            .values()
            .filter_map(|job| job.queue.front().map(|item| item.queued_at))
            .min()
    }

    /// Offers one observed version of a job. `before` returns the events to judge ahead of
    /// it — the transitions missed in a gap — from what was accepted for the job so far. The
    /// mode decides each; what it accepts is queued, unless `cap` versions already wait: those
    /// are returned in [`Offered::parked`].
    pub fn offer(
        &mut self,
        event: &JobEvent,
        mode: DeliveryMode,
        cap: usize,
        now: Instant,
        before: impl FnOnce(&Accepted) -> Vec<JobEvent>,
    ) -> Offered {
        let mut offered = Offered::default();
        let job = self.jobs.entry(event.job_key()).or_insert_with(|| {
            offered.new_job = true;
            JobState::for_event(event)
        });
        let mut events = before(&job.accepted);
        events.push(event.clone());
        for event in events {
            // Only consulted when the version differs from the last one accepted, which is
            // rare for a version still queued; no set is built per event.
            let queue = &job.queue;
            let queued = |rv: &str| {
                queue
                    .iter()
                    .any(|i| !i.replay && i.event.resource_version == rv)
            };
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
                    job.queue.retain(|i| std::mem::take(&mut head) || i.replay);
                    let dropped = (before - job.queue.len()) as u64;
                    self.pending -= dropped;
                    offered.skipped += dropped;
                }
                Decision::Append => {
                    if job.waiting() >= cap {
                        offered.parked.push(event);
                        continue;
                    }
                }
            }
            self.pending += 1;
            job.queue.push_back(Item {
                event,
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
        let job = self
            .jobs
            .entry(event.job_key())
            .or_insert_with(|| JobState::for_event(&event));
        self.pending += 1;
        job.queue.push_back(Item {
            event,
            replay: true,
            queued_at: now,
        });
        job.claim()
    }

    /// The next step of the worker holding `key`. A `Call` leaves the event at the head of
    /// the queue; [`Idle`](Next::Idle) frees the job (and forgets a deleted one).
    pub fn next(&mut self, key: &JobKey, closed: bool) -> Next {
        let Some(job) = self.jobs.get_mut(key) else {
            return Next::Forgotten;
        };
        match job.queue.front() {
            Some(item) if !closed => {
                job.in_flight = true;
                let mut event = item.event.clone();
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
                    self.jobs.remove(key);
                }
                Next::Idle
            }
        }
    }

    /// The call for the head of `key`'s queue was cut short (the lane closed or let the
    /// cluster go): the event stays queued, unacknowledged, and the job is free.
    pub fn release(&mut self, key: &JobKey) {
        if let Some(job) = self.jobs.get_mut(key) {
            job.busy = false;
            job.in_flight = false;
        }
    }

    /// The head of `key`'s queue is acknowledged (delivered or dead-lettered): it leaves the
    /// queue, and a delivered version's phase becomes the next one's `previous_phase`.
    pub fn settle(&mut self, key: &JobKey, replay: bool, phase: Phase) {
        if let Some(job) = self.jobs.get_mut(key) {
            job.in_flight = false;
            job.queue.pop_front();
            if job.queue.is_empty() {
                // An idle job keeps no queue buffer: it would hold room for several whole
                // events (hundreds of bytes each) for every job the lane tracks.
                job.queue = VecDeque::new();
            }
            if !replay {
                job.delivered_phase = Some(phase);
            }
        }
        self.pending = self.pending.saturating_sub(1);
    }

    /// Jobs of the listed stream that the lane knows, were not listed and are not deleted:
    /// their deletion events (a job deleted while jobrelay was away is still delivered).
    pub fn gone(&self, listed: &Listed) -> Vec<JobEvent> {
        self.jobs
            .iter()
            .filter(|(key, job)| {
                key.cluster == listed.cluster
                    && *job.api_version == listed.job_kind.api_version()
                    && *job.kind == listed.job_kind.kind
                    && listed
                        .namespace
                        .as_deref()
                        .is_none_or(|ns| ns == job.namespace)
                    && !job.accepted.deleted
                    && !listed.uids.contains(&key.uid)
            })
            .map(|(key, job)| gone_event(key, job))
            .collect()
    }

    /// First step of letting go of `cluster`: what waits for its jobs is dropped, except the
    /// head of a held job (the call in flight, settled by its worker), and its idle jobs are
    /// forgotten. Returns how many events were dropped.
    pub fn drop_waiting(&mut self, cluster: &str) -> u64 {
        let mut dropped = 0u64;
        for (_, job) in self.jobs.iter_mut().filter(|(k, _)| k.cluster == cluster) {
            let keep = usize::from(job.busy).min(job.queue.len());
            dropped += (job.queue.len() - keep) as u64;
            job.queue.truncate(keep);
        }
        self.jobs
            .retain(|key, job| key.cluster != cluster || job.busy);
        self.pending -= dropped;
        dropped
    }

    /// Whether a worker still holds a job of `cluster`.
    pub fn busy_in(&self, cluster: &str) -> bool {
        self.jobs
            .iter()
            .any(|(k, j)| k.cluster == cluster && j.busy)
    }

    /// Last step of letting go of `cluster`: its jobs are forgotten, with whatever is still
    /// queued for them (a call cut short keeps its item).
    pub fn forget(&mut self, cluster: &str) {
        let mut left = 0u64;
        self.jobs.retain(|key, job| {
            let ours = key.cluster == cluster;
            if ours {
                left += job.queue.len() as u64;
            }
            !ours
        });
        self.pending -= left;
    }

    /// Takes the stored cursors of the clusters `of` selects as the truth for every job of
    /// theirs that has no work in the lane; jobs with work keep their state.
    pub fn reload(&mut self, of: impl Fn(&str) -> bool, cursors: &[Cursor]) {
        self.jobs
            .retain(|key, job| !of(&key.cluster) || job.busy || !job.queue.is_empty());
        for cursor in cursors.iter().filter(|c| of(&c.cluster)) {
            self.jobs
                .entry(key_of(cursor))
                .or_insert_with(|| JobState::from_cursor(cursor));
        }
    }
}

fn key_of(cursor: &Cursor) -> JobKey {
    JobKey {
        cluster: cursor.cluster.clone(),
        uid: cursor.uid.clone(),
    }
}

/// The deletion of a job that vanished unseen. Its version is the last accepted one plus
/// `-gone`, so its id is stable across restarts.
fn gone_event(key: &JobKey, job: &JobState) -> JobEvent {
    let rv = format!(
        "{}-gone",
        job.accepted.resource_version.as_deref().unwrap_or("0")
    );
    let object = serde_json::json!({
        "apiVersion": &*job.api_version,
        "kind": &*job.kind,
        "metadata": {"name": job.name, "namespace": job.namespace, "uid": key.uid},
    });
    JobEvent {
        id: JobEvent::make_id(&key.cluster, &key.uid, &rv),
        transition_key: TransitionKey::Deletion.make(&key.cluster, &key.uid, Phase::Deleted),
        cluster: key.cluster.clone(),
        api_version: job.api_version.to_string(),
        kind: job.kind.to_string(),
        namespace: job.namespace.clone(),
        name: job.name.clone(),
        uid: key.uid.clone(),
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
