//! The pods a job's controller would create, labelled and owned as the real controllers do,
//! so the daemon can find a job's pods (by the job-name label or by owner reference) and fetch
//! their logs.

use serde_json::{Value, json};

use super::Flavor;
use super::spec::IMAGE;

/// One pod of a driven job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    /// Pod name.
    pub name: String,
    /// Its single container.
    pub container: String,
    /// Replica type / task name: `master`, `worker`, `launcher` (batch: `trainer`).
    pub role: String,
    /// Index within the role.
    pub index: u32,
}

/// Five characters as the apiserver's `generateName` and the Job controller append.
fn suffix() -> String {
    (0..5)
        .map(|_| b"bcdfghjklmnpqrstvwxz2456789"[fastrand::usize(..27)] as char)
        .collect()
}

/// `name` and a random suffix, as KubeRay names a RayJob's RayCluster and Ray job id.
pub(crate) fn with_suffix(name: &str) -> String {
    format!("{name}-{}", suffix())
}

/// Which pods a job of this flavour gets, with `workers` worker replicas. `ray_cluster` is a
/// RayJob's RayCluster (its pods are named after it); the other flavours ignore it.
pub(crate) fn plan(flavor: Flavor, job: &str, workers: u32, ray_cluster: &str) -> Vec<PodInfo> {
    let pod = |name: String, container: &str, role: &str, index: u32| PodInfo {
        name,
        container: container.to_string(),
        role: role.to_string(),
        index,
    };
    let mut pods = Vec::new();
    match flavor {
        Flavor::Batch => {
            for i in 0..workers.max(1) {
                pods.push(pod(format!("{job}-{}", suffix()), "trainer", "trainer", i));
            }
        }
        Flavor::Volcano => {
            pods.push(pod(format!("{job}-master-0"), "master", "master", 0));
            for i in 0..workers {
                pods.push(pod(format!("{job}-worker-{i}"), "worker", "worker", i));
            }
        }
        Flavor::PyTorch => {
            pods.push(pod(format!("{job}-master-0"), "pytorch", "master", 0));
            for i in 0..workers {
                pods.push(pod(format!("{job}-worker-{i}"), "pytorch", "worker", i));
            }
        }
        Flavor::Mpi => {
            pods.push(pod(format!("{job}-launcher"), "launcher", "launcher", 0));
            for i in 0..workers {
                pods.push(pod(format!("{job}-worker-{i}"), "worker", "worker", i));
            }
        }
        // One child Job `<trainjob>-node-0` of `numNodes` indexed pods.
        Flavor::TrainJob => {
            for i in 0..workers {
                let name = format!("{job}-node-0-{i}-{}", suffix());
                pods.push(pod(name, "node", "node", i));
            }
        }
        // One single-pod Job per replica: `<jobset>-<replicatedJob>-<jobIndex>-<podIndex>-…`.
        Flavor::JobSet => {
            let name = format!("{job}-leader-0-0-{}", suffix());
            pods.push(pod(name, "leader", "leader", 0));
            for i in 0..workers {
                let name = format!("{job}-workers-{i}-0-{}", suffix());
                pods.push(pod(name, "worker", "workers", i));
            }
        }
        // The RayCluster's head and one worker group.
        Flavor::RayJob => {
            let name = format!("{ray_cluster}-head-{}", suffix());
            pods.push(pod(name, "ray-head", "head", 0));
            for i in 0..workers {
                let name = format!("{ray_cluster}-{RAY_GROUP}-worker-{}", suffix());
                pods.push(pod(name, "ray-worker", "worker", i));
            }
        }
    }
    pods
}

/// The RayJob's worker group.
const RAY_GROUP: &str = "workergroup";

