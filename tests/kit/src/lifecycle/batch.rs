//! `batch/v1 Job` status as the job controller (Kubernetes 1.33) writes it.
//!
//! Counts (`active`, `ready`, `succeeded`, `failed`, `terminating`), `startTime`,
//! `completionTime`, `uncountedTerminatedPods`, and `conditions` of
//! `{type,status,reason,message,lastProbeTime,lastTransitionTime}`. Finishing takes two writes:
//! the interim condition (`SuccessCriteriaMet` / `FailureTarget`) first, then the terminal one
//! (`Complete` / `Failed`) once the pods are gone, as in the real controller.

use serde_json::{Value, json};

use super::Ctx;

/// Reason and message of a successful finish.
const COMPLETE_REASON: &str = "CompletionsReached";
const COMPLETE_MESSAGE: &str = "Reached expected number of succeeded pods";

/// Default failure reason.
pub(crate) const DEFAULT_FAILURE: &str = "BackoffLimitExceeded";

/// The controller's message for a failure reason.
pub(crate) fn failure_message(reason: &str) -> String {
    match reason {
        "BackoffLimitExceeded" => "Job has reached the specified backoff limit".to_string(),
        "DeadlineExceeded" => "Job was active longer than specified deadline".to_string(),
        "PodFailurePolicy" => {
            "Container trainer for pod failed with exit code 1 matching FailJob rule at index 0"
                .to_string()
        }
        other => format!("Job failed: {other}"),
    }
}

/// Sets (or updates) a condition; `lastTransitionTime` only moves when `status` changes.
fn set_condition(
    status: &mut Value,
    kind: &str,
    value: bool,
    reason: &str,
    message: &str,
    now: &str,
) {
    let value = if value { "True" } else { "False" };
    let entry = json!({
        "type": kind, "status": value, "reason": reason, "message": message,
        "lastProbeTime": now, "lastTransitionTime": now,
    });
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let Some(conditions) = status["conditions"].as_array_mut() else {
        return;
    };
    match conditions.iter_mut().find(|c| c["type"] == kind) {
        Some(existing) => {
            let transition = if existing["status"] == value {
                existing["lastTransitionTime"].clone()
            } else {
                json!(now)
            };
            *existing = entry;
            existing["lastTransitionTime"] = transition;
        }
        None => conditions.push(entry),
    }
}

/// Whether a condition of this type is `True`.
pub(crate) fn has_condition(status: &Value, kind: &str) -> bool {
    status["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == kind && c["status"] == "True")
    })
}

fn counts(status: &mut Value, active: u32, ready: u32) {
    if active > 0 {
        status["active"] = json!(active);
    } else if let Some(map) = status.as_object_mut() {
        map.remove("active");
    }
    status["ready"] = json!(ready);
    status["terminating"] = json!(0);
    status["uncountedTerminatedPods"] = json!({});
}

/// The controller has seen the job; no pod is counted yet.
pub(crate) fn pending(status: &mut Value, _ctx: &Ctx) {
    counts(status, 0, 0);
}

/// Every pod active and ready; `startTime` set on first start.
pub(crate) fn running(status: &mut Value, ctx: &Ctx) {
    counts(status, ctx.total, ctx.total);
    if status.get("startTime").is_none_or(Value::is_null) {
        status["startTime"] = json!(ctx.now);
    }
}

/// A container restarted in place (`restartPolicy: OnFailure`): one pod active but not ready.
pub(crate) fn restarting(status: &mut Value, ctx: &Ctx) {
    counts(status, ctx.total, ctx.total.saturating_sub(1));
    if status.get("startTime").is_none_or(Value::is_null) {
        status["startTime"] = json!(ctx.now);
    }
}

/// All pods succeeded: `SuccessCriteriaMet`, pods no longer active.
pub(crate) fn completing(status: &mut Value, ctx: &Ctx) {
    counts(status, 0, 0);
    status["succeeded"] = json!(ctx.total);
    set_condition(
        status,
        "SuccessCriteriaMet",
        true,
        COMPLETE_REASON,
        COMPLETE_MESSAGE,
        &ctx.now,
    );
}

/// Terminal success: `Complete` and `completionTime`.
pub(crate) fn complete(status: &mut Value, ctx: &Ctx) {
    set_condition(
        status,
        "Complete",
        true,
        COMPLETE_REASON,
        COMPLETE_MESSAGE,
        &ctx.now,
    );
    status["completionTime"] = json!(ctx.now);
}

/// The job will fail: `FailureTarget`, one more failed pod, nothing active.
pub(crate) fn failure_target(status: &mut Value, ctx: &Ctx, reason: &str) {
    counts(status, 0, 0);
    let failed = status["failed"].as_u64().unwrap_or(0) + 1;
    status["failed"] = json!(failed);
    set_condition(
        status,
        "FailureTarget",
        true,
        reason,
        &failure_message(reason),
        &ctx.now,
    );
}

/// Terminal failure: `Failed` with the same reason.
pub(crate) fn failed(status: &mut Value, ctx: &Ctx, reason: &str) {
    set_condition(
        status,
        "Failed",
        true,
        reason,
        &failure_message(reason),
        &ctx.now,
    );
}

/// `spec.suspend=true` took effect: `Suspended`, pods gone, `startTime` cleared.
pub(crate) fn suspended(status: &mut Value, ctx: &Ctx) {
    counts(status, 0, 0);
    if let Some(map) = status.as_object_mut() {
        map.remove("startTime");
    }
    set_condition(
        status,
        "Suspended",
        true,
        "JobSuspended",
        "Job suspended",
        &ctx.now,
    );
}

/// `spec.suspend=false` took effect: `Suspended=False`, a new `startTime`.
pub(crate) fn resumed(status: &mut Value, ctx: &Ctx) {
    set_condition(
        status,
        "Suspended",
        false,
        "JobResumed",
        "Job resumed",
        &ctx.now,
    );
    status["startTime"] = json!(ctx.now);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(now: &str) -> Ctx<'static> {
        Ctx {
            kind: "Job",
            namespace: "ns",
            name: "j",
            now: now.to_string(),
            workers: 2,
            total: 2,
        }
    }

    #[test]
    fn success_path() {
        let mut s = json!({});
        running(&mut s, &ctx("t1"));
        assert_eq!(s["active"], 2);
        assert_eq!(s["startTime"], "t1");
        completing(&mut s, &ctx("t2"));
        assert!(s.get("active").is_none());
        assert!(has_condition(&s, "SuccessCriteriaMet"));
        assert!(!has_condition(&s, "Complete"));
        complete(&mut s, &ctx("t3"));
        assert!(has_condition(&s, "Complete"));
        assert_eq!(s["completionTime"], "t3");
        assert_eq!(s["conditions"][0]["lastTransitionTime"], "t2");
        assert_eq!(s["conditions"][1]["lastTransitionTime"], "t3");
    }

    #[test]
    fn suspend_and_resume_keep_one_condition() {
        let mut s = json!({});
        suspended(&mut s, &ctx("t1"));
        resumed(&mut s, &ctx("t2"));
        let conds = s["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0]["status"], "False");
        assert_eq!(conds[0]["lastTransitionTime"], "t2");
    }
}
