//! `jobrelay check`: everything the daemon would refuse or fail on, found before it runs.
//!
//! Every config file is validated, every plugin compiled and initialised with its config (with
//! `--no-init`, compiled and linked only: no plugin code runs), and
//! every cluster asked for its version and for one item of each watched kind (which proves the
//! credentials may list it). A cluster source on the home cluster (`cluster_sources:`) is read
//! once: each Secret it selects is a cluster, checked with the files', or a problem named by
//! its `namespace/name`. The state store is tried as the daemon opens it: a MySQL database
//! is connected to (its tables made if missing) and asked how many dead letters it holds; an
//! SQLite file that exists likewise (beside a running daemon, as `jobrelay dead-letters` does);
//! one that does not is not made, only its folder is proven creatable and writable. The report
//! names each file; the exit code is 1 on any problem. A kind a cluster does not serve (its
//! CRD is not installed there) is a warning naming the cluster, not a problem: `run` watches
//! it once the CRD appears.
//!
//! With `--offline` nothing is dialled and no secret resolved — for a CI job or a pre-upgrade
//! hook where clusters, databases and registries are out of reach: the files are judged as
//! the daemon judges them, each plugin's config against its schema, and each plugin compiled
//! and linked (no `init`); the state store, the clusters, the cluster sources and plugins
//! from a registry are named as not tried (`skip`).

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client};

use crate::clusters::supervisor::build_client;
use crate::config::config_schema::ConfigSchema;
use crate::config::inventory::Inventory;
use crate::config::main_file::MainConfig;
use crate::config::read_once::writable_folder;
use crate::config::state::ConfigState;
use crate::oci::{OCI_CACHE_DIR, Registries};
use jobrelay_capabilities::archive::ArchiveLocation;
use jobrelay_capabilities::open_error::chain;
use jobrelay_capabilities::sql::SqlSettings;
use jobrelay_runtime::Runtime;
use jobrelay_state::{StateBackend, open_store};

/// How far a check reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Everything, each plugin's load-time `init` run as the daemon would.
    Full,
    /// Everything but the plugins' code (`--no-init`).
    NoInit,
    /// Nothing beyond the files (`--offline`): no cluster, cluster source, state store,
    /// database or registry dialled and no secret resolved; plugins compiled and linked only.
    Offline,
}

