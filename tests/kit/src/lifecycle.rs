//! Job lifecycle drivers: play the training operators' part against a [`SimCluster`].
//!
//! A [`JobDriver`] creates a job of one [`Flavor`] with a realistic spec, labels and pods (pods
//! carry the flavour's job-name label and an owner reference to the job, and get logs), then
//! moves it through phases by writing the status JSON that flavour's controller writes. Each
//! step returns the job's new resourceVersion so tests can wait for exactly that event.
//!
//! Timestamps come from an internal clock that advances at least one second per step, so
//! `lastTransitionTime`s are strictly increasing and their order is meaningful.
//!
//! What each step writes (job status; pod statuses change alongside, written first):
//!
//! | step | batch/v1 Job | Volcano Job | PyTorchJob / MPIJob |
//! |---|---|---|---|
//! | `pending` | counts only (`ready: 0`) | phase `Pending` | `Created` |
//! | `running` | `active`/`ready` = pods, `startTime` | phase `Running` | `Running`, `startTime` (adds `Created` if missing) |
//! | `restarting` | `ready` one less (container restarted) | phase `Restarting`, `retryCount`+1, `version`+1 | `Restarting` (replaces `Running`) |
//! | `completing` | `SuccessCriteriaMet`, `succeeded` | phase `Completing` | error: no such phase |
//! | `succeeded` | `completing` if needed, then `Complete` + `completionTime` | `completing` if needed, then `Completed` | `Succeeded` (Running→False), `completionTime` |
//! | `failing(r)` | `FailureTarget` (reason `r`), `failed`+1 | error | error |
//! | `failed(r)` | `failing` if needed, then `Failed` | phase `Failed` (reason `r`) | `Failed` (reason `r`), `completionTime` |
//! | `suspended` | `spec.suspend=true`, then `Suspended` | `Aborting`, then `Aborted` | `spec.runPolicy.suspend=true`, then `Suspended` (Running→False) |
//! | `resumed` | `spec.suspend=false`, then `Suspended=False` | phase `Restarting` (`ResumeJob`) | `spec.runPolicy.suspend=false`, then `Suspended=False` |
//! | `aborted` | error | `Aborting`, then `Aborted` | error |
//! | `terminated(r)` | error | `Terminating`, then `Terminated` | error |
//! | `delete` | DELETE (marked if finalizers; pods garbage-collected on removal) | same | same |
//!
//! Pods are left alone by `suspended`/`resumed` (real controllers delete and recreate them).

mod batch;
mod kubeflow;
mod pods;
mod spec;
mod volcano;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail};
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use crate::sim::{Gvr, SimCluster};

pub use pods::PodInfo;

use kubeflow::Condition;
use pods::Exit;
use volcano::Counts;

/// The kinds of training job the driver can play.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// `batch/v1 Job`.
    Batch,
    /// Volcano `batch.volcano.sh/v1alpha1 Job`.
    Volcano,
    /// Kubeflow `kubeflow.org/v1 PyTorchJob`.
    PyTorch,
    /// Kubeflow `kubeflow.org/v2beta1 MPIJob`.
    Mpi,
}

impl Flavor {
    /// Every flavour.
    pub const ALL: [Flavor; 4] = [Flavor::Batch, Flavor::Volcano, Flavor::PyTorch, Flavor::Mpi];

    /// The resource the jobs live in.
    pub fn gvr(self) -> Gvr {
        match self {
            Flavor::Batch => Gvr::BATCH_JOB,
            Flavor::Volcano => Gvr::VOLCANO_JOB,
            Flavor::PyTorch => Gvr::PYTORCH_JOB,
            Flavor::Mpi => Gvr::MPI_JOB_V2,
        }
    }

    /// The job `kind`.
    pub fn kind(self) -> &'static str {
        match self {
            Flavor::Batch | Flavor::Volcano => "Job",
            Flavor::PyTorch => "PyTorchJob",
            Flavor::Mpi => "MPIJob",
        }
    }

    /// The label that names the job on its pods.
    pub fn pod_label(self) -> &'static str {
        match self {
            Flavor::Batch => "batch.kubernetes.io/job-name",
            Flavor::Volcano => "volcano.sh/job-name",
            Flavor::PyTorch | Flavor::Mpi => "training.kubeflow.org/job-name",
        }
    }

    fn is_kubeflow(self) -> bool {
        matches!(self, Flavor::PyTorch | Flavor::Mpi)
    }

    /// Replica type names in `replicaStatuses` (Kubeflow), leader first.
    fn roles(self) -> (&'static str, &'static str) {
        match self {
            Flavor::Mpi => ("Launcher", "Worker"),
            _ => ("Master", "Worker"),
        }
    }
}

