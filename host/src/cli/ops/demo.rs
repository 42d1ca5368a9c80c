//! `jobrelay demo`: the whole product on one machine, with nothing to install.
//!
//! An embedded simulated cluster (the test kit's Kubernetes API simulator) plays realistic job
//! lifecycles; the daemon watches it with the three shipped plugins on embedded defaults —
//! mysql-sync on the `embedded` SQLite connection, log-archive into a local folder,
//! feishu-notify posting signed cards to a local Feishu receiver that prints them — and the
//! telemetry endpoint shows status and metrics. Everything lives in one folder, printed at
//! start, so the tables, archives and state can be looked at afterwards.
//!
//! With `--config DIR` the demo runs a user's own config folder instead of the shipped
//! plugins: the folder is copied into the demo's (its clusters and state left behind), one
//! simulated cluster is started per file of its `clusters/` folder, under that name, and the
//! main file is adjusted to run here: `plugin_dir` made absolute (so the components are found
//! where they are), the state in the demo folder, the telemetry endpoint on `--listen`, and no
//! coordination or home cluster (one replica). Nothing of the user's is touched: the archive
//! and each SQL connection (by its name) become files of the demo folder, and a plugin
//! granted HTTP or a host folder outside the demo folder is not run (each named at start).
//! Everything else — kinds, plugins, grants, config — is the user's.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use jobrelay_testkit::{FeishuReceiver, Flavor, Scenario, SimCluster};

use crate::clusters::cleanup::Outcome;
use crate::config::MAIN_FILE;
use crate::config::files;
use crate::config::main_file::MainConfig;
use crate::daemon::Daemon;

/// The plugins the demo runs.
const PLUGINS: [&str; 3] = ["mysql-sync", "log-archive", "feishu-notify"];
const BOT: &str = "demo";
const SECRET: &str = "demo-signing-secret";

/// Arguments of `demo`.
#[derive(Debug, Clone)]
pub struct DemoArgs {
    /// Folder for the config, state, tables and archive: created, or emptied if an earlier
    /// demo made it. Any other folder with something in it is refused, never emptied.
    pub dir: PathBuf,
    /// Folder with the built components (`plugins/build.sh` writes `target/plugins/`).
    pub plugins: PathBuf,
    /// Jobs to play; 0 plays until Ctrl-C.
    pub jobs: usize,
    /// Time between lifecycle steps.
    pub interval: Duration,
    /// Address of the telemetry endpoint.
    pub listen: SocketAddr,
    /// A user's config folder to run instead of the shipped plugins.
    pub config: Option<PathBuf>,
}

/// Where `plugins/build.sh` puts the components, seen from the running binary
/// (`target/debug/jobrelay` → `target/plugins`), or from the repository root.
pub fn default_plugins_dir() -> PathBuf {
    let beside_binary = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent()?.parent().map(|target| target.join("plugins")));
    match beside_binary {
        Some(dir) if dir.join("mysql-sync.wasm").exists() => dir,
        _ => PathBuf::from("target/plugins"),
    }
}

/// The file that marks a folder as made by `demo`, so a later run may empty it.
const MARKER: &str = ".jobrelay-demo";

