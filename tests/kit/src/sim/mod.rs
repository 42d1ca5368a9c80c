//! A Kubernetes API simulator that speaks the real HTTP protocol.
//!
//! No Kubernetes can run where the tests run, so end-to-end tests point the production kube
//! client at this server instead: list with pagination, chunked watch streams, resourceVersion
//! ordering, bookmarks, `410 Expired`, create/update/patch with conflicts, finalizers, pod logs,
//! bearer-token auth and fault injection all behave as the apiserver's do (see each module for
//! the contract it reproduces, and `SimCluster`'s docs for what is knowingly simplified).
//!
//! [`SimCluster`] is the handle. Besides the HTTP API it offers an in-process driver API with
//! the same semantics and events, which test helpers use to play the part of controllers.

mod discovery;
mod faults;
mod http;
mod list;
mod logs;
mod meta;
mod patch;
mod resources;
mod selectors;
mod server;
mod stats;
mod status;
mod store;
mod watch;
mod writes;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

pub use patch::PatchKind;
pub use resources::{Gvr, ResourceKind};
pub use selectors::{FieldSelector, LabelSelector};
pub use stats::{DeletionRecord, RequestRecord};
pub use status::SimError;
pub use store::EventType;

pub(crate) use meta::new_uid;

use faults::Faults;
use list::ListQuery;
use patch::PatchBody;
use resources::Registry;
use server::Server;
use stats::Stats;
use store::{LogKey, ObjKey, Store};
use writes::{CreateOptions, DeleteOptions, Target};

/// Tunables of a simulator.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// How often watches with `allowWatchBookmarks=true` get a `BOOKMARK`. Default 1 s.
    pub bookmark_interval: Duration,
    /// How many changes the history keeps before the compaction horizon moves on its own.
    /// Default 10 000.
    pub history_limit: usize,
    /// Bearer token clients must present; random when `None`.
    pub token: Option<String>,
    /// Whether removing an owner deletes its dependents (`ownerReferences`), as the garbage
    /// collector does. Default true.
    pub garbage_collection: bool,
    /// Whether `v1 namespaces` is served. Default true. Namespaces are plain objects: other
    /// objects may live in namespaces that have no Namespace object.
    pub namespaces: bool,
    /// Minor version reported by `/version` (major is 1). Default 33.
    pub kubernetes_minor: u32,
    /// Largest accepted request body. Default 3 MiB, like the apiserver.
    pub max_body_bytes: usize,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            bookmark_interval: Duration::from_secs(1),
            history_limit: 10_000,
            token: None,
            garbage_collection: true,
            namespaces: true,
            kubernetes_minor: 33,
            max_body_bytes: 3 * 1024 * 1024,
        }
    }
}

/// State shared by the handle, the HTTP handlers and the watch tasks.
pub(crate) struct SimState {
    pub name: String,
    pub token: String,
    /// Tokens accepted besides `token` ([`SimCluster::accept_token`]), and tokens refused
    /// whatever else says ([`SimCluster::revoke_token`]): a credential rotated.
    pub other_tokens: parking_lot::RwLock<Vec<String>>,
    pub revoked_tokens: parking_lot::RwLock<Vec<String>>,
    pub options: SimOptions,
    pub store: Store,
    pub registry: Registry,
    pub faults: Faults,
    pub stats: Stats,
    pub addr: std::sync::OnceLock<std::net::SocketAddr>,
}

impl SimState {
    /// Whether a bearer token is let in.
    pub(crate) fn accepts(&self, token: &str) -> bool {
        let revoked = self.revoked_tokens.read().iter().any(|t| t == token);
        !revoked && (token == self.token || self.other_tokens.read().iter().any(|t| t == token))
    }

    pub(crate) fn server_address(&self) -> String {
        self.addr.get().map(|a| a.to_string()).unwrap_or_default()
    }
}

struct Inner {
    state: Arc<SimState>,
    server: Server,
}