/// What a status writer needs to know.
pub(crate) struct Ctx<'a> {
    pub kind: &'static str,
    pub namespace: &'a str,
    pub name: &'a str,
    /// Timestamp of this step.
    pub now: String,
    /// Worker replicas.
    pub workers: u32,
    /// All pods (workers plus master/launcher; for batch, the parallelism).
    pub total: u32,
}

/// Builds a job before creating it; see [`JobDriver::builder`].
#[derive(Clone, Debug)]
pub struct JobBuilder {
    flavor: Flavor,
    namespace: String,
    name: String,
    workers: u32,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    finalizers: Vec<String>,
    with_pods: bool,
}

impl JobBuilder {
    /// Worker replicas (default 2). Batch jobs get this many pods; the others one more
    /// (master or launcher).
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

    /// Creates no pods (and so no logs).
    pub fn without_pods(mut self) -> Self {
        self.with_pods = false;
        self
    }

    /// Creates the job (and its pods, with logs) in the simulator.
    pub fn create(self, sim: &SimCluster) -> anyhow::Result<JobDriver> {
        let mut metadata = json!({ "labels": self.labels, "annotations": self.annotations });
        if !self.finalizers.is_empty() {
            metadata["finalizers"] = json!(self.finalizers);
        }
        let object = spec::job_object(self.flavor, &self.namespace, &self.name, self.workers, metadata);
        let created = sim
            .create(&self.flavor.gvr(), object)
            .with_context(|| format!("creating {:?} job {}/{}", self.flavor, self.namespace, self.name))?;
        let uid = created["metadata"]["uid"].as_str().unwrap_or_default().to_string();
        let rv = created["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string();
        let planned = pods::plan(self.flavor, &self.name, self.workers);
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
            pods_started: None,
            restarts: 0,
            last_rv: rv,
        };
        if self.with_pods {
            driver.create_pods(planned)?;
        }
        Ok(driver)
    }
}

/// Drives one job through its lifecycle. Every step method returns the job's resourceVersion
/// after the step's last write.
pub struct JobDriver {
    sim: SimCluster,
    flavor: Flavor,
    namespace: String,
    name: String,
    uid: String,
    workers: u32,
    total: u32,
    pods: Vec<PodInfo>,
    clock: DateTime<Utc>,
    pods_started: Option<String>,
    restarts: u32,
    last_rv: String,
}

impl JobDriver {
    /// A builder with defaults: 2 workers, an `app.kubernetes.io/name` label, pods with logs.
    pub fn builder(flavor: Flavor, namespace: &str, name: &str) -> JobBuilder {
        JobBuilder {
            flavor,
            namespace: namespace.into(),
            name: name.into(),
            workers: 2,
            labels: BTreeMap::from([("app.kubernetes.io/name".to_string(), name.to_string())]),
            annotations: BTreeMap::new(),
            finalizers: Vec::new(),
            with_pods: true,
        }
    }

    /// Creates a job with the builder's defaults.
    pub fn create(sim: &SimCluster, flavor: Flavor, namespace: &str, name: &str) -> anyhow::Result<JobDriver> {
        JobDriver::builder(flavor, namespace, name).create(sim)
    }

