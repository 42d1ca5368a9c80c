//! Deleting finished jobs once their plugins have delivered them: the task that works through
//! the clean-up schedule ([`jobrelay_fleet::cleanup`]) with the clusters' clients.
//!
//! Once a second the due jobs are taken from the schedule and queued to their cluster's
//! deleter: one task per cluster, spacing its deletions by `per_cluster_per_second` (a
//! thousand jobs finishing at once are deleted at that pace, not in a burst on the API
//! server). Each job is checked when its turn comes, not when it was queued, because its
//! plugins may have been given more of it while it waited: every plugin in scope
//! (`once_delivered`, or each whose lane wants the kind) must be loaded, have nothing of the
//! job queued or in flight, and no dead letter of it stored — read from the store right
//! before the call; otherwise the job is held, with the reason, and looked at again later.
//!
//! The deletion carries the job's uid as a precondition (a job re-created under the same
//! name answers 409 and is left alone) and the configured propagation. A dry run stops
//! short of the call: it logs and counts the job once.

use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBuilder};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Preconditions, PropagationPolicy};
use kube::discovery::ApiResource;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use jobrelay_fleet::cleanup::{
    CleanupRule, CleanupSettings, FinishedJob, Held, Propagation, Schedule, ScheduleView,
};
use jobrelay_lanes::dispatcher::Routes;
use jobrelay_state::DeliveryStore;

/// How often due jobs are taken from the schedule.
const TICK: Duration = Duration::from_secs(1);
/// How long a job waits before it is looked at again, by reason.
const RECHECK_PENDING: Duration = Duration::from_secs(2);
const RECHECK_BLOCKED: Duration = Duration::from_secs(10);
/// A failed deletion is tried again after a wait that doubles from the first to the last.
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// What became of one deletion, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The API server took the deletion.
    Deleted,
    /// A dry run: logged and counted, not deleted.
    WouldDelete,
    /// The job was already gone (404).
    Gone,
    /// A job of the same name with another uid stands there now (409): left alone.
    Replaced,
    /// The call failed; the job is tried again.
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Deleted => "deleted",
            Outcome::WouldDelete => "would_delete",
            Outcome::Gone => "gone",
            Outcome::Replaced => "replaced",
            Outcome::Failed => "failed",
        }
    }
}

/// Clean-up as the status shows it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CleanupStatus {
    /// Whether any rule is configured.
    pub on: bool,
    pub dry_run: bool,
    /// Scheduled and held jobs, by cluster and stage; held jobs by name.
    #[serde(flatten)]
    pub schedule: ScheduleView,
    /// Deletions by cluster, kind and outcome since the start.
    pub outcomes: Vec<OutcomeCount>,
}

/// One counter of [`CleanupStatus::outcomes`].
#[derive(Debug, Clone, Serialize)]
pub struct OutcomeCount {
    pub cluster: String,
    pub kind: String,
    pub outcome: Outcome,
    pub count: u64,
}

type Work = (FinishedJob, CleanupRule);

/// A cluster's deleter task, as the cleaner reaches it.
struct Deleter {
    queue: mpsc::UnboundedSender<Work>,
    /// Cancelled when the cluster stops: the task ends before its next deletion, so a
    /// cluster that reconnects at once never has two deleters.
    stop: CancellationToken,
}

/// The clean-up task's shared state: the clients, one deleter per cluster, the counters.
pub struct Cleaner {
    schedule: Arc<Schedule>,
    routes: Routes,
    store: Arc<dyn DeliveryStore>,
    clients: RwLock<HashMap<String, Client>>,
    deleters: Mutex<HashMap<String, Deleter>>,
    outcomes: Mutex<BTreeMap<(String, String, Outcome), u64>>,
}

impl Cleaner {
    pub fn new(
        schedule: Arc<Schedule>,
        routes: Routes,
        store: Arc<dyn DeliveryStore>,
    ) -> Arc<Cleaner> {
        Arc::new(Cleaner {
            schedule,
            routes,
            store,
            clients: RwLock::new(HashMap::new()),
            deleters: Mutex::new(HashMap::new()),
            outcomes: Mutex::new(BTreeMap::new()),
        })
    }

    /// A cluster's client is ready (its supervisor connected).
    pub fn register(&self, cluster: &str, client: Client) {
        let mut clients = self.clients.write();
        clients.insert(cluster.to_string(), client);
    }

    /// A cluster stopped (removed, restarted, or handed to another replica): its deleter ends
    /// and its jobs leave the schedule; whoever lists the cluster next schedules them again.
    pub fn unregister(&self, cluster: &str) {
        self.clients.write().remove(cluster);
        if let Some(deleter) = self.deleters.lock().remove(cluster) {
            deleter.stop.cancel();
        }
        self.schedule.forget_cluster(cluster);
    }

