//! The `jobrelay:plugin/pod-logs` interface: logs of the job's own pods, and nothing else.
//!
//! A call's scope is the job of the event it handles. "The job's pods" are found the way the
//! job's controller marks them: in the job's namespace, carrying the kind's pod label
//! (`pod_label` of the kind, e.g. `volcano.sh/job-name`) with the job's name, and owned by the
//! job's uid. The label alone is not enough: a job deleted and re-created under the same name
//! labels its pods the same way, and its logs are not this event's. Any pod or container
//! outside that set is refused.
//!
//! Logs are streamed from the API server in chunks the plugin pulls, so a large log never sits
//! whole in host or plugin memory, and each container log is cut at the grant's cap.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use futures::io::{AsyncRead, AsyncReadExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, LogParams};
use wasmtime::component::{HasSelf, Linker, Resource};

use serde::{Deserialize, Serialize};

use super::handles::Handles;
use super::tape::{self, CallTape, FromDivergence, Taped};
use super::{CallScope, Capability, GrantProblem, StoreSetup};
use jobrelay_bindings::jobrelay::plugin::pod_logs as wit;
use jobrelay_bindings::v0_1::jobrelay::plugin::pod_logs as older;
use jobrelay_contract::event::JobEvent;
use jobrelay_watch::kinds::JobKind;
use serde_json::json;

use wit::{Container, Error as LogError, Log, Pod as WitPod};

/// Default cap of one container log.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// Largest chunk one `read` returns.
pub const MAX_READ_BYTES: u32 = 1 << 20;
/// Container logs one call may have open at once, each an HTTP stream from the API server.
pub const MAX_OPEN_LOGS: usize = 16;

/// The pod-logs capability.
pub struct PodLogs;

/// The clients of the clusters being watched, and the pod label of each job kind. Kept up to
/// date by the cluster manager as clusters come and go.
#[derive(Clone, Default)]
pub struct ClusterDirectory {
    inner: Arc<RwLock<Directory>>,
}

#[derive(Default)]
struct Directory {
    clients: HashMap<String, kube::Client>,
    /// (apiVersion, kind) → pod label.
    pod_labels: HashMap<(String, String), String>,
}

impl std::fmt::Debug for ClusterDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterDirectory").finish_non_exhaustive()
    }
}

impl ClusterDirectory {
    /// Records the client of a cluster (replacing an older one).
    pub fn set_client(&self, cluster: &str, client: kube::Client) {
        if let Ok(mut directory) = self.inner.write() {
            directory.clients.insert(cluster.to_string(), client);
        }
    }

    /// Forgets a removed cluster.
    pub fn remove_client(&self, cluster: &str) {
        if let Ok(mut directory) = self.inner.write() {
            directory.clients.remove(cluster);
        }
    }

    /// Records the pod label of every kind that has one.
    pub fn set_kinds(&self, kinds: &[JobKind]) {
        if let Ok(mut directory) = self.inner.write() {
            directory.pod_labels = kinds
                .iter()
                .filter_map(|kind| {
                    let label = kind.pod_label.clone()?;
                    Some(((kind.api_version(), kind.kind.clone()), label))
                })
                .collect();
        }
    }

    /// The scope of a call handling `event`, or why there is none.
    fn scope(&self, event: &JobEvent) -> Result<JobScope, String> {
        let directory = self
            .inner
            .read()
            .map_err(|_| "the cluster directory is unavailable".to_string())?;
        let client = directory
            .clients
            .get(&*event.cluster)
            .cloned()
            .ok_or_else(|| format!("cluster `{}` is not connected", event.cluster))?;
        let label = directory
            .pod_labels
            .get(&(event.api_version.to_string(), event.kind.to_string()))
            .cloned()
            .ok_or_else(|| {
                format!(
                    "kind {} {} has no `pod_label` in the main file, so its pods cannot be found",
                    event.api_version, event.kind
                )
            })?;
        Ok(JobScope {
            client,
            namespace: event.namespace.to_string(),
            name: event.name.to_string(),
            uid: event.uid.to_string(),
            label,
        })
    }
}

impl Capability for PodLogs {
    fn name(&self) -> &'static str {
        "pod-logs"
    }

    fn configure(&self, call: &CallScope<'_>, setup: &mut StoreSetup) -> Result<(), GrantProblem> {
        let Some(grant) = &call.grants.pod_logs else {
            return Ok(());
        };
        let scope = match call.event {
            Some(event) => call.services.clusters.scope(event),
            None => Err("there is no job in scope outside `handle`".to_string()),
        };
        setup.state.pod_logs = PodLogAccess {
            granted: true,
            max_bytes: grant.max_bytes_per_container.unwrap_or(DEFAULT_MAX_BYTES),
            scope,
            pods: None,
            logs: Handles::new(MAX_OPEN_LOGS),
            tape: call.tape(),
        };
        Ok(())
    }
}

