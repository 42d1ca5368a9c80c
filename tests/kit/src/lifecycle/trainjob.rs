//! Kubeflow Trainer v2 `trainer.kubeflow.org/v1alpha1 TrainJob` status as the TrainJob
//! controller (trainer v2.3) writes it.
//!
//! A TrainJob runs as a JobSet of the same name — here one replicated job `node` of one child
//! Job with `numNodes` pods — and most of its status is copied from that JobSet:
//!
//! - `jobsStatus[]` is the JobSet's `replicatedJobsStatus` (`name`, and counts of child
//!   **Jobs**: `ready`, `succeeded`, `failed`, `active`, `suspended`), so the single `node`
//!   entry counts 0 or 1;
//! - `Complete` / `Failed` are the JobSet's `Completed` / `Failed` conditions with the type
//!   renamed and reason, message and time kept (`AllJobsCompleted`, `FailedJobs`,
//!   `ReachedMaxRestarts`, ...); the trainer's own reasons are `DeadlineExceeded` and
//!   `TrainingRuntimeNotSupported`;
//! - `Suspended` is the trainer's: `True/Suspended` while `spec.suspend` is set, `False/Resumed`
//!   after — only if it had been True.
//!
//! Those three are the only condition types, written with `meta.SetStatusCondition` (new types
//! appended, existing ones changed in place). **There is no Running condition**: a running
//! TrainJob has no conditions at all (or `Suspended=False`) and only `jobsStatus` says it
//! runs. Restarts are invisible too — the JobSet's `restarts` is not copied — and show only as
//! the node Job failing (`failed: 1`) and coming back. There are no start or completion
//! times: condition times are all there is.
//!
//! A TrainJob Kueue creates suspended and admits before the trainer has reconciled it never
//! gets a `Suspended` condition: no status and no pods, exactly like one just created. That is
//! what [`created_suspended`](super::JobBuilder::created_suspended) plays.

use anyhow::bail;
use serde_json::{Value, json};

use super::conditions::{Condition, is_true, set_status_condition};
use super::jobset::{self, Counts};
use super::play::Step;
use super::{Ctx, JobDriver};

const SUSPENDED: &str = "Suspended";

/// The message of a failure reason: the JobSet's, naming the node Job, or the trainer's own.
fn failure_message(reason: &str, ctx: &Ctx) -> String {
    let first_failed = format!("{}-node-0", ctx.name);
    match reason {
        "DeadlineExceeded" => "TrainJob exceeded its active deadline".to_string(),
        "TrainingRuntimeNotSupported" => {
            "unsupported runtime: ClusterTrainingRuntime.trainer.kubeflow.org".to_string()
        }
        other => jobset::failure_message(other, &first_failed)
            .unwrap_or_else(|| format!("TrainJob failed: {other}")),
    }
}

/// `jobsStatus`: the `node` replicated job's counts.
fn node(status: &mut Value, counts: Counts) {
    status["jobsStatus"] = json!([counts.entry("node")]);
}

fn set(status: &mut Value, now: &str, kind: &str, value: bool, reason: &str, message: &str) {
    let condition = Condition {
        kind,
        value,
        reason,
        message,
    };
    set_status_condition(status, &condition, now);
}

/// Plays a step (see the module table in `lifecycle`).
pub(super) fn play(d: &mut JobDriver, step: Step, now: String) -> anyhow::Result<String> {
    match step {
        // Nothing: Kueue was faster than the trainer (see the module docs).
        Step::CreatedSuspended => Ok(d.last_rv.clone()),
        Step::Pending => d.write_status(&now, |s, _| node(s, Counts::active(1))),
        Step::Running => d.write_status(&now, |s, _| node(s, Counts::ready(1))),
        Step::Restarting => {
            d.write_status(&now, |s, _| node(s, Counts::failed(1)))?;
            let now = d.tick();
            d.write_status(&now, |s, _| node(s, Counts::ready(1)))
        }
        Step::Succeeded => {
            d.finish_pods(&now, false)?;
            d.write_status(&now, |s, c| {
                let (reason, message) = (
                    jobset::ALL_JOBS_COMPLETED,
                    jobset::ALL_JOBS_COMPLETED_MESSAGE,
                );
                set(s, &c.now, "Complete", true, reason, message);
                node(s, Counts::succeeded(1));
            })
        }
        Step::Failed(reason) => {
            let reason = if reason.is_empty() {
                jobset::FAILED_JOBS
            } else {
                reason
            };
            d.finish_pods(&now, true)?;
            d.write_status(&now, |s, c| {
                set(
                    s,
                    &c.now,
                    "Failed",
                    true,
                    reason,
                    &failure_message(reason, c),
                );
                node(s, Counts::failed(1));
            })
        }
        Step::Suspended => {
            d.patch_spec(json!({ "spec": { "suspend": true } }))?;
            d.write_status(&now, |s, c| {
                set(
                    s,
                    &c.now,
                    SUSPENDED,
                    true,
                    "Suspended",
                    "TrainJob is suspended",
                );
                node(s, Counts::suspended(1));
            })
        }
        Step::Resumed => {
            d.patch_spec(json!({ "spec": { "suspend": false } }))?;
            d.write_status(&now, |s, c| {
                if is_true(s, SUSPENDED) {
                    set(
                        s,
                        &c.now,
                        SUSPENDED,
                        false,
                        "Resumed",
                        "TrainJob is resumed",
                    );
                }
                node(s, Counts::active(1));
            })
        }
        Step::Stopped => bail!("only RayJobs can be stopped, not a TrainJob"),
    }
}
