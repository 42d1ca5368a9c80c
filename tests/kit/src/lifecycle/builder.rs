//! Building a job before it is created: replicas, labels, annotations, finalizers, pods.

use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use chrono::Utc;
use serde_json::json;

use super::{Flavor, JobDriver, pods, spec};
use crate::sim::SimCluster;

/// Builds a job before creating it; see [`JobDriver::builder`].
#[derive(Clone, Debug)]
pub struct JobBuilder {
    pub(super) flavor: Flavor,
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) workers: u32,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) annotations: BTreeMap<String, String>,
    pub(super) finalizers: Vec<String>,
    pub(super) with_pods: bool,
    pub(super) pace: super::Pace,
    pub(super) in_order_startup: bool,
    pub(super) created_suspended: bool,
}

impl JobBuilder {
    /// Worker replicas (default 2). Batch jobs get this many pods, and so do TrainJobs
    /// (`trainer.numNodes`); the others one more (master, launcher, JobSet leader, Ray head).
    pub fn workers(mut self, n: u32) -> Self {
        self.workers = n.max(1);
        self
    }

    /// Adds a label to the job.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Adds an annotation to the job.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    /// Adds a finalizer to the job at creation.
    pub fn finalizer(mut self, name: &str) -> Self {
        self.finalizers.push(name.into());
        self
    }

    /// How the job's clock moves from step to step (default [`Pace::Seconds`](super::Pace)).
    pub fn pace(mut self, pace: super::Pace) -> Self {
        self.pace = pace;
        self
    }

    /// Creates no pods (and so no logs).
    pub fn without_pods(mut self) -> Self {
        self.with_pods = false;
        self
    }

    /// JobSet only: `startupPolicy: InOrder` — the leader's Jobs start before the workers',
    /// and the controller records it in `StartupPolicyInProgress` / `StartupPolicyCompleted`
    /// conditions (see the [`jobset`](super::jobset) module). Creating any other flavour with
    /// it is an error.
    pub fn in_order_startup(mut self) -> Self {
        self.in_order_startup = true;
        self
    }

    /// batch/v1 Job, TrainJob, JobSet and RayJob only: created with `spec.suspend: true`, as
    /// Kueue's webhook submits every job it manages, and without pods until
    /// [`JobDriver::admitted`]. What the controller writes before admission differs per kind
    /// (see the module table): `Suspended=True/JobSuspended` for a batch Job; nothing at all
    /// for a TrainJob (Kueue admitted it before the trainer reconciled it, the case that is
    /// easy to misread as running; play [`JobDriver::suspended`] to have the condition
    /// written). Creating any other flavour with it is an error.
    pub fn created_suspended(mut self) -> Self {
        self.created_suspended = true;
        self
    }

    /// Creates the job (and its pods, with logs) in the simulator.
    pub fn create(self, sim: &SimCluster) -> anyhow::Result<JobDriver> {
        if self.in_order_startup && self.flavor != Flavor::JobSet {
            bail!("only JobSets have an in-order startup policy");
        }
        if self.created_suspended && !self.flavor.waits_for_admission() {
            bail!(
                "{} cannot be created suspended (only batch Job, TrainJob, JobSet and RayJob)",
                self.flavor.kind()
            );
        }
        let mut metadata = json!({ "labels": self.labels, "annotations": self.annotations });
        if !self.finalizers.is_empty() {
            metadata["finalizers"] = json!(self.finalizers);
        }
        let mut object = spec::job_object(
            self.flavor,
            &self.namespace,
            &self.name,
            self.workers,
            metadata,
        );
        if self.in_order_startup {
            object["spec"]["startupPolicy"] = json!({ "startupPolicyOrder": "InOrder" });
        }
        if self.created_suspended {
            object["spec"]["suspend"] = json!(true);
        }
        let created = sim.create(&self.flavor.gvr(), object).with_context(|| {
            format!(
                "creating {:?} job {}/{}",
                self.flavor, self.namespace, self.name
            )
        })?;
        let uid = created["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let rv = created["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let ray_cluster = if self.flavor == Flavor::RayJob {
            pods::with_suffix(&self.name)
        } else {
            String::new()
        };
        let planned = pods::plan(self.flavor, &self.name, self.workers, &ray_cluster);
        let mut driver = JobDriver {
            sim: sim.clone(),
            flavor: self.flavor,
            namespace: self.namespace,
            name: self.name,
            uid,
            workers: self.workers,
            total: planned.len() as u32,
            pods: Vec::new(),
            clock: Utc::now(),
            pace: self.pace,
            pods_started: None,
            restarts: 0,
            last_rv: rv,
            in_order: self.in_order_startup,
            deferred_pods: Vec::new(),
            ray_cluster,
            dead_pods: Vec::new(),
        };
        if self.created_suspended {
            if self.with_pods {
                driver.deferred_pods = planned;
            }
            driver.settle_created_suspended()?;
        } else if self.with_pods {
            driver.create_pods(planned)?;
        }
        Ok(driver)
    }
}
