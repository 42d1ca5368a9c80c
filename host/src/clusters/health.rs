//! Per-cluster health: what the streams do now (connecting, synced, degraded or error, with
//! the last error), and the cluster's availability judged over health checks with hysteresis
//! (online / degraded / offline: [`jobrelay_fleet::availability`]).
//!
//! Kept in one shared board so the status API, metrics and `check` read the same truth. The
//! crossings of availability (offline, back online) go to whoever listens
//! ([`HealthBoard::on_change`]): the daemon makes fleet events of them.

use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::credentials::CredentialExpiry;
use crate::config::inventory::Readiness;
use jobrelay_fleet::availability::{Availability, Change, Judge, Source, Streams, Thresholds};
use jobrelay_watch::watcher::Progress;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthState {
    /// Building the client or waiting for the first list of every stream.
    Connecting,
    /// Every watch stream has listed and is watching.
    Synced,
    /// Some streams are synced, others are failing.
    Degraded,
    /// No stream is working.
    Error,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClusterHealth {
    pub state: HealthState,
    pub last_error: Option<String>,
    /// RFC 3339 time of the last state change.
    pub since: String,
    /// Watch streams of this cluster (kinds × namespaces).
    pub streams: usize,
    pub streams_synced: usize,
    /// Failed attempts to add jobrelay's finalizer to this cluster's jobs (each is retried),
    /// since jobrelay started.
    pub finalizer_add_failures: u64,
    /// Job objects that could not be read and were skipped, since jobrelay started.
    pub unreadable_objects: u64,
    /// The last one, `namespace/name: reason`.
    pub last_unreadable: Option<String>,
    /// Kinds this cluster does not serve (their CRD is not installed): not a fault of the
    /// cluster, so they do not make it degraded; checked again with backoff, and watched as
    /// soon as the resource appears.
    pub kinds_not_installed: Vec<String>,
    /// The configured kinds watched on this cluster (their names), so that metrics can show
    /// every (cluster, kind) series from the start, at 0 before its first event.
    pub kinds: Vec<String>,
    /// When the credentials of the cluster's kubeconfig expire: the token's `exp` (a JWT's) and
    /// the client certificate's notAfter, whichever are there (none for an opaque token, a
    /// service-account token without `exp`, or exec authentication). Read whenever the
    /// kubeconfig is (re)loaded.
    pub credentials_expire: Vec<CredentialExpiry>,
    /// Online, degraded, offline (or still connecting), judged over health checks: see
    /// [`jobrelay_fleet::availability`].
    pub availability: Availability,
    /// RFC 3339 time the availability last changed.
    pub availability_since: String,
    /// Health checks failed in a row (0 once one passes).
    pub failed_checks: u32,
    /// The last health check was refused for the cluster's credentials: the API server
    /// answered `401 Unauthorized` (a revoked or expired token). Offline for that, not for
    /// an API server that does not answer: `jobrelay_cluster_unauthorized` and its alert.
    pub unauthorized: bool,
    /// RFC 3339 time the cluster was last wholly in sync (every stream listed or watching).
    pub last_sync: Option<String>,
    /// What the cluster's inventory object says against its control plane, while it does
    /// (`cluster_sources`; it feeds `availability`, see [`jobrelay_fleet::availability`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_says: Option<Readiness>,
    #[serde(skip)]
    stream_state: Vec<StreamState>,
    /// Kept across restarts of the cluster (a new kubeconfig), like the counters.
    #[serde(skip)]
    judge: Judge,
}

/// A crossing of a cluster's availability, for fleet events.
#[derive(Debug, Clone)]
pub struct AvailabilityChange {
    pub cluster: String,
    pub change: Change,
    /// The cluster's last error, when it went offline.
    pub last_error: Option<String>,
    /// How many checks failed in a row (the threshold crossed, or more).
    pub failed_checks: u32,
    /// What its inventory object says against its control plane, if anything.
    pub source_says: Option<String>,
}

/// How clusters are checked (main file `cluster_health`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckSettings {
    /// Time between two health checks of a cluster.
    pub interval: Duration,
    pub thresholds: Thresholds,
}

