//! Host capabilities: what a plugin can reach beyond its own memory.
//!
//! A capability is one module: a type implementing [`Capability`] (check and prepare the
//! manifest's grant once per plugin version, set up one store's state from it on every call),
//! that per-call state, the WIT interface's `Host` traits implemented on that state (or on a
//! view of it), and an `add_to_linker` generic over the store's data type, which is handed a
//! getter from the store's data to that state. So a capability never names the store type;
//! only the runtime knows the whole store and links every capability into it
//! (`runtime::linking`), the way wasmtime-wasi-http's `WasiHttpView` never names its
//! embedder's type. Host objects behind WIT resources stay in the capability's own bounded
//! [`handles::Handles`]. Everything is refused unless granted.
//!
//! A small capability is one file. A larger one is a file that ties it together (the grant,
//! the per-call state, `add_to_linker`) and a folder of its parts, one concept a file, so a
//! file's name says what it owns: `http/`, `sql/`, `archive/` and `pod_logs/` keep their
//! settings, pools or stores, driver, tape format and `Host` traits (one file for each served
//! WIT version) apart.
//!
//! Adding a capability touches its module and, here, its `mod` line, a field in [`Grants`] (the
//! manifest's `grants:`), a field in [`CapabilityState`] and an entry in [`ALL`]; then one
//! line in `runtime/linking.rs`. If it needs a process-wide resource (a pool, a store, a
//! client), a field in [`Services`] too. A call that asks a service something passes through
//! the run's tape ([`tape::through`]), so `plugin run --record/--replay` covers it.

// A layer crate: every public item says what it is for, since the next layer up reads its
// API (the lint is on in each layer crate; see the root Cargo.toml's [workspace.lints]).
#![warn(missing_docs)]

pub mod archive;
pub mod deferral;
pub mod filesystem;
pub mod handles;
pub mod http;
pub mod job;
pub mod kv;
pub mod lifecycle;
pub mod log;
pub mod open_error;
pub mod pod_logs;
pub mod refusals;
pub mod services;
pub mod sql;
pub mod sqlite_sandbox;
pub mod story;
pub mod tape;
pub mod wasi;

use std::sync::Arc;
use std::time::Instant;

use wasmtime_wasi::WasiCtxBuilder;

use jobrelay_contract::event::JobEvent;
use serde::{Deserialize, Serialize};

pub use self::services::Services;

/// The longest time limit a manifest may set. One call holding an instance for longer is a
/// plugin that should split its work; the bound also keeps deadline arithmetic far from
/// overflow.
pub const MAX_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

/// Capabilities a manifest grants. Each field is one capability; absent means refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grants {
    /// Host directories the plugin may see, through the standard WASI filesystem.
    #[serde(default)]
    pub filesystem: Vec<filesystem::DirGrant>,
    /// Names of the main file's SQL connections (`sql.connections`) the plugin may use.
    #[serde(default)]
    pub sql: Vec<String>,
    /// Whether the plugin has a key-value store of its own.
    #[serde(default)]
    pub kv: bool,
    /// How much the plugin may keep there (defaults: 10,000 entries, 64 MiB).
    #[serde(default)]
    pub kv_quota: Option<kv::KvQuota>,
    /// Outbound HTTP through `wasi:http`, to the listed destinations only.
    #[serde(default)]
    pub http: Option<http::HttpGrant>,
    /// Logs of the pods of the job being handled.
    #[serde(default)]
    pub pod_logs: Option<pod_logs::PodLogsGrant>,
    /// Writes under the plugin's own prefix of the archive store.
    #[serde(default)]
    pub archive: Option<archive::ArchiveGrant>,
    /// Annotations and labels on the event's own job, under the granted key prefixes.
    #[serde(default)]
    pub job: Option<job::JobGrant>,
}

/// Who is running: attached to every log line and captured output of the call.
#[derive(Debug, Clone)]
pub struct CallLabels {
    /// The plugin's name.
    pub plugin: Arc<str>,
    /// The plugin version's `version`, as its manifest gives it.
    pub version: Arc<str>,
    /// The id of the event being handled; `None` while only `init` runs (at load).
    pub event: Option<Arc<str>>,
}

impl CallLabels {
    /// The event id, or `-` outside an event, for log fields.
    pub fn event_or_dash(&self) -> &str {
        self.event.as_deref().unwrap_or("-")
    }
}

/// What a capability knows when a plugin version is loaded.
pub struct LoadScope<'a> {
    /// The plugin's name.
    pub plugin: &'a str,
    /// The process-wide resources a grant may name (pools, stores, clients).
    pub services: &'a Services,
}

/// What a capability knows when it sets up the store of one call.
pub struct CallScope<'a> {
    /// The plugin's name.
    pub plugin: &'a str,
    /// The grants as prepared at load.
    pub grants: &'a Grants,
    /// The process-wide resources the call's state draws on.
    pub services: &'a Services,
    /// The event being handled; `None` while only `init` runs.
    pub event: Option<&'a JobEvent>,
    /// When the call must be over.
    pub deadline: Instant,
}

/// One capability. Implementations are stateless values; per-call state lives in
/// [`CapabilityState`].
pub trait Capability: Send + Sync {
    /// Name used in error messages.
    fn name(&self) -> &'static str;

    /// Checks and normalises the grants of a plugin version when it is loaded (for example,
    /// creates granted directories), so that a bad grant fails the load, not every call.
    fn prepare(&self, grants: &mut Grants, load: &LoadScope<'_>) -> Result<(), GrantProblem> {
        let _ = (grants, load);
        Ok(())
    }

