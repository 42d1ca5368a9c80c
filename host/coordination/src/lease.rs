//! One `coordination.k8s.io/v1` Lease, taken and renewed with optimistic concurrency.
//!
//! Every write carries the `resourceVersion` that was read, so of two replicas that both see
//! the Lease free only the first write succeeds; the other gets 409 Conflict and stays out.
//! No field-ownership rules are relied on, only the apiserver's compare-and-swap on the
//! object version, which every Kubernetes version enforces the same way.
//!
//! Expiry is judged on this process's own monotonic clock: a Lease held by someone else counts
//! as expired when it has not changed for its `leaseDurationSeconds` since this process saw it
//! change. Wall clocks that disagree between machines therefore do not matter, only how fast
//! they run (the rule client-go's leader election uses too).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;

/// A failed read or write of the Lease (a lost race is not an error: see [`LeaseLock::try_hold`]).
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The API server refused the call or could not be reached.
    #[error("Lease {namespace}/{name}: {source}")]
    Api {
        /// The Lease's namespace.
        namespace: String,
        /// The Lease's name.
        name: String,
        /// kube's error, with the API's status when there is one.
        #[source]
        source: kube::Error,
    },
    /// The call hung past the limit [`bounded`] gave it.
    #[error("no answer from the home cluster in time")]
    TimedOut,
}

/// What one attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holding {
    /// This replica holds the Lease (it took it or renewed it just now).
    Held,
    /// Another replica holds it, or won the race for it; `None` while nobody does.
    Other(Option<String>),
}

/// A Lease as this process last saw it, with its own clock for expiry.
pub(super) struct Seen {
    resource_version: Option<String>,
    /// Never empty: an empty holder is no holder.
    holder: Option<String>,
    /// The Lease's `leaseDurationSeconds`, or the default if it has none.
    pub(super) duration: Duration,
    /// When (this process's clock) the Lease was first seen with this resourceVersion.
    pub(super) since: Instant,
}

impl Seen {
    /// `lease` as seen now; `default` stands in for a missing or zero duration.
    pub(super) fn new(lease: &Lease, default: Duration) -> Seen {
        let spec = lease.spec.as_ref();
        Seen {
            resource_version: lease.metadata.resource_version.clone(),
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            duration: spec
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|d| u64::try_from(d).ok())
                .filter(|d| *d > 0)
                .map_or(default, Duration::from_secs),
            since: Instant::now(),
        }
    }

    /// Notes `lease` read again: the clock keeps running while its version is unchanged and
    /// restarts when it changed.
    pub(super) fn refresh(&mut self, lease: &Lease, default: Duration) {
        if self.resource_version != lease.metadata.resource_version {
            *self = Seen::new(lease, default);
        }
    }

    /// Whether the Lease has gone unchanged for longer than its duration.
    pub(super) fn expired(&self) -> bool {
        self.since.elapsed() > self.duration
    }

    pub(super) fn holder(&self) -> Option<&str> {
        self.holder.as_deref()
    }
}

/// This replica's handle on one Lease.
pub struct LeaseLock {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    duration: Duration,
    seen: Option<Seen>,
    /// Labels the Lease is created with.
    labels: BTreeMap<String, String>,
}

impl LeaseLock {
    /// A handle on the Lease `namespace/name`, held as `identity` for `duration` at a time.
    /// Nothing is read or written until the first [`try_hold`](LeaseLock::try_hold).
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> LeaseLock {
        LeaseLock {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
            seen: None,
            labels: BTreeMap::new(),
        }
    }

    /// Creates the Lease with these labels (so a group of Leases can be listed).
    pub fn with_labels(mut self, labels: BTreeMap<String, String>) -> LeaseLock {
        self.labels = labels;
        self
    }

    /// The Lease's name, for logs and status.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The holder identity this replica writes into the Lease.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn failed(&self, source: kube::Error) -> LeaseError {
        LeaseError::Api {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }

    /// Takes the Lease if it is free or expired, renews it if this replica holds it, and
    /// otherwise leaves it alone. Creates the Lease if it does not exist.
    pub async fn try_hold(&mut self) -> Result<Holding, LeaseError> {
        let now = MicroTime(Timestamp::now());
        let Some(current) = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.failed(e))?
        else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    labels: (!self.labels.is_empty()).then(|| self.labels.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds(self.duration)),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return self.write(self.api.create(&PostParams::default(), &lease).await);
        };
        self.observe(&current);
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let ours = holder.as_deref() == Some(self.identity.as_str());
        if holder.is_some() && !ours && !self.expired() {
            return Ok(Holding::Other(holder));
        }
        let mut next = current;
        let spec = next.spec.get_or_insert_with(LeaseSpec::default);
        if !ours {
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.renew_time = Some(now);
        spec.lease_duration_seconds = Some(seconds(self.duration));
        self.write(
            self.api
                .replace(&self.name, &PostParams::default(), &next)
                .await,
        )
    }

    /// Gives the Lease up, if this replica holds it, so a follower need not wait for it to
    /// expire. A conflict means someone else changed it meanwhile: then it is not ours to give.
    pub async fn release(&mut self) -> Result<(), LeaseError> {
        let Some(mut current) = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.failed(e))?
        else {
            return Ok(());
        };
        let spec = current.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &current)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(self.failed(e)),
        }
    }

    /// Records the outcome of a create or replace.
    fn write(&mut self, result: Result<Lease, kube::Error>) -> Result<Holding, LeaseError> {
        match result {
            Ok(written) => {
                self.observe(&written);
                Ok(Holding::Held)
            }
            // Another replica wrote first (created it, or changed it since it was read).
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Holding::Other(None)),
            Err(e) => Err(self.failed(e)),
        }
    }

    /// Notes the Lease as read elsewhere (a list of the group): keeps the expiry clock running
    /// for a Lease this replica does not try to take yet.
    pub fn observe(&mut self, lease: &Lease) {
        match &mut self.seen {
            Some(seen) => seen.refresh(lease, self.duration),
            None => self.seen = Some(Seen::new(lease, self.duration)),
        }
    }

    /// Whether the Lease as last seen has gone unchanged for longer than its duration.
    fn expired(&self) -> bool {
        self.seen.as_ref().is_none_or(Seen::expired)
    }

    /// The holder as last seen.
    pub fn holder(&self) -> Option<&str> {
        self.seen.as_ref().and_then(Seen::holder)
    }
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX).max(1)
}

/// A Lease name from a prefix and a free-form part (an identity, a cluster name): lowercased,
/// with anything but letters, digits, '-' and '.' turned into '-', and cut to fit the 253
/// characters of an object name.
pub fn lease_name(prefix: &str, part: &str) -> String {
    let part: String = part
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut name = format!("{prefix}-{}", part.trim_matches(|c| c == '-' || c == '.'));
    name.truncate(253);
    name.trim_end_matches(['-', '.']).to_string()
}

/// A Lease call that gives up after `limit`: a request that hangs must not hold a replica past
/// its renew deadline.
pub async fn bounded<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, LeaseError>>,
) -> Result<T, LeaseError> {
    tokio::time::timeout(limit, call)
        .await
        .unwrap_or(Err(LeaseError::TimedOut))
}
