//! A plugin manifest: one YAML file per plugin in `plugins/`, the file stem being the
//! plugin's name. It says which component to run, on which events, within which limits, and
//! which capabilities the plugin is granted. Nothing is granted by default.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::lanes::mode::DeliveryMode;
use crate::lanes::settings::{RateLimitSpec, RetryPolicy};

/// The manifest as written by the operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginManifest {
    /// Path of the `.wasm` component; relative paths are resolved against the main file's
    /// `plugin_dir`.
    pub wasm: PathBuf,
    /// Names of the job kinds (from the main file) this plugin wants; empty means all.
    #[serde(default)]
    pub kinds: Vec<String>,
    /// Wall-clock limit of one call, in milliseconds. Defaults to the main file's runtime default.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Limit of the plugin's linear memory, in MiB. Defaults to the main file's runtime default.
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// How many different jobs may be handled at once. Events of one job are always handled
    /// one at a time.
    #[serde(default)]
    pub concurrency: Option<usize>,
    /// Calls one instance may serve before it is replaced (default 1: a fresh instance for
    /// every event). Above 1, an instance that handled an event successfully is kept for the
    /// next event of this plugin version, which saves instantiation and `init`; any trap,
    /// timeout or error retires it. Only for plugins that keep no state between events in
    /// their globals (the shipped plugins qualify).
    #[serde(default)]
    pub instance_reuse: Option<u32>,
    /// Which versions the plugin receives: `every-version` (default), `transitions`,
    /// `terminal` or `latest`.
    #[serde(default)]
    pub delivery: DeliveryMode,
    /// Most versions of one job waiting in the plugin's lane (default 1000). Only
    /// `every-version` and `transitions` can queue many; when a plugin is down or far behind,
    /// a version beyond the bound is moved to the dead-letter list (durable, replayable, and
    /// reported) instead of growing memory without limit.
    #[serde(default)]
    pub max_queued_per_job: Option<usize>,
    /// How failed calls are retried before the event is dead-lettered.
    #[serde(default)]
    pub retry: RetryPolicy,
    /// Token buckets every call waits for, e.g. `[{per_second: 5}, {per_minute: 100}]`.
    #[serde(default)]
    pub rate_limits: Vec<RateLimitSpec>,
    /// Capabilities granted to the plugin.
    #[serde(default)]
    pub grants: Grants,
    /// Free-form configuration handed to the plugin's `init`.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

/// Capabilities a manifest grants. Each field is one capability; absent means refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grants {
    /// Host directories the plugin may see, through the standard WASI filesystem.
    #[serde(default)]
    pub filesystem: Vec<DirGrant>,
    /// Names of the main file's SQL connections (`sql.connections`) the plugin may use.
    #[serde(default)]
    pub sql: Vec<String>,
    /// Whether the plugin has a key-value store of its own.
    #[serde(default)]
    pub kv: bool,
    /// How much the plugin may keep there (defaults: 10,000 entries, 64 MiB).
    #[serde(default)]
    pub kv_quota: Option<KvQuota>,
    /// Outbound HTTP through `wasi:http`, to the listed destinations only.
    #[serde(default)]
    pub http: Option<HttpGrant>,
    /// Logs of the pods of the job being handled.
    #[serde(default)]
    pub pod_logs: Option<PodLogsGrant>,
    /// Writes under the plugin's own prefix of the archive store.
    #[serde(default)]
    pub archive: Option<ArchiveGrant>,
}

/// Outbound HTTP a plugin may make.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpGrant {
    /// Destinations, as `scheme://host[:port]` patterns: `https://open.feishu.cn`,
    /// `https://*.example.com`, `http://10.0.0.5:8080`, `http://127.0.0.1:*`. A missing port
    /// means the scheme's default port.
    pub allow: Vec<String>,
    /// Whether destinations that resolve to private, loopback or link-local addresses are
    /// allowed. Refused by default, so an allowed name cannot be pointed at the cluster's
    /// internal network.
    #[serde(default)]
    pub allow_private: bool,
    /// Connection timeout in milliseconds (default 5000).
    #[serde(default)]
    pub connect_timeout_ms: Option<u64>,
    /// Limit of one request from sending to the last byte of the response, in milliseconds
    /// (default 30000; the call's own time limit still applies).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Largest response body read, in bytes (default 1 MiB).
    #[serde(default)]
    pub max_response_bytes: Option<u64>,
    /// Requests one call may have open at once, each with its connection (default 16, at
    /// most 1024); one more is refused with `connection-limit-reached`.
    #[serde(default)]
    pub max_concurrent_requests: Option<u32>,
}

/// The most a plugin may keep in its key-value store: live entries, and their keys' and
/// values' bytes together.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvQuota {
    #[serde(default)]
    pub max_entries: Option<u64>,
    #[serde(default)]
    pub max_bytes: Option<u64>,
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

/// Archive writes a plugin may make.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveGrant {
    /// The plugin's prefix in the archive store (default: the plugin's name). A relative
    /// `/`-separated path; two plugins should not share one.
    #[serde(default)]
    pub prefix: Option<String>,
    /// Largest object the plugin may write, in bytes (default 1 GiB).
    #[serde(default)]
    pub max_object_bytes: Option<u64>,
    /// The most the plugin's prefix may hold, all objects together, in bytes (default 10 GiB).
    #[serde(default)]
    pub max_total_bytes: Option<u64>,
}

/// One host directory made visible to a plugin under a guest path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirGrant {
    /// Directory on the host; relative paths are resolved against the config folder. It is
    /// created if missing.
    pub host: PathBuf,
    /// Where the plugin sees it, e.g. `/data`.
    pub guest: String,
    /// Whether the plugin may create and write files there.
    #[serde(default)]
    pub writable: bool,
}
