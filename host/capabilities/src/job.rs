//! The `jobrelay:plugin/job` interface: annotations and labels on the event's own job, under
//! the key prefixes the manifest grants, and nothing else.
//!
//! The interface names no job, so a plugin cannot even ask for another one: the target is the
//! call's event — its cluster, kind, namespace and name — and the write carries the event's
//! uid, which the API server checks (a merge patch whose `metadata.uid` differs from the
//! object's is refused with 409), so a job deleted and re-created under the same name is never
//! written for an old event. What a plugin can make the host do is bounded: keys only under
//! the granted prefixes, values up to `max_value_bytes`, at most `max_writes_per_call` writes
//! per call (and so per event; the calls themselves are as many as the lane makes, under the
//! manifest's `rate_limits`). Every refusal is an error value the plugin sees, counted in
//! `jobrelay_plugin_refusals_total{limit="job_writes"}`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;
use wasmtime::component::{HasSelf, Linker};

use super::pod_logs::ClusterDirectory;
use super::refusals::{Limit, Refusals};
use super::tape::{self, CallTape};
use super::{CallScope, Capability, GrantProblem, Grants, LoadScope, StoreSetup};
use jobrelay_bindings::jobrelay::plugin::job as wit;
use jobrelay_contract::event::JobEvent;
use jobrelay_contract::fleet;
use wit::Error as JobError;

/// Annotation value bytes when the grant sets no limit.
pub const DEFAULT_MAX_VALUE_BYTES: u32 = 4096;
/// The most a grant may allow for one annotation value (Kubernetes allows 256 KiB for all of
/// an object's annotations together).
pub const MAX_VALUE_BYTES: u32 = 65_536;
/// Writes per call when the grant sets no limit.
pub const DEFAULT_MAX_WRITES_PER_CALL: u32 = 8;
/// The most a grant may allow per call.
pub const MAX_WRITES_PER_CALL: u32 = 64;

/// What a plugin may write to its event's job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobGrant {
    /// Annotation key prefixes, e.g. `archive.jobrelay.io/`.
    #[serde(default)]
    pub annotations: Vec<String>,
    /// Label key prefixes.
    #[serde(default)]
    pub labels: Vec<String>,
    /// Bytes of one annotation value (default 4,096, at most 65,536).
    #[serde(default)]
    pub max_value_bytes: Option<u32>,
    /// Writes one call may make (default 8, at most 64).
    #[serde(default)]
    pub max_writes_per_call: Option<u32>,
}

/// The job capability.
pub struct Job;

impl Capability for Job {
    fn name(&self) -> &'static str {
        "job"
    }

    fn prepare(&self, grants: &mut Grants, _load: &LoadScope<'_>) -> Result<(), GrantProblem> {
        let Some(grant) = &grants.job else {
            return Ok(());
        };
        let problem = GrantProblem::Invalid;
        if grant.annotations.is_empty() && grant.labels.is_empty() {
            return Err(problem(
                "grants.job needs at least one prefix in `annotations` or `labels`".into(),
            ));
        }
        for (field, prefixes) in [
            ("annotations", &grant.annotations),
            ("labels", &grant.labels),
        ] {
            for (i, prefix) in prefixes.iter().enumerate() {
                check_prefix(prefix)
                    .map_err(|why| problem(format!("grants.job.{field}[{i}] `{prefix}`: {why}")))?;
            }
        }
        if let Some(n) = grant.max_value_bytes
            && !(1..=MAX_VALUE_BYTES).contains(&n)
        {
            return Err(problem(format!(
                "grants.job.max_value_bytes must be 1 to {MAX_VALUE_BYTES}, not {n}"
            )));
        }
        if let Some(n) = grant.max_writes_per_call
            && !(1..=MAX_WRITES_PER_CALL).contains(&n)
        {
            return Err(problem(format!(
                "grants.job.max_writes_per_call must be 1 to {MAX_WRITES_PER_CALL}, not {n}"
            )));
        }
        Ok(())
    }

    fn configure(&self, call: &CallScope<'_>, setup: &mut StoreSetup) -> Result<(), GrantProblem> {
        setup.state.job = match (&call.grants.job, call.event) {
            (Some(grant), event) => JobAccess {
                grant: Some(grant.clone()),
                // A fleet event's carrier names no object of the cluster: nothing to write to.
                event: event.filter(|e| !fleet::is_fleet(e)).map(Target::of),
                fleet_event: event.is_some_and(fleet::is_fleet),
                clusters: call.services.clusters.clone(),
                refusals: call.services.refusals.clone(),
                plugin: Arc::from(call.plugin),
                writes: 0,
                tape: call.tape(),
            },
            (None, _) => JobAccess::default(),
        };
        Ok(())
    }
}