impl Default for CheckSettings {
    fn default() -> Self {
        CheckSettings {
            interval: Duration::from_secs(10),
            thresholds: Thresholds::default(),
        }
    }
}

/// Why one health check of a cluster failed; its text is the cluster's `last_error`.
#[derive(Debug, thiserror::Error)]
pub enum CheckFailure {
    /// The probe (`GET /version`) failed: the API server answered with an error, or could
    /// not be reached.
    #[error("health check of {server}: {source}")]
    Probe {
        /// The API server asked, as [`crate::config::sources::server_of`] names it.
        server: String,
        #[source]
        source: kube::Error,
    },
    /// The API server did not answer the probe in time.
    #[error("health check: no answer from the API server within {} ms", .within.as_millis())]
    NoAnswer { within: Duration },
    /// The cluster failed before any check could run (its client could not be built): why, as
    /// the client's error says it.
    #[error("{0}")]
    NoClient(String),
}

impl CheckFailure {
    /// Whether the API server refused the credentials (`401 Unauthorized`).
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, CheckFailure::Probe { source: kube::Error::Api(status), .. }
            if status.code == 401)
    }
}

type Listener = Arc<dyn Fn(AvailabilityChange) + Send + Sync>;

/// Where one stream is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum StreamState {
    Waiting,
    Synced,
    Failing,
    /// The cluster does not serve this kind (its name).
    NotInstalled(String),
}

/// The health of every cluster, shared between supervisors and readers.
#[derive(Clone, Default)]
pub struct HealthBoard {
    inner: Arc<RwLock<BTreeMap<String, ClusterHealth>>>,
    /// What the inventory objects say against their clusters' control planes, kept apart
    /// so a cluster (re)started after the report still hears it.
    sources: Arc<RwLock<BTreeMap<String, Readiness>>>,
    settings: Arc<RwLock<CheckSettings>>,
    listener: Arc<RwLock<Option<Listener>>>,
}

impl std::fmt::Debug for HealthBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthBoard")
            .field("clusters", &self.inner)
            .finish_non_exhaustive()
    }
}