/// Pod logs a plugin may read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodLogsGrant {
    /// Bytes read at most from one container log; the rest is cut and the log is marked
    /// truncated (default 64 MiB).
    #[serde(default)]
    pub max_bytes_per_container: Option<u64>,
}

/// Where the job of one call lives.
struct JobScope {
    client: kube::Client,
    namespace: String,
    name: String,
    uid: String,
    label: String,
}

/// The pod-logs state of one call.
pub struct PodLogAccess {
    granted: bool,
    max_bytes: u64,
    scope: Result<JobScope, String>,
    /// The job's pods, listed on first use and kept for the call.
    pods: Option<Vec<WitPod>>,
    /// The logs the call has open.
    logs: Handles<LogReader>,
    /// The run's tape, if calls are recorded or replayed.
    tape: Option<CallTape>,
}

/// Links the interface (both served versions) into a linker whose store data gives the
/// call's [`PodLogAccess`] through `get`.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut PodLogAccess,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<PodLogAccess>>(linker, get)?;
    older::add_to_linker::<T, HasSelf<PodLogAccess>>(linker, get)
}

impl Default for PodLogAccess {
    fn default() -> Self {
        PodLogAccess {
            granted: false,
            max_bytes: DEFAULT_MAX_BYTES,
            scope: Err("pod logs are not granted to this plugin (grants.pod_logs)".into()),
            pods: None,
            logs: Handles::new(MAX_OPEN_LOGS),
            tape: None,
        }
    }
}

impl PodLogAccess {
    fn scope(&self) -> Result<&JobScope, LogError> {
        if !self.granted {
            return Err(LogError::Denied(
                "pod logs are not granted to this plugin (grants.pod_logs)".into(),
            ));
        }
        self.scope
            .as_ref()
            .map_err(|why| LogError::Denied(why.clone()))
    }

    async fn pods(&mut self) -> Result<&[WitPod], LogError> {
        if self.pods.is_none() {
            let scope = self.scope()?;
            let listed = list_pods(scope).await?;
            self.pods = Some(listed);
        }
        Ok(self.pods.as_deref().unwrap_or_default())
    }
}

async fn list_pods(scope: &JobScope) -> Result<Vec<WitPod>, LogError> {
    let api: Api<Pod> = Api::namespaced(scope.client.clone(), &scope.namespace);
    let params = ListParams::default().labels(&format!("{}={}", scope.label, scope.name));
    let list = api
        .list(&params)
        .await
        .map_err(|e| unavailable("list pods", e))?;
    let mut pods: Vec<WitPod> = list
        .items
        .into_iter()
        .filter(|pod| {
            pod.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|owner| owner.uid == scope.uid)
        })
        .map(describe)
        .collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(pods)
}

/// The WIT view of a pod: its containers (init containers first) with restart counts.
fn describe(pod: Pod) -> WitPod {
    let spec = pod.spec.unwrap_or_default();
    let status = pod.status.unwrap_or_default();
    let restarts = |statuses: &Option<Vec<k8s_openapi::api::core::v1::ContainerStatus>>,
                    name: &str| {
        statuses
            .iter()
            .flatten()
            .find(|s| s.name == name)
            .map_or(0, |s| u32::try_from(s.restart_count).unwrap_or(0))
    };
    let mut containers = Vec::new();
    for container in spec.init_containers.iter().flatten() {
        containers.push(Container {
            restart_count: restarts(&status.init_container_statuses, &container.name),
            name: container.name.clone(),
            init: true,
        });
    }
    for container in &spec.containers {
        containers.push(Container {
            restart_count: restarts(&status.container_statuses, &container.name),
            name: container.name.clone(),
            init: false,
        });
    }
    WitPod {
        name: pod.metadata.name.unwrap_or_default(),
        phase: status.phase.unwrap_or_else(|| "Unknown".into()),
        node: spec.node_name,
        containers,
    }
}

fn unavailable(what: &str, error: kube::Error) -> LogError {
    match &error {
        kube::Error::Api(status) if status.code == 404 => {
            LogError::NotFound(format!("{what}: {}", status.message))
        }
        // The API server answers 400 for a container that has no previous instance, or that
        // has not started yet.
        kube::Error::Api(status) if status.code == 400 => {
            LogError::NotFound(format!("{what}: {}", status.message))
        }
        _ => LogError::Unavailable(format!("{what}: {error}")),
    }
}

/// A container log being read. The stream is the API server's response body.
pub struct LogReader {
    stream: Pin<Box<dyn AsyncRead + Send>>,
    /// Bytes the plugin may still get.
    remaining: u64,
    truncated: bool,
    done: bool,
}