/// Runs the checks, as far as `reach` says.
pub async fn command(
    config_dir: &Path,
    cluster_timeout: Duration,
    reach: Reach,
) -> anyhow::Result<ExitCode> {
    let run_init = reach == Reach::Full;
    let offline = reach == Reach::Offline;
    let mut failures = 0usize;
    let mut state = match ConfigState::load(config_dir) {
        Ok((state, _)) => state,
        Err((path, e)) => {
            println!("FAIL  main     {}: {e}", path.display());
            return Ok(ExitCode::FAILURE);
        }
    };
    let main = state.main().clone();
    let kinds: Vec<&str> = main.kinds.iter().map(|k| k.name.as_str()).collect();
    println!(
        "ok    main     {} kinds: {}",
        main.kinds.len(),
        kinds.join(", ")
    );
    for (path, why) in state.problems() {
        failures += 1;
        println!("FAIL  file     {}: {why}", path.display());
    }
    // Its Display names the file, or the database without its password; the resolved URL of a
    // secret reference is never printed.
    if offline {
        println!("skip  state    {} (offline: not opened)", main.state);
    } else {
        match check_state(&main.state, cluster_timeout).await {
            Ok(report) => println!("ok    state    {}{report}", main.state),
            Err(e) => {
                failures += 1;
                println!("FAIL  state    {}: {e}", main.state);
            }
        }
    }

    // Plugins load with the real SQL connections and archive (their load-time `init` may set
    // up tables), but without the state file, which belongs to the running daemon.
    // A connection or runtime setting the host cannot use is a problem of the main file like
    // any other: reported, with exit code 1, not an error of the command.
    let main_path = config_dir.join(crate::config::MAIN_FILE);
    // Offline, the plugins link against stand-ins that are never dialled (no plugin code
    // runs): each SQL connection a pool of a URL nobody resolves, the archive and the
    // embedded databases in a folder of this check's own.
    let scratch = tempfile::tempdir().context("a scratch folder for the check")?;
    let (sql, archive, local_dir) = if offline {
        (
            offline_sql(&main.sql),
            ArchiveLocation::Local(scratch.path().join("archive")),
            scratch.path().to_path_buf(),
        )
    } else {
        (
            main.sql.clone(),
            main.archive.clone(),
            main.state.local_dir(),
        )
    };
    let services = match jobrelay_capabilities::Services::open(
        &sql,
        &archive,
        &local_dir,
        &main.kinds,
        None,
    ) {
        Ok(services) => services,
        Err(e) => {
            let e = chain(&e);
            println!("FAIL  main     {}: {e}", main_path.display());
            println!("{} problem(s) found", failures + 1);
            return Ok(ExitCode::FAILURE);
        }
    };
    let runtime = match Runtime::with_services(main.runtime.clone(), services) {
        Ok(runtime) => runtime,
        Err(e) => {
            println!("FAIL  main     {}: {e}", main_path.display());
            println!("{} problem(s) found", failures + 1);
            return Ok(ExitCode::FAILURE);
        }
    };
    let registries = Registries::new(&main.oci, main.state.local_dir().join(OCI_CACHE_DIR));
    for (name, source) in state.plugins() {
        // The config against the plugin's declared schema first: no plugin code runs for it.
        match ConfigSchema::beside(&source.wasm_path) {
            Ok(Some(schema)) => {
                let problems = schema.check(&source.spec.config);
                if !problems.is_empty() {
                    failures += 1;
                    println!(
                        "FAIL  plugin   {name} ({}): the config breaks {}:",
                        source.manifest_path.display(),
                        schema.path.display()
                    );
                    for problem in problems {
                        println!("        {problem}");
                    }
                    continue;
                }
            }
            Ok(None) => {}
            Err(e) => {
                failures += 1;
                println!(
                    "FAIL  plugin   {name} ({}): {e}",
                    source.manifest_path.display()
                );
                continue;
            }
        }
        if offline && source.oci.is_some() {
            println!(
                "skip  plugin   {name} ({}): from a registry (offline: not pulled)",
                source.manifest_path.display()
            );
            continue;
        }
        let started = Instant::now();
        let spec = match source.loadable(&registries).await {
            Ok(spec) => spec,
            Err(e) => {
                failures += 1;
                println!(
                    "FAIL  plugin   {name} ({}): {e}",
                    source.manifest_path.display()
                );
                continue;
            }
        };
        let size = spec.wasm.len();
        let loaded = if run_init {
            runtime.load(spec).await
        } else {
            runtime.load_without_init(spec).await
        };
        match loaded {
            Ok(_) => println!(
                "ok    plugin   {name}: version {} ({} KiB, loaded in {} ms{})",
                source.spec.version,
                size / 1024,
                started.elapsed().as_millis(),
                if run_init { "" } else { ", init not run" }
            ),
            Err(e) => {
                failures += 1;
                println!(
                    "FAIL  plugin   {name} ({}): {e}",
                    source.manifest_path.display()
                );
            }
        }
    }

    if offline {
        let clusters = state.clusters().len();
        let sources = main.cluster_sources.configured().len();
        println!(
            "skip  clusters {clusters} cluster(s) and {sources} cluster source(s) (offline: not \
             asked)"
        );
        return Ok(summary(failures));
    }
    failures += check_sources(&mut state, cluster_timeout).await;
    for (name, source) in state.clusters() {
        match tokio::time::timeout(
            cluster_timeout,
            probe_cluster(name, &source.kubeconfig, &main),
        )
        .await
        {
            Ok(Ok(report)) => {
                println!("ok    cluster  {name}: {}", report.listed);
                // As `run` treats it: a kind whose CRD a cluster lacks is not the cluster's
                // fault (it is watched once the CRD appears), so one kinds list can serve a
                // mixed fleet and a CI gate on `check` passes on it.
                if !report.not_served.is_empty() {
                    println!(
                        "warn  cluster  {name}: does not serve {} (CRD not installed; watched \
                         once it is)",
                        report.not_served.join(", ")
                    );
                }
            }
            Ok(Err(e)) => {
                failures += 1;
                let server = crate::config::sources::server_of(&source.kubeconfig)
                    .map(|s| format!(", {s}"))
                    .unwrap_or_default();
                println!(
                    "FAIL  cluster  {name} ({}{server}): {e}",
                    source.path.display()
                );
            }
            Err(_) => {
                failures += 1;
                println!(
                    "FAIL  cluster  {name} ({}): no answer within {} s",
                    source.path.display(),
                    cluster_timeout.as_secs()
                );
            }
        }
    }
    Ok(summary(failures))
}

