//! The Volcano jobs the benches stream: the event-path bench creates them in the simulator,
//! the parts bench makes the same watch lines without one.

use serde_json::{Value, json};

/// A Volcano job of about 1.6 KB, as a training platform would submit it.
pub fn volcano_job(i: usize) -> Value {
    json!({
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {
            "name": format!("train-{i:07}"),
            "namespace": "ml",
            "labels": {"team": "vision", "queue": "a100", "app.kubernetes.io/managed-by": "platform"},
            "annotations": {"platform.example.com/owner": "alice@example.com", "platform.example.com/cost-center": "cv-42"}
        },
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": 2,
            "queue": "a100",
            "maxRetry": 3,
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
            "plugins": {"env": [], "svc": [], "ssh": []},
            "tasks": [{
                "name": "worker",
                "replicas": 2,
                "template": {"spec": {
                    "restartPolicy": "OnFailure",
                    "containers": [{
                        "name": "trainer",
                        "image": "registry.example.com/ml/trainer:2026.11.3",
                        "command": ["torchrun", "--nproc_per_node=8", "train.py", "--config", "configs/resnet152.yaml"],
                        "env": [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "OMP_NUM_THREADS", "value": "8"}],
                        "resources": {
                            "requests": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"},
                            "limits": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}
                        },
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "shm", "mountPath": "/dev/shm"}]
                    }],
                    "volumes": [
                        {"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}},
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}
                    ]
                }}
            }]
        }
    })
}

/// A Volcano job of about 250 bytes: what the million-job memory run creates, so that the
/// simulator holding them fits beside the daemon.
pub fn small_volcano_job(i: usize) -> Value {
    json!({
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": format!("train-{i:07}"), "namespace": "ml"},
        "spec": {"schedulerName": "volcano", "minAvailable": 2, "queue": "a100"}
    })
}

/// The status of a job's `step`th version after creation: Pending, then Running with the
/// pod counts moving, the last one Completed.
pub fn volcano_status(step: usize, last: bool) -> Value {
    let phase = if last {
        "Completed"
    } else if step == 1 {
        "Pending"
    } else {
        "Running"
    };
    json!({
        "state": {"phase": phase, "lastTransitionTime": format!("2026-11-26T00:{:02}:00Z", step % 60)},
        "minAvailable": 2,
        "pending": if step == 1 { 2 } else { 0 },
        "running": if step > 1 && !last { 2 } else { 0 },
        "succeeded": if last { 2 } else { 0 },
        "failed": 0,
        "version": step,
        "retryCount": 0,
    })
}