    // ----- accessors -----------------------------------------------------------------------------

    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    pub fn gvr(&self) -> Gvr {
        self.flavor.gvr()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn uid(&self) -> &str {
        &self.uid
    }

    /// The resourceVersion after the last write this driver made.
    pub fn resource_version(&self) -> &str {
        &self.last_rv
    }

    /// The job's pods (empty when built `without_pods`).
    pub fn pods(&self) -> &[PodInfo] {
        &self.pods
    }

    pub fn pod_names(&self) -> Vec<String> {
        self.pods.iter().map(|p| p.name.clone()).collect()
    }

    /// The job object as stored now.
    pub fn object(&self) -> anyhow::Result<Value> {
        Ok(self.sim.get(&self.gvr(), &self.namespace, &self.name)?)
    }

    /// Replaces the stored log of one of the job's pods.
    pub fn set_log(&self, pod: &str, previous: bool, bytes: impl Into<bytes::Bytes>) -> anyhow::Result<()> {
        let info = self
            .pods
            .iter()
            .find(|p| p.name == pod)
            .with_context(|| format!("{pod} is not a pod of {}", self.name))?;
        self.sim.set_pod_log(&self.namespace, pod, &info.container, previous, bytes);
        Ok(())
    }

    /// Moves the internal clock forward (e.g. to make a step look long after the previous one).
    pub fn advance_clock(&mut self, by: Duration) {
        self.clock += chrono::Duration::from_std(by).unwrap_or_default();
    }

    // ----- steps ---------------------------------------------------------------------------------

    /// Scheduled, not started. See the module table.
    pub fn pending(&mut self) -> anyhow::Result<String> {
        let now = self.tick();
        self.write_pods(|_, p| Some(pods::pending_status(p, &now)))?;
        match self.flavor {
            Flavor::Batch => self.write_status(&now, batch::pending),
            Flavor::Volcano => {
                let counts = Counts { pending: self.total, ..Counts::default() };
                self.write_status(&now, |s, c| volcano::transition(s, c, "Pending", "", "", counts))
            }
            Flavor::PyTorch | Flavor::Mpi => self.write_status(&now, |s, c| {
                created_condition(s, c);
                replica_counts(s, c, (0, 0, 0), (0, 0, 0));
            }),
        }
    }

    /// All pods running. See the module table.
    pub fn running(&mut self) -> anyhow::Result<String> {
        let now = self.tick();
        let started = self.pods_started.get_or_insert_with(|| now.clone()).clone();
        let restarts = self.restarts;
        self.write_pods(|i, p| {
            let r = if i == 0 { restarts } else { 0 };
            Some(pods::running_status(p, i as u32, &started, &now, r, true))
        })?;
        self.append_logs(|p| Some(format!("{} | epoch 1/3 loss=0.912\n", p.name)));
        match self.flavor {
            Flavor::Batch => self.write_status(&now, batch::running),
            Flavor::Volcano => {
                let counts = Counts { running: self.total, ..Counts::default() };
                self.write_status(&now, |s, c| volcano::transition(s, c, "Running", "", "", counts))
            }
            Flavor::PyTorch | Flavor::Mpi => self.write_status(&now, |s, c| {
                created_condition(s, c);
                kubeflow::set_condition(s, c, kubeflow_condition(c, "Running", true, "is running."));
                if s.get("startTime").is_none_or(Value::is_null) {
                    s["startTime"] = json!(c.now);
                }
                replica_counts(s, c, (1, 0, 0), (c.workers, 0, 0));
            }),
        }
    }

    /// The first pod's container failed and restarted. See the module table.
    pub fn restarting(&mut self) -> anyhow::Result<String> {
        let now = self.tick();
        self.restarts += 1;
        let started = self.pods_started.get_or_insert_with(|| now.clone()).clone();
        let restarts = self.restarts;
        self.write_pods(|i, p| (i == 0).then(|| pods::running_status(p, 0, &started, &now, restarts, false)))?;
        if let Some(first) = self.pods.first().cloned() {
            let old = self.sim.pod_log(&self.namespace, &first.name, &first.container, false);
            let mut previous = old.map(|b| b.to_vec()).unwrap_or_default();
            previous.extend_from_slice(format!("{} | RuntimeError: NCCL communicator was aborted\n", first.name).as_bytes());
            self.sim.set_pod_log(&self.namespace, &first.name, &first.container, true, previous);
            let fresh = format!("{} | restarted (restart {restarts}), resuming from checkpoint\n", first.name);
            self.sim.set_pod_log(&self.namespace, &first.name, &first.container, false, fresh);
        }
        match self.flavor {
            Flavor::Batch => self.write_status(&now, batch::restarting),
            Flavor::Volcano => {
                let counts = Counts { running: self.total - 1, failed: 1, ..Counts::default() };
                self.write_status(&now, |s, c| {
                    volcano::bump_retry(s);
                    let message = format!("Task {} failed, restarting the job", first_task(c));
                    volcano::transition(s, c, "Restarting", "PodFailed", &message, counts);
                })
            }
            Flavor::PyTorch | Flavor::Mpi => {
                let (leader, worker) = self.flavor.roles();
                let failed_role = if self.pods.len() > 1 { leader } else { worker };
                self.write_status(&now, |s, c| {
                    let what = format!("is restarting because 1 {failed_role} replica(s) failed.");
                    kubeflow::set_condition(s, c, kubeflow_condition(c, "Restarting", true, &what));
                    replica_counts(s, c, (0, 0, 1), (c.workers, 0, 0));
                })
            }
        }
    }

    /// Success criteria met, pods finishing (batch, Volcano). See the module table.
    pub fn completing(&mut self) -> anyhow::Result<String> {
        if self.flavor.is_kubeflow() {
            bail!("{} has no completing phase", self.flavor.kind());
        }
        let now = self.tick();
        self.finish_pods(&now, false)?;
        match self.flavor {
            Flavor::Batch => self.write_status(&now, batch::completing),
            _ => {
                let counts = Counts { succeeded: self.total, ..Counts::default() };
                self.write_status(&now, |s, c| volcano::transition(s, c, "Completing", "", "", counts))
            }
        }
    }

    /// Finished successfully. See the module table.
    pub fn succeeded(&mut self) -> anyhow::Result<String> {
        let status = self.current_status()?;
        match self.flavor {
            Flavor::Batch => {
                if !batch::has_condition(&status, "SuccessCriteriaMet") {
                    self.completing()?;
                }
                let now = self.tick();
                self.write_status(&now, batch::complete)
            }
            Flavor::Volcano => {
                if volcano::phase(&status) != "Completing" {
                    self.completing()?;
                }
                let now = self.tick();
                let counts = Counts { succeeded: self.total, ..Counts::default() };
                self.write_status(&now, |s, c| volcano::transition(s, c, "Completed", "", "", counts))
            }
            Flavor::PyTorch | Flavor::Mpi => {
                let now = self.tick();
                self.finish_pods(&now, false)?;
                self.write_status(&now, |s, c| {
                    kubeflow::set_condition(s, c, kubeflow_condition(c, "Succeeded", true, "successfully completed."));
                    s["completionTime"] = json!(c.now);
                    replica_counts(s, c, (0, 1, 0), (0, c.workers, 0));
                })
            }
        }
    }

    /// The job will fail (batch only: `FailureTarget`). Empty `reason` means
    /// `BackoffLimitExceeded`.
    pub fn failing(&mut self, reason: &str) -> anyhow::Result<String> {
        if self.flavor != Flavor::Batch {
            bail!("only batch/v1 Jobs have a failing phase");
        }
        let reason = non_empty(reason, batch::DEFAULT_FAILURE);
        let now = self.tick();
        self.finish_pods(&now, true)?;
        self.write_status(&now, |s, c| batch::failure_target(s, c, &reason))
    }

    /// Failed. Empty `reason` means the flavour's usual one. See the module table.
    pub fn failed(&mut self, reason: &str) -> anyhow::Result<String> {
        match self.flavor {
            Flavor::Batch => {
                let reason = non_empty(reason, batch::DEFAULT_FAILURE);
                if !batch::has_condition(&self.current_status()?, "FailureTarget") {
                    self.failing(&reason)?;
                }
                let now = self.tick();
                self.write_status(&now, |s, c| batch::failed(s, c, &reason))
            }
            Flavor::Volcano => {
                let reason = non_empty(reason, "PodFailed");
                let now = self.tick();
                self.finish_pods(&now, true)?;
                let counts = Counts { failed: self.total, ..Counts::default() };
                self.write_status(&now, |s, c| {
                    let message = format!("Task {} failed with exit code 1", first_task(c));
                    volcano::transition(s, c, "Failed", &reason, &message, counts);
                })
            }
            Flavor::PyTorch | Flavor::Mpi => {
                let (leader, _) = self.flavor.roles();
                let default_reason = format!("{}Failed", self.flavor.kind());
                let reason = non_empty(reason, &default_reason);
                let now = self.tick();
                self.finish_pods(&now, true)?;
                self.write_status(&now, |s, c| {
                    let mut cond = kubeflow_condition(c, "Failed", true, &format!("has failed because 1 {leader} replica(s) failed."));
                    cond.reason = reason.clone();
                    kubeflow::set_condition(s, c, cond);
                    s["completionTime"] = json!(c.now);
                    replica_counts(s, c, (0, 0, 1), (0, 0, c.workers));
                })
            }
        }
    }

    /// Suspended by the user. See the module table.
    pub fn suspended(&mut self) -> anyhow::Result<String> {
        match self.flavor {
            Flavor::Batch => {
                self.patch_spec(json!({ "spec": { "suspend": true } }))?;
                let now = self.tick();
                self.write_status(&now, batch::suspended)
            }
            Flavor::Volcano => self.volcano_two_step("Aborting", "Aborted", "AbortJob", "job aborted by user"),
            Flavor::PyTorch | Flavor::Mpi => {
                self.patch_spec(json!({ "spec": { "runPolicy": { "suspend": true } } }))?;
                let now = self.tick();
                self.write_status(&now, |s, c| {
                    kubeflow::set_condition(s, c, kubeflow_condition(c, "Suspended", true, "is suspended."));
                    let mut running = kubeflow_condition(c, "Running", false, "is suspended.");
                    running.reason = kubeflow::reason(c, "Suspended");
                    kubeflow::set_condition(s, c, running);
                    if let Some(map) = s.as_object_mut() {
                        map.remove("startTime");
                    }
                    replica_counts(s, c, (0, 0, 0), (0, 0, 0));
                })
            }
        }
    }

    /// Resumed after [`JobDriver::suspended`]. See the module table.
    pub fn resumed(&mut self) -> anyhow::Result<String> {
        match self.flavor {
            Flavor::Batch => {
                self.patch_spec(json!({ "spec": { "suspend": false } }))?;
                let now = self.tick();
                self.write_status(&now, batch::resumed)
            }
            Flavor::Volcano => {
                let now = self.tick();
                let counts = Counts { pending: self.total, ..Counts::default() };
                self.write_status(&now, |s, c| {
                    volcano::bump_retry(s);
                    volcano::transition(s, c, "Restarting", "ResumeJob", "job resumed by user", counts);
                })
            }
            Flavor::PyTorch | Flavor::Mpi => {
                self.patch_spec(json!({ "spec": { "runPolicy": { "suspend": false } } }))?;
                let now = self.tick();
                self.write_status(&now, |s, c| {
                    let mut cond = kubeflow_condition(c, "Suspended", false, "is resumed.");
                    cond.reason = kubeflow::reason(c, "Resumed");
                    kubeflow::set_condition(s, c, cond);
                    s["startTime"] = json!(c.now);
                })
            }
        }
    }

    /// Volcano only: `Aborting`, then `Aborted`.
    pub fn aborted(&mut self) -> anyhow::Result<String> {
        if self.flavor != Flavor::Volcano {
            bail!("only Volcano jobs can be aborted");
        }
        self.volcano_two_step("Aborting", "Aborted", "AbortJob", "job aborted by user")
    }

    /// Volcano only: `Terminating`, then `Terminated`. Empty `reason` means `PodFailed`.
    pub fn terminated(&mut self, reason: &str) -> anyhow::Result<String> {
        if self.flavor != Flavor::Volcano {
            bail!("only Volcano jobs can be terminated");
        }
        let reason = non_empty(reason, "PodFailed");
        self.volcano_two_step("Terminating", "Terminated", &reason, "job terminated by policy")
    }

    /// Deletes the job (DELETE semantics: marked when it has finalizers, else removed, and its
    /// pods garbage-collected once it is gone). Returns the RV of the delete.
    pub fn delete(&mut self) -> anyhow::Result<String> {
        let object = self.sim.delete(&self.gvr(), &self.namespace, &self.name)?;
        self.last_rv = rv_of(&object);
        Ok(self.last_rv.clone())
    }

    // ----- internals -------------------------------------------------------------------------

    /// Advances the clock by at least a second (and never behind wall time).
    fn tick(&mut self) -> String {
        let next = self.clock + chrono::Duration::seconds(1);
        self.clock = next.max(Utc::now());
        self.clock.to_rfc3339_opts(SecondsFormat::Secs, true)
    }

    fn ctx(&self, now: &str) -> Ctx<'_> {
        Ctx {
            kind: self.flavor.kind(),
            namespace: &self.namespace,
            name: &self.name,
            now: now.to_string(),
            workers: self.workers,
            total: self.total,
        }
    }

