//! Building a job before it is created: replicas, labels, annotations, finalizers, pods.

use std::collections::BTreeMap;

use anyhow::Context as _;
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

    /// Creates the job (and its pods, with logs) in the simulator.
    pub fn create(self, sim: &SimCluster) -> anyhow::Result<JobDriver> {
        let mut metadata = json!({ "labels": self.labels, "annotations": self.annotations });
        if !self.finalizers.is_empty() {
            metadata["finalizers"] = json!(self.finalizers);
        }
        let object = spec::job_object(
            self.flavor,
            &self.namespace,
            &self.name,
            self.workers,
            metadata,
        );
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
            pace: self.pace,
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
