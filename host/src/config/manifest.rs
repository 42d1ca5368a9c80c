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
    /// Which versions the plugin receives: `every-version` (default), `transitions`,
    /// `terminal` or `latest`.
    #[serde(default)]
    pub delivery: DeliveryMode,
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
