//! `jobrelay plugin new NAME [--lang rust|python] [--dir PARENT] [--sdk PATH]`: a ready plugin
//! project.
//!
//! The project builds with `./build.sh` and runs at once with `jobrelay plugin run` and
//! `jobrelay plugin test`, with no cluster:
//!
//! ```text
//! NAME/
//!   Cargo.toml, src/lib.rs     a plugin that counts its jobs' failures in its key-value store
//!   NAME.yaml                  its manifest: config, limits and the one grant it uses (kv)
//!   NAME.schema.json           the config keys it takes, which `jobrelay check` holds manifests to
//!   build.sh                   builds NAME.wasm beside the manifest
//!   events/                    sample events of several kinds and phases, as the daemon makes them
//!   tests/cases/first/         a recorded case for `plugin test` (events, tape, expected outcomes)
//!   jobrelay-guest/            the plugin SDK with its WIT, as this jobrelay carries it
//!   README.md, .gitignore
//! ```
//!
//! With `--lang python` the sources are `app.py`, `webhook.py` (a POST through `wasi:http`) and
//! `wit/`: the contract, a world that adds `wasi:http/outgoing-handler` to it, and the WIT of
//! WASI this host serves (taken by the build from the `wasmtime-wasi-http` crate it links, see
//! `build.rs`); `build.sh` runs componentize-py. The plugin counts failures as the Rust one
//! does, so the same events and case serve both, and with `webhook_url` set it also posts each
//! one.
//!
//! The SDK is written into the project (unless `--sdk` points at a copy to depend on), so the
//! project needs no jobrelay checkout and builds against exactly the contract this host serves
//! (its other dependencies come from crates.io). The crate is publishable; once published, a
//! project may depend on a registry version instead.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::json;

use super::sample_event::sample_event;
use jobrelay_contract::event::{JobEvent, Phase};

/// Arguments of `plugin new`.
#[derive(Debug, Clone, clap::Args)]
pub struct PluginNewArgs {
    /// The plugin's name: lowercase letters, digits and `-`, starting with a letter. Also the
    /// project's folder, its crate, its manifest (NAME.yaml) and component (NAME.wasm).
    pub name: String,
    /// The plugin's language.
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    pub lang: Lang,
    /// The folder to create the project in.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Rust: depend on the SDK crate in this folder (a jobrelay checkout's `plugins/guest`)
    /// instead of writing a copy into the project.
    #[arg(long)]
    pub sdk: Option<PathBuf>,
}

/// A language `plugin new` writes projects in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// A crate built for wasm32-wasip2 with the jobrelay-guest SDK.
    Rust,
    /// A module built into a component by componentize-py.
    Python,
}

/// The SDK crate's files as this binary carries them: (path in the crate, text).
const SDK_FILES: &[(&str, &str)] = &[
    (
        "README.md",
        include_str!("../../../../plugins/guest/README.md"),
    ),
    (
        "src/lib.rs",
        include_str!("../../../../plugins/guest/src/lib.rs"),
    ),
    (
        "src/archive.rs",
        include_str!("../../../../plugins/guest/src/archive.rs"),
    ),
    (
        "src/config.rs",
        include_str!("../../../../plugins/guest/src/config.rs"),
    ),
    (
        "src/http.rs",
        include_str!("../../../../plugins/guest/src/http.rs"),
    ),
    (
        "src/kv.rs",
        include_str!("../../../../plugins/guest/src/kv.rs"),
    ),
    (
        "src/log.rs",
        include_str!("../../../../plugins/guest/src/log.rs"),
    ),
    (
        "src/pod_logs.rs",
        include_str!("../../../../plugins/guest/src/pod_logs.rs"),
    ),
    (
        "src/sql.rs",
        include_str!("../../../../plugins/guest/src/sql.rs"),
    ),
    (
        "src/story.rs",
        include_str!("../../../../plugins/guest/src/story.rs"),
    ),
    ("wit/plugin.wit", include_str!("../../../../wit/plugin.wit")),
];