/// The last line, and the exit status: 1 on any problem.
fn summary(failures: usize) -> ExitCode {
    if failures == 0 {
        println!("all checks passed");
        ExitCode::SUCCESS
    } else {
        println!("{failures} problem(s) found");
        ExitCode::FAILURE
    }
}

/// The SQL connections as an offline check links plugins against them: each named as
/// configured, its URL one that is never resolved nor dialled (pools connect lazily, and no
/// plugin code runs), so a secret reference out of reach is no problem here.
fn offline_sql(sql: &SqlSettings) -> SqlSettings {
    let mut offline = sql.clone();
    for connection in offline.connections.values_mut() {
        connection.url = "mysql://offline.invalid/offline".to_string();
    }
    offline
}

/// The cluster sources on the home cluster (`cluster_sources:`), read once as the daemon
/// reads them: each Secret a source's selector takes is a cluster (probed below with the
/// files') or a problem named by its `namespace/name`; a name a file or another source takes
/// is a problem naming both. Returns the problems found.
async fn check_sources(state: &mut ConfigState, timeout: Duration) -> usize {
    use crate::clusters::inventory_watch;
    use crate::config::sections::cluster_sources::object_of;
    let settings = state.main().cluster_sources.clone();
    let configured = settings.configured();
    if configured.is_empty() {
        return 0;
    }
    let mut failures = 0;
    let mut given = Vec::new();
    let providers = settings.providers().cloned().unwrap_or_default();
    for (kind, at) in &configured {
        let source = kind.name();
        let object = kind.object();
        let what = if at.label_selector.is_empty() {
            format!("{object}s in {}", at.namespace)
        } else {
            format!("{object}s in {} with {}", at.namespace, at.label_selector)
        };
        let listed = tokio::time::timeout(timeout, async {
            let client = inventory_watch::home_client(settings.kubeconfig.as_deref()).await?;
            let mut params = ListParams::default();
            if !at.label_selector.is_empty() {
                params = params.labels(&at.label_selector);
            }
            inventory_watch::objects(client, *kind, at)
                .list(&params)
                .await
                .map_err(|e| anyhow!("{}", chain(&e)))
        })
        .await;
        let secrets = match listed {
            Ok(Ok(list)) => list.items,
            Ok(Err(e)) => {
                println!("FAIL  source   {source} ({what}): {e}");
                failures += 1;
                continue;
            }
            Err(_) => {
                println!(
                    "FAIL  source   {source} ({what}): no answer within {} s",
                    timeout.as_secs()
                );
                failures += 1;
                continue;
            }
        };
        let mut inventory = Inventory::default();
        inventory.replace(
            secrets
                .iter()
                .filter_map(|s| inventory_watch::parse_object(*kind, &providers, s))
                .collect(),
        );
        for object in &secrets {
            let readiness = inventory_watch::readiness_of(*kind, object);
            inventory.set_readiness(&inventory_watch::key_of(object), readiness);
        }
        let snapshot = inventory.snapshot();
        // Not a fault of the configuration: the cluster is judged degraded or offline by it.
        for (cluster, readiness) in &snapshot.readiness {
            println!(
                "note  source   {source}: cluster {cluster}: {}",
                readiness.detail
            );
        }
        given.extend(
            snapshot
                .clusters
                .iter()
                .map(|(name, (key, _))| (source, name.clone(), key.clone())),
        );
        state.set_inventory(source, Some(snapshot));
        println!(
            "ok    source   {source}: {} {object}(s) in {}",
            secrets.len(),
            at.namespace
        );
    }
    // Judged once every source is in: a name two sources give is refused in the second.
    for (source, name, key) in &given {
        let refused = state
            .source_refused()
            .get(*source)
            .is_some_and(|r| r.contains_key(key));
        if !refused {
            let object = object_of(source);
            println!("ok    source   {source} {object} {key}: cluster {name}");
        }
    }
    for (source, refused) in state.source_refused() {
        for (key, why) in refused {
            let object = object_of(source);
            println!("FAIL  source   {source} {object} {key}: {why}");
            failures += 1;
        }
    }
    failures
}

