//! The main file, `jobrelay.yaml`: the file as written and validated — which job kinds to
//! watch and where, the defaults that plugins inherit, the folders, and the sections read once
//! at start. The sections with rules of their own are written and checked beside the crate
//! that owns what they configure (see [`super::sections`] for where each is); this file
//! calls their checks in turn and the checks that join sections (a shared store for
//! replicas, the archive's default folder).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::oci::OciSettings;

use crate::clusters::health::CheckSettings;
use jobrelay_capabilities::archive::{ArchiveLocation, ArchiveSettings};
use jobrelay_capabilities::sql::SqlSettings;
use jobrelay_coordination::{CoordinationSettings, Mode};
use jobrelay_fleet::cleanup::{CleanupSettings, CleanupSpec};
use jobrelay_fleet::jobs::ViewSettings;
use jobrelay_fleet::jobs::spec::JobViewSpec;
use jobrelay_fleet::rules::spec::{FleetSettings, FleetSpec};
use jobrelay_runtime::RuntimeSettings;
use jobrelay_state::{StateBackend, StateSettings};
use jobrelay_watch::finalizer::spec::FinalizerSettings;
use jobrelay_watch::kinds::JobKind;
use jobrelay_watch::kinds::spec::KindEntry;

use super::sections::cluster_health::ClusterHealthSpec;
use super::sections::cluster_sources::{ClusterSources, ClusterSourcesSpec};
use super::{CLUSTERS_DIR, ConfigError, PLUGIN_MANIFESTS_DIR};

/// The main file as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MainFile {
    /// Job kinds to watch. Empty: the built-in batch, Volcano, PyTorch and MPI kinds.
    #[serde(default)]
    pub kinds: Vec<KindEntry>,
    /// Where to watch, on every cluster.
    #[serde(default)]
    pub watch: WatchScope,
    /// Limits that plugin manifests inherit when they do not set their own.
    #[serde(default)]
    pub plugin_defaults: PluginDefaults,
    /// Folder that relative `wasm:` paths of manifests are resolved against. Relative to the
    /// config folder; defaults to the config folder itself. Watched for changes like the rest.
    #[serde(default)]
    pub plugin_dir: Option<PathBuf>,
    /// Folder of the clusters' kubeconfigs, one file per cluster named after it. Relative to
    /// the config folder; defaults to its `clusters/`. Watched like the rest; read once at
    /// start: moving it needs a restart. Lets a Secret be mounted whole, apart from the
    /// ConfigMap, so a key added to it is a new cluster without touching anything else.
    #[serde(default)]
    pub clusters_dir: Option<PathBuf>,
    /// Folder of the plugins' manifests, one `NAME.yaml` per plugin. Relative to the config
    /// folder; defaults to its `plugins/`. Watched like the rest; read once at start: moving it
    /// needs a restart. Lets a ConfigMap of manifests be mounted whole at a path of its own (a
    /// ConfigMap cannot hold a sub-folder), so a plugin added to it is loaded live and the
    /// pod's spec never names one plugin.
    #[serde(default)]
    pub plugin_manifests_dir: Option<PathBuf>,
    /// The WebAssembly engine. Read once at start: changing it needs a restart.
    #[serde(default)]
    pub runtime: RuntimeSettings,
    /// Where cursors, dead letters and plugins' key-value entries are kept: an SQLite file or
    /// a MySQL/MariaDB database. Read once at start.
    #[serde(default)]
    pub state: StateSettings,
    /// jobrelay's finalizer, for kinds with `finalizer: true`.
    #[serde(default)]
    pub finalizers: FinalizerSettings,
    /// Deleting finished jobs once their plugins have delivered them. Off without rules.
    #[serde(default)]
    pub cleanup: CleanupSpec,
    /// The fleet's job view (`/api/v1/jobs`): how long deleted jobs stay in it.
    #[serde(default)]
    pub job_view: JobViewSpec,
    /// How clusters' health is checked and judged (online / degraded / offline).
    #[serde(default)]
    pub cluster_health: ClusterHealthSpec,
    /// Fleet rules on the job SLIs; their firing and resolving are fleet events.
    #[serde(default)]
    pub fleet: FleetSpec,
    /// Named SQL connections that plugins may be granted. Read once at start.
    #[serde(default)]
    pub sql: SqlSettings,
    /// Where plugins with an archive grant write. Read once at start.
    #[serde(default)]
    pub archive: ArchiveSettings,
    /// The HTTP endpoint for metrics, probes and status. Read once at start.
    #[serde(default)]
    pub telemetry: TelemetrySettings,
    /// Leader election between replicas. Read once at start.
    #[serde(default)]
    pub coordination: CoordinationSettings,
    /// The cluster jobrelay runs in, watched with the pod's service account (no kubeconfig).
    #[serde(default)]
    pub home_cluster: Option<HomeCluster>,
    /// Clusters read live from an inventory on the home cluster (Argo CD's cluster Secrets),
    /// beside the files of `clusters_dir`.
    #[serde(default)]
    pub cluster_sources: ClusterSourcesSpec,
    /// How OCI registries are reached for `wasm: oci://…` components. Read once at start.
    #[serde(default)]
    pub oci: OciSettings,
    /// Seconds between full re-scans of the config folder, a backstop for missed file events.
    #[serde(default = "default_rescan")]
    pub rescan_seconds: u64,
    /// Milliseconds of quiet after a file event before the folder is re-read.
    #[serde(default = "default_debounce")]
    pub debounce_ms: u64,
    /// MiB of job events the lanes keep in memory, all plugins together. Past it, queued
    /// events wait only in the state store's inbox and are read back in their turn, and the
    /// watch streams are read only as fast as the inbox is written. Read once at start.
    #[serde(default = "default_event_memory")]
    pub event_memory_mb: u64,
}

