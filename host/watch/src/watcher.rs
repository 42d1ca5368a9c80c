//! One watch stream: the task that runs a kube-rs `runtime::watcher` for one (cluster, job
//! kind, namespace), reads its objects one by one ([`LenientObject`],
//! [`JobObject`](crate::object::JobObject)), hands each to the stream's [`Tracker`] and sends
//! on the observations it makes. It spaces its attempts after failures ([`Retry`]), starts
//! jobrelay's finalizer adders where the kind's deletions are held, and reports its
//! [`Progress`] to the cluster's health.
//!
//! Why the raw watcher and not a controller: a controller merges versions of one object by key
//! and reconciles the latest, which swallows intermediate phases. Here every distinct
//! resourceVersion becomes an event, and the only state kept per job is the small projection
//! in the [`Tracker`] needed to drop re-observed versions and to key the next transition (the
//! previous phase is filled in per plugin by its lane).

use std::collections::HashSet;
use std::sync::Arc;

use futures::{StreamExt, pin_mut};
use kube::core::ObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::sync::{broadcast, mpsc};

use super::finalizer;
use super::kinds::JobKind;
use super::lenient::LenientObject;
use super::retry::{self, Failure, Retry};
use super::story::rereads::Rereads;
use super::story::sources::{self, Restory, Stories};
use super::tracker::readable;

pub use super::tracker::{Listed, Observation, Observed, Tracker};

/// Where every stream sends its observations: the dispatcher (`jobrelay_lanes::dispatcher`)
/// drains the other end, in one task, and offers each to the lanes. Bounded: a dispatcher
/// that falls behind holds the streams back rather than letting observations pile up.
pub type Sink = mpsc::Sender<Observation>;

/// What one stream watches.
#[derive(Debug, Clone)]
pub struct WatchTarget {
    /// The cluster's name in jobrelay.
    pub cluster: Arc<str>,
    /// The configured kind watched.
    pub kind: Arc<JobKind>,
    /// `None` watches all namespaces.
    pub namespace: Option<String>,
    /// The main file's `watch.label_selector`, sent with every list and watch so the API
    /// server filters; checked before it gets here.
    pub label_selector: Option<String>,
    /// Seconds per watch request; a silent connection is dropped after this plus 5 s.
    pub timeout_seconds: u32,
    /// jobrelay's finalizer name, when this kind's deletions are held.
    pub finalizer: Option<String>,
    /// The cluster's story book, when a kind watched on it tells its jobs' stories: this
    /// stream links its jobs to their owners there, and takes the book's snapshot onto each
    /// event when its own kind tells stories (`kind.story`).
    pub stories: Option<Arc<Stories>>,
    /// Notified when the cluster's health check passes again after failing: a stream that
    /// waits out its backoff (up to a minute) tries again at once, so a cluster back is
    /// watched again within moments of its API server answering.
    pub back: Option<Arc<tokio::sync::Notify>>,
}

impl WatchTarget {
    fn api(&self, client: Client) -> Api<LenientObject> {
        let ar = self.kind.api_resource();
        match &self.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &ar),
            None => Api::all_with(client, &ar),
        }
    }

    /// A short label for logs: `cluster/kind[/namespace]`.
    pub fn label(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/{}/{}", self.cluster, self.kind.name, ns),
            None => format!("{}/{}", self.cluster, self.kind.name),
        }
    }
}

/// Progress of one stream, reported to the cluster's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// The initial (or a re-) list is complete: the stream is in sync.
    Synced,
    /// The stream failed; the watcher retries with backoff.
    Error(String),
    /// The wait after a failure is over and the stream tries again: no longer known to be
    /// failing, not yet known to work. Without it a stream would count as failing until its
    /// next answer, and a brief outage would look, to the cluster's health checks, like one as
    /// long as the streams' backoff plus [`RESUMED_QUIET`].
    Retrying,
    /// The cluster does not serve the stream's kind (the list answered 404: its CRD is not
    /// installed). Not a failure of the cluster; the watcher checks again with backoff and
    /// reports `Synced` once the resource appears. Carries the kind's name.
    NotInstalled(String),
    /// An attempt to add jobrelay's finalizer to a job failed (it is retried with backoff);
    /// counted in the cluster's health, the stream's own state is unchanged.
    FinalizerFailed(String),
    /// A job object could not be read (`namespace/name: reason`); it was skipped, the rest of
    /// the stream goes on. Counted in the cluster's health.
    Unreadable(String),
}

