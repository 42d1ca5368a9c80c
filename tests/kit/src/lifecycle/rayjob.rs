//! KubeRay `ray.io/v1 RayJob` status as the RayJob controller (KubeRay v1.7) writes it.
//!
//! **No conditions.** The state is two enums, both omitted from the JSON when empty (`""`):
//!
//! - `jobDeploymentStatus`, KubeRay's own: `""` (new) → `Initializing` → `Running` →
//!   `Complete` | `Failed`, plus `Suspending` → `Suspended` and `Retrying` (also `Waiting`,
//!   `ValidationFailed`, not played here);
//! - `jobStatus`, Ray's view of the submitted job: `PENDING`, `RUNNING`, `STOPPED`,
//!   `SUCCEEDED`, `FAILED`. **`STOPPED` ends as `Complete`, not `Failed`**; `FAILED` ends as
//!   `Failed` with `reason: AppFailed`.
//!
//! Alongside: `reason` and `message`; `startTime`, set when the job leaves `""` for
//! `Initializing` — **again on every retry and resume**, so it is the current attempt's start;
//! `endTime`, set when the deployment status becomes terminal; `rayJobInfo.{startTime,endTime}`
//! (Ray's own clock); the counters `succeeded` and `failed` (present from the first write);
//! and the attempt's `jobId`, `rayClusterName` and `dashboardURL`, cleared whenever the
//! cluster is torn down (retry, suspend). The whole status is written at once, and only when
//! one of the enums changed.
//!
//! A retry (`spec.backoffLimit`) is `Retrying` (with the failure, `failed`+1), then `""` once
//! the cluster is gone, then `Initializing` with a new `startTime` and job id. Suspending
//! (`spec.suspend`, as Kueue does) is `Suspending`, then `Suspended` with the attempt's fields
//! cleared; resuming is `""`, then `Initializing`. A RayJob created suspended goes through
//! `Initializing` first: KubeRay only suspends from `Initializing` or `Running`.
//!
//! The driver keeps one RayCluster name for the job's life (KubeRay generates a new one per
//! attempt), so the pods' `ray.io/cluster` label always matches `rayClusterName`; the job id
//! is new for every attempt. `rayClusterStatus` is not written.

use serde_json::{Value, json};

use super::play::Step;
use super::pods;
use super::{Ctx, JobDriver};

const DEPLOYMENT: &str = "jobDeploymentStatus";
const JOB: &str = "jobStatus";

/// Ray's job messages, as the dashboard reports them.
const PENDING_MESSAGE: &str =
    "Job has not started yet. It may be waiting for the runtime environment to be set up.";
const RUNNING_MESSAGE: &str = "Job is currently running.";
const SUCCEEDED_MESSAGE: &str = "Job finished successfully.";
const STOPPED_MESSAGE: &str = "Job was intentionally stopped.";
const FAILED_MESSAGE: &str = "Job entrypoint command failed with exit code 1";

/// The default failure reason: the Ray job itself failed.
const APP_FAILED: &str = "AppFailed";

/// The deployment status, `""` when absent.
fn deployment(status: &Value) -> &str {
    status[DEPLOYMENT].as_str().unwrap_or_default()
}

/// Sets a string field, removing it for `""` as `omitempty` does.
fn put(status: &mut Value, field: &str, value: &str) {
    if value.is_empty() {
        if let Some(map) = status.as_object_mut() {
            map.remove(field);
        }
    } else {
        status[field] = json!(value);
    }
}

/// Fields present from the controller's first write.
fn defaults(status: &mut Value) {
    for counter in ["succeeded", "failed"] {
        if !status[counter].is_u64() {
            status[counter] = json!(0);
        }
    }
    if !status["rayJobInfo"].is_object() {
        status["rayJobInfo"] = json!({});
    }
}

fn bump(status: &mut Value, counter: &str) {
    let next = status[counter].as_u64().unwrap_or(0) + 1;
    status[counter] = json!(next);
}

/// `""` → `Initializing`: a new attempt, with its own job id and start time.
fn initializing(status: &mut Value, ctx: &Ctx, cluster: &str) {
    defaults(status);
    put(status, DEPLOYMENT, "Initializing");
    status["jobId"] = json!(pods::with_suffix(ctx.name));
    status["rayClusterName"] = json!(cluster);
    status["startTime"] = json!(ctx.now);
}

/// The cluster is gone (retry, suspend): the attempt's fields are cleared.
fn torn_down(status: &mut Value, next: &str) {
    if let Some(map) = status.as_object_mut() {
        for field in [
            "jobId",
            "rayClusterName",
            "dashboardURL",
            "message",
            "reason",
        ] {
            map.remove(field);
        }
    }
    status["rayJobInfo"] = json!({});
    put(status, JOB, "");
    put(status, DEPLOYMENT, next);
}

/// A terminal deployment status, with Ray's job status (`""` leaves it as it was).
fn finished(
    status: &mut Value,
    ctx: &Ctx,
    deployment: &str,
    job: &str,
    reason: &str,
    message: &str,
) {
    defaults(status);
    put(status, DEPLOYMENT, deployment);
    if !job.is_empty() {
        put(status, JOB, job);
        status["rayJobInfo"]["endTime"] = json!(ctx.now);
    }
    put(status, "reason", reason);
    put(status, "message", message);
    status["endTime"] = json!(ctx.now);
}