/// Makes `dir` ready for a fresh demo: creates it, or empties it if it is empty already or an
/// earlier demo made it (it holds [`MARKER`]). A folder with anything else in it is refused:
/// `--dir` pointed at the wrong place must not cost anyone their files.
fn prepare_folder(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        let mut entries =
            std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
        let empty = entries.next().is_none();
        if !empty && !dir.join(MARKER).is_file() {
            bail!(
                "{} is not empty and was not made by `jobrelay demo`; refusing to empty it \
                 (give a new or empty folder with --dir)",
                dir.display()
            );
        }
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot empty {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::write(
        dir.join(MARKER),
        "made by `jobrelay demo`; the next demo run with this --dir empties this folder\n",
    )
    .with_context(|| format!("cannot write {}", dir.join(MARKER).display()))?;
    Ok(())
}

/// `jobrelay demo` as the binary runs it, from its command-line values: `plugins` defaults to
/// [`default_plugins_dir`], and steps are at least 1 ms apart.
pub async fn command(
    dir: PathBuf,
    plugins: Option<PathBuf>,
    jobs: usize,
    interval_ms: u64,
    listen: SocketAddr,
    config: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let args = DemoArgs {
        dir,
        plugins: plugins.unwrap_or_else(default_plugins_dir),
        jobs,
        interval: Duration::from_millis(interval_ms.max(1)),
        listen,
        config,
    };
    demo(&args).await.map(|()| ExitCode::SUCCESS)
}

/// Runs a user's config folder on simulated clusters (`--config`); returns when the jobs are
/// played (or on Ctrl-C).
async fn demo_of(args: &DemoArgs, source: &Path) -> anyhow::Result<()> {
    let source = source
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", source.display()))?;
    // The folders as the daemon reads them (a missing main file means the defaults); the
    // file is written again below with what must change to run here.
    let main_file = source.join(MAIN_FILE);
    let text = match std::fs::read_to_string(&main_file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", main_file.display())),
    };
    let settings = MainConfig::parse(&text, &source)
        .map_err(|e| anyhow::anyhow!("{}: {e}", main_file.display()))?;
    let mut main: serde_yaml_ng::Mapping = if text.trim().is_empty() {
        serde_yaml_ng::Mapping::new()
    } else {
        serde_yaml_ng::from_str(&text)
            .with_context(|| format!("{}: not a main file", main_file.display()))?
    };
    let mut scan = files::FolderScan::default();
    files::add_clusters(&mut scan, &settings.clusters_dir);
    let mut names: Vec<String> = scan.clusters.into_keys().collect();
    if names.is_empty() {
        names.push("demo".to_string());
    }
    prepare_folder(&args.dir)?;
    copy_folder(
        &source,
        &args.dir,
        &[settings.clusters_dir.clone(), source.join("state")],
    )?;

    // Runs here: components where they are, state and telemetry local, one replica.
    main.insert(
        "plugin_dir".into(),
        settings.plugin_dir.display().to_string().into(),
    );
    for key in ["clusters_dir", "coordination", "home_cluster"] {
        main.remove(key);
    }
    // Nothing of the user's is touched: the archive and every SQL connection are files of
    // the demo folder, and a plugin that could reach beyond it (HTTP, or a host folder
    // outside) is not run.
    main.insert(
        "archive".into(),
        serde_yaml_ng::from_str(&format!(
            "{{local: \"{}\"}}",
            args.dir.join("archive").display()
        ))?,
    );
    if !settings.sql.connections.is_empty() {
        std::fs::create_dir_all(args.dir.join("sql"))?;
        let mut connections = serde_yaml_ng::Mapping::new();
        for name in settings.sql.connections.keys() {
            let file = args.dir.join("sql").join(format!("{name}.db"));
            connections.insert(
                name.clone().into(),
                serde_yaml_ng::from_str(&format!(
                    "{{url: \"sqlite://{}?mode=rwc\"}}",
                    file.display()
                ))?,
            );
        }
        let mut sql = serde_yaml_ng::Mapping::new();
        sql.insert("connections".into(), connections.into());
        main.insert("sql".into(), sql.into());
    }
    let manifests = args.dir.join("plugins");
    for (plugin, why) in keep_inside(&settings.plugin_manifests_dir, &manifests, &args.dir)? {
        println!("  not run:  plugin {plugin}: {why}");
    }
    main.remove("plugin_manifests_dir");
    main.insert(
        "state".into(),
        serde_yaml_ng::from_str("{path: state/jobrelay.db}")?,
    );
    main.insert(
        "telemetry".into(),
        serde_yaml_ng::from_str(&format!("{{listen: \"{}\"}}", args.listen))?,
    );
    let mut sims = Vec::new();
    for name in &names {
        let sim = SimCluster::start(name).await?;
        let file = args.dir.join("clusters").join(format!("{name}.yaml"));
        std::fs::create_dir_all(args.dir.join("clusters"))?;
        std::fs::write(&file, sim.kubeconfig_yaml())
            .with_context(|| format!("cannot write {}", file.display()))?;
        sims.push(sim);
    }
    let written = args.dir.join("jobrelay.yaml");
    std::fs::write(&written, serde_yaml_ng::to_string(&main)?)
        .with_context(|| format!("cannot write {}", written.display()))?;

    let daemon = Daemon::start(&args.dir).await?;
    println!("jobrelay demo of {}", source.display());
    println!("  folder:   {}", args.dir.display());
    for sim in &sims {
        println!("  cluster:  {}, simulated, {}", sim.name(), sim.url());
    }
    if let Some(addr) = daemon.telemetry_addr() {
        println!("  status:   http://{addr}/   (JSON: /status, metrics: /metrics)");
    }
    println!();
    let mut scenarios: Vec<Scenario> = sims
        .iter()
        .map(|sim| Scenario::new(sim, "ml", args.jobs))
        .collect();
    let played = play(args.interval, || {
        for (sim, scenario) in sims.iter().zip(&mut scenarios) {
            for line in scenario.tick()? {
                println!("{}: {line}", sim.name());
            }
        }
        Ok(scenarios.iter().all(Scenario::done))
    })
    .await?;
    if played {
        settle_lanes(&daemon, || {}).await;
        println!();
        println!("summary");
        print_lanes(&daemon);
    }
    daemon.shutdown(Duration::from_secs(10)).await;
    Ok(())
}

/// A line per plugin: what its lane delivered, retried and dead-lettered.
fn print_lanes(daemon: &Daemon) {
    for (name, plugin) in daemon.plugins() {
        match plugin.lane {
            Some(lane) => println!(
                "  plugin {name}: {} delivered, {} retried, {} dead-lettered",
                lane.delivered, lane.retried, lane.dead_lettered
            ),
            None => println!("  plugin {name}: not serving"),
        }
    }
}

/// Calls `step` every `interval` until it says the play is done (`true`), or Ctrl-C
/// (`false`).
async fn play(
    interval: Duration,
    mut step: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<bool> {
    let mut tick = tokio::time::interval(interval);
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = &mut stop => {
                println!("stopping");
                return Ok(false);
            }
        }
        if step()? {
            return Ok(true);
        }
    }
}

