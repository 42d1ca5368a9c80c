//! A job's pod failing with a chosen cause, its status written as the kubelet writes it: the
//! shapes a reader of failure causes (why a job failed, not only that it did) meets in a
//! cluster — a container the kernel killed for memory, an image that cannot be pulled, a
//! container restarting in a loop.
//!
//! Only the pod changes: its job's controller reacts on its own time, so a test plays the
//! job's step after it (`failed`, `restarting`), as the order of events in a cluster goes.

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use super::JobDriver;
use super::pods::{PodInfo, condition};
use super::spec::IMAGE;
use crate::sim::Gvr;

/// Why a pod fails, as the kubelet reports it in the pod's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodFailure {
    /// The kernel's OOM killer ended the container (exit 137: 128 + SIGKILL): phase `Failed`,
    /// `state.terminated {reason: OOMKilled, exitCode: 137}`. The last state of a pod whose
    /// container is not restarted; the pod keeps it when the job's later steps finish the
    /// other pods.
    OomKilled,
    /// The image cannot be pulled: phase `Pending`, the container never started,
    /// `state.waiting {reason: ImagePullBackOff}` with the kubelet's back-off message naming
    /// the image.
    ImagePullBackOff,
    /// The container fails each time it starts and the kubelet waits before the next start:
    /// phase `Running`, `restartCount` 3 (or the restarts played so far, if more),
    /// `state.waiting {reason: CrashLoopBackOff}` ("back-off 40s restarting failed
    /// container=…"), the last run in `lastState.terminated {reason: Error, exitCode: 1}`.
    CrashLoopBackOff,
}

impl JobDriver {
    /// The job's first pod fails with `cause` (see [`PodFailure`]), its status written
    /// through `/status` as the kubelet writes it. Returns the pod's name.
    ///
    /// An error when the job has no pod: one built
    /// [`without_pods`](super::JobBuilder::without_pods), one
    /// [`created_suspended`](super::JobBuilder::created_suspended) and not yet
    /// [`admitted`](JobDriver::admitted) (its pods come with its admission), or one whose pod
    /// was deleted.
    pub fn pod_fails(&mut self, cause: PodFailure) -> anyhow::Result<String> {
        let Some(pod) = self.pods.first().cloned() else {
            let why = if self.deferred_pods.is_empty() {
                "it was built without pods"
            } else {
                "it was created suspended and its pods come when it is admitted \
                 (JobDriver::admitted)"
            };
            bail!(
                "{} {}/{} has no pod to fail: {why}",
                self.flavor.kind(),
                self.namespace,
                self.name
            );
        };
        let object = self
            .sim
            .get(&Gvr::POD, &self.namespace, &pod.name)
            .with_context(|| format!("pod {} of {} to fail", pod.name, self.name))?;
        let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
        let now = self.tick();
        let started = self.pods_started.get_or_insert_with(|| now.clone()).clone();
        let status = match cause {
            PodFailure::OomKilled => oom_killed(&pod, &started, &now, self.restarts),
            PodFailure::ImagePullBackOff => image_pull_back_off(&pod, &now),
            PodFailure::CrashLoopBackOff => {
                self.restarts = self.restarts.max(3);
                crash_loop(&pod, uid, &self.namespace, &started, &now, self.restarts)
            }
        };
        self.sim
            .update_status(&Gvr::POD, &self.namespace, &pod.name, status)
            .with_context(|| format!("failing pod {}", pod.name))?;
        if cause == PodFailure::OomKilled && !self.dead_pods.contains(&pod.name) {
            self.dead_pods.push(pod.name.clone());
        }
        Ok(pod.name)
    }
}

/// A container id as containerd reports it, one per start.
fn container_id(start: u32) -> String {
    format!("containerd://{:064x}", u64::from(start) + 1)
}

/// The status of a pod on a node, in `phase`, its container `ready` or not.
fn pod_status(phase: &str, started: &str, now: &str, container: Value) -> Value {
    let not_ready = |kind: &str| {
        let mut c = condition(kind, false, now);
        let name = container["name"].as_str().unwrap_or_default();
        if phase == "Failed" {
            c["reason"] = json!("PodFailed");
        } else {
            c["reason"] = json!("ContainersNotReady");
            c["message"] = json!(format!("containers with unready status: [{name}]"));
        }
        c
    };
    json!({
        "phase": phase,
        "qosClass": "Burstable",
        "hostIP": "192.168.0.10",
        "podIP": "10.244.0.2",
        "startTime": started,
        "conditions": [
            condition("PodScheduled", true, started), condition("Initialized", true, started),
            not_ready("ContainersReady"), not_ready("Ready"),
        ],
        "containerStatuses": [container],
    })
}

fn oom_killed(pod: &PodInfo, started: &str, now: &str, restarts: u32) -> Value {
    let id = container_id(restarts);
    pod_status(
        "Failed",
        started,
        now,
        json!({
            "name": pod.container, "image": IMAGE, "imageID": format!("{IMAGE}@sha256:{:064x}", 0),
            "containerID": id, "ready": false, "restartCount": restarts, "started": false,
            "state": { "terminated": {
                "exitCode": 137, "reason": "OOMKilled", "startedAt": started, "finishedAt": now,
                "containerID": id,
            } },
        }),
    )
}

fn image_pull_back_off(pod: &PodInfo, now: &str) -> Value {
    let message = format!(
        "Back-off pulling image \"{IMAGE}\": ErrImagePull: rpc error: code = NotFound desc = \
         failed to pull and unpack image \"{IMAGE}\": failed to resolve reference \"{IMAGE}\": \
         not found"
    );
    pod_status(
        "Pending",
        now,
        now,
        json!({
            "name": pod.container, "image": IMAGE, "imageID": "", "ready": false,
            "restartCount": 0, "started": false,
            "state": { "waiting": { "reason": "ImagePullBackOff", "message": message } },
        }),
    )
}

fn crash_loop(
    pod: &PodInfo,
    uid: &str,
    namespace: &str,
    started: &str,
    now: &str,
    restarts: u32,
) -> Value {
    // The kubelet's back-off: 10 s, doubled per restart, at most 5 min.
    let back_off = (10u64 << restarts.saturating_sub(1).min(5)).min(300);
    let message = format!(
        "back-off {back_off}s restarting failed container={} pod={}_{namespace}({uid})",
        pod.container, pod.name
    );
    let id = container_id(restarts);
    pod_status(
        "Running",
        started,
        now,
        json!({
            "name": pod.container, "image": IMAGE, "imageID": format!("{IMAGE}@sha256:{:064x}", 0),
            "containerID": id, "ready": false, "restartCount": restarts, "started": false,
            "state": { "waiting": { "reason": "CrashLoopBackOff", "message": message } },
            "lastState": { "terminated": {
                "exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now,
                "containerID": id,
            } },
        }),
    )
}
