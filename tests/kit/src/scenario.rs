//! A small, endless stream of realistic job lifecycles on one simulated cluster, for the
//! `jobrelay-sim` binary and `jobrelay demo`: a few jobs in flight at once, each advancing one
//! step per tick (Volcano jobs restart now and then, some jobs fail), every pod writing a log,
//! and every job deleted at the end — unless its flavor is left to a clean-up
//! ([`Scenario::leaving`]), as jobrelay's `cleanup:` does it.

use anyhow::bail;

use crate::{Flavor, JobDriver, SimCluster};

/// Jobs in flight at once.
const IN_FLIGHT: usize = 3;

/// Plays job lifecycles on a cluster, one step per job per [`Scenario::tick`].
pub struct Scenario {
    sim: SimCluster,
    namespace: String,
    running: Vec<(JobDriver, Vec<&'static str>)>,
    started: usize,
    /// Jobs to play in all; 0: no end.
    jobs: usize,
    /// Flavors whose finished jobs are left standing, for someone else to delete.
    left: Vec<Flavor>,
}

impl Scenario {
    pub fn new(sim: &SimCluster, namespace: &str, jobs: usize) -> Scenario {
        Scenario {
            sim: sim.clone(),
            namespace: namespace.to_string(),
            running: Vec::new(),
            started: 0,
            jobs,
            left: Vec::new(),
        }
    }

    /// Leaves finished jobs of `flavor` standing instead of deleting them.
    pub fn leaving(mut self, flavor: Flavor) -> Scenario {
        self.left.push(flavor);
        self
    }

    /// Whether every job was played to its end.
    pub fn done(&self) -> bool {
        self.jobs > 0 && self.started >= self.jobs && self.running.is_empty()
    }

    /// Jobs started so far.
    pub fn started(&self) -> usize {
        self.started
    }

    /// Starts a job if there is room, advances every job one step; returns what happened,
    /// one line per step.
    pub fn tick(&mut self) -> anyhow::Result<Vec<String>> {
        let mut lines = Vec::new();
        if self.running.len() < IN_FLIGHT && (self.jobs == 0 || self.started < self.jobs) {
            let flavor = Flavor::ALL[self.started % Flavor::ALL.len()];
            let prefix = match flavor {
                Flavor::Batch => "batch",
                Flavor::Volcano => "volcano",
                Flavor::PyTorch => "pytorch",
                Flavor::Mpi => "mpi",
                Flavor::TrainJob => "trainjob",
                Flavor::JobSet => "jobset",
                Flavor::RayJob => "rayjob",
            };
            let name = format!("{prefix}-{}", self.started);
            let job = JobDriver::create(&self.sim, flavor, &self.namespace, &name)?;
            lines.push(format!(
                "created {} {}/{name}",
                flavor.kind(),
                self.namespace
            ));
            let mut steps = script(flavor, self.started);
            if self.left.contains(&flavor) {
                steps.retain(|s| *s != "delete");
            }
            steps.reverse();
            self.running.push((job, steps));
            self.started += 1;
        }
        for (job, steps) in self.running.iter_mut() {
            if let Some(next) = steps.pop() {
                let rv = step(job, next)?;
                lines.push(format!(
                    "  {} {}/{} -> {next} (resourceVersion {rv})",
                    job.flavor().kind(),
                    job.namespace(),
                    job.name()
                ));
            }
        }
        self.running.retain(|(_, steps)| !steps.is_empty());
        Ok(lines)
    }
}

/// One job's script: the steps it goes through after creation.
fn script(flavor: Flavor, n: usize) -> Vec<&'static str> {
    match (flavor, n % 3) {
        (Flavor::Volcano, 0) => vec![
            "pending",
            "running",
            "restarting",
            "running",
            "succeeded",
            "delete",
        ],
        (Flavor::Volcano, _) => vec!["pending", "running", "failed", "delete"],
        (Flavor::Batch, _) => vec!["running", "succeeded", "delete"],
        (_, 1) => vec!["pending", "running", "failed", "delete"],
        _ => vec!["pending", "running", "succeeded", "delete"],
    }
}

fn step(job: &mut JobDriver, what: &str) -> anyhow::Result<String> {
    match what {
        "pending" => job.pending(),
        "running" => {
            let rv = job.running()?;
            // Training output, so a log archiver has something to keep.
            for pod in job.pod_names() {
                let log: String = (1..=20)
                    .map(|s| format!("{pod} step {s} loss={:.3}\n", 2.0 / f64::from(s)))
                    .collect();
                job.set_log(&pod, false, log)?;
            }
            Ok(rv)
        }
        "restarting" => job.restarting(),
        "succeeded" => job.succeeded(),
        "failed" => job.failed("BackoffLimitExceeded"),
        "delete" => job.delete(),
        other => bail!("unknown step {other}"),
    }
}
