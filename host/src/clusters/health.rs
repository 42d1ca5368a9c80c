//! Per-cluster health: connecting, synced, degraded or error, with the last error.
//!
//! Kept in one shared board so the status API, metrics and `check` read the same truth.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde::Serialize;

use super::credentials::CredentialExpiry;
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
    #[serde(skip)]
    stream_state: Vec<StreamState>,
}

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
#[derive(Debug, Clone, Default)]
pub struct HealthBoard {
    inner: Arc<RwLock<BTreeMap<String, ClusterHealth>>>,
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl HealthBoard {
    /// A cluster (re)starts: connecting, with `streams` streams to come, of the configured
    /// `kinds`.
    pub fn connecting(&self, cluster: &str, streams: usize, kinds: Vec<String>) {
        let mut map = self.inner.write().unwrap_or_else(|p| p.into_inner());
        // A counter, so it survives the cluster's restarts.
        let old = map.get(cluster);
        let finalizer_add_failures = old.map_or(0, |h| h.finalizer_add_failures);
        let unreadable_objects = old.map_or(0, |h| h.unreadable_objects);
        let last_unreadable = old.and_then(|h| h.last_unreadable.clone());
        // Kept until the restarting cluster sets them again, so no reader sees them vanish.
        let credentials_expire = old
            .map(|h| h.credentials_expire.clone())
            .unwrap_or_default();
        map.insert(
            cluster.to_string(),
            ClusterHealth {
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
                stream_state: vec![StreamState::Waiting; streams],
            },
        );
    }

    /// The expiries of the credentials of the cluster's kubeconfig, as just loaded.
    pub fn credentials(&self, cluster: &str, expire: Vec<CredentialExpiry>) {
        let mut map = self.inner.write().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = map.get_mut(cluster) {
            h.credentials_expire = expire;
        }
    }

    /// The cluster failed before any stream could start (e.g. its client could not be built).
    pub fn failed(&self, cluster: &str, error: String) {
        self.update(cluster, |h| {
            h.last_error = Some(error);
            h.stream_state
                .iter_mut()
                .for_each(|state| *state = StreamState::Failing);
        });
    }

    /// One stream reported progress.
    pub fn stream(&self, cluster: &str, index: usize, progress: Progress) {
        self.update(cluster, |h| {
            if let Some(state) = h.stream_state.get_mut(index) {
                match progress {
                    Progress::Synced => *state = StreamState::Synced,
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

    pub fn remove(&self, cluster: &str) {
        let mut map = self.inner.write().unwrap_or_else(|p| p.into_inner());
        map.remove(cluster);
    }

    pub fn get(&self, cluster: &str) -> Option<ClusterHealth> {
        let map = self.inner.read().unwrap_or_else(|p| p.into_inner());
        map.get(cluster).cloned()
    }

    pub fn snapshot(&self) -> BTreeMap<String, ClusterHealth> {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn update(&self, cluster: &str, f: impl FnOnce(&mut ClusterHealth)) {
        let mut map = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let Some(h) = map.get_mut(cluster) else {
            return;
        };
        f(h);
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