/// A running simulated cluster. Cheap to clone; the server stops when the last clone is
/// dropped (or on [`SimCluster::shutdown`]).
///
/// Known simplifications: objects are untyped JSON (no schema validation or defaulting);
/// strategic-merge and apply patches use merge-patch semantics; deletion is immediate unless
/// finalizers hold it (no graceful pod termination); the garbage collector runs synchronously
/// in background mode; different versions of one CRD are separate stores (no conversion).
#[derive(Clone)]
pub struct SimCluster {
    inner: Arc<Inner>,
}

impl SimCluster {
    /// Starts a simulator with default options on `127.0.0.1:0`.
    pub async fn start(name: &str) -> anyhow::Result<SimCluster> {
        SimCluster::start_with(name, SimOptions::default()).await
    }

    /// Starts a simulator with the given options.
    pub async fn start_with(name: &str, options: SimOptions) -> anyhow::Result<SimCluster> {
        let token = options.token.clone().unwrap_or_else(meta::new_token);
        let state = Arc::new(SimState {
            name: name.to_string(),
            token,
            other_tokens: Default::default(),
            revoked_tokens: Default::default(),
            store: Store::new(options.history_limit, options.garbage_collection),
            registry: Registry::with(ResourceKind::builtins(options.namespaces)),
            faults: Faults::new(),
            stats: Stats::default(),
            addr: std::sync::OnceLock::new(),
            options,
        });
        let server = Server::start(state.clone()).await?;
        let _ = state.addr.set(server.addr());
        Ok(SimCluster {
            inner: Arc::new(Inner { state, server }),
        })
    }

    fn state(&self) -> &SimState {
        &self.inner.state
    }

    // ----- identity --------------------------------------------------------------------------

