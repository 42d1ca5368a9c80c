//! `jobset.x-k8s.io/v1alpha2 JobSet` status as the JobSet controller (v0.12) writes it.
//!
//! A JobSet has no phase and no Running condition. Its state is spread over:
//!
//! - `conditions[]` (`metav1.Condition`): `Completed`, `Failed`, `Suspended`, `RestartingJobSet`,
//!   `StartupPolicyInProgress`, `StartupPolicyCompleted`, written by JobSet's own
//!   `updateCondition`: a type is **appended only when it first becomes True** (a False one that
//!   was never True is not recorded), later status flips replace the entry in place with a new
//!   `lastTransitionTime`, reason/message-only changes keep the old time, and a True
//!   `StartupPolicyInProgress`/`StartupPolicyCompleted` turns the other one False (status only,
//!   its reason and time kept);
//! - `replicatedJobsStatus[]`: per replicated job, counts of child **Jobs** (not pods) —
//!   `ready`, `succeeded`, `failed`, `active` (Jobs with a pending or running pod),
//!   `suspended`; running shows only as `active`/`ready` here;
//! - `restarts` (always present), `restartsCountTowardsMax`, and `terminalState`
//!   (`Completed` | `Failed`) once finished.
//!
//! The driven JobSet has two replicated jobs of single-pod Jobs: `leader` (1 replica) and
//! `workers` (one per worker). A restart (`failurePolicy.maxRestarts`) is written as
//! `RestartingJobSet=True/DefaultFailurePolicy` with `restarts`+1, then, once the recreated
//! Jobs are all ready, `RestartingJobSet=False/JobsReady`; finishing or suspending turns a
//! recorded `RestartingJobSet` False with reason `JobSetCompleted`/`JobSetFailed`/
//! `JobSetSuspended`.
//!
//! With `startupPolicy: InOrder` the controller starts one replicated job at a time and says
//! so: `StartupPolicyInProgress=True` while the leader starts, `StartupPolicyCompleted=True`
//! once all have. A restart recreates the Jobs in order again: the controller marks the
//! restart and, on its next reconcile — usually within the same second — sets
//! `StartupPolicyInProgress=True` again (`StartupPolicyCompleted` turns False). The driver
//! writes both in one write so the pair always shares its `lastTransitionTime`, whatever the
//! [`Pace`](super::Pace): two conditions flipping in the same second is the case a consumer
//! ordering transitions by time must survive.

use anyhow::bail;
use serde_json::{Value, json};

use super::conditions::{Condition, edit_list, is_true};
use super::play::Step;
use super::{Ctx, JobDriver};

const COMPLETED: &str = "Completed";
const FAILED: &str = "Failed";
const SUSPENDED: &str = "Suspended";
const RESTARTING: &str = "RestartingJobSet";
const STARTUP_IN_PROGRESS: &str = "StartupPolicyInProgress";
const STARTUP_COMPLETED: &str = "StartupPolicyCompleted";

/// `Completed` reason and message; a TrainJob's `Complete` copies them.
pub(crate) const ALL_JOBS_COMPLETED: &str = "AllJobsCompleted";
pub(crate) const ALL_JOBS_COMPLETED_MESSAGE: &str = "jobset completed successfully";
/// The default failure reason (no failure policy, or a job failed outright).
pub(crate) const FAILED_JOBS: &str = "FailedJobs";

/// Child-Job counts of one replicated job: an entry of `replicatedJobsStatus[]`, which a
/// TrainJob copies into its `jobsStatus[]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub ready: u32,
    pub succeeded: u32,
    pub failed: u32,
    pub active: u32,
    pub suspended: u32,
}

impl Counts {
    /// `n` Jobs whose pods exist but are not all ready yet.
    pub fn active(n: u32) -> Counts {
        Counts {
            active: n,
            ..Counts::default()
        }
    }

    /// `n` Jobs with every pod ready.
    pub fn ready(n: u32) -> Counts {
        Counts {
            active: n,
            ready: n,
            ..Counts::default()
        }
    }

    pub fn succeeded(n: u32) -> Counts {
        Counts {
            succeeded: n,
            ..Counts::default()
        }
    }

    pub fn failed(n: u32) -> Counts {
        Counts {
            failed: n,
            ..Counts::default()
        }
    }

    pub fn suspended(n: u32) -> Counts {
        Counts {
            suspended: n,
            ..Counts::default()
        }
    }

    /// No Jobs of the current attempt (deleted, or not created yet).
    pub fn none() -> Counts {
        Counts::default()
    }

    /// The status entry, every count present as the controller writes them.
    pub fn entry(self, name: &str) -> Value {
        json!({
            "name": name,
            "ready": self.ready,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "active": self.active,
            "suspended": self.suspended,
        })
    }
}

/// The message of a failure reason, naming the first failed Job as the controller does.
/// `None` for reasons the JobSet controller does not write.
pub(crate) fn failure_message(reason: &str, first_failed_job: &str) -> Option<String> {
    let base = match reason {
        FAILED_JOBS => "jobset failed due to one or more job failures",
        "ReachedMaxRestarts" => "jobset failed due to reaching max number of restarts",
        "FailJobSetFailurePolicyAction" => "applying FailJobSet failure policy action",
        _ => return None,
    };
    Some(format!("{base} (first failed job: {first_failed_job})"))
}

