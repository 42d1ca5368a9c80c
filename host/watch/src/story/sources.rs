//! The watches that feed one cluster's [`StoryBook`]: Kueue's Workloads and the pods, each
//! one stream for the cluster (or per watched namespace), shared by every kind that asks for
//! it ([`StorySources`](crate::kinds::StorySources)). The job streams tell the book which jobs
//! exist ([`Stories::for_version`]) and take its snapshot onto each event they make, reading
//! from it the phases only the Workload says ([`super::queue_phase`]).
//!
//! Why the story is a snapshot taken when the job's version is seen: an event is one version
//! of the job (its id is the job's resourceVersion), and most moments teams ask about move the
//! job itself — Kueue suspends a job it evicts and unsuspends one it admits — so the next
//! version carries the new facts. A Workload change seen after the job's own (separate streams
//! keep no order between them) reaches the job's next version, not the one before.
//!
//! Two moments do not move the job: a requeue (the job stays suspended while it waits again),
//! and an eviction the Workload stream reports after the job's suspension. Both put the job in
//! a stay of Kueue's queue (`queued`, `preempted`), a transition of its own, so a Workload
//! change that does so is told to the job streams ([`Restory`]); the job's stream reads the
//! job again and makes the event of that stay ([`super::rereads`],
//! [`crate::tracker::Tracker::restory`]). Any other change of the story alone (an admission
//! not yet seen on the job, a failing pod) makes no event: the job's next version carries it.
//!
//! The job view is told of every change at once ([`StoryNews`] through the stream's sink, to
//! the view only): a Workload that went back to waiting is queued there, and the timers judge
//! it so.
//!
//! A source the cluster does not serve (Kueue not installed) is retried with kube's backoff
//! and said once in the log; the job streams go on without its facts.

use std::sync::Arc;

use futures::{StreamExt, pin_mut};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::core::ObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use parking_lot::Mutex;
use tokio::sync::{broadcast, watch};

use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_contract::object_name::is_dns_subdomain;
use jobrelay_contract::story::Story;

use super::book::{BookLimits, Noted, StoryBook};
use super::{pod_cause, queue_phase, workload};
use crate::tracker::{Observation, StoryNews};
use crate::watcher::Sink;

/// The API group, version and plural of Kueue's Workloads as read here.
pub const WORKLOAD: (&str, &str, &str, &str) =
    ("kueue.x-k8s.io", "v1beta2", "Workload", "workloads");

/// One cluster's story book, shared by its job streams and its story sources. One lock, held
/// for one step of the book (a lookup or an insert), never across an await.
#[derive(Debug)]
pub struct Stories {
    book: Mutex<StoryBook>,
    changed: broadcast::Sender<Arc<Restory>>,
    /// The Workload streams that have not finished their first list (nor failed it).
    unlisted: watch::Sender<usize>,
}

/// A Workload changed a known job's story with no version of the job: told to the cluster's
/// job streams, whose own stream of that job reads it again when the change puts it in a stay
/// of Kueue's queue ([`crate::tracker::Tracker::wants_story`]). The job is named as its
/// Workload names its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restory {
    /// The job's uid.
    pub uid: String,
    /// Its namespace (the Workload's).
    pub namespace: String,
    /// Its name (the Workload's controlling owner's).
    pub name: String,
}

/// Story changes kept for job streams that have not read them yet; past it, a stream lagging
/// that far skips the oldest (logged at debug: those stays reach plugins only if their jobs
/// change during them; the job view has them).
const RESTORY_BACKLOG: usize = 1024;

impl Stories {
    /// An empty book for one cluster.
    pub fn new(limits: BookLimits) -> Arc<Stories> {
        Arc::new(Stories {
            book: Mutex::new(StoryBook::new(limits)),
            changed: broadcast::channel(RESTORY_BACKLOG).0,
            unlisted: watch::channel(0).0,
        })
    }

    /// The cluster runs `sources` Workload streams (one per watched namespace, or one for
    /// all), none of which has listed yet: set before they and the job streams start.
    pub fn expect_workload_lists(&self, sources: usize) {
        self.unlisted.send_replace(sources);
    }

    /// Waits until every Workload stream finished its first list or failed it, at most
    /// `limit`. Why a job stream of a kind that reads Workloads waits for it before its own
    /// first list: a job listed before its Workload is seen in its status's phase
    /// (`suspended`), then read again as `queued` once the Workload comes — after a restart,
    /// a flap its plugins would be told as two transitions. Bounded, so a slow or broken
    /// Workload stream holds the jobs back no longer than `limit`.
    pub async fn until_workloads_listed(&self, limit: std::time::Duration) {
        let mut unlisted = self.unlisted.subscribe();
        let _ = tokio::time::timeout(limit, unlisted.wait_for(|n| *n == 0)).await;
    }