fn now() -> String {
    rfc3339(chrono::Utc::now().timestamp_millis())
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// RFC 3339 with milliseconds, from ms since the epoch.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl HealthBoard {
    /// Who hears of availability crossings (one listener; set again, it replaces the last).
    pub fn on_change(&self, listener: impl Fn(AvailabilityChange) + Send + Sync + 'static) {
        *self.listener.write() = Some(Arc::new(listener));
    }

    /// Tells each cluster's standing availability again (offline, or reachable) to the
    /// listener — for a replica that has just taken the Lease: what it judged while following
    /// reached no plugin, and the leader it replaces may have died before delivering. The lanes'
    /// shared cursors drop what was delivered, and a reachable cluster is news only after an
    /// outage a plugin was told of.
    pub fn tell_standing(&self) {
        let standing: Vec<AvailabilityChange> = {
            let map = self.inner.read();
            map.iter()
                .filter_map(|(cluster, h)| {
                    Some(AvailabilityChange {
                        cluster: cluster.clone(),
                        change: h.judge.standing()?,
                        last_error: h.last_error.clone(),
                        failed_checks: h.failed_checks,
                        source_says: h.source_says.as_ref().map(|r| r.detail.clone()),
                    })
                })
                .collect()
        };
        tracing::info!(
            clusters = standing.len(),
            "leading: telling each cluster's standing availability again"
        );
        let listener = self.listener.read().clone();
        if let Some(listener) = listener {
            for change in standing {
                listener(change);
            }
        }
    }

    /// How clusters are checked from now on; every cluster's judge takes the new thresholds.
    pub fn set_check_settings(&self, settings: CheckSettings) {
        *self.settings.write() = settings;
        let mut map = self.inner.write();
        for h in map.values_mut() {
            h.judge.set_thresholds(settings.thresholds);
        }
    }

    pub fn check_settings(&self) -> CheckSettings {
        *self.settings.read()
    }

    /// One health check of the cluster: whether its API server answered the probe (and, when
    /// not, why); see [`Judge::check`].
    pub fn check(&self, cluster: &str, answered: Result<(), CheckFailure>) {
        self.change(cluster, |h| {
            if let Err(error) = &answered {
                // The cause beneath a client's error is what an operator can act on.
                h.last_error = Some(jobrelay_capabilities::open_error::chain(error));
            }
            h.unauthorized = answered.as_ref().is_err_and(CheckFailure::is_unauthorized);
            let change = h.judge.check(answered.is_ok(), now_ms());
            h.publish_availability();
            change
        });
    }

    /// Changes one cluster's entry with `f`, and tells of the availability change it made.
    fn change(&self, cluster: &str, f: impl FnOnce(&mut ClusterHealth) -> Option<Change>) {
        let change = {
            let mut map = self.inner.write();
            let Some(h) = map.get_mut(cluster) else {
                return;
            };
            f(h).map(|change| AvailabilityChange {
                cluster: cluster.to_string(),
                change,
                last_error: h.last_error.clone(),
                failed_checks: h.failed_checks,
                source_says: h.source_says.as_ref().map(|r| r.detail.clone()),
            })
        };
        if let Some(change) = change {
            self.tell(change);
        }
    }

    fn tell(&self, change: AvailabilityChange) {
        let listener = self.listener.read().clone();
        match &change.change {
            Change::Offline { .. } => tracing::warn!(cluster = %change.cluster,
                failed_checks = change.failed_checks,
                last_error = change.last_error.as_deref().unwrap_or(""),
                source_says = change.source_says.as_deref().unwrap_or(""),
                "cluster offline: its health checks failed in a row"),
            Change::Online { .. } => {
                tracing::info!(cluster = %change.cluster, "cluster back online")
            }
        }
        if let Some(listener) = listener {
            listener(change);
        }
    }

    /// A cluster (re)starts: connecting, with `streams` streams to come, of the configured
    /// `kinds`.
    pub fn connecting(&self, cluster: &str, streams: usize, kinds: Vec<String>) {
        let mut map = self.inner.write();
        // A counter, so it survives the cluster's restarts.
        let old = map.get(cluster);
        let finalizer_add_failures = old.map_or(0, |h| h.finalizer_add_failures);
        let unreadable_objects = old.map_or(0, |h| h.unreadable_objects);
        let last_unreadable = old.and_then(|h| h.last_unreadable.clone());
        // Kept until the restarting cluster sets them again, so no reader sees them vanish.
        let credentials_expire = old
            .map(|h| h.credentials_expire.clone())
            .unwrap_or_default();
        let thresholds = self.settings.read().thresholds;
        let source_says = self.sources.read().get(cluster).cloned();
        let judge = match old {
            Some(h) => h.judge.clone(),
            None => {
                let mut judge = Judge::new(thresholds, now_ms());
                // Nothing failed yet, so no crossing can come of it.
                let _ = judge.source(said(source_says.as_ref()), now_ms());
                judge
            }
        };
        let mut health = ClusterHealth {
            state: HealthState::Connecting,
            last_error: None,
            since: now(),
            streams,
            streams_synced: 0,
            finalizer_add_failures,
            unreadable_objects,
            last_unreadable,
            kinds_not_installed: Vec::new(),
            kinds,
            credentials_expire,
            availability: Availability::Connecting,
            availability_since: String::new(),
            failed_checks: 0,
            unauthorized: false,
            last_sync: None,
            source_says,
            stream_state: vec![StreamState::Waiting; streams],
            judge,
        };
        health.publish_availability();
        map.insert(cluster.to_string(), health);
    }

    /// The expiries of the credentials of the cluster's kubeconfig, as just loaded.
    pub fn credentials(&self, cluster: &str, expire: Vec<CredentialExpiry>) {
        let mut map = self.inner.write();
        if let Some(h) = map.get_mut(cluster) {
            h.credentials_expire = expire;
        }
    }

    /// The cluster failed before any stream could start (e.g. its client could not be built).
    /// Counts as a failed health check: no client, no checks.
    pub fn failed(&self, cluster: &str, error: String) {
        self.update(cluster, |h| {
            h.last_error = Some(error.clone());
            h.stream_state
                .iter_mut()
                .for_each(|state| *state = StreamState::Failing);
        });
        self.check(cluster, Err(CheckFailure::NoClient(error)));
    }

    /// One stream reported progress.
    pub fn stream(&self, cluster: &str, index: usize, progress: Progress) {
        self.update(cluster, |h| {
            if let Some(state) = h.stream_state.get_mut(index) {
                match progress {
                    Progress::Synced => *state = StreamState::Synced,
                    Progress::Retrying => {
                        if *state == StreamState::Failing {
                            *state = StreamState::Waiting;
                        }
                    }
                    Progress::NotInstalled(kind) => *state = StreamState::NotInstalled(kind),
                    Progress::Error(e) => {
                        *state = StreamState::Failing;
                        h.last_error = Some(e);
                    }
                    Progress::FinalizerFailed(_) => h.finalizer_add_failures += 1,
                    Progress::Unreadable(report) => {
                        h.unreadable_objects += 1;
                        h.last_unreadable = Some(report);
                    }
                }
            }
        });
    }

    /// What the inventory objects say against their clusters' control planes now (a
    /// cluster not in `said`: nothing); each cluster's judge hears it, and a crossing it
    /// makes is told as any other.
    pub fn set_sources(&self, said: BTreeMap<String, Readiness>) {
        *self.sources.write() = said.clone();
        let clusters: Vec<String> = self.inner.read().keys().cloned().collect();
        for cluster in clusters {
            let readiness = said.get(&cluster).cloned();
            self.change(&cluster, |h| {
                if h.source_says == readiness {
                    return None;
                }
                match &readiness {
                    Some(r) => tracing::warn!(cluster = %cluster, source_says = %r.detail,
                        "the cluster's source reports its control plane unhealthy"),
                    None if h.source_says.is_some() => tracing::info!(cluster = %cluster,
                        "the cluster's source no longer reports against its control plane"),
                    None => {}
                }
                h.source_says = readiness;
                let change = h.judge.source(said_of(h), now_ms());
                h.publish_availability();
                change
            });
        }
    }

    pub fn remove(&self, cluster: &str) {
        let mut map = self.inner.write();
        map.remove(cluster);
    }

    pub fn get(&self, cluster: &str) -> Option<ClusterHealth> {
        let map = self.inner.read();
        map.get(cluster).cloned()
    }

    pub fn snapshot(&self) -> BTreeMap<String, ClusterHealth> {
        self.inner.read().clone()
    }

    /// Changes one cluster's entry, and tells of an availability change it made.
    fn update(&self, cluster: &str, f: impl FnOnce(&mut ClusterHealth)) {
        self.change(cluster, |h| {
            f(h);
            h.settle()
        });
    }
}