/// JobSet's `updateCondition` (see the module docs). Returns whether anything changed.
pub(crate) fn update_condition(status: &mut Value, new: &Condition, now: &str) -> bool {
    let exclusive = |a: &Value, b: &str| {
        (a["type"] == STARTUP_IN_PROGRESS && b == STARTUP_COMPLETED)
            || (a["type"] == STARTUP_COMPLETED && b == STARTUP_IN_PROGRESS)
    };
    edit_list(status, |list| {
        let mut found = false;
        let mut changed = false;
        for current in list.iter_mut() {
            if current["type"] == new.kind {
                if current["status"] != new.status() {
                    *current = new.entry(now);
                    changed = true;
                } else if current["reason"] != new.reason || current["message"] != new.message {
                    let since = current["lastTransitionTime"].clone();
                    *current = new.entry(now);
                    current["lastTransitionTime"] = since;
                    changed = true;
                }
                found = true;
            } else if new.value && exclusive(current, new.kind) && current["status"] == "True" {
                current["status"] = json!("False");
                changed = true;
            }
        }
        if !found && new.value {
            list.push(new.entry(now));
            changed = true;
        }
        changed
    })
}

fn set(status: &mut Value, now: &str, kind: &str, value: bool, reason: &str, message: &str) {
    let condition = Condition {
        kind,
        value,
        reason,
        message,
    };
    update_condition(status, &condition, now);
}

/// `RestartingJobSet=False` — recorded only if a restart ever was.
fn restarting_done(status: &mut Value, now: &str, reason: &str, message: &str) {
    set(status, now, RESTARTING, false, reason, message);
}

fn startup_in_progress(status: &mut Value, now: &str) {
    let message = "in order startup policy is in progress";
    let reason = "InOrderStartupPolicyInProgress";
    set(status, now, STARTUP_IN_PROGRESS, true, reason, message);
}

fn startup_completed(status: &mut Value, now: &str) {
    let message = "in order startup policy has completed";
    let reason = "InOrderStartupPolicyCompleted";
    set(status, now, STARTUP_COMPLETED, true, reason, message);
}

/// `replicatedJobsStatus` for the leader (1 Job) and the workers (one Job each), and
/// `restarts`, which is always present.
fn jobs(status: &mut Value, leader: Counts, workers: Counts) {
    status["replicatedJobsStatus"] = json!([leader.entry("leader"), workers.entry("workers")]);
    if status.get("restarts").is_none_or(Value::is_null) {
        status["restarts"] = json!(0);
    }
}

/// Every Job running and ready; a restart, if one was under way, is over.
fn all_ready(status: &mut Value, ctx: &Ctx) {
    jobs(status, Counts::ready(1), Counts::ready(ctx.workers));
    let message = "all jobs are ready";
    restarting_done(status, &ctx.now, "JobsReady", message);
}

fn bump(status: &mut Value, field: &str) {
    let next = status[field].as_u64().unwrap_or(0) + 1;
    status[field] = json!(next);
}

