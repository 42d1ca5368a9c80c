//! `jobrelay check`: everything the daemon would refuse or fail on, found before it runs.
//!
//! Every config file is validated, every plugin compiled and initialised with its config (with
//! `--no-init`, compiled and linked only: no plugin code runs), and
//! every cluster asked for its version and for one item of each watched kind (which proves the
//! credentials may list it). The report names each file; the exit code is 1 on any problem.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client};

use crate::clusters::supervisor::build_client;
use crate::config::main_file::MainConfig;
use crate::config::state::ConfigState;
use crate::oci::{OCI_CACHE_DIR, Registries};
use jobrelay_runtime::Runtime;

/// Runs the checks; `run_init` runs each plugin's load-time `init` as the daemon would.
pub async fn check(
    config_dir: &Path,
    cluster_timeout: Duration,
    run_init: bool,
) -> anyhow::Result<ExitCode> {
    let mut failures = 0usize;
    let state = match ConfigState::load(config_dir) {
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

    // Plugins load with the real SQL connections and archive (their load-time `init` may set
    // up tables), but without the state file, which belongs to the running daemon.
    // A connection or runtime setting the host cannot use is a problem of the main file like
    // any other: reported, with exit code 1, not an error of the command.
    let main_path = config_dir.join(crate::config::main_file::MAIN_FILE);
    let services = match jobrelay_capabilities::Services::open(
        &main.sql,
        &main.archive,
        &main.state.local_dir(),
        &main.kinds,
        None,
    ) {
        Ok(services) => services,
        Err(e) => {
            let e = jobrelay_capabilities::open_error::chain(&e);
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

    for (name, source) in state.clusters() {
        match tokio::time::timeout(cluster_timeout, probe_cluster(&source.kubeconfig, &main)).await
        {
            Ok(Ok(report)) => println!("ok    cluster  {name}: {report}"),
            Ok(Err(e)) => {
                failures += 1;
                println!("FAIL  cluster  {name} ({}): {e}", source.path.display());
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
    if failures == 0 {
        println!("all checks passed");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("{failures} problem(s) found");
        Ok(ExitCode::FAILURE)
    }
}

async fn probe_cluster(
    kubeconfig: &kube::config::Kubeconfig,
    main: &MainConfig,
) -> Result<String, String> {
    let client: Client = build_client(kubeconfig).await?;
    let version = client
        .apiserver_version()
        .await
        .map_err(|e| format!("version: {e}"))?;
    let mut listed = Vec::new();
    for kind in &main.kinds {
        let gvk = GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, &kind.plural);
        let api: Api<DynamicObject> = match main.watch.namespaces.first() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        api.list(&ListParams::default().limit(1))
            .await
            .map_err(|e| format!("cannot list {}: {e}", kind.name))?;
        listed.push(kind.name.as_str());
    }
    Ok(format!(
        "{}, can list {}",
        version.git_version,
        listed.join(", ")
    ))
}
