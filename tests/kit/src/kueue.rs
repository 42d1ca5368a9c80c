//! A simulated Kueue: the `Workload` (`kueue.x-k8s.io/v1beta2`) of a job it manages, written as
//! Kueue's scheduler and job reconciler write it, and the job held and let go as Kueue does
//! (through the [`JobDriver`]'s `suspended` / `admitted` steps). The facts of a job waiting for
//! quota, admitted, preempted and requeued live on the Workload, not on the job; this lets a
//! test put them there in the shapes a cluster shows, and know when each was written.
//!
//! [`SimKueue::install`] serves the Workload kind; [`SimKueue::submit`] creates a job's
//! Workload, waiting for quota; a [`Workload`] then plays Kueue's steps on it and its job. Each
//! condition is set as `meta.SetStatusCondition` sets it (its `lastTransitionTime` moves only
//! when its status flips; reason and message are overwritten), with `observedGeneration`:
//!
//! | step | the Workload's status | the job |
//! |---|---|---|
//! | `submit` | created without status (as the job reconciler creates it), then `QuotaReserved=False/Pending` "couldn't assign flavors to pod set main: …" | — |
//! | `waiting(r, m)` | `QuotaReserved=False/r` with message `m` (the scheduler's next verdict) | — |
//! | `admit` | `admission {clusterQueue, podSetAssignments}`, `QuotaReserved=True/QuotaReserved`, `Evicted`/`Preempted` (if True) → `False/QuotaReserved` "Previously: …", `Admitted=True/Admitted` — one write, no admission checks | let go: `admitted` (batch Job, AI kinds), else `resumed` + `running` |
//! | `preempt(r, p)` | `Evicted=True/Preempted` and `Preempted=True/r`, both naming the preemptor, `schedulingStats.evictions[Preempted]` +1; then, once the job stopped: admission removed, `QuotaReserved=False/Pending`, `Admitted=False/NoReservation`, `accumulatedPastExecutionTimeSeconds` + the seconds admitted, `Requeued=False/Preempted`, `requeueState {count +1, requeueAt}` | `suspended` between the two writes |
//! | `requeue` | `Requeued=True/BackoffFinished`, `requeueAt` removed, `QuotaReserved=False/Pending` with the scheduler's message | — |
//! | `finish(ok, m)` | `Finished=True/Succeeded` or `/Failed`, message `m` | — |
//!
//! Where the kit departs from Kueue, on purpose: Kueue requeues a preempted Workload at once
//! (`Requeued=True/Preempted` in the write that releases its quota) and counts `requeueState`
//! only for the evictions it backs off from (`PodsReadyTimeout`, admission checks); the kit
//! plays that backoff for a preemption too, so a test chooses when the new wait begins and meets
//! every field a reader reads. Like Kueue, it keeps `Evicted=True` until quota is reserved
//! again: a requeued Workload waits with `Evicted=True` beside `Requeued=True`. One pod set,
//! `main`, holds all of the job's pods (Kueue names a multi-role kind's pod sets after its
//! roles); no finalizer is added, so deleting the job garbage-collects its Workload at once.
//!
//! Times: whole seconds, as Kubernetes writes them, from a clock of the Workload's own that
//! moves at least one second a step and never lags the wall (the lifecycle's `Pace::Seconds`),
//! so no two steps share a time. [`Workload::log`] has the time of every step as written
//! (its creation: the simulator's `creationTimestamp`), for a test to compute what a reader
//! should say (the wait since the last requeue or the creation, the seconds admitted).

use anyhow::{Context as _, bail};
use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::lifecycle::JobDriver;
use crate::lifecycle::conditions::{self, Condition};
use crate::sim::{Gvr, ResourceKind, SimCluster};

/// The label Kueue puts on a Workload: its job's uid (how a Workload is found from its job).
pub const JOB_UID_LABEL: &str = "kueue.x-k8s.io/job-uid";

/// The label a user puts on a job for Kueue to manage it: its LocalQueue.
pub const QUEUE_NAME_LABEL: &str = "kueue.x-k8s.io/queue-name";

/// The flavor every admission assigns.
pub const FLAVOR: &str = "default-flavor";

/// Kueue on one simulated cluster. Cheap to clone.
#[derive(Clone)]
pub struct SimKueue {
    sim: SimCluster,
}