    /// The cluster name given at start (also the kubeconfig context name).
    pub fn name(&self) -> &str {
        &self.state().name
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.server.addr())
    }

    /// Lets `token` in too, as an API server does once a new credential is issued.
    pub fn accept_token(&self, token: &str) {
        self.state().other_tokens.write().push(token.to_string());
    }

    /// Refuses `token` from now on (401), the cluster's own [`token`](Self::token) included:
    /// a credential revoked after its rotation.
    pub fn revoke_token(&self, token: &str) {
        self.state().revoked_tokens.write().push(token.to_string());
    }

    /// The listening address.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.inner.server.addr()
    }

    /// The bearer token clients must present.
    pub fn token(&self) -> &str {
        &self.state().token
    }

    /// A kubeconfig for this cluster (see [`crate::kubeconfig`]).
    pub fn kubeconfig_yaml(&self) -> String {
        self.kubeconfig_yaml_with_token(self.token())
    }

    /// A kubeconfig that presents another token (e.g. a wrong one, to test auth failures).
    pub fn kubeconfig_yaml_with_token(&self, token: &str) -> String {
        crate::kubeconfig::render(&crate::kubeconfig::KubeconfigSpec {
            name: self.name(),
            server: &self.url(),
            token,
            namespace: None,
        })
    }

    /// Writes [`SimCluster::kubeconfig_yaml`] to `path` atomically (temp file + rename), so a
    /// directory watcher never sees a half-written file.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> anyhow::Result<()> {
        crate::kubeconfig::write_atomic(path.as_ref(), &self.kubeconfig_yaml())
    }

    /// Stops the server: the listener closes and open connections (and watches) are cut.
    pub async fn shutdown(&self) {
        self.inner.server.shutdown();
        tokio::task::yield_now().await;
    }

    // ----- resources -------------------------------------------------------------------------

    /// Adds a resource kind (a CRD) or replaces one with the same group/version/plural.
    pub fn register_kind(&self, kind: ResourceKind) {
        self.state().registry.register(kind);
    }

    /// Removes a resource kind, as uninstalling its CRD would hide it: discovery stops listing
    /// it and its URLs answer 404. Unlike a real CRD deletion, stored objects are kept (out of
    /// reach), so registering the kind again brings them back. Returns whether it was
    /// registered.
    pub fn unregister_kind(&self, gvr: &Gvr) -> bool {
        self.state().registry.unregister(gvr)
    }

    /// Whether a resource is registered (served), as discovery would list it.
    pub fn serves(&self, gvr: &Gvr) -> bool {
        self.state().registry.get(gvr).is_some()
    }

    fn kind(&self, gvr: &Gvr) -> Result<Arc<ResourceKind>, SimError> {
        self.state()
            .registry
            .get(gvr)
            .ok_or_else(|| SimError::new(404, format!("resource {gvr} is not registered")))
    }

    fn namespace_for(kind: &ResourceKind, ns: &str) -> String {
        if kind.namespaced {
            ns.to_string()
        } else {
            String::new()
        }
    }

    // ----- in-process driver API ---------------------------------------------------------------

    /// Creates an object; its namespace comes from `metadata.namespace` (default `"default"`).
    /// Unlike an HTTP create, a `.status` in `obj` is kept, so tests can seed any state.
    pub fn create(&self, gvr: &Gvr, obj: Value) -> Result<Value, SimError> {
        let kind = self.kind(gvr)?;
        let opts = CreateOptions {
            dry_run: false,
            keep_status: true,
        };
        self.state()
            .store
            .write(|s| writes::create(s, &kind, "", obj, opts))
            .map(|o| (*o).clone())
    }

    /// Reads an object (`ns` is ignored for cluster-scoped kinds).
    pub fn get(&self, gvr: &Gvr, ns: &str, name: &str) -> Result<Value, SimError> {
        let kind = self.kind(gvr)?;
        let key = ObjKey::new(gvr, &Self::namespace_for(&kind, ns), name);
        self.state()
            .store
            .read(|s| s.objects.get(&key).map(|o| Value::clone(o)))
            .ok_or_else(|| SimError::not_found(gvr, name))
    }

    /// Replaces an object (PUT semantics: a stale `metadata.resourceVersion` is a conflict,
    /// `.status` is kept from the stored object when status is a subresource).
    pub fn replace(&self, gvr: &Gvr, obj: Value) -> Result<Value, SimError> {
        let kind = self.kind(gvr)?;
        let ns = Self::namespace_for(&kind, meta::meta_str(&obj, "namespace"));
        let ns = if kind.namespaced && ns.is_empty() {
            "default".to_string()
        } else {
            ns
        };
        let name = meta::meta_str(&obj, "name").to_string();
        self.state()
            .store
            .write(|s| writes::update(s, &kind, &ns, &name, obj, Target::Main, false))
            .map(|o| (*o).clone())
    }

    /// Applies a JSON merge patch to the main resource.
    pub fn patch_merge(
        &self,
        gvr: &Gvr,
        ns: &str,
        name: &str,
        patch: Value,
    ) -> Result<Value, SimError> {
        self.patch(gvr, ns, name, PatchBody::Merge(patch), Target::Main)
    }

    /// Applies a JSON patch (RFC 6902) to the main resource.
    pub fn patch_json(
        &self,
        gvr: &Gvr,
        ns: &str,
        name: &str,
        patch: Value,
    ) -> Result<Value, SimError> {
        let ops = serde_json::from_value(patch)
            .map_err(|e| SimError::bad_request(format!("invalid JSON patch: {e}")))?;
        self.patch(gvr, ns, name, PatchBody::Json(ops), Target::Main)
    }

    /// Applies a JSON merge patch to the status subresource.
    pub fn patch_status(
        &self,
        gvr: &Gvr,
        ns: &str,
        name: &str,
        patch: Value,
    ) -> Result<Value, SimError> {
        self.patch(gvr, ns, name, PatchBody::Merge(patch), Target::Status)
    }

    fn patch(
        &self,
        gvr: &Gvr,
        ns: &str,
        name: &str,
        patch: PatchBody,
        target: Target,
    ) -> Result<Value, SimError> {
        let kind = self.kind(gvr)?;
        let ns = Self::namespace_for(&kind, ns);
        self.state()
            .store
            .write(|s| writes::patch(s, &kind, &ns, name, &patch, target, false, false))
            .map(|(o, _)| (*o).clone())
    }

    /// Replaces `.status` as a controller would through `/status` (no resourceVersion
    /// precondition). A `null` status removes it.
    pub fn update_status(
        &self,
        gvr: &Gvr,
        ns: &str,
        name: &str,
        status: Value,
    ) -> Result<Value, SimError> {
        let kind = self.kind(gvr)?;
        let ns = Self::namespace_for(&kind, ns);
        self.state().store.write(|s| {
            let key = ObjKey::new(gvr, &ns, name);
            let current = s
                .objects
                .get(&key)
                .cloned()
                .ok_or_else(|| SimError::not_found(gvr, name))?;
            let mut next = (*current).clone();
            meta::set_meta(&mut next, "resourceVersion", None);
            if let Some(map) = next.as_object_mut() {
                if status.is_null() {
                    map.remove("status");
                } else {
                    map.insert("status".into(), status);
                }
            }
            let target = if kind.status_subresource {
                Target::Status
            } else {
                Target::Main
            };
            writes::update(s, &kind, &ns, name, next, target, false).map(|o| (*o).clone())
        })
    }

    /// Deletes an object: marks it (deletionTimestamp) when it has finalizers, else removes it.
    /// Returns the marked or removed object.
    pub fn delete(&self, gvr: &Gvr, ns: &str, name: &str) -> Result<Value, SimError> {
        let kind = self.kind(gvr)?;
        let ns = Self::namespace_for(&kind, ns);
        self.state()
            .store
            .write(|s| writes::delete(s, gvr, &ns, name, &DeleteOptions::default()))
            .map(|o| (*o).clone())
    }

    /// Current objects of a resource, sorted by namespace and name; `ns: None` lists all
    /// namespaces.
    pub fn list(&self, gvr: &Gvr, ns: Option<&str>) -> Result<Vec<Value>, SimError> {
        self.kind(gvr)?;
        let query = ListQuery {
            namespace: ns.map(str::to_string),
            ..ListQuery::default()
        };
        let page = self.state().store.read(|s| list::list(s, gvr, &query))?;
        Ok(page.items.iter().map(|o| (**o).clone()).collect())
    }

    /// Every version of one object written after resourceVersion `since`, oldest first, as a
    /// watch from `since` would see them (a deletion as the object's last state); `Err` when
    /// `since` is older than the kept history.
    pub fn versions_since(
        &self,
        gvr: &Gvr,
        ns: &str,
        name: &str,
        since: u64,
    ) -> Result<Vec<Value>, SimError> {
        self.kind(gvr)?;
        let changes = self
            .state()
            .store
            .read(|s| s.changes_since(since))
            .map_err(|horizon| {
                SimError::new(
                    410,
                    format!("{since} is older than the history ({horizon})"),
                )
            })?;
        Ok(changes
            .iter()
            .filter(|c| c.key.gvr == *gvr && c.key.namespace == ns && c.key.name == name)
            .map(|c| (*c.object).clone())
            .collect())
    }

    /// The newest resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.state().store.current_rv()
    }

    // ----- pod logs ----------------------------------------------------------------------------

    /// Stores the log of a container (`previous`: of its last terminated instance). Logs may be
    /// any bytes. They disappear with the pod.
    pub fn set_pod_log(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
        previous: bool,
        bytes: impl Into<Bytes>,
    ) {
        let key = LogKey {
            namespace: ns.to_string(),
            pod: pod.to_string(),
            container: container.to_string(),
            previous,
        };
        let bytes = bytes.into();
        self.state().store.write(|s| s.logs.insert(key, bytes));
    }

    /// Appends to a container's current log.
    pub fn append_pod_log(&self, ns: &str, pod: &str, container: &str, bytes: &[u8]) {
        let key = LogKey {
            namespace: ns.to_string(),
            pod: pod.to_string(),
            container: container.to_string(),
            previous: false,
        };
        self.state().store.write(|s| {
            let mut joined = s.logs.get(&key).map(|b| b.to_vec()).unwrap_or_default();
            joined.extend_from_slice(bytes);
            s.logs.insert(key, Bytes::from(joined));
        });
    }

    /// The stored log of a container, if any.
    pub fn pod_log(&self, ns: &str, pod: &str, container: &str, previous: bool) -> Option<Bytes> {
        let key = LogKey {
            namespace: ns.to_string(),
            pod: pod.to_string(),
            container: container.to_string(),
            previous,
        };
        self.state().store.read(|s| s.logs.get(&key).cloned())
    }

    // ----- faults ------------------------------------------------------------------------------

    /// Cuts every open watch stream mid-body (the connection closes without a final event).
    pub fn drop_watches(&self) {
        self.state().faults.drop_watches();
    }

    /// The next `n` requests (any path) fail with `status_code` and a `Status` body.
    pub fn fail_next(&self, n: usize, status_code: u16) {
        self.state().faults.fail_next(n, status_code);
    }

    /// Like [`fail_next`](Self::fail_next), but only requests arriving within `window` fail: a
    /// burst that ends by itself, as an API server's brief trouble does. A count alone, on a
    /// quiet cluster whose client backs off, keeps failing for as long as the client takes to
    /// send `n` requests — an outage of minutes rather than a burst.
    pub fn fail_burst(&self, n: usize, status_code: u16, window: Duration) {
        self.state().faults.fail_burst(n, status_code, window);
    }

    /// Every request whose path contains `part` (`/workloads`) is answered `delay` late, until
    /// [`SimCluster::answer_promptly`]: one resource's lists and watches come after others'.
    pub fn answer_late(&self, part: &str, delay: Duration) {
        self.state()
            .faults
            .slow_paths(Some((part.to_string(), delay)));
    }

    /// Ends [`SimCluster::answer_late`].
    pub fn answer_promptly(&self) {
        self.state().faults.slow_paths(None);
    }

    /// While on, every write over HTTP (POST, PUT, PATCH, DELETE) gets 503; reads and watches
    /// go on. Changes made through this handle are not affected.
    pub fn fail_writes(&self, on: bool) {
        self.state().faults.fail_writes(on);
    }

    /// While on, every request gets 503 (`Retry-After: 1`); turning it on cuts open watches.
    pub fn set_outage(&self, on: bool) {
        self.state().faults.set_outage(on);
    }

    /// While on, nothing listens on the port (connection refused) and every open connection is
    /// cut; turning it off binds the same port again.
    pub fn outage_hard(&self, on: bool) -> anyhow::Result<()> {
        if on {
            self.inner.server.stop_listening();
            Ok(())
        } else {
            self.inner.server.resume_listening()
        }
    }

    /// Moves the compaction horizon to the current RV: watches and continue tokens from any
    /// older RV now get `410 Expired`.
    pub fn compact(&self) {
        self.state().store.write(|s| s.compact());
    }

    /// While on, open (and new) watches stay open but send nothing at all, not even bookmarks
    /// or the end at `timeoutSeconds`. Turning it off delivers what was held back.
    pub fn stall_watches(&self, on: bool) {
        self.state().faults.stall_watches(on);
    }

    // ----- stats -------------------------------------------------------------------------------

    /// Watch connections ever opened for resources with this plural (all groups).
    pub fn watch_requests(&self, plural: &str) -> usize {
        self.state().stats.watches_by_plural(plural)
    }

    /// List requests ever served for resources with this plural (all groups).
    pub fn list_requests(&self, plural: &str) -> usize {
        self.state().stats.lists_by_plural(plural)
    }

    /// Watch connections ever opened for one resource.
    pub fn watch_requests_for(&self, gvr: &Gvr) -> usize {
        self.state().stats.watches_of(gvr)
    }

    /// List requests ever served for one resource.
    pub fn list_requests_for(&self, gvr: &Gvr) -> usize {
        self.state().stats.lists_of(gvr)
    }

    /// Watch streams open right now.
    pub fn open_watches(&self) -> usize {
        self.state().stats.open_watches()
    }

    /// Every request received, including rejected ones.
    pub fn requests_total(&self) -> usize {
        self.state().stats.total()
    }

    /// Every DELETE of an object served over HTTP, oldest first.
    pub fn deletions(&self) -> Vec<DeletionRecord> {
        self.state().stats.deletions()
    }

    /// The last (up to 1000) requests with their status codes, oldest first.
    pub fn recent_requests(&self) -> Vec<RequestRecord> {
        self.state().stats.recent()
    }
}
