//! Configuration: the watched config folder, its files, and the desired state they describe.
//!
//! Layout of the folder:
//! - `jobrelay.yaml` — the main file ([`main_file`]);
//! - `clusters/NAME` — one kubeconfig per file, the file stem is the cluster's name;
//! - `plugins/NAME.yaml` — one manifest per plugin ([`manifest`]).
//!
//! Every file is judged on its own: a file that fails to parse or validate is reported and the
//! last good version of that file stays in force; nothing else is disturbed.
//!
//! The modules, each using only those above it (and this file's shared items):
//! - [`files`] — reading the folder: every relevant file's bytes and hash, within bounds;
//! - [`manifest`] — a plugin manifest as written;
//! - [`config_schema`] — a plugin's declared config schema, beside its component;
//! - [`sections`] — where each main-file section with rules of its own is written and
//!   checked: beside the crate that owns it (`kinds:` and `finalizers:` in `jobrelay-watch`,
//!   `job_view:`, `fleet:` and `cleanup:` in `jobrelay-fleet`), `cluster_health:` here in
//!   [`sections::cluster_health`];
//! - [`main_file`] — the main file as written and validated: its struct, its parsing, the
//!   small sections (`watch:`, `plugin_defaults:`, `telemetry:`, `home_cluster:`) and the
//!   checks across sections;
//! - [`sources`] — validated sources: a cluster's kubeconfig, a plugin's resolved manifest;
//! - [`read_once`] — the sections read once at start, judged as the next start will judge
//!   them (what the parse cannot see: secrets, folders, the home cluster's credentials);
//! - [`home_cluster`] — the `home_cluster:` section made a cluster source;
//! - [`argocd_secret`] — an Argo CD cluster Secret made a cluster source;
//! - [`access_providers`] — the ClusterProfile source's access-provider file;
//! - [`capi_secret`] — a Cluster API kubeconfig Secret made a cluster source;
//! - [`capi_cluster`] — what a Cluster API Cluster says of its control plane;
//! - [`cluster_profile`] — a SIG-Multicluster ClusterProfile made a cluster source;
//! - [`inventory`] — a cluster source's objects, each with its last good cluster and what
//!   it says of the cluster's control plane;
//! - [`folder_watch`] — noticing changes: inotify on the folders, debounced, and re-scans;
//! - [`state`] — the last good version of every file, and what each re-read changed;
//! - `parse_properties` (tests only) — reading arbitrary and mutated files never panics.

pub mod access_providers;
pub mod argocd_secret;
pub mod capi_cluster;
pub mod capi_secret;
pub mod cluster_profile;
pub mod config_schema;
pub mod files;
pub mod folder_watch;
pub mod home_cluster;
pub mod inventory;
pub mod main_file;
pub mod manifest;
#[cfg(test)]
mod parse_properties;
pub mod read_once;
pub mod sections;
pub mod sources;
pub mod state;

/// Name of the main file inside the config folder.
pub const MAIN_FILE: &str = "jobrelay.yaml";

/// The clusters' folder inside the config folder, unless `clusters_dir` says otherwise.
pub const CLUSTERS_DIR: &str = "clusters";

/// The plugins' manifests folder inside the config folder, unless `plugin_manifests_dir` says
/// otherwise.
pub const PLUGIN_MANIFESTS_DIR: &str = "plugins";

/// Checks that a number lies in `min..=max`. Absurd values are refused rather than clamped:
/// a concurrency of 10^12 or a debounce of 300 years is a typo, and taking it would quietly do
/// something nobody asked for. The error names the field and the range.
pub(crate) fn in_range<T: PartialOrd + std::fmt::Display>(
    field: &str,
    value: T,
    min: T,
    max: T,
) -> Result<(), ConfigError> {
    if value < min || value > max {
        return Err(ConfigError::Invalid(format!(
            "{field}: must be from {min} to {max}, got {value}"
        )));
    }
    Ok(())
}

/// Upper bounds of numbers in config files: far above any sensible setting, low enough that
/// nothing overflows or sleeps for ages.
pub(crate) mod bounds {
    /// A plugin call's time limit, in ms (one hour, the runtime's limit).
    pub const TIMEOUT_MS: u64 = 3_600_000;
    /// A plugin instance's memory, in MiB (the runtime's limit).
    pub const MEMORY_MB: u64 = 4096;
    /// Calls at once per plugin.
    pub const CONCURRENCY: usize = 1024;
    /// A retry delay, in ms (one day).
    pub const DELAY_MS: u64 = 86_400_000;
    /// Attempts of one event.
    pub const ATTEMPTS: u32 = 1000;
    /// Versions queued per job.
    pub const QUEUED_PER_JOB: usize = 1_000_000;
    /// Events waiting in one plugin's lane (its inbox).
    pub const INBOX_EVENTS: u64 = 100_000_000;
    /// Events one kept instance may handle.
    pub const INSTANCE_REUSE: u32 = 1_000_000;
    /// Seconds between re-scans of the folder (one day).
    pub const RESCAN_SECONDS: u64 = 86_400;
    /// The folder watch's debounce, in ms (one minute).
    pub const DEBOUNCE_MS: u64 = 60_000;
    /// A watch request's server-side timeout, in seconds (one hour).
    pub const WATCH_TIMEOUT_SECONDS: u32 = 3600;
    /// MiB of events the lanes keep in memory (64 GiB).
    pub const EVENT_MEMORY_MB: u64 = 65_536;
    /// Connections of one SQL pool.
    pub const SQL_CONNECTIONS: u32 = 1000;
}

/// Why one config file was refused. The file's path is attached by the caller.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read: {0}")]
    Read(String),
    #[error("cannot parse: {0}")]
    Parse(String),
    #[error("invalid: {0}")]
    Invalid(String),
    /// A section read once at start that the next start would refuse (a live edit of it is
    /// refused at once, like any broken main file).
    #[error("the next start would refuse it: {0}")]
    NextStart(read_once::NextStartError),
}
