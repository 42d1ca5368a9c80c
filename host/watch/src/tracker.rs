//! The per-job state of one watch stream, as a state machine with no tasks and no I/O: a
//! watcher event in, the observations it means out.
//!
//! A [`Tracker`] keeps, per job, only the last resourceVersion seen, to drop versions seen
//! again within the stream's life (re-lists, reconnects), and the stay that version was in, to
//! key the next one ([`Stay`]). Every new version becomes a [`JobEvent`]: its status
//! normalized, its transition key, its labels and annotations (without `kubectl apply`'s copy
//! of the object) and its object's text as the API server sent it, `managedFields` left out
//! (its `previous_phase` is left to each plugin's lane). Each (re-)list ends in an
//! [`Observation::Listed`] naming every job listed, so that lanes can tell which jobs went
//! away unseen. `readable` first reads each object the stream receives, for the tracker's
//! kind: an object whose status cannot be read is still delivered, with phase `unknown`; one
//! whose metadata cannot be read is skipped, and reported.
//!
//! The task that drives it (the stream, its retries, finalizer adders and health) is
//! [`crate::watcher`].

use std::collections::HashSet;
use std::sync::Arc;

use compact_str::CompactString;
use kube::core::ObjectMeta;
use kube::runtime::watcher::Event;
use serde_json::Value;

use super::catch_up;
use super::kinds::JobKind;
use super::lenient::{self, LenientObject, Unreadable};
use super::normalize::{Normalized, normalize};
use super::object::JobObject;
use super::story::queue_phase;
use super::transition_key::Stay;
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_contract::story::Story;
use jobrelay_contract::uid::Uid;
use jobrelay_contract::uid_map::UidMap;

/// What a stream tells the lanes.
#[expect(
    clippy::large_enum_variant,
    reason = "versions are the common case and move through a channel once; boxing them would \
              add an allocation per event to save space in the rare `Listed`"
)]
#[derive(Debug, Clone)]
pub enum Observation {
    /// One version of one job.
    Version(Observed),
    /// A (re-)list finished.
    Listed(Listed),
    /// What the objects around a job say changed, with no version of the job.
    Story(StoryNews),
}

/// A job's story changed through one of its objects alone (a Workload admitted, requeued or
/// evicted, a pod failing) — for the job view, whose queue, timeline and timers follow it
/// at once. Not for plugins: an event is a version of the job, and carries the story as it
/// was when that version was seen ([`crate::story::sources`]).
#[derive(Debug, Clone)]
pub struct StoryNews {
    /// The cluster's name in jobrelay.
    pub cluster: Arc<str>,
    /// The job's `metadata.uid`.
    pub uid: String,
    /// Its story now.
    pub story: Arc<jobrelay_contract::story::Story>,
}

/// One version of one job, as its stream saw it: what the lanes are offered, unchanged.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The event this version makes, as plugins would get it.
    pub event: JobEvent,
    /// The configured kind the stream watches (its name, normalizer, finalizer setting).
    pub kind: Arc<JobKind>,
    /// Seen in a (re-)list rather than a watch event: a gap may lie behind it.
    pub from_list: bool,
    /// The object's `metadata.creationTimestamp`, in seconds since the epoch, when it had
    /// one: not part of the event plugins get, but the start of a job's life in the fleet's
    /// job view (its queue wait is measured from it).
    pub created: Option<i64>,
}

/// The end of one (re-)list: these are all the jobs of this cluster, kind and namespace. A
/// lane reports the jobs it knows and that are not here as deleted.
#[derive(Debug, Clone)]
pub struct Listed {
    /// The cluster listed.
    pub cluster: Arc<str>,
    /// The configured kind listed.
    pub kind: Arc<JobKind>,
    /// `None`: the stream watches every namespace.
    pub namespace: Option<String>,
    /// Every job the list found, unreadable objects included (they exist, so they are not
    /// deleted).
    pub uids: Arc<HashSet<Uid>>,
}

/// Turns watcher events into observations, remembering per job only the last version seen,
/// to drop versions seen again within this stream's life (re-lists, reconnects), and the stay
/// it was in, to key the next one ([`Stay`]). Whole objects are never retained; per-plugin
/// state (what was delivered) lives in the lanes.
#[derive(Debug)]
pub struct Tracker {
    cluster: Arc<str>,
    kind: Arc<JobKind>,
    namespace: Option<String>,
    /// One record per tracked job (a canonical uid in 16 bytes; the version and the stay's
    /// time inline up to 24 bytes each): no allocation of its own in the common case.
    jobs: UidMap<Seen>,
    /// Uids listed since the last `Init`; `None` outside a (re-)list.
    listing: Option<HashSet<Uid>>,
}

/// What a tracker remembers of one job.
#[derive(Debug)]
struct Seen {
    resource_version: CompactString,
    stay: Stay,
}

