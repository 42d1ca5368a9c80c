//! The job view: every job the watchers of this replica hold, across its clusters, kept as
//! small records and answered from memory.
//!
//! Fed by the dispatcher with every observation (before delivery is decided, so a follower
//! in a leader election answers too) and every list's end; asked by the API. One lock per
//! cluster: a request walks one cluster at a time, under its read lock, so it never holds up
//! the event path for long and never waits on a cluster's API server — what a cluster that
//! is not synced shows is what was last seen of it (the API says so).
//!
//! Deleted jobs stay visible, marked with when they went, for `keep_deleted`, and at most
//! `max_deleted` of them across the view (the oldest go first): a fleet that churns through
//! jobs does not grow the view without bound.
//!
//! [`spec`] is the main file's `job_view:` section, checked into the [`ViewSettings`] the view
//! runs with; `filter` judges a list's filters on each job; `stays` is what the timers read
//! of the view and the marks of those firing.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;

use compact_str::CompactString;
use parking_lot::RwLock;
use serde::Serialize;

use self::filter::Filter;
use super::interner::{Interner, Sym};
use super::order::{KeyRef, compare};
use super::query::{JobQuery, Position};
use super::record::{JobRecord, LabelSet, Secs, Transition, now_secs, rfc3339, secs_of};
use super::sli::{Sample, Slis};
use jobrelay_contract::event::Phase;
use jobrelay_contract::uid::Uid;
use jobrelay_contract::uid_map::{SHARDS, UidMap};
use jobrelay_watch::tracker::{Listed, Observed};

mod filter;
mod samples;
pub mod spec;
mod stays;
mod story_news;
#[cfg(test)]
mod test_support;
pub mod timeline;

/// How long deleted jobs stay, and how many at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewSettings {
    /// How long a deleted job stays visible (`job_view.keep_deleted`).
    pub keep_deleted_seconds: u32,
    /// The most deleted jobs kept, all clusters together; the oldest go first.
    pub max_deleted: usize,
    /// Namespaces per cluster the SLI metrics label by name; the rest are `other`.
    pub metrics_namespaces: usize,
}

impl Default for ViewSettings {
    fn default() -> ViewSettings {
        ViewSettings {
            keep_deleted_seconds: 3_600,
            max_deleted: 100_000,
            metrics_namespaces: crate::sli::DEFAULT_MAX_NAMESPACES,
        }
    }
}

/// One cluster's jobs with the values they share.
#[derive(Debug, Default)]
struct ClusterJobs {
    jobs: UidMap<JobRecord>,
    /// Namespaces, kind names and raw phases.
    strings: Interner<String>,
    labels: Interner<LabelSet>,
    /// Records of deleted jobs.
    deleted: Deleted,
    /// When the newest live (watched, not listed) version of the cluster arrived (0: none
    /// yet).
    last_event: Secs,
    /// The timers firing on each job, as the last evaluation left them ([`JobView::set_firing`]):
    /// entries only for jobs a timer fires on.
    firing: std::collections::HashMap<Uid, Vec<String>>,
}

/// How many records of deleted jobs a cluster holds, and when the oldest went: a sweep passes
/// over a cluster whose oldest is not yet due, so a view at rest is not walked every tick.
#[derive(Debug, Default)]
struct Deleted {
    count: usize,
    /// No later than the oldest deleted record's time (0: none).
    oldest: Secs,
}

impl Deleted {
    fn add(&mut self, at: Secs) {
        self.count += 1;
        if self.oldest == 0 || at < self.oldest {
            self.oldest = at;
        }
    }

    fn sub(&mut self) {
        self.count = self.count.saturating_sub(1);
        if self.count == 0 {
            self.oldest = 0;
        }
    }
}

impl ClusterJobs {
    fn text(&self, sym: Sym) -> &str {
        self.strings.get(sym).map_or("", String::as_str)
    }

    /// When the oldest deleted record went (0: none).
    fn oldest_gone(&self) -> Secs {
        self.jobs
            .values()
            .filter(|r| r.gone != 0)
            .map(|r| r.gone)
            .min()
            .unwrap_or(0)
    }

    /// Removes the records `go` picks, letting go of what each names.
    fn remove_where(&mut self, mut go: impl FnMut(&JobRecord) -> bool) {
        let ClusterJobs {
            jobs,
            strings,
            labels,
            deleted,
            ..
        } = self;
        jobs.retain(|_, rec| {
            if !go(rec) {
                return true;
            }
            strings.release(rec.namespace);
            strings.release(rec.kind);
            strings.release(rec.raw_phase);
            if let Some(queue) = rec.queue {
                strings.release(queue);
            }
            labels.release(rec.labels);
            if rec.gone != 0 {
                deleted.sub();
            }
            false
        });
    }
}