/// The controller's message for a failure reason.
fn failure_message(reason: &str, status: &Value) -> String {
    let start = status["startTime"].as_str().unwrap_or_default();
    match reason {
        APP_FAILED => FAILED_MESSAGE.to_string(),
        "SubmissionFailed" => "Job submission has failed. Reason: BackoffLimitExceeded. Message: Job has reached the specified backoff limit".to_string(),
        "DeadlineExceeded" => format!("The RayJob has passed the activeDeadlineSeconds. StartTime: {start}. ActiveDeadlineSeconds: 3600"),
        "PreRunningDeadlineExceeded" => format!("The RayJob has passed the preRunningDeadlineSeconds. StartTime: {start}. PreRunningDeadlineSeconds: 600"),
        other => format!("RayJob failed: {other}"),
    }
}

/// Plays a step (see the module table in `lifecycle`).
pub(super) fn play(d: &mut JobDriver, step: Step, now: String) -> anyhow::Result<String> {
    let cluster = d.ray_cluster.clone();
    let dashboard = format!("{cluster}-head-svc.{}.svc.cluster.local:8265", d.namespace);
    match step {
        Step::CreatedSuspended => {
            d.write_status(&now, |s, c| initializing(s, c, &cluster))?;
            let now = d.tick();
            d.write_status(&now, |s, _| put(s, DEPLOYMENT, "Suspending"))?;
            let now = d.tick();
            d.write_status(&now, |s, _| torn_down(s, "Suspended"))
        }
        Step::Pending => d.write_status(&now, |s, c| initializing(s, c, &cluster)),
        Step::Running => {
            let mut now = now;
            let mut current = deployment(&d.current_status()?).to_string();
            if current.is_empty() {
                d.write_status(&now, |s, c| initializing(s, c, &cluster))?;
                current = "Initializing".into();
                now = d.tick();
            }
            if current != "Running" {
                d.write_status(&now, |s, _| {
                    defaults(s);
                    put(s, DEPLOYMENT, "Running");
                    put(s, JOB, "PENDING");
                    put(s, "reason", "");
                    put(s, "message", PENDING_MESSAGE);
                    s["dashboardURL"] = json!(dashboard);
                })?;
                now = d.tick();
            }
            d.write_status(&now, |s, c| {
                defaults(s);
                put(s, JOB, "RUNNING");
                put(s, "reason", "");
                put(s, "message", RUNNING_MESSAGE);
                if !s["rayJobInfo"]["startTime"].is_string() {
                    s["rayJobInfo"]["startTime"] = json!(c.now);
                }
            })
        }
        Step::Restarting => {
            d.write_status(&now, |s, c| {
                defaults(s);
                put(s, DEPLOYMENT, "Retrying");
                put(s, JOB, "FAILED");
                put(s, "reason", APP_FAILED);
                put(s, "message", FAILED_MESSAGE);
                s["rayJobInfo"]["endTime"] = json!(c.now);
                bump(s, "failed");
            })?;
            let now = d.tick();
            d.write_status(&now, |s, _| torn_down(s, ""))?;
            let now = d.tick();
            d.write_status(&now, |s, c| initializing(s, c, &cluster))
        }
        Step::Succeeded => {
            d.finish_pods(&now, false)?;
            d.write_status(&now, |s, c| {
                finished(s, c, "Complete", "SUCCEEDED", "", SUCCEEDED_MESSAGE);
                bump(s, "succeeded");
            })
        }
        Step::Stopped => {
            d.finish_pods(&now, false)?;
            d.write_status(&now, |s, c| {
                finished(s, c, "Complete", "STOPPED", "", STOPPED_MESSAGE);
            })
        }
        Step::Failed(reason) => {
            let reason = if reason.is_empty() {
                APP_FAILED
            } else {
                reason
            };
            // Only the Ray job's own failure moves `jobStatus`; a deadline or a failed
            // submission leaves it where it was.
            let job = if reason == APP_FAILED { "FAILED" } else { "" };
            d.finish_pods(&now, true)?;
            d.write_status(&now, |s, c| {
                let message = failure_message(reason, s);
                finished(s, c, "Failed", job, reason, &message);
                bump(s, "failed");
            })
        }
        Step::Suspended => {
            d.patch_spec(json!({ "spec": { "suspend": true } }))?;
            d.write_status(&now, |s, _| put(s, DEPLOYMENT, "Suspending"))?;
            let now = d.tick();
            d.write_status(&now, |s, _| torn_down(s, "Suspended"))
        }
        Step::Resumed => {
            d.patch_spec(json!({ "spec": { "suspend": false } }))?;
            d.write_status(&now, |s, _| {
                put(s, JOB, "");
                put(s, DEPLOYMENT, "");
            })?;
            let now = d.tick();
            d.write_status(&now, |s, c| initializing(s, c, &cluster))
        }
    }
}