/// A step of Kueue's, as [`Workload::log`] records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KueueStep {
    /// Created: by Kueue's rule the first wait begins here (`metadata.creationTimestamp`).
    Created,
    /// The scheduler found no room: `QuotaReserved=False` with this reason.
    Waiting { reason: String },
    /// Quota reserved and admitted in this ClusterQueue.
    Admitted { cluster_queue: String },
    /// Evicted by preemption, with Kueue's preemption reason (`InClusterQueue`, …).
    Preempted { reason: String },
    /// Its quota released and admission removed, once the preempted job stopped.
    Released,
    /// Back in the queue (`Requeued=True`): the next wait begins here.
    Requeued,
    /// `Finished=True`.
    Finished { succeeded: bool },
}

impl SimKueue {
    /// Kueue on `sim`: its Workload kind registered, unless it is already (a test may have
    /// registered it its own way).
    pub fn install(sim: &SimCluster) -> SimKueue {
        if !sim.serves(&Gvr::KUEUE_WORKLOAD) {
            let Gvr {
                group,
                version,
                plural,
            } = Gvr::KUEUE_WORKLOAD;
            sim.register_kind(ResourceKind::new(group, version, "Workload", plural, true));
        }
        SimKueue { sim: sim.clone() }
    }

    /// Kueue's job reconciler creates the Workload of `job` for LocalQueue `local_queue`, and
    /// its scheduler finds no quota for it: `QuotaReserved=False/Pending`. Named as Kueue
    /// names it (`<kind>-<job>-<hash>`), in the job's namespace, labelled with the job's uid
    /// and owned by the job (controller). Kueue only manages a job created suspended with the
    /// `kueue.x-k8s.io/queue-name` label: both are the test's to give the job.
    pub fn submit(&self, job: &JobDriver, local_queue: &str) -> anyhow::Result<Workload> {
        let kind = job.flavor().kind();
        let name = format!(
            "{}-{}-{}",
            kind.to_lowercase(),
            job.name(),
            short_hash(job.uid())
        );
        let template = job
            .object()?
            .pointer("/spec/template")
            .cloned()
            .unwrap_or_else(|| json!({ "spec": { "containers": [] } }));
        let object = json!({
            "apiVersion": Gvr::KUEUE_WORKLOAD.api_version(),
            "kind": "Workload",
            "metadata": {
                "name": name,
                "namespace": job.namespace(),
                "labels": { JOB_UID_LABEL: job.uid() },
                "ownerReferences": [{
                    "apiVersion": job.gvr().api_version(), "kind": kind, "name": job.name(),
                    "uid": job.uid(), "controller": true, "blockOwnerDeletion": true,
                }],
            },
            "spec": {
                "active": true,
                "queueName": local_queue,
                "priority": 0,
                "podSets": [{ "name": "main", "count": job.pod_count(), "template": template }],
            },
        });
        let created = self
            .sim
            .create(&Gvr::KUEUE_WORKLOAD, object)
            .with_context(|| format!("creating Workload {name} of {}", job.name()))?;
        let at = created["metadata"]["creationTimestamp"]
            .as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc))
            .context("the created Workload has no creationTimestamp")?;
        let mut workload = Workload {
            sim: self.sim.clone(),
            namespace: job.namespace().to_string(),
            name,
            uid: created["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .into(),
            job_uid: job.uid().to_string(),
            pods: job.pod_count(),
            clock: at,
            log: vec![(KueueStep::Created, at)],
        };
        workload.waiting("Pending", &no_quota_message())?;
        Ok(workload)
    }
}

/// The scheduler's message for a Workload it found no room for.
fn no_quota_message() -> String {
    format!(
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu \
         in flavor {FLAVOR}, 8 more needed"
    )
}

/// Five hex characters of `text`'s hash, as Kueue ends a Workload's name.
fn short_hash(text: &str) -> String {
    let d = Sha256::digest(text.as_bytes());
    format!("{:02x}{:02x}{:02x}", d[0], d[1], d[2])[..5].to_string()
}

/// The words Kueue's preemption message gives each preemption reason.
fn preemption_words(reason: &str) -> &'static str {
    match reason {
        "InClusterQueue" => "prioritization in the ClusterQueue",
        "InCohortReclamation" => "reclamation within the cohort",
        "InCohortFairSharing" => "Fair Sharing within the cohort",
        "InCohortReclaimWhileBorrowing" => "reclamation within the cohort while borrowing",
        _ => "UNKNOWN",
    }
}