/// Why a key prefix cannot be granted (`grants.job.annotations` or `.labels`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum PrefixProblem {
    /// No `/`: the prefix would take Kubernetes' own unprefixed keys.
    #[error(
        "a prefix is a domain and a `/` (`example.com/`), so it cannot take \
         Kubernetes' own unprefixed keys"
    )]
    NoDomain,
    /// What comes before the `/` is empty, too long, or not a DNS subdomain.
    #[error("the part before `/` is not a DNS subdomain")]
    NotDnsSubdomain,
    /// `kubernetes.io`, `k8s.io` or a subdomain of them.
    #[error("the kubernetes.io and k8s.io prefixes are Kubernetes' own")]
    KubernetesOwn,
}

/// A granted prefix: a DNS subdomain followed by `/` (`archive.jobrelay.io/`), optionally with
/// the start of a name after it (`archive.jobrelay.io/logs-`).
fn check_prefix(prefix: &str) -> Result<(), PrefixProblem> {
    let Some((domain, _)) = prefix.split_once('/') else {
        return Err(PrefixProblem::NoDomain);
    };
    if domain.is_empty()
        || domain.len() > 253
        || !jobrelay_contract::object_name::is_dns_subdomain(domain)
    {
        return Err(PrefixProblem::NotDnsSubdomain);
    }
    if domain == "kubernetes.io"
        || domain == "k8s.io"
        || domain.ends_with(".kubernetes.io")
        || domain.ends_with(".k8s.io")
    {
        return Err(PrefixProblem::KubernetesOwn);
    }
    Ok(())
}

/// A qualified name's name part, or a label value: up to 63 characters of `[A-Za-z0-9-_.]`,
/// starting and ending alphanumeric (a label value may also be empty).
fn is_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    !text.is_empty()
        && text.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The job of the call's event: where it lives and which object it is.
#[derive(Debug, Clone, Default)]
struct Target {
    cluster: String,
    api_version: String,
    kind: String,
    namespace: String,
    name: String,
    uid: String,
}

impl Target {
    fn of(event: &JobEvent) -> Target {
        Target {
            cluster: event.cluster.to_string(),
            api_version: event.api_version.to_string(),
            kind: event.kind.to_string(),
            namespace: event.namespace.to_string(),
            name: event.name.to_string(),
            uid: event.uid.to_string(),
        }
    }
}

/// What one call may write; nothing unless granted.
#[derive(Default)]
pub struct JobAccess {
    grant: Option<JobGrant>,
    /// `None` outside `handle`, and in a fleet event's call.
    event: Option<Target>,
    /// The call handles a fleet event (`handle-fleet`), which has no job.
    fleet_event: bool,
    clusters: ClusterDirectory,
    refusals: Arc<Refusals>,
    plugin: Arc<str>,
    writes: u32,
    /// The run's tape, if calls are recorded or replayed (`plugin run`, `plugin test`): a
    /// write is a call whose answer the plugin acts on, so it is taped as reads are.
    tape: Option<CallTape>,
}

/// Annotations or labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Annotations,
    Labels,
}

impl Field {
    fn as_str(self) -> &'static str {
        match self {
            Field::Annotations => "annotations",
            Field::Labels => "labels",
        }
    }
}

