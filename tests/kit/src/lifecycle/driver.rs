//! The driver's state and plumbing: its clock, reads and writes of the job and its pods.
//! The lifecycle steps themselves are in `steps.rs`.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::pods::{self, Exit, PodInfo};
use super::volcano::{self, Counts};
use super::{Ctx, Flavor, JobBuilder};
use crate::sim::{Gvr, SimCluster};

/// How a driver's clock moves from one step to the next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pace {
    /// At least one second per step, never behind wall time: every step has a time of its own.
    #[default]
    Seconds,
    /// Each step at the wall time (never before the step before): steps played within one
    /// second share a time, as a controller's fast transitions do.
    Wall,
    /// Only [`JobDriver::advance_clock`] moves it.
    Manual,
}

/// Drives one job through its lifecycle. Every step method returns the job's resourceVersion
/// after the step's last write.
pub struct JobDriver {
    pub(super) sim: SimCluster,
    pub(super) flavor: Flavor,
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) uid: String,
    pub(super) workers: u32,
    pub(super) total: u32,
    pub(super) pods: Vec<PodInfo>,
    pub(super) clock: DateTime<Utc>,
    pub(super) pace: Pace,
    pub(super) pods_started: Option<String>,
    pub(super) restarts: u32,
    pub(super) last_rv: String,
    /// JobSet: `startupPolicy: InOrder` (see [`JobBuilder::in_order_startup`]).
    pub(super) in_order: bool,
    /// Pods of a job created suspended, created when it is admitted.
    pub(super) deferred_pods: Vec<PodInfo>,
    /// RayJob: the RayCluster its pods are named after.
    pub(super) ray_cluster: String,
    /// Pods whose container [`JobDriver::pod_fails`] terminated: later steps that finish the
    /// pods leave them as they are (a dead container stays dead).
    pub(super) dead_pods: Vec<String>,
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
            pace: Pace::Seconds,
            in_order_startup: false,
            created_suspended: false,
        }
    }

    /// Creates a job with the builder's defaults.
    pub fn create(
        sim: &SimCluster,
        flavor: Flavor,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<JobDriver> {
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

    /// The pods the job runs when all are up: those of [`JobDriver::pods`], and those a job
    /// created suspended gets once admitted (what Kueue counts in the Workload's pod sets).
    pub fn pod_count(&self) -> u32 {
        self.total
    }

    pub fn pod_names(&self) -> Vec<String> {
        self.pods.iter().map(|p| p.name.clone()).collect()
    }

    /// The job object as stored now.
    pub fn object(&self) -> anyhow::Result<Value> {
        Ok(self.sim.get(&self.gvr(), &self.namespace, &self.name)?)
    }

    /// Replaces the stored log of one of the job's pods.
    pub fn set_log(
        &self,
        pod: &str,
        previous: bool,
        bytes: impl Into<bytes::Bytes>,
    ) -> anyhow::Result<()> {
        let info = self
            .pods
            .iter()
            .find(|p| p.name == pod)
            .with_context(|| format!("{pod} is not a pod of {}", self.name))?;
        self.sim
            .set_pod_log(&self.namespace, pod, &info.container, previous, bytes);
        Ok(())
    }

    /// Chooses how the clock moves from now on (see [`Pace`]).
    pub fn set_pace(&mut self, pace: Pace) {
        self.pace = pace;
    }

    /// Moves the internal clock forward (e.g. to make a step look long after the previous one).
    pub fn advance_clock(&mut self, by: Duration) {
        self.clock += chrono::Duration::from_std(by).unwrap_or_default();
    }

    // ----- internals -------------------------------------------------------------------------

    /// The time of the next step, as its [`Pace`] moves the clock, in whole seconds.
    pub(super) fn tick(&mut self) -> String {
        match self.pace {
            Pace::Seconds => {
                let next = self.clock + chrono::Duration::seconds(1);
                self.clock = next.max(Utc::now());
            }
            Pace::Wall => self.clock = self.clock.max(Utc::now()),
            Pace::Manual => {}
        }
        self.clock.to_rfc3339_opts(SecondsFormat::Secs, true)
    }

    pub(super) fn ctx(&self, now: &str) -> Ctx<'_> {
        Ctx {
            kind: self.flavor.kind(),
            namespace: &self.namespace,
            name: &self.name,
            now: now.to_string(),
            workers: self.workers,
            total: self.total,
        }
    }

    pub(super) fn current_status(&self) -> anyhow::Result<Value> {
        Ok(self
            .object()?
            .get("status")
            .cloned()
            .unwrap_or_else(|| json!({})))
    }

    /// Reads the current status, lets `edit` change it, writes it through `/status`.
    pub(super) fn write_status(
        &mut self,
        now: &str,
        edit: impl FnOnce(&mut Value, &Ctx),
    ) -> anyhow::Result<String> {
        let mut status = self.current_status()?;
        if !status.is_object() {
            status = json!({});
        }
        edit(&mut status, &self.ctx(now));
        let written = self
            .sim
            .update_status(&self.gvr(), &self.namespace, &self.name, status)?;
        self.last_rv = rv_of(&written);
        Ok(self.last_rv.clone())
    }

    pub(super) fn patch_spec(&mut self, patch: Value) -> anyhow::Result<String> {
        let written = self
            .sim
            .patch_merge(&self.gvr(), &self.namespace, &self.name, patch)?;
        self.last_rv = rv_of(&written);
        Ok(self.last_rv.clone())
    }

    pub(super) fn volcano_two_step(
        &mut self,
        first: &str,
        second: &str,
        reason: &str,
        message: &str,
    ) -> anyhow::Result<String> {
        let now = self.tick();
        let counts = Counts {
            terminating: self.total,
            ..Counts::default()
        };
        self.write_status(&now, |s, c| {
            volcano::transition(s, c, first, reason, message, counts)
        })?;
        let now = self.tick();
        self.write_status(&now, |s, c| {
            volcano::transition(s, c, second, reason, message, Counts::default())
        })
    }

    pub(super) fn create_pods(&mut self, planned: Vec<PodInfo>) -> anyhow::Result<()> {
        let now = self.tick();
        for pod in planned {
            let object = pods::pod_object(
                self.flavor,
                &self.namespace,
                &self.name,
                &self.uid,
                &pod,
                &now,
                &self.ray_cluster,
            );
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
            self.sim
                .set_pod_log(&self.namespace, &pod.name, &pod.container, false, line);
            self.pods.push(pod);
        }
        Ok(())
    }

    /// Writes pod statuses; pods that no longer exist are skipped.
    pub(super) fn write_pods(
        &self,
        status: impl Fn(usize, &PodInfo) -> Option<Value>,
    ) -> anyhow::Result<()> {
        for (i, pod) in self.pods.iter().enumerate() {
            let Some(status) = status(i, pod) else {
                continue;
            };
            match self
                .sim
                .update_status(&Gvr::POD, &self.namespace, &pod.name, status)
            {
                Ok(_) => {}
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e).with_context(|| format!("updating pod {}", pod.name)),
            }
        }
        Ok(())
    }

    pub(super) fn append_logs(&self, line: impl Fn(&PodInfo) -> Option<String>) {
        for pod in &self.pods {
            if let Some(line) = line(pod) {
                self.sim.append_pod_log(
                    &self.namespace,
                    &pod.name,
                    &pod.container,
                    line.as_bytes(),
                );
            }
        }
    }

    /// Terminates every pod: all complete, or (with `failure`) the first errors and the rest
    /// are killed.
    pub(super) fn finish_pods(&mut self, now: &str, failure: bool) -> anyhow::Result<()> {
        let started = self
            .pods_started
            .get_or_insert_with(|| now.to_string())
            .clone();
        let restarts = self.restarts;
        self.write_pods(|i, p| {
            if self.dead_pods.contains(&p.name) {
                return None;
            }
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

pub(super) fn rv_of(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

pub(super) fn non_empty(value: &str, default: &str) -> String {
    if value.is_empty() {
        default.to_string()
    } else {
        value.to_string()
    }
}

pub(super) fn first_task(c: &Ctx) -> String {
    format!("{}-master-0", c.name)
}