/// The finalizer adders of one stream: at most one per job, each retrying on its own timer
/// ([`finalizer::keep_adding`]), all stopped with the stream.
struct Adders {
    running: tokio::task::JoinSet<String>,
    uids: HashSet<String>,
    failures: mpsc::UnboundedSender<finalizer::AddError>,
}

impl Adders {
    fn start(
        &mut self,
        client: &Client,
        target: &WatchTarget,
        metadata: &ObjectMeta,
        finalizer: &str,
    ) {
        let Some(uid) = metadata.uid.clone() else {
            return;
        };
        if !self.uids.insert(uid.clone()) {
            return; // an adder for this job is at work; it reads the job again itself
        }
        let (client, kind, metadata, finalizer) = (
            client.clone(),
            target.kind.clone(),
            metadata.clone(),
            finalizer.to_string(),
        );
        let failures = self.failures.clone();
        let label = target.label();
        self.running.spawn(async move {
            let job = metadata.name.clone().unwrap_or_default();
            finalizer::keep_adding(client, &kind, metadata, &finalizer, |e| {
                tracing::warn!(stream = %label, job = %job, error = %e,
                    "cannot add jobrelay's finalizer yet; retrying with backoff");
                let _ = failures.send(e);
            })
            .await;
            uid
        });
    }

    fn finished(&mut self, uid: String) {
        self.uids.remove(&uid);
    }
}