/// The SDK crate's manifest outside the repository's workspace: the same dependencies, with
/// their versions written out.
const SDK_CARGO_TOML: &str = include_str!("new/sdk.Cargo.toml");
const PROJECT_CARGO_TOML: &str = include_str!("new/Cargo.toml");
const PROJECT_LIB_RS: &str = include_str!("new/lib.rs");
const PROJECT_MANIFEST: &str = include_str!("new/manifest.yaml");
/// A Python project's limits, in place of the Rust template's `memory_mb: 32`.
const PYTHON_LIMITS: &str = "# The Python interpreter alone uses 20-30 MB.\nmemory_mb: 64\n\
    # One instance serves up to 64 events: a fresh one per event restores the interpreter's\n\
    # memory image (milliseconds). Keep nothing per event in globals, only what init reads.\n\
    instance_reuse: 64\n";
const PROJECT_BUILD_SH: &str = include_str!("new/build.sh");
/// The config schema, beside the component (`check` reads it there): the same for both
/// languages, whose templates take the same keys.
const PROJECT_SCHEMA: &str = include_str!("new/config.schema.json");
const PROJECT_README: &str = include_str!("new/README.md");
const PROJECT_GITIGNORE: &str = "target/\n*.wasm\n";
const PYTHON_APP: &str = include_str!("new/app.py");
const PYTHON_BUILD_SH: &str = include_str!("new/build-python.sh");
const PYTHON_README: &str = include_str!("new/README-python.md");
const PYTHON_GITIGNORE: &str = "*.wasm\n__pycache__/\nwit_world/\ncomponentize_py_*\n";
const WIT: &str = include_str!("../../../../wit/plugin.wit");
const PYTHON_WEBHOOK: &str = include_str!("new/webhook.py");
/// The Python template's config keys: the Rust one's and `webhook_url`.
const PYTHON_SCHEMA: &str = include_str!("new/config-python.schema.json");

/// The WIT of WASI, as the host build took it (see `build.rs`).
mod wasi_wit {
    include!(concat!(env!("OUT_DIR"), "/wasi_wit.rs"));
}

/// The world a Python plugin is built against: the contract's, with outbound HTTP. Its own
/// file of the contract's package, so `plugin.wit` stays the contract as the repository has it.
fn python_world() -> String {
    let package = WIT
        .lines()
        .find(|l| l.trim_start().starts_with("package "))
        .unwrap_or("package jobrelay:plugin;");
    format!(
        "{package}\n\n\
         // The world `build.sh` builds against: the plugin world of plugin.wit, with outbound HTTP\n\
         // through wasi:http (allowed per destination by the manifest's grants.http). The WIT of\n\
         // WASI in deps/ is the version this jobrelay serves ({from}). (Comments before the\n\
         // package line would be taken for the package's documentation, which plugin.wit has.)\n\
         world plugin-with-http {{\n    include plugin;\n    import wasi:http/outgoing-handler@{version};\n}}\n",
        from = wasi_wit::FROM,
        version = wasi_wit::VERSION,
    )
}

/// What `plugin new` made.
#[derive(Debug, Clone)]
pub struct NewProject {
    pub dir: PathBuf,
    /// Every file written, relative to `dir`.
    pub files: Vec<PathBuf>,
}

/// `jobrelay plugin new` as the binary runs it: creates the project and prints the next steps.
pub fn command(args: &PluginNewArgs) -> anyhow::Result<ExitCode> {
    let project = plugin_new(args)?;
    let dir = project.dir.display();
    println!("created {dir} ({} files); next:", project.files.len());
    println!("  cd {dir} && ./build.sh");
    println!("  jobrelay plugin run {}.wasm --event events/", args.name);
    println!(
        "  jobrelay plugin test tests/cases --wasm {}.wasm",
        args.name
    );
    Ok(ExitCode::SUCCESS)
}