impl JobAccess {
    /// Checks a write against the grant; the reason is what the plugin is told.
    fn check(&mut self, field: Field, key: &str, value: Option<&str>) -> Result<(), JobError> {
        let Some(grant) = &self.grant else {
            return Err(JobError::Denied(
                "writes to the job are not granted to this plugin (grants.job)".into(),
            ));
        };
        if self.event.is_none() {
            return Err(JobError::Denied(if self.fleet_event {
                "a fleet event has no job to write to".into()
            } else {
                "there is no job in scope outside `handle`".into()
            }));
        }
        let prefixes = match field {
            Field::Annotations => &grant.annotations,
            Field::Labels => &grant.labels,
        };
        if !prefixes.iter().any(|p| key.starts_with(p.as_str())) {
            return Err(self.refused(JobError::Denied(format!(
                "{} key `{}` is outside the granted prefixes (grants.job.{}: {prefixes:?})",
                &field.as_str()[..field.as_str().len() - 1],
                cut(key),
                field.as_str()
            ))));
        }
        let name = key.split_once('/').map_or(key, |(_, name)| name);
        if !is_name(name) {
            return Err(self.refused(JobError::Invalid(format!(
                "key `{}`: the part after `/` must be 1 to 63 characters of letters, digits, \
                 `-`, `_` and `.`, starting and ending with a letter or digit",
                cut(key)
            ))));
        }
        if let Some(value) = value {
            let ok = match field {
                Field::Labels => value.is_empty() || is_name(value),
                Field::Annotations => {
                    value.len() <= grant.max_value_bytes.unwrap_or(DEFAULT_MAX_VALUE_BYTES) as usize
                }
            };
            if !ok {
                let why = match field {
                    Field::Labels => "a label value is up to 63 characters of letters, digits, \
                                      `-`, `_` and `.`, starting and ending with a letter or digit"
                        .to_string(),
                    Field::Annotations => format!(
                        "the value is {} bytes, over grants.job.max_value_bytes ({})",
                        value.len(),
                        grant.max_value_bytes.unwrap_or(DEFAULT_MAX_VALUE_BYTES)
                    ),
                };
                return Err(self.refused(JobError::Invalid(format!("key `{}`: {why}", cut(key)))));
            }
        }
        let limit = grant
            .max_writes_per_call
            .unwrap_or(DEFAULT_MAX_WRITES_PER_CALL);
        if self.writes >= limit {
            return Err(self.refused(JobError::Denied(format!(
                "this call already made {limit} writes to its job \
                 (grants.job.max_writes_per_call)"
            ))));
        }
        self.writes += 1;
        Ok(())
    }

    fn refused(&self, error: JobError) -> JobError {
        self.refusals.count(&self.plugin, Limit::JobWrites);
        error
    }

    async fn write(
        &mut self,
        field: Field,
        key: String,
        value: Option<String>,
    ) -> Result<(), JobError> {
        self.check(field, &key, value.as_deref())?;
        let Some(target) = &self.event else {
            return Err(JobError::Denied("no job in scope".into()));
        };
        let real = Self::patch(&self.clusters, target, field, &key, value.as_deref());
        let call = match field {
            Field::Annotations => "job.annotate",
            Field::Labels => "job.label",
        };
        let args = || json!({ "key": key, "value": value });
        tape::through(self.tape.as_ref(), call, args, real).await
    }

    /// The write itself: a merge patch of the job's metadata on its cluster.
    async fn patch(
        clusters: &ClusterDirectory,
        event: &Target,
        field: Field,
        key: &str,
        value: Option<&str>,
    ) -> Result<(), JobError> {
        let (client, resource) = clusters
            .job_resource(&event.cluster, &event.api_version, &event.kind)
            .map_err(|why| JobError::Unavailable(why.to_string()))?;
        let api: kube::Api<kube::api::DynamicObject> =
            kube::Api::namespaced_with(client, &event.namespace, &resource);
        // The uid in the patch is the precondition: the API server refuses it (409) when the
        // object under this name is another one.
        let patch = json!({
            "metadata": {
                "uid": event.uid,
                field.as_str(): { key: value },
            }
        });
        let params = kube::api::PatchParams::default();
        match api
            .patch(&event.name, &params, &kube::api::Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) => Err(match status.code {
                404 => JobError::Gone(format!(
                    "job {}/{} no longer exists",
                    event.namespace, event.name
                )),
                409 => JobError::Gone(format!(
                    "job {}/{} was deleted and re-created under its name; nothing written",
                    event.namespace, event.name
                )),
                403 => JobError::Denied(format!(
                    "the cluster refused: jobrelay's account may not patch {} (give it `patch` on them)",
                    resource.plural
                )),
                400 | 422 => {
                    JobError::Invalid(format!("the cluster refused the write: {}", status.message))
                }
                _ => JobError::Unavailable(format!(
                    "the cluster answered {}: {}",
                    status.code, status.message
                )),
            }),
            Err(other) => Err(JobError::Unavailable(format!(
                "the cluster could not be reached: {}",
                crate::open_error::chain(&other)
            ))),
        }
    }
}

/// A key as shown in an error: a hostile plugin's 1 MiB key is not copied into logs whole.
fn cut(key: &str) -> String {
    if key.len() <= 120 {
        return key.to_string();
    }
    let mut end = 120;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &key[..end])
}