type Shard = Arc<RwLock<ClusterJobs>>;

/// How many of a cluster's [`SHARDS`] tables a list reads under one hold of its lock. Fewer
/// holds each longer, or more each shorter: the dispatcher waits out one hold when it meets
/// one, and each hold it meets costs a wake-up (see docs/BENCHMARKS.md, "Job view").
const TABLES_PER_HOLD: usize = 16;

/// The jobs of every cluster this replica watches.
#[derive(Debug, Default)]
pub struct JobView {
    clusters: RwLock<BTreeMap<String, Shard>>,
    settings: RwLock<ViewSettings>,
    /// The SLIs of the transitions seen live.
    slis: Slis,
    /// When the view began (seconds since the epoch): a Kueue admission before it is not
    /// counted in the SLIs, as it was not seen happen.
    began: Secs,
}

/// One job in a list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobSummary {
    /// The cluster's name in jobrelay.
    pub cluster: String,
    /// The job's namespace.
    pub namespace: String,
    /// The job's name.
    pub name: String,
    /// The configured kind's name.
    pub kind: String,
    /// The job's `metadata.uid`.
    pub uid: String,
    /// The phase of the latest version seen.
    pub phase: Phase,
    /// The kind's own phase of that version (see `JobEvent::raw_phase`).
    pub raw_phase: String,
    /// RFC 3339: the object's `creationTimestamp`, else when the view first saw it.
    pub created: Option<String>,
    /// RFC 3339: when it first entered `running`.
    pub started: Option<String>,
    /// RFC 3339: when it last succeeded or failed; absent again once it runs again.
    pub finished: Option<String>,
    /// When it was seen deleted.
    pub deleted: Option<String>,
    /// Seconds from its start to its end, or to now while it runs.
    pub duration_seconds: Option<u32>,
    /// How many times it entered `restarting`.
    pub restarts: u16,
    /// The queue Kueue holds it in for quota (ClusterQueue, else LocalQueue), while it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// RFC 3339: since when Kueue holds it (its last requeue, else the Workload's creation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_since: Option<String>,
    /// Times Kueue preempted its Workload, as its story last said.
    #[serde(skip_serializing_if = "is_zero")]
    pub preemptions: u32,
    /// The first failure cause its pods showed (`OOMKilled`, `ImagePullBackOff`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// The timers of `fleet.timers` firing on it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timers: Vec<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One job with what was observed of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobDetail {
    /// What a list shows of it.
    #[serde(flatten)]
    pub summary: JobSummary,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// The phases it entered, oldest first (the first, then the latest ones).
    pub transitions: Vec<TransitionView>,
    /// Those phases and what Kueue did with its Workload, oldest first (only phases for a
    /// kind that tells no story): [`timeline`].
    pub timeline: Vec<timeline::TimelineEntry>,
}

/// One phase a job entered, as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransitionView {
    /// RFC 3339: when it entered the phase, as its status records it or as observed.
    pub at: Option<String>,
    /// The phase entered.
    pub phase: Phase,
    /// Rebuilt from status timestamps after a watch gap rather than observed.
    pub synthetic: bool,
}

/// One page of a list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobPage {
    /// The jobs of this page, in the query's order.
    pub items: Vec<JobSummary>,
    /// Jobs that match after this page.
    pub remaining: u64,
    /// The token for the next page; absent on the last.
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

impl JobView {
    /// An empty view.
    pub fn new(settings: ViewSettings) -> JobView {
        JobView {
            clusters: RwLock::default(),
            slis: Slis::new(settings.metrics_namespaces),
            settings: RwLock::new(settings),
            began: now_secs(),
        }
    }

    /// New settings (the main file changed): the deleted jobs' limits apply from the next
    /// [`sweep`](JobView::sweep), the SLI namespace cap to namespaces not labeled yet.
    pub fn set_settings(&self, settings: ViewSettings) {
        self.slis.set_max_namespaces(settings.metrics_namespaces);
        *self.settings.write() = settings;
    }

    /// The SLIs of the transitions seen live (see [`crate::sli`]).
    pub fn slis(&self) -> &Slis {
        &self.slis
    }

    /// Per cluster, when its newest live version arrived (seconds since the epoch), for the
    /// clusters that delivered one.
    pub fn last_events(&self) -> Vec<(String, Secs)> {
        self.shards()
            .into_iter()
            .filter_map(|(cluster, shard)| {
                let at = read(&shard).last_event;
                (at != 0).then_some((cluster, at))
            })
            .collect()
    }