    /// Takes due jobs once a second until cancelled.
    pub async fn run(self: Arc<Cleaner>, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => self.tick(),
                _ = cancel.cancelled() => return,
            }
        }
    }

    /// Queues every due job to its cluster's deleter (started on first use).
    fn tick(self: &Arc<Cleaner>) {
        let due = self.schedule.take_due(chrono::Utc::now(), Instant::now());
        for (job, rule) in due {
            let key = job.key();
            let connected = self.clients.read().contains_key(&job.cluster);
            if !connected {
                self.schedule
                    .hold(&key, Held::NotConnected, RECHECK_BLOCKED);
                continue;
            }
            let sender = {
                let mut deleters = self.deleters.lock();
                deleters
                    .entry(job.cluster.clone())
                    .or_insert_with(|| self.start_deleter(&job.cluster))
                    .queue
                    .clone()
            };
            if let Err(mpsc::error::SendError((job, _))) = sender.send((job, rule)) {
                self.schedule
                    .hold(&job.key(), Held::NotConnected, RECHECK_BLOCKED);
            }
        }
    }

    fn start_deleter(self: &Arc<Cleaner>, cluster: &str) -> Deleter {
        let (queue, work) = mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        tokio::spawn(
            self.clone()
                .deleter(cluster.to_string(), work, stop.clone()),
        );
        Deleter { queue, stop }
    }

    /// One cluster's deletions, one at a time at the configured pace, until the cluster stops.
    async fn deleter(
        self: Arc<Cleaner>,
        cluster: String,
        mut work: mpsc::UnboundedReceiver<Work>,
        stop: CancellationToken,
    ) {
        let mut pace = Pace::new(self.schedule.settings().per_cluster_per_second);
        loop {
            let next = tokio::select! {
                next = work.recv() => next,
                _ = stop.cancelled() => None,
            };
            let Some((job, rule)) = next else { return };
            let key = job.key();
            // The lanes (in memory) first: a job they still hold spends none of the pace.
            if let Some(held) = self.lanes_hold(&job, &self.scope(&job, &rule)) {
                self.hold(&cluster, &job, held);
                continue;
            }
            let settings = self.schedule.settings();
            pace.follow(settings.per_cluster_per_second);
            tokio::select! {
                _ = pace.limiter.until_ready() => {}
                _ = stop.cancelled() => return,
            }
            // Its turn, perhaps long after it was taken (a backlog at the pace): is it still
            // taken — not restarted by its policy, deleted by someone else, or out of the
            // rules since? Then the lanes again (they may have been given more of the job
            // during the wait), then the store's dead letters, read now. A lane stores a dead
            // letter before it lets go of the event, so a lane idle now has stored every dead
            // letter it will make of what it had.
            if !self.schedule.still_taken(&key) {
                continue;
            }
            let scope = self.scope(&job, &rule);
            let held = match self.lanes_hold(&job, &scope) {
                Some(held) => Some(held),
                None => self.dead_lettered(&job, &scope).await,
            };
            if let Some(held) = held {
                self.hold(&cluster, &job, held);
                continue;
            }
            let Some(client) = self.clients.read().get(&cluster).cloned() else {
                self.schedule
                    .hold(&key, Held::NotConnected, RECHECK_BLOCKED);
                continue;
            };
            let outcome = delete(client, &job, &settings).await;
            self.count(&job, outcome.0);
            match outcome {
                (Outcome::WouldDelete, _) => self.schedule.would_delete(&key),
                (Outcome::Failed, why) => {
                    let error = why.clone();
                    let wait = self.schedule.failed(&key, why, retry_wait);
                    tracing::warn!(%cluster, namespace = %job.namespace, job = %job.name,
                        %error, retry_in_s = wait.as_secs(), "cannot delete the finished job");
                }
                _ => self.schedule.done(&key),
            }
        }
    }

    fn hold(&self, cluster: &str, job: &FinishedJob, held: Held) {
        let recheck = match held {
            Held::PendingDelivery(_) => RECHECK_PENDING,
            _ => RECHECK_BLOCKED,
        };
        tracing::debug!(%cluster, job = %job.name, reason = ?held, "clean-up held");
        self.schedule.hold(&job.key(), held, recheck);
    }

    /// The plugins in scope for the job: `once_delivered`, or every plugin whose lane wants
    /// the kind.
    fn scope(&self, job: &FinishedJob, rule: &CleanupRule) -> Vec<String> {
        match &rule.once_delivered {
            Some(names) => names.clone(),
            None => self
                .routes
                .lanes()
                .iter()
                .filter(|(_, lane)| lane.wants(&job.kind.name))
                .map(|(name, _)| name.clone())
                .collect(),
        }
    }

    /// A plugin in scope that is not loaded, or that has events of the job queued or in
    /// flight.
    fn lanes_hold(&self, job: &FinishedJob, scope: &[String]) -> Option<Held> {
        let key = job.key();
        for name in scope {
            match self.routes.get(name) {
                None => return Some(Held::PluginNotLoaded(name.clone())),
                Some(lane) if lane.owes(&key) => return Some(Held::PendingDelivery(name.clone())),
                Some(_) => {}
            }
        }
        None
    }

    /// A plugin in scope with a dead letter of the job stored.
    async fn dead_lettered(&self, job: &FinishedJob, scope: &[String]) -> Option<Held> {
        if scope.is_empty() {
            return None;
        }
        match self
            .store
            .dead_lettered_plugins(&job.cluster, &job.uid)
            .await
        {
            Ok(plugins) => plugins
                .into_iter()
                .find(|p| scope.contains(p))
                .map(Held::DeadLettered),
            Err(e) => Some(Held::Failing(format!("cannot read the dead letters: {e}"))),
        }
    }

    fn count(&self, job: &FinishedJob, outcome: Outcome) {
        let mut outcomes = self.outcomes.lock();
        *outcomes
            .entry((job.cluster.clone(), job.kind.name.clone(), outcome))
            .or_default() += 1;
    }

    /// Clean-up for the status page and the metrics.
    pub fn status(&self) -> CleanupStatus {
        let settings = self.schedule.settings();
        let outcomes = self.outcomes.lock();
        CleanupStatus {
            on: settings.is_on(),
            dry_run: settings.dry_run,
            schedule: self.schedule.snapshot(),
            outcomes: outcomes
                .iter()
                .map(|((cluster, kind, outcome), count)| OutcomeCount {
                    cluster: cluster.clone(),
                    kind: kind.clone(),
                    outcome: *outcome,
                    count: *count,
                })
                .collect(),
        }
    }
}

