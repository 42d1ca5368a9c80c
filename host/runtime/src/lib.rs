//! The plugin runtime: WebAssembly components on wasmtime.
//!
//! The shape follows Kubewarden's policy server: one [`Runtime`] (one wasmtime `Engine`, one
//! `Linker` with every host capability) for the process; per plugin version a compiled
//! `Component` and an `InstancePre`, built by [`Runtime::load`]; per call a `Store` with a
//! deadline and a memory limit ([`PluginVersion::handle`]) — a fresh one by default, or a kept
//! instance's own when the manifest's `instance_reuse` lets one serve several calls.
//!
//! Loading does all the checking up front, so a version that loads is one that can take
//! events: the bytes compile, the component has the `plugin` world's exports and no imports
//! the host lacks, the grants can be honoured, the limits fit the engine, and `init` accepts
//! the configuration.

// A layer crate: every public item says what it is for, since the next layer up reads its
// API (the lint is on in each layer crate; see the root Cargo.toml's [workspace.lints]).
#![warn(missing_docs)]

mod compile;
mod engine;
mod error;
mod host_state;
mod limits;
mod linking;
mod plugin;
pub mod world;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::Engine;
use wasmtime::component::{Component, Linker};

pub use self::compile::{CacheStats, CompileError, ComponentSource};
pub use self::engine::RuntimeSettings;
pub use self::error::{CallError, LoadError, RuntimeError};
pub use self::host_state::{HostState, MAX_STORE_RESOURCES};
pub use self::plugin::PluginVersion;

use self::compile::ComponentCache;
use self::world::{WorldError, WorldPre};
use jobrelay_capabilities as capabilities;
use jobrelay_capabilities::{Grants, MAX_TIMEOUT};

/// Everything needed to load one version of one plugin.
#[derive(Debug, Clone)]
pub struct PluginSpec {
    /// The plugin's name, used in every error and log line.
    pub name: String,
    /// Caller-chosen id of this version (e.g. a short hash of wasm + manifest).
    pub version: String,
    /// The component's bytes.
    pub wasm: Arc<[u8]>,
    /// Hex sha256 of `wasm`; the cache key. Verified against the bytes; empty: computed here.
    pub wasm_sha256: String,
    /// Limit of one call (instantiation, `init` and `handle` together).
    pub timeout: Duration,
    /// Limit of the linear memory of one call, in bytes.
    pub memory_bytes: u64,
    /// Calls one instance may serve (1: a fresh instance per call). See
    /// `PluginManifest::instance_reuse`.
    pub instance_reuse: u32,
    /// Handed to the plugin's `init`.
    pub config: BTreeMap<String, String>,
    /// What the plugin may reach. Host paths must be absolute.
    pub grants: Grants,
}

/// What [`Runtime::inspect`] found in a component.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// Of the component's bytes, hex.
    pub sha256: String,
    /// The component's size in bytes.
    pub bytes: usize,
    /// The names it imports (interfaces such as `wasi:http/outgoing-handler@0.2.x`), sorted.
    pub imports: Vec<String>,
    /// The names it exports, sorted.
    pub exports: Vec<String>,
    /// The world package it targets (`jobrelay:plugin@0.2.2`), or why it is no plugin of a
    /// world this host serves.
    pub world: Result<&'static str, world::WorldError>,
}

