//! `jobrelay plugin run WASM --event SOURCE [--manifest FILE] [--record FILE | --replay FILE]
//! [--json] [--all]`: calls of a plugin, without a cluster, for plugin authors.
//!
//! The plugin is loaded exactly as the daemon loads it (same runtime, same checks, same
//! capabilities), with the limits, config and grants of the manifest — the one given, else
//! `NAME.yaml` beside the component if there is one — and the daemon's default limits
//! otherwise, and then handles each event of SOURCE in order: a file holding one event or JSON
//! lines, a folder of `.json`/`.jsonl` files (in name order), or `-` for standard input. An
//! event the daemon would not deliver to it — by the manifest's `kinds`, `filter` and
//! `delivery`, or a fleet event by its `fleet_events` ([`super::selection`]) — is skipped,
//! and said why, unless `--all`. SOURCE may hold fleet events too, in the form plugins get them
//! (`plugin sample-event --fleet`): the run calls the plugin's `handle-fleet` with each, as the
//! daemon does ([`super::events`]).
//!
//! Every capability call of the run goes on a tape (`capabilities::tape`): it is what `--json`
//! reports per call, what `--record` writes, and, with `--replay`, where the answers come
//! from instead of any service.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

pub(crate) use super::events::read_events;
use super::selection::{Selection, Skip};
use crate::clusters::supervisor::build_client;
use crate::config::main_file::PluginDefaults;
use crate::config::manifest::PluginManifest;
use jobrelay_capabilities::Services;
use jobrelay_capabilities::archive::ArchiveLocation;
use jobrelay_capabilities::archive::ArchiveStore;
use jobrelay_capabilities::pod_logs::ClusterDirectory;
use jobrelay_capabilities::services::EMBEDDED_DB_DIR;
use jobrelay_capabilities::sql::{Databases, SqlConnection, SqlSettings};
use jobrelay_capabilities::tape::{self, Divergence, Entry, Tape, TapeFile};
use jobrelay_contract::event::JobEvent;
use jobrelay_runtime::{CallError, PluginSpec, Runtime, RuntimeSettings};
use jobrelay_state::{PluginKv, SqliteStore};
use jobrelay_watch::kinds::JobKind;

/// Arguments of `plugin run`.
#[derive(Debug, Clone, clap::Args)]
pub struct PluginRunArgs {
    /// The plugin component (.wasm).
    pub wasm: PathBuf,
    /// The events (job events in the JSON format of `JobEvent`, fleet events in that of
    /// `FleetEvent`, as `plugin sample-event` prints both): a file with one event or several
    /// as JSON lines, a folder of .json/.jsonl files (in name order), or - for standard input.
    #[arg(long)]
    pub event: PathBuf,
    /// A plugin manifest for its config, limits and grants. Default: NAME.yaml beside the
    /// component NAME.wasm, if it exists.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// Where the run keeps what the plugin writes through its grants: the `embedded` SQL
    /// connection (`embedded/<plugin>.db`), its key-value entries (`state.db`) and the archive
    /// (`archive/`). Default: a temporary folder removed afterwards.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// A SQL connection the manifest may grant, as NAME=URL (mysql://… or sqlite://…);
    /// repeatable. `embedded` always exists.
    #[arg(long = "sql", value_name = "NAME=URL", value_parser = parse_sql_arg)]
    pub sql: Vec<(String, String)>,
    /// A kubeconfig whose cluster answers `pod-logs` calls, whatever cluster the events name.
    /// Without it, pod logs are refused (there is no cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Write every capability call of the run and its answer to FILE (JSON lines), for
    /// `--replay` and `plugin test`.
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    pub record: Option<PathBuf>,
    /// Answer every capability call from FILE (written by `--record`) instead of any service;
    /// a call that differs from the tape, or a recorded call not made, fails the run.
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// Call the plugin with every event, also those the daemon would not deliver to it by the
    /// manifest's kinds, filter and delivery (which are skipped otherwise, saying why).
    #[arg(long)]
    pub all: bool,
}