/// One job's Workload, and Kueue's steps on it (see the module).
pub struct Workload {
    sim: SimCluster,
    namespace: String,
    name: String,
    uid: String,
    job_uid: String,
    pods: u32,
    clock: DateTime<Utc>,
    log: Vec<(KueueStep, DateTime<Utc>)>,
}

impl Workload {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn uid(&self) -> &str {
        &self.uid
    }

    /// The uid of the job it belongs to.
    pub fn job_uid(&self) -> &str {
        &self.job_uid
    }

    /// Every step played, with the time it wrote, oldest first.
    pub fn log(&self) -> &[(KueueStep, DateTime<Utc>)] {
        &self.log
    }

    /// The time of the last step `which` accepts.
    pub fn last(&self, which: impl Fn(&KueueStep) -> bool) -> Option<DateTime<Utc>> {
        self.log
            .iter()
            .rev()
            .find(|(s, _)| which(s))
            .map(|(_, t)| *t)
    }

    /// Preemptions played.
    pub fn preemptions(&self) -> u32 {
        self.count(|s| matches!(s, KueueStep::Preempted { .. }))
    }

    /// Requeues played.
    pub fn requeues(&self) -> u32 {
        self.count(|s| *s == KueueStep::Requeued)
    }

    /// The Workload as stored now.
    pub fn object(&self) -> anyhow::Result<Value> {
        Ok(self
            .sim
            .get(&Gvr::KUEUE_WORKLOAD, &self.namespace, &self.name)?)
    }

    /// The scheduler tried again and found no room: `QuotaReserved=False` with `reason`
    /// (`Pending`, `WaitingForQuota`, `NoMatchingFlavor`, …) and `message`. An error while
    /// the Workload holds quota.
    pub fn waiting(&mut self, reason: &str, message: &str) -> anyhow::Result<()> {
        self.holding(false, "wait for quota")?;
        let at = self.write(|s, now| set(s, "QuotaReserved", false, reason, message, now))?;
        let reason = reason.to_string();
        self.log.push((KueueStep::Waiting { reason }, at));
        Ok(())
    }

    /// Kueue admits the Workload in `cluster_queue`, its pod set using `resources` (totals,
    /// e.g. `("nvidia.com/gpu", 8)`), then lets its job go: [`JobDriver::admitted`] for the
    /// kinds created suspended, else [`JobDriver::resumed`] and [`JobDriver::running`].
    /// Returns the job's resourceVersion after its last write. An error before anything is
    /// written while the Workload holds quota, when `job` is not its job, or when a job of a
    /// kind created suspended is not suspended.
    pub fn admit(
        &mut self,
        job: &mut JobDriver,
        cluster_queue: &str,
        resources: &[(&str, u64)],
    ) -> anyhow::Result<String> {
        self.owned_by(job)?;
        self.holding(false, "be admitted")?;
        let suspended = job.object()?["spec"]["suspend"] == true;
        if job.flavor().waits_for_admission() && !suspended {
            bail!(
                "{} is not suspended: Kueue admits only a job it holds",
                job.name()
            );
        }
        let usage: Map<String, Value> = resources
            .iter()
            .map(|(name, n)| (name.to_string(), json!(n.to_string())))
            .collect();
        let flavors: Map<String, Value> = resources
            .iter()
            .map(|(name, _)| (name.to_string(), json!(FLAVOR)))
            .collect();
        let admission = json!({ "clusterQueue": cluster_queue, "podSetAssignments": [
            { "name": "main", "flavors": flavors, "resourceUsage": usage, "count": self.pods },
        ] });
        let reserved = format!("Quota reserved in ClusterQueue {cluster_queue}");
        let at = self.write(|s, now| {
            s["admission"] = admission;
            set(s, "QuotaReserved", true, "QuotaReserved", &reserved, now);
            for kind in ["Evicted", "Preempted"] {
                if conditions::is_true(s, kind) {
                    let before = conditions::find(s, kind)
                        .and_then(|c| c["message"].as_str())
                        .unwrap_or_default();
                    let message = format!("Previously: {before}");
                    set(s, kind, false, "QuotaReserved", &message, now);
                }
            }
            set(
                s,
                "Admitted",
                true,
                "Admitted",
                "The workload is admitted",
                now,
            );
        })?;
        let cluster_queue = cluster_queue.to_string();
        self.log.push((KueueStep::Admitted { cluster_queue }, at));
        if job.flavor().waits_for_admission() {
            job.admitted()
        } else {
            job.resumed()?;
            job.running()
        }
    }

