//! Job objects as users submit them: a realistic `spec` per flavour, so the daemon's
//! normalizers and plugins see the fields they would see in production (replica specs, run
//! policies, queues, templates).

use serde_json::{Value, json};

use super::Flavor;

/// Image used by every generated container.
pub(crate) const IMAGE: &str = "registry.example.com/ml/train:1.4.2";

fn container(name: &str) -> Value {
    json!({
        "name": name,
        "image": IMAGE,
        "command": ["python", "-u", "train.py"],
        "args": ["--epochs", "3"],
        "resources": { "limits": { "cpu": "2", "memory": "4Gi" }, "requests": { "cpu": "1", "memory": "2Gi" } },
    })
}

/// A JobSet replicated job: `replicas` single-pod Jobs.
fn replicated_job(name: &str, container_name: &str, replicas: u32) -> Value {
    json!({
        "name": name,
        "replicas": replicas,
        "template": { "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "completionMode": "Indexed",
            "template": template(container_name, "OnFailure"),
        } },
    })
}

fn template(container_name: &str, restart_policy: &str) -> Value {
    json!({
        "metadata": {},
        "spec": { "restartPolicy": restart_policy, "containers": [container(container_name)] },
    })
}

/// The job as submitted: `apiVersion`, `kind`, `metadata` (name, namespace, labels,
/// annotations, finalizers) and `spec`. `workers` is the number of worker replicas.
pub(crate) fn job_object(
    flavor: Flavor,
    namespace: &str,
    name: &str,
    workers: u32,
    metadata: Value,
) -> Value {
    let mut meta = metadata;
    meta["name"] = json!(name);
    meta["namespace"] = json!(namespace);
    let spec = match flavor {
        Flavor::Batch => json!({
            "parallelism": workers,
            "completions": workers,
            "backoffLimit": 6,
            "completionMode": "NonIndexed",
            "suspend": false,
            "manualSelector": false,
            "podReplacementPolicy": "TerminatingOrFailed",
            "template": template("trainer", "OnFailure"),
        }),
        Flavor::Volcano => json!({
            "schedulerName": "volcano",
            "queue": "default",
            "minAvailable": workers + 1,
            "maxRetry": 3,
            "policies": [
                { "event": "PodEvicted", "action": "RestartJob" },
                { "event": "PodFailed", "action": "RestartJob" },
            ],
            "plugins": { "env": [], "svc": [] },
            "tasks": [
                { "name": "master", "replicas": 1, "template": template("master", "OnFailure") },
                { "name": "worker", "replicas": workers, "template": template("worker", "OnFailure") },
            ],
        }),
        Flavor::PyTorch => json!({
            "runPolicy": { "cleanPodPolicy": "None", "backoffLimit": 3, "suspend": false },
            "pytorchReplicaSpecs": {
                "Master": { "replicas": 1, "restartPolicy": "OnFailure", "template": template("pytorch", "OnFailure") },
                "Worker": { "replicas": workers, "restartPolicy": "OnFailure", "template": template("pytorch", "OnFailure") },
            },
        }),
        Flavor::Mpi => json!({
            "slotsPerWorker": 1,
            "runPolicy": { "cleanPodPolicy": "Running", "backoffLimit": 3, "suspend": false },
            "mpiImplementation": "OpenMPI",
            "sshAuthMountPath": "/root/.ssh",
            "launcherCreationPolicy": "AtStartup",
            "mpiReplicaSpecs": {
                "Launcher": { "replicas": 1, "restartPolicy": "OnFailure", "template": template("launcher", "OnFailure") },
                "Worker": { "replicas": workers, "restartPolicy": "Never", "template": template("worker", "Never") },
            },
        }),
        // The runtime (a ClusterTrainingRuntime) supplies the JobSet; the TrainJob overrides
        // the trainer's image, command and size.
        Flavor::TrainJob => json!({
            "runtimeRef": {
                "name": "torch-distributed",
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
            },
            "trainer": {
                "image": IMAGE,
                "command": ["torchrun", "train.py"],
                "args": ["--epochs", "3"],
                "numNodes": workers,
                "resourcesPerNode": { "limits": { "cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1" } },
            },
            "suspend": false,
            "managedBy": "trainer.kubeflow.org/trainjob-controller",
        }),
        // As the JobSet webhook leaves it: startup, success and network policies defaulted.
        Flavor::JobSet => json!({
            "replicatedJobs": [
                replicated_job("leader", "leader", 1),
                replicated_job("workers", "worker", workers),
            ],
            "failurePolicy": { "maxRestarts": 3, "restartStrategy": "Recreate" },
            "successPolicy": { "operator": "All", "targetReplicatedJobs": [] },
            "startupPolicy": { "startupPolicyOrder": "AnyOrder" },
            "network": { "enableDNSHostnames": true, "publishNotReadyAddresses": true },
            "suspend": false,
        }),
        Flavor::RayJob => json!({
            "entrypoint": "python -u train.py --epochs 3",
            "submissionMode": "K8sJobMode",
            "backoffLimit": 2,
            "shutdownAfterJobFinishes": true,
            "ttlSecondsAfterFinished": 600,
            "suspend": false,
            "rayClusterSpec": {
                "rayVersion": "2.46.0",
                "headGroupSpec": { "rayStartParams": {}, "template": template("ray-head", "Always") },
                "workerGroupSpecs": [{
                    "groupName": "workergroup",
                    "replicas": workers,
                    "minReplicas": workers,
                    "maxReplicas": workers,
                    "rayStartParams": {},
                    "template": template("ray-worker", "Always"),
                }],
            },
        }),
    };
    json!({
        "apiVersion": flavor.gvr().api_version(),
        "kind": flavor.kind(),
        "metadata": meta,
        "spec": spec,
    })
}