impl PodLogAccess {
    /// Refuses every call of a plugin without the grant, tape or not.
    fn check_granted(&self) -> Result<(), LogError> {
        if self.granted {
            Ok(())
        } else {
            Err(LogError::Denied(
                "pod logs are not granted to this plugin (grants.pod_logs)".into(),
            ))
        }
    }

    async fn open_log(
        &mut self,
        pod: &str,
        container: &str,
        previous: bool,
    ) -> Result<LogReader, LogError> {
        let pods = self.pods().await?;
        let Some(found) = pods.iter().find(|p| p.name == pod) else {
            let scope = self.scope()?;
            return Err(LogError::Denied(format!(
                "pod `{pod}` is not one of the pods of job {}/{}",
                scope.namespace, scope.name
            )));
        };
        if !found.containers.iter().any(|c| c.name == container) {
            return Err(LogError::Denied(format!(
                "pod `{pod}` has no container `{container}`"
            )));
        }
        let max_bytes = self.max_bytes;
        let scope = self.scope()?;
        let api: Api<Pod> = Api::namespaced(scope.client.clone(), &scope.namespace);
        let params = LogParams {
            container: Some(container.to_string()),
            previous,
            // One byte over the cap tells a log of exactly the cap from a longer one.
            limit_bytes: i64::try_from(max_bytes.saturating_add(1)).ok(),
            ..LogParams::default()
        };
        let stream = api
            .log_stream(pod, &params)
            .await
            .map_err(|e| unavailable(&format!("log of {pod}/{container}"), e))?;
        Ok(LogReader {
            stream: Box::pin(stream),
            remaining: max_bytes,
            truncated: false,
            done: false,
        })
    }
}

impl LogReader {
    /// What stands for a log in a replay: the tape answers its reads, so it holds nothing.
    fn replayed() -> LogReader {
        LogReader {
            stream: Box::pin(futures::io::empty()),
            remaining: 0,
            truncated: false,
            done: true,
        }
    }

    async fn read_chunk(&mut self, max_bytes: u32) -> Result<Vec<u8>, LogError> {
        if self.done {
            return Ok(Vec::new());
        }
        let want = max_bytes.clamp(1, MAX_READ_BYTES) as usize;
        let mut buf = vec![0u8; want];
        let read = self
            .stream
            .read(&mut buf)
            .await
            .map_err(|e| LogError::Unavailable(format!("reading the log: {e}")))?;
        if read == 0 {
            self.done = true;
            return Ok(Vec::new());
        }
        buf.truncate(read);
        let allowed = usize::try_from(self.remaining).unwrap_or(usize::MAX);
        if buf.len() > allowed {
            buf.truncate(allowed);
            self.truncated = true;
            self.done = true;
        }
        self.remaining -= buf.len() as u64;
        if buf.is_empty() {
            self.done = true;
        }
        Ok(buf)
    }
}

impl wit::Host for PodLogAccess {
    async fn pods(&mut self) -> Result<Vec<WitPod>, LogError> {
        self.check_granted()?;
        let tape = self.tape.clone();
        let real = async { Ok(self.pods().await?.to_vec()) };
        tape::through(tape.as_ref(), "pod-logs.pods", || json!({}), real).await
    }

    async fn open(
        &mut self,
        pod: String,
        container: String,
        previous: bool,
    ) -> Result<Resource<Log>, LogError> {
        self.check_granted()?;
        if self.logs.len() >= MAX_OPEN_LOGS {
            return Err(LogError::Unavailable(format!(
                "at most {MAX_OPEN_LOGS} logs may be open at once; drop one first"
            )));
        }
        let tape = self.tape.clone();
        let args = || json!({ "pod": pod, "container": container, "previous": previous });
        let reader = match &tape {
            Some(tape) if tape.replaying() => {
                let opened: Result<(), LogError> = tape.replay("pod-logs.open", args());
                opened.map(|()| LogReader::replayed())
            }
            _ => {
                let reader = self.open_log(&pod, &container, previous).await;
                if let Some(tape) = &tape {
                    tape.record(
                        "pod-logs.open",
                        args(),
                        &reader.as_ref().map(|_| ()).map_err(Clone::clone),
                    );
                }
                reader
            }
        }?;
        self.logs
            .push(reader)
            .map_err(|e| LogError::Unavailable(format!("cannot open another log: {e}")))
    }
}

impl wit::HostLog for PodLogAccess {
    async fn read(&mut self, log: Resource<Log>, max_bytes: u32) -> Result<Vec<u8>, LogError> {
        let rep = log.rep();
        let reader = self
            .logs
            .get_mut(&log)
            .map_err(|e| LogError::Denied(format!("invalid log handle: {e}")))?;
        let args = || json!({ "log": rep, "max_bytes": max_bytes });
        let real = reader.read_chunk(max_bytes);
        tape::through(self.tape.as_ref(), "pod-logs.read", args, real).await
    }