impl Tracker {
    /// A tracker for the stream of `kind` on `cluster`, in `namespace` or (`None`) in every
    /// namespace, with no job seen yet.
    pub fn new(cluster: Arc<str>, kind: Arc<JobKind>, namespace: Option<String>) -> Self {
        Tracker {
            cluster,
            kind,
            namespace,
            jobs: UidMap::default(),
            listing: None,
        }
    }

    /// Notes, during a (re-)list, a job whose object could not be read: it exists, so lanes
    /// must not take it as deleted, but it has no version to deliver.
    pub fn listed_unreadable(&mut self, uid: &str) {
        if let Some(listing) = self.listing.as_mut() {
            listing.insert(Uid::new(uid));
        }
    }

    /// Number of jobs currently tracked.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether no job is tracked.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Feed one watcher event; returns what it means, in order.
    pub fn observe(&mut self, event: Event<JobObject>) -> Vec<Observation> {
        self.observe_with(event, None)
    }

    /// [`Tracker::observe`] for a kind that tells its story: `story` is the job's as its
    /// version is seen ([`crate::story::sources::Stories::for_version`]). The event carries
    /// it, and takes from its Workload the phases the job's status cannot say (`queued`,
    /// `preempted`: [`crate::story::queue_phase`]), each a stay with its own key.
    pub fn observe_with(
        &mut self,
        event: Event<JobObject>,
        story: Option<Arc<Story>>,
    ) -> Vec<Observation> {
        let (event, from_list) = match event {
            Event::Init => {
                self.listing = Some(HashSet::new());
                return Vec::new();
            }
            Event::InitDone => return self.finish_listing().into_iter().collect(),
            Event::InitApply(obj) => {
                if let (Some(listing), Some(uid)) =
                    (self.listing.as_mut(), obj.metadata.uid.as_deref())
                {
                    listing.insert(Uid::new(uid));
                }
                (self.apply(obj, story), true)
            }
            Event::Apply(obj) => (self.apply(obj, story), false),
            Event::Delete(obj) => (self.delete(obj, story), false),
        };
        event
            .map(|(event, created)| {
                Observation::Version(Observed {
                    event,
                    kind: self.kind.clone(),
                    from_list,
                    created,
                })
            })
            .into_iter()
            .collect()
    }

    fn apply(
        &mut self,
        mut obj: JobObject,
        story: Option<Arc<Story>>,
    ) -> Option<(JobEvent, Option<i64>)> {
        let created = created_of(&obj);
        let uid = obj.metadata.uid.take()?;
        let rv = obj.metadata.resource_version.take()?;
        let key = Uid::new(&uid);
        let previous = match self.jobs.get(&key) {
            // The same version seen again (re-list, reconnect).
            Some(seen) if seen.resource_version == rv => return None,
            seen => seen.map(|s| &s.stay),
        };
        let (event, stay) = self.build(obj, uid, rv, None, previous, story);
        let resource_version = CompactString::from(event.resource_version.as_str());
        self.jobs.insert(
            key,
            Seen {
                resource_version,
                stay,
            },
        );
        Some((event, created))
    }

    /// Whether `story`, changed with no version of job `uid`, puts the job into a stay in
    /// Kueue's queue (`queued`, `preempted`) other than the one its last version is in: then
    /// [`Tracker::restory`] with its object makes the event the job's own stream would not.
    /// Leaving such a stay needs none: Kueue unsuspends a job it admits, which is a version.
    pub fn wants_story(&self, uid: &str, story: &Story) -> bool {
        let Some(seen) = self.jobs.get(&Uid::new(uid)) else {
            return false;
        };
        // What its status said is not kept (a tracked job's record stays small): a job in a
        // queue stay was suspended or pending, or running as a preemption stopped it, and
        // `suspended` is what the story could refine either way. The job read again decides.
        let said = match seen.stay.phase() {
            Phase::Queued | Phase::Preempted => Phase::Suspended,
            phase => phase,
        };
        queue_phase::queue_stay(said, Some(story))
            .is_some_and(|queue| queue.phase != seen.stay.phase())
    }

