//! A plugin manifest: one YAML file per plugin in `plugins/`, the file stem being the
//! plugin's name. It says which component to run, on which events, within which limits, and
//! which capabilities the plugin is granted. Nothing is granted by default.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use jobrelay_capabilities::Grants;
use jobrelay_lanes::filter::FilterSpec;
use jobrelay_lanes::mode::DeliveryMode;
use jobrelay_lanes::settings::{RateLimitSpec, RetryPolicy};

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
    /// Which jobs of those kinds, and which of their versions, the plugin is given: judged
    /// before anything is queued (see `jobrelay_lanes::filter`).
    #[serde(default)]
    pub filter: FilterSpec,
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
    /// Most events waiting in the plugin's lane at once, all jobs together — its inbox in the
    /// state store (default 1,000,000). An event beyond it is moved to the dead-letter list
    /// (`inbox full`: durable, replayable, counted) rather than stored without limit.
    #[serde(default)]
    pub max_inbox_events: Option<u64>,
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
    /// The fleet events the plugin takes through its `handle-fleet` export (a component built
    /// against `jobrelay:plugin@0.2.1` or later): `clusters` — a cluster going offline or
    /// back online — and `rules` — a fleet rule of the main file firing or resolving. None
    /// by default.
    #[serde(default)]
    pub fleet_events: Vec<FleetEventSort>,
}

/// A sort of fleet event a manifest can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FleetEventSort {
    Clusters,
    Rules,
}