/// Copies `from` into `to`, leaving out the folders of `skip`.
fn copy_folder(from: &Path, to: &Path, skip: &[PathBuf]) -> anyhow::Result<()> {
    for entry in
        std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))?
    {
        let path = entry?.path();
        if skip.iter().any(|s| s == &path) {
            continue;
        }
        let Some(name) = path.file_name() else {
            continue;
        };
        let target = to.join(name);
        if path.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_folder(&path, &target, skip)?;
        } else {
            std::fs::copy(&path, &target)
                .with_context(|| format!("cannot copy {}", path.display()))?;
        }
    }
    Ok(())
}

/// Writes into `to` the manifests of `from` whose plugins stay inside the demo folder `dir`,
/// and removes the others from `to` (a copy of the user's folder may hold them); returns the
/// plugins left out, each with why. A plugin granted HTTP could post to a real service, and
/// one granted a host folder outside `dir` could write the user's files: neither runs here.
/// A manifest that does not parse is kept, for the daemon to refuse as it would.
fn keep_inside(from: &Path, to: &Path, dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let mut left_out = Vec::new();
    std::fs::create_dir_all(to)?;
    let Ok(entries) = std::fs::read_dir(from) else {
        return Ok(left_out);
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_manifest = path.extension().is_some_and(|e| e == "yaml" || e == "yml");
        let Some(file) = path.file_name().filter(|_| is_manifest) else {
            continue;
        };
        let plugin = path
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default();
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let target = to.join(file);
        match reaches_out(&text, dir) {
            Some(why) => {
                left_out.push((plugin, why));
                let _ = std::fs::remove_file(&target);
            }
            None if path != target => {
                std::fs::write(&target, &text)
                    .with_context(|| format!("cannot write {}", target.display()))?;
            }
            None => {}
        }
    }
    left_out.sort();
    Ok(left_out)
}

/// Why the manifest `text` lets its plugin reach beyond the demo folder `dir`, if it does.
fn reaches_out(text: &str, dir: &Path) -> Option<String> {
    let manifest: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).ok()?;
    let grants = manifest.get("grants")?;
    if grants.get("http").is_some() {
        return Some("granted HTTP: it could reach a real service".into());
    }
    for mount in grants.get("filesystem")?.as_sequence()? {
        let host = Path::new(mount.get("host")?.as_str()?);
        let climbs = host
            .components()
            .any(|c| c == std::path::Component::ParentDir);
        if climbs || (host.is_absolute() && !host.starts_with(dir)) {
            return Some(format!(
                "granted the host folder {}, outside the demo folder",
                host.display()
            ));
        }
    }
    None
}