    /// Kueue preempts the admitted Workload for `reason` (`InClusterQueue`,
    /// `InCohortReclamation`, `InCohortFairSharing`, `InCohortReclaimWhileBorrowing`) to make
    /// room for the Workload of the job whose uid is `preemptor` (named in the messages, as
    /// Kueue names it), suspends its job and, once it stopped, releases its quota (see the
    /// module). Returns the job's resourceVersion after it was suspended.
    pub fn preempt(
        &mut self,
        job: &mut JobDriver,
        reason: &str,
        preemptor: &str,
    ) -> anyhow::Result<String> {
        self.owned_by(job)?;
        self.holding(true, "be preempted")?;
        let status = self.status()?;
        let cluster_queue = status["admission"]["clusterQueue"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let preemptor_path = if reason == "InClusterQueue" {
            format!("/{cluster_queue}")
        } else {
            "UNKNOWN".to_string()
        };
        let message = format!(
            "Preempted to accommodate a workload (UID: {}, JobUID: {preemptor}) due to {}; \
             preemptor path: {preemptor_path}; preemptee path: /{cluster_queue}",
            crate::sim::new_uid(),
            preemption_words(reason),
        );
        let at = self.write(|s, now| {
            set(s, "Evicted", true, "Preempted", &message, now);
            set(s, "Preempted", true, reason, &message, now);
            count_eviction(s, "Preempted");
        })?;
        let reason = reason.to_string();
        self.log.push((KueueStep::Preempted { reason }, at));

        let rv = job.suspended()?;
        let at = self.write(|s, now| {
            if let Some(map) = s.as_object_mut() {
                map.remove("admission");
            }
            set(s, "QuotaReserved", false, "Pending", &message, now);
            let admitted = conditions::find(s, "Admitted")
                .filter(|c| c["status"] == "True")
                .and_then(|c| c["lastTransitionTime"].as_str())
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok());
            if let (Some(since), Ok(until)) = (admitted, DateTime::parse_from_rfc3339(now)) {
                let past = s["accumulatedPastExecutionTimeSeconds"]
                    .as_i64()
                    .unwrap_or(0);
                let seconds = (until - since).num_seconds();
                s["accumulatedPastExecutionTimeSeconds"] = json!(past + seconds);
                // Kueue's backoff: 60 s, doubled per requeue.
                let count = s["requeueState"]["count"].as_u64().unwrap_or(0) + 1;
                let wait = 60i64 << (count - 1).min(10);
                let at = (until + chrono::Duration::seconds(wait)).with_timezone(&Utc);
                let at = at.to_rfc3339_opts(SecondsFormat::Secs, true);
                s["requeueState"] = json!({ "count": count, "requeueAt": at });
            }
            let none = "The workload has no reservation";
            set(s, "Admitted", false, "NoReservation", none, now);
            set(s, "Requeued", false, "Preempted", &message, now);
        })?;
        self.log.push((KueueStep::Released, at));
        Ok(rv)
    }

    /// Its backoff over, Kueue puts the preempted Workload back in its queue:
    /// `Requeued=True/BackoffFinished` (the new wait begins), and the scheduler finds no room
    /// yet (`QuotaReserved=False/Pending`). An error unless it was evicted and waits for
    /// its requeue (`Requeued=False`).
    pub fn requeue(&mut self) -> anyhow::Result<()> {
        self.holding(false, "be requeued")?;
        let status = self.status()?;
        if conditions::find(&status, "Requeued").is_none_or(|c| c["status"] != "False") {
            bail!(
                "Workload {} waits for no requeue: it was not evicted",
                self.name
            );
        }
        let message = no_quota_message();
        let at = self.write(|s, now| {
            let backoff = "The workload backoff was finished";
            set(s, "Requeued", true, "BackoffFinished", backoff, now);
            if let Some(state) = s["requeueState"].as_object_mut() {
                state.remove("requeueAt");
            }
            set(s, "QuotaReserved", false, "Pending", &message, now);
        })?;
        self.log.push((KueueStep::Requeued, at));
        Ok(())
    }