fn default_event_memory() -> u64 {
    jobrelay_lanes::budget::DEFAULT_EVENT_MEMORY_BYTES / (1024 * 1024)
}

fn default_rescan() -> u64 {
    30
}
/// Short, because a plugin swap waits for it on top of its compile (the target is compile +
/// 50 ms, docs/BENCHMARKS.md) and the debouncer adds up to a quarter of it as its tick; a
/// ConfigMap update is one atomic symlink swap, and a file caught half-written is refused
/// with the last good version kept, then read again on the write's next event.
fn default_debounce() -> u64 {
    20
}

/// The `telemetry:` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySettings {
    /// Address of `/metrics`, `/healthz`, `/readyz` and `/status`, e.g. `0.0.0.0:9464`.
    /// Absent: no endpoint.
    #[serde(default)]
    pub listen: Option<std::net::SocketAddr>,
}

/// Where Kubernetes mounts the service account's token and CA.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The `home_cluster:` section: the cluster jobrelay runs in, watched with the pod's service
/// account (made a cluster source in [`super::home_cluster`]).
///
/// ```yaml
/// home_cluster:
///   name: home          # the cluster's name in events and metrics
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HomeCluster {
    pub name: String,
    /// The API server. Default: `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`,
    /// which Kubernetes sets in every pod.
    #[serde(default)]
    pub server: Option<String>,
    /// The folder with `token` and `ca.crt`.
    #[serde(default = "default_service_account_dir")]
    pub service_account_dir: PathBuf,
}

fn default_service_account_dir() -> PathBuf {
    PathBuf::from(SERVICE_ACCOUNT_DIR)
}

/// Namespaces and labels to watch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchScope {
    /// Namespaces to watch; empty watches all namespaces.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// A Kubernetes label selector applied to every job kind, e.g. `team=ml,!skip-relay`.
    #[serde(default)]
    pub label_selector: Option<String>,
    /// Server-side timeout of one watch request, in seconds. The client gives up on a watch
    /// that stayed silent for this long plus 5 s and reconnects, so this also bounds how long
    /// a stalled connection (a dead network path, a hung proxy) goes unnoticed. Bookmarks keep
    /// a healthy idle watch from looking silent.
    #[serde(default = "default_watch_timeout")]
    pub timeout_seconds: u32,
}

fn default_watch_timeout() -> u32 {
    60
}

impl Default for WatchScope {
    fn default() -> Self {
        WatchScope {
            namespaces: Vec::new(),
            label_selector: None,
            timeout_seconds: default_watch_timeout(),
        }
    }
}

/// Plugin limits used when a manifest does not set its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginDefaults {
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default = "default_memory_mb")]
    pub memory_mb: u64,
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
}

fn default_timeout_ms() -> u64 {
    5_000
}
fn default_memory_mb() -> u64 {
    64
}
fn default_concurrency() -> usize {
    4
}