/// The judge's view of what a source says.
fn said(readiness: Option<&Readiness>) -> Source {
    readiness.map_or(Source::Ready, |r| r.state)
}

fn said_of(h: &ClusterHealth) -> Source {
    said(h.source_says.as_ref())
}

impl ClusterHealth {
    /// Works out the streams' state and the cluster's after a change of a stream.
    fn settle(&mut self) -> Option<Change> {
        let h = self;
        h.streams_synced = h
            .stream_state
            .iter()
            .filter(|s| **s == StreamState::Synced)
            .count();
        let mut missing: Vec<String> = h
            .stream_state
            .iter()
            .filter_map(|s| match s {
                StreamState::NotInstalled(kind) => Some(kind.clone()),
                _ => None,
            })
            .collect();
        missing.sort();
        missing.dedup();
        // A stream of a kind the cluster does not serve is as good as synced: there is
        // nothing to watch there until the resource appears.
        let fine = h.streams_synced
            + h.stream_state
                .iter()
                .filter(|s| matches!(s, StreamState::NotInstalled(_)))
                .count();
        h.kinds_not_installed = missing;
        let state = if fine == h.streams && h.streams > 0 {
            HealthState::Synced
        } else if h.last_error.is_none() {
            HealthState::Connecting
        } else if fine > 0 {
            HealthState::Degraded
        } else {
            HealthState::Error
        };
        if state != h.state {
            h.state = state;
            h.since = now();
        }
        let failing = h
            .stream_state
            .iter()
            .filter(|s| **s == StreamState::Failing)
            .count();
        let streams = if fine == h.streams {
            Streams::Synced
        } else if failing == 0 {
            Streams::Starting
        } else if failing + (fine - h.streams_synced) == h.streams {
            // Every stream that is not a missing kind is failing.
            Streams::AllFailing
        } else {
            Streams::SomeFailing
        };
        let change = h.judge.streams(streams, now_ms());
        h.publish_availability();
        change
    }