    /// Sets up one store from the prepared grants. Runs on every call, so it must be cheap.
    fn configure(&self, call: &CallScope<'_>, setup: &mut StoreSetup) -> Result<(), GrantProblem> {
        let _ = (call, setup);
        Ok(())
    }
}

impl CallScope<'_> {
    /// The run's tape as this call's capabilities use it, if calls are recorded or replayed.
    pub fn tape(&self) -> Option<tape::CallTape> {
        let event = self.event.map(|event| event.id.as_str());
        self.services
            .tape
            .as_ref()
            .map(|tape| tape::CallTape::new(tape, event))
    }
}

/// Every capability the host offers, in linking order.
pub static ALL: &[&dyn Capability] = &[
    &wasi::WasiBase,
    &filesystem::Filesystem,
    &log::Log,
    &lifecycle::Lifecycle,
    &deferral::Deferral,
    &job::Job,
    &sql::Sql,
    &kv::Kv,
    &http::Http,
    &pod_logs::PodLogs,
    &archive::Archive,
    &story::StoryCapability,
];

/// What the capabilities build for one store before it exists, or for a kept store before
/// its next call (then `wasi` is `None`: the instance keeps the WASI context it started with).
pub struct StoreSetup {
    /// The WASI context the store is built with, which capabilities add to (preopened
    /// directories, captured output).
    pub wasi: Option<WasiCtxBuilder>,
    /// The capabilities' per-call state, filled in by each one's `configure`.
    pub state: CapabilityState,
}

/// Per-store state of the capabilities, kept in the store's data.
#[derive(Default)]
pub struct CapabilityState {
    /// The call's captured stdout and stderr.
    pub stdio: wasi::Stdio,
    /// The call's log line budget.
    pub log: log::LogThrottle,
    /// Whether the call is the load-time `init`.
    pub lifecycle: lifecycle::Stage,
    /// The retry delay the call asked for, if any.
    pub deferral: deferral::Requested,
    /// What the call may write on its event's job.
    pub job: job::JobAccess,
    /// The SQL pools the call may use.
    pub sql: sql::SqlAccess,
    /// The plugin's key-value store, if granted.
    pub kv: kv::KvAccess,
    /// The call's outbound HTTP: its WASI HTTP context and the grant's policy.
    pub http: http::HttpAccess,
    /// Which pod logs the call may read, and the logs it has open.
    pub pod_logs: pod_logs::PodLogAccess,
    /// The plugin's archive prefix and its open writers, if granted.
    pub archive: archive::ArchiveAccess,
    /// The story of the call's event.
    pub story: story::EventStory,
}

impl CapabilityState {
    /// The first "unavailable" answer a capability gave during the call (a database that
    /// could not be reached). A load-time `init` that fails after one is retried later instead
    /// of being refused: the peer may come back.
    pub fn unavailable(&self) -> Option<&str> {
        self.sql.unavailable()
    }

    /// Called once when the call is over, whatever its outcome: reports what the capabilities
    /// held back during the call (captured output, dropped log lines).
    pub fn finish(&self, labels: &CallLabels) {
        self.stdio.emit(labels);
        self.log.finish(labels);
    }
}

/// A grant that a capability refused, or could not set up.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{capability}: {problem}")]
pub struct GrantError {
    /// The capability's [`Capability::name`].
    pub capability: &'static str,
    /// What is wrong.
    #[source]
    pub problem: GrantProblem,
}

/// What is wrong with a grant.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GrantProblem {
    /// The grant names something that does not exist here, or is not allowed as written.
    #[error("{0}")]
    Invalid(String),
    /// What the grant names could not be made ready on this host (a granted directory).
    #[error("{what}: {source}")]
    Io {
        /// What was being done, with the path (`cannot create /data/x`).
        what: String,
        /// The file system's error, shared so the problem can be cloned.
        #[source]
        source: Arc<std::io::Error>,
    },
}

impl From<String> for GrantProblem {
    fn from(reason: String) -> GrantProblem {
        GrantProblem::Invalid(reason)
    }
}

impl From<&str> for GrantProblem {
    fn from(reason: &str) -> GrantProblem {
        GrantProblem::Invalid(reason.to_string())
    }
}

impl GrantProblem {
    /// An I/O failure while doing `what`.
    pub fn io(what: String, source: std::io::Error) -> GrantProblem {
        GrantProblem::Io {
            what,
            source: Arc::new(source),
        }
    }
}

/// Checks and normalises a plugin version's grants with every capability.
pub fn prepare_all(grants: &mut Grants, load: &LoadScope<'_>) -> Result<(), GrantError> {
    for capability in ALL {
        capability
            .prepare(grants, load)
            .map_err(|problem| GrantError {
                capability: capability.name(),
                problem,
            })?;
    }
    Ok(())
}

/// Builds the WASI context and capability state of one store; with `new_store` false, only
/// the capability state (for a kept instance's next call).
pub fn configure_all(call: &CallScope<'_>, new_store: bool) -> Result<StoreSetup, GrantError> {
    let mut setup = StoreSetup {
        wasi: new_store.then(WasiCtxBuilder::new),
        state: CapabilityState::default(),
    };
    for capability in ALL {
        capability
            .configure(call, &mut setup)
            .map_err(|problem| GrantError {
                capability: capability.name(),
                problem,
            })?;
    }
    Ok(setup)
}
