//! The registry of resource kinds the simulator serves.
//!
//! A real apiserver only answers for resources it knows (built-ins plus installed CRDs), and the
//! kube client relies on that: discovery lists them, and an unknown path is a 404. The registry
//! plays the role of the installed CRDs: each entry says how a resource is addressed (group,
//! version, plural), what its objects are called (kind), and whether it lives in namespaces.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use parking_lot::RwLock;

/// Group, version and plural resource name: how a resource is addressed in URLs.
///
/// The core group is the empty string (`/api/v1/...`); every other group lives under
/// `/apis/{group}/{version}/...`. The fields are `Cow` so the built-ins can be `const`s while
/// CRDs registered at run time use owned strings.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvr {
    pub group: Cow<'static, str>,
    pub version: Cow<'static, str>,
    pub plural: Cow<'static, str>,
}

impl Gvr {
    /// `v1 pods`.
    pub const POD: Gvr = Gvr::fixed("", "v1", "pods");
    /// `v1 namespaces` (cluster-scoped).
    pub const NAMESPACE: Gvr = Gvr::fixed("", "v1", "namespaces");
    /// `batch/v1 jobs`.
    pub const BATCH_JOB: Gvr = Gvr::fixed("batch", "v1", "jobs");
    /// Volcano `batch.volcano.sh/v1alpha1 jobs`.
    pub const VOLCANO_JOB: Gvr = Gvr::fixed("batch.volcano.sh", "v1alpha1", "jobs");
    /// Kubeflow training-operator `kubeflow.org/v1 pytorchjobs`.
    pub const PYTORCH_JOB: Gvr = Gvr::fixed("kubeflow.org", "v1", "pytorchjobs");
    /// Legacy training-operator `kubeflow.org/v1 mpijobs`.
    pub const MPI_JOB_V1: Gvr = Gvr::fixed("kubeflow.org", "v1", "mpijobs");
    /// mpi-operator `kubeflow.org/v2beta1 mpijobs`.
    pub const MPI_JOB_V2: Gvr = Gvr::fixed("kubeflow.org", "v2beta1", "mpijobs");
    /// Kubeflow Trainer v2 `trainer.kubeflow.org/v1alpha1 trainjobs`.
    pub const TRAIN_JOB: Gvr = Gvr::fixed("trainer.kubeflow.org", "v1alpha1", "trainjobs");
    /// JobSet `jobset.x-k8s.io/v1alpha2 jobsets`.
    pub const JOBSET: Gvr = Gvr::fixed("jobset.x-k8s.io", "v1alpha2", "jobsets");
    /// KubeRay `ray.io/v1 rayjobs`.
    pub const RAY_JOB: Gvr = Gvr::fixed("ray.io", "v1", "rayjobs");
    /// `v1 secrets` (cluster inventories such as Argo CD's cluster Secrets).
    pub const SECRET: Gvr = Gvr::fixed("", "v1", "secrets");
    /// SIG-Multicluster ClusterProfiles, a CRD not served until registered
    /// (`cluster_profile::register`).
    pub const CLUSTER_PROFILE: Gvr =
        Gvr::fixed("multicluster.x-k8s.io", "v1alpha1", "clusterprofiles");
    /// Cluster API's Clusters, a CRD not served until registered (`capi::register`).
    pub const CAPI_CLUSTER: Gvr = Gvr::fixed("cluster.x-k8s.io", "v1beta2", "clusters");
    /// Kueue's Workloads, `kueue.x-k8s.io/v1beta2 workloads`, a CRD not served until
    /// installed (`kueue::SimKueue::install`).
    pub const KUEUE_WORKLOAD: Gvr = Gvr::fixed("kueue.x-k8s.io", "v1beta2", "workloads");
    /// `coordination.k8s.io/v1 leases` (leader election).
    pub const LEASE: Gvr = Gvr::fixed("coordination.k8s.io", "v1", "leases");

    const fn fixed(group: &'static str, version: &'static str, plural: &'static str) -> Gvr {
        Gvr {
            group: Cow::Borrowed(group),
            version: Cow::Borrowed(version),
            plural: Cow::Borrowed(plural),
        }
    }

    /// Any resource, e.g. `Gvr::new("example.com", "v1", "widgets")`.
    pub fn new(
        group: impl Into<Cow<'static, str>>,
        version: impl Into<Cow<'static, str>>,
        plural: impl Into<Cow<'static, str>>,
    ) -> Gvr {
        Gvr {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
        }
    }

    /// `v1` for the core group, else `group/version`, as written in `apiVersion`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural.group` (or `plural` for core), as the apiserver names a resource in messages
    /// such as `jobs.batch "x" not found`.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The URL prefix of the group version: `/api/v1` or `/apis/{group}/{version}`.
    pub fn url_prefix(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }
}

impl fmt::Debug for Gvr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.api_version(), self.plural)
    }
}