/// Waits (up to 30 s) until every lane is empty, calling `meanwhile` at each look.
async fn settle_lanes(daemon: &Daemon, mut meanwhile: impl FnMut()) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let busy = daemon
            .plugins()
            .values()
            .any(|p| p.lane.as_ref().is_some_and(|l| l.pending > 0));
        meanwhile();
        if !busy {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs the demo; returns when the jobs are played (or on Ctrl-C).
pub async fn demo(args: &DemoArgs) -> anyhow::Result<()> {
    if let Some(source) = &args.config {
        return demo_of(args, source).await;
    }
    for plugin in PLUGINS {
        let path = args.plugins.join(format!("{plugin}.wasm"));
        if !path.exists() {
            bail!(
                "{} is missing: build the plugins first with `plugins/build.sh`",
                path.display()
            );
        }
    }
    let plugins = args
        .plugins
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", args.plugins.display()))?;
    prepare_folder(&args.dir)?;
    let sim = SimCluster::start("demo").await?;
    let feishu = FeishuReceiver::start().await?;
    let webhook = feishu.add_bot(BOT, Some(SECRET), None);
    write_config(&args.dir, &plugins, &sim, &webhook, args.listen)?;

    let daemon = Daemon::start(&args.dir).await?;
    println!("jobrelay demo");
    println!("  folder:   {}", args.dir.display());
    println!("  cluster:  simulated, {}", sim.url());
    if let Some(addr) = daemon.telemetry_addr() {
        println!("  status:   http://{addr}/   (JSON: /status, metrics: /metrics)");
    }
    println!(
        "  tables:   {}",
        args.dir.join("state/embedded/mysql-sync.db").display()
    );
    println!(
        "  archive:  {}",
        args.dir.join("archive/log-archive").display()
    );
    println!();

    // Volcano jobs are not deleted by the scenario: jobrelay's clean-up deletes each once
    // log-archive and mysql-sync have delivered its end.
    let mut scenario = Scenario::new(&sim, "ml", args.jobs).leaving(Flavor::Volcano);
    let mut cards_shown = 0;
    let mut cleaned_shown = 0;
    let played = play(args.interval, || {
        for line in scenario.tick()? {
            println!("{line}");
        }
        cards_shown = print_cards(&feishu, cards_shown);
        cleaned_shown = print_cleaned(&sim, cleaned_shown);
        Ok(scenario.done())
    })
    .await?;
    if played {
        settle(&daemon, &feishu, &mut cards_shown).await;
        settle_cleanup(&daemon, || {
            cleaned_shown = print_cleaned(&sim, cleaned_shown)
        })
        .await;
        summary(&daemon, &args.dir, &feishu).await;
    }
    daemon.shutdown(Duration::from_secs(10)).await;
    Ok(())
}

fn write_config(
    dir: &Path,
    plugins: &Path,
    sim: &SimCluster,
    webhook: &str,
    listen: SocketAddr,
) -> anyhow::Result<()> {
    let write = |rel: &str, text: &str| -> anyhow::Result<()> {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    write("secrets/feishu", SECRET)?;
    write("clusters/demo.yaml", &sim.kubeconfig_yaml())?;
    write(
        "jobrelay.yaml",
        &format!(
            "kinds:\n  - {{name: batch-job}}\n  - {{name: volcano-job, finalizer: true}}\n  \
             - {{name: pytorch-job}}\n  - {{name: mpi-job}}\n\
             plugin_dir: {}\nstate: {{path: state/jobrelay.db}}\narchive: {{local: archive}}\n\
             telemetry: {{listen: \"{listen}\"}}\n\
             cleanup:\n  rules:\n    - {{kinds: [volcano-job], after_finished: 2s, \
             once_delivered: [log-archive, mysql-sync]}}\n",
            plugins.display()
        ),
    )?;
    write(
        "plugins/mysql-sync.yaml",
        "wasm: mysql-sync.wasm\ndelivery: transitions\ninstance_reuse: 64\n\
         grants: {sql: [embedded]}\nconfig: {connection: embedded}\n",
    )?;
    write(
        "plugins/log-archive.yaml",
        "wasm: log-archive.wasm\ndelivery: transitions\ntimeout_ms: 20000\n\
         grants: {pod_logs: {}, archive: {}, kv: true, job: {annotations: [\"archive.jobrelay.io/\"]}}\n",
    )?;
    write(
        "plugins/feishu-notify.yaml",
        &format!(
            "wasm: feishu-notify.wasm\ndelivery: transitions\n\
             rate_limits: [{{per_second: 5}}, {{per_minute: 100}}]\n\
             grants:\n  http: {{allow: [\"http://127.0.0.1:*\"], allow_private: true}}\n  kv: true\n\
             config:\n  webhook: \"{webhook}\"\n  secret: \"file:{}\"\n",
            dir.join("secrets/feishu").display()
        ),
    )?;
    Ok(())
}

/// Prints the cards received since `shown`; returns the new count.
fn print_cards(feishu: &FeishuReceiver, shown: usize) -> usize {
    let cards = feishu.messages(BOT);
    for card in cards.iter().skip(shown) {
        let title = card.body["card"]["header"]["title"]["content"]
            .as_str()
            .unwrap_or("(no title)");
        let signed = if card.signed { "signed" } else { "unsigned" };
        println!("  feishu card ({signed}): {title}");
    }
    cards.len()
}

/// Prints the jobs jobrelay's clean-up deleted since `shown`; returns the new count.
fn print_cleaned(sim: &SimCluster, shown: usize) -> usize {
    let deletions = sim.deletions();
    for d in deletions.iter().skip(shown) {
        if d.status == 200 {
            println!(
                "  cleaned up {}/{}: its archive and row were delivered, so jobrelay deleted it \
                 (uid precondition, propagation {})",
                d.namespace,
                d.name,
                d.propagation.as_deref().unwrap_or("default")
            );
        }
    }
    deletions.len()
}

/// Waits (up to 30 s) until clean-up has nothing left to delete.
async fn settle_cleanup(daemon: &Daemon, mut meanwhile: impl FnMut()) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let left = daemon
            .cleanup()
            .schedule
            .jobs
            .values()
            .any(|stages| stages.values().any(|n| *n > 0));
        meanwhile();
        if !left {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits (up to 30 s) until every lane is empty, printing the last cards.
async fn settle(daemon: &Daemon, feishu: &FeishuReceiver, shown: &mut usize) {
    settle_lanes(daemon, || *shown = print_cards(feishu, *shown)).await;
}

async fn summary(daemon: &Daemon, dir: &Path, feishu: &FeishuReceiver) {
    println!();
    println!("summary");
    print_lanes(daemon);
    let db = dir.join("state/embedded/mysql-sync.db");
    match sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display())).await {
        Ok(pool) => {
            let jobs: Result<Vec<(String, String)>, _> =
                sqlx::query_as("SELECT name, phase FROM jobs ORDER BY name")
                    .fetch_all(&pool)
                    .await;
            let transitions: Result<i64, _> =
                sqlx::query_scalar("SELECT COUNT(*) FROM job_transitions")
                    .fetch_one(&pool)
                    .await;
            if let (Ok(jobs), Ok(transitions)) = (jobs, transitions) {
                println!(
                    "  mysql-sync (SQLite): {} jobs, {transitions} transitions",
                    jobs.len()
                );
                for (name, phase) in jobs {
                    println!("    {name}: {phase}");
                }
            }
            pool.close().await;
        }
        Err(e) => println!("  cannot read {}: {e}", db.display()),
    }
    let manifests = count_files(&dir.join("archive/log-archive"), "manifest.json");
    println!("  log-archive: {manifests} job archives");
    println!("  feishu-notify: {} cards", feishu.messages(BOT).len());
    let deleted: u64 = daemon
        .cleanup()
        .outcomes
        .iter()
        .filter(|o| o.outcome == Outcome::Deleted)
        .map(|o| o.count)
        .sum();
    println!("  clean-up: {deleted} finished jobs deleted once their plugins delivered them");
}

fn count_files(dir: &Path, name: &str) -> usize {
    let mut count = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == name) {
                count += 1;
            }
        }
    }
    count
}