/// Creates the project. Errors: a bad name, a folder that exists and is not empty, files that
/// cannot be written.
pub fn plugin_new(args: &PluginNewArgs) -> anyhow::Result<NewProject> {
    check_name(&args.name)?;
    let dir = args.dir.join(&args.name);
    if dir.exists()
        && std::fs::read_dir(&dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .next()
            .is_some()
    {
        bail!("{} exists and is not empty", dir.display());
    }
    let name = args.name.as_str();
    let crate_file = name.replace('-', "_");
    let sdk_dependency = match &args.sdk {
        Some(path) => {
            let path = std::path::absolute(path)
                .with_context(|| format!("cannot resolve {}", path.display()))?;
            if !path.join("Cargo.toml").is_file() {
                bail!(
                    "{}: no Cargo.toml there (expected the SDK crate)",
                    path.display()
                );
            }
            format!("{{ path = {:?} }}", path.display().to_string())
        }
        None => "{ path = \"jobrelay-guest\" }".to_string(),
    };
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{crate_file}}", &crate_file)
            .replace("{{sdk}}", &sdk_dependency)
    };

    let schema = match args.lang {
        Lang::Rust => PROJECT_SCHEMA,
        Lang::Python => PYTHON_SCHEMA,
    };
    let manifest = match args.lang {
        Lang::Rust => fill(PROJECT_MANIFEST),
        // The interpreter alone takes 20–30 MB, and a fresh instance per event restores its
        // memory image each time (milliseconds); the template keeps nothing per event, so its
        // instances may serve many (docs/python-plugins.md, "What it costs, and the advice").
        Lang::Python => fill(PROJECT_MANIFEST).replace("memory_mb: 32\n", PYTHON_LIMITS),
    };
    let mut files: Vec<(PathBuf, String)> = vec![
        (format!("{name}.yaml").into(), manifest),
        (format!("{name}.schema.json").into(), fill(schema)),
    ];
    match args.lang {
        Lang::Rust => {
            files.extend([
                ("Cargo.toml".into(), fill(PROJECT_CARGO_TOML)),
                ("src/lib.rs".into(), fill(PROJECT_LIB_RS)),
                ("build.sh".into(), fill(PROJECT_BUILD_SH)),
                ("README.md".into(), fill(PROJECT_README)),
                (".gitignore".into(), PROJECT_GITIGNORE.to_string()),
            ]);
            if args.sdk.is_none() {
                files.push((
                    "jobrelay-guest/Cargo.toml".into(),
                    SDK_CARGO_TOML.to_string(),
                ));
                for (path, text) in SDK_FILES {
                    files.push((Path::new("jobrelay-guest").join(path), text.to_string()));
                }
            }
        }
        Lang::Python => {
            if args.sdk.is_some() {
                bail!("--sdk is for Rust projects; a Python project carries its WIT");
            }
            files.extend([
                ("app.py".into(), fill(PYTHON_APP)),
                ("webhook.py".into(), PYTHON_WEBHOOK.to_string()),
                ("wit/plugin.wit".into(), WIT.to_string()),
                ("wit/python.wit".into(), python_world()),
                ("build.sh".into(), fill(PYTHON_BUILD_SH)),
                ("README.md".into(), fill(PYTHON_README)),
                (".gitignore".into(), PYTHON_GITIGNORE.to_string()),
            ]);
            for (package, text) in wasi_wit::FILES {
                let path = Path::new("wit/deps")
                    .join(package)
                    .join(format!("{package}.wit"));
                files.push((path, text.to_string()));
            }
        }
    }
    let samples = samples()?;
    for (file, event) in &samples {
        files.push((Path::new("events").join(file), json_line(event)?));
    }
    let (events, tape, expect) = first_case(&samples)?;
    files.push(("tests/cases/first/events.jsonl".into(), events));
    files.push(("tests/cases/first/tape.jsonl".into(), tape));
    files.push(("tests/cases/first/expect.yaml".into(), expect));

    for (path, text) in &files {
        let full = dir.join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&full, text).with_context(|| format!("cannot write {}", full.display()))?;
    }
    make_executable(&dir.join("build.sh"))?;
    Ok(NewProject {
        dir,
        files: files.into_iter().map(|(path, _)| path).collect(),
    })
}

fn check_name(name: &str) -> anyhow::Result<()> {
    let valid = name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-');
    if !valid {
        bail!(
            "`{name}` is not a plugin name: lowercase letters, digits and `-`, starting with a \
             letter, at most 63 characters"
        );
    }
    Ok(())
}

/// Sample events of several kinds and phases: (file name, event).
fn samples() -> anyhow::Result<Vec<(String, JobEvent)>> {
    let cases = [
        ("batch-job", Phase::Running, Some(Phase::Pending)),
        ("volcano-job", Phase::Failed, Some(Phase::Running)),
        ("pytorch-job", Phase::Succeeded, Some(Phase::Running)),
        ("mpi-job", Phase::Deleted, Some(Phase::Succeeded)),
    ];
    let mut samples = Vec::new();
    for (index, (kind, phase, previous)) in cases.into_iter().enumerate() {
        let mut event = sample_event(kind, phase, "example", previous)?;
        // Each sample its own job, so outputs and keys tell them apart.
        let uid = format!("{}{}", &event.uid[..event.uid.len() - 1], index + 1);
        event.id = event.id.replace(&event.uid, &uid);
        event.transition_key = event.transition_key.replace(&event.uid, &uid);
        event.uid = uid;
        let file = format!("{}-{kind}-{}.json", index + 1, phase.as_str());
        samples.push((file, event));
    }
    Ok(samples)
}

