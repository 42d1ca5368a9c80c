//! `jobrelay plugin run WASM --event FILE [--manifest FILE]`: one call of a plugin, without a
//! cluster, for plugin authors.
//!
//! The plugin is loaded exactly as the daemon loads it (same runtime, same checks, same
//! capabilities), with the limits, config and grants of the manifest when one is given and the
//! daemon's default limits otherwise, and then handles the one event.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::config::main_file::PluginDefaults;
use crate::config::manifest::PluginManifest;
use jobrelay_capabilities::Services;
use jobrelay_capabilities::archive::ArchiveLocation;
use jobrelay_capabilities::archive::ArchiveStore;
use jobrelay_capabilities::services::EMBEDDED_DB_DIR;
use jobrelay_capabilities::sql::Databases;
use jobrelay_capabilities::sql::SqlSettings;
use jobrelay_contract::event::JobEvent;
use jobrelay_runtime::{CallError, PluginSpec, Runtime, RuntimeSettings};
use jobrelay_state::{PluginKv, SqliteStore};

/// Arguments of `plugin run`.
#[derive(Debug, Clone)]
pub struct PluginRunArgs {
    /// The component to run.
    pub wasm: PathBuf,
    /// A `JobEvent` as JSON.
    pub event: PathBuf,
    /// A plugin manifest for config, limits and grants. Its `wasm:` is ignored (the command
    /// line names the component); relative grant paths are resolved against its folder.
    pub manifest: Option<PathBuf>,
    /// Folder for the `embedded` SQL connection, key-value entries and the archive; `None`: a
    /// temporary folder.
    pub state_dir: Option<PathBuf>,
}

/// What the call did.
#[derive(Debug, Clone)]
pub struct PluginRunOutcome {
    pub plugin: String,
    pub event_id: String,
    /// Ok, or why the call failed.
    pub result: Result<(), CallError>,
    /// Time to load the version (compile, link, the load-time `init`).
    pub load_elapsed: Duration,
    /// Time of the call itself (fresh instance, `init`, `handle`).
    pub elapsed: Duration,
}

impl PluginRunOutcome {
    /// `ok`, `retry`, `give_up`, `trap`, `timeout`, `memory_limit`, `init_refused` or `host`.
    pub fn status(&self) -> &'static str {
        match &self.result {
            Ok(()) => "ok",
            Err(e) => e.kind(),
        }
    }

    /// The plugin's or the host's message, if the call failed.
    pub fn message(&self) -> Option<String> {
        self.result.as_ref().err().map(|e| e.to_string())
    }

    pub fn is_ok(&self) -> bool {
        self.result.is_ok()
    }
}

impl fmt::Display for PluginRunOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: plugin {} on event {} in {} ms (load {} ms)",
            self.status(),
            self.plugin,
            self.event_id,
            self.elapsed.as_millis(),
            self.load_elapsed.as_millis()
        )?;
        if let Some(message) = self.message() {
            write!(f, "\n  {message}")?;
        }
        Ok(())
    }
}

/// Loads the plugin and calls it once with the event. Errors: unreadable or invalid files, and
/// a plugin that does not load. A plugin that loads but fails the call is an `Ok` outcome
/// whose `result` says why.
pub async fn plugin_run(args: &PluginRunArgs) -> anyhow::Result<PluginRunOutcome> {
    let event = read_event(&args.event)?;
    let wasm: Arc<[u8]> = tokio::fs::read(&args.wasm)
        .await
        .with_context(|| format!("cannot read the component {}", args.wasm.display()))?
        .into();

    let defaults = PluginDefaults::default();
    let (name, manifest) = match &args.manifest {
        Some(path) => (stem(path), Some(read_manifest(path)?)),
        None => (stem(&args.wasm), None),
    };
    let spec = match manifest {
        Some(manifest) => PluginSpec {
            name: name.clone(),
            version: "local".into(),
            wasm,
            wasm_sha256: String::new(),
            timeout: Duration::from_millis(manifest.timeout_ms.unwrap_or(defaults.timeout_ms)),
            memory_bytes: manifest
                .memory_mb
                .unwrap_or(defaults.memory_mb)
                .saturating_mul(1 << 20),
            instance_reuse: manifest.instance_reuse.unwrap_or(1),
            config: manifest.config,
            grants: manifest.grants,
        },
        None => PluginSpec {
            name: name.clone(),
            version: "local".into(),
            wasm,
            wasm_sha256: String::new(),
            timeout: Duration::from_millis(defaults.timeout_ms),
            memory_bytes: defaults.memory_mb.saturating_mul(1 << 20),
            instance_reuse: 1,
            config: Default::default(),
            grants: Default::default(),
        },
    };

    // The same capabilities as the daemon, on local files: the `embedded` SQL connection, a
    // key-value store and a local archive. No cluster, so pod logs are refused.
    let scratch = match &args.state_dir {
        Some(_) => None,
        None => Some(tempfile::tempdir().context("cannot create a temporary state folder")?),
    };
    let state_dir = match (&args.state_dir, &scratch) {
        (Some(dir), _) => dir.clone(),
        (None, Some(tmp)) => tmp.path().to_path_buf(),
        (None, None) => bail!("no state folder"),
    };
    let services = scratch_services(&state_dir).await?;
    let runtime = Runtime::with_services(RuntimeSettings::default(), services)?;
    let started = Instant::now();
    let version = runtime.load(spec).await?;
    let load_elapsed = started.elapsed();

    let started = Instant::now();
    let result = version.handle(&event).await;
    Ok(PluginRunOutcome {
        plugin: name,
        event_id: event.id.clone(),
        result,
        load_elapsed,
        elapsed: started.elapsed(),
    })
}

