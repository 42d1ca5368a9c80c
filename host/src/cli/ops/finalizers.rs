//! `jobrelay finalizers release`: remove jobrelay's finalizer from every job of every cluster,
//! for uninstalling (or freeing jobs held while jobrelay cannot run).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use kube::Api;
use kube::api::{DynamicObject, ListParams};

use crate::clusters::supervisor::build_client;
use crate::config::state::ConfigState;
use jobrelay_watch::finalizer;

#[derive(Debug, Subcommand)]
pub enum FinalizersCommand {
    /// Remove jobrelay's finalizer from every job of every cluster (for uninstalling).
    Release {
        /// The config folder (main file, clusters/): the clusters whose jobs are released.
        #[arg(long, short, env = "JOBRELAY_CONFIG")]
        config: PathBuf,
        /// Seconds allowed per cluster.
        #[arg(long, default_value_t = 120)]
        cluster_timeout: u64,
    },
}

/// `jobrelay finalizers …` as the binary runs it: prints the report; exit status 1 if a
/// cluster failed.
pub async fn command(command: &FinalizersCommand) -> anyhow::Result<ExitCode> {
    let FinalizersCommand::Release {
        config,
        cluster_timeout,
    } = command;
    let (report, ok) = release(config, Duration::from_secs(*cluster_timeout)).await?;
    print!("{report}");
    Ok(crate::cli::passed(ok))
}

/// Returns the report to print, and whether everything went well.
pub async fn release(config_dir: &Path, timeout: Duration) -> anyhow::Result<(String, bool)> {
    let (state, _) = ConfigState::load(config_dir)
        .map_err(|(path, e)| anyhow::anyhow!("{}: {e}", path.display()))?;
    let main = state.main();
    let name = &main.finalizers.name;
    let mut report = String::new();
    let mut ok = true;
    for (cluster, source) in state.clusters() {
        let work = async {
            let client = build_client(&source.kubeconfig, None).await?;
            let mut removed = 0usize;
            // Every kind, not only those with `finalizer: true` now: the setting may have been
            // turned off after jobs got the finalizer.
            for kind in &main.kinds {
                let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.api_resource());
                let jobs = api
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot list {}: {e}", kind.name))?;
                for job in jobs
                    .items
                    .iter()
                    .filter(|j| !finalizer::needs_finalizer_ignoring_deletion(&j.metadata, name))
                {
                    let (Some(ns), Some(job_name), Some(uid)) = (
                        job.metadata.namespace.as_deref(),
                        job.metadata.name.as_deref(),
                        job.metadata.uid.as_deref(),
                    ) else {
                        continue;
                    };
                    if finalizer::remove(client.clone(), kind, ns, job_name, uid, name).await? {
                        removed += 1;
                    }
                }
            }
            anyhow::Ok(removed)
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(Ok(n)) => report.push_str(&format!(
                "ok    cluster  {cluster}: finalizer removed from {n} job(s)\n"
            )),
            Ok(Err(e)) => {
                ok = false;
                report.push_str(&format!("FAIL  cluster  {cluster}: {e}\n"));
            }
            Err(_) => {
                ok = false;
                report.push_str(&format!(
                    "FAIL  cluster  {cluster}: no answer within {} s\n",
                    timeout.as_secs()
                ));
            }
        }
    }
    Ok((report, ok))
}