impl fmt::Display for Gvr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// One servable resource: how it is addressed and what its objects look like.
#[derive(Clone, Debug)]
pub struct ResourceKind {
    pub gvr: Gvr,
    /// `Kind` of the objects, e.g. `PyTorchJob`.
    pub kind: String,
    /// Lower-case singular name used by discovery, e.g. `pytorchjob`.
    pub singular: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Whether `.status` is a separate subresource. When it is, writes through the main
    /// resource cannot change `.status` and writes through `/status` change nothing else.
    pub status_subresource: bool,
    /// Whether `/log` is served (pods only in a real cluster).
    pub log_subresource: bool,
    /// Short names shown in discovery (`po`, `vcjob`, ...).
    pub short_names: Vec<String>,
}

impl ResourceKind {
    /// A kind with a status subresource and no log subresource, like most CRDs.
    pub fn new(
        group: impl Into<Cow<'static, str>>,
        version: impl Into<Cow<'static, str>>,
        kind: impl Into<String>,
        plural: impl Into<Cow<'static, str>>,
        namespaced: bool,
    ) -> ResourceKind {
        let kind = kind.into();
        ResourceKind {
            gvr: Gvr::new(group, version, plural),
            singular: kind.to_lowercase(),
            kind,
            namespaced,
            status_subresource: true,
            log_subresource: false,
            short_names: Vec::new(),
        }
    }

    /// Sets whether `/status` is a subresource.
    pub fn with_status_subresource(mut self, on: bool) -> Self {
        self.status_subresource = on;
        self
    }

    /// Sets whether `/log` is served.
    pub fn with_log_subresource(mut self, on: bool) -> Self {
        self.log_subresource = on;
        self
    }

    /// Adds discovery short names.
    pub fn with_short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// `apiVersion` of the objects.
    pub fn api_version(&self) -> String {
        self.gvr.api_version()
    }

    /// `Kind` of a list of these objects, e.g. `JobList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The built-in kinds every simulator starts with: pods (and namespaces), Secrets, batch
    /// Jobs, leases, and the CRDs of every job kind the lifecycle drivers play, as if
    /// installed — so a test can drive any [`Flavor`](crate::Flavor) without setting the
    /// cluster up first. A test that needs one missing removes it with `SimCluster::unregister_kind`.
    pub fn builtins(with_namespaces: bool) -> Vec<ResourceKind> {
        let mut kinds = vec![
            ResourceKind::new("", "v1", "Pod", "pods", true)
                .with_log_subresource(true)
                .with_short_names(&["po"]),
            // Secrets have no status; their `data` is stored as written (base64 values), and
            // `stringData` is not folded into it.
            ResourceKind::new("", "v1", "Secret", "secrets", true).with_status_subresource(false),
            ResourceKind::new("batch", "v1", "Job", "jobs", true),
            ResourceKind::new("batch.volcano.sh", "v1alpha1", "Job", "jobs", true)
                .with_short_names(&["vcjob", "vj"]),
            ResourceKind::new("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", true),
            ResourceKind::new("kubeflow.org", "v1", "MPIJob", "mpijobs", true),
            ResourceKind::new("kubeflow.org", "v2beta1", "MPIJob", "mpijobs", true),
            ResourceKind::new(
                "trainer.kubeflow.org",
                "v1alpha1",
                "TrainJob",
                "trainjobs",
                true,
            ),
            ResourceKind::new("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", true),
            ResourceKind::new("ray.io", "v1", "RayJob", "rayjobs", true),
            ResourceKind::new("coordination.k8s.io", "v1", "Lease", "leases", true)
                .with_status_subresource(false),
        ];
        if with_namespaces {
            kinds.push(
                ResourceKind::new("", "v1", "Namespace", "namespaces", false)
                    .with_short_names(&["ns"]),
            );
        }
        kinds
    }
}

/// Thread-safe set of registered kinds, keyed by [`Gvr`].
///
/// Kinds of the same group and plural but different versions are separate resources here
/// (objects created through `v1` are not visible through `v2beta1`): the simulator has no
/// conversion webhooks to translate between schema versions.
#[derive(Default)]
pub(crate) struct Registry {
    kinds: RwLock<BTreeMap<Gvr, Arc<ResourceKind>>>,
}

impl Registry {
    pub(crate) fn with(kinds: Vec<ResourceKind>) -> Registry {
        let registry = Registry::default();
        for kind in kinds {
            registry.register(kind);
        }
        registry
    }

    /// Adds or replaces a kind.
    pub(crate) fn register(&self, kind: ResourceKind) {
        let mut kinds = self.kinds.write();
        kinds.insert(kind.gvr.clone(), Arc::new(kind));
    }

    /// Removes a kind; returns whether it was registered.
    pub(crate) fn unregister(&self, gvr: &Gvr) -> bool {
        let mut kinds = self.kinds.write();
        kinds.remove(gvr).is_some()
    }

    pub(crate) fn get(&self, gvr: &Gvr) -> Option<Arc<ResourceKind>> {
        let kinds = self.kinds.read();
        kinds.get(gvr).cloned()
    }

    /// Looks a resource up by the pieces of a URL.
    pub(crate) fn find(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<Arc<ResourceKind>> {
        let key = Gvr::new(group.to_string(), version.to_string(), plural.to_string());
        self.get(&key)
    }

    /// All kinds, sorted by group, version, plural.
    pub(crate) fn all(&self) -> Vec<Arc<ResourceKind>> {
        let kinds = self.kinds.read();
        kinds.values().cloned().collect()
    }
}