/// The plugin runtime. Cheap to clone; clones share the engine, linker and caches.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    services: Arc<capabilities::Services>,
    engine: Engine,
    linker: Linker<HostState>,
    cache: Arc<ComponentCache>,
    settings: RuntimeSettings,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Builds the engine (with its epoch ticker), the linker and the caches, with no host
    /// services: grants of SQL, key-value, pod logs and archive are refused at load.
    pub fn new(settings: RuntimeSettings) -> Result<Runtime, RuntimeError> {
        Runtime::with_services(settings, capabilities::Services::default())
    }

    /// Like [`Runtime::new`], with the services the capabilities reach (pools, stores,
    /// cluster clients).
    pub fn with_services(
        settings: RuntimeSettings,
        services: capabilities::Services,
    ) -> Result<Runtime, RuntimeError> {
        let engine = engine::build_engine(&settings)?;
        let mut linker = Linker::new(&engine);
        linking::link(&mut linker)
            .map_err(|e| RuntimeError::Engine(format!("cannot link host capabilities: {e:#}")))?;
        engine::start_epoch_ticker(&engine, settings.epoch_tick)?;
        let cache = Arc::new(ComponentCache::new(
            engine.clone(),
            settings.cache_dir.clone(),
            settings.cache_max_mb.saturating_mul(1 << 20),
        ));
        Ok(Runtime {
            inner: Arc::new(Inner {
                services: Arc::new(services),
                engine,
                linker,
                cache,
                settings,
            }),
        })
    }

    /// The settings the runtime was built with.
    pub fn settings(&self) -> &RuntimeSettings {
        &self.inner.settings
    }

    /// The services the capabilities reach.
    pub fn services(&self) -> &capabilities::Services {
        &self.inner.services
    }

    /// Counters of the compiled-component caches.
    pub fn cache_stats(&self) -> CacheStats {
        self.inner.cache.stats()
    }

    /// The on-disk cache file a component with this sha256 (hex) is stored in, when the disk
    /// cache is on. The file exists once a load compiled that component.
    pub fn cache_file(&self, wasm_sha256: &str) -> Option<std::path::PathBuf> {
        self.inner.cache.disk_path(wasm_sha256)
    }

    /// Loads one plugin version: checks limits and grants, compiles (or finds the compiled
    /// code in a cache), checks the component's world, and runs `init(config)` once on a
    /// throwaway instance. The result takes events with [`PluginVersion::handle`].
    pub async fn load(&self, spec: PluginSpec) -> Result<Arc<PluginVersion>, LoadError> {
        let loaded = self.load_without_init(spec).await?;
        if let Err(failure) = loaded.check_init().await {
            return Err(init_failure(loaded.name.to_string(), failure));
        }
        Ok(loaded)
    }

    /// Everything [`load`](Runtime::load) does but run `init`: no plugin code runs, so nothing
    /// the plugin would set up through its grants (tables, files) is touched. Granted host
    /// directories that do not exist are still created, as checking the grants does. For
    /// `jobrelay check --no-init`; a version loaded this way has not accepted its config.
    pub async fn load_without_init(
        &self,
        spec: PluginSpec,
    ) -> Result<Arc<PluginVersion>, LoadError> {
        let PluginSpec {
            name,
            version,
            wasm,
            wasm_sha256,
            timeout,
            memory_bytes,
            instance_reuse,
            config,
            grants,
        } = spec;
        self.check_limits(&name, timeout, memory_bytes)?;

        let grants = prepare_grants(&name, grants, self.inner.services.clone()).await?;
        let config = resolve_secrets(&name, config)?;

        let actual_sha256 = hash(&wasm).await.map_err(|source| LoadError::Compile {
            plugin: name.clone(),
            source,
        })?;
        if !wasm_sha256.is_empty() && !wasm_sha256.eq_ignore_ascii_case(&actual_sha256) {
            return Err(LoadError::Compile {
                plugin: name,
                source: CompileError::Sha256Mismatch {
                    expected: wasm_sha256,
                    actual: actual_sha256,
                },
            });
        }

        let (component, source) =
            self.inner
                .cache
                .get(&actual_sha256, wasm)
                .await
                .map_err(|source| LoadError::Compile {
                    plugin: name.clone(),
                    source,
                })?;
        let pre = self
            .link(&component)
            .map_err(|reason| LoadError::WrongWorld {
                plugin: name.clone(),
                reason: reason.to_string(),
            })?;

        let loaded = Arc::new(PluginVersion {
            name: Arc::from(name.as_str()),
            version: Arc::from(version.as_str()),
            wasm_sha256: actual_sha256,
            pre,
            timeout,
            memory_bytes,
            instance_reuse: instance_reuse.max(1),
            idle: parking_lot::Mutex::new(Vec::new()),
            memory_high_water: std::sync::atomic::AtomicU64::new(0),
            config: config.into_iter().collect(),
            grants,
            services: self.inner.services.clone(),
            source,
            epoch_tick: self.inner.settings.epoch_tick,
        });
        tracing::debug!(
            plugin = %loaded.name,
            version = %loaded.version,
            sha256 = %loaded.wasm_sha256,
            source = loaded.source.as_str(),
            "plugin version loaded"
        );
        Ok(loaded)
    }

    fn check_limits(
        &self,
        name: &str,
        timeout: Duration,
        memory_bytes: u64,
    ) -> Result<(), LoadError> {
        let refuse = |reason: String| {
            Err(LoadError::Limits {
                plugin: name.to_string(),
                reason,
            })
        };
        if timeout.is_zero() || timeout > MAX_TIMEOUT {
            return refuse(format!(
                "the time limit must be above zero and at most {} s, got {timeout:?}",
                MAX_TIMEOUT.as_secs()
            ));
        }
        let ceiling = self.inner.settings.max_memory_bytes();
        if memory_bytes == 0 {
            return refuse("the memory limit must be above zero".into());
        }
        if memory_bytes > ceiling {
            return refuse(format!(
                "the memory limit of {} MiB is above the runtime's ceiling of {} MiB \
                 (runtime.max_memory_mb)",
                memory_bytes.div_ceil(1 << 20),
                self.inner.settings.max_memory_mb
            ));
        }
        Ok(())
    }

    /// What a component is, without loading it as a plugin (no grants, no `init`): its size
    /// and sha256, what it imports and exports, and the plugin world it targets — or why it
    /// is not a plugin this host can run. Compiles it (or takes it from the cache).
    pub async fn inspect(&self, wasm: Arc<[u8]>) -> Result<Inspection, CompileError> {
        let sha256 = hash(&wasm).await?;
        let bytes = wasm.len();
        let (component, _) = self.inner.cache.get(&sha256, wasm).await?;
        let ty = component.component_type();
        let names = |items: &mut dyn Iterator<Item = String>| {
            let mut names: Vec<String> = items.collect();
            names.sort();
            names
        };
        let imports = names(&mut ty.imports(&self.inner.engine).map(|(n, _)| n.to_string()));
        let exports = names(&mut ty.exports(&self.inner.engine).map(|(n, _)| n.to_string()));
        let world = self.link(&component).map(|pre| pre.package());
        Ok(Inspection {
            sha256,
            bytes,
            imports,
            exports,
            world,
        })
    }

    /// Checks the component against the `plugin` world and pre-instantiates it.
    fn link(&self, component: &Component) -> Result<WorldPre, WorldError> {
        let ty = component.component_type();
        let exports: Vec<String> = ty
            .exports(&self.inner.engine)
            .map(|(name, _)| name.to_string())
            .collect();
        let missing: Vec<&str> = ["init", "handle"]
            .into_iter()
            .filter(|wanted| !exports.iter().any(|e| e == wanted))
            .collect();
        if !missing.is_empty() {
            let found = if exports.is_empty() {
                "nothing".to_string()
            } else {
                exports
                    .iter()
                    .map(|e| format!("`{e}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let missing = missing
                .iter()
                .map(|m| format!("`{m}`"))
                .collect::<Vec<_>>()
                .join(" and ");
            return Err(WorldError::MissingExports { missing, found });
        }
        let pre = self
            .inner
            .linker
            .instantiate_pre(component)
            .map_err(|e| WorldError::Imports(format!("{e:#}")))?;
        WorldPre::new(pre)
    }
}

/// Runs the capabilities' load-time checks (they touch the filesystem, so off the async
/// workers).
async fn prepare_grants(
    name: &str,
    mut grants: Grants,
    services: Arc<capabilities::Services>,
) -> Result<Grants, LoadError> {
    let plugin = name.to_string();
    let result = tokio::task::spawn_blocking(move || {
        let load = capabilities::LoadScope {
            plugin: &plugin,
            services: &services,
        };
        capabilities::prepare_all(&mut grants, &load).map(|()| grants)
    })
    .await;
    match result {
        Ok(Ok(grants)) => Ok(grants),
        Ok(Err(source)) => Err(LoadError::Grant {
            plugin: name.to_string(),
            source,
        }),
        Err(e) => Err(LoadError::Grant {
            plugin: name.to_string(),
            source: capabilities::GrantError {
                capability: "grants",
                problem: format!("the check task failed: {e}").into(),
            },
        }),
    }
}

/// The sha256 of a component (hex), on the blocking pool: megabytes of a large component are
/// not hashed on an async worker.
async fn hash(wasm: &Arc<[u8]>) -> Result<String, CompileError> {
    let hashed = Arc::clone(wasm);
    tokio::task::spawn_blocking(move || compile::sha256_hex(&hashed))
        .await
        .map_err(|e| CompileError::task("hashing", e))
}

/// Replaces `env:NAME` and `file:/path` values of a plugin's config by what they point at.
/// The error names the key and the reference, never a resolved value.
fn resolve_secrets(
    name: &str,
    config: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, LoadError> {
    config
        .into_iter()
        .map(
            |(key, value)| match jobrelay_contract::secret::resolve(&value) {
                Ok(resolved) => Ok((key, resolved)),
                Err(why) => Err(LoadError::Secret {
                    plugin: name.to_string(),
                    key,
                    why,
                }),
            },
        )
        .collect()
}

/// Sorts a failed load-time `init` into a refusal of the version or a failure that may pass.
fn init_failure(plugin: String, failure: plugin::InitFailure) -> LoadError {
    let plugin::InitFailure { error, unavailable } = failure;
    let passing = match &error {
        CallError::Timeout(_) | CallError::Host(_) => true,
        CallError::InitRefused(reason) => reason
            .trim_start()
            .get(..6)
            .is_some_and(|p| p.eq_ignore_ascii_case("retry:")),
        _ => false,
    } || unavailable.is_some();
    let reason = match (&error, unavailable) {
        (CallError::InitRefused(reason), None) => reason.clone(),
        (_, None) => format!("init failed: {error}"),
        (_, Some(answer)) => {
            format!("init failed: {error} (after a capability answered: {answer})")
        }
    };
    if passing {
        LoadError::Unavailable { plugin, reason }
    } else {
        LoadError::InitRefused { plugin, reason }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::plugin::InitFailure;
    use super::*;

    fn sort(error: CallError, unavailable: Option<&str>) -> LoadError {
        init_failure(
            "p".into(),
            InitFailure {
                error,
                unavailable: unavailable.map(str::to_string),
            },
        )
    }

    #[test]
    fn passing_init_failures_are_retried_and_refusals_are_not() {
        let refused = |reason: &str| CallError::InitRefused(reason.into());
        assert!(sort(CallError::Timeout(Duration::from_secs(1)), None).is_passing());
        assert!(sort(CallError::Host("pool full".into()), None).is_passing());
        assert!(sort(refused("retry: the database is starting"), None).is_passing());
        assert!(sort(refused("  RETRY: later"), None).is_passing());
        assert!(sort(refused("cannot create table"), Some("sql unavailable")).is_passing());
        assert!(sort(CallError::Trap("panic".into()), Some("sql unavailable")).is_passing());

        assert!(!sort(refused("unknown key `fiel`"), None).is_passing());
        assert!(!sort(refused("retrying is pointless"), None).is_passing());
        assert!(!sort(CallError::Trap("panic".into()), None).is_passing());
        assert!(!sort(CallError::MemoryLimit { limit_bytes: 1 }, None).is_passing());
        let text = sort(refused("no tables"), Some("database: connection refused")).to_string();
        assert!(text.contains("connection refused"), "{text}");
    }
}