/// Links the interface into a linker whose store data gives the call's [`JobAccess`].
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut JobAccess,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<JobAccess>>(linker, get)
}

impl wit::Host for JobAccess {
    async fn annotate(&mut self, key: String, value: Option<String>) -> Result<(), JobError> {
        self.write(Field::Annotations, key, value).await
    }

    async fn label(&mut self, key: String, value: Option<String>) -> Result<(), JobError> {
        self.write(Field::Labels, key, value).await
    }
}

mod taped;

#[cfg(test)]
mod tests {
    use super::*;

    fn access(grant: JobGrant) -> JobAccess {
        JobAccess {
            grant: Some(grant),
            event: Some(Target::default()),
            ..JobAccess::default()
        }
    }

    fn grant() -> JobGrant {
        JobGrant {
            annotations: vec!["archive.jobrelay.io/".into()],
            labels: vec!["jobrelay.io/".into()],
            ..JobGrant::default()
        }
    }

    #[test]
    fn prefixes_are_domains() {
        assert!(check_prefix("archive.jobrelay.io/").is_ok());
        assert!(check_prefix("archive.jobrelay.io/logs-").is_ok());
        for bad in [
            "",
            "logs",
            "/x",
            "Example.com/",
            "kubernetes.io/",
            "x.k8s.io/",
            "a..b/",
        ] {
            assert!(check_prefix(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn writes_are_checked_against_the_grant() {
        let mut a = access(grant());
        assert!(
            a.check(
                Field::Annotations,
                "archive.jobrelay.io/logs",
                Some("s3://x")
            )
            .is_ok()
        );
        assert!(matches!(
            a.check(Field::Annotations, "other.io/logs", Some("x")),
            Err(JobError::Denied(m)) if m.contains("outside the granted prefixes")
        ));
        assert!(matches!(
            a.check(Field::Labels, "archive.jobrelay.io/x", Some("v")),
            Err(JobError::Denied(_))
        ));
        assert!(matches!(
            a.check(Field::Annotations, "archive.jobrelay.io/", Some("x")),
            Err(JobError::Invalid(_))
        ));
        assert!(matches!(
            a.check(Field::Annotations, "archive.jobrelay.io/big", Some(&"x".repeat(1 << 20))),
            Err(JobError::Invalid(m)) if m.contains("max_value_bytes")
        ));
        assert!(matches!(
            a.check(Field::Labels, "jobrelay.io/team", Some("not a value!")),
            Err(JobError::Invalid(_))
        ));
        assert!(a.check(Field::Labels, "jobrelay.io/team", Some("")).is_ok());
        assert!(a.check(Field::Labels, "jobrelay.io/team", None).is_ok());
        // Three writes so far; five more fit, then every one is refused.
        for _ in 0..5 {
            assert!(a.check(Field::Labels, "jobrelay.io/n", Some("1")).is_ok());
        }
        for _ in 0..10_000 {
            assert!(matches!(
                a.check(Field::Labels, "jobrelay.io/n", Some("1")),
                Err(JobError::Denied(m)) if m.contains("max_writes_per_call")
            ));
        }
        let huge_key = format!("archive.jobrelay.io/{}", "k".repeat(1 << 20));
        let Err(JobError::Invalid(m)) = a.check(Field::Annotations, &huge_key, Some("x")) else {
            panic!("a huge key is invalid");
        };
        assert!(m.len() < 400, "the key is cut in the message");
    }

    #[test]
    fn nothing_without_a_grant_or_outside_handle() {
        let mut none = JobAccess::default();
        assert!(matches!(
            none.check(Field::Annotations, "archive.jobrelay.io/x", Some("v")),
            Err(JobError::Denied(m)) if m.contains("not granted")
        ));
        let mut init = access(grant());
        init.event = None;
        assert!(matches!(
            init.check(Field::Annotations, "archive.jobrelay.io/x", Some("v")),
            Err(JobError::Denied(m)) if m.contains("outside `handle`")
        ));
        let mut fleet_event = access(grant());
        fleet_event.event = None;
        fleet_event.fleet_event = true;
        assert!(matches!(
            fleet_event.check(Field::Annotations, "archive.jobrelay.io/x", Some("v")),
            Err(JobError::Denied(m)) if m.contains("fleet event has no job")
        ));
    }
}