    /// Copies the judge's verdict into the fields readers see.
    fn publish_availability(&mut self) {
        self.availability = self.judge.state();
        self.availability_since = rfc3339(self.judge.since());
        self.failed_checks = self.judge.failed_in_a_row();
        self.last_sync = self.judge.last_sync().map(rfc3339);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_follow_stream_progress() {
        let b = HealthBoard::default();
        b.connecting("a", 2, vec!["batch-job".into()]);
        assert_eq!(b.get("a").map(|h| h.state), Some(HealthState::Connecting));
        b.stream("a", 0, Progress::Synced);
        assert_eq!(b.get("a").map(|h| h.state), Some(HealthState::Connecting));
        b.stream("a", 1, Progress::Error("boom".into()));
        assert_eq!(b.get("a").map(|h| h.state), Some(HealthState::Degraded));
        b.stream("a", 0, Progress::Error("down".into()));
        let h = b.get("a").expect("present");
        assert_eq!(h.state, HealthState::Error);
        assert_eq!(h.last_error.as_deref(), Some("down"));
        b.stream("a", 0, Progress::Synced);
        b.stream("a", 1, Progress::Synced);
        assert_eq!(b.get("a").map(|h| h.state), Some(HealthState::Synced));
        b.remove("a");
        assert!(b.get("a").is_none());
    }

    /// Availability moves on checks with hysteresis, a brief failure of every stream only
    /// until the streams try again, and each crossing reaches the listener once.
    #[test]
    fn availability_crossings_reach_the_listener() {
        let b = HealthBoard::default();
        b.set_check_settings(CheckSettings {
            interval: Duration::from_millis(100),
            thresholds: Thresholds {
                offline_after: 2,
                online_after: 2,
            },
        });
        let heard = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let sink = heard.clone();
        b.on_change(move |c| {
            sink.lock()
                .push((c.cluster, matches!(c.change, Change::Online { .. })));
        });
        let heard = || heard.lock().clone();
        b.connecting("a", 1, vec!["batch-job".into()]);
        b.stream("a", 0, Progress::Synced);
        assert_eq!(heard(), [("a".to_string(), true)], "the first verdict");
        // A stream cut and retried between two checks fails no check.
        b.stream("a", 0, Progress::Error("cut".into()));
        b.stream("a", 0, Progress::Retrying);
        b.check("a", Ok(()));
        b.check("a", Ok(()));
        assert_eq!(
            b.get("a").map(|h| h.availability),
            Some(Availability::Online)
        );
        b.check(
            "a",
            Err(CheckFailure::NoAnswer {
                within: Duration::from_secs(1),
            }),
        );
        assert_eq!(
            b.get("a").map(|h| h.availability),
            Some(Availability::Degraded)
        );
        b.check(
            "a",
            Err(CheckFailure::NoAnswer {
                within: Duration::from_secs(1),
            }),
        );
        let h = b.get("a").expect("present");
        assert_eq!(h.availability, Availability::Offline);
        assert_eq!(h.failed_checks, 2);
        assert_eq!(heard().len(), 2);
        // A new kubeconfig restarts the cluster: the verdict stays.
        b.connecting("a", 1, vec!["batch-job".into()]);
        assert_eq!(
            b.get("a").map(|h| h.availability),
            Some(Availability::Offline)
        );
        b.stream("a", 0, Progress::Synced);
        b.check("a", Ok(()));
        assert_eq!(heard().len(), 2);
        b.check("a", Ok(()));
        assert_eq!(heard().last(), Some(&("a".to_string(), true)));
        assert_eq!(heard().len(), 3);
        assert!(b.get("a").expect("present").last_sync.is_some());
    }

    /// A kind the cluster does not serve is listed, not a fault: with every other stream
    /// synced the cluster is synced, and the kind leaves the list once its resource appears.
    #[test]
    fn a_kind_not_installed_is_listed_not_degraded() {
        let b = HealthBoard::default();
        b.connecting("a", 3, vec!["batch-job".into()]);
        b.stream("a", 0, Progress::Synced);
        b.stream("a", 1, Progress::NotInstalled("trainjob".into()));
        b.stream("a", 2, Progress::NotInstalled("trainjob".into()));
        let h = b.get("a").expect("present");
        assert_eq!(h.state, HealthState::Synced);
        assert_eq!(h.streams_synced, 1);
        assert_eq!(h.kinds_not_installed, vec!["trainjob".to_string()]);
        b.stream("a", 0, Progress::Error("down".into()));
        assert_eq!(b.get("a").map(|h| h.state), Some(HealthState::Degraded));
        b.stream("a", 0, Progress::Synced);
        b.stream("a", 1, Progress::Synced);
        b.stream("a", 2, Progress::Synced);
        let h = b.get("a").expect("present");
        assert_eq!(h.state, HealthState::Synced);
        assert!(h.kinds_not_installed.is_empty());
    }

    /// The credentials' expiries stay through a restart of the cluster until set again, and a
    /// new kubeconfig's replace the old ones.
    #[test]
    fn credential_expiries_are_replaced_on_reload() {
        use crate::clusters::credentials::{Credential, CredentialExpiry};
        let token = |unix: i64| CredentialExpiry {
            credential: Credential::Token,
            expires_at: String::new(),
            expires_unix: unix,
        };
        let b = HealthBoard::default();
        b.credentials("a", vec![token(1)]);
        assert!(
            b.get("a").is_none(),
            "no entry is made for an unknown cluster"
        );
        b.connecting("a", 1, vec!["batch-job".into()]);
        assert!(b.get("a").expect("present").credentials_expire.is_empty());
        b.credentials("a", vec![token(1)]);
        b.stream("a", 0, Progress::Synced);
        b.connecting("a", 1, vec!["batch-job".into()]);
        assert_eq!(b.get("a").expect("present").credentials_expire, [token(1)]);
        b.credentials("a", vec![token(2)]);
        let json = serde_json::to_value(b.get("a").expect("present")).expect("JSON");
        assert_eq!(json["credentials_expire"][0]["expires_unix"], 2);
        assert_eq!(json["credentials_expire"][0]["credential"], "token");
        b.credentials("a", Vec::new());
        assert!(b.get("a").expect("present").credentials_expire.is_empty());
    }
}
