//! What a lane keeps per job, and the origin (API version, kind, namespace) its jobs share.

use std::collections::HashSet;
use std::sync::Arc;

use compact_str::CompactString;

use super::item::Waiting;
use crate::mode::{Accepted, is_end};
use jobrelay_contract::event::{JobEvent, JobKey, Phase};
use jobrelay_state::Cursor;

/// The API version, kind and namespace of a job, shared by every job of the lane that has
/// the same three (a few per cluster): one pointer per job instead of three strings.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct Origin {
    pub(super) api_version: Box<str>,
    pub(super) kind: Box<str>,
    pub(super) namespace: Box<str>,
}

/// The cursor that names a job the lane knows, for its removal.
pub(super) fn cursor_of(plugin: &str, key: &JobKey, job: &JobState) -> Cursor {
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
pub(super) fn origin_of(event: &JobEvent) -> [&str; 3] {
    [&event.api_version, &event.kind, &event.namespace]
}

/// The one shared [`Origin`] with these parts. Only a job new to the lane asks, so the
/// allocations made to look it up are paid once per job.
pub(super) fn intern(
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
pub(super) struct JobState {
    pub(super) accepted: Accepted,
    /// Phase of the last version delivered (the `previous_phase` of the next one).
    pub(super) delivered_phase: Option<Phase>,
    pub(super) queue: Waiting,
    /// A worker holds the job, or it waits in the lane's ready queue for one: one worker
    /// alone takes the job's events, one at a time.
    pub(super) busy: bool,
    /// Claimed, and waiting in the ready queue for a worker to be free.
    pub(super) ready: bool,
    /// The head of the queue is being called: it stays there until settled, and nothing
    /// else may take its place (a `latest` replacement keeps it).
    pub(super) in_flight: bool,
    /// The lane's filter no longer takes the job: it is forgotten once its queue is done.
    pub(super) let_go: bool,
    /// The plugin deferred the head (`deferral.defer`): it waits on purpose until its next
    /// attempt, so the lane's lag leaves it out.
    pub(super) deferred: bool,
    pub(super) origin: Arc<Origin>,
    pub(super) name: CompactString,
}

impl JobState {
    /// A job the lane has not seen before.
    pub(super) fn for_event(event: &JobEvent, origin: Arc<Origin>) -> JobState {
        JobState {
            accepted: Accepted::default(),
            delivered_phase: None,
            queue: Waiting::default(),
            busy: false,
            ready: false,
            in_flight: false,
            let_go: false,
            deferred: false,
            origin,
            name: CompactString::new(&event.name),
        }
    }

    pub(super) fn from_cursor(c: &Cursor, origin: Arc<Origin>) -> JobState {
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
            deferred: false,
            origin,
            name: CompactString::new(&c.name),
        }
    }

    /// Versions waiting that the mode accepted (replays are not counted against the bound).
    pub(super) fn waiting(&self) -> usize {
        self.queue.iter().filter(|i| !i.replay).count()
    }

    /// Claims the job for a new worker when it has work and no worker: `true` means the
    /// caller must start one.
    pub(super) fn claim(&mut self) -> bool {
        if self.busy || self.queue.is_empty() {
            return false;
        }
        self.busy = true;
        true
    }
}