    /// The settings in force.
    pub fn settings(&self) -> ViewSettings {
        *self.settings.read()
    }

    fn shard(&self, cluster: &str) -> Option<Shard> {
        let clusters = self.clusters.read();
        clusters.get(cluster).cloned()
    }

    fn shard_or_new(&self, cluster: &str) -> Shard {
        if let Some(shard) = self.shard(cluster) {
            return shard;
        }
        let mut clusters = self.clusters.write();
        clusters.entry(cluster.to_string()).or_default().clone()
    }

    /// The clusters with jobs here.
    pub fn clusters(&self) -> Vec<String> {
        let clusters = self.clusters.read();
        clusters.keys().cloned().collect()
    }

    /// Jobs held, deleted ones included.
    pub fn len(&self) -> usize {
        self.shards().iter().map(|(_, s)| read(s).jobs.len()).sum()
    }

    /// Whether no cluster holds a job, deleted or not.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shards(&self) -> Vec<(String, Shard)> {
        let clusters = self.clusters.read();
        clusters
            .iter()
            .map(|(n, s)| (n.clone(), s.clone()))
            .collect()
    }

    /// One observed version.
    pub fn observe(&self, observed: &Observed) {
        let event = &observed.event;
        let shard = self.shard_or_new(&event.cluster);
        let mut guard = write(&shard);
        let ClusterJobs {
            jobs,
            strings,
            labels,
            deleted,
            last_event,
            ..
        } = &mut *guard;
        let uid = Uid::new(&event.uid);
        let now = now_secs();
        let stated = (event.phase != Phase::Deleted)
            .then(|| secs_of(&event.transition_time))
            .flatten();
        let at = stated.unwrap_or(now);
        if !observed.from_list {
            *last_event = now;
        }
        // Watch lag: how long after the cluster recorded a transition it reached here. Only a
        // live version that enters a new phase, with the time its status records for it,
        // measures that: any other version carries an older transition's time.
        let lag = |entered: bool| {
            if entered
                && !observed.from_list
                && !event.synthetic
                && let Some(stated) = stated
            {
                self.slis
                    .record_lag(&event.cluster, f64::from(now.saturating_sub(stated)));
            }
        };
        let transition = Transition {
            at,
            phase: event.phase,
            synthetic: event.synthetic,
        };
        match jobs.get_mut(&uid) {
            Some(rec) => {
                if strings.get(rec.raw_phase).map(String::as_str) != Some(&event.raw_phase) {
                    strings.release(rec.raw_phase);
                    rec.raw_phase = strings.intern(event.raw_phase.clone());
                }
                if !labels.get(rec.labels).is_some_and(|l| l.is(&event.labels)) {
                    labels.release(rec.labels);
                    rec.labels = labels.intern(LabelSet::of(&event.labels));
                }
                if event.phase == Phase::Deleted && rec.gone == 0 {
                    rec.gone = now;
                    deleted.add(now);
                } else if event.phase != Phase::Deleted && rec.gone != 0 {
                    rec.gone = 0;
                    deleted.sub();
                }
                let before = (rec.phase, rec.started);
                lag(rec.phase != event.phase);
                rec.enter(transition);
                self.take_story(&event.cluster, strings, rec, event.story.as_deref(), now);
                if !observed.from_list {
                    self.sample(&event.cluster, strings, rec, before, event);
                }
            }
            None => {
                lag(true);
                let gone = if event.phase == Phase::Deleted {
                    deleted.add(now);
                    now
                } else {
                    0
                };
                let created = observed
                    .created
                    .and_then(|c| Secs::try_from(c).ok())
                    .filter(|c| *c != 0)
                    .unwrap_or(at);
                let mut rec = JobRecord {
                    name: CompactString::new(&event.name),
                    namespace: strings.intern(event.namespace.clone()),
                    kind: strings.intern(observed.kind.name.clone()),
                    raw_phase: strings.intern(event.raw_phase.clone()),
                    labels: labels.intern(LabelSet::of(&event.labels)),
                    created,
                    started: 0,
                    finished: 0,
                    gone,
                    phase: event.phase,
                    restarts: 0,
                    history: Box::default(),
                    queued_since: 0,
                    queue: None,
                    trail: None,
                };
                rec.enter(transition);
                let story = event.story.as_deref();
                self.take_story(&event.cluster, strings, &mut rec, story, now);
                if !observed.from_list {
                    self.sample(&event.cluster, strings, &rec, (Phase::Unknown, 0), event);
                }
                jobs.insert(uid, rec);
            }
        }
    }

    /// A (re-)list ended: the stream's jobs that were not listed are gone (no deletion event
    /// will come for a job deleted while the stream was down).
    pub fn listed(&self, listed: &Listed) {
        let Some(shard) = self.shard(&listed.cluster) else {
            return;
        };
        let mut guard = write(&shard);
        let ClusterJobs {
            jobs,
            strings,
            deleted,
            ..
        } = &mut *guard;
        let Some(kind) = strings.find(&listed.kind.name) else {
            return;
        };
        let namespace = match &listed.namespace {
            Some(ns) => match strings.find(ns) {
                Some(sym) => Some(sym),
                None => return,
            },
            None => None,
        };
        let now = now_secs();
        for (uid, rec) in jobs.iter_mut() {
            if rec.kind != kind
                || rec.gone != 0
                || namespace.is_some_and(|ns| ns != rec.namespace)
                || listed.uids.contains(uid)
            {
                continue;
            }
            rec.gone = now;
            deleted.add(now);
            rec.enter(Transition {
                at: now,
                phase: Phase::Deleted,
                synthetic: true,
            });
        }
    }

    /// A cluster is no longer watched here (removed, or handed to another replica).
    pub fn forget_cluster(&self, cluster: &str) {
        let mut clusters = self.clusters.write();
        clusters.remove(cluster);
        self.slis.forget_cluster(cluster);
    }

    /// Keeps only the jobs of the kinds named (the main file's `kinds` changed: a kind no
    /// longer watched would otherwise stay, as last seen, for ever).
    pub fn retain_kinds(&self, kinds: &[&str]) {
        for (_, shard) in self.shards() {
            let mut jobs = write(&shard);
            let keep: Vec<Sym> = kinds
                .iter()
                .filter_map(|k| jobs.strings.find(&k.to_string()))
                .collect();
            jobs.remove_where(|rec| !keep.contains(&rec.kind));
        }
    }

    /// Lets deleted jobs go: those deleted longer than `keep_deleted` ago, then the oldest
    /// over `max_deleted`.
    pub fn sweep(&self, now: Secs) {
        let settings = self.settings();
        let keep = settings.keep_deleted_seconds;
        let shards = self.shards();
        let mut total = 0;
        for (_, shard) in &shards {
            let mut jobs = write(shard);
            if jobs.deleted.count > 0 && now.saturating_sub(jobs.deleted.oldest) >= keep {
                jobs.remove_where(|rec| rec.gone != 0 && now.saturating_sub(rec.gone) >= keep);
                jobs.deleted.oldest = jobs.oldest_gone();
            }
            total += jobs.deleted.count;
        }
        if total <= settings.max_deleted {
            return;
        }
        let mut times: Vec<Secs> = Vec::with_capacity(total);
        for (_, shard) in &shards {
            times.extend(
                read(shard)
                    .jobs
                    .values()
                    .filter(|r| r.gone != 0)
                    .map(|r| r.gone),
            );
        }
        if times.len() <= settings.max_deleted {
            return;
        }
        // The cut-off time that leaves at most `max_deleted` (as counted here; a job deleted
        // meanwhile waits for the next sweep): older ones go, and of those at the cut-off,
        // only as many as are over.
        times.sort_unstable();
        let mut excess = times.len() - settings.max_deleted;
        let cut = times[excess - 1];
        for (_, shard) in &shards {
            let mut jobs = write(shard);
            jobs.remove_where(|rec| {
                let go = excess > 0 && rec.gone != 0 && rec.gone <= cut;
                excess -= usize::from(go);
                go
            });
            jobs.deleted.oldest = jobs.oldest_gone();
        }
    }

    /// One page of the jobs `query` selects, in its order.
    pub fn list(&self, query: &JobQuery) -> JobPage {
        let order = query.order();
        let now = now_secs();
        let limit = query.limit.max(1);
        let mut best: BinaryHeap<Ranked> = BinaryHeap::with_capacity(limit + 1);
        let mut matched: u64 = 0;
        let after = query.after.as_ref().map(Position::key);
        for (cluster, shard) in self.shards() {
            if !query.clusters.is_empty() && !query.clusters.contains(&cluster) {
                continue;
            }
            // A few of the cluster's tables at a time, the lock let go between them: the
            // dispatcher, which takes it to write every observed version, waits for a part of
            // a cluster's scan at most, not the whole of it. Interned values may change
            // between parts, so the filter is resolved again for each.
            for parts in (0..SHARDS).step_by(TABLES_PER_HOLD) {
                let jobs = read(&shard);
                let Some(filter) = Filter::of(query, &jobs) else {
                    break;
                };
                let mut verdicts = vec![0u8; jobs.labels.slots()];
                let part_jobs = (parts..parts + TABLES_PER_HOLD).flat_map(|p| jobs.jobs.part(p));
                for (uid, rec) in part_jobs {
                    if !filter.takes(uid, rec, &jobs, &mut verdicts) {
                        continue;
                    }
                    let key = KeyRef::of(order.field, &cluster, jobs.text(rec.namespace), rec, uid);
                    if let Some(after) = &after
                        && compare(order.descending, &key, after) != Ordering::Greater
                    {
                        continue;
                    }
                    matched += 1;
                    if best.len() == limit
                        && let Some(worst) = best.peek()
                        && compare(order.descending, &key, &worst.position.key()) != Ordering::Less
                    {
                        continue;
                    }
                    best.push(Ranked {
                        position: key.owned(),
                        summary: summary(&cluster, uid, rec, &jobs, now),
                        descending: order.descending,
                    });
                    if best.len() > limit {
                        best.pop();
                    }
                }
            }
        }
        let ranked = best.into_sorted_vec();
        let remaining = matched - ranked.len() as u64;
        let next = match ranked.last() {
            Some(last) if remaining > 0 => Some(query.token_after(last.position.clone())),
            _ => None,
        };
        JobPage {
            items: ranked.into_iter().map(|r| r.summary).collect(),
            remaining,
            next,
        }
    }

    /// The jobs named `namespace/name` on `cluster`: the one that exists first, then those
    /// deleted, most recent first.
    pub fn find(&self, cluster: &str, namespace: &str, name: &str) -> Vec<JobDetail> {
        let Some(shard) = self.shard(cluster) else {
            return Vec::new();
        };
        let jobs = read(&shard);
        let Some(ns) = jobs.strings.find(&namespace.to_string()) else {
            return Vec::new();
        };
        let now = now_secs();
        let mut found: Vec<(Secs, JobDetail)> = jobs
            .jobs
            .iter()
            .filter(|(_, rec)| rec.namespace == ns && rec.name == name)
            .map(|(uid, rec)| {
                let detail = JobDetail {
                    summary: summary(cluster, uid, rec, &jobs, now),
                    labels: jobs
                        .labels
                        .get(rec.labels)
                        .map(LabelSet::to_map)
                        .unwrap_or_default(),
                    transitions: rec
                        .history
                        .iter()
                        .map(|t| TransitionView {
                            at: rfc3339(t.at),
                            phase: t.phase,
                            synthetic: t.synthetic,
                        })
                        .collect(),
                    timeline: timeline::timeline(rec),
                };
                (rec.gone, detail)
            })
            .collect();
        // Existing (gone 0) first, then the most recently deleted.
        found.sort_by_key(|(gone, _)| if *gone == 0 { 0 } else { Secs::MAX - gone });
        found.into_iter().map(|(_, d)| d).collect()
    }
}