impl Default for PluginDefaults {
    fn default() -> Self {
        PluginDefaults {
            timeout_ms: default_timeout_ms(),
            memory_mb: default_memory_mb(),
            concurrency: default_concurrency(),
        }
    }
}

/// The main file after validation.
#[derive(Debug, Clone, PartialEq)]
pub struct MainConfig {
    pub kinds: Vec<JobKind>,
    pub watch: WatchScope,
    pub plugin_defaults: PluginDefaults,
    /// Absolute.
    pub plugin_dir: PathBuf,
    /// Absolute.
    pub clusters_dir: PathBuf,
    /// Absolute.
    pub plugin_manifests_dir: PathBuf,
    pub runtime: RuntimeSettings,
    /// Where the state lives: the SQLite file (absolute) or the MySQL database.
    pub state: StateBackend,
    pub finalizers: FinalizerSettings,
    pub cleanup: CleanupSettings,
    pub job_view: ViewSettings,
    /// How clusters are checked (live: a change applies at the next check).
    pub cluster_health: CheckSettings,
    /// Fleet rules (live).
    pub fleet: FleetSettings,
    pub sql: SqlSettings,
    pub archive: ArchiveLocation,
    pub telemetry: TelemetrySettings,
    /// With a relative kubeconfig resolved.
    pub coordination: CoordinationSettings,
    pub home_cluster: Option<HomeCluster>,
    /// Cluster sources on the home cluster (live: an edit restarts their watch).
    pub cluster_sources: ClusterSources,
    pub oci: OciSettings,
    pub rescan_seconds: u64,
    pub debounce_ms: u64,
    /// Bytes.
    pub event_memory_bytes: u64,
}

/// The sections of the main file a running daemon reads once at start, in the order they are
/// reported (the metric `jobrelay_restart_pending` has one series each).
pub const READ_ONCE_SECTIONS: [&str; 10] = [
    "runtime",
    "state",
    "coordination",
    "sql",
    "archive",
    "telemetry",
    "oci",
    "event_memory_mb",
    "clusters_dir",
    "plugin_manifests_dir",
];

impl MainConfig {
    /// The sections of the main file a running daemon read once at start, that differ in
    /// `new`: an edit of them takes effect at the next start only.
    pub fn read_once_changes(&self, new: &MainConfig) -> Vec<&'static str> {
        READ_ONCE_SECTIONS
            .into_iter()
            .filter(|section| match *section {
                "runtime" => self.runtime != new.runtime,
                "state" => self.state != new.state,
                "coordination" => self.coordination != new.coordination,
                "sql" => self.sql != new.sql,
                "archive" => self.archive != new.archive,
                "telemetry" => self.telemetry != new.telemetry,
                "oci" => self.oci != new.oci,
                "event_memory_mb" => self.event_memory_bytes != new.event_memory_bytes,
                "clusters_dir" => self.clusters_dir != new.clusters_dir,
                "plugin_manifests_dir" => self.plugin_manifests_dir != new.plugin_manifests_dir,
                _ => false,
            })
            .collect()
    }

    /// Parse and validate the main file's text. `root` is the config folder.
    /// Parses the text of a main file that exists. An empty or comment-only file is refused
    /// like any invalid one: it is far more often a ConfigMap caught half-written, or a
    /// mistake, than a wish for the defaults, and taking it would silently stop watching the
    /// kinds the last good file named. Only a missing main file means the defaults.
    pub fn parse_file(text: &str, root: &std::path::Path) -> Result<MainConfig, ConfigError> {
        let document: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        if document.is_null() {
            return Err(ConfigError::Parse(
                "the main file is empty (or only comments); write `{}` for all defaults, or \
                 delete the file"
                    .into(),
            ));
        }
        MainConfig::parse(text, root)
    }

    /// Parses main-file text; empty text means all defaults (the main file is missing).
    pub fn parse(text: &str, root: &std::path::Path) -> Result<MainConfig, ConfigError> {
        let text = if text.trim().is_empty() { "{}" } else { text };
        let file: MainFile =
            serde_yaml_ng::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        file.validate(root)
    }

    /// The kind with this name, if watched.
    pub fn kind(&self, name: &str) -> Option<&JobKind> {
        self.kinds.iter().find(|k| k.name == name)
    }

    /// Whether a change from `self` to `next` requires restarting cluster watchers.
    pub fn watch_differs(&self, next: &MainConfig) -> bool {
        self.kinds != next.kinds || self.watch != next.watch || self.finalizers != next.finalizers
    }
}