impl PluginRunArgs {
    /// A run of `wasm` on the events of `event`, with nothing else given.
    pub fn new(wasm: PathBuf, event: PathBuf) -> PluginRunArgs {
        PluginRunArgs {
            wasm,
            event,
            manifest: None,
            state_dir: None,
            sql: Vec::new(),
            kubeconfig: None,
            record: None,
            replay: None,
            all: false,
        }
    }
}

/// `NAME=URL`.
pub(super) fn parse_sql_arg(text: &str) -> anyhow::Result<(String, String)> {
    match text.split_once('=') {
        Some((name, url)) if !name.is_empty() && !url.is_empty() => {
            Ok((name.to_string(), url.to_string()))
        }
        _ => bail!("expected NAME=URL, got `{text}`"),
    }
}

/// What one call did, or why the plugin was not called with the event.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    pub event_id: String,
    /// Ok, or why the call failed (Ok for an event skipped).
    pub result: Result<(), CallError>,
    /// Why the daemon would not deliver the event (the plugin was not called with it).
    pub skipped: Option<Skip>,
    /// Time of the call itself (fresh instance, `init`, `handle`).
    pub elapsed: Duration,
    /// The capability calls the plugin made during this call, with their answers.
    pub host_calls: Vec<Entry>,
}

impl CallOutcome {
    /// `ok`, `retry`, `give_up`, `trap`, `timeout`, `memory_limit`, `init_refused` or `host`;
    /// `skipped` when the plugin was not called.
    pub fn status(&self) -> &'static str {
        match (&self.skipped, &self.result) {
            (Some(_), _) => SKIPPED,
            (None, Ok(())) => "ok",
            (None, Err(e)) => e.kind(),
        }
    }
}

/// The status of an event the plugin was not called with.
pub const SKIPPED: &str = "skipped";

/// What the run did: the plugin loaded once, then one call per event, in order.
#[derive(Debug, Clone)]
pub struct PluginRunOutcome {
    pub plugin: String,
    /// The manifest used, if any (given, or found beside the component).
    pub manifest: Option<PathBuf>,
    /// Time to load the version (compile, link, the load-time `init`).
    pub load_elapsed: Duration,
    /// Capability calls of the load-time `init`.
    pub load_calls: Vec<Entry>,
    pub calls: Vec<CallOutcome>,
    /// With `--replay`: where the run went differently from the tape.
    pub divergences: Vec<Divergence>,
    /// The instant the plugin's wall clock read (since the Unix epoch): the tape's.
    pub clock: Duration,
}

impl PluginRunOutcome {
    /// `diverged` when a replay went differently from its tape, else the first failed
    /// call's status, or `ok` when every call succeeded (events skipped are no failure).
    pub fn status(&self) -> &'static str {
        if !self.divergences.is_empty() {
            return "diverged";
        }
        self.calls
            .iter()
            .map(CallOutcome::status)
            .find(|s| *s != "ok" && *s != SKIPPED)
            .unwrap_or("ok")
    }

    /// The first failed call's message (the plugin's or the host's).
    pub fn message(&self) -> Option<String> {
        self.calls
            .iter()
            .find_map(|c| c.result.as_ref().err().map(|e| e.to_string()))
    }

    /// Whether every call succeeded and a replay matched its tape.
    pub fn is_ok(&self) -> bool {
        self.divergences.is_empty() && self.calls.iter().all(|c| c.result.is_ok())
    }

    /// How many events the plugin was not called with.
    pub fn skipped(&self) -> usize {
        self.calls.iter().filter(|c| c.skipped.is_some()).count()
    }

    /// Every capability call of the run in order: the tape `--record` writes.
    pub fn tape(&self) -> Vec<Entry> {
        let mut entries = self.load_calls.clone();
        for call in &self.calls {
            entries.extend(call.host_calls.iter().cloned());
        }
        entries
    }

    /// One JSON object per call, for `--json`: plugin, event, status, message, elapsed and
    /// load times in milliseconds, the capability calls it made (`host_calls`: call, args,
    /// answer) and `skipped` (null, or for an event the plugin was not called with, `by`: the
    /// manifest's field that decided, and `reason`); then, after a replay that diverged, one
    /// object per divergence.
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        let calls = self.calls.iter().map(|call| {
            let host_calls: Vec<serde_json::Value> = call
                .host_calls
                .iter()
                .map(|entry| {
                    serde_json::json!({
                        "call": entry.call,
                        "args": entry.args,
                        "answer": entry.answer,
                    })
                })
                .collect();
            serde_json::json!({
                "plugin": self.plugin,
                "event": call.event_id,
                "status": call.status(),
                "message": call.result.as_ref().err().map(|e| e.to_string()),
                "elapsed_ms": call.elapsed.as_secs_f64() * 1000.0,
                "load_ms": self.load_elapsed.as_secs_f64() * 1000.0,
                "host_calls": host_calls,
                "skipped": call.skipped.as_ref().map(|skip| serde_json::json!({
                    "by": skip.by,
                    "reason": skip.reason,
                })),
            })
        });
        let divergences = self.divergences.iter().map(|d| {
            serde_json::json!({
                "plugin": self.plugin,
                "status": "diverged",
                "position": d.position,
                "message": d.reason,
            })
        });
        calls.chain(divergences).collect()
    }
}