/// Plays a step (see the module table in `lifecycle`).
pub(super) fn play(d: &mut JobDriver, step: Step, now: String) -> anyhow::Result<String> {
    let in_order = d.in_order;
    let first_failed = format!("{}-leader-0", d.name);
    match step {
        Step::CreatedSuspended => d.write_status(&now, |s, c| {
            jobs(s, Counts::suspended(1), Counts::suspended(c.workers));
            set(
                s,
                &c.now,
                SUSPENDED,
                true,
                "SuspendedJobs",
                "jobset is suspended",
            );
        }),
        Step::Pending => d.write_status(&now, |s, c| {
            if in_order {
                jobs(s, Counts::active(1), Counts::none());
                startup_in_progress(s, &c.now);
            } else {
                jobs(s, Counts::active(1), Counts::active(c.workers));
            }
        }),
        Step::Running => {
            let started = is_true(&d.current_status()?, STARTUP_COMPLETED);
            if in_order && !started {
                d.write_status(&now, |s, c| {
                    jobs(s, Counts::ready(1), Counts::active(c.workers));
                    startup_in_progress(s, &c.now);
                })?;
                let now = d.tick();
                return d.write_status(&now, |s, c| {
                    all_ready(s, c);
                    startup_completed(s, &c.now);
                });
            }
            d.write_status(&now, all_ready)
        }
        Step::Restarting => {
            d.write_status(&now, |s, c| {
                bump(s, "restarts");
                bump(s, "restartsCountTowardsMax");
                let message = format!(
                    "applying RestartJobSet failure policy action (first failed job: {first_failed})"
                );
                set(s, &c.now, RESTARTING, true, "DefaultFailurePolicy", &message);
                if in_order {
                    startup_in_progress(s, &c.now);
                }
                jobs(s, Counts::failed(1), Counts::none());
            })?;
            let now = d.tick();
            d.write_status(&now, |s, c| {
                all_ready(s, c);
                if in_order {
                    startup_completed(s, &c.now);
                }
            })
        }
        Step::Succeeded => {
            d.finish_pods(&now, false)?;
            d.write_status(&now, |s, c| {
                set(
                    s,
                    &c.now,
                    COMPLETED,
                    true,
                    ALL_JOBS_COMPLETED,
                    ALL_JOBS_COMPLETED_MESSAGE,
                );
                let message = ALL_JOBS_COMPLETED_MESSAGE;
                restarting_done(s, &c.now, "JobSetCompleted", message);
                s["terminalState"] = json!(COMPLETED);
                jobs(s, Counts::succeeded(1), Counts::succeeded(c.workers));
            })
        }
        Step::Failed(reason) => {
            let reason = if reason.is_empty() {
                FAILED_JOBS
            } else {
                reason
            };
            let message = failure_message(reason, &first_failed)
                .unwrap_or_else(|| format!("jobset failed: {reason}"));
            d.finish_pods(&now, true)?;
            d.write_status(&now, |s, c| {
                set(s, &c.now, FAILED, true, reason, &message);
                restarting_done(s, &c.now, "JobSetFailed", "jobset failed");
                s["terminalState"] = json!(FAILED);
                jobs(s, Counts::failed(1), Counts::none());
            })
        }
        Step::Suspended => {
            d.patch_spec(json!({ "spec": { "suspend": true } }))?;
            d.write_status(&now, |s, c| {
                let message = "jobset is suspended";
                set(s, &c.now, SUSPENDED, true, "SuspendedJobs", message);
                restarting_done(s, &c.now, "JobSetSuspended", message);
                jobs(s, Counts::suspended(1), Counts::suspended(c.workers));
            })
        }
        Step::Resumed => {
            d.patch_spec(json!({ "spec": { "suspend": false } }))?;
            let resume = |s: &mut Value, c: &Ctx| {
                set(
                    s,
                    &c.now,
                    SUSPENDED,
                    false,
                    "ResumeJobs",
                    "jobset is resumed",
                );
                jobs(s, Counts::active(1), Counts::active(c.workers));
            };
            if !in_order {
                return d.write_status(&now, resume);
            }
            // In order, the leader's Jobs are resumed first, and the JobSet counts as resumed
            // only once the rest follow.
            d.write_status(&now, |s, c| {
                startup_in_progress(s, &c.now);
                jobs(s, Counts::active(1), Counts::suspended(c.workers));
            })?;
            let now = d.tick();
            d.write_status(&now, resume)
        }
        Step::Stopped => bail!("only RayJobs can be stopped, not a JobSet"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond<'a>(kind: &'a str, value: bool, reason: &'a str) -> Condition<'a> {
        Condition {
            kind,
            value,
            reason,
            message: "m",
        }
    }

    fn types(s: &Value) -> Vec<(String, String)> {
        s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["type"].as_str().unwrap().to_string(),
                    c["status"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn appended_only_when_first_true() {
        let mut s = json!({});
        assert!(!update_condition(
            &mut s,
            &cond(RESTARTING, false, "JobsReady"),
            "t1"
        ));
        assert!(s["conditions"].as_array().unwrap().is_empty());
        assert!(update_condition(
            &mut s,
            &cond(RESTARTING, true, "DefaultFailurePolicy"),
            "t2"
        ));
        assert!(!update_condition(
            &mut s,
            &cond(RESTARTING, true, "DefaultFailurePolicy"),
            "t3"
        ));
        assert!(update_condition(
            &mut s,
            &cond(RESTARTING, false, "JobsReady"),
            "t4"
        ));
        assert_eq!(s["conditions"][0]["lastTransitionTime"], "t4");
        // Reason-only change: the time stays.
        assert!(update_condition(
            &mut s,
            &cond(RESTARTING, false, "JobSetCompleted"),
            "t5"
        ));
        assert_eq!(s["conditions"][0]["reason"], "JobSetCompleted");
        assert_eq!(s["conditions"][0]["lastTransitionTime"], "t4");
    }

    #[test]
    fn startup_conditions_exclude_each_other() {
        let mut s = json!({});
        startup_in_progress(&mut s, "t1");
        startup_completed(&mut s, "t2");
        assert_eq!(
            types(&s),
            [
                (STARTUP_IN_PROGRESS.into(), "False".into()),
                (STARTUP_COMPLETED.into(), "True".into())
            ]
        );
        // Turned False by exclusion: status only, reason and time kept.
        assert_eq!(s["conditions"][0]["lastTransitionTime"], "t1");
        assert_eq!(
            s["conditions"][0]["reason"],
            "InOrderStartupPolicyInProgress"
        );
        startup_in_progress(&mut s, "t3");
        assert_eq!(
            types(&s),
            [
                (STARTUP_IN_PROGRESS.into(), "True".into()),
                (STARTUP_COMPLETED.into(), "False".into())
            ]
        );
        assert_eq!(s["conditions"][0]["lastTransitionTime"], "t3");
        assert_eq!(s["conditions"][1]["lastTransitionTime"], "t2");
    }
}