/// What one cluster answered: its version and the kinds it listed, and the kinds it does not
/// serve.
struct ClusterReport {
    listed: String,
    not_served: Vec<String>,
}

async fn probe_cluster(
    name: &str,
    kubeconfig: &kube::config::Kubeconfig,
    main: &MainConfig,
) -> anyhow::Result<ClusterReport> {
    let client: Client = build_client(kubeconfig, None).await?;
    let version = client
        .apiserver_version()
        .await
        .map_err(|e| anyhow!("version: {}", chain(&e)))?;
    let mut listed = Vec::new();
    let mut not_served = Vec::new();
    for kind in main.kinds.iter().filter(|k| k.watched_on(name)) {
        let ar = kind.api_resource();
        let api: Api<DynamicObject> = match main.watch.namespaces.first() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        match api.list(&ListParams::default().limit(1)).await {
            Ok(_) => listed.push(kind.name.as_str()),
            Err(kube::Error::Api(status)) if status.code == 404 => {
                not_served.push(kind.name.clone())
            }
            Err(e) => return Err(anyhow!("cannot list {}: {}", kind.name, chain(&e))),
        }
    }
    Ok(ClusterReport {
        listed: format!(
            "{}, can list {}",
            version.git_version,
            if listed.is_empty() {
                "no kind".to_string()
            } else {
                listed.join(", ")
            }
        ),
        not_served,
    })
}

/// Tries the state store within `within`: the text after its name when it works (how many
/// dead letters it holds), the problem otherwise.
async fn check_state(backend: &StateBackend, within: Duration) -> anyhow::Result<String> {
    if let StateBackend::Sqlite(path) = backend {
        let exists = match path.try_exists() {
            Ok(found) => found,
            // A file where one of its folders should be: the folder check below says which.
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => false,
            Err(e) => return Err(anyhow!("cannot look for it: {e}")),
        };
        // Not made here: an empty file in a copy of the folder, or one the daemon would then
        // find, is no business of a check.
        if !exists {
            return writable_folder(path)
                .map(|()| ": not there yet, made at first start".to_string())
                .map_err(anyhow::Error::from);
        }
    }
    let tried = tokio::time::timeout(within, async {
        let store = open_store(backend).await?;
        let answer = async {
            store.check().await?;
            let counts = store.dead_letter_counts().await?;
            anyhow::Ok(counts.values().sum::<u64>())
        }
        .await;
        // Its connections released: an SQLite file's log is folded back only when no other
        // process (a running daemon) still has the file open.
        store.close().await;
        answer
    })
    .await;
    match tried {
        Ok(Ok(1)) => Ok(" (1 dead letter stored)".to_string()),
        Ok(Ok(n)) => Ok(format!(" ({n} dead letters stored)")),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(anyhow!("no answer within {} s", within.as_secs())),
    }
}