fn json_line(event: &JobEvent) -> anyhow::Result<String> {
    Ok(serde_json::to_string(event)? + "\n")
}

/// The first test case: the failed and the succeeded sample; the template counts the failure
/// in its key-value store (one read, one write) and lets the success pass.
fn first_case(samples: &[(String, JobEvent)]) -> anyhow::Result<(String, String, String)> {
    let failed = samples
        .iter()
        .map(|(_, e)| e)
        .find(|e| e.phase == Phase::Failed)
        .context("a failed sample")?;
    let succeeded = samples
        .iter()
        .map(|(_, e)| e)
        .find(|e| e.phase == Phase::Succeeded)
        .context("a succeeded sample")?;
    let events = json_line(failed)? + &json_line(succeeded)?;
    let key = format!("failures/{}", failed.namespace);
    let entries = [
        json!({"tape": 1, "clock": "2026-01-01T00:00:00.000Z"}),
        json!({
            "event": failed.id,
            "call": "kv.get",
            "args": {"key": key},
            "answer": {"ok": {"text": "2"}},
        }),
        json!({
            "event": failed.id,
            "call": "kv.set",
            "args": {"key": key, "value": {"text": "3"}, "ttl_seconds": null},
            "answer": {"ok": null},
        }),
    ];
    let tape: String = entries.iter().map(|entry| format!("{entry}\n")).collect();
    let expect =
        "# One status per event: ok, retry, deferred, give_up, trap, timeout, memory_limit, init_refused.\n\
                  outcomes: [ok, ok]\n"
            .to_string();
    Ok((events, tape, expect))
}

#[cfg(unix)]
fn make_executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", path.display()))
}

#[cfg(not(unix))]
fn make_executable(_path: &Path) -> anyhow::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_a_used_folder_is_refused() {
        for bad in ["", "My", "1st", "a_b", "end-", "a b", "ünï"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        check_name("gpu-alerts2").expect("a good name");
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(tmp.path().join("taken")).expect("mkdir");
        std::fs::write(tmp.path().join("taken/file"), "x").expect("write");
        let args = PluginNewArgs {
            name: "taken".into(),
            lang: Lang::Rust,
            dir: tmp.path().to_path_buf(),
            sdk: None,
        };
        let error = plugin_new(&args).expect_err("not empty").to_string();
        assert!(error.contains("not empty"), "{error}");
    }

    /// A Python project's manifest gives what docs/python-plugins.md advises for Python: 64 MB
    /// and instances kept for many events; a Rust one stays small and fresh.
    #[test]
    fn a_python_manifest_has_the_guides_limits() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let limits = |lang: Lang, name: &str| {
            let project = plugin_new(&PluginNewArgs {
                name: name.into(),
                lang,
                dir: tmp.path().to_path_buf(),
                sdk: None,
            })
            .expect("made");
            let text = std::fs::read_to_string(project.dir.join(format!("{name}.yaml")))
                .expect("the manifest");
            let manifest: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("YAML");
            (
                manifest["memory_mb"].as_u64(),
                manifest.get("instance_reuse").and_then(|v| v.as_u64()),
            )
        };
        assert_eq!(limits(Lang::Python, "py"), (Some(64), Some(64)));
        assert_eq!(limits(Lang::Rust, "rs"), (Some(32), None));
    }

    /// Every source file of the SDK crate is carried: a module added to the crate and not to
    /// `SDK_FILES` would leave scaffolded projects unbuildable.
    #[test]
    fn the_carried_sdk_is_the_whole_crate() {
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/guest/src");
        let mut on_disk: Vec<String> = std::fs::read_dir(&crate_dir)
            .expect("the SDK's sources")
            .filter_map(|e| e.ok())
            .map(|e| format!("src/{}", e.file_name().to_string_lossy()))
            .collect();
        on_disk.sort();
        let mut carried: Vec<String> = SDK_FILES
            .iter()
            .map(|(path, _)| path.to_string())
            .filter(|path| path.starts_with("src/"))
            .collect();
        carried.sort();
        assert_eq!(carried, on_disk);
    }
}