async fn scratch_services(dir: &Path) -> anyhow::Result<Services> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the state folder {}", dir.display()))?;
    let kv: Arc<dyn PluginKv> = Arc::new(
        SqliteStore::open(&dir.join("state.db"))
            .await
            .context("cannot open the run's state file")?,
    );
    let sql = Databases::open(&SqlSettings::default(), &dir.join(EMBEDDED_DB_DIR))?;
    let archive = ArchiveStore::open(&ArchiveLocation::Local(dir.join("archive")))?;
    Ok(Services {
        sql,
        kv: Some(kv),
        archive: Some(archive),
        ..Services::default()
    })
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plugin".to_string())
}

fn read_event(path: &Path) -> anyhow::Result<JobEvent> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the event file {}", path.display()))?;
    let mut deserializer = serde_json::Deserializer::from_str(&text);
    let event: JobEvent = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let at = e.path().to_string();
        let inner = e.into_inner();
        if at == "." {
            anyhow::anyhow!("{}: not a job event: {inner}", path.display())
        } else {
            anyhow::anyhow!("{}: not a job event: at `{at}`: {inner}", path.display())
        }
    })?;
    deserializer
        .end()
        .with_context(|| format!("{}: trailing data after the event", path.display()))?;
    Ok(event)
}

/// Reads a manifest; its `wasm:` may be absent (the command line names the component), and
/// relative grant paths are made absolute against the manifest's folder.
fn read_manifest(path: &Path) -> anyhow::Result<PluginManifest> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the manifest {}", path.display()))?;
    let mut value: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&text).with_context(|| format!("{}: not YAML", path.display()))?;
    match &mut value {
        serde_yaml_ng::Value::Mapping(map) => {
            let key = serde_yaml_ng::Value::String("wasm".into());
            if !map.contains_key(&key) {
                map.insert(key, serde_yaml_ng::Value::String(String::new()));
            }
        }
        serde_yaml_ng::Value::Null => bail!("{}: the manifest is empty", path.display()),
        _ => bail!("{}: a manifest is a mapping", path.display()),
    }
    let mut manifest: PluginManifest = serde_path_to_error::deserialize(value).map_err(|e| {
        let at = e.path().to_string();
        anyhow::anyhow!(
            "{}: invalid manifest at `{at}`: {}",
            path.display(),
            e.into_inner()
        )
    })?;
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let folder = std::path::absolute(&folder)
        .with_context(|| format!("cannot resolve the folder of {}", path.display()))?;
    for grant in &mut manifest.grants.filesystem {
        if grant.host.is_relative() {
            grant.host = folder.join(&grant.host);
        }
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_event_names_file_and_path() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = tmp.path().join("event.json");
        std::fs::write(
            &file,
            r#"{"id":"c/u/1","cluster":"c","api_version":"batch/v1","kind":"Job",
               "namespace":"ns","name":"n","uid":"u","resource_version":"1",
               "phase":"runing","transition_time":"2026-01-01T00:00:00Z"}"#,
        )
        .expect("write");
        let err = read_event(&file).expect_err("bad phase").to_string();
        assert!(err.contains("event.json"), "{err}");
        assert!(err.contains("phase"), "{err}");
    }

    #[test]
    fn manifest_without_wasm_and_with_relative_grant() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = tmp.path().join("event-log.yaml");
        std::fs::write(
            &file,
            "timeout_ms: 100\nconfig:\n  file: x.jsonl\ngrants:\n  filesystem:\n    - host: out\n      guest: /data\n      writable: true\n",
        )
        .expect("write");
        let manifest = read_manifest(&file).expect("parses");
        assert_eq!(manifest.timeout_ms, Some(100));
        assert_eq!(manifest.grants.filesystem[0].host, tmp.path().join("out"));
        std::fs::write(&file, "timeout_ms: soon\n").expect("write");
        let err = read_manifest(&file).expect_err("bad").to_string();
        assert!(err.contains("timeout_ms"), "{err}");
    }
}