fn read(shard: &Shard) -> parking_lot::RwLockReadGuard<'_, ClusterJobs> {
    shard.read()
}

fn write(shard: &Shard) -> parking_lot::RwLockWriteGuard<'_, ClusterJobs> {
    shard.write()
}

fn summary(cluster: &str, uid: &Uid, rec: &JobRecord, jobs: &ClusterJobs, now: Secs) -> JobSummary {
    JobSummary {
        cluster: cluster.to_string(),
        namespace: jobs.text(rec.namespace).to_string(),
        name: rec.name.to_string(),
        kind: jobs.text(rec.kind).to_string(),
        uid: uid.to_string(),
        phase: rec.phase,
        raw_phase: jobs.text(rec.raw_phase).to_string(),
        created: rfc3339(rec.created),
        started: rfc3339(rec.started),
        finished: rfc3339(rec.finished),
        deleted: rfc3339(rec.gone),
        duration_seconds: rec.duration(now),
        restarts: rec.restarts,
        queue: rec.queue.map(|q| jobs.text(q).to_string()),
        queued_since: rfc3339(rec.queued_since),
        preemptions: rec.trail.as_ref().map_or(0, |t| t.preemptions),
        cause: rec
            .trail
            .as_ref()
            .and_then(|t| t.cause.as_deref())
            .map(str::to_string),
        timers: jobs.firing.get(uid).cloned().unwrap_or_default(),
    }
}

/// A job kept for the page, ordered so the heap's top is the worst kept.
struct Ranked {
    position: Position,
    summary: JobSummary,
    descending: bool,
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Ranked) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Ranked) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Ranked) -> Ordering {
        compare(self.descending, &self.position.key(), &other.position.key())
    }
}

#[cfg(test)]
mod tests;