/// The deleter's rate limiter, rebuilt when the configured pace changes.
struct Pace {
    rate: std::num::NonZeroU32,
    limiter: DefaultDirectRateLimiter,
}

impl Pace {
    fn new(rate: std::num::NonZeroU32) -> Pace {
        Pace {
            rate,
            limiter: limiter(rate),
        }
    }

    fn follow(&mut self, rate: std::num::NonZeroU32) {
        if rate != self.rate {
            *self = Pace::new(rate);
        }
    }
}

/// Evenly spaced, no burst: at most `rate` deletions in any second, plus one.
fn limiter(rate: std::num::NonZeroU32) -> DefaultDirectRateLimiter {
    RateLimiter::direct(Quota::per_second(rate).allow_burst(std::num::NonZeroU32::MIN))
}

/// The wait before the next attempt after `failures` failed ones.
fn retry_wait(failures: u32) -> Duration {
    ExponentialBuilder::default()
        .with_min_delay(RETRY_MIN)
        .with_max_delay(RETRY_MAX)
        .without_max_times()
        .build()
        .nth(failures.saturating_sub(1) as usize)
        .unwrap_or(RETRY_MAX)
}

/// Deletes the job (or, in a dry run, says it would), with its uid as the precondition.
async fn delete(
    client: Client,
    job: &FinishedJob,
    settings: &CleanupSettings,
) -> (Outcome, String) {
    if settings.dry_run {
        tracing::info!(cluster = %job.cluster, namespace = %job.namespace, job = %job.name,
            uid = %job.uid, "dry run: would delete the finished job");
        return (Outcome::WouldDelete, String::new());
    }
    let resource = ApiResource {
        group: job.kind.group.clone(),
        version: job.kind.version.clone(),
        api_version: job.kind.api_version(),
        kind: job.kind.kind.clone(),
        plural: job.kind.plural.clone(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client, &job.namespace, &resource);
    let params = DeleteParams {
        propagation_policy: Some(match settings.propagation {
            Propagation::Background => PropagationPolicy::Background,
            Propagation::Foreground => PropagationPolicy::Foreground,
            Propagation::Orphan => PropagationPolicy::Orphan,
        }),
        preconditions: Some(Preconditions {
            uid: Some(job.uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&job.name, &params).await {
        Ok(_) => {
            tracing::info!(cluster = %job.cluster, namespace = %job.namespace, job = %job.name,
                uid = %job.uid, propagation = settings.propagation.as_str(),
                "finished job delivered and deleted");
            (Outcome::Deleted, String::new())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => (Outcome::Gone, String::new()),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            tracing::info!(cluster = %job.cluster, namespace = %job.namespace, job = %job.name,
                uid = %job.uid, "a job of the same name with another uid stands there now; \
                it is left alone");
            (Outcome::Replaced, String::new())
        }
        Err(e) => (Outcome::Failed, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_wait_longer_each_time_up_to_the_last() {
        let waits: Vec<Duration> = (1..=12).map(retry_wait).collect();
        assert_eq!(waits[0], RETRY_MIN);
        assert!(waits.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(*waits.last().expect("waits"), RETRY_MAX);
    }
}
