//! What can go wrong building the runtime, loading a plugin version, and calling it.
//!
//! Load errors name the plugin because they end up in the operator's status output next to
//! other plugins' errors. Call errors do not: the caller (a lane) already knows whose call it
//! made, and the retry decision is all it needs from the error beyond its text.

use std::time::Duration;

use jobrelay_capabilities::GrantError;

use crate::compile::CompileError;
use thiserror::Error;

/// The runtime could not be built: invalid settings or an engine wasmtime refuses.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// A setting out of its range (`runtime.max_instances` of 0, an epoch tick past 1 s); the
    /// text names the field.
    #[error("invalid runtime settings: {0}")]
    Settings(String),
    /// wasmtime refused the engine's configuration, the host capabilities could not be linked,
    /// or the epoch ticker's thread did not start; with the chain of causes.
    #[error("cannot build the WebAssembly engine: {0}")]
    Engine(String),
}

/// A plugin version could not be loaded. The previous version, if any, keeps running.
#[derive(Debug, Clone, Error)]
pub enum LoadError {
    /// The bytes are not a valid component for this host (corrupt, a core module, a feature
    /// wasmtime does not support).
    #[error("plugin `{plugin}`: cannot compile the component: {source}")]
    Compile {
        /// The plugin's name.
        plugin: String,
        /// Why no component could be had.
        #[source]
        source: CompileError,
    },
    /// A valid component, but not of the `jobrelay:plugin/plugin` world: it misses an export or
    /// imports something the host does not provide.
    #[error("plugin `{plugin}`: not a jobrelay plugin component: {reason}")]
    WrongWorld {
        /// The plugin's name.
        plugin: String,
        /// The exports it lacks or the imports the host lacks.
        reason: String,
    },
    /// The plugin's `init` refused its configuration (or failed while checking it).
    #[error("plugin `{plugin}`: init refused the configuration: {reason}")]
    InitRefused {
        /// The plugin's name.
        plugin: String,
        /// `init`'s error text, as the plugin gave it.
        reason: String,
    },
    /// A config value is a secret reference (`env:NAME`, `file:/path`) that cannot be
    /// resolved: `init` did not run. Names the key and the reference, never a value.
    #[error(
        "plugin `{plugin}`: the manifest's `config.{key}` cannot be resolved: {why} — {}",
        secret_hint(why)
    )]
    Secret {
        /// The plugin's name.
        plugin: String,
        /// The key under the manifest's `config`.
        key: String,
        /// Which reference failed and why.
        why: jobrelay_contract::secret::SecretError,
    },
    /// A grant in the manifest cannot be honoured (a directory cannot be created, a guest path
    /// is invalid or used twice).
    #[error("plugin `{plugin}`: invalid grant: {source}")]
    Grant {
        /// The plugin's name.
        plugin: String,
        /// The capability that refused, and why.
        #[source]
        source: GrantError,
    },
    /// The manifest's limits are outside what the runtime allows.
    #[error("plugin `{plugin}`: invalid limits: {reason}")]
    Limits {
        /// The plugin's name.
        plugin: String,
        /// Which limit, and the range it must be in.
        reason: String,
    },
    /// `init` failed for a reason that may pass: it ran out of time, the host could not run
    /// it, a capability it used answered "unavailable" (a database down), or it asked to be
    /// tried again (an error text starting with `retry:`). The load is tried again later.
    #[error("plugin `{plugin}`: init could not finish for now: {reason}")]
    Unavailable {
        /// The plugin's name.
        plugin: String,
        /// What `init` ran into, as text.
        reason: String,
    },
}

impl LoadError {
    /// The plugin the error is about.
    pub fn plugin(&self) -> &str {
        match self {
            LoadError::Compile { plugin, .. }
            | LoadError::WrongWorld { plugin, .. }
            | LoadError::InitRefused { plugin, .. }
            | LoadError::Secret { plugin, .. }
            | LoadError::Grant { plugin, .. }
            | LoadError::Limits { plugin, .. }
            | LoadError::Unavailable { plugin, .. } => plugin,
        }
    }

    /// Whether loading the same files again may succeed (see [`LoadError::Unavailable`]).
    /// Every other error is a refusal of this version: it stays refused until its files
    /// change.
    pub fn is_passing(&self) -> bool {
        matches!(self, LoadError::Unavailable { .. })
    }

    /// Every [`kind`](LoadError::kind), for metrics that show each at 0 from the start.
    pub const KINDS: [&'static str; 7] = [
        "compile",
        "wrong_world",
        "init_refused",
        "secret",
        "grant",
        "limits",
        "unavailable",
    ];

    /// A short stable name of the variant, for metric labels.
    pub fn kind(&self) -> &'static str {
        match self {
            LoadError::Compile { .. } => "compile",
            LoadError::WrongWorld { .. } => "wrong_world",
            LoadError::InitRefused { .. } => "init_refused",
            LoadError::Secret { .. } => "secret",
            LoadError::Grant { .. } => "grant",
            LoadError::Limits { .. } => "limits",
            LoadError::Unavailable { .. } => "unavailable",
        }
    }
}

/// A limit in bytes as a manifest writes it: in MiB (`memory_mb`), or in bytes when it is not
/// a whole number of MiB (a limit set through the library, not a manifest).
fn mebibytes(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    if bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// What to do about a secret reference that cannot be resolved.
fn secret_hint(error: &jobrelay_contract::secret::SecretError) -> &'static str {
    use jobrelay_contract::secret::SecretError;
    match error {
        SecretError::MissingEnv(_) => {
            "set the variable in jobrelay's environment (in Kubernetes, a Secret mapped to an \
             env var), or write the value or a file: reference in the manifest"
        }
        SecretError::File { .. } => "mount the file (a Secret volume) or fix the path",
        SecretError::Empty(_) => "name the variable or the file after the prefix",
    }
}

