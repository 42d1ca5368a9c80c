//! The stories of one cluster's jobs: the facts of the objects around each job, joined to it
//! by uid, whichever object arrives first. A pure state machine; the watch tasks feed it.
//!
//! Objects of a story name their job in one of two ways: a Kueue Workload by the job's uid
//! (its `kueue.x-k8s.io/job-uid` label, or its controlling owner), a pod by its owner, which
//! may be the job itself (a PyTorchJob's pods) or a child of it (a TrainJob's JobSet, whose
//! batch Jobs own the pods). Children are recorded as links (child uid → owner uid), and a
//! pod's job is found by following them up to a job the book knows.
//!
//! Disorder is the normal case across separate watches, so:
//!
//! - **An object before its job** (a Workload created a moment before the watch of the job
//!   kind sees the job) is kept as an orphan under the uid it names, and joined when that job
//!   is seen. Orphans are bounded ([`BookLimits::orphans`]): the oldest goes first, counted in
//!   [`StoryBook::dropped`].
//! - **A job deleted before its objects** (its Workload and pods go after it): the uid is
//!   remembered as gone (a bounded list), and late facts naming it are let go at once instead
//!   of waiting as orphans.
//! - **A job re-created under the same name** has a new uid, so a new, empty story: nothing of
//!   the old one's is keyed by name.
//!
//! Memory: an entry per tracked job (its uid and a pointer), a story for each job an object
//! named, and the bounded orphans, links and gone uids.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

pub use jobrelay_contract::story::Story;

use super::pod_cause::FailureCause;
use super::workload::WorkloadFacts;

/// How far a pod's owners are followed: a TrainJob's pod is three links below it (pod → Job
/// → JobSet → TrainJob); more than this is a loop or a shape no kind has.
const MAX_DEPTH: usize = 8;

/// The bounds of one cluster's book.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BookLimits {
    /// Stories kept for jobs not seen (yet).
    pub orphans: usize,
    /// Child objects remembered with their owner.
    pub links: usize,
    /// Deleted jobs remembered, so their late facts are let go.
    pub gone: usize,
}

impl Default for BookLimits {
    fn default() -> BookLimits {
        BookLimits {
            orphans: 10_000,
            links: 100_000,
            gone: 10_000,
        }
    }
}

/// Whether an observation changed a known job's story.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Noted {
    /// The story of this job (its uid) changed.
    Changed,
    /// Nothing of a known job changed: kept as an orphan, let go, or the same as before.
    Unchanged,
}

/// The stories of one cluster's jobs (see the module).
#[derive(Debug, Default)]
pub struct StoryBook {
    limits: BookLimits,
    /// Jobs seen and not deleted, by uid; a story once an object named the job.
    jobs: HashMap<String, Option<Arc<Story>>>,
    orphans: Bounded<Story>,
    links: Bounded<String>,
    gone: Bounded<()>,
    dropped: u64,
}

impl StoryBook {
    /// An empty book with these bounds.
    pub fn new(limits: BookLimits) -> StoryBook {
        StoryBook {
            limits,
            ..StoryBook::default()
        }
    }

    /// A job seen: its story starts, taking what orphans named it.
    pub fn job_seen(&mut self, uid: &str) {
        if self.jobs.contains_key(uid) {
            return;
        }
        let story = self.orphans.remove(uid).map(Arc::new);
        self.gone.remove(uid);
        self.jobs.insert(uid.to_string(), story);
    }

    /// A version of a job seen: [`StoryBook::job_seen`] and [`StoryBook::story`] in one
    /// lookup for a job already known, as every version after a job's first is.
    pub fn seen(&mut self, uid: &str) -> Option<Arc<Story>> {
        if let Some(story) = self.jobs.get(uid) {
            return story.clone().filter(|s| !s.is_empty());
        }
        self.job_seen(uid);
        self.story(uid)
    }

    /// A job deleted: its story ends, and later facts naming it are let go.
    pub fn job_gone(&mut self, uid: &str) {
        self.jobs.remove(uid);
        self.orphans.remove(uid);
        self.gone.insert(uid.to_string(), (), self.limits.gone);
    }

    /// A child object (`child` uid) owned by `owner` (a job, or another child).
    /// A link already known is left as it is (no copy of either uid), so a job's every
    /// version can report its owner for the cost of one lookup.
    pub fn link(&mut self, child: &str, owner: &str) {
        if child != owner && self.links.get(child).map(String::as_str) != Some(owner) {
            self.links
                .insert(child.to_string(), owner.to_string(), self.limits.links);
        }
    }

