//! `jobrelay plugin dev DIR [--once] [--manifest FILE] [--all]`: the edit → build → run loop
//! of a plugin project (as `plugin new` makes it) in one terminal. A round runs the project's
//! `build.sh`, then the plugin on its sample events (`events/`, as `plugin run`) and its cases
//! (`tests/cases/`, as `plugin test`), and prints what each said; the next round starts when a
//! file of the project is written (its build output — `target/`, the `.wasm`, `Cargo.lock` —
//! excepted; reading a file is no change), or the `--manifest` file outside it. `--once` runs
//! one round and exits with its status, for a script or CI.
//!
//! The manifest is the project's `NAME.yaml` (the production one) unless `--manifest` names a
//! dev manifest: a local receiver, other config, looser limits. It serves the sample events
//! and every case without its own `manifest.yaml`; as in `plugin run`, its kinds, filter and
//! delivery skip the events the daemon would not deliver, unless `--all`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, new_debouncer};

use super::run::{PluginRunArgs, plugin_run};
use super::test::{PluginTestArgs, plugin_test_events};
use crate::config::folder_watch::changes_content;

/// Arguments of `plugin dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct PluginDevArgs {
    /// The project folder (holding build.sh; its name is the plugin's).
    pub dir: PathBuf,
    /// Run one round and exit: 0 if the build, every sample event and every case passed.
    #[arg(long)]
    pub once: bool,
    /// A dev manifest for the sample events and for every case without its own
    /// manifest.yaml, instead of the project's NAME.yaml (its config, limits, grants, kinds,
    /// filter and delivery); watched like the project's files.
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// Call the plugin with every sample event and case event, also those the daemon would
    /// not deliver to it by the manifest's kinds, filter and delivery.
    #[arg(long)]
    pub all: bool,
}

/// What a round runs with, besides the project.
struct Round {
    dir: PathBuf,
    /// `--manifest`, resolved.
    manifest: Option<PathBuf>,
    all: bool,
}

/// How long the loop waits for a burst of writes (an editor's save, a `git checkout`) to end.
const SETTLE: Duration = Duration::from_millis(300);

/// `jobrelay plugin dev` as the binary runs it.
pub async fn command(args: &PluginDevArgs) -> anyhow::Result<ExitCode> {
    let dir = args
        .dir
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", args.dir.display()))?;
    if !dir.join("build.sh").is_file() {
        bail!(
            "{}: no build.sh (a project made by `jobrelay plugin new`)",
            dir.display()
        );
    }
    let manifest = match &args.manifest {
        Some(path) => Some(
            path.canonicalize()
                .with_context(|| format!("cannot resolve the manifest {}", path.display()))?,
        ),
        None => None,
    };
    let round_of = Round {
        dir: dir.clone(),
        manifest: manifest.clone(),
        all: args.all,
    };
    if args.once {
        return Ok(crate::cli::passed(round(&round_of).await));
    }
    let (changed, mut changes) = tokio::sync::mpsc::unbounded_channel();
    let watched = dir.clone();
    // A dev manifest outside the project is watched on its own.
    let outside = manifest.clone().filter(|m| !m.starts_with(&dir));
    let manifest_file = outside.clone();
    let mut debouncer = new_debouncer(SETTLE, None, move |result: DebounceEventResult| {
        let Ok(events) = result else { return };
        // A round opens and reads the project's files: only writes are changes.
        if events
            .iter()
            .filter(|event| changes_content(&event.kind))
            .flat_map(|event| &event.paths)
            .any(|path| is_source(&watched, path) || manifest_file.as_deref() == Some(path))
        {
            let _ = changed.send(());
        }
    })
    .context("cannot watch the project")?;
    debouncer
        .watch(&dir, RecursiveMode::Recursive)
        .with_context(|| format!("cannot watch {}", dir.display()))?;
    if let Some(folder) = outside.as_deref().and_then(Path::parent) {
        debouncer
            .watch(folder, RecursiveMode::NonRecursive)
            .with_context(|| format!("cannot watch {}", folder.display()))?;
    }
    loop {
        round(&round_of).await;
        println!("watching {} for changes (Ctrl-C to stop)", dir.display());
        tokio::select! {
            next = changes.recv() => if next.is_none() { break },
            _ = tokio::signal::ctrl_c() => break,
        }
        // Changes that came during the round start one more, not one each.
        while changes.try_recv().is_ok() {}
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether a change at `path` is one of the project's sources, not what a round writes.
fn is_source(dir: &Path, path: &Path) -> bool {
    let Ok(inside) = path.strip_prefix(dir) else {
        return false;
    };
    let first = inside.components().next();
    let generated = first.is_some_and(|c| {
        let c = c.as_os_str();
        c == "target" || c == "__pycache__" || c.to_string_lossy().starts_with('.')
    });
    // Cargo writes the lock file at the first build.
    !generated
        && path.extension().is_none_or(|e| e != "wasm")
        && path.file_name().is_none_or(|n| n != "Cargo.lock")
}

/// One round: build, sample events, cases; prints each. Whether all of it passed.
async fn round(round: &Round) -> bool {
    let dir = round.dir.as_path();
    println!("── building {}", dir.display());
    let built = tokio::process::Command::new(dir.join("build.sh"))
        .current_dir(dir)
        .status()
        .await;
    match built {
        Ok(status) if status.success() => {}
        Ok(status) => {
            println!("── build failed ({status})");
            return false;
        }
        Err(e) => {
            println!("── cannot run build.sh: {e}");
            return false;
        }
    }
    let Some(wasm) = component(dir) else {
        println!("── build.sh made no .wasm in {}", dir.display());
        return false;
    };
    let mut passed = true;
    let events = dir.join("events");
    // The flags the round runs `plugin run` and `plugin test` with, as they are written.
    let mut flags = String::new();
    if let Some(manifest) = &round.manifest {
        let shown = manifest.strip_prefix(dir).unwrap_or(manifest);
        flags.push_str(&format!(" --manifest {}", shown.display()));
    }
    if round.all {
        flags.push_str(" --all");
    }
    if events.is_dir() {
        println!(
            "── sample events (plugin run {} --event events/{flags})",
            file_name(&wasm)
        );
        let args = PluginRunArgs {
            manifest: round.manifest.clone(),
            all: round.all,
            ..PluginRunArgs::new(wasm.clone(), events)
        };
        match plugin_run(&args).await {
            Ok(outcome) => {
                println!("{outcome}");
                passed &= outcome.is_ok();
            }
            Err(e) => {
                println!("error: {e:#}");
                passed = false;
            }
        }
    }
    let cases = dir.join("tests/cases");
    if cases.is_dir() {
        println!("── cases (plugin test tests/cases{flags})");
        let args = PluginTestArgs {
            dir: cases,
            wasm,
            manifest: round.manifest.clone(),
            update: false,
        };
        match plugin_test_events(&args, round.all).await {
            Ok(suite) => {
                println!("{suite}");
                passed &= suite.passed();
            }
            Err(e) => {
                println!("error: {e:#}");
                passed = false;
            }
        }
    }
    println!("── {}", if passed { "all passed" } else { "FAILED" });
    passed
}

/// The component the build made: `NAME.wasm` for the folder `NAME`, else the one `.wasm` in
/// the folder.
fn component(dir: &Path) -> Option<PathBuf> {
    let named = dir.join(format!("{}.wasm", file_name(dir)));
    if named.is_file() {
        return Some(named);
    }
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
        .collect();
    match &found[..] {
        [one] => Some(one.clone()),
        _ => None,
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