impl fmt::Display for PluginRunOutcome {
    /// One line per call (`STATUS: plugin P on event E in N ms (load M ms, K host calls)`),
    /// with the reason of a failed call indented below it, or `skipped: plugin P on event E:
    /// FIELD: REASON` for an event the plugin was not called with; then each divergence of a
    /// replay, and how many events were skipped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, call) in self.calls.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            if let Some(skip) = &call.skipped {
                write!(
                    f,
                    "{SKIPPED}: plugin {} on event {}: {skip}",
                    self.plugin, call.event_id
                )?;
                continue;
            }
            write!(
                f,
                "{}: plugin {} on event {} in {} ms (load {} ms, {} host calls)",
                call.status(),
                self.plugin,
                call.event_id,
                call.elapsed.as_millis(),
                self.load_elapsed.as_millis(),
                call.host_calls.len()
            )?;
            if let Err(e) = &call.result {
                write!(f, "\n  {e}")?;
            }
        }
        for divergence in &self.divergences {
            write!(f, "\ndiverged from the tape: {divergence}")?;
        }
        let skipped = self.skipped();
        if skipped > 0 {
            write!(
                f,
                "\n{skipped} of {} events skipped: the daemon would not deliver them to this \
                 plugin (its manifest's kinds, filter, delivery or fleet_events); --all calls \
                 it with every event",
                self.calls.len()
            )?;
        }
        Ok(())
    }
}

/// `jobrelay plugin run` as the binary runs it: prints the outcome as text, or as JSON lines
/// with `json`; exit status 1 if a call failed or a replay diverged.
pub async fn command(args: &PluginRunArgs, json: bool) -> anyhow::Result<ExitCode> {
    let outcome = plugin_run(args).await?;
    if let (None, Some(found)) = (&args.manifest, &outcome.manifest) {
        eprintln!("manifest: {} (found beside the component)", found.display());
    }
    let text = if json {
        outcome
            .json_lines()
            .iter()
            .map(|line| format!("{line}\n"))
            .collect()
    } else {
        format!("{outcome}\n")
    };
    super::print_out(&text)?;
    Ok(crate::cli::passed(outcome.is_ok()))
}

/// Loads the plugin and calls it with each event, in order; writes the tape with `--record`.
/// Errors: unreadable or invalid files (naming the file and, for several events, which one),
/// no event at all, and a plugin that does not load. A plugin that loads but fails a call is
/// an `Ok` outcome whose call says why.
pub async fn plugin_run(args: &PluginRunArgs) -> anyhow::Result<PluginRunOutcome> {
    let events = read_events(&args.event)?;
    let tape = match &args.replay {
        Some(path) => Tape::player(tape::read_file(path)?),
        None => Tape::recorder(),
    };
    let outcome = run_events(args, &events, Arc::new(tape)).await?;
    if let Some(path) = &args.record {
        tape::write_file(
            path,
            &TapeFile {
                clock: outcome.clock,
                entries: outcome.tape(),
            },
        )?;
    }
    Ok(outcome)
}