/// The pod object, in phase Pending. Its owner reference names the job itself, also for the
/// kinds whose pods really belong to a child object (a JobSet's or TrainJob's child Jobs, a
/// RayJob's RayCluster), which the simulator does not model: so deleting the job still
/// garbage-collects its pods.
pub(crate) fn pod_object(
    flavor: Flavor,
    namespace: &str,
    job: &str,
    job_uid: &str,
    pod: &PodInfo,
    now: &str,
    ray_cluster: &str,
) -> Value {
    let mut labels = json!({});
    labels[flavor.pod_label()] = json!(job);
    let mut annotations = json!({});
    match flavor {
        Flavor::Batch => {
            labels["job-name"] = json!(job);
            labels["controller-uid"] = json!(job_uid);
            labels["batch.kubernetes.io/controller-uid"] = json!(job_uid);
        }
        Flavor::Volcano => {
            labels["volcano.sh/job-namespace"] = json!(namespace);
            labels["volcano.sh/queue-name"] = json!("default");
            labels["volcano.sh/task-spec"] = json!(pod.role);
            labels["volcano.sh/job-version"] = json!("0");
            annotations["scheduling.k8s.io/group-name"] = json!(format!("{job}-{job_uid}"));
            annotations["volcano.sh/task-index"] = json!(pod.index.to_string());
        }
        Flavor::PyTorch | Flavor::Mpi => {
            let operator = if flavor == Flavor::PyTorch {
                "pytorchjob-controller"
            } else {
                "mpi-operator"
            };
            labels["training.kubeflow.org/operator-name"] = json!(operator);
            labels["training.kubeflow.org/replica-type"] = json!(pod.role);
            labels["training.kubeflow.org/replica-index"] = json!(pod.index.to_string());
            if pod.role != "worker" {
                labels["training.kubeflow.org/job-role"] = json!("master");
            }
        }
        Flavor::TrainJob | Flavor::JobSet => {
            // TrainJob: job `node`-0, the pod's index within it; JobSet: job `index`, pod 0.
            let (job_index, pod_index) = if flavor == Flavor::TrainJob {
                (0, pod.index)
            } else {
                (pod.index, 0)
            };
            let child = format!("{job}-{}-{job_index}", pod.role);
            labels["jobset.sigs.k8s.io/replicatedjob-name"] = json!(pod.role);
            labels["jobset.sigs.k8s.io/job-index"] = json!(job_index.to_string());
            labels["jobset.sigs.k8s.io/restart-attempt"] = json!("0");
            labels["batch.kubernetes.io/job-name"] = json!(child);
            labels["job-name"] = json!(child);
            labels["batch.kubernetes.io/job-completion-index"] = json!(pod_index.to_string());
            annotations["batch.kubernetes.io/job-completion-index"] = json!(pod_index.to_string());
            if flavor == Flavor::TrainJob {
                labels["trainer.kubeflow.org/trainjob-ancestor-step"] = json!("trainer");
            }
        }
        Flavor::RayJob => {
            let (node_type, group) = if pod.role == "head" {
                ("head", "headgroup")
            } else {
                ("worker", RAY_GROUP)
            };
            labels["ray.io/originated-from-crd"] = json!("RayJob");
            labels["ray.io/cluster"] = json!(ray_cluster);
            labels["ray.io/node-type"] = json!(node_type);
            labels["ray.io/group"] = json!(group);
            labels["ray.io/is-ray-node"] = json!("yes");
            labels["app.kubernetes.io/name"] = json!("kuberay");
            labels["app.kubernetes.io/created-by"] = json!("kuberay-operator");
        }
    }
    let restart_policy = match flavor {
        Flavor::Mpi if pod.role == "worker" => "Never",
        Flavor::RayJob => "Always",
        _ => "OnFailure",
    };
    let scheduler = if flavor == Flavor::Volcano {
        "volcano"
    } else {
        "default-scheduler"
    };
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": flavor.gvr().api_version(),
                "kind": flavor.kind(),
                "name": job,
                "uid": job_uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "restartPolicy": restart_policy,
            "schedulerName": scheduler,
            "containers": [{ "name": pod.container, "image": IMAGE, "command": ["python", "-u", "train.py"] }],
        },
        "status": { "phase": "Pending", "qosClass": "Burstable", "conditions": [
            { "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastProbeTime": null, "lastTransitionTime": now },
        ] },
    })
}

pub(crate) fn condition(kind: &str, status: bool, now: &str) -> Value {
    json!({ "type": kind, "status": if status { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": now })
}

/// How a container ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    Completed,
    Error,
    Killed,
}

/// Pod status while scheduled but not started.
pub(crate) fn pending_status(pod: &PodInfo, now: &str) -> Value {
    json!({
        "phase": "Pending",
        "qosClass": "Burstable",
        "conditions": [condition("PodScheduled", true, now), condition("Initialized", true, now), condition("Ready", false, now)],
        "containerStatuses": [{
            "name": pod.container, "image": IMAGE, "imageID": "", "ready": false, "restartCount": 0, "started": false,
            "state": { "waiting": { "reason": "ContainerCreating" } },
        }],
    })
}

/// Pod status with its container running (after `restarts` restarts).
pub(crate) fn running_status(
    pod: &PodInfo,
    ip: u32,
    started: &str,
    now: &str,
    restarts: u32,
    ready: bool,
) -> Value {
    let mut container = json!({
        "name": pod.container, "image": IMAGE, "imageID": format!("{IMAGE}@sha256:{:064x}", 0),
        "containerID": format!("containerd://{:064x}", u64::from(restarts) + 1),
        "ready": ready, "restartCount": restarts, "started": true,
        "state": { "running": { "startedAt": now } },
    });
    if restarts > 0 {
        container["lastState"] = json!({ "terminated": {
            "exitCode": 1, "reason": "Error", "startedAt": started, "finishedAt": now,
        } });
    }
    json!({
        "phase": "Running",
        "qosClass": "Burstable",
        "hostIP": "192.168.0.10",
        "podIP": format!("10.244.0.{}", ip % 250 + 2),
        "startTime": started,
        "conditions": [
            condition("PodScheduled", true, started), condition("Initialized", true, started),
            condition("ContainersReady", ready, now), condition("Ready", ready, now),
        ],
        "containerStatuses": [container],
    })
}

/// Pod status once its container has exited.
pub(crate) fn terminated_status(
    pod: &PodInfo,
    started: &str,
    now: &str,
    restarts: u32,
    exit: Exit,
) -> Value {
    let (phase, code, reason) = match exit {
        Exit::Completed => ("Succeeded", 0, "Completed"),
        Exit::Error => ("Failed", 1, "Error"),
        Exit::Killed => ("Failed", 143, "Error"),
    };
    json!({
        "phase": phase,
        "qosClass": "Burstable",
        "hostIP": "192.168.0.10",
        "startTime": started,
        "conditions": [
            condition("PodScheduled", true, started), condition("Initialized", true, started),
            condition("ContainersReady", false, now), condition("Ready", false, now),
        ],
        "containerStatuses": [{
            "name": pod.container, "image": IMAGE, "ready": false, "restartCount": restarts, "started": false,
            "state": { "terminated": { "exitCode": code, "reason": reason, "startedAt": started, "finishedAt": now } },
        }],
    })
}