    /// The event of a job's story changed alone (see [`Tracker::wants_story`]): `obj` is the
    /// job read again, `story` its story now. Only for the very version the tracker last saw —
    /// a newer one comes through the watch, with the story it then has, and an older one (a
    /// read that crossed a watch event) is no news. The event is that version in its new
    /// stay, its resourceVersion marked with the stay as its key names it
    /// (`1234~queued@2026-12-07T10:00:00Z#2`), so its id is its own, and the same stay gives
    /// the same id after a restart.
    pub fn restory(&mut self, mut obj: JobObject, story: Option<Arc<Story>>) -> Vec<Observation> {
        let created = created_of(&obj);
        let (Some(uid), Some(rv)) = (
            obj.metadata.uid.take(),
            obj.metadata.resource_version.take(),
        ) else {
            return Vec::new();
        };
        let key = Uid::new(&uid);
        let Some(seen) = self.jobs.get(&key).filter(|s| s.resource_version == rv) else {
            return Vec::new();
        };
        let said = match obj.unreadable() {
            None => normalize(&self.kind.normalizer, obj.view()).phase,
            Some(_) => Phase::Unknown,
        };
        let Some(queue) = queue_phase::queue_stay(said, story.as_deref())
            .filter(|queue| queue.phase != seen.stay.phase())
        else {
            return Vec::new();
        };
        let number = match queue.n {
            1 => String::new(),
            n => format!("#{n}"),
        };
        let marked = match &queue.since {
            Some(since) => format!("{rv}~{}@{since}{number}", queue.phase),
            None => format!("{rv}~{}{number}", queue.phase),
        };
        let previous = seen.stay.clone();
        let (event, stay) = self.build(obj, uid, marked, None, Some(&previous), story);
        self.jobs.insert(
            key,
            Seen {
                resource_version: CompactString::from(rv),
                stay,
            },
        );
        vec![Observation::Version(Observed {
            event,
            kind: self.kind.clone(),
            from_list: false,
            created,
        })]
    }

    fn delete(
        &mut self,
        mut obj: JobObject,
        story: Option<Arc<Story>>,
    ) -> Option<(JobEvent, Option<i64>)> {
        let created = created_of(&obj);
        let uid = obj.metadata.uid.take()?;
        let previous = self.jobs.remove(&Uid::new(&uid));
        let mut rv = obj.metadata.resource_version.take().unwrap_or_default();
        if previous.as_ref().map(|s| s.resource_version.as_str()) == Some(rv.as_str())
            || rv.is_empty()
        {
            // Keep ids unique even if the server reused the last version for the deletion.
            rv = format!("{rv}-deleted");
        }
        let (event, _) = self.build(obj, uid, rv, Some(Phase::Deleted), None, story);
        Some((event, created))
    }

    /// After a (re-)list, forget jobs that were not listed and tell the lanes which jobs
    /// exist: each lane reports the jobs it knows and that are gone as deleted (no DELETED
    /// event will ever come for them).
    fn finish_listing(&mut self) -> Option<Observation> {
        let listed = self.listing.take()?;
        self.jobs.retain(|uid, _| listed.contains(uid));
        Some(Observation::Listed(Listed {
            cluster: self.cluster.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            uids: Arc::new(listed),
        }))
    }

    /// The event for one version, and the stay it is in given the stay of the job's version
    /// seen before (`previous`); `previous_phase` is filled in per plugin by its lane.
    fn build(
        &self,
        mut obj: JobObject,
        uid: String,
        rv: String,
        force: Option<Phase>,
        previous: Option<&Stay>,
        story: Option<Arc<Story>>,
    ) -> (JobEvent, Stay) {
        // The status view, or the whole object for a field rule reading elsewhere (decoded
        // when the object was read, see `readable`).
        let tree = obj.view();
        let n = match obj.unreadable() {
            None => normalize(&self.kind.normalizer, tree),
            Some(why) => Normalized {
                phase: Phase::Unknown,
                raw_phase: String::new(),
                reason: Some("StatusUnreadable".into()),
                message: Some(why.to_string()),
                transition_time: None,
            },
        };
        let mut n = n;
        let mut phase = force.unwrap_or(n.phase);
        // The Workload's phase, when it says one the status cannot: its stay is keyed and
        // timed by the Workload, and Kueue's reason and message say why.
        let queue = queue_phase::queue_stay(phase, story.as_deref());
        let recorded = if phase == Phase::Deleted {
            catch_up::Recorded::Unrecorded
        } else if let Some(queue) = queue {
            phase = queue.phase;
            n.reason = Some(queue.reason).filter(|r| !r.is_empty());
            n.message = Some(queue.message).filter(|m| !m.is_empty());
            n.transition_time = queue.since.clone();
            let number = queue.n;
            queue.since.map_or(catch_up::Recorded::Unrecorded, |at| {
                catch_up::Recorded::Entered { at, n: number }
            })
        } else {
            catch_up::recorded(&self.kind.normalizer, tree, &n)
        };
        let in_created_stay = recorded == catch_up::Recorded::Created;
        let stay = Stay::next(previous, phase, recorded, &rv);
        let transition_key = stay.key(&self.cluster, &uid);
        // A stay whose status records no time: the one the job was created in began at its
        // creation (the API server's clock, which the controllers' later entries follow); any
        // other, when jobrelay saw it. The cursor keeps this time, and a catch-up counts the
        // recorded entries before it as delivered — jobrelay's clock, a second ahead of a
        // controller that wrote the next phase in the creation's second, would lose it.
        let transition_time = match (phase, n.transition_time) {
            (Phase::Deleted, _) => now_rfc3339(),
            (_, Some(time)) => time,
            (_, None) => match created_of(&obj) {
                Some(created) if in_created_stay => seconds_rfc3339(created),
                _ => now_rfc3339(),
            },
        };
        let metadata = std::mem::take(&mut obj.metadata);
        let text = self.typed_text(obj);
        let ObjectMeta {
            namespace,
            name,
            generation,
            labels,
            annotations,
            ..
        } = metadata;
        let mut annotations = annotations.unwrap_or_default();
        annotations.remove(LAST_APPLIED);
        let event = JobEvent {
            id: JobEvent::make_id(&self.cluster, &uid, &rv),
            transition_key,
            cluster: self.cluster.to_string(),
            api_version: self.kind.api_version(),
            kind: self.kind.kind.clone(),
            namespace: namespace.unwrap_or_default(),
            name: name.unwrap_or_default(),
            uid,
            resource_version: rv,
            generation,
            phase,
            raw_phase: n.raw_phase,
            reason: n.reason,
            message: n.message,
            previous_phase: None,
            transition_time,
            labels: labels.unwrap_or_default(),
            annotations,
            object_json: text,
            synthetic: false,
            story,
        };
        (event, stay)
    }