/// Loads the plugin of `args` and calls it with `events`, every capability call going through
/// `tape`.
pub async fn run_events(
    args: &PluginRunArgs,
    events: &[JobEvent],
    tape: Arc<Tape>,
) -> anyhow::Result<PluginRunOutcome> {
    let loaded = load(args, events, Some(tape.clone()), None).await?;
    let version = loaded.version.clone();
    let mut selection = if args.all {
        Selection::all()
    } else {
        loaded.selection
    };
    let load_calls = tape.made();
    let mut calls = Vec::with_capacity(events.len());
    for event in events {
        if let Some(skip) = selection.judge(event) {
            calls.push(CallOutcome {
                event_id: event.id.clone(),
                result: Ok(()),
                skipped: Some(skip),
                elapsed: Duration::ZERO,
                host_calls: Vec::new(),
            });
            continue;
        }
        let before = tape.made_count();
        let started = Instant::now();
        let result = version.handle(event).await;
        let elapsed = started.elapsed();
        calls.push(CallOutcome {
            event_id: event.id.clone(),
            result,
            skipped: None,
            elapsed,
            host_calls: tape.made_since(before),
        });
    }
    tape.finish();
    Ok(PluginRunOutcome {
        plugin: loaded.name,
        manifest: loaded.manifest,
        load_elapsed: loaded.load_elapsed,
        load_calls,
        calls,
        divergences: tape.divergences(),
        clock: tape.clock(),
    })
}

/// A plugin version loaded as `plugin run` loads it, with the scratch state it uses.
pub(crate) struct Loaded {
    pub name: String,
    /// The manifest used, if any.
    pub manifest: Option<PathBuf>,
    pub version: Arc<jobrelay_runtime::PluginVersion>,
    pub load_elapsed: Duration,
    /// The events the daemon would deliver to it, by the manifest.
    pub selection: Selection,
    /// The temporary state folder (without `--state-dir`), removed when dropped.
    _scratch: Option<tempfile::TempDir>,
}

