//! `jobrelay-sim`: a simulated cluster for trying jobrelay without Kubernetes.
//!
//! Starts the test kit's Kubernetes API simulator on 127.0.0.1, writes a kubeconfig for it
//! (atomically, so a watching jobrelay picks it up), and plays realistic training-job
//! lifecycles on it — Volcano, PyTorch, MPI and batch jobs that run, restart, succeed, fail and
//! get deleted — until stopped.
//!
//! Usage: `jobrelay-sim --kubeconfig PATH [--name NAME] [--interval-ms N] [--jobs N]`
//! (`--jobs 0`, the default, runs until killed).

#![expect(
    clippy::print_stdout,
    reason = "a command line: the cluster's address and each step played are its output"
)]

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use jobrelay_testkit::{Scenario, SimCluster};

struct Args {
    kubeconfig: PathBuf,
    name: String,
    interval: Duration,
    jobs: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut kubeconfig = None;
    let mut name = "example-sim".to_string();
    let mut interval = Duration::from_millis(700);
    let mut jobs = 0;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--kubeconfig" => kubeconfig = Some(PathBuf::from(value()?)),
            "--name" => name = value()?,
            "--interval-ms" => interval = Duration::from_millis(value()?.parse()?),
            "--jobs" => jobs = value()?.parse()?,
            "-h" | "--help" => {
                println!(
                    "jobrelay-sim --kubeconfig PATH [--name NAME] [--interval-ms N] [--jobs N]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(Args {
        kubeconfig: kubeconfig.context("--kubeconfig PATH is required")?,
        name,
        interval,
        jobs,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let sim = SimCluster::start(&args.name).await?;
    sim.write_kubeconfig(&args.kubeconfig)?;
    println!(
        "simulated cluster `{}` at {} (kubeconfig: {})",
        args.name,
        sim.url(),
        args.kubeconfig.display()
    );
    // A few jobs in flight at once, each advancing one step per tick.
    let mut scenario = Scenario::new(&sim, "ml", args.jobs);
    let mut tick = tokio::time::interval(args.interval);
    loop {
        tick.tick().await;
        for line in scenario.tick()? {
            println!("{line}");
        }
        if scenario.done() {
            println!("all {} jobs played", args.jobs);
            tokio::time::sleep(Duration::from_secs(2)).await;
            return Ok(());
        }
    }
}