    /// One Workload stream finished its first list, or failed it (Kueue not installed).
    fn workloads_listed(&self) {
        self.unlisted.send_modify(|n| *n = n.saturating_sub(1));
    }

    /// The story changes made by Workloads alone, from now on (see [`Restory`]).
    pub fn restories(&self) -> broadcast::Receiver<Arc<Restory>> {
        self.changed.subscribe()
    }

    /// The story of job `uid` as it is now, for a job read again on a [`Restory`].
    pub fn now(&self, uid: &str) -> Option<Arc<Story>> {
        self.book.lock().story(uid)
    }

    /// A version of a job was seen, by a stream whose kind tells its story (`tells`) or not.
    /// Either way the job's controlling owner is linked (a JobSet's TrainJob), so the objects
    /// of a child reach the root; a kind that tells its story is tracked by the book and its
    /// event takes the story's snapshot; a deletion ends the story after its last event took it.
    pub fn job_version(&self, event: &mut JobEvent, owner: Option<&str>, tells: bool) {
        let deleted = event.phase == Phase::Deleted;
        event.story = self.for_version(&event.uid, owner, tells, deleted);
    }

    /// [`Stories::job_version`] before the version's event is made: the story of job `uid`
    /// for its version (a deletion, with `deleted`), which the stream's tracker puts on the
    /// event and reads its queue phase from ([`super::queue_phase`]).
    pub fn for_version(
        &self,
        uid: &str,
        owner: Option<&str>,
        tells: bool,
        deleted: bool,
    ) -> Option<Arc<Story>> {
        if owner.is_none() && !tells {
            return None; // nothing to link, nothing to take: the book's lock is not taken
        }
        let mut book = self.book.lock();
        if let Some(owner) = owner {
            book.link(uid, owner);
        }
        if !tells {
            return None;
        }
        if deleted {
            let story = book.story(uid);
            book.job_gone(uid);
            story
        } else {
            book.seen(uid)
        }
    }

    /// Tells the job streams that the story of job `uid` changed through `workload` (its
    /// metadata) alone, when the Workload's controlling owner is that job: its name and
    /// namespace are the job's. No stream listening costs nothing.
    fn restory(&self, uid: &str, workload: &ObjectMeta) {
        let owner = workload
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true) && o.uid == uid);
        // The owner's name is the Workload writer's text, and kube puts it in the read's URL
        // as it is: only a name Kubernetes could have given a job is read.
        let owner = owner.filter(|o| is_dns_subdomain(&o.name));
        if let (Some(owner), Some(namespace)) = (owner, &workload.namespace) {
            // An error only means no stream listens.
            let _ = self.changed.send(Arc::new(Restory {
                uid: uid.to_string(),
                namespace: namespace.clone(),
                name: owner.name.clone(),
            }));
        }
    }

    /// Orphan stories let go for room, and those kept now.
    pub fn orphans(&self) -> (u64, usize) {
        let book = self.book.lock();
        (book.dropped(), book.orphans())
    }

    /// A version of a Workload read: the uid of the job whose story it changed, and that
    /// story, if it changed a known job's.
    pub fn workload(&self, facts: workload::WorkloadFacts) -> Option<(String, Arc<Story>)> {
        let named = facts.job_uid.clone()?;
        let mut book = self.book.lock();
        match book.workload(facts) {
            Noted::Changed => {
                let root = book.root_of(&named);
                book.story(&root).map(|story| (root, story))
            }
            Noted::Unchanged => None,
        }
    }

    /// A version of a pod: its failure cause, if it has one, for the job its owner leads to;
    /// as [`Stories::workload`], the job and its story when that changed.
    pub fn pod(&self, pod: &Pod) -> Option<(String, Arc<Story>)> {
        let owner = controller(&pod.metadata)?;
        let cause = pod_cause::failure_cause(pod)?;
        let mut book = self.book.lock();
        match book.pod(owner, Some(cause)) {
            Noted::Changed => {
                let root = book.root_of(owner);
                book.story(&root).map(|story| (root, story))
            }
            Noted::Unchanged => None,
        }
    }
}