/// Why one call of a plugin did not succeed. Every variant fails that call only: the plugin
/// version stays usable for the next event.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CallError {
    /// The plugin returned `handler-error::retry`.
    #[error("plugin asked to retry: {0}")]
    Retry(String),
    /// The plugin returned `handler-error::give-up`.
    #[error("plugin gave up: {0}")]
    GiveUp(String),
    /// The plugin called `deferral.defer` and returned `retry`: not a failure, the event is
    /// to be handled again after `after` without spending the retry budget.
    #[error("plugin deferred the event for {after:?}: {reason}")]
    Deferred {
        /// The wait `defer` asked for.
        after: Duration,
        /// The `retry` text the plugin returned with it.
        reason: String,
    },
    /// `init` returned an error on this instance. It accepted the same configuration when the
    /// version was loaded, so the plugin is inconsistent; retrying will not help.
    #[error("plugin init refused its configuration: {0}")]
    InitRefused(String),
    /// The call ran past its time limit and was stopped.
    #[error("plugin call exceeded its time limit of {0:?}")]
    Timeout(Duration),
    /// The plugin needed more linear memory than its limit and trapped.
    #[error("plugin exceeded its memory limit of {} (memory_mb)", mebibytes(*limit_bytes))]
    MemoryLimit {
        /// The limit the plugin ran into.
        limit_bytes: u64,
    },
    /// The plugin trapped (a panic, an invalid memory access, `unreachable`, a host function
    /// refusing an argument). The text has the trap, a few wasm frames and the tail of the
    /// plugin's stderr, where a Rust panic message lands.
    #[error("plugin trapped: {0}")]
    Trap(String),
    /// The host could not set the call up: the instance pool is full, a granted directory has
    /// disappeared. Nothing of the plugin ran, or it was cut off by the host.
    #[error("host could not run the plugin: {0}")]
    Host(String),
}

impl CallError {
    /// The kinds of a failed call: every [`CallError::kind`] but `deferred`, which is a plugin
    /// holding its event back on purpose (what the failure counters count).
    pub const FAILURES: [&'static str; 7] = [
        "retry",
        "give_up",
        "init_refused",
        "timeout",
        "memory_limit",
        "trap",
        "host",
    ];

    /// Every [`CallError::kind`], for what reads them back (a test suite's expectations): the
    /// failures, then `deferred`.
    pub const KINDS: [&'static str; 8] = {
        let mut kinds = ["deferred"; 8];
        let mut i = 0;
        while i < Self::FAILURES.len() {
            kinds[i] = Self::FAILURES[i];
            i += 1;
        }
        kinds
    };

    /// Whether delivering the same event again may succeed. Traps count as retryable: a trap
    /// is often a transient condition inside the plugin (a peer's odd answer), and the retry
    /// budget and dead-letter list bound the cost when it is not.
    pub fn is_retryable(&self) -> bool {
        match self {
            CallError::Retry(_)
            | CallError::Deferred { .. }
            | CallError::Trap(_)
            | CallError::Timeout(_)
            | CallError::MemoryLimit { .. }
            | CallError::Host(_) => true,
            CallError::GiveUp(_) | CallError::InitRefused(_) => false,
        }
    }

    /// A short stable name of the variant, for metric labels.
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::Retry(_) => "retry",
            CallError::Deferred { .. } => "deferred",
            CallError::GiveUp(_) => "give_up",
            CallError::InitRefused(_) => "init_refused",
            CallError::Timeout(_) => "timeout",
            CallError::MemoryLimit { .. } => "memory_limit",
            CallError::Trap(_) => "trap",
            CallError::Host(_) => "host",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_split() {
        assert!(CallError::Retry("x".into()).is_retryable());
        assert!(CallError::Trap("x".into()).is_retryable());
        assert!(CallError::Timeout(Duration::from_secs(1)).is_retryable());
        assert!(CallError::MemoryLimit { limit_bytes: 1 }.is_retryable());
        assert!(!CallError::GiveUp("x".into()).is_retryable());
        assert!(!CallError::InitRefused("x".into()).is_retryable());
    }

    #[test]
    fn every_kind_is_listed() {
        let all = [
            CallError::Retry(String::new()),
            CallError::GiveUp(String::new()),
            CallError::InitRefused(String::new()),
            CallError::Timeout(Duration::ZERO),
            CallError::MemoryLimit { limit_bytes: 0 },
            CallError::Trap(String::new()),
            CallError::Host(String::new()),
            CallError::Deferred {
                after: Duration::ZERO,
                reason: String::new(),
            },
        ];
        let kinds: Vec<&str> = all.iter().map(CallError::kind).collect();
        assert_eq!(kinds, CallError::KINDS);
    }

    /// The limit is said in the unit the manifest's `memory_mb` is written in.
    #[test]
    fn a_memory_limit_is_said_in_mib() {
        let e = CallError::MemoryLimit {
            limit_bytes: 64 << 20,
        };
        assert_eq!(
            e.to_string(),
            "plugin exceeded its memory limit of 64 MiB (memory_mb)"
        );
        let odd = CallError::MemoryLimit { limit_bytes: 1000 };
        assert!(odd.to_string().contains("1000 bytes"), "{odd}");
    }

    #[test]
    fn load_errors_name_the_plugin() {
        let e = LoadError::WrongWorld {
            plugin: "mysql-sync".into(),
            reason: "missing export `handle`".into(),
        };
        assert!(e.to_string().contains("mysql-sync"));
        assert_eq!(e.plugin(), "mysql-sync");
    }
}