/// Waits for the cluster to be back (never, without a notifier).
async fn back_again(back: Option<&tokio::sync::Notify>) {
    match back {
        Some(back) => back.notified().await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `at` (never polled without one: its arm is guarded).
async fn sleep_until(at: Option<tokio::time::Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

/// Runs one stream until the task is cancelled (dropped) or the sink closes.
///
/// Errors never end the stream: kube's watcher re-lists on `410 Gone` and resumes from the
/// last version otherwise; [`Retry`] spaces the attempts (0.8 s doubling to 30 s after
/// failures, 2 s doubling to 3 minutes for a kind the cluster does not serve, each wait plus
/// a random part of up to as much again), starting again
/// once the API answers with data, or the stream ran 10 s past its last wait without failing.
pub async fn run(
    client: Client,
    target: WatchTarget,
    sink: Sink,
    progress: impl Fn(Progress) + Send,
) {
    // A kind that reads Workloads lists its jobs once their Workloads are known, so a job is
    // first seen in its queue stay, not in its status's phase and then queued ([`Stories::
    // until_workloads_listed`]).
    if target.kind.story.kueue
        && let Some(stories) = &target.stories
    {
        stories.until_workloads_listed(WORKLOADS_FIRST).await;
    }
    let mut config = watcher::Config::default().timeout(target.timeout_seconds);
    if let Some(sel) = &target.label_selector {
        config = config.labels(sel);
    }
    let stream = watcher::watcher(target.api(client.clone()), config);
    pin_mut!(stream);
    let mut tracker = Tracker::new(
        target.cluster.clone(),
        target.kind.clone(),
        target.namespace.clone(),
    );
    // In sync once a list completed; after an error, in sync again as soon as the stream
    // delivers anything, or once it has run [`RESUMED_QUIET`] past its wait without failing:
    // a resumed watch does not re-list, and a calm one delivers nothing, so without the second
    // rule a stream that recovered would be reported failing until its next job changed.
    let mut listed_once = false;
    let mut healthy = false;
    // When a stream that resumed after a failure counts as in sync again, if it stays quiet.
    let mut quiet_until: Option<tokio::time::Instant> = None;
    // Whether the cluster was said, in the log, not to serve this kind.
    let mut missing_told = false;
    let mut retry = Retry::default();
    // After a failure: when the next attempt may be made.
    let mut resume_at: Option<tokio::time::Instant> = None;
    // The wait chosen after the last failure, for its log line.
    let mut waited = std::time::Duration::ZERO;
    // Story changes made by Workloads alone, for a kind whose story reads them, and the reads
    // of the jobs they put in a stay of Kueue's queue.
    let mut restories = (target.kind.story.kueue)
        .then(|| target.stories.as_ref().map(|s| s.restories()))
        .flatten();
    let mut rereads = Rereads::new(&target.kind);
    let (failures, mut failed) = mpsc::unbounded_channel();
    let mut adders = Adders {
        running: tokio::task::JoinSet::new(),
        uids: HashSet::new(),
        failures,
    };
    loop {
        let item = tokio::select! {
            item = stream.next(), if resume_at.is_none() => item,
            () = back_again(target.back.as_deref()), if resume_at.is_some() => {
                // The cluster answers again: the wait is over now.
                resume_at = Some(tokio::time::Instant::now());
                continue;
            }
            () = sleep_until(resume_at), if resume_at.is_some() => {
                resume_at = None;
                if !healthy {
                    progress(Progress::Retrying);
                }
                if listed_once && !healthy {
                    quiet_until = Some(tokio::time::Instant::now() + RESUMED_QUIET);
                }
                continue;
            }
            () = sleep_until(quiet_until), if quiet_until.is_some() => {
                quiet_until = None;
                if listed_once && !healthy && resume_at.is_none() {
                    healthy = true;
                    progress(Progress::Synced);
                }
                continue;
            }
            Some(Ok(uid)) = adders.running.join_next(), if !adders.running.is_empty() => {
                adders.finished(uid);
                continue;
            }
            Some(error) = failed.recv() => {
                progress(Progress::FinalizerFailed(error.to_string()));
                continue;
            }
            changed = next_restory(restories.as_mut()), if restories.is_some() => {
                match changed {
                    Ok(restory) => {
                        let wanted = target
                            .stories
                            .as_ref()
                            .and_then(|s| s.now(&restory.uid))
                            .is_some_and(|story| tracker.wants_story(&restory.uid, &story));
                        if wanted {
                            rereads.read(&client, restory);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::debug!(stream = %target.label(), missed = n,
                            "story changes let go; their jobs' next versions carry them");
                    }
                    Err(broadcast::error::RecvError::Closed) => restories = None,
                }
                continue;
            }
            read = rereads.next(&client), if rereads.busy() => {
                if let Some(object) = read {
                    let observations = restoried(object, &mut tracker, target.stories.as_deref());
                    for observation in observations {
                        if sink.send(observation).await.is_err() {
                            return; // the dispatcher is gone: shutting down
                        }
                    }
                }
                continue;
            }
        };
        let Some(item) = item else { break };
        match &item {
            Ok(event) if retry::answers(event) => retry.answered(),
            Ok(_) => {}
            // The resource version the watch resumed from was compacted away: the API server
            // answered, and kube's watcher re-lists on the next poll. Not a failure to back
            // off from: waiting here (up to a minute after earlier failures) left every change
            // of the stream unseen meanwhile.
            Err(e) if gone(e) => retry.answered_gone(),
            Err(e) => {
                quiet_until = None;
                let failure = if not_served(e) {
                    Failure::NotServed
                } else {
                    Failure::Failed
                };
                let wait = retry.after(failure, std::time::Instant::now());
                waited = wait;
                resume_at = Some(tokio::time::Instant::now() + wait);
            }
        }
        let item = match item {
            Ok(event) => {
                let (event, report) = readable(event, &mut tracker);
                if let Some(report) = report {
                    if event.is_some() {
                        tracing::warn!(stream = %target.label(), object = %report,
                            "a job object's status cannot be read; delivered with phase \
                             `unknown` and its text as sent");
                    } else {
                        tracing::warn!(stream = %target.label(), object = %report,
                            "a job object cannot be read; skipped (the rest of the kind goes on)");
                    }
                    progress(Progress::Unreadable(report));
                }
                match event {
                    Some(event) => Ok(event),
                    None => continue,
                }
            }
            Err(e) => Err(e),
        };
        match item {
            Ok(event) => {
                if let (Some(finalizer), Event::Apply(obj) | Event::InitApply(obj)) =
                    (&target.finalizer, &event)
                    && finalizer::needs_finalizer(&obj.metadata, finalizer)
                {
                    adders.start(&client, &target, &obj.metadata, finalizer);
                }
                let recovered = match event {
                    Event::InitDone => true,
                    Event::Apply(_) | Event::Delete(_) => listed_once && !healthy,
                    Event::Init | Event::InitApply(_) => false,
                };
                // The job's story (its Workload, its pods), and its controlling owner linked
                // so that a child's objects reach it (a JobSet's TrainJob).
                let story = match (&target.stories, &event) {
                    (
                        Some(stories),
                        Event::Apply(obj) | Event::InitApply(obj) | Event::Delete(obj),
                    ) => match obj.metadata.uid.as_deref() {
                        Some(uid) => stories.for_version(
                            uid,
                            sources::controller(&obj.metadata),
                            !target.kind.story.is_off(),
                            matches!(event, Event::Delete(_)),
                        ),
                        None => None,
                    },
                    _ => None,
                };
                for observation in tracker.observe_with(event, story) {
                    if sink.send(observation).await.is_err() {
                        return; // the dispatcher is gone: shutting down
                    }
                }
                if recovered {
                    missing_told = false;
                    listed_once = true;
                    healthy = true;
                    progress(Progress::Synced);
                }
            }
            Err(e) if not_served(&e) => {
                // Said once until the kind is served: the check repeats with backoff.
                if std::mem::replace(&mut missing_told, true) {
                    tracing::debug!(stream = %target.label(), error = %e,
                        "the cluster still does not serve this kind");
                } else {
                    tracing::warn!(stream = %target.label(), kind = %target.kind.name,
                        resource = %format!("{}/{}", target.kind.api_version(), target.kind.plural),
                        "the cluster does not serve this kind (its CRD is not installed, or the \
                         kind in the main file's `kinds` is wrong): none of its jobs are \
                         watched; checking again with backoff");
                }
                healthy = false;
                progress(Progress::NotInstalled(target.kind.name.clone()));
            }
            Err(e) => {
                let error = crate::error_text::chain(&e);
                tracing::warn!(stream = %target.label(), error = %error,
                    retry_in_ms = waited.as_millis() as u64, "watch error; retrying");
                healthy = false;
                progress(Progress::Error(error));
            }
        }
    }
}

/// The next story change, for a stream that listens to them (its arm is guarded).
async fn next_restory(
    restories: Option<&mut broadcast::Receiver<Arc<Restory>>>,
) -> Result<Arc<Restory>, broadcast::error::RecvError> {
    match restories {
        Some(restories) => restories.recv().await,
        None => std::future::pending().await,
    }
}

/// The event of a job read again because its story changed alone: through the same reading
/// as a watched version, then the tracker's [`Tracker::restory`] with the story as it is now.
fn restoried(
    object: LenientObject,
    tracker: &mut Tracker,
    stories: Option<&Stories>,
) -> Vec<Observation> {
    let (Some(Event::Apply(object)), _) = readable(Event::Apply(object), tracker) else {
        return Vec::new();
    };
    let Some(uid) = object.metadata.uid.clone() else {
        return Vec::new();
    };
    let story = stories.and_then(|s| s.now(&uid));
    tracker.restory(object, story)
}

/// The longest a job stream of a kind that reads Workloads waits, at its start, for the
/// cluster's Workload streams to list.
pub const WORKLOADS_FIRST: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a stream that resumed watching after a failure must go without failing to count
/// as in sync again when nothing arrives: a refused or unreachable API server fails the
/// resumed watch request well within it.
pub const RESUMED_QUIET: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether the watch ended with `410 Gone`: its resource version is older than what the API
/// server keeps (etcd compaction), so the stream must list again.
fn gone(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::WatchError(status) if status.code == 410)
}

/// Whether a stream failed because the cluster does not serve its resource at all: the list
/// or watch answered 404 (the kind's CRD is not installed).
fn not_served(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status.code == 404,
        _ => false,
    }
}