/// The uid of an object's controlling owner.
pub fn controller(metadata: &ObjectMeta) -> Option<&str> {
    metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// Tells `news` (the job view, through the dispatcher) that a job's story changed.
async fn tell(news: Option<&Sink>, cluster: &Arc<str>, changed: Option<(String, Arc<Story>)>) {
    if let (Some(sink), Some((uid, story))) = (news, changed) {
        let news = StoryNews {
            cluster: cluster.clone(),
            uid,
            story,
        };
        // Closed only when the daemon stops.
        let _ = sink.send(Observation::Story(news)).await;
    }
}

/// Watches Kueue's Workloads (of one namespace, or all) into `stories` until cancelled, telling
/// `news` of each story a Workload changed.
pub async fn watch_workloads(
    client: Client,
    namespace: Option<String>,
    stories: Arc<Stories>,
    cluster: Arc<str>,
    news: Option<Sink>,
) {
    let (group, version, kind, plural) = WORKLOAD;
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    let api: Api<DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(client, ns, &resource),
        None => Api::all_with(client, &resource),
    };
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    pin_mut!(stream);
    let mut failing = false;
    // Whether the first list ended (or failed): the job streams that wait for it are told once.
    let mut listed = false;
    while let Some(item) = stream.next().await {
        if !listed && matches!(item, Ok(Event::InitDone) | Err(_)) {
            listed = true;
            stories.workloads_listed();
        }
        match item {
            Ok(Event::Apply(object) | Event::InitApply(object)) => {
                failing = false;
                let facts = serde_json::to_string(&object)
                    .map_err(workload::WorkloadError::from)
                    .and_then(|text| workload::read(&text));
                match facts {
                    Ok(facts) => {
                        let changed = stories.workload(facts);
                        // Only a Workload now holding its job for quota or preempted can put
                        // the job into a stay its stream has not made (`suspended` is the
                        // phase such a job's status may say, whatever it is): the job
                        // streams hear of nothing else.
                        if let Some((uid, story)) = &changed
                            && queue_phase::queue_stay(Phase::Suspended, Some(story)).is_some()
                        {
                            stories.restory(uid, &object.metadata);
                        }
                        tell(news.as_ref(), &cluster, changed).await;
                    }
                    Err(e) => tracing::warn!(cluster = %cluster,
                        workload = %crate::lenient::label(&object.metadata), error = %e,
                        "a Kueue Workload cannot be read; its job's story goes without it"),
                }
            }
            Ok(_) => failing = false,
            Err(e) => {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(cluster = %cluster, error = %e,
                        "cannot watch Kueue Workloads (is Kueue installed?); jobs' stories go \
                         without them, retrying with backoff");
                }
            }
        }
    }
}

/// Watches the pods (of one namespace, or all) into `stories` until cancelled, telling `news`
/// of each story a pod changed.
pub async fn watch_pods(
    client: Client,
    namespace: Option<String>,
    stories: Arc<Stories>,
    cluster: Arc<str>,
    news: Option<Sink>,
) {
    let api: Api<Pod> = match &namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    pin_mut!(stream);
    let mut failing = false;
    while let Some(item) = stream.next().await {
        match item {
            Ok(Event::Apply(pod) | Event::InitApply(pod)) => {
                failing = false;
                tell(news.as_ref(), &cluster, stories.pod(&pod)).await;
            }
            Ok(_) => failing = false,
            Err(e) => {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(cluster = %cluster, error = %e,
                        "cannot watch pods; jobs' stories go without their failure causes, \
                         retrying with backoff");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A Workload names its job by its controlling owner, whose name its writer chose: only a
    /// name Kubernetes could give a job is passed on to be read (kube puts it in the URL as it
    /// is), and only for the owner that is the job.
    #[test]
    fn a_restory_names_only_a_job_kubernetes_could_have_named() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let stories = Stories::new(BookLimits::default());
        let mut told = stories.restories();
        let workload = |name: &str, uid: &str| ObjectMeta {
            namespace: Some("ml".into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                name: name.into(),
                uid: uid.into(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..ObjectMeta::default()
        };
        for hostile in [
            "../../api/v1/namespaces/ml/secrets/token",
            "a?watch=true",
            "A",
        ] {
            stories.restory("u1", &workload(hostile, "u1"));
        }
        stories.restory("u1", &workload("llama-ft", "u2"));
        assert!(told.try_recv().is_err(), "nothing to read");
        stories.restory("u1", &workload("llama-ft", "u1"));
        let restory = told.try_recv().expect("the job to read");
        assert_eq!(
            (restory.namespace.as_str(), restory.name.as_str()),
            ("ml", "llama-ft")
        );
    }

    /// A job stream waits for every Workload stream's first list, and no longer than its
    /// limit; with none to wait for it goes at once.
    #[tokio::test]
    async fn job_streams_wait_for_the_workload_lists_within_a_limit() {
        let long = Duration::from_secs(60);
        let stories = Stories::new(BookLimits::default());
        let start = std::time::Instant::now();
        stories.until_workloads_listed(long).await;
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "nothing to wait for"
        );

        stories.expect_workload_lists(2);
        let waiting = {
            let stories = stories.clone();
            tokio::spawn(async move { stories.until_workloads_listed(long).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        stories.workloads_listed();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiting.is_finished(), "one of two lists is not enough");
        stories.workloads_listed();
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("released by the second list, long before the limit")
            .expect("the waiter");

        stories.expect_workload_lists(1);
        let start = std::time::Instant::now();
        stories
            .until_workloads_listed(Duration::from_millis(300))
            .await;
        assert!(
            start.elapsed() >= Duration::from_millis(300),
            "waited out the limit"
        );
    }
}