    /// Its job finished: `Finished=True`, reason `Succeeded` or `Failed`, with `message`
    /// (Kueue copies the job's own: a batch Job's `Reached expected number of succeeded pods`
    /// or `Job has reached the specified backoff limit`).
    pub fn finish(&mut self, succeeded: bool, message: &str) -> anyhow::Result<()> {
        let reason = if succeeded { "Succeeded" } else { "Failed" };
        let at = self.write(|s, now| set(s, "Finished", true, reason, message, now))?;
        self.log.push((KueueStep::Finished { succeeded }, at));
        Ok(())
    }

    // ----- internals -------------------------------------------------------------------------

    fn count(&self, which: impl Fn(&KueueStep) -> bool) -> u32 {
        self.log.iter().filter(|(s, _)| which(s)).count() as u32
    }

    fn status(&self) -> anyhow::Result<Value> {
        let status = self.object()?.get("status").cloned();
        Ok(status.filter(Value::is_object).unwrap_or_else(|| json!({})))
    }

    /// An error unless the Workload holds quota (`QuotaReserved=True`) as `step` needs.
    fn holding(&self, needed: bool, step: &str) -> anyhow::Result<()> {
        let holds = conditions::is_true(&self.status()?, "QuotaReserved");
        if holds != needed {
            let what = if holds { "holds" } else { "holds no" };
            bail!("Workload {} {what} quota: it cannot {step}", self.name);
        }
        Ok(())
    }

    fn owned_by(&self, job: &JobDriver) -> anyhow::Result<()> {
        if job.uid() != self.job_uid {
            bail!("{} is not the job of Workload {}", job.name(), self.name);
        }
        Ok(())
    }

    /// The time of the next step: a second after the last at least, never behind the wall.
    fn tick(&mut self) -> DateTime<Utc> {
        self.clock = (self.clock + chrono::Duration::seconds(1)).max(Utc::now().trunc_subsecs(0));
        self.clock
    }

    /// Reads the status, lets `edit` change it (with the step's time as written), stamps the
    /// conditions with the object's generation, and writes it through `/status`. Returns the
    /// step's time.
    fn write(&mut self, edit: impl FnOnce(&mut Value, &str)) -> anyhow::Result<DateTime<Utc>> {
        let at = self.tick();
        let now = at.to_rfc3339_opts(SecondsFormat::Secs, true);
        let object = self.object()?;
        let generation = object["metadata"]["generation"].as_i64().unwrap_or(1);
        let mut status = object.get("status").cloned().unwrap_or_else(|| json!({}));
        if !status.is_object() {
            status = json!({});
        }
        edit(&mut status, &now);
        if let Some(list) = status["conditions"].as_array_mut() {
            for condition in list {
                condition["observedGeneration"] = json!(generation);
            }
        }
        self.sim
            .update_status(&Gvr::KUEUE_WORKLOAD, &self.namespace, &self.name, status)
            .with_context(|| format!("writing the status of Workload {}", self.name))?;
        Ok(at)
    }
}

/// Sets a condition as `meta.SetStatusCondition` does.
fn set(status: &mut Value, kind: &str, value: bool, reason: &str, message: &str, now: &str) {
    let condition = Condition {
        kind,
        value,
        reason,
        message,
    };
    conditions::set_status_condition(status, &condition, now);
}

/// One more eviction for `reason` in `schedulingStats.evictions` (no underlying cause).
fn count_eviction(status: &mut Value, reason: &str) {
    if !status["schedulingStats"].is_object() {
        status["schedulingStats"] = json!({});
    }
    if !status["schedulingStats"]["evictions"].is_array() {
        status["schedulingStats"]["evictions"] = json!([]);
    }
    let Some(evictions) = status["schedulingStats"]["evictions"].as_array_mut() else {
        return;
    };
    match evictions
        .iter_mut()
        .find(|e| e["reason"] == reason && e["underlyingCause"] == "")
    {
        Some(entry) => entry["count"] = json!(entry["count"].as_u64().unwrap_or(0) + 1),
        None => evictions.push(json!({ "reason": reason, "underlyingCause": "", "count": 1 })),
    }
}

#[cfg(test)]
mod tests;