    fn current_status(&self) -> anyhow::Result<Value> {
        Ok(self.object()?.get("status").cloned().unwrap_or_else(|| json!({})))
    }

    /// Reads the current status, lets `edit` change it, writes it through `/status`.
    fn write_status(&mut self, now: &str, edit: impl FnOnce(&mut Value, &Ctx)) -> anyhow::Result<String> {
        let mut status = self.current_status()?;
        if !status.is_object() {
            status = json!({});
        }
        edit(&mut status, &self.ctx(now));
        let written = self.sim.update_status(&self.gvr(), &self.namespace, &self.name, status)?;
        self.last_rv = rv_of(&written);
        Ok(self.last_rv.clone())
    }

    fn patch_spec(&mut self, patch: Value) -> anyhow::Result<String> {
        let written = self.sim.patch_merge(&self.gvr(), &self.namespace, &self.name, patch)?;
        self.last_rv = rv_of(&written);
        Ok(self.last_rv.clone())
    }

    fn volcano_two_step(&mut self, first: &str, second: &str, reason: &str, message: &str) -> anyhow::Result<String> {
        let now = self.tick();
        let counts = Counts { terminating: self.total, ..Counts::default() };
        self.write_status(&now, |s, c| volcano::transition(s, c, first, reason, message, counts))?;
        let now = self.tick();
        self.write_status(&now, |s, c| volcano::transition(s, c, second, reason, message, Counts::default()))
    }