    async fn truncated(&mut self, log: Resource<Log>) -> bool {
        let truncated = self
            .logs
            .get(&log)
            .map(|reader| reader.truncated)
            .unwrap_or(false);
        let args = || json!({ "log": log.rep() });
        let real = async { truncated };
        tape::through(self.tape.as_ref(), "pod-logs.truncated", args, real).await
    }

    async fn drop(&mut self, log: Resource<Log>) -> wasmtime::Result<()> {
        self.logs.remove(log)?;
        Ok(())
    }
}

/// A pod on a tape: `{"name", "phase", "node", "containers": [{"name", "restart_count",
/// "init"}]}`.
impl Taped for WitPod {
    fn to_tape(&self) -> serde_json::Value {
        let containers: Vec<serde_json::Value> = self
            .containers
            .iter()
            .map(|c| json!({ "name": c.name, "restart_count": c.restart_count, "init": c.init }))
            .collect();
        json!({
            "name": self.name,
            "phase": self.phase,
            "node": self.node,
            "containers": containers,
        })
    }

    fn from_tape(value: &serde_json::Value) -> Result<WitPod, String> {
        let container = |value: &serde_json::Value| {
            Ok(Container {
                name: String::from_tape(tape::field(value, "name")?)?,
                restart_count: u32::try_from(u64::from_tape(tape::field(value, "restart_count")?)?)
                    .map_err(|_| "`restart_count` is too large".to_string())?,
                init: bool::from_tape(tape::field(value, "init")?)?,
            })
        };
        Ok(WitPod {
            name: String::from_tape(tape::field(value, "name")?)?,
            phase: String::from_tape(tape::field(value, "phase")?)?,
            node: Option::<String>::from_tape(
                value.get("node").unwrap_or(&serde_json::Value::Null),
            )?,
            containers: tape::list_from_tape(tape::field(value, "containers")?, container)?,
        })
    }
}

impl Taped for Vec<WitPod> {
    fn to_tape(&self) -> serde_json::Value {
        serde_json::Value::Array(self.iter().map(Taped::to_tape).collect())
    }

    fn from_tape(value: &serde_json::Value) -> Result<Vec<WitPod>, String> {
        tape::list_from_tape(value, WitPod::from_tape)
    }
}

/// `{"denied": "..."}`, `{"not-found": "..."}` or `{"unavailable": "..."}`.
impl Taped for LogError {
    fn to_tape(&self) -> serde_json::Value {
        match self {
            LogError::Denied(m) => tape::case_to_tape("denied", m),
            LogError::NotFound(m) => tape::case_to_tape("not-found", m),
            LogError::Unavailable(m) => tape::case_to_tape("unavailable", m),
        }
    }

    fn from_tape(value: &serde_json::Value) -> Result<LogError, String> {
        match tape::case_from_tape(value)? {
            ("denied", m) => Ok(LogError::Denied(m.into())),
            ("not-found", m) => Ok(LogError::NotFound(m.into())),
            ("unavailable", m) => Ok(LogError::Unavailable(m.into())),
            (other, _) => Err(format!("`{other}` is not a pod-logs error")),
        }
    }
}

impl FromDivergence for LogError {
    fn from_divergence(reason: String) -> LogError {
        LogError::Unavailable(reason)
    }
}

impl older::Host for PodLogAccess {
    async fn pods(&mut self) -> Result<Vec<older::Pod>, older::Error> {
        wit::Host::pods(self)
            .await
            .map(|pods| pods.into_iter().map(Into::into).collect())
            .map_err(Into::into)
    }

    async fn open(
        &mut self,
        pod: String,
        container: String,
        previous: bool,
    ) -> Result<Resource<older::Log>, older::Error> {
        wit::Host::open(self, pod, container, previous)
            .await
            .map(|log| Resource::new_own(log.rep()))
            .map_err(Into::into)
    }
}

impl older::HostLog for PodLogAccess {
    async fn read(
        &mut self,
        log: Resource<older::Log>,
        max_bytes: u32,
    ) -> Result<Vec<u8>, older::Error> {
        let log = Resource::new_borrow(log.rep());
        wit::HostLog::read(self, log, max_bytes)
            .await
            .map_err(Into::into)
    }

    async fn truncated(&mut self, log: Resource<older::Log>) -> bool {
        wit::HostLog::truncated(self, Resource::new_borrow(log.rep())).await
    }

    async fn drop(&mut self, log: Resource<older::Log>) -> wasmtime::Result<()> {
        wit::HostLog::drop(self, Resource::new_own(log.rep())).await
    }
}