/// Loads the plugin of `args` with the capabilities `plugin run` gives it (`events` name the
/// clusters `--kubeconfig` stands for), every capability call through `tape` if given;
/// `instance_reuse`, if given, replaces the manifest's.
pub(crate) async fn load(
    args: &PluginRunArgs,
    events: &[JobEvent],
    tape: Option<Arc<Tape>>,
    instance_reuse: Option<u32>,
) -> anyhow::Result<Loaded> {
    let wasm: Arc<[u8]> = tokio::fs::read(&args.wasm)
        .await
        .with_context(|| format!("cannot read the component {}", args.wasm.display()))?
        .into();

    let defaults = PluginDefaults::default();
    let manifest_path = args.manifest.clone().or_else(|| beside(&args.wasm));
    let (name, manifest) = match &manifest_path {
        // A case's own `manifest.yaml` does not name the plugin: the component does.
        Some(path) if path.file_stem().is_some_and(|s| s == "manifest") => {
            (stem(&args.wasm), Some(read_manifest(path)?))
        }
        Some(path) => (stem(path), Some(read_manifest(path)?)),
        None => (stem(&args.wasm), None),
    };
    let selection = match (&manifest, &manifest_path) {
        (Some(manifest), Some(path)) => Selection::of(manifest)
            .with_context(|| format!("{}: invalid manifest", path.display()))?,
        _ => Selection::unconfigured(),
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
    // key-value store and a local archive; the connections and the cluster given.
    let scratch = match &args.state_dir {
        Some(_) => None,
        None => Some(tempfile::tempdir().context("cannot create a temporary state folder")?),
    };
    let state_dir = match (&args.state_dir, &scratch) {
        (Some(dir), _) => dir.clone(),
        (None, Some(tmp)) => tmp.path().to_path_buf(),
        (None, None) => bail!("no state folder"),
    };
    let mut connections = args.sql.clone();
    if tape.as_ref().is_some_and(|t| t.is_replay()) {
        // The tape answers every statement: a granted connection the command line does not
        // name gets a stand-in that is never opened.
        for granted in &spec.grants.sql {
            if !connections.iter().any(|(name, _)| name == granted) {
                let file = state_dir.join(format!("replay-{granted}.db"));
                connections.push((granted.clone(), format!("sqlite://{}", file.display())));
            }
        }
    }
    let mut services = scratch_services(&state_dir, &connections).await?;
    if let Some(kubeconfig) = &args.kubeconfig {
        services.clusters = cluster_for(kubeconfig, events).await?;
    }
    services.tape = tape;
    let settings = RuntimeSettings {
        cache_dir: compile_cache_dir(),
        ..RuntimeSettings::default()
    };
    let mut spec = spec;
    if let Some(reuse) = instance_reuse {
        spec.instance_reuse = reuse;
    }
    let runtime = Runtime::with_services(settings, services)?;
    let started = Instant::now();
    let version = runtime.load(spec).await?;
    // The daemon refuses this manifest for this component (`LoadFailure::NoFleetExport`).
    if selection.asks_for_fleet_events() && !version.takes_fleet_events() {
        bail!(
            "fleet_events: the component targets {}, which has no handle-fleet; build it \
             against jobrelay:plugin@0.2.1 or later, or remove fleet_events",
            version.package()
        );
    }
    Ok(Loaded {
        name,
        manifest: manifest_path,
        version,
        load_elapsed: started.elapsed(),
        selection,
        _scratch: scratch,
    })
}

/// Where `plugin run` and `plugin test` keep compiled components, so a second run of an
/// unchanged plugin does not compile it again (a Python plugin takes seconds):
/// `$XDG_CACHE_HOME/jobrelay/compiled`, else `$HOME/.cache/jobrelay/compiled`; none without
/// either. Entries are keyed by the component's sha256 and the engine's settings.
pub(super) fn compile_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|home| PathBuf::from(home).join(".cache"))
        })?;
    Some(base.join("jobrelay").join("compiled"))
}

/// The cluster of `kubeconfig` under the name of every cluster the events name, and the
/// built-in kinds' pod labels, so `pod-logs` finds the events' jobs there.
async fn cluster_for(kubeconfig: &Path, events: &[JobEvent]) -> anyhow::Result<ClusterDirectory> {
    let config = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("cannot read the kubeconfig {}", kubeconfig.display()))?;
    let client = build_client(&config, None)
        .await
        .map_err(|e| anyhow::anyhow!("{}: cannot make a client: {e}", kubeconfig.display()))?;
    let directory = ClusterDirectory::default();
    for event in events {
        directory.set_client(&event.cluster, client.clone());
    }
    let kinds: Vec<JobKind> = JobKind::BUILTINS
        .iter()
        .filter_map(|name| JobKind::builtin(name))
        .collect();
    directory.set_kinds(&kinds);
    Ok(directory)
}

/// `NAME.yaml` (or `.yml`) beside the component `NAME.wasm`, if there is one.
fn beside(wasm: &Path) -> Option<PathBuf> {
    ["yaml", "yml"]
        .into_iter()
        .map(|ext| wasm.with_extension(ext))
        .find(|p| p.is_file())
}

async fn scratch_services(
    dir: &Path,
    connections: &[(String, String)],
) -> anyhow::Result<Services> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the state folder {}", dir.display()))?;
    let kv: Arc<dyn PluginKv> = Arc::new(
        SqliteStore::open(&dir.join("state.db"))
            .await
            .context("cannot open the run's state file")?,
    );
    let settings = SqlSettings {
        connections: connections
            .iter()
            .map(|(name, url)| (name.clone(), SqlConnection::new(url.clone())))
            .collect(),
    };
    let sql = Databases::open(&settings, &dir.join(EMBEDDED_DB_DIR))?;
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
