//! What the timers read of the view ([`crate::timers`]): each job's stay in a timed state, from
//! the record's phase, times and queue facts (set here from each version's story), and the
//! marks of the timers firing on each job that lists filter on and show.

use std::collections::{BTreeMap, HashMap};

use super::{JobView, read, write};
use crate::interner::Interner;
use crate::record::{JobRecord, Secs};
use crate::timers::{Stay, TimedState};
use jobrelay_contract::event::Phase;
use jobrelay_contract::story::{QueueState, Story};
use jobrelay_contract::uid::Uid;

impl JobView {
    /// Hands `see` every job in a state a timer measures ([`crate::timers`]): queued for
    /// quota, else pending or running, with when that stay began. One cluster at a time,
    /// under its read lock.
    pub fn for_each_stay(&self, mut see: impl FnMut(&Stay<'_>)) {
        for (cluster, shard) in self.shards() {
            let guard = read(&shard);
            let text = |sym| guard.text(sym);
            for (uid, rec) in guard.jobs.iter() {
                if rec.gone != 0 {
                    continue;
                }
                let entered = rec
                    .history
                    .last()
                    .filter(|t| t.phase == rec.phase)
                    .map_or(rec.created, |t| t.at);
                let (state, since) = if rec.queued_since != 0 {
                    (TimedState::Queued, rec.queued_since)
                } else {
                    match rec.phase {
                        // A job waits from its creation unless it left pending and came back.
                        Phase::Pending if rec.started == 0 => (TimedState::Pending, rec.created),
                        Phase::Pending => (TimedState::Pending, entered),
                        Phase::Running => (TimedState::Running, entered),
                        _ => continue,
                    }
                };
                see(&Stay {
                    cluster: &cluster,
                    namespace: text(rec.namespace),
                    name: &rec.name,
                    kind: text(rec.kind),
                    uid,
                    state,
                    since,
                    queue: rec.queue.map(text),
                });
            }
        }
    }

    /// The timers firing after an evaluation, `(cluster, job uid, timer)` each: what a list
    /// filters on (`timer=`) and shows. Replaces what the last evaluation left, so a timer
    /// removed from the main file leaves no mark.
    pub fn set_firing(&self, firing: Vec<(String, Uid, String)>) {
        let mut by_cluster: BTreeMap<String, HashMap<Uid, Vec<String>>> = BTreeMap::new();
        for (cluster, uid, timer) in firing {
            by_cluster
                .entry(cluster)
                .or_default()
                .entry(uid)
                .or_default()
                .push(timer);
        }
        for (cluster, shard) in self.shards() {
            let mut marks = by_cluster.remove(&cluster).unwrap_or_default();
            for timers in marks.values_mut() {
                timers.sort();
            }
            write(&shard).firing = marks;
        }
    }
}

/// Notes whether Kueue holds the job for quota, as its event's story says, and since when and
/// in which queue; a kind that tells no story is never queued.
pub(super) fn set_queued(
    rec: &mut JobRecord,
    strings: &mut Interner<String>,
    story: Option<&Story>,
    phase: Phase,
) {
    let queued = story
        .and_then(|story| story.workload.as_ref())
        .filter(|w| matches!(w.state, QueueState::Queued { .. }) && phase != Phase::Deleted);
    rec.queued_since = queued.map_or(0, |w| {
        w.waiting_since
            .and_then(|t| Secs::try_from(t.timestamp()).ok())
            .filter(|t| *t != 0)
            .unwrap_or(rec.created)
    });
    let name = queued.and_then(|w| w.cluster_queue.as_deref().or(w.local_queue.as_deref()));
    let same = match (rec.queue, name) {
        (Some(sym), Some(name)) => strings.get(sym).map(String::as_str) == Some(name),
        (None, None) => true,
        _ => false,
    };
    if !same {
        if let Some(old) = rec.queue.take() {
            strings.release(old);
        }
        rec.queue = name.map(|n| strings.intern(n.to_string()));
    }
}
