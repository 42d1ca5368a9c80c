//! Deleting finished jobs once their plugins have delivered them: the task that works through
//! the clean-up schedule ([`jobrelay_lanes::cleanup`]) with the clusters' clients.
//!
//! Once a second the due jobs are taken from the schedule and queued to their cluster's
//! deleter: one task per cluster, spacing its deletions by `per_cluster_per_second` (a
//! thousand jobs finishing at once are deleted at that pace, not in a burst on the API
//! server). Each job is checked when its turn comes, not when it was queued, because its
//! plugins may have been given more of it while it waited: every plugin in scope (`once_delivered`, or each
//! whose lane wants the kind) must have nothing of the job queued or in flight and no dead
//! letter of it stored; otherwise the job is held, with the reason, and looked at again later.
//!
//! The deletion carries the job's uid as a precondition (a job re-created under the same
//! name answers 409 and is left alone) and the configured propagation. A dry run stops
//! short of the call: it logs and counts the job once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBuilder};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Preconditions, PropagationPolicy};
use kube::discovery::ApiResource;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use jobrelay_lanes::cleanup::{
    CleanupSettings, FinishedJob, Held, Propagation, Rule, Schedule, ScheduleView,
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
/// How long a cluster's list of dead-lettered jobs is reused by its deleter.
const DEAD_LETTERS_FRESH: Duration = Duration::from_secs(1);

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

type Work = (FinishedJob, Rule);

/// The clean-up task's shared state: the clients, one deleter per cluster, the counters.
pub struct Cleaner {
    schedule: Arc<Schedule>,
    routes: Routes,
    store: Arc<dyn DeliveryStore>,
    clients: RwLock<HashMap<String, Client>>,
    deleters: Mutex<HashMap<String, mpsc::UnboundedSender<Work>>>,
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

    pub fn schedule(&self) -> &Arc<Schedule> {
        &self.schedule
    }

    /// A cluster's client is ready (its supervisor connected).
    pub fn register(&self, cluster: &str, client: Client) {
        let mut clients = self.clients.write().unwrap_or_else(|p| p.into_inner());
        clients.insert(cluster.to_string(), client);
    }

    /// A cluster stopped (removed, restarted, or handed to another replica): its deleter ends
    /// and its jobs leave the schedule; whoever lists the cluster next schedules them again.
    pub fn unregister(&self, cluster: &str) {
        self.clients
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(cluster);
        self.deleters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(cluster);
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
            let connected = self
                .clients
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&job.cluster);
            if !connected {
                self.schedule
                    .hold(&key, Held::NotConnected, RECHECK_BLOCKED);
                continue;
            }
            let sender = {
                let mut deleters = self.deleters.lock().unwrap_or_else(|p| p.into_inner());
                deleters
                    .entry(job.cluster.clone())
                    .or_insert_with(|| self.start_deleter(&job.cluster))
                    .clone()
            };
            if let Err(mpsc::error::SendError((job, _))) = sender.send((job, rule)) {
                self.schedule
                    .hold(&job.key(), Held::NotConnected, RECHECK_BLOCKED);
            }
        }
    }

    fn start_deleter(self: &Arc<Cleaner>, cluster: &str) -> mpsc::UnboundedSender<Work> {
        let (sender, queue) = mpsc::unbounded_channel();
        tokio::spawn(self.clone().deleter(cluster.to_string(), queue));
        sender
    }

    /// One cluster's deletions, one at a time at the configured pace, until the cluster stops.
    async fn deleter(
        self: Arc<Cleaner>,
        cluster: String,
        mut queue: mpsc::UnboundedReceiver<Work>,
    ) {
        let mut pace = Pace::new(self.schedule.settings().per_cluster_per_second);
        let mut dead_letters = DeadLetters::default();
        while let Some((job, rule)) = queue.recv().await {
            let settings = self.schedule.settings();
            let key = job.key();
            if let Some(held) = self.held(&job, &rule, &mut dead_letters).await {
                let recheck = match held {
                    Held::PendingDelivery(_) => RECHECK_PENDING,
                    _ => RECHECK_BLOCKED,
                };
                tracing::debug!(%cluster, job = %job.name, reason = ?held, "clean-up held");
                self.schedule.hold(&key, held, recheck);
                continue;
            }
            pace.follow(settings.per_cluster_per_second);
            pace.limiter.until_ready().await;
            let Some(client) = self
                .clients
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(&cluster)
                .cloned()
            else {
                self.schedule
                    .hold(&key, Held::NotConnected, RECHECK_BLOCKED);
                continue;
            };
            let outcome = delete(client, &job, &settings).await;
            self.count(&job, outcome.0);
            match outcome {
                (Outcome::WouldDelete, _) => self.schedule.would_delete(&key),
                (Outcome::Failed, why) => {
                    let failures = self.schedule.failures(&key);
                    let wait = retry_wait(failures);
                    tracing::warn!(%cluster, namespace = %job.namespace, job = %job.name,
                        error = %why, retry_in_s = wait.as_secs(), "cannot delete the finished job");
                    self.schedule.hold(&key, Held::Failing(why), wait);
                }
                _ => self.schedule.done(&key),
            }
        }
    }

    /// What still holds the job back, if anything: a plugin in scope with events of it
    /// queued or in flight, not loaded, or with a dead letter of it stored.
    async fn held(&self, job: &FinishedJob, rule: &Rule, dead: &mut DeadLetters) -> Option<Held> {
        let key = job.key();
        let lanes = self.routes.lanes();
        let scope: Vec<&str> = match &rule.once_delivered {
            Some(names) => names.iter().map(String::as_str).collect(),
            None => lanes
                .iter()
                .filter(|(_, lane)| lane.wants(&job.kind.name))
                .map(|(name, _)| name.as_str())
                .collect(),
        };
        for name in &scope {
            match lanes.get(*name) {
                None => return Some(Held::PluginNotLoaded(name.to_string())),
                Some(lane) if lane.owes(&key) => {
                    return Some(Held::PendingDelivery(name.to_string()));
                }
                Some(_) => {}
            }
        }
        if scope.is_empty() {
            return None;
        }
        let lettered = match dead.of(&*self.store, &job.cluster).await {
            Ok(lettered) => lettered,
            Err(why) => return Some(Held::Failing(why)),
        };
        scope
            .iter()
            .find(|name| lettered.contains(&(name.to_string(), job.uid.clone())))
            .map(|name| Held::DeadLettered(name.to_string()))
    }

    fn count(&self, job: &FinishedJob, outcome: Outcome) {
        let mut outcomes = self.outcomes.lock().unwrap_or_else(|p| p.into_inner());
        *outcomes
            .entry((job.cluster.clone(), job.kind.name.clone(), outcome))
            .or_default() += 1;
    }

    /// Clean-up for the status page and the metrics.
    pub fn status(&self) -> CleanupStatus {
        let settings = self.schedule.settings();
        let outcomes = self.outcomes.lock().unwrap_or_else(|p| p.into_inner());
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

/// One cluster's dead-lettered jobs, read from the store at most once a second.
#[derive(Default)]
struct DeadLetters {
    read: Option<(Instant, HashSet<(String, String)>)>,
}

impl DeadLetters {
    async fn of(
        &mut self,
        store: &dyn DeliveryStore,
        cluster: &str,
    ) -> Result<&HashSet<(String, String)>, String> {
        let fresh = self
            .read
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < DEAD_LETTERS_FRESH);
        if !fresh {
            let jobs = store
                .dead_lettered_jobs(cluster)
                .await
                .map_err(|e| format!("cannot read the dead letters: {e}"))?;
            self.read = Some((Instant::now(), jobs.into_iter().collect()));
        }
        match &self.read {
            Some((_, set)) => Ok(set),
            None => Err("the dead letters were not read".into()),
        }
    }
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