    /// The object's text, with this stream's `apiVersion` and `kind` when it had none (as
    /// text) of its own.
    fn typed_text(&self, obj: JobObject) -> Arc<str> {
        if obj.typed() {
            return obj.into_text();
        }
        let mut whole = obj.whole().unwrap_or_default();
        if let Some(map) = whole.as_object_mut() {
            map.insert("apiVersion".into(), Value::String(self.kind.api_version()));
            map.insert("kind".into(), Value::String(self.kind.kind.clone()));
        }
        Arc::from(whole.to_string())
    }
}

/// The object's creation time, in seconds since the epoch.
fn created_of(obj: &JobObject) -> Option<i64> {
    obj.metadata
        .creation_timestamp
        .as_ref()
        .map(|time| time.0.as_second())
}

/// The annotation `kubectl apply` keeps a whole copy of the object in: left out of events.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Seconds since the epoch as RFC 3339 text, as statuses write their times.
fn seconds_rfc3339(seconds: i64) -> String {
    chrono::DateTime::from_timestamp(seconds, 0).map_or_else(now_rfc3339, |t| {
        t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    })
}

/// The event with its object read: `None` when nothing can be made of it. The second part is
/// the report of an object that could not be read whole, to be logged and counted: with its
/// metadata read, it is still delivered, its status unreadable (phase `unknown`, the text as
/// sent); without, it is skipped, and a list notes it as existing.
pub(crate) fn readable(
    event: Event<LenientObject>,
    tracker: &mut Tracker,
) -> (Option<Event<JobObject>>, Option<String>) {
    let whole = !tracker.kind.normalizer.reads_status_only();
    #[expect(
        clippy::result_large_err,
        reason = "both sides hold an ObjectMeta; the result is taken apart at once, never kept"
    )]
    let read = |LenientObject(obj): LenientObject| -> Result<JobObject, Unreadable> {
        let mut object = obj?;
        if whole && let Err(e) = object.decode_whole() {
            let metadata = std::mem::take(&mut object.metadata);
            return Err(Unreadable {
                metadata,
                reason: e.to_string(),
                text: Some(object.into_text()),
            });
        }
        Ok(object)
    };
    let report = |bad: &Unreadable| format!("{}: {}", lenient::label(&bad.metadata), bad.reason);
    // What can still be delivered of an object that could not be read whole.
    let salvage = |bad: Unreadable| -> (Option<JobObject>, String) {
        let report = report(&bad);
        let known = bad.metadata.uid.is_some() && bad.metadata.resource_version.is_some();
        let object = match bad.text {
            Some(text) if known => {
                Some(JobObject::status_unreadable(bad.metadata, text, bad.reason))
            }
            _ => None,
        };
        (object, report)
    };
    match event {
        Event::Init => (Some(Event::Init), None),
        Event::InitDone => (Some(Event::InitDone), None),
        Event::InitApply(obj) => match read(obj) {
            Ok(object) => (Some(Event::InitApply(object)), None),
            Err(bad) => {
                if let Some(uid) = &bad.metadata.uid {
                    tracker.listed_unreadable(uid);
                }
                let (object, report) = salvage(bad);
                (object.map(Event::InitApply), Some(report))
            }
        },
        Event::Apply(obj) => match read(obj) {
            Ok(object) => (Some(Event::Apply(object)), None),
            Err(bad) => {
                let (object, report) = salvage(bad);
                (object.map(Event::Apply), Some(report))
            }
        },
        // A deletion needs only the metadata.
        Event::Delete(obj) => (
            Some(Event::Delete(read(obj).unwrap_or_else(|bad| {
                JobObject::from_metadata(bad.metadata)
            }))),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tracker() -> Tracker {
        let kind = JobKind::builtin("volcano-job").expect("built-in");
        Tracker::new(Arc::from("alpha"), Arc::new(kind), None)
    }

    /// A story of a Workload alone in `state`, waiting since `since`, evicted at `evicted`.
    fn workload_story(
        state: jobrelay_contract::story::QueueState,
        since: &str,
        evicted: Option<&str>,
    ) -> Arc<Story> {
        let at = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok();
        Arc::new(Story {
            workload: Some(jobrelay_contract::story::WorkloadFacts {
                job_uid: None,
                state,
                cluster_queue: Some("a100".into()),
                local_queue: None,
                waiting_since: at(since),
                admitted_at: None,
                evicted_at: evicted.and_then(at),
                past_execution_seconds: 0,
                evictions: Default::default(),
                requeues: 0,
                accelerators: Default::default(),
            }),
            failure: None,
        })
    }

    fn job(uid: &str, rv: &str, phase: &str) -> JobObject {
        JobObject::from_json(&json!({
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": format!("job-{uid}"), "namespace": "ml", "uid": uid,
                         "resourceVersion": rv, "generation": 1,
                         "labels": {"team": "nlp"},
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "note": "x"},
                         "managedFields": [{"manager": "kubectl"}]},
            "status": {"state": {"phase": phase, "lastTransitionTime": "2026-05-01T00:00:00Z"}}
        }).to_string())
        .expect("valid object")
    }

    fn versions(obs: Vec<Observation>) -> Vec<(JobEvent, bool)> {
        obs.into_iter()
            .filter_map(|o| match o {
                Observation::Version(Observed {
                    event, from_list, ..
                }) => Some((event, from_list)),
                Observation::Listed(_) | Observation::Story(_) => None,
            })
            .collect()
    }

    /// A Workload's story gives a Kueue-managed job the stays its status cannot say: queued
    /// from when its wait began, running once admitted, preempted from its eviction, queued
    /// again from its requeue — each its own transition key, timed by the Workload, with
    /// Kueue's reason and message; a version seen again with the same story keeps its stay.
    #[test]
    fn a_workloads_story_makes_queued_and_preempted_stays() {
        use jobrelay_contract::story::{Preemption, QueueState};
        let story = |state, since, evicted| Some(workload_story(state, since, evicted));
        let waiting = || QueueState::Queued {
            reason: "Pending".into(),
            message: "couldn't assign flavors: insufficient quota".into(),
        };
        let mut t = tracker();
        let mut seen = |rv: &str, phase: &str, story: Option<Arc<Story>>| {
            let mut e = versions(t.observe_with(Event::Apply(job("u1", rv, phase)), story));
            assert_eq!(e.len(), 1, "rv {rv}");
            e.remove(0).0
        };
        // Seen before its Workload was, suspended since a time after the Workload's wait
        // began: the queued stay is still dated by the Workload, not taken for an earlier
        // visit (which a stay the job's status dated so would be, and keyed by its version).
        let first = seen("0", "Aborted", None);
        assert_eq!(first.phase, Phase::Suspended);
        assert_eq!(
            first.transition_key,
            "alpha/u1/suspended@2026-05-01T00:00:00Z"
        );
        let queued = seen(
            "1",
            "Pending",
            story(waiting(), "2026-04-30T10:00:00Z", None),
        );
        assert_eq!(queued.phase, Phase::Queued);
        assert_eq!(
            queued.transition_key,
            "alpha/u1/queued@2026-04-30T10:00:00Z"
        );
        assert_eq!(queued.transition_time, "2026-04-30T10:00:00Z");
        assert_eq!(queued.reason.as_deref(), Some("Pending"));
        assert!(queued.story.is_some(), "the event carries its story");
        let again = seen(
            "2",
            "Pending",
            story(waiting(), "2026-04-30T10:00:00Z", None),
        );
        assert_eq!(again.transition_key, queued.transition_key, "the same stay");

        let running = seen(
            "3",
            "Running",
            story(QueueState::Admitted, "2026-04-30T10:00:00Z", None),
        );
        assert_eq!(running.phase, Phase::Running);
        assert_eq!(
            running.transition_key,
            "alpha/u1/running@2026-05-01T00:00:00Z"
        );

        let evicted = QueueState::Evicted {
            reason: "Preempted".into(),
            message: "Preempted to accommodate a workload".into(),
            preempted: Some(Preemption {
                reason: "InClusterQueue".into(),
                message: "Preempted to accommodate a workload (UID: w-2)".into(),
            }),
        };
        let preempted = seen(
            "4",
            "Running",
            story(
                evicted,
                "2026-04-30T10:00:00Z",
                Some("2026-05-01T11:30:00Z"),
            ),
        );
        assert_eq!(preempted.phase, Phase::Preempted);
        assert_eq!(
            preempted.transition_key,
            "alpha/u1/preempted@2026-05-01T11:30:00Z"
        );
        assert_eq!(preempted.reason.as_deref(), Some("InClusterQueue"));
        assert!(
            preempted
                .message
                .as_deref()
                .is_some_and(|m| m.contains("w-2"))
        );

        let requeued = seen(
            "5",
            "Pending",
            story(waiting(), "2026-05-01T11:31:00Z", None),
        );
        assert_eq!(requeued.phase, Phase::Queued);
        assert_eq!(
            requeued.transition_key,
            "alpha/u1/queued@2026-05-01T11:31:00Z"
        );
        assert_ne!(
            requeued.transition_key, queued.transition_key,
            "a stay of its own"
        );

        // A finished job is what its status says, whatever its Workload still shows.
        let done = seen(
            "6",
            "Completed",
            story(waiting(), "2026-05-01T11:31:00Z", None),
        );
        assert_eq!(done.phase, Phase::Succeeded);
    }

    /// A Workload that puts a job into a stay of Kueue's queue with no version of the job (a
    /// requeue while it stays suspended) is wanted, and the job read again makes that stay's
    /// event: the version marked with the stay, so its id is its own. Once in the stay, the
    /// same story wants nothing; the version seen again plain is dropped; a read older than
    /// the version last seen, or of a job not tracked, makes nothing.
    #[test]
    fn a_story_changed_alone_makes_the_event_of_its_stay() {
        use jobrelay_contract::story::QueueState;
        let waiting = QueueState::Queued {
            reason: "Pending".into(),
            message: "waiting for quota".into(),
        };
        let queued = workload_story(waiting, "2026-05-01T11:31:00Z", None);
        let mut t = tracker();
        assert!(!t.wants_story("u1", &queued), "not tracked");
        assert!(
            t.restory(job("u1", "4", "Aborted"), Some(queued.clone()))
                .is_empty()
        );
        let seen = versions(t.observe(Event::Apply(job("u1", "4", "Aborted"))));
        assert_eq!(seen[0].0.phase, Phase::Suspended);

        assert!(t.wants_story("u1", &queued));
        let e = versions(t.restory(job("u1", "4", "Aborted"), Some(queued.clone())));
        assert_eq!(e.len(), 1);
        let e = &e[0].0;
        assert_eq!(e.phase, Phase::Queued);
        assert_eq!(e.resource_version, "4~queued@2026-05-01T11:31:00Z");
        assert_eq!(e.id, "alpha/u1/4~queued@2026-05-01T11:31:00Z");
        assert_eq!(e.transition_key, "alpha/u1/queued@2026-05-01T11:31:00Z");
        assert!(e.story.is_some());

        assert!(!t.wants_story("u1", &queued), "already in that stay");
        assert!(
            t.restory(job("u1", "4", "Aborted"), Some(queued.clone()))
                .is_empty()
        );
        assert!(
            t.observe(Event::Apply(job("u1", "4", "Aborted")))
                .is_empty()
        );
        let later = versions(t.observe_with(
            Event::Apply(job("u1", "5", "Running")),
            Some(Arc::new(Story::default())),
        ));
        assert_eq!(later[0].0.phase, Phase::Running);
        assert!(
            t.restory(job("u1", "4", "Aborted"), Some(queued))
                .is_empty(),
            "a read older than the version seen"
        );
    }

    #[test]
    fn every_version_becomes_an_event() {
        let mut t = tracker();
        let a = versions(t.observe(Event::Apply(job("u1", "10", "Pending"))));
        let b = versions(t.observe(Event::Apply(job("u1", "11", "Running"))));
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].0.id, "alpha/u1/10");
        assert!(!a[0].1, "a watch event is not from a list");
        let b = &b[0].0;
        assert_eq!(b.phase, Phase::Running);
        assert_eq!(b.labels.get("team").map(String::as_str), Some("nlp"));
        assert!(
            !b.annotations
                .contains_key("kubectl.kubernetes.io/last-applied-configuration")
        );
        assert!(!b.object_json.contains("managedFields"));
        assert_eq!(b.generation, Some(1));
        assert!(!b.synthetic);
    }

    /// A job no controller has written a status for yet is in the stay it was created in
    /// since its creation: the event says so, by the API server's clock and not jobrelay's
    /// (whose later second would make a catch-up count a phase the controller recorded in
    /// the creation's second as delivered). A status that records no time for another stay
    /// is stamped when seen.
    #[test]
    fn a_job_without_a_status_is_pending_since_its_creation() {
        let mut t = tracker();
        let fresh = JobObject::from_json(
            &json!({
                "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                "metadata": {"name": "job-u9", "namespace": "ml", "uid": "u9",
                             "resourceVersion": "5", "creationTimestamp": "2020-03-04T05:06:07Z"}
            })
            .to_string(),
        )
        .expect("valid object");
        let seen = versions(t.observe(Event::Apply(fresh)));
        assert_eq!(seen[0].0.phase, Phase::Pending);
        assert_eq!(seen[0].0.transition_time, "2020-03-04T05:06:07Z");
        let untimed = JobObject::from_json(
            &json!({
                "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                "metadata": {"name": "job-u9", "namespace": "ml", "uid": "u9",
                             "resourceVersion": "6", "creationTimestamp": "2020-03-04T05:06:07Z"},
                "status": {"state": {"phase": "Running"}}
            })
            .to_string(),
        )
        .expect("valid object");
        let running = versions(t.observe(Event::Apply(untimed)));
        assert_eq!(running[0].0.phase, Phase::Running);
        assert!(
            running[0].0.transition_time.as_str() > "2026",
            "{}",
            running[0].0.transition_time
        );
    }

    #[test]
    fn a_relist_drops_versions_already_seen_and_reports_what_exists() {
        let mut t = tracker();
        t.observe(Event::Apply(job("u1", "10", "Running")));
        t.observe(Event::Apply(job("u2", "11", "Running")));
        assert!(t.observe(Event::Init).is_empty());
        assert!(
            t.observe(Event::InitApply(job("u1", "10", "Running")))
                .is_empty()
        );
        let newer = versions(t.observe(Event::InitApply(job("u1", "12", "Completed"))));
        assert_eq!(newer.len(), 1);
        assert_eq!(newer[0].0.phase, Phase::Succeeded);
        assert!(newer[0].1, "seen in a list");
        let done = t.observe(Event::InitDone);
        match done.as_slice() {
            [
                Observation::Listed(Listed {
                    cluster,
                    namespace,
                    uids,
                    ..
                }),
            ] => {
                assert_eq!(&**cluster, "alpha");
                assert_eq!(namespace, &None);
                assert_eq!(uids.len(), 1);
                assert!(uids.contains(&Uid::new("u1")));
            }
            other => panic!("expected one Listed, got {other:?}"),
        }
        assert_eq!(t.len(), 1, "u2 was not listed and is forgotten");
    }

    #[test]
    fn delete_is_final_and_forgets_the_job() {
        let mut t = tracker();
        t.observe(Event::Apply(job("u1", "10", "Completed")));
        let d = versions(t.observe(Event::Delete(job("u1", "13", "Completed"))));
        assert_eq!(d[0].0.phase, Phase::Deleted);
        assert_eq!(d[0].0.id, "alpha/u1/13");
        assert!(t.is_empty());
        t.observe(Event::Apply(job("u2", "20", "Running")));
        let d = versions(t.observe(Event::Delete(job("u2", "20", "Running"))));
        assert_eq!(d[0].0.resource_version, "20-deleted", "ids stay unique");
    }

    /// A field rule reading outside the status gets the whole object; one reading the status
    /// gets the status view. Both see the phase.
    #[test]
    fn a_field_rule_reads_wherever_it_points() {
        for (path, reason_path) in [
            ("/spec/state", Some("/metadata/labels/why")),
            ("/status/state", None),
        ] {
            let kind: JobKind = serde_yaml_ng::from_str(&format!(
                "{{name: thing, group: x.io, version: v1, kind: Thing, plural: things, \
                 normalizer: {{field: {{path: {path}, phases: {{Go: running}}, \
                 reason_path: {}}}}}}}",
                reason_path.unwrap_or("/status/why")
            ))
            .expect("a kind");
            assert_eq!(kind.normalizer.reads_status_only(), reason_path.is_none());
            let mut t = Tracker::new(Arc::from("alpha"), Arc::new(kind), None);
            let object = LenientObject::from_json(
                &json!({"apiVersion": "x.io/v1", "kind": "Thing",
                    "metadata": {"name": "t", "uid": "u1", "resourceVersion": "1",
                                 "labels": {"why": "because"}},
                    "spec": {"state": "Go"}, "status": {"state": "Go", "why": "because"}})
                .to_string(),
            );
            let event = readable(Event::Apply(object), &mut t).0.expect("readable");
            let e = versions(t.observe(event));
            assert_eq!(e[0].0.phase, Phase::Running, "{path}");
            assert_eq!(e[0].0.reason.as_deref(), Some("because"), "{path}");
        }
    }

    /// A spec too deep to decode as a tree is no matter to a kind whose normalizer reads the
    /// status, but one whose field rule reads the spec cannot normalize it: the object is
    /// reported by name as unreadable, never normalized from nothing, and still delivered — a
    /// version of a job with phase `unknown` and its text as sent (a job dropped for its
    /// shape would be lost to every plugin). Its deletion is delivered too.
    #[test]
    fn an_object_too_deep_for_its_rule_is_delivered_as_unknown() {
        let deep = format!("{}1{}", "[".repeat(1_000), "]".repeat(1_000));
        let text = format!(
            r#"{{"apiVersion":"x.io/v1","kind":"Thing","metadata":{{"name":"t","namespace":"ml","uid":"u1","resourceVersion":"1"}},"spec":{{"state":"Go","x":{deep}}}}}"#
        );
        for (path, readable_too) in [("/status/state", true), ("/spec/state", false)] {
            let kind: JobKind = serde_yaml_ng::from_str(&format!(
                "{{name: thing, group: x.io, version: v1, kind: Thing, plural: things, \
                 normalizer: {{field: {{path: {path}, phases: {{Go: running}}}}}}}}"
            ))
            .expect("a kind");
            let mut t = Tracker::new(Arc::from("alpha"), Arc::new(kind), None);
            t.observe(Event::Init);
            let (listed, report) =
                readable(Event::InitApply(LenientObject::from_json(&text)), &mut t);
            assert_eq!(report.is_none(), readable_too, "{path}: {report:?}");
            if let Some(report) = &report {
                assert!(report.starts_with("ml/t: recursion limit"), "{report}");
            }
            let e = versions(t.observe(listed.expect("delivered either way")));
            if readable_too {
                assert_eq!(e[0].0.phase, Phase::Pending, "{path}");
            } else {
                assert_eq!(e[0].0.phase, Phase::Unknown, "{path}");
                assert_eq!(e[0].0.reason.as_deref(), Some("StatusUnreadable"));
                assert_eq!(&*e[0].0.object_json, text.as_str(), "the text as sent");
            }
            match t.observe(Event::InitDone).as_slice() {
                [Observation::Listed(Listed { uids, .. })] => assert_eq!(uids.len(), 1, "{path}"),
                other => panic!("expected one Listed, got {other:?}"),
            }
            let deleted = readable(Event::Delete(LenientObject::from_json(&text)), &mut t)
                .0
                .expect("a deletion is always read");
            let e = versions(t.observe(deleted));
            assert_eq!(e[0].0.phase, Phase::Deleted, "{path}");
        }
    }

    /// What a tracker keeps per job stays small: a tracker holds one for every job of its
    /// stream, a million on a large fleet. No allocation of its own for typical uids,
    /// versions and times (the stay's `recent` only when two stays share a second).
    #[test]
    fn a_tracked_job_is_a_small_record() {
        let size = std::mem::size_of::<(Uid, Seen)>();
        assert!(size <= 96, "{size} bytes");
    }

    /// An object whose metadata cannot be read at all has nothing to deliver: it is skipped
    /// and reported.
    #[test]
    fn an_object_without_readable_metadata_is_skipped() {
        let mut t = tracker();
        let deep = format!("{}1{}", "[".repeat(1_000), "]".repeat(1_000));
        let text = format!(r#"{{"apiVersion":"x.io/v1","kind":"Thing","metadata":{deep}}}"#);
        let (event, report) = readable(Event::Apply(LenientObject::from_json(&text)), &mut t);
        assert!(event.is_none());
        assert!(report.is_some());
    }

    /// The event's object is the text the API server sent, without managedFields alone: keys
    /// in their order, metadata the client types do not know kept.
    #[test]
    fn the_event_carries_the_object_as_sent() {
        let mut t = tracker();
        let text = r#"{"kind":"Job","apiVersion":"batch.volcano.sh/v1alpha1","metadata":{"uid":"u1","managedFields":[{"manager":"m"}],"resourceVersion":"5","name":"a","namespace":"ml","futureField":{"x":1}},"status":{"state":{"phase":"Running"}},"spec":{"z":1,"a":2}}"#;
        let object = JobObject::from_json(text).expect("valid object");
        let e = versions(t.observe(Event::Apply(object)));
        assert_eq!(
            &*e[0].0.object_json,
            r#"{"kind":"Job","apiVersion":"batch.volcano.sh/v1alpha1","metadata":{"uid":"u1","resourceVersion":"5","name":"a","namespace":"ml","futureField":{"x":1}},"status":{"state":{"phase":"Running"}},"spec":{"z":1,"a":2}}"#
        );
        assert_eq!(e[0].0.phase, Phase::Running);
    }

    /// An object without `apiVersion` and `kind` gets the stream's.
    #[test]
    fn an_untyped_object_gets_the_streams_types() {
        let mut t = tracker();
        let text = r#"{"metadata":{"uid":"u1","resourceVersion":"5","name":"a"},"status":{}}"#;
        let object = JobObject::from_json(text).expect("valid object");
        let e = versions(t.observe(Event::Apply(object)));
        let object: Value = serde_json::from_str(&e[0].0.object_json).expect("JSON");
        assert_eq!(object["apiVersion"], "batch.volcano.sh/v1alpha1");
        assert_eq!(object["kind"], "Job");
    }

    #[test]
    fn objects_without_uid_or_version_are_skipped() {
        let mut t = tracker();
        let mut obj = job("u1", "10", "Running");
        obj.metadata.uid = None;
        assert!(t.observe(Event::Apply(obj)).is_empty());
        let mut obj = job("u2", "10", "Running");
        obj.metadata.resource_version = None;
        assert!(t.observe(Event::Apply(obj)).is_empty());
    }
}