impl MainFile {
    fn validate(self, root: &std::path::Path) -> Result<MainConfig, ConfigError> {
        let entries = if self.kinds.is_empty() {
            JobKind::DEFAULT_BUILTINS
                .iter()
                .map(|n| KindEntry::named(n))
                .collect()
        } else {
            self.kinds
        };
        let mut kinds: Vec<JobKind> = Vec::with_capacity(entries.len());
        for (i, entry) in entries.into_iter().enumerate() {
            let kind = entry
                .resolve()
                .map_err(|why| ConfigError::Invalid(format!("kinds[{i}]: {why}")))?;
            if kinds.iter().any(|k| k.name == kind.name) {
                return Err(ConfigError::Invalid(format!(
                    "kinds[{i}]: the name `{}` is used twice",
                    kind.name
                )));
            }
            kinds.push(kind);
        }
        use super::{bounds, in_range};
        let d = &self.plugin_defaults;
        in_range(
            "plugin_defaults.concurrency",
            d.concurrency,
            1,
            bounds::CONCURRENCY,
        )?;
        in_range(
            "plugin_defaults.timeout_ms",
            d.timeout_ms,
            1,
            bounds::TIMEOUT_MS,
        )?;
        in_range(
            "plugin_defaults.memory_mb",
            d.memory_mb,
            1,
            bounds::MEMORY_MB,
        )?;
        in_range(
            "rescan_seconds",
            self.rescan_seconds,
            1,
            bounds::RESCAN_SECONDS,
        )?;
        in_range("debounce_ms", self.debounce_ms, 0, bounds::DEBOUNCE_MS)?;
        in_range(
            "event_memory_mb",
            self.event_memory_mb,
            1,
            bounds::EVENT_MEMORY_MB,
        )?;
        in_range(
            "watch.timeout_seconds",
            self.watch.timeout_seconds,
            1,
            bounds::WATCH_TIMEOUT_SECONDS,
        )?;
        self.finalizers
            .validate()
            .map_err(|why| ConfigError::Invalid(why.to_string()))?;
        let kind_names: Vec<&str> = kinds.iter().map(|k| k.name.as_str()).collect();
        let cleanup = self
            .cleanup
            .validate(&kind_names)
            .map_err(|why| ConfigError::Invalid(why.to_string()))?;
        let job_view = self
            .job_view
            .validate()
            .map_err(|why| ConfigError::Invalid(why.to_string()))?;
        let cluster_health = self
            .cluster_health
            .validate()
            .map_err(|why| ConfigError::Invalid(why.to_string()))?;
        let fleet = self
            .fleet
            .validate(&kind_names)
            .map_err(|why| ConfigError::Invalid(why.to_string()))?;
        if let Some(selector) = &self.watch.label_selector {
            jobrelay_contract::label_selector::check(selector)
                .map_err(|why| ConfigError::Invalid(format!("watch.label_selector: {why}")))?;
        }
        if self.watch.timeout_seconds == 0 {
            return Err(ConfigError::Invalid(
                "watch.timeout_seconds: must be at least 1".into(),
            ));
        }
        if self.rescan_seconds == 0 {
            return Err(ConfigError::Invalid(
                "rescan_seconds: must be at least 1".into(),
            ));
        }
        for (name, connection) in &self.sql.connections {
            in_range(
                &format!("sql.connections.{name}.max_connections"),
                connection.max_connections,
                1,
                bounds::SQL_CONNECTIONS,
            )?;
            in_range(
                &format!("sql.connections.{name}.max_statement_ms"),
                connection.max_statement_ms,
                0,
                bounds::TIMEOUT_MS,
            )?;
            if name.is_empty()
                || connection.url.trim().is_empty()
                || connection.max_connections == 0
            {
                return Err(ConfigError::Invalid(format!(
                    "sql.connections.{name}: needs a non-empty name and `url`, and \
                     max_connections of at least 1"
                )));
            }
            // A URL written here (not a secret reference, resolved only when the pools are
            // opened) is checked now, so an edit of a running daemon's file is refused as
            // `check` refuses it, instead of waiting for the next start to fail.
            let url = connection.url.trim();
            if !jobrelay_contract::secret::is_reference(url)
                && !["mysql:", "mariadb:", "sqlite:"]
                    .iter()
                    .any(|scheme| url.starts_with(scheme))
            {
                let scheme = url.split(':').next().unwrap_or_default();
                return Err(ConfigError::Invalid(format!(
                    "sql.connections.{name}.url: `{scheme}` is not a database jobrelay \
                     speaks; use mysql:// (MySQL, MariaDB) or sqlite://"
                )));
            }
        }
        let state = self
            .state
            .backend(root)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let archive = match (self.archive.local, self.archive.s3) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::Invalid(
                    "archive: give `local` or `s3`, not both".into(),
                ));
            }
            (_, Some(s3)) if s3.bucket.is_empty() => {
                return Err(ConfigError::Invalid(
                    "archive.s3.bucket: must not be empty".into(),
                ));
            }
            (_, Some(s3)) => ArchiveLocation::S3(s3),
            (Some(p), None) if p.is_absolute() => ArchiveLocation::Local(p),
            (Some(p), None) => ArchiveLocation::Local(root.join(p)),
            (None, None) => ArchiveLocation::Local(state.local_dir().join("archive")),
        };
        let cluster_sources = self
            .cluster_sources
            .validate(root)
            .map_err(|why| ConfigError::Invalid(why.to_string()))?;
        let coordination = self
            .coordination
            .resolve(root)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        // Replicas that share the work must share what was delivered: with a SQLite file each
        // would keep its own cursors and dead letters, and a fail-over or a shard moving to
        // another replica would deliver the current state of every job again.
        if coordination.mode != Mode::Single && matches!(state, StateBackend::Sqlite(_)) {
            return Err(ConfigError::Invalid(format!(
                "coordination.mode: `{}` needs a state store every replica shares; set \
                 state.url to a MySQL or MariaDB database (state.path, a SQLite file, is one \
                 replica's own)",
                coordination.mode
            )));
        }
        let plugin_dir = match self.plugin_dir {
            Some(p) if p.is_absolute() => p,
            Some(p) => root.join(p),
            None => root.to_path_buf(),
        };
        let clusters_dir = match self.clusters_dir {
            Some(p) if p.is_absolute() => p,
            Some(p) => root.join(p),
            None => root.join(CLUSTERS_DIR),
        };
        let plugin_manifests_dir = match self.plugin_manifests_dir {
            Some(p) if p.is_absolute() => p,
            Some(p) => root.join(p),
            None => root.join(PLUGIN_MANIFESTS_DIR),
        };
        // The config folder itself would make the main file a manifest named `jobrelay`.
        if plugin_manifests_dir.components().eq(root.components()) {
            return Err(ConfigError::Invalid(
                "plugin_manifests_dir: must be a folder of its own, not the config folder \
                 (the main file would be read as a manifest)"
                    .into(),
            ));
        }
        // What building the engine would refuse at start (`max_instances: 0`, …), refused with
        // the rest of the file, so a live edit is refused as the next start would be.
        self.runtime.validate().map_err(|e| {
            ConfigError::Invalid(match e {
                jobrelay_runtime::RuntimeError::Settings(why) => why,
                other => other.to_string(),
            })
        })?;
        let mut runtime = self.runtime;
        runtime.cache_dir = runtime.cache_dir.map(|p| root.join(p));
        Ok(MainConfig {
            kinds,
            watch: self.watch,
            plugin_defaults: self.plugin_defaults,
            plugin_dir,
            clusters_dir,
            plugin_manifests_dir,
            runtime,
            state,
            finalizers: self.finalizers,
            cleanup,
            job_view,
            cluster_health,
            fleet,
            sql: self.sql,
            archive,
            telemetry: self.telemetry,
            coordination,
            home_cluster: self.home_cluster,
            cluster_sources,
            oci: self.oci,
            rescan_seconds: self.rescan_seconds,
            debounce_ms: self.debounce_ms,
            event_memory_bytes: self.event_memory_mb * 1024 * 1024,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn relative_paths_are_read_from_the_config_folder() {
        let c = MainConfig::parse(
            "runtime: {cache_dir: cache/cwasm}\nplugin_dir: wasm\n",
            Path::new("/cfg"),
        )
        .expect("valid");
        assert_eq!(
            c.runtime.cache_dir.as_deref(),
            Some(Path::new("/cfg/cache/cwasm"))
        );
        assert_eq!(c.plugin_dir, Path::new("/cfg/wasm"));
        let absolute =
            MainConfig::parse("runtime: {cache_dir: /var/cache/jr}\n", Path::new("/cfg"))
                .expect("valid");
        assert_eq!(
            absolute.runtime.cache_dir.as_deref(),
            Some(Path::new("/var/cache/jr"))
        );
    }
    #[test]
    fn empty_file_watches_the_builtins() {
        let c = MainConfig::parse("", Path::new("/cfg")).expect("valid");
        let names: Vec<_> = c.kinds.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, JobKind::DEFAULT_BUILTINS);
        assert_eq!(c.plugin_dir, Path::new("/cfg"));
    }
    #[test]
    fn unknown_field_and_unknown_builtin_are_refused() {
        let err = MainConfig::parse("kindz: []\n", Path::new("/cfg")).expect_err("typo");
        assert!(err.to_string().contains("kindz"), "{err}");
        let err =
            MainConfig::parse("kinds: [{name: tf-job}]\n", Path::new("/cfg")).expect_err("unknown");
        assert!(err.to_string().contains("tf-job"), "{err}");
    }
    #[test]
    fn a_custom_kind_whose_rule_reads_nothing_is_refused_naming_the_field() {
        let kind = |normalizer: &str| {
            format!(
                "kinds:\n  - name: trainjob\n    group: example.com\n    version: v1\n    \
                 kind: TrainJob\n    plural: trainjobs\n    normalizer: {normalizer}\n"
            )
        };
        let bad_escape = MainConfig::parse(
            &kind("{field: {path: /status/phase, time_path: /status/~2since, phases: {}}}"),
            Path::new("/cfg"),
        )
        .expect_err("a bad escape");
        assert!(
            bad_escape
                .to_string()
                .contains("normalizer.field.time_path"),
            "{bad_escape}"
        );
        let empty = MainConfig::parse(&kind("{conditions: []}"), Path::new("/cfg"))
            .expect_err("no conditions");
        assert!(
            empty.to_string().contains("normalizer.conditions"),
            "{empty}"
        );
    }

    /// A kind written as rules, with samples: the samples are tried when the file is read,
    /// and one the rules read otherwise refuses the file naming the kind and the sample.
    #[test]
    fn kind_samples_are_tried_when_the_file_is_read() {
        let file = |phase: &str| {
            format!(
                "kinds:\n  - name: mljob\n    group: example.com\n    version: v1\n    \
                 kind: MLJob\n    plural: mljobs\n    normalizer:\n      rules:\n        \
                 first_match:\n          - {{phase: running, when: [{{condition: Suspended, \
                 status: \"False\", reason: [Resumed]}}]}}\n    samples:\n      - name: resumed\n        \
                 status: {{conditions: [{{type: Suspended, status: \"False\", reason: Resumed}}]}}\n        \
                 phase: {phase}\n  - name: jobset\n    samples:\n      - {{status: {{}}, spec: \
                 {{suspend: true}}, phase: suspended}}\n"
            )
        };
        let ok = MainConfig::parse(&file("running"), Path::new("/cfg")).expect("valid");
        assert_eq!(ok.kinds[0].samples.len(), 1);
        let err = MainConfig::parse(&file("failed"), Path::new("/cfg"))
            .expect_err("a sample the rules read otherwise")
            .to_string();
        assert!(
            err.contains(
                "`mljob`: samples[0] (resumed): normalizes to running, the sample says failed"
            ),
            "{err}"
        );
    }
    #[test]
    fn custom_kind_needs_every_field() {
        let err = MainConfig::parse(
            "kinds:\n  - name: trainjob\n    group: example.com\n    version: v1\n",
            Path::new("/cfg"),
        )
        .expect_err("incomplete kind");
        assert!(err.to_string().contains("kinds[0]"), "{err}");
        assert!(err.to_string().contains("kind"), "{err}");
    }
    #[test]
    fn custom_kind_with_field_rule() {
        let c = MainConfig::parse(
            "kinds:\n  - name: volcano-job\n  - name: trainjob\n    group: example.com\n    version: v1\n    kind: TrainJob\n    plural: trainjobs\n    normalizer:\n      field:\n        path: /status/phase\n        phases: {Done: succeeded}\n",
            Path::new("/cfg"),
        )
        .expect("valid");
        assert_eq!(c.kinds.len(), 2);
        assert_eq!(
            c.kind("trainjob").map(|k| k.api_version()),
            Some("example.com/v1".into())
        );
    }
}