    /// A version of a Workload: the story of the job it names (following links, since a
    /// Workload may name a child) takes its facts.
    /// The facts are kept without the uid they named (it is the story's own job, or a child).
    pub fn workload(&mut self, mut facts: WorkloadFacts) -> Noted {
        let Some(named) = facts.job_uid.take() else {
            return Noted::Unchanged;
        };
        self.note(&named, |story| {
            let changed = story.workload.as_ref() != Some(&facts);
            story.workload = Some(facts);
            changed
        })
    }

    /// A pod version owned by `owner`, failing with `cause` or not: the first cause is kept.
    pub fn pod(&mut self, owner: &str, cause: Option<FailureCause>) -> Noted {
        let Some(cause) = cause else {
            return Noted::Unchanged;
        };
        self.note(owner, |story| {
            let first = story.failure.is_none();
            story.failure.get_or_insert(cause);
            first
        })
    }

    /// The story of a job, if an object named it.
    /// Shared, not copied: an event takes this snapshot, and the next change to the story
    /// makes a new one (copy on write) without touching the events already made.
    pub fn story(&self, uid: &str) -> Option<Arc<Story>> {
        self.jobs
            .get(uid)
            .and_then(|s| s.clone())
            .filter(|s| !s.is_empty())
    }

    /// Orphan stories let go for room since the book began.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Orphan stories kept now.
    pub fn orphans(&self) -> usize {
        self.orphans.len()
    }

    /// Applies `change` to the story of the job `named` leads to, or to its orphan.
    fn note(&mut self, named: &str, change: impl FnOnce(&mut Story) -> bool) -> Noted {
        let root = self.root_of(named);
        if self.gone.contains(&root) {
            return Noted::Unchanged;
        }
        if let Some(story) = self.jobs.get_mut(&root) {
            return if change(Arc::make_mut(story.get_or_insert_with(Arc::default))) {
                Noted::Changed
            } else {
                Noted::Unchanged
            };
        }
        // An orphan updated keeps its age: the bound lets go of the one waiting longest.
        if let Some(story) = self.orphans.get_mut(&root) {
            change(story);
            return Noted::Unchanged;
        }
        let mut story = Story::default();
        change(&mut story);
        if self.orphans.insert(root, story, self.limits.orphans) {
            self.dropped += 1;
        }
        Noted::Unchanged
    }

    /// The uid `uid`'s links lead to: the first known job on the way, or the last uid reached.
    pub fn root_of(&self, uid: &str) -> String {
        let mut at = uid;
        for _ in 0..MAX_DEPTH {
            if self.jobs.contains_key(at) {
                break;
            }
            match self.links.get(at) {
                Some(owner) => at = owner,
                None => break,
            }
        }
        at.to_string()
    }
}

/// A map that keeps at most a bound of entries, letting the oldest inserted go first. Each
/// entry carries the number of its insertion, so a key removed and inserted again is as new
/// as its last insertion, not its first.
#[derive(Debug)]
struct Bounded<V> {
    entries: HashMap<String, (u64, V)>,
    order: VecDeque<(u64, String)>,
    next: u64,
}

impl<V> Default for Bounded<V> {
    fn default() -> Bounded<V> {
        Bounded {
            entries: HashMap::new(),
            order: VecDeque::new(),
            next: 0,
        }
    }
}

impl<V> Bounded<V> {
    /// Inserts (or replaces, keeping its age) `key`; returns whether an older entry was let
    /// go for room.
    fn insert(&mut self, key: String, value: V, bound: usize) -> bool {
        match self.entries.get_mut(&key) {
            Some(entry) => entry.1 = value,
            None => {
                self.next += 1;
                self.order.push_back((self.next, key.clone()));
                self.entries.insert(key, (self.next, value));
            }
        }
        let mut evicted = false;
        while self.entries.len() > bound.max(1) {
            let Some((n, oldest)) = self.order.pop_front() else {
                break;
            };
            if self.entries.get(&oldest).is_some_and(|e| e.0 == n) {
                self.entries.remove(&oldest);
                evicted = true;
            }
        }
        // Keys removed by `remove` linger in `order`; drop them once they are most of it.
        if self.order.len() > 2 * self.entries.len() + 16 {
            let entries = &self.entries;
            self.order
                .retain(|(n, k)| entries.get(k).is_some_and(|e| e.0 == *n));
        }
        evicted
    }

    fn remove(&mut self, key: &str) -> Option<V> {
        self.entries.remove(key).map(|e| e.1)
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.entries.get_mut(key).map(|e| &mut e.1)
    }

    fn get(&self, key: &str) -> Option<&V> {
        self.entries.get(key).map(|e| &e.1)
    }

    fn contains(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests;