    fn create_pods(&mut self, planned: Vec<PodInfo>) -> anyhow::Result<()> {
        let now = self.tick();
        for pod in planned {
            let object = pods::pod_object(self.flavor, &self.namespace, &self.name, &self.uid, &pod, &now);
            self.sim
                .create(&Gvr::POD, object)
                .with_context(|| format!("creating pod {}", pod.name))?;
            let line = format!(
                "{} | starting {} {}/{} role={} index={}\n",
                pod.name,
                self.flavor.kind(),
                self.namespace,
                self.name,
                pod.role,
                pod.index
            );
            self.sim.set_pod_log(&self.namespace, &pod.name, &pod.container, false, line);
            self.pods.push(pod);
        }
        Ok(())
    }

    /// Writes pod statuses; pods that no longer exist are skipped.
    fn write_pods(&self, status: impl Fn(usize, &PodInfo) -> Option<Value>) -> anyhow::Result<()> {
        for (i, pod) in self.pods.iter().enumerate() {
            let Some(status) = status(i, pod) else { continue };
            match self.sim.update_status(&Gvr::POD, &self.namespace, &pod.name, status) {
                Ok(_) => {}
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e).with_context(|| format!("updating pod {}", pod.name)),
            }
        }
        Ok(())
    }

    fn append_logs(&self, line: impl Fn(&PodInfo) -> Option<String>) {
        for pod in &self.pods {
            if let Some(line) = line(pod) {
                self.sim.append_pod_log(&self.namespace, &pod.name, &pod.container, line.as_bytes());
            }
        }
    }

    /// Terminates every pod: all complete, or (with `failure`) the first errors and the rest
    /// are killed.
    fn finish_pods(&mut self, now: &str, failure: bool) -> anyhow::Result<()> {
        let started = self.pods_started.get_or_insert_with(|| now.to_string()).clone();
        let restarts = self.restarts;
        self.write_pods(|i, p| {
            let exit = match (failure, i) {
                (false, _) => Exit::Completed,
                (true, 0) => Exit::Error,
                (true, _) => Exit::Killed,
            };
            let r = if i == 0 { restarts } else { 0 };
            Some(pods::terminated_status(p, &started, now, r, exit))
        })?;
        self.append_logs(|p| {
            Some(match (failure, p.name == self.pods[0].name) {
                (false, _) => format!("{} | training complete\n", p.name),
                (true, true) => format!("{} | RuntimeError: CUDA error: out of memory\n", p.name),
                (true, false) => format!("{} | received SIGTERM, exiting\n", p.name),
            })
        });
        Ok(())
    }
}

fn rv_of(object: &Value) -> String {
    object["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string()
}

fn non_empty(value: &str, default: &str) -> String {
    if value.is_empty() { default.to_string() } else { value.to_string() }
}

fn first_task(c: &Ctx) -> String {
    format!("{}-master-0", c.name)
}

fn kubeflow_condition<'a>(c: &Ctx, kind: &'a str, value: bool, what: &str) -> Condition<'a> {
    Condition {
        kind,
        value,
        reason: kubeflow::reason(c, kind),
        message: kubeflow::message(c, what),
    }
}

fn created_condition(s: &mut Value, c: &Ctx) {
    let has_created = s["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|x| x["type"] == "Created"));
    if !has_created {
        kubeflow::set_condition(s, c, kubeflow_condition(c, "Created", true, "is created."));
    }
}

/// `replicaStatuses` for (leader, workers), each as (active, succeeded, failed).
fn replica_counts(s: &mut Value, c: &Ctx, leader: (u32, u32, u32), workers: (u32, u32, u32)) {
    let (leader_role, worker_role) = if c.kind == "MPIJob" { ("Launcher", "Worker") } else { ("Master", "Worker") };
    let selector = format!("training.kubeflow.org/job-name={}", c.name);
    kubeflow::replica_statuses(
        s,
        &[
            (leader_role, leader.0, leader.1, leader.2),
            (worker_role, workers.0, workers.1, workers.2),
        ],
        &selector,
    );
}
